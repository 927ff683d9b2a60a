//! Which sessions go, whole or cut, by the rules; never a live or damaged one.

use std::collections::{HashMap, HashSet};

use crate::record::{SessionId, Skipped};

use super::scan::{Scanned, Shard};
use super::{Kept, LIVE_QUIET_MS, Rules, skipped};

/// What happens to one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// It goes whole.
    Remove { rule: &'static str },
    /// Its records up to `through` go; a `pruned` record is appended first unless `recorded`
    /// (an earlier run appended it and was cut short).
    Cut {
        through: u64,
        rule: &'static str,
        recorded: bool,
    },
}

/// The plan: a fate for each session that changes.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) fates: HashMap<SessionId, Fate>,
}

/// Why a session may not be touched, if it may not.
fn untouchable(s: &Scanned, shards: &[Shard], now_ms: u64) -> Option<(Kept, String)> {
    if shards[s.shard].journal.is_copy() {
        // Reported once for the shard.
        return Some((Kept::ShardHeld, String::new()));
    }
    if let Some((seq, why)) = &s.damaged {
        return Some((
            Kept::RecordDamaged,
            format!("record {seq} does not check out: {why}"),
        ));
    }
    if !s.ended && s.last_ms.saturating_add(LIVE_QUIET_MS) > now_ms {
        return Some((
            Kept::SessionLive,
            "it has not ended and was active within the last day".into(),
        ));
    }
    None
}

/// Plan by `rules` at `now_ms`. `exclusive` gives each session's bytes that only it holds
/// (records, blobs, snapshots) and `total` the bytes the rules' budget counts (for
/// `max_bytes`).
pub(crate) fn plan(
    sessions: &[Scanned],
    shards: &[Shard],
    rules: &Rules,
    now_ms: u64,
    exclusive: &HashMap<SessionId, u64>,
    total: u64,
    skipped_out: &mut Vec<Skipped>,
) -> Plan {
    let mut plan = Plan::default();
    let mut kept_reported = HashSet::new();
    let mut keep = |s: &Scanned, skipped_out: &mut Vec<Skipped>| -> bool {
        match untouchable(s, shards, now_ms) {
            None => false,
            Some((why, detail)) => {
                if why != Kept::ShardHeld && kept_reported.insert(s.id) {
                    skipped_out.push(skipped(s.id.to_string(), why, detail));
                }
                true
            }
        }
    };
    // A cut an earlier run recorded and did not finish is finished first, whatever the rules.
    for s in sessions {
        if let Some(cut) = &s.cut
            && s.first_seq != 0
            && s.first_seq <= cut.through_seq
            && !shards[s.shard].journal.is_copy()
            && s.damaged.is_none()
        {
            plan.fates.insert(
                s.id,
                Fate::Cut {
                    through: cut.through_seq,
                    rule: "unfinished",
                    recorded: true,
                },
            );
        }
    }
    // Oldest first (by start, then id).
    let mut order: Vec<&Scanned> = sessions.iter().collect();
    order.sort_by_key(|s| (s.started_ms, s.id));
    if let Some(cutoff) = rules.cutoff_ms(now_ms) {
        for s in &order {
            if s.last_ms >= cutoff && s.cuttable_through.is_none() {
                continue;
            }
            if keep(s, skipped_out) {
                continue;
            }
            if s.last_ms < cutoff {
                plan.fates.insert(s.id, Fate::Remove { rule: "older_than" });
            } else if let Some(through) = s.cuttable_through {
                plan.fates.insert(
                    s.id,
                    Fate::Cut {
                        through,
                        rule: "older_than",
                        recorded: false,
                    },
                );
            }
        }
    }
    if let Some(keep_n) = rules.keep_sessions {
        let beyond = order.len().saturating_sub(keep_n as usize);
        for s in order.iter().take(beyond) {
            if matches!(plan.fates.get(&s.id), Some(Fate::Remove { .. })) || keep(s, skipped_out) {
                continue;
            }
            plan.fates.insert(
                s.id,
                Fate::Remove {
                    rule: "keep_sessions",
                },
            );
        }
    }
    if let Some(max) = rules.max_bytes {
        // What the sessions planned so far give back, then the oldest until under.
        let mut left = total;
        for s in &order {
            if matches!(plan.fates.get(&s.id), Some(Fate::Remove { .. })) {
                left = left.saturating_sub(exclusive.get(&s.id).copied().unwrap_or(0));
            }
        }
        for s in &order {
            if left <= max {
                break;
            }
            if matches!(plan.fates.get(&s.id), Some(Fate::Remove { .. })) || keep(s, skipped_out) {
                continue;
            }
            plan.fates.insert(s.id, Fate::Remove { rule: "max_bytes" });
            left = left.saturating_sub(exclusive.get(&s.id).copied().unwrap_or(0));
        }
    }
    plan
}
