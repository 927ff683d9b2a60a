//! Which records are on a session's current timeline. A `rewound` record at seq R that kept
//! the records up to N (its cut) for the rewind proposed at P abandons the records
//! N < seq < P: they stay in the journal (and in the hash chain), but the session's state no
//! longer includes them.

use std::collections::BTreeMap;

use crate::record::{Event, Record};

/// For each abandoned seq, the branch that abandoned it (the `branch` of the rewind).
pub fn abandoned(records: &[Record]) -> BTreeMap<u64, u32> {
    let mut out = BTreeMap::new();
    for r in records {
        if let (
            Some(cut),
            Event::Rewound {
                proposal, branch, ..
            },
        ) = (r.event.rewound_cut(), &r.event)
        {
            for seq in cut + 1..*proposal {
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
