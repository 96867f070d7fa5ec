//! `inspect` on Redis: the reply of the read script (`scripts::INSPECT`)
//! as an [`Inspection`].

use std::time::Duration;

use crate::acquire::LockMode;
use crate::inspect::{Holding, Inspection};
use crate::store::token::label_of;

/// The script's reply: mode, limit, fence counter, waiting marks, live
/// holders, then each listed holder's remaining ms, units and owner token
/// (read for its holder label only). None when it is not that shape.
pub(crate) fn parse(reply: &[String]) -> Option<Inspection> {
    let [mode, limit, fence, waiting, held, holders @ ..] = reply else { return None };
    let mode = match mode.as_str() {
        "" => None,
        "x" => Some(LockMode::Exclusive),
        "s" => Some(LockMode::Shared),
        _ => return None,
    };
    let holders = holders
        .chunks_exact(3)
        .map(|holder| {
            // A PTTL of -1 (no expiry) cannot be one of ours: shown as none left.
            let remaining = holder[0].parse::<i64>().ok()?.max(0);
            Some(Holding {
                label: label_of(&holder[2]),
                units: holder[1].parse().ok()?,
                remaining: Some(Duration::from_millis(remaining as u64)),
                fence: None,
                held_for: None,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Inspection {
        backend: String::new(),
        mode: mode.filter(|_| !holders.is_empty()),
        limit: limit.parse().ok()?,
        held: held.parse().ok()?,
        holders,
        waiting: waiting.parse().ok()?,
        fence: if fence.is_empty() { None } else { Some(fence.parse().ok()?) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|field| (*field).to_owned()).collect()
    }

    #[test]
    fn a_free_key_a_plain_holder_and_readers_are_read() {
        let free = parse(&reply(&["", "1", "", "0", "0"])).unwrap();
        assert_eq!((free.mode, free.holders.len(), free.fence), (None, 0, None));
        let plain = parse(&reply(&["x", "1", "1765000000000001", "2", "1", "4200", "1", "AAAAAAAAAAAAAAAAAAAAAA.web-3%3A41"])).unwrap();
        assert_eq!(plain.mode, Some(LockMode::Exclusive));
        let label = Some("web-3:41".to_owned());
        assert_eq!(plain.holders, vec![Holding { label, units: 1, remaining: Some(Duration::from_millis(4200)), fence: None, held_for: None }]);
        assert_eq!((plain.waiting, plain.fence), (2, Some(1_765_000_000_000_001)));
        let readers = parse(&reply(&["s", "1", "7", "0", "2", "10", "1", "0123456789abcdef0123456789abcdef", "20", "1", "t"])).unwrap();
        assert_eq!((readers.mode, readers.holders.len()), (Some(LockMode::Shared), 2));
        assert_eq!(readers.holders[0].label, None, "an older release's token carries no label");
    }

    #[test]
    fn a_reply_of_another_shape_is_refused() {
        assert!(parse(&reply(&["x", "1", "", "0"])).is_none());
        assert!(parse(&reply(&["q", "1", "", "0", "0"])).is_none());
        assert!(parse(&reply(&["x", "1", "", "0", "1", "ten", "1", "t"])).is_none());
    }
}
