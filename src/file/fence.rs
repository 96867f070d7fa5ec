//! Fences of the file driver: `max(counter + 1, clock_us)`, the counter kept
//! in the key's lock file; a new lock file (counter 0) grants above the
//! directory's floor too, `max(1, clock_us, floor + 1)` (see
//! [`super::floor`]).
//!
//! The holder of a key writes the fence it was granted into the lock file
//! while it holds the kernel lock, so the next holder reads it and goes
//! above it; readers, holding the lock shared together, read and write it
//! one at a time under the key's raise lock (see [`super::raise`]), so no
//! two grants of any kind get one fence. The driver removes the files of
//! free keys (see `backend`), and a removed file's counter lives on in the
//! floor, which every removal raises to it first: so a key's fences do not
//! go back when the host's clock does (an NTP step, a virtual machine's
//! clock corrected, its CPUs disagreeing on the time).
//!
//! Neither the counter nor the floor is `fsync`ed: a crash of the process
//! loses nothing (the page cache belongs to the kernel), and a crash of the
//! host that loses a write also takes a reboot, after which the wall clock
//! in microseconds is above every fence granted before (fences follow the
//! clock, and run ahead of it only by the grants made within one
//! microsecond, or by how far the clock went back while the host ran). The
//! floor is also lost with its file, `floor.lock`, while the host runs (a
//! directory logout or a tmp cleaner empties, a removal by hand): grants
//! then start from the clock again. The assumption left: the host's clock
//! then (after a reboot, or once the floor went) is above every fence
//! granted before (docs/file.md, "Fences").

use std::time::{SystemTime, UNIX_EPOCH};

/// Bytes of a fence record: 20 decimal digits and a newline.
pub(crate) const RECORD_LEN: usize = 21;

/// The fence of a grant after one whose fence was `counter`, at `clock_us`.
pub(crate) fn next(counter: u64, clock_us: u64) -> u64 {
    counter.saturating_add(1).max(clock_us)
}

/// The wall clock in microseconds since the Unix epoch (0 before it).
pub(crate) fn clock_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}

/// Waits (at most a millisecond) until the clock is past `fence`, the
/// counter of a lock file about to be removed: false when it is not. The
/// floor (see [`super::floor`]) keeps a removed file's next fence above the
/// counter whatever the clock; this keeps processes of earlier versions,
/// which restart a new file's counter from the clock alone, above it too
/// while the clock does not go back.
pub(crate) fn clock_passes(fence: u64) -> bool {
    let deadline = clock_us().saturating_add(1_000);
    loop {
        let now = clock_us();
        if now > fence {
            return true;
        }
        if fence >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
}

/// The record of `fence`.
pub(crate) fn encode(fence: u64) -> [u8; RECORD_LEN] {
    let mut record = [b'0'; RECORD_LEN];
    record[RECORD_LEN - 1] = b'\n';
    let mut rest = fence;
    for digit in record[..RECORD_LEN - 1].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    record
}

/// The fence a record holds; 0 for an empty file or one that holds no
/// record (a file created but never granted, or cut short by a full disk).
pub(crate) fn decode(bytes: &[u8]) -> u64 {
    let digits = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if digits.is_empty() || digits.len() > RECORD_LEN - 1 || !digits.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    digits.iter().fold(0u64, |value, digit| value.saturating_mul(10).saturating_add(u64::from(digit - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_above_the_counter_and_follows_the_clock() {
        assert_eq!(next(5, 3), 6);
        assert_eq!(next(5, 100), 100);
        assert_eq!(next(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn records_round_trip_and_garbage_reads_as_zero() {
        for fence in [0, 1, 1_800_000_000_000_000, u64::MAX] {
            assert_eq!(decode(&encode(fence)), fence);
        }
        assert_eq!(decode(b""), 0);
        assert_eq!(decode(b"12x\n"), 0);
        assert_eq!(decode(b"0000000"), 0);
        assert_eq!(decode(b"42"), 42);
    }

    #[test]
    fn the_clock_is_in_microseconds() {
        // 2020-01-01 in microseconds.
        assert!(clock_us() > 1_577_836_800_000_000);
    }
}
