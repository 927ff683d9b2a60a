//! What takes the space (`aido du`): per session, the bytes of its records, of the contents
//! only it names, of the contents it shares with other sessions, and of its snapshots; per
//! kind, what is on disk. Contents are attributed the way retention marks them (every 64-hex
//! name a record holds, change-set parts read for theirs, chunk lists for their chunks), so
//! "alone" is exactly what removing the session would let a sweep take.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use crate::record::SessionId;
use crate::stored::check_value;

use super::mark::{Marks, expand_parts, references};
use super::scan::{Scanned, Shard, scan_shard};
use super::{LIVE_QUIET_MS, MARKS_MAX, Paths, RetentionError, SnapshotStore};

/// Bytes a file or directory tree takes on disk (blocks allocated, directories included;
/// symbolic links are not followed). 0 when it does not exist.
pub fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for entry in entries.flatten() {
            total += disk_bytes(&entry.path());
        }
    }
    total
}

/// One session's share.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionUsage {
    /// The session.
    pub id: SessionId,
    /// Its shard's directory.
    pub shard: String,
    /// When it started.
    pub started_ms: u64,
    /// When its newest record was written.
    pub last_ms: u64,
    /// Its newest record is `session_ended`.
    pub ended: bool,
    /// Retention would not touch it now: its shard is held by another running aido, or it
    /// has not ended and was active within the last day.
    pub live: bool,
    /// Records stored.
    pub records: u64,
    /// Their bytes as stored (keys and values).
    pub record_bytes: u64,
    /// Contents (sled blobs, chunk lists, chunks, objects) only this session names.
    pub alone_bytes: u64,
    /// Contents it names that other sessions name too.
    pub shared_bytes: u64,
    /// Its workspace snapshots.
    pub snapshots: u64,
    /// Bytes on disk only they hold.
    pub snapshot_bytes: u64,
}

impl SessionUsage {
    /// What removing it would give back: its records, what only it names, its snapshots.
    pub fn reclaimable_bytes(&self) -> u64 {
        self.record_bytes + self.alone_bytes + self.snapshot_bytes
    }
}

/// Bytes by kind. `records` and `sled_blobs` are what sled holds (keys and values);
/// `journal_db` is what its files take on disk (the rest is sled's own: page headers, space
/// of removed keys not yet given back); the others are measured on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindBytes {
    /// Records, as stored.
    pub records: u64,
    /// Blobs, chunks and chunk lists, as stored in sled.
    pub sled_blobs: u64,
    /// The shards' sled directories on disk (records, sled blobs and sled's own).
    pub journal_db: u64,
    /// Object files on disk.
    pub objects: u64,
    /// Recovery markers and the journal directory's own entries.
    pub journal_other: u64,
    /// Snapshots the sessions' records name (some live beside their workspaces).
    pub snapshots: u64,
    /// Audit files on disk.
    pub audit: u64,
    /// Contents no record names (a sweep would take them).
    pub unreferenced: u64,
}

/// What `aido du` shows.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    /// Every session, oldest first.
    pub sessions: Vec<SessionUsage>,
    /// By kind.
    pub kinds: KindBytes,
    /// `AIDO_HOME/journal` on disk (journal_db + objects + journal_other).
    pub journal_bytes: u64,
}

/// Who names a blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    One(u32),
    Many,
}

/// Everything session `s` names: the 64-hex names in its records, the contents its change
/// sets' entries name, and the chunks of the chunked blobs among them.
pub(crate) fn session_names(
    shards: &[Shard],
    s: &Scanned,
) -> Result<std::collections::HashSet<[u8; 32]>, RetentionError> {
    let stores: Vec<_> = shards.iter().map(|s| &s.journal.trees().blobs).collect();
    let trees = shards[s.shard].journal.trees();
    let mut named = Marks::default();
    let mut parts = Vec::new();
    let mut failed = None;
    for item in trees.records.scan_prefix(s.id.as_bytes()) {
        let (k, v) = item.map_err(crate::ReadError::from)?;
        let Ok(seq) = crate::stored::seq_of(&k) else {
            continue;
        };
        let Ok(checked) = check_value(&trees.blobs, s.id, seq, &v) else {
            continue;
        };
        // A large record's own bytes are a blob under its hash.
        if checked.kept_as_blob {
            named.add(checked.hash)?;
        }
        references(
            &checked.stored,
            &mut |h| {
                if let Err(e) = named.add(h) {
                    failed = Some(e);
                }
            },
            &mut parts,
        );
        if let Some(e) = failed.take() {
            return Err(e);
        }
    }
    // A part that cannot be read names nothing more here (retention refuses to sweep then).
    let _ = expand_parts(&stores, &parts, &mut named);
    let mut chunks = Vec::new();
    for hash in &named.set {
        for store in &stores {
            if let Some(list) = store.chunked.get(hash).map_err(crate::ReadError::from)? {
                chunks.extend(chunks_of(&list));
            }
        }
    }
    for chunk in chunks {
        named.add(chunk)?;
    }
    Ok(named.set)
}

/// The chunk hashes of a stored chunk list.
pub(crate) fn chunks_of(list: &[u8]) -> Vec<[u8; 32]> {
    let hashes = &list[..list.len().saturating_sub(8) / 32 * 32];
    hashes
        .chunks(32)
        .filter_map(|c| <[u8; 32]>::try_from(c).ok())
        .collect()
}

