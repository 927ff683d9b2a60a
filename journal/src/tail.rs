//! The tail: what the writer wrote since the last flush, appended to a plain file with one
//! `write(2)` per batch and no fsync, so a record is in the kernel's hands (and survives kill -9
//! of aido) as soon as its batch is written, while sled keeps it in memory until the next
//! flush. A record that must survive a power loss (a mutation's proposal and outcome) is
//! acknowledged only after a flush; every flush empties the tail. When a journal is opened,
//! what the tail holds and sled lost (aido was killed before a flush) is put back first.
//!
//! A frame is `kind (1) | key length (4, LE) | value length (4, LE) | key | value | check (8)`,
//! the check being the first 8 bytes of the blake3 of everything before it; replay stops at
//! the first frame that is cut short or does not check out (a write the kill interrupted).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::blobs::BlobStore;

/// The tail's file name, inside the journal's directory.
pub(crate) const TAIL_FILE: &str = "aido-tail";

/// Frame kinds.
const RECORD: u8 = b'R';
const BLOB: u8 = b'B';
const SESSION: u8 = b'S';

/// Most bytes of one frame's value replay accepts (a blob is at most a chunk list away from
/// this; larger frames are a damaged tail).
const FRAME_BYTES_MAX: u64 = 1 << 34;

/// Frames of one batch, built as the batch is.
#[derive(Default)]
pub(crate) struct Frames(Vec<u8>);

impl Frames {
    fn push(&mut self, kind: u8, key: &[u8], value: &[u8]) {
        let start = self.0.len();
        self.0.push(kind);
        self.0.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.0
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.0.extend_from_slice(key);
        self.0.extend_from_slice(value);
        let check = blake3::hash(&self.0[start..]);
        self.0.extend_from_slice(&check.as_bytes()[..8]);
    }

    pub(crate) fn record(&mut self, key: &[u8], value: &[u8]) {
        self.push(RECORD, key, value);
    }

    pub(crate) fn blob(&mut self, hash_hex: &str, bytes: &[u8]) {
        self.push(BLOB, hash_hex.as_bytes(), bytes);
    }

    pub(crate) fn session(&mut self, key: &[u8], meta: &[u8]) {
        self.push(SESSION, key, meta);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The open tail of a writable journal.
pub(crate) struct Tail {
    file: std::fs::File,
    path: PathBuf,
}

impl Tail {
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        let path = dir.join(TAIL_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(Self { file, path })
    }

    /// Hand a batch's frames to the kernel (no fsync).
    pub(crate) fn write(&mut self, frames: &Frames) -> std::io::Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        self.file.write_all(&frames.0)
    }

    /// Everything in the tail is durable in sled now.
    pub(crate) fn empty(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Put back into the trees what the tail in `dir` holds and they lack. Returns how many
/// records it put back.
pub(crate) fn replay(
    dir: &Path,
    records: &sled::Tree,
    sessions: &sled::Tree,
    blobs: &BlobStore,
) -> std::io::Result<u64> {
    let mut bytes = Vec::new();
    match std::fs::File::open(dir.join(TAIL_FILE)) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    }
    let mut at = 0usize;
    let mut restored = 0;
    let io = |e: sled::Error| std::io::Error::other(e.to_string());
    while at + 9 <= bytes.len() {
        let kind = bytes[at];
        let key_len =
            u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap_or_default()) as usize;
        let value_len =
            u32::from_le_bytes(bytes[at + 5..at + 9].try_into().unwrap_or_default()) as usize;
        let body = at + 9;
        let end = body + key_len + value_len;
        if value_len as u64 > FRAME_BYTES_MAX || end + 8 > bytes.len() {
            break;
        }
        let check = blake3::hash(&bytes[at..end]);
        if bytes[end..end + 8] != check.as_bytes()[..8] {
            break;
        }
        let (key, value) = (&bytes[body..body + key_len], &bytes[body + key_len..end]);
        match kind {
            RECORD if !records.contains_key(key).map_err(io)? => {
                records.insert(key, value).map_err(io)?;
                restored += 1;
            }
            SESSION if !sessions.contains_key(key).map_err(io)? => {
                sessions.insert(key, value).map_err(io)?;
            }
            BLOB => {
                let hash = std::str::from_utf8(key).unwrap_or_default();
                blobs
                    .put(hash, value)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            _ => {}
        }
        at = end + 8;
    }
    Ok(restored)
}
