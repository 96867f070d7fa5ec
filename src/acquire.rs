//! Per-call options of an acquire, shared by every driver: how long to
//! wait, and what kind of hold is asked for (exclusive, shared, or some
//! units of a counted key).

use std::time::Duration;

use crate::abort::AbortSignal;
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;

/// How a lease holds its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// Alone: no other lease holds the key meanwhile (with a `limit`, at
    /// most `limit` units are held).
    #[default]
    Exclusive,
    /// Together with every other shared lease of the key, and with no
    /// exclusive one (a reader/writer lock: readers shared, writers
    /// exclusive).
    Shared,
}

impl LockMode {
    /// The name the options use: `"exclusive"` or `"shared"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }
}

/// Per-call options of an acquire.
#[derive(Clone, Default)]
pub struct AcquireOptions {
    /// How long to wait for a held key; `None` takes the backend's
    /// `waitTimeoutMs`, zero tries once and fails with `LOCK_BUSY`.
    pub wait_timeout: Option<Duration>,
    /// Ends the wait with `ABORTED`; does nothing once the lease is granted.
    pub signal: Option<AbortSignal>,
    /// Exclusive (the default) or shared.
    pub mode: LockMode,
    /// A counted lock: at most this many units of the key are held at once.
    /// `None` is 1, a plain lock. Every caller of a key gives the same
    /// limit; another one while the key is held or waited for is
    /// `INVALID_ARGUMENT`. Does not combine with [`LockMode::Shared`].
    pub limit: Option<u32>,
    /// The units of a counted key this lease holds (`None` is 1); at most
    /// `limit`.
    pub weight: Option<u32>,
    /// Who holds this lease, as `inspect` and a `WAIT_TIMEOUT` or
    /// `LOCK_BUSY` of another acquire name it (a job, a request, a tenant:
    /// never anything secret, since anyone who can read the store reads
    /// it). `None` takes the provider's `holder`.
    pub holder: Option<HolderLabel>,
}

/// What an acquire asks of each of its keys, checked: the mode, the key's
/// limit and the units held. A plain acquire is exclusive with limit 1 and
/// weight 1; a shared one has limit 1 too, so readers and writers of a key
/// agree on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockKind {
    /// Exclusive or shared.
    pub mode: LockMode,
    /// Units of the key that may be held at once (1 unless counted).
    pub limit: u32,
    /// Units this lease holds (1 unless counted).
    pub weight: u32,
}

impl LockKind {
    /// A plain lease: exclusive, one unit of one.
    pub const EXCLUSIVE: LockKind = LockKind { mode: LockMode::Exclusive, limit: 1, weight: 1 };

    /// True for the plain exclusive kind every driver supports.
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.mode == LockMode::Exclusive && self.limit == 1 && self.weight == 1
    }

    /// The kind in the options' words, for errors: `mode 'shared'`, or
    /// `limit 3 with weight 1`.
    pub fn describe(&self) -> String {
        match self.mode {
            LockMode::Shared => "mode 'shared'".to_owned(),
            LockMode::Exclusive => format!("limit {} with weight {}", self.limit, self.weight),
        }
    }
}

impl Default for LockKind {
    fn default() -> Self {
        LockKind::EXCLUSIVE
    }
}

impl AcquireOptions {
    /// The checked kind: `INVALID_ARGUMENT` for a limit or weight of 0, a
    /// weight above the limit, or a limit with shared mode.
    pub fn kind(&self) -> Result<LockKind> {
        LockKind::new(self.mode, self.limit, self.weight)
    }

    /// Options asking for `kind`, with the given wait and signal (for
    /// surfaces that pass a kind as mode, limit and weight numbers).
    pub fn of_kind(kind: LockKind, wait_timeout: Option<Duration>, signal: Option<AbortSignal>) -> AcquireOptions {
        let counted = kind.mode == LockMode::Exclusive;
        AcquireOptions {
            wait_timeout,
            signal,
            mode: kind.mode,
            limit: counted.then_some(kind.limit),
            weight: counted.then_some(kind.weight),
            holder: None,
        }
    }

    /// These options, the lease labelled `holder` (see
    /// [`AcquireOptions::holder`]).
    pub fn held_by(self, holder: Option<HolderLabel>) -> AcquireOptions {
        AcquireOptions { holder, ..self }
    }
}

impl LockKind {
    /// Checks a mode, limit and weight as [`AcquireOptions::kind`] does.
    pub fn new(mode: LockMode, limit: Option<u32>, weight: Option<u32>) -> Result<LockKind> {
        if mode == LockMode::Shared && (limit.is_some() || weight.is_some()) {
            return Err(invalid("mode 'shared' does not combine with limit or weight: shared leases are counted by mode, not units"));
        }
        let limit = limit.unwrap_or(1);
        let weight = weight.unwrap_or(1);
        if limit == 0 {
            return Err(invalid("limit must be a positive integer"));
        }
        if weight == 0 {
            return Err(invalid("weight must be a positive integer"));
        }
        if weight > limit {
            return Err(invalid(format!("weight ({weight}) is above limit ({limit}): such a lease could never be granted")));
        }
        Ok(LockKind { mode, limit, weight })
    }
}

