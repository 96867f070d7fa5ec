//! What a policy backend says, for C: per key, its rule and last
//! acquisition; per member, its counts. The core decides and counts
//! (`dokebi_lock::policy::Router`); this module only converts.

use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use super::args::{self, Out};
use super::backend::dokebi_lock_backend;
use super::error::{c_text, dokebi_lock_error};
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use super::telemetry::driver_name;
use dokebi_lock::error::{ErrorCode, LockError, Result};
use dokebi_lock::policy::{OnUnavailable, PolicyBackend, Router, Tier};
use dokebi_lock::provider::Backend;

/// What a policy backend says of one key (`dokebi_lock_policy_get_key_status`).
/// Its strings are static or belong to the backend handle, and live as long
/// as it: a policy's rules and members are fixed when its provider opens.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dokebi_lock_policy_key_status {
    /// The rule the key falls under: `"rules[<i>]"` or `"default"`.
    pub rule: *const c_char,
    /// Its index: `<i>` of `rules[<i>]`; the default rule's is the number
    /// of `rules` (it comes after them).
    pub rule_index: usize,
    /// The rule's pattern, `"prefix:<text>"` or `"glob:<text>"`; NULL for
    /// the default rule.
    pub pattern: *const c_char,
    /// The member the rule prefers (its first backend).
    pub preferred: *const c_char,
    /// The rule's minimum tier: `"process"`, `"host"` or `"shared"` (static).
    pub min_tier: *const c_char,
    /// `"failClosed"` or `"fallBack"` (static): what the rule does while its
    /// preferred member cannot serve.
    pub on_unavailable: *const c_char,
    /// The key was acquired through this policy in this process and is
    /// still remembered (the last 10,000 keys are); the `last_` fields
    /// below say how, else they are NULL, false and -1.
    pub has_last: bool,
    /// The member that served the last acquisition.
    pub last_backend: *const c_char,
    /// That member's tier (static).
    pub last_tier: *const c_char,
    /// Whether that lease carried a fence (comparable only with fences of
    /// the same member).
    pub last_fenced: bool,
    /// When it was granted, in ms since the Unix epoch.
    pub last_unix_ms: i64,
}

/// One member of a policy backend (`dokebi_lock_policy_get_member_status`):
/// counts since the provider opened, never keys. `backend` belongs to the
/// backend handle and lives as long as it; `driver` and `tier` are static.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dokebi_lock_policy_member_status {
    /// The member's backend name.
    pub backend: *const c_char,
    /// Its driver: `"local"`, `"file"`, `"redis"`, `"postgres"`, `"mysql"`.
    pub driver: *const c_char,
    /// Its tier: `"process"`, `"host"` or `"shared"`.
    pub tier: *const c_char,
    /// Acquires it served.
    pub served: u64,
    /// Of those, acquires whose rule prefers another member.
    pub fallbacks: u64,
    /// Acquires refused with `DOKEBI_LOCK_NO_ELIGIBLE_BACKEND` whose rule
    /// prefers it (the fail-closed refusals, and the fallbacks that found
    /// no member either).
    pub refusals: u64,
    /// It was found unavailable and is passed over until its
    /// `reprobeCooldownMs` ends.
    pub skipped: bool,
}

/// A policy's member names and rule descriptions as C strings, made once
/// per backend handle, in the router's member and rule order.
#[derive(Debug)]
pub(crate) struct PolicyNames {
    members: Vec<CString>,
    /// Each rule's label and pattern.
    rules: Vec<(CString, Option<CString>)>,
}

impl PolicyNames {
    fn of(router: &Router) -> PolicyNames {
        PolicyNames {
            members: router.members().iter().map(|member| c_text(&member.name)).collect(),
            rules: router.rules().iter().map(|rule| (c_text(&rule.label), rule.pattern.as_ref().map(|p| c_text(&p.describe())))).collect(),
        }
    }
}

/// The policy behind a live backend handle, and its names; `INVALID_ARGUMENT`
/// for NULL and for a backend of another driver.
///
/// # Safety
/// `backend` is NULL or a live backend handle, for `'a`.
unsafe fn policy<'a>(backend: *const dokebi_lock_backend) -> Result<(&'a PolicyBackend, &'a PolicyNames)> {
    // SAFETY: as promised by our caller (# Safety).
    let handle = unsafe { dokebi_lock_backend::usable(backend) }?;
    let Backend::Policy(policy) = &handle.backend else {
        return Err(LockError::new(ErrorCode::InvalidArgument, "backend is not a policy backend (driver: policy)"));
    };
    Ok((policy, handle.policy_names.get_or_init(|| PolicyNames::of(policy.router()))))
}

