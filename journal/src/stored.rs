//! How records are stored, shared by the journal's readers and its writer: the trees, the
//! key of (session, seq), the check every stored value passes, the journal's bounds and commit
//! mode, and what an append answers.

use serde::Serialize;

use crate::blobs;
use crate::error::ReadError;
use crate::record::{FORMAT_VERSION, GENESIS, SessionId};

/// The journal's named bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest encoded record, after long strings moved to blobs.
    pub record_bytes_max: u64,
    /// Largest blob.
    pub blob_bytes_max: u64,
    /// Most records one session may hold.
    pub records_per_session_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            record_bytes_max: 1 << 20,
            blob_bytes_max: 64 << 20,
            records_per_session_max: 1_000_000,
        }
    }
}

/// How the writer makes records durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitMode {
    /// Drain the queue, write it as one batch, flush once, acknowledge all (the default).
    Group,
    /// Flush after every record (for comparison in benchmarks).
    PerRecord,
}

/// A record that is on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Appended {
    /// Its seq.
    pub seq: u64,
    /// Its hash (hex).
    pub hash: String,
}

/// The journal's sled trees and its blob store.
pub(crate) struct Trees {
    pub(crate) db: sled::Db,
    pub(crate) records: sled::Tree,
    pub(crate) blobs: blobs::BlobStore,
    pub(crate) sessions: sled::Tree,
}

/// The records key of (session, seq): 16 bytes of id, then the seq big-endian.
pub(crate) fn key(session: SessionId, seq: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..16].copy_from_slice(session.as_bytes());
    k[16..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The seq of a records key; a key that is not 24 bytes is not a record key.
pub(crate) fn seq_of(key: &[u8]) -> Result<u64, ReadError> {
    key.get(16..)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| ReadError::KeyCorrupt {
            key: hex::encode(key),
        })
}

/// A stored record value that checks out.
pub(crate) struct Checked {
    /// Its hash, as stored and as computed.
    pub(crate) hash: [u8; 32],
    /// Its JSON, blobs still by reference.
    pub(crate) stored: serde_json::Value,
    /// Its bytes are in the blob store under its hash (it is larger than
    /// [`RECORD_INLINE_BYTES_MAX`]): what retention marks besides what the record names.
    pub(crate) kept_as_blob: bool,
}

/// A record whose stored value (its hash and its bytes) is larger than this keeps its bytes in
/// the blob store (an object, see [`crate::objects`]) under its own hash, and the records tree
/// holds the hash alone (32 bytes, which an inline value never is: a record's JSON is never
/// empty). So no sled value is much larger than this: sled keeps some 16,000 recent values in
/// memory whatever its cache says, and their size is what bounds aido's memory. A record is
/// that large when it holds many strings short enough to stay inline (a `stat_files` of a
/// thousand paths).
pub(crate) const RECORD_INLINE_BYTES_MAX: usize = crate::objects::OBJECT_BYTES_MIN as usize;

/// Check a value stored under (session, seq), as every reader and the writer's head do: its
/// bytes (inline, or in `blobs` under its hash) match its hash, its format is one this aido
/// reads, and its header names its key.
pub(crate) fn check_value(
    blobs: &blobs::BlobStore,
    session: SessionId,
    seq: u64,
    value: &[u8],
) -> Result<Checked, ReadError> {
    let corrupt = |reason: String| ReadError::Corrupt { seq, reason };
    if value.len() < 32 {
        return Err(corrupt("shorter than its hash".into()));
    }
    let kept;
    let (hash, bytes) = if value.len() == 32 {
        kept = blobs
            .get(&hex::encode(value))?
            .ok_or_else(|| corrupt("its bytes are missing from the blob store".into()))?;
        (value, &kept[..])
    } else {
        value.split_at(32)
    };
    if blake3::hash(bytes).as_bytes() != hash {
        return Err(corrupt("its bytes do not match its hash".into()));
    }
    let stored: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    let version = stored["v"].as_u64().unwrap_or(0);
    if version == 0 || version > u64::from(FORMAT_VERSION) {
        return Err(ReadError::UnsupportedVersion {
            seq,
            version,
            supported: FORMAT_VERSION,
        });
    }
    if stored["seq"].as_u64() != Some(seq) {
        return Err(corrupt("its seq field does not match its key".into()));
    }
    if stored["session"].as_str() != Some(session.to_string().as_str()) {
        return Err(corrupt("its session field does not match its key".into()));
    }
    let mut own = [0u8; 32];
    own.copy_from_slice(hash);
    Ok(Checked {
        hash: own,
        stored,
        kept_as_blob: value.len() == 32,
    })
}

/// The `prev` of a session's first record.
pub(crate) fn prev_of_genesis() -> [u8; 32] {
    GENESIS
}
