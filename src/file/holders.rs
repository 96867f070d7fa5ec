//! Who holds a key, as the file driver records it: the kernel keeps its
//! locks, not a list of who holds them, so each holder writes a record of
//! itself (its process and pid namespace, the fence of its grant, when it
//! was granted and its holder label) where `inspect` and a refused acquire
//! read it, and clears it before it lets the key go:
//!
//! - a writer in the lock file's writer slot, while it holds the file
//!   exclusive, written just before its fence (see
//!   `LockFile::advance_fence_recorded`), so the slot names the holder from
//!   the moment the counter moves: its record's fence is at least the
//!   counter;
//! - a reader in one of the lock file's [`READER_SLOTS`] reader slots,
//!   chosen and written under the key's raise lock (see [`super::raise`])
//!   and cleared by the reader before it lets the key go; a slot is free
//!   when empty, when its process has ended, or when its fence is below the
//!   writer slot's (a writer was granted after it, so it let the key go);
//!   readers past that many hold the key unrecorded;
//! - a taker of units in each unit file it holds.
//!
//! Nothing reads the kernel lock to tell a record that holds (an earlier
//! design tried the lock file shared: a reader of records stopped within
//! that try kept every writer out). A record left behind by a holder
//! killed in its section is told by its process: gone (`kill(pid, 0)`,
//! `OpenProcess`). Another pid namespace's process (a container beside
//! another on one volume) cannot be looked up from this one, so its record
//! counts as live until cleared or taken over: by a writer's grant (the
//! writer slot, and every reader slot below its fence), by the next taker
//! of the unit.
//!
//! Records sit after the records older versions read and write (fence,
//! waiting mark, limit: see [`super::lock_file`]), which they leave alone.
//! They are a hint, never a lock: exclusion and fences never read them, a
//! torn or foreign record reads as none, and one left by a holder killed in
//! its section is dropped by the liveness of its process.

use super::fence::{self, RECORD_LEN};
use super::lock_file::LockFile;
use super::sys;
use crate::holder::{self, HolderLabel, MAX_HOLDER_BYTES};

/// Bytes of a record: process, pid namespace, fence and grant time, then
/// the encoded label and a newline.
pub(crate) const SLOT_LEN: usize = FIELDS * RECORD_LEN + MAX_HOLDER_BYTES + 1;

/// The number records of a slot, before its label.
const FIELDS: usize = 4;

/// Where a slot's fence record starts (after the process and namespace).
const FENCE_AT: usize = 2 * RECORD_LEN;

/// Where the writer slot starts in a lock file, after the limit record.
pub(crate) const WRITER_AT: u64 = 128;

/// Reader slots of a lock file, after its writer slot.
pub(crate) const READER_SLOTS: usize = 16;

/// The writer slot and the reader slots, in bytes.
pub(crate) const SLOTS_LEN: usize = (1 + READER_SLOTS) * SLOT_LEN;

/// Where reader slot `index` starts in a lock file.
pub(crate) fn reader_at(index: usize) -> u64 {
    WRITER_AT + ((1 + index) * SLOT_LEN) as u64
}

/// One holder's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub pid: u32,
    /// Its pid namespace (see [`pid_namespace`]).
    pub namespace: u64,
    pub fence: u64,
    /// When it was granted: the wall clock, in microseconds.
    pub since_us: u64,
    /// Its label; `None` when the record's label is not one.
    pub label: Option<String>,
}

/// The record of a grant of `fence` to this process, labelled `label`, now.
pub(crate) fn encode(fence: u64, label: &HolderLabel) -> [u8; SLOT_LEN] {
    let mut slot = [0u8; SLOT_LEN];
    let fields = [u64::from(std::process::id()), pid_namespace(), fence, fence::clock_us()];
    for (record, value) in slot.chunks_exact_mut(RECORD_LEN).zip(fields) {
        record.copy_from_slice(&fence::encode(value));
    }
    let encoded = label.encoded().as_bytes();
    slot[FIELDS * RECORD_LEN..FIELDS * RECORD_LEN + encoded.len()].copy_from_slice(encoded);
    slot[FIELDS * RECORD_LEN + encoded.len()] = b'\n';
    slot
}

/// The record in `bytes` (one slot); `None` for an empty slot, a cleared
/// one, and one torn or not a record.
pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
    if bytes.len() < SLOT_LEN {
        return None;
    }
    let field = |index: usize| fence::decode(&bytes[index * RECORD_LEN..(index + 1) * RECORD_LEN]);
    let (pid, fence) = (u32::try_from(field(0)).ok().filter(|pid| *pid != 0)?, field(FENCE_AT / RECORD_LEN));
    if fence == 0 {
        return None;
    }
    let label_bytes = &bytes[FIELDS * RECORD_LEN..SLOT_LEN];
    let end = label_bytes.iter().position(|byte| *byte == b'\n')?;
    let label = std::str::from_utf8(&label_bytes[..end]).ok().and_then(holder::decode);
    Some(Record { pid, namespace: field(1), fence, since_us: field(3), label })
}

impl Record {
    /// False once its process has ended, as far as this process can tell:
    /// a process of another pid namespace cannot be looked up, so it counts
    /// as live.
    pub fn lives(&self) -> bool {
        self.namespace != pid_namespace() || sys::process_lives(self.pid)
    }
}

/// This process's pid namespace: the inode of `/proc/self/ns/pid` on
/// Linux (0 where there is none to read: every process then counts as of
/// one namespace, as on other systems).
pub(crate) fn pid_namespace() -> u64 {
    static NAMESPACE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NAMESPACE.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self/ns/pid").map_or(0, |metadata| metadata.ino())
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    })
}