/// A tier's name, static and NUL-terminated.
pub(crate) fn tier_name(tier: Tier) -> *const c_char {
    let name: &'static CStr = match tier {
        Tier::Process => c"process",
        Tier::Host => c"host",
        Tier::Shared => c"shared",
    };
    name.as_ptr()
}

fn on_unavailable_name(choice: OnUnavailable) -> *const c_char {
    let name: &'static CStr = match choice {
        OnUnavailable::FailClosed => c"failClosed",
        OnUnavailable::FallBack => c"fallBack",
    };
    name.as_ptr()
}

/// Writes what the policy `backend` says of `key` (`key_len` bytes of
/// UTF-8) to `*out_status`: the rule it falls under and the key's last
/// acquisition through this policy in this process. `INVALID_ARGUMENT` for
/// a NULL backend or out-parameter and for a backend of another driver;
/// `INVALID_KEY` for an empty key, invalid UTF-8 or a NUL byte (the
/// message never quotes the key). Acquires nothing, waits for nothing.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `key` is NULL or points to
/// `key_len` readable bytes; `out_status` is writable; `out_error` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_policy_get_key_status(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    out_status: *mut dokebi_lock_policy_key_status,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let (policy, names) = unsafe { policy(backend) }?;
        let out = Out::new(out_status, "out_status")?;
        // SAFETY: the caller promised `key` is NULL or points to `key_len` readable bytes (# Safety).
        let key = unsafe { args::key(key, key_len) }?;
        let router = policy.router();
        let rule_index = router.rule_of(key);
        let rule = &router.rules()[rule_index];
        let (label, pattern) = &names.rules[rule_index];
        let last = policy.key_status(key).last;
        let last_member = last.as_ref().and_then(|last| router.members().iter().position(|m| Arc::ptr_eq(m, &last.member)));
        out.write(dokebi_lock_policy_key_status {
            rule: label.as_ptr(),
            rule_index,
            pattern: pattern.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
            preferred: names.members[rule.members[0]].as_ptr(),
            min_tier: tier_name(rule.min_tier),
            on_unavailable: on_unavailable_name(rule.on_unavailable),
            has_last: last.is_some(),
            last_backend: last_member.map_or(std::ptr::null(), |m| names.members[m].as_ptr()),
            last_tier: last.as_ref().map_or(std::ptr::null(), |last| tier_name(last.member.tier)),
            last_fenced: last.as_ref().is_some_and(|last| last.fenced),
            last_unix_ms: last.as_ref().map_or(-1, |last| last.at.duration_since(UNIX_EPOCH).map_or(-1, |d| d.as_millis() as i64)),
        });
        Ok(())
    })
}

/// How many members the policy `backend` has, each a backend that one of
/// its rules names; 0 for NULL and for a backend of another driver.
///
/// # Safety
/// `backend` is NULL or a live backend handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_policy_member_count(backend: *const dokebi_lock_backend) -> usize {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    boundary(|| unsafe { policy(backend) }.map_or(0, |(policy, _)| policy.router().members().len()))
}

/// Writes member `index` (below `dokebi_lock_policy_member_count`; members
/// are in the order the rules first name them) of the policy `backend` to
/// `*out_status`: what it served, its fallbacks and refusals, and whether it
/// is skipped now. `INVALID_ARGUMENT` for a NULL backend or out-parameter,
/// a backend of another driver and an index out of range.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `out_status` is writable;
/// `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_policy_get_member_status(
    backend: *const dokebi_lock_backend,
    index: usize,
    out_status: *mut dokebi_lock_policy_member_status,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let (policy, names) = unsafe { policy(backend) }?;
        let out = Out::new(out_status, "out_status")?;
        let members = policy.members();
        let Some(status) = members.get(index) else {
            return Err(LockError::new(
                ErrorCode::InvalidArgument,
                format!("index {index} is out of range: the policy has {} members", members.len()),
            ));
        };
        out.write(dokebi_lock_policy_member_status {
            backend: names.members[index].as_ptr(),
            driver: driver_name(status.member.driver),
            tier: tier_name(status.member.tier),
            served: status.counts.served,
            fallbacks: status.counts.fallbacks,
            refusals: status.counts.refusals,
            skipped: status.skipped,
        });
        Ok(())
    })
}
