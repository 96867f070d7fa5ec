//! The `policy` driver: one backend over several backends of the same
//! provider, chosen per key by rules (see `docs/policy.md`).
//!
//! A key falls under the first rule whose prefix or glob matches it (else
//! the default rule), which lists the member backends that may serve it,
//! preferred first, the lowest [`Tier`] that may serve it, and whether it
//! fails closed or falls back while the preferred member is unavailable.
//! Only unavailability moves an acquire to the next member, and only
//! before a grant; a lease stays on its member for life.
//!
//! `router.rs` decides (the same for every surface), `backend.rs` drives
//! the decisions over the core's member backends.

mod backend;
mod pattern;
mod router;
mod tier;

pub use backend::{forced_release_of, inspection_choice, Found, PolicyBackend, PolicyLease};
pub use pattern::Pattern;
pub use router::{
    Acquisition, Attempt, KeyStatus, MemberCounts, MemberInfo, MemberStatus, Next, Placement, Places, Router, Rule, Step, PAUSE,
    REMEMBERED_KEYS,
};
pub use tier::{OnUnavailable, Tier};
