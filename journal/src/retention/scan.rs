//! Reading every session of every shard once, checked, for what the plan needs: when each
//! session was last active, whether it ended, its bytes, its newest cut, its snapshots, and
//! the action boundaries an age cut may fall on.

use std::path::{Path, PathBuf};

use crate::journal::{Cut, Journal};
use crate::record::{SessionId, Skipped};
use crate::stored::{check_value, seq_of};
use crate::{CommitMode, Limits, OpenError};

use super::{Kept, RetentionError, SnapshotRef, skipped};

/// How this run holds a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// It is the journal of the running aido that called retention: written meanwhile, its
    /// new contents pinned.
    Own,
    /// This run holds its lock: nothing else writes it.
    Held,
    /// Another running aido holds it (or a dry run reads it): read only.
    Read,
}

/// One shard as this run holds it.
pub(crate) struct Shard {
    pub(crate) path: PathBuf,
    pub(crate) journal: Journal,
    pub(crate) hold: Hold,
}

/// Open every shard under `dir`: the caller's own, those no other aido holds (as writers, or
/// read-only when `dry`), and the held ones read from a copy (reported).
pub(crate) fn open_shards(
    dir: &Path,
    own: Option<&Journal>,
    dry: bool,
    skipped_out: &mut Vec<Skipped>,
) -> Result<Vec<Shard>, RetentionError> {
    let mut shards = Vec::new();
    for path in crate::dir::shard_paths(dir)? {
        if let Some(own) = own
            && same_dir(own.path(), &path)
        {
            shards.push(Shard {
                path,
                journal: own.clone(),
                hold: Hold::Own,
            });
            continue;
        }
        let opened = if dry {
            Journal::open_read_only(&path).map(|j| (j, Hold::Read))
        } else {
            match Journal::open(&path, Limits::default(), CommitMode::Group) {
                Ok(j) => Ok((j, Hold::Held)),
                Err(OpenError::Locked { .. }) => {
                    skipped_out.push(skipped(
                        path.display().to_string(),
                        Kept::ShardHeld,
                        "a running aido holds this shard: its sessions are read from a copy for marks, nothing in it is removed",
                    ));
                    Journal::open_read_only(&path).map(|j| (j, Hold::Read))
                }
                Err(e) => Err(e),
            }
        };
        let (journal, hold) = opened?;
        shards.push(Shard {
            path,
            journal,
            hold,
        });
    }
    Ok(shards)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// What the plan knows of one session.
#[derive(Clone, Debug)]
pub(crate) struct Scanned {
    /// Index of its shard.
    pub(crate) shard: usize,
    pub(crate) id: SessionId,
    pub(crate) started_ms: u64,
    /// Its first stored seq (0 when it holds none).
    pub(crate) first_seq: u64,
    pub(crate) head_seq: u64,
    /// Records stored.
    pub(crate) records: u64,
    /// Their bytes as stored (keys and values).
    pub(crate) record_bytes: u64,
    /// When its newest record was written (its start when it holds none).
    pub(crate) last_ms: u64,
    /// It ended (a `session_ended` record that nothing but retention's records follow).
    pub(crate) ended: bool,
    /// Its newest cut.
    pub(crate) cut: Option<Cut>,
    /// The last record an age cut may remove: the newest action boundary at or before the
    /// last of its records (from the first) older than the cut-off.
    pub(crate) cuttable_through: Option<u64>,
    /// Seqs of its `rewound` records.
    pub(crate) rewinds: Vec<u64>,
    /// Its snapshots.
    pub(crate) snapshots: Vec<SnapshotRef>,
    /// The first record that does not check out: its seq and why.
    pub(crate) damaged: Option<(u64, String)>,
}

impl Scanned {
    /// Records removed by a cut through `through` (those stored at or before it).
    pub(crate) fn records_through(&self, journal: &Journal, through: u64) -> (u64, u64) {
        let mut count = 0;
        let mut bytes = 0;
        let end = crate::stored::key(self.id, through.saturating_add(1));
        for (k, v) in journal
            .trees()
            .records
            .range(crate::stored::key(self.id, 0)..end)
            .flatten()
        {
            count += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        (count, bytes)
    }
}

/// Scan every session of `journal` (shard index `shard`); `cutoff` is the age cut-off, if
/// any.
pub(crate) fn scan_shard(
    journal: &Journal,
    shard: usize,
    cutoff: Option<u64>,
) -> Result<Vec<Scanned>, RetentionError> {
    let mut out = Vec::new();
    for summary in journal.sessions()? {
        out.push(scan_session(
            journal,
            shard,
            summary.id,
            summary.started_ms,
            cutoff,
        )?);
    }
    Ok(out)
}

fn scan_session(
    journal: &Journal,
    shard: usize,
    id: SessionId,
    started_ms: u64,
    cutoff: Option<u64>,
) -> Result<Scanned, RetentionError> {
    let mut s = Scanned {
        shard,
        id,
        started_ms,
        first_seq: 0,
        head_seq: 0,
        records: 0,
        record_bytes: 0,
        last_ms: started_ms,
        ended: false,
        cut: None,
        cuttable_through: None,
        rewinds: Vec::new(),
        snapshots: Vec::new(),
        damaged: None,
    };
    // Records older than the cut-off, counted from the first one kept: the last of them.
    let mut older_through: Option<u64> = None;
    let mut older_run = true;
    // Outcomes: (proposal, outcome seq). A cut between them would split an action.
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for item in journal.trees().records.scan_prefix(id.as_bytes()) {
        let (k, v) = item.map_err(crate::ReadError::from)?;
        s.records += 1;
        s.record_bytes += (k.len() + v.len()) as u64;
        let seq = match seq_of(&k) {
            Ok(seq) => seq,
            Err(e) => {
                s.damaged.get_or_insert((s.head_seq + 1, e.to_string()));
                continue;
            }
        };
        if s.first_seq == 0 {
            s.first_seq = seq;
        }
        s.head_seq = seq;
        let checked = match check_value(&journal.trees().blobs, id, seq, &v) {
            Ok(c) => c,
            Err(e) => {
                s.damaged.get_or_insert((seq, e.to_string()));
                continue;
            }
        };
        let stored = &checked.stored;
        let time_ms = stored["time_ms"].as_u64().unwrap_or(0);
        s.last_ms = time_ms;
        let event = stored["event"].as_str().unwrap_or_default();
        // Ended until something resumes it (retention's own records after the end do not).
        match event {
            "session_ended" => s.ended = true,
            "session_started" | "session_resumed" => s.ended = false,
            "pruned" | "collected" => {}
            _ if s.ended => s.ended = false,
            _ => {}
        }
        if let Some(cut) = Cut::of(seq, stored) {
            s.cut = Some(cut);
        }
        match event {
            "action_completed" | "action_failed" => {
                if let Some(proposal) = stored["proposal"].as_u64()
                    && proposal < seq
                {
                    spans.push((proposal, seq));
                }
            }
            "rewound" => s.rewinds.push(seq),
            "snapshot_taken" => s.snapshots.push(SnapshotRef {
                session: id,
                seq,
                snapshot: stored["snapshot"].as_str().unwrap_or_default().to_owned(),
                backend: stored["backend"].as_str().unwrap_or_default().to_owned(),
                workspace: stored["workspace"].as_str().unwrap_or_default().to_owned(),
            }),
            _ => {}
        }
        if let Some(cutoff) = cutoff
            && older_run
        {
            if time_ms < cutoff {
                older_through = Some(seq);
            } else {
                older_run = false;
            }
        }
    }
    let start = s.cut.as_ref().map_or(s.first_seq, |c| c.through_seq + 1);
    s.cuttable_through = older_through.and_then(|last| boundary(&spans, start, last));
    Ok(s)
}

/// The newest seq in `start..=last` that splits no action: no outcome after it closes a
/// proposal at or before it (`spans` are (proposal, outcome) pairs).
fn boundary(spans: &[(u64, u64)], start: u64, last: u64) -> Option<u64> {
    // Each span forbids proposal..outcome-1; merge them and step below the one holding `c`.
    let mut forbidden: Vec<(u64, u64)> = spans
        .iter()
        .filter(|(p, o)| *p <= last && *o > *p)
        .map(|(p, o)| (*p, o - 1))
        .collect();
    forbidden.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in forbidden {
        match merged.last_mut() {
            Some((_, end)) if a <= end.saturating_add(1) => *end = (*end).max(b),
            _ => merged.push((a, b)),
        }
    }
    let mut c = last;
    for (a, b) in merged.iter().rev() {
        if *a <= c && c <= *b {
            c = a.checked_sub(1)?;
        }
    }
    (c >= start && start > 0).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::boundary;

    #[test]
    fn a_cut_never_splits_an_action() {
        // Proposal 2 answered at 5, proposal 4 at 7: 2..=6 cannot be a cut.
        let spans = [(2, 5), (4, 7), (8, 9)];
        assert_eq!(boundary(&spans, 1, 10), Some(10));
        assert_eq!(boundary(&spans, 1, 6), Some(1));
        assert_eq!(boundary(&spans, 1, 8), Some(7));
        assert_eq!(boundary(&spans, 2, 6), None, "nothing before the action");
        assert_eq!(boundary(&[], 3, 9), Some(9));
    }
}
