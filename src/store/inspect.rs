//! `inspect` on the SQL drivers: their holders rows, as both read them, as
//! an [`Inspection`].

use std::time::Duration;

use crate::acquire::LockMode;
use crate::inspect::{Holding, Inspection};
use crate::store::token::label_of;

/// One holder row as both SQL drivers read it (a live row: its expiry is
/// ahead of the server's clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HolderRow {
    pub shared: bool,
    pub limit: i32,
    pub weight: i32,
    /// Until its expiry, in ms of the server's clock.
    pub remaining_ms: i64,
    pub token: String,
    /// The fence its grant got, kept in the row by the grant that wrote its
    /// token (PostgreSQL functions 13, MySQL procedures 11). NULL where the
    /// row was written by an older release's grant.
    pub fence: Option<i64>,
    /// `floor((clock_us_now - fence) / 1000)`: the ms the server's clock
    /// (in µs, the expression the grant's fence came from) has moved since
    /// that fence, in the same read. NULL when the fence is unknown or
    /// above the clock now.
    pub held_ms: Option<i64>,
}

/// The key's fence (0: none granted yet), its live waiting marks and
/// holders, and the first [`SHOWN_HOLDERS`](crate::inspect::SHOWN_HOLDERS)
/// holders' rows, soonest expiry first.
///
/// A holder's time held comes from its fence: every grant's fence is
/// `max(counter + 1, server clock in µs)`, the clock read once the key's
/// row is locked, so the grant read the server's clock at or before the µs
/// its fence names, and `held_ms` (the clock since then, in whole ms) is a
/// time the holder has held the key at least, counted from that reading
/// (the grant's commit follows within the same call: a durable commit's
/// flush, or a synchronous standby's answer, is counted in). Exact to the
/// ms when the fence is the clock's reading, as it is unless the counter
/// ran ahead of the clock. When it did (a counter restored or carried to a
/// server whose clock is behind, a clock stepped back), the fence is above
/// the clock now and the time held is unknown (`None`), as it is for a row
/// an older release granted, which has no fence.
pub(crate) fn rows(fence: Option<i64>, waiting: i64, held: i64, rows: &[HolderRow]) -> Inspection {
    let holders: Vec<Holding> = rows
        .iter()
        .map(|row| Holding {
            label: label_of(&row.token),
            units: u32::try_from(row.weight).unwrap_or(0),
            remaining: Some(Duration::from_millis(u64::try_from(row.remaining_ms).unwrap_or(0))),
            fence: row.fence.filter(|&fence| fence > 0).and_then(|fence| u64::try_from(fence).ok()),
            held_for: row.held_ms.and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
        })
        .collect();
    let mode = rows.first().map(|row| if row.shared { LockMode::Shared } else { LockMode::Exclusive });
    Inspection {
        backend: String::new(),
        mode,
        limit: rows.first().and_then(|row| u32::try_from(row.limit).ok()).unwrap_or(1),
        held: u32::try_from(held).unwrap_or(u32::MAX),
        holders,
        waiting: u32::try_from(waiting).unwrap_or(u32::MAX),
        fence: fence.filter(|&fence| fence > 0).and_then(|fence| u64::try_from(fence).ok()),
    }
}

/// A key of tables not made yet: nothing kept.
pub(crate) fn nothing_kept() -> Inspection {
    rows(None, 0, 0, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(shared: bool, limit: i32, weight: i32, remaining_ms: i64, token: &str) -> HolderRow {
        HolderRow { shared, limit, weight, remaining_ms, token: token.to_owned(), fence: None, held_ms: None }
    }

    #[test]
    fn rows_become_an_inspection() {
        let free = rows(None, 0, 0, &[]);
        assert_eq!((free.mode, free.limit, free.fence, free.is_held()), (None, 1, None, false));
        let never_granted = rows(Some(0), 1, 0, &[]);
        assert_eq!((never_granted.fence, never_granted.waiting), (None, 1));
        let token = "AAAAAAAAAAAAAAAAAAAAAA.web-3%3A41";
        let counted = rows(Some(42), 2, 2, &[row(false, 5, 2, 100, token), row(false, 5, 3, 900, "old")]);
        assert_eq!((counted.mode, counted.limit, counted.fence), (Some(LockMode::Exclusive), 5, Some(42)));
        assert_eq!(counted.holders.iter().map(|h| h.units).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(counted.holders[1].remaining, Some(Duration::from_millis(900)));
        assert_eq!(counted.holders.iter().map(|h| h.label.as_deref()).collect::<Vec<_>>(), [Some("web-3:41"), None]);
        assert_eq!(rows(Some(7), 0, 1, &[row(true, 1, 1, 5, token)]).mode, Some(LockMode::Shared));
    }

    /// A row with its grant's fence shows it and the time held; one an
    /// older release granted (no fence), or whose fence is above the clock
    /// (no time held), shows what is known.
    #[test]
    fn a_row_s_fence_and_time_held() {
        let granted = HolderRow { fence: Some(1_765_000_000_000_001), held_ms: Some(1_500), ..row(false, 2, 1, 100, "new") };
        let older = row(false, 2, 1, 900, "old");
        let ahead = HolderRow { fence: Some(1_765_000_000_000_002), ..row(false, 2, 1, 950, "ahead") };
        let found = rows(Some(1_765_000_000_000_002), 0, 3, &[granted, older, ahead]);
        let seen: Vec<(Option<u64>, Option<Duration>)> = found.holders.iter().map(|h| (h.fence, h.held_for)).collect();
        assert_eq!(
            seen,
            [(Some(1_765_000_000_000_001), Some(Duration::from_millis(1_500))), (None, None), (Some(1_765_000_000_000_002), None)]
        );
        // Nothing read as a fence or a time that no grant could have written.
        let odd = HolderRow { fence: Some(0), held_ms: Some(-3), ..row(false, 1, 1, 5, "odd") };
        let odd = &rows(Some(1), 0, 1, &[odd]).holders[0];
        assert_eq!((odd.fence, odd.held_for), (None, None));
    }
}
