//! Removing what nothing marks from one shard: blobs and chunk lists in sled, object files
//! beside it. Each removal is made under the pins' lock, so contents the running aido stores
//! meanwhile are never taken (see [`crate::pins`]).

use serde::Serialize;

use super::RetentionError;
use super::mark::Marks;
use super::scan::Shard;

/// What a sweep removed (or, dry, would remove).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Swept {
    /// Entries of the `blobs` tree (contents, and chunks of large ones).
    pub(crate) blobs: u64,
    /// Entries of the `chunked` tree (chunk lists).
    pub(crate) chunked: u64,
    /// Object files.
    pub(crate) objects: u64,
    /// Bytes: keys and values in sled, blocks on disk for objects.
    pub(crate) bytes: u64,
}

/// Keys looked at per step (then removed), so an iterator is never held across removals.
const SWEEP_STEP_KEYS: usize = 4096;

fn sweep_tree(
    tree: &sled::Tree,
    shard: &Shard,
    marks: &Marks,
    dry: bool,
) -> Result<(u64, u64), RetentionError> {
    let pins = shard.journal.trees().blobs.pins();
    let mut removed = 0;
    let mut bytes = 0;
    let mut after: Option<sled::IVec> = None;
    loop {
        let range = match &after {
            Some(k) => tree.range::<&[u8], _>((
                std::ops::Bound::Excluded(k.as_ref()),
                std::ops::Bound::Unbounded,
            )),
            None => tree.iter(),
        };
        let mut step = Vec::new();
        for item in range.take(SWEEP_STEP_KEYS) {
            let (k, v) = item.map_err(crate::ReadError::from)?;
            step.push((k, v.len()));
        }
        let Some((last, _)) = step.last() else { break };
        after = Some(last.clone());
        for (k, len) in step {
            let Ok(hash) = <[u8; 32]>::try_from(k.as_ref()) else {
                continue;
            };
            if marks.contains(&hash) {
                continue;
            }
            if dry {
                removed += 1;
                bytes += (k.len() + len) as u64;
                continue;
            }
            let mut result = Ok(());
            let ran = pins.unless_pinned(&hash, || {
                result = tree.remove(&k).map(|_| ());
            });
            result.map_err(crate::ReadError::from)?;
            if ran {
                removed += 1;
                bytes += (k.len() + len) as u64;
            }
        }
    }
    Ok((removed, bytes))
}

/// Sweep one shard with `marks`.
pub(crate) fn sweep(shard: &Shard, marks: &Marks, dry: bool) -> Result<Swept, RetentionError> {
    let trees = shard.journal.trees();
    let mut swept = Swept::default();
    // Chunk lists first: a list gone first never names a chunk that is gone.
    let (n, bytes) = sweep_tree(&trees.blobs.chunked, shard, marks, dry)?;
    swept.chunked = n;
    swept.bytes += bytes;
    let (n, bytes) = sweep_tree(&trees.blobs.blobs, shard, marks, dry)?;
    swept.blobs = n;
    swept.bytes += bytes;
    let objects = trees.blobs.objects();
    for name in objects.list()? {
        let Some(hash) = crate::pins::decode(&name) else {
            continue;
        };
        if marks.contains(&hash) {
            continue;
        }
        let freed = if dry {
            objects.disk_bytes(&name)
        } else {
            objects
                .remove(&name)
                .map_err(|e| RetentionError::io("remove", objects.dir(), e))?
        };
        if let Some(freed) = freed {
            swept.objects += 1;
            swept.bytes += freed;
        }
    }
    if !dry {
        trees.db.flush().map_err(|e| crate::AppendError::Storage {
            message: e.to_string(),
        })?;
    }
    Ok(swept)
}
