//! Removing records. A cut appends its `pruned` record (durable) before it removes anything,
//! so from the moment a record is gone the chain says where it starts; a crash in between
//! leaves records at or before the cut, which verify passes over and the next run removes.
//! Removals go in sled batches of [`PRUNE_BATCH_RECORDS_MAX`] (each atomic), newest first, so
//! a session removed whole and cut short by a crash keeps a prefix of its chain.

use crate::journal::Journal;
use crate::record::{Event, SessionId};
use crate::stored::{check_value, key};

use super::RetentionError;
use super::scan::Scanned;

/// Most records removed in one sled batch.
pub(crate) const PRUNE_BATCH_RECORDS_MAX: usize = 65_536;

/// Remove the records of `session` with `from <= seq <= through`; how many there were.
fn remove_range(
    journal: &Journal,
    session: SessionId,
    from: u64,
    through: u64,
) -> Result<u64, RetentionError> {
    let records = &journal.trees().records;
    let mut removed = 0;
    loop {
        let mut batch = sled::Batch::default();
        let mut n = 0;
        let range = records.range(key(session, from)..=key(session, through));
        for item in range.rev().take(PRUNE_BATCH_RECORDS_MAX) {
            let (k, _) = item.map_err(crate::ReadError::from)?;
            batch.remove(k);
            n += 1;
        }
        if n == 0 {
            break;
        }
        records
            .apply_batch(batch)
            .map_err(|e| crate::AppendError::Storage {
                message: e.to_string(),
            })?;
        removed += n as u64;
    }
    Ok(removed)
}

/// Remove a session whole: its records, then its metadata. Returns the records removed.
pub(crate) fn remove_session(journal: &Journal, s: &Scanned) -> Result<u64, RetentionError> {
    let removed = remove_range(journal, s.id, 0, u64::MAX)?;
    journal.forget_head(s.id);
    journal
        .trees()
        .sessions
        .remove(s.id.as_bytes())
        .map_err(|e| crate::AppendError::Storage {
            message: e.to_string(),
        })?;
    Ok(removed)
}

/// Record a cut of `s` through `through` (unless `recorded`: an earlier run did), run
/// `between` (the snapshots the cut records name go then), then remove the records at or
/// before it. Returns the records removed.
pub(crate) fn cut_session(
    journal: &Journal,
    s: &Scanned,
    through: u64,
    rule: &str,
    recorded: bool,
    now_ms: u64,
    between: impl FnOnce(),
) -> Result<u64, RetentionError> {
    if !recorded {
        let value = journal
            .trees()
            .records
            .get(key(s.id, through))
            .map_err(crate::ReadError::from)?
            .ok_or_else(|| crate::ReadError::Corrupt {
                seq: through,
                reason: "the record a cut ends at is not stored".into(),
            })?;
        let checked = check_value(&journal.trees().blobs, s.id, through, &value)?;
        let earlier = s.cut.as_ref().map_or(0, |c| c.rewinds);
        let rewinds = s.rewinds.iter().filter(|seq| **seq <= through).count() as u32 + earlier;
        journal.append_blocking(
            s.id,
            now_ms,
            Event::Pruned {
                through_seq: through,
                hash: hex::encode(checked.hash),
                rewinds,
                reason: rule.to_owned(),
            },
        )?;
    }
    between();
    remove_range(journal, s.id, 0, through)
}
