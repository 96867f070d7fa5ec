//! Tiers: what a backend can promise about who else may hold its keys,
//! derived from its driver, never declared by hand.

use crate::options::BackendOptions;

/// What a backend's grant excludes, lowest first: a rule's `minTier` is
/// the lowest a key of it may be served by.
///
/// Settings do not raise a backend within `shared`: `replicaAcks` keeps a
/// redis grant across a failover and synchronous standbys keep a postgres
/// one, but neither makes a partitioned old primary refuse to grant (that
/// is the server's `min-replicas-to-write`, or a standby list the driver
/// cannot see), so a higher tier would promise what the settings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Leases shared by the callers of one process (`local`).
    Process,
    /// Leases shared by the processes of one host (`file`).
    Host,
    /// Leases shared by every process that reaches the store (`redis`,
    /// `postgres`).
    Shared,
}

impl Tier {
    /// The name options and reports use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Process => "process",
            Tier::Host => "host",
            Tier::Shared => "shared",
        }
    }

    /// Parses the name options use (one of `declaration::TIERS`).
    pub fn from_name(name: &str) -> Option<Tier> {
        [Tier::Process, Tier::Host, Tier::Shared].into_iter().find(|tier| tier.as_str() == name)
    }

    /// The tier of a backend of these options; `None` for the drivers a
    /// policy cannot compose (another policy, an app driver the core does
    /// not know the promises of).
    pub fn of(backend: &BackendOptions) -> Option<Tier> {
        match backend {
            BackendOptions::Local(_) => Some(Tier::Process),
            BackendOptions::File(_) => Some(Tier::Host),
            BackendOptions::Redis(_) | BackendOptions::Postgres(_) | BackendOptions::Mysql(_) => Some(Tier::Shared),
            BackendOptions::Policy(_) | BackendOptions::App { .. } => None,
        }
    }
}

/// What a rule does when its preferred backend cannot serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnUnavailable {
    /// Only the rule's first backend serves; while it cannot, acquires are
    /// `NO_ELIGIBLE_BACKEND`.
    FailClosed,
    /// The next listed backend serves while the earlier ones cannot.
    FallBack,
}

impl OnUnavailable {
    /// The name options and reports use.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnUnavailable::FailClosed => "failClosed",
            OnUnavailable::FallBack => "fallBack",
        }
    }

    /// Parses the name options use.
    pub fn from_name(name: &str) -> Option<OnUnavailable> {
        [OnUnavailable::FailClosed, OnUnavailable::FallBack].into_iter().find(|choice| choice.as_str() == name)
    }
}