/// A cleared slot.
pub(crate) const CLEARED: [u8; SLOT_LEN] = [0u8; SLOT_LEN];

/// The records of a lock file's slots, as read at once.
pub(crate) struct Slots {
    /// The writer slot's record: a writer's while it holds (or one killed
    /// holding).
    pub writer: Option<Record>,
    /// The fence of the last writer's grant, kept in the writer slot when
    /// it let go (see [`clear_writer`]): readers recorded below it let go
    /// before that writer came.
    pub writer_fence: u64,
    /// The reader slots, in order.
    pub readers: Vec<Option<Record>>,
}

impl Slots {
    /// The writer that holds the key now, as its record says: one of a
    /// process that lives, whose fence is at least the file's `counter`
    /// (written just before the counter; a writer clears it as it lets go).
    pub fn live_writer(&self, counter: u64) -> Option<&Record> {
        self.writer.as_ref().filter(|writer| writer.fence >= counter && writer.lives())
    }

    /// The slots of `file` (none read as empty).
    pub fn read(file: &LockFile) -> Slots {
        let mut bytes = vec![0u8; SLOTS_LEN];
        let read = file.read_at(&mut bytes, WRITER_AT).unwrap_or(0);
        bytes[read..].fill(0);
        let writer_fence = fence::decode(&bytes[FENCE_AT..FENCE_AT + RECORD_LEN]);
        let mut slots = bytes.chunks_exact(SLOT_LEN).map(decode);
        Slots { writer: slots.next().flatten(), writer_fence, readers: slots.collect() }
    }

    /// The readers that may hold the key now: a record of a process that
    /// lives, granted after the last writer's grant. (A reader that let
    /// the key go cleared its slot; one killed has no process.)
    pub fn live_readers(&self) -> impl Iterator<Item = &Record> {
        let after = self.writer_fence;
        self.readers.iter().flatten().filter(move |reader| reader.fence > after && reader.lives())
    }
}

/// Records a reader granted `fence` (labelled `label`) in the first reader
/// slot of `file` that no live reader holds (see [`Slots::live_readers`]);
/// called under the key's raise lock, so no other reader chooses at once.
/// The slot, or `None` when every one is a live reader's (or the write
/// failed): this reader then holds the key unrecorded.
pub(crate) fn record_reader(file: &LockFile, fence: u64, label: &HolderLabel) -> Option<usize> {
    let slots = Slots::read(file);
    let live: Vec<u64> = slots.live_readers().map(|reader| reader.fence).collect();
    let free = slots.readers.iter().position(|slot| slot.as_ref().is_none_or(|reader| !live.contains(&reader.fence)))?;
    file.write_at(&encode(fence, label), reader_at(free)).ok()?;
    Some(free)
}

/// Clears the writer slot of `file`, which this process holds exclusive,
/// but for the fence of the writer's grant, `fence` (a writer letting the
/// key go, in one write; not synced, as the fence is not): no holder, and
/// reader records below it stale (see [`Slots::live_readers`]).
pub(crate) fn clear_writer(file: &LockFile, fence: u64) {
    let mut slot = CLEARED;
    slot[FENCE_AT..FENCE_AT + RECORD_LEN].copy_from_slice(&fence::encode(fence));
    let _ = file.write_at(&slot, WRITER_AT);
}

/// Clears reader slot `slot` of `file` if it still holds this process's
/// record of `fence` (the reader's own, about to let the key go; a slot
/// is only taken over once its reader is gone, so this never clears
/// another's).
pub(crate) fn clear_reader_slot(file: &LockFile, slot: usize, fence: u64) {
    let mut bytes = [0u8; SLOT_LEN];
    let at = reader_at(slot);
    if file.read_at(&mut bytes, at).is_ok_and(|read| read == SLOT_LEN)
        && decode(&bytes).is_some_and(|record| record.fence == fence && record.pid == std::process::id())
    {
        let _ = file.write_at(&CLEARED, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_cleared_or_torn_one_is_none() {
        let label = HolderLabel::new("web-3: jobs").unwrap();
        let slot = encode(42, &label);
        let record = decode(&slot).unwrap();
        assert_eq!((record.pid, record.fence, record.label.as_deref()), (std::process::id(), 42, Some("web-3: jobs")));
        assert!(record.lives(), "this process");
        assert!(record.since_us.abs_diff(fence::clock_us()) < 10_000_000);
        assert_eq!(decode(&CLEARED), None);
        let mut torn = slot;
        torn[..RECORD_LEN].fill(0);
        assert_eq!(decode(&torn), None, "no process");
        let mut torn = slot;
        torn[SLOT_LEN - 1] = b'x';
        torn[FIELDS * RECORD_LEN..].fill(b'x');
        assert_eq!(decode(&torn), None, "no end of label");
        let longest = HolderLabel::new(&"x".repeat(MAX_HOLDER_BYTES)).unwrap();
        assert_eq!(decode(&encode(7, &longest)).unwrap().label.unwrap().len(), MAX_HOLDER_BYTES);
    }

    #[test]
    fn slots_follow_the_older_records() {
        assert!(WRITER_AT >= 96 + RECORD_LEN as u64, "after the limit record");
        assert_eq!(reader_at(0), WRITER_AT + SLOT_LEN as u64);
        assert_eq!(reader_at(READER_SLOTS - 1) + SLOT_LEN as u64, WRITER_AT + SLOTS_LEN as u64);
    }
}