/// The keys of one acquire, checked: at least one, each valid, none twice.
/// Their order is the caller's (what `Lease::keys` gives back); drivers
/// take them in an order of their own.
pub fn check_keys<K: AsRef<str>>(keys: &[K], max_key_bytes: usize) -> Result<()> {
    if keys.is_empty() {
        return Err(invalid("an acquire of several keys needs at least one key"));
    }
    // Small sets (the usual two to a few keys) are compared pairwise, which
    // allocates nothing; larger ones go through a set, so the check stays
    // O(k) (pairwise, 30,000 keys took half a second).
    let mut seen = (keys.len() > SMALL_SET).then(|| std::collections::HashSet::with_capacity(keys.len()));
    for (index, key) in keys.iter().enumerate() {
        let key = key.as_ref();
        crate::key::validate(key, max_key_bytes)?;
        let repeated = match &mut seen {
            Some(seen) => !seen.insert(key),
            None => keys[..index].iter().any(|earlier| earlier.as_ref() == key),
        };
        if repeated {
            return Err(invalid(format!("keys[{index}] repeats an earlier key: each key of one lease is given once")));
        }
    }
    Ok(())
}

/// Key sets up to this size are checked for repeats without a set (as the
/// Node layer's npm/lib/kinds.js does).
const SMALL_SET: usize = 16;

fn invalid(message: impl Into<String>) -> LockError {
    LockError::new(ErrorCode::InvalidArgument, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_acquire_is_exclusive_with_limit_one() {
        assert_eq!(AcquireOptions::default().kind().unwrap(), LockKind::EXCLUSIVE);
    }

    #[test]
    fn shared_mode_does_not_combine_with_a_limit() {
        let err = LockKind::new(LockMode::Shared, Some(3), None).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        let err = LockKind::new(LockMode::Shared, None, Some(1)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
    }

    #[test]
    fn limits_and_weights_are_positive_and_a_weight_fits_its_limit() {
        for (limit, weight) in [(Some(0), None), (None, Some(0)), (Some(2), Some(3)), (None, Some(2))] {
            let err = LockKind::new(LockMode::Exclusive, limit, weight).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{limit:?} {weight:?}");
        }
        assert_eq!(
            LockKind::new(LockMode::Exclusive, Some(5), Some(5)).unwrap(),
            LockKind { mode: LockMode::Exclusive, limit: 5, weight: 5 }
        );
    }

    #[test]
    fn options_of_a_kind_give_that_kind_back() {
        for kind in [
            LockKind::EXCLUSIVE,
            LockKind { mode: LockMode::Shared, limit: 1, weight: 1 },
            LockKind { mode: LockMode::Exclusive, limit: 4, weight: 3 },
        ] {
            assert_eq!(AcquireOptions::of_kind(kind, None, None).kind().unwrap(), kind);
        }
    }

    #[test]
    fn a_key_set_is_non_empty_valid_and_without_repeats() {
        assert_eq!(check_keys::<&str>(&[], 16).unwrap_err().code(), ErrorCode::InvalidArgument);
        assert_eq!(check_keys(&["a", "b", "a"], 16).unwrap_err().code(), ErrorCode::InvalidArgument);
        assert_eq!(check_keys(&["a", ""], 16).unwrap_err().code(), ErrorCode::InvalidKey);
        assert!(check_keys(&["a", "b"], 16).is_ok());
    }

    /// A key that counts how often it is read: the check's work, without a clock.
    struct Counted<'a>(String, &'a std::cell::Cell<u64>);

    impl AsRef<str> for Counted<'_> {
        fn as_ref(&self) -> &str {
            self.1.set(self.1.get() + 1);
            &self.0
        }
    }

    #[test]
    fn checking_a_key_set_reads_each_key_a_bounded_number_of_times() {
        // Pairwise checking read 20,000 keys about 200 million times.
        let reads = std::cell::Cell::new(0);
        let count = 20_000;
        let mut keys: Vec<Counted> = (0..count).map(|i| Counted(format!("k{i}"), &reads)).collect();
        assert!(check_keys(&keys, 16).is_ok());
        assert!(reads.get() <= 4 * count, "{} reads of {count} keys", reads.get());
        // A repeat at the end is found the same way.
        reads.set(0);
        keys.push(Counted("k0".into(), &reads));
        let err = check_keys(&keys, 16).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.message().contains(&format!("keys[{count}]")), "{}", err.message());
        assert!(reads.get() <= 4 * (count + 1), "{} reads of {} keys", reads.get(), count + 1);
    }
}