/// Attribution of every stored content to the sessions that name it.
pub(crate) struct Attribution {
    /// Per session (index in the scan): bytes only it names.
    pub(crate) alone: Vec<u64>,
    /// Per session: bytes it names that others name too.
    pub(crate) shared: Vec<u64>,
    /// Bytes no record names.
    pub(crate) unreferenced: u64,
    /// sled blob bytes (keys and values).
    pub(crate) sled_blobs: u64,
    /// Object bytes on disk.
    pub(crate) objects: u64,
}

/// Attribute every blob of every shard to the scanned sessions that name it.
pub(crate) fn attribute(
    shards: &[Shard],
    sessions: &[Scanned],
) -> Result<Attribution, RetentionError> {
    let mut owners: HashMap<[u8; 32], Owner> = HashMap::new();
    for (index, s) in sessions.iter().enumerate() {
        for hash in session_names(shards, s)? {
            if let Some(owner) = owners.get_mut(&hash) {
                *owner = Owner::Many;
            } else if owners.len() < MARKS_MAX {
                owners.insert(hash, Owner::One(index as u32));
            } else {
                return Err(RetentionError::MarksMax { max: MARKS_MAX });
            }
        }
    }
    let mut out = Attribution {
        alone: vec![0; sessions.len()],
        shared: vec![0; sessions.len()],
        unreferenced: 0,
        sled_blobs: 0,
        objects: 0,
    };
    // The bytes of every shared content, to share out below.
    let mut shared: HashMap<[u8; 32], u64> = HashMap::new();
    let mut count = |key: &[u8], bytes: u64, out: &mut Attribution| {
        let Ok(key) = <[u8; 32]>::try_from(key) else {
            out.unreferenced += bytes;
            return;
        };
        match owners.get(&key) {
            Some(Owner::One(who)) => out.alone[*who as usize] += bytes,
            Some(Owner::Many) => *shared.entry(key).or_default() += bytes,
            None => out.unreferenced += bytes,
        }
    };
    for shard in shards {
        let trees = shard.journal.trees();
        for tree in [&trees.blobs.blobs, &trees.blobs.chunked] {
            for item in tree.iter() {
                let (k, v) = item.map_err(crate::ReadError::from)?;
                let bytes = (k.len() + v.len()) as u64;
                out.sled_blobs += bytes;
                count(&k, bytes, &mut out);
            }
        }
        let objects = trees.blobs.objects();
        for name in objects.list()? {
            let bytes = objects.disk_bytes(&name).unwrap_or(0);
            out.objects += bytes;
            count(name_key(&name).as_slice(), bytes, &mut out);
        }
    }
    if !shared.is_empty() {
        for (index, s) in sessions.iter().enumerate() {
            out.shared[index] = session_names(shards, s)?
                .iter()
                .filter_map(|h| shared.get(h))
                .sum();
        }
    }
    Ok(out)
}

fn name_key(name: &str) -> Vec<u8> {
    crate::pins::decode(name).map_or_else(Vec::new, |k| k.to_vec())
}

/// What takes the space under `paths`: every shard (those a running aido holds read from a
/// copy), the audit files, and the snapshots the sessions' records name (measured by
/// `snapshots`). Nothing is changed.
pub fn usage(
    paths: &Paths,
    now_ms: u64,
    snapshots: &dyn SnapshotStore,
) -> Result<Usage, RetentionError> {
    let mut skipped = Vec::new();
    let shards = super::scan::open_shards(&paths.journal, None, true, &mut skipped)?;
    let mut sessions = Vec::new();
    for (index, shard) in shards.iter().enumerate() {
        sessions.extend(scan_shard(&shard.journal, index, None)?);
    }
    sessions.sort_by_key(|s| (s.started_ms, s.id));
    let attribution = attribute(&shards, &sessions)?;
    let all_snapshots: Vec<_> = sessions
        .iter()
        .flat_map(|s| s.snapshots.iter().cloned())
        .collect();
    let snapshot_bytes = snapshots.usage(&all_snapshots);
    let mut usage = Usage::default();
    for (index, s) in sessions.iter().enumerate() {
        let live = shards[s.shard].journal.is_copy()
            || (!s.ended && s.last_ms.saturating_add(LIVE_QUIET_MS) > now_ms);
        let snapshot_bytes: u64 = s
            .snapshots
            .iter()
            .filter_map(|r| snapshot_bytes.get(&r.snapshot))
            .sum();
        usage.kinds.snapshots += snapshot_bytes;
        usage.kinds.records += s.record_bytes;
        usage.sessions.push(SessionUsage {
            id: s.id,
            shard: shards[s.shard].path.display().to_string(),
            started_ms: s.started_ms,
            last_ms: s.last_ms,
            ended: s.ended,
            live,
            records: s.records,
            record_bytes: s.record_bytes,
            alone_bytes: attribution.alone[index],
            shared_bytes: attribution.shared[index],
            snapshots: s.snapshots.len() as u64,
            snapshot_bytes,
        });
    }
    usage.kinds.sled_blobs = attribution.sled_blobs;
    usage.kinds.objects = attribution.objects;
    usage.kinds.unreferenced = attribution.unreferenced;
    usage.kinds.journal_db = shards.iter().map(|s| disk_bytes(&s.path)).sum();
    usage.journal_bytes = disk_bytes(&paths.journal);
    usage.kinds.journal_other = usage
        .journal_bytes
        .saturating_sub(usage.kinds.journal_db + usage.kinds.objects);
    usage.kinds.audit = disk_bytes(&paths.audit);
    Ok(usage)
}
