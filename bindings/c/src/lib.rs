//! The C surface: `include/lock.h` (generated from this module by cbindgen
//! in `build.rs`) over `liblock`.
//!
//! Modelled on rustls-ffi. The rules, also in the header and docs/c.md:
//! - Opaque handles (`dokebi_lock_provider`, `_backend`, `_lease`, `_pending`,
//!   `_error`, `_inspection`, `_forced_release`); each has a `_free` that
//!   accepts NULL.
//! - Acting functions return a [`dokebi_lock_status`] (`DOKEBI_LOCK_OK` = 0,
//!   else the error code). Their out-parameters are written only on success;
//!   on failure a new error handle goes to `out_error` when it is not NULL.
//! - Getters return their value directly; given a NULL handle they answer
//!   NULL, false or 0. Returned strings belong to the handle.
//! - A NULL handle or out-parameter is `DOKEBI_LOCK_INVALID_ARGUMENT`; keys
//!   are pointer + length and invalid UTF-8 or a NUL byte is `DOKEBI_LOCK_INVALID_KEY`.
//! - No panic crosses the boundary ([`panic`]); a caught one is
//!   `DOKEBI_LOCK_PANIC`.
//! - Any thread may call any function, concurrently, except that a handle is
//!   freed only once no other thread uses it. A child of `fork()` cannot use
//!   the handles made before it ([`fork`]).

// The C names are the API (`dokebi_lock_lease`, `DOKEBI_LOCK_OK`).
#![allow(non_camel_case_types)]

pub mod args;
pub mod backend;
pub mod completion;
pub mod error;
pub mod force_release;
pub mod fork;
pub mod inspect;
pub mod kinds;
pub mod lease;
pub mod panic;
pub mod pending;
pub mod policy;
pub mod provider;
pub mod section;
pub mod status;
pub mod telemetry;

/// The library version, e.g. `"0.4.1"`; static, never freed.
#[no_mangle]
pub extern "C" fn dokebi_lock_version() -> *const std::ffi::c_char {
    panic::boundary(|| concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast())
}

#[cfg(test)]
mod tests {
    /// The header in the source tree is what this build generates; scripts/test-c
    /// also checks it against the committed one (`git diff`).
    #[test]
    fn the_header_in_the_tree_matches_the_generated_one() {
        let generated = include_str!(concat!(env!("OUT_DIR"), "/lock.h"));
        let in_tree = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../include/lock.h")).unwrap();
        assert!(in_tree == generated, "include/lock.h is stale: build once and commit it");
    }
}
