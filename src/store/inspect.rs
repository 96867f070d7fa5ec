//! `inspect` on the SQL drivers: their holders rows, as both read them, as
//! an [`Inspection`].

use std::time::Duration;

use crate::acquire::LockMode;
use crate::inspect::{Holding, Inspection};
use crate::store::token::label_of;

/// One holder row's columns as read: shared, limit, weight, remaining ms
/// and owner token.
pub(crate) type HolderRow = (bool, i32, i32, i64, String);

/// The key's fence (0: none granted yet), its live waiting marks and
/// holders, and the first [`SHOWN_HOLDERS`](crate::inspect::SHOWN_HOLDERS)
/// holders' rows, soonest expiry first.
pub(crate) fn rows(fence: Option<i64>, waiting: i64, held: i64, rows: &[HolderRow]) -> Inspection {
    let holders: Vec<Holding> = rows
        .iter()
        .map(|(_, _, weight, ms, token)| Holding {
            label: label_of(token),
            units: u32::try_from(*weight).unwrap_or(0),
            remaining: Some(Duration::from_millis(u64::try_from(*ms).unwrap_or(0))),
            fence: None,
            held_for: None,
        })
        .collect();
    let mode = match rows.first() {
        None => None,
        Some((true, ..)) => Some(LockMode::Shared),
        Some((false, ..)) => Some(LockMode::Exclusive),
    };
    Inspection {
        backend: String::new(),
        mode,
        limit: rows.first().and_then(|&(_, limit, ..)| u32::try_from(limit).ok()).unwrap_or(1),
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

    #[test]
    fn rows_become_an_inspection() {
        let free = rows(None, 0, 0, &[]);
        assert_eq!((free.mode, free.limit, free.fence, free.is_held()), (None, 1, None, false));
        let never_granted = rows(Some(0), 1, 0, &[]);
        assert_eq!((never_granted.fence, never_granted.waiting), (None, 1));
        let token = "AAAAAAAAAAAAAAAAAAAAAA.web-3%3A41".to_owned();
        let counted = rows(Some(42), 2, 2, &[(false, 5, 2, 100, token.clone()), (false, 5, 3, 900, "old".into())]);
        assert_eq!((counted.mode, counted.limit, counted.fence), (Some(LockMode::Exclusive), 5, Some(42)));
        assert_eq!(counted.holders.iter().map(|h| h.units).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(counted.holders[1].remaining, Some(Duration::from_millis(900)));
        assert_eq!(counted.holders.iter().map(|h| h.label.as_deref()).collect::<Vec<_>>(), [Some("web-3:41"), None]);
        assert_eq!(rows(Some(7), 0, 1, &[(true, 1, 1, 5, token)]).mode, Some(LockMode::Shared));
    }
}
