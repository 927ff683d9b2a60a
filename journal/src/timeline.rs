//! Which records are on a session's current timeline. A `rewound` record at seq R going back
//! to seq N by the rewind proposed at P abandons the records N < seq < P: they stay in the
//! journal (and in the hash chain), but the session's state no longer includes them.

use std::collections::BTreeMap;

use crate::record::{Event, Record};

/// For each abandoned seq, the branch that abandoned it (the `branch` of the rewind).
pub fn abandoned(records: &[Record]) -> BTreeMap<u64, u32> {
    let mut out = BTreeMap::new();
    for r in records {
        if let Event::Rewound {
            to_seq,
            proposal,
            branch,
            ..
        } = &r.event
        {
            for seq in to_seq + 1..*proposal {
                out.entry(seq).or_insert(*branch);
            }
        }
    }
    out
}

/// The records on the current timeline, oldest first.
pub fn live(records: &[Record]) -> Vec<&Record> {
    let gone = abandoned(records);
    records
        .iter()
        .filter(|r| !gone.contains_key(&r.seq))
        .collect()
}
