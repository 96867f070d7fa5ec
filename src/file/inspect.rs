//! `inspect` on the file driver, and the holders a refused acquire names:
//! read from the records the holders wrote (see [`super::holders`]),
//! never from the kernel lock, which a read must not take (a reader of it
//! stopped there would keep the key's writers out).

use std::time::Duration;

use super::core::FileCore;
use super::fence;
use super::holders::{self, Record, Slots, SLOT_LEN};
use super::name::LockName;
use crate::acquire::LockMode;
use crate::error::{LockError, Result};
use crate::inspect::{busy_details, tells_holders, Holding, Inspection, SHOWN_HOLDERS};

impl FileCore {
    /// What the directory holds of `key` now (see `Backend::inspect`):
    /// its holders by their records, this backend's waiters and another
    /// process's marked one, the key's counter. `INVALID_KEY`, `CLOSED`,
    /// `PROVIDER_FAILED` (a lock file it cannot use).
    pub fn inspect(&self, key: &str) -> Result<Inspection> {
        crate::key::validate(key, self.options.max_key_bytes as usize)?;
        if self.is_closed() {
            return Err(LockError::closed());
        }
        self.read(key)
    }

    /// `err` as an acquire of `keys` ends with it: a `WAIT_TIMEOUT` or
    /// `LOCK_BUSY` gains the holders of the key that kept it out (see
    /// `inspect::busy_details`); any other error is as it was.
    pub fn told_holders(&self, err: LockError, keys: &[&str]) -> LockError {
        if !tells_holders(err.code()) {
            return err;
        }
        let found: Vec<Inspection> = keys.iter().map(|key| self.read(key).unwrap_or_default()).collect();
        match busy_details(&found, keys.len() > 1) {
            Some(details) => err.with_details(details),
            None => err,
        }
    }

    fn read(&self, key: &str) -> Result<Inspection> {
        let name = LockName::new(&self.options.namespace, key);
        let waiting = self.waiting_for(key, &name);
        let mut found = Inspection { backend: self.reporter.backend().to_owned(), limit: 1, waiting, ..Inspection::default() };
        let io = |err: std::io::Error| self.directory.failure(err.into());
        let Some(file) = self.directory.open_existing(&name)? else { return Ok(found) };
        let header = file.header().map_err(io)?;
        found.fence = (header.fence > 0).then_some(header.fence);
        found.waiting += u32::from(header.marked_by_other(self.marker()));
        let holders: Vec<Holding> = if header.limit > 1 {
            found.limit = header.limit;
            self.unit_holders(&name)?
        } else {
            let slots = Slots::read(&file);
            if let Some(writer) = slots.live_writer(header.fence) {
                found.mode = Some(LockMode::Exclusive);
                vec![holding(writer, 1)]
            } else {
                let readers: Vec<Holding> = slots.live_readers().map(|reader| holding(reader, 1)).collect();
                if !readers.is_empty() {
                    found.mode = Some(LockMode::Shared);
                }
                readers
            }
        };
        if found.limit > 1 && !holders.is_empty() {
            found.mode = Some(LockMode::Exclusive);
        }
        found.held = holders.len() as u32;
        found.holders = holders.into_iter().take(SHOWN_HOLDERS).collect();
        Ok(found)
    }

    /// The holders of counted key `name` by the records in its unit files
    /// (`.u0` up to the first missing one): one per grant, with its units.
    fn unit_holders(&self, name: &LockName) -> Result<Vec<Holding>> {
        let mut grants: Vec<(Record, u32)> = Vec::new();
        for unit in 0..u32::MAX {
            let Some(file) = self.directory.open_existing_unit(name, unit)? else { break };
            let mut bytes = [0u8; SLOT_LEN];
            let read = file.read_at(&mut bytes, 0).unwrap_or(0);
            let Some(record) = holders::decode(&bytes[..read]).filter(Record::lives) else { continue };
            match grants.iter_mut().find(|(grant, _)| grant.pid == record.pid && grant.fence == record.fence) {
                Some((_, units)) => *units += 1,
                None => grants.push((record, 1)),
            }
        }
        grants.sort_by_key(|(record, _)| record.fence);
        Ok(grants.iter().map(|(record, units)| holding(record, *units)).collect())
    }
}

/// The holder a record names: its label, units and fence, and how long it
/// has held the key by this host's clock (unknown when the record's time
/// is ahead of the clock: the clock went back since).
fn holding(record: &Record, units: u32) -> Holding {
    let now = fence::clock_us();
    Holding {
        label: record.label.clone(),
        units,
        remaining: None,
        fence: Some(record.fence),
        held_for: (record.since_us <= now).then(|| Duration::from_micros(now - record.since_us)),
    }
}
