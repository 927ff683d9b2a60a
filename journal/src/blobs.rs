//! The blob store, and long strings leaving records for it. A string longer than
//! `INLINE_STRING_BYTES_MAX` (1024 bytes) becomes `{"$blob": "<blake3 hex>"}`; object keys that
//! start with `$` get one more `$` so that no value of the agent's can pass for a blob
//! reference.
//!
//! Where blobs live: their bytes in an append-only file beside sled (`blobs.log`), or, for a
//! stream (a large before-image), in a file of their own under `blobs/`; sled holds only the
//! index (blake3 -> where, 17 bytes). Why not in sled: sled keeps every value it was given, and
//! every page it read, in memory until its page cache's LRU pages it out, and that LRU takes
//! its accesses in blocks of 64 per shard over 256 shards, so some 16,000 of them go by before
//! anything leaves, whatever `cache_capacity` says. Content-addressed keys are random, so each
//! blob read or written pulled in a page of other blobs: aido's memory grew with every call's
//! blobs into gigabytes. Journals of earlier aidos keep blobs in the `blobs` (whole, or 1 MiB
//! chunks) and `chunked` (chunk lists) trees; those are still read.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::error::{AppendError, ReadError};

/// Strings up to this many bytes stay inline in records.
pub(crate) const INLINE_STRING_BYTES_MAX: usize = 1024;

const BLOB_KEY: &str = "$blob";

/// The blob log's file name, inside the journal's directory.
pub(crate) const LOG_FILE: &str = "blobs.log";

/// The directory of streamed blobs (one file each), inside the journal's directory.
pub(crate) const STREAMS_DIR: &str = "blobs";

/// The largest chunk a journal written by an earlier aido holds (its chunks were 1 MiB):
/// what reading a legacy chunk list accepts.
const LEGACY_CHUNK_BYTES_MAX: u64 = 1 << 20;

/// Bytes read from a stream at a time by [`BlobStore::put_stream`].
const STREAM_READ_BYTES: usize = 1 << 20;

/// Index values: the bytes are in the log at an offset, or in a file of their own.
const IN_LOG: u8 = b'L';
const IN_FILE: u8 = b'F';

/// The blake3 of some bytes, as 64 hex digits.
pub(crate) fn hash_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Contents by blake3. Cheap to clone; safe to use from any thread. A blob stored here is
/// durable with the journal's next flush (which syncs the log before sled), and every durable
/// append flushes, so a body stores what an effect names before the record that names it is
/// acknowledged; a streamed blob is synced before [`BlobStore::put_stream`] returns.
#[derive(Clone, Debug)]
pub struct BlobStore {
    /// blake3 -> `L | offset | length` (big-endian u64s) in the log, or `F | length`, the file
    /// `blobs/<hex>`.
    pub(crate) index: sled::Tree,
    /// Earlier aidos' blobs: whole, or 1 MiB chunks, by blake3.
    pub(crate) blobs: sled::Tree,
    /// Earlier aidos' chunk lists: blake3 -> chunk hashes and size.
    pub(crate) chunked: sled::Tree,
    log: Arc<Log>,
}

/// The blob log: an append-only file, written at the offset it tracks (so a write that failed
/// half-way is overwritten by the next, never left in the middle).
#[derive(Debug)]
struct Log {
    /// The journal's directory.
    dir: PathBuf,
    file: std::fs::File,
    /// Where the next blob goes; held while a blob is written and indexed.
    end: Mutex<u64>,
    /// Names streams being written.
    streams: AtomicU64,
}

/// A blob that is stored: its name and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBlob {
    /// blake3 of the contents, hex.
    pub hash: String,
    /// Bytes.
    pub bytes: u64,
}

fn storage(e: sled::Error) -> AppendError {
    AppendError::Storage {
        message: e.to_string(),
    }
}

fn io(what: &str, path: &Path, e: std::io::Error) -> AppendError {
    AppendError::Storage {
        message: format!("{what} {}: {e}", path.display()),
    }
}

impl BlobStore {
    /// The store of the journal in `dir` (whose sled database is `db`): its index and legacy
    /// trees, and its log, made if missing (a log that cannot be opened is sled's I/O error).
    pub(crate) fn open(db: &sled::Db, dir: &Path) -> sled::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOG_FILE))?;
        let end = file.metadata()?.len();
        Ok(Self {
            index: db.open_tree("blob_index")?,
            blobs: db.open_tree("blobs")?,
            chunked: db.open_tree("chunked")?,
            log: Arc::new(Log {
                dir: dir.to_owned(),
                file,
                end: Mutex::new(end),
                streams: AtomicU64::new(0),
            }),
        })
    }

    /// Make every blob stored so far durable now (the log synced, then the index flushed),
    /// without waiting for the journal's next durable append.
    pub fn flush(&self) -> Result<(), AppendError> {
        self.sync()?;
        self.index.flush().map_err(storage)?;
        Ok(())
    }

    /// Sync the log to its device: before sled is flushed, so no durable index entry ever
    /// names bytes that are not.
    pub(crate) fn sync(&self) -> Result<(), AppendError> {
        self.log
            .file
            .sync_data()
            .map_err(|e| io("syncing", &self.log.dir.join(LOG_FILE), e))
    }

    /// Store `bytes` under `hash` (their blake3, hex, computed by the caller once): appended to
    /// the log and indexed. Contents already stored are not written again.
    pub fn put(&self, hash: &str, bytes: &[u8]) -> Result<(), AppendError> {
        debug_assert_eq!(hash, hash_hex(bytes), "a blob is stored under its own hash");
        let key = decode_hash(hash).ok_or_else(|| AppendError::Storage {
            message: format!("{hash} is not a blake3 hash"),
        })?;
        // Held from the lookup to the index entry: one writer at a time, each blob once.
        let mut end = self.log.end.lock().unwrap_or_else(|p| p.into_inner());
        if self.contains_key(&key).map_err(storage)? {
            return Ok(());
        }
        let at = *end;
        self.log
            .file
            .write_all_at(bytes, at)
            .map_err(|e| io("appending to", &self.log.dir.join(LOG_FILE), e))?;
        let mut place = Vec::with_capacity(17);
        place.push(IN_LOG);
        place.extend_from_slice(&at.to_be_bytes());
        place.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        self.index.insert(key, place).map_err(storage)?;
        *end = at + bytes.len() as u64;
        Ok(())
    }

    /// Stream `reader` into the store, hashing as it goes: for contents too large to hold in
    /// memory (a before-image of a big file). It goes to a file of its own (synced, with its
    /// directory, before this returns), so the log is not held while it is read. At most `max`
    /// bytes are read; more is an error ([`AppendError::BlobTooLarge`]) and nothing is stored.
    pub fn put_stream(&self, reader: &mut dyn Read, max: u64) -> Result<StoredBlob, AppendError> {
        let dir = self.log.dir.join(STREAMS_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| io("making", &dir, e))?;
        let n = self.log.streams.fetch_add(1, Ordering::Relaxed);
        let partial = dir.join(format!(".stream-{}-{n}", std::process::id()));
        let written = self.stream_into(&partial, reader, max);
        let (hash, total) = match written {
            Ok(done) => done,
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        };
        let key = hash.as_bytes();
        let _held = self.log.end.lock().unwrap_or_else(|p| p.into_inner());
        if self.contains_key(key).map_err(storage)? {
            let _ = std::fs::remove_file(&partial);
        } else {
            let name = dir.join(hash.to_hex().as_str());
            std::fs::rename(&partial, &name).map_err(|e| io("naming", &name, e))?;
            std::fs::File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("syncing", &dir, e))?;
            let mut place = Vec::with_capacity(9);
            place.push(IN_FILE);
            place.extend_from_slice(&total.to_be_bytes());
            self.index.insert(key, place).map_err(storage)?;
        }
        Ok(StoredBlob {
            hash: hash.to_hex().to_string(),
            bytes: total,
        })
    }

    /// Copy `reader` into the new file `path`, synced: the contents' hash and size.
    fn stream_into(
        &self,
        path: &Path,
        reader: &mut dyn Read,
        max: u64,
    ) -> Result<(blake3::Hash, u64), AppendError> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io("making", path, e))?;
        let mut whole = blake3::Hasher::new();
        let mut total = 0u64;
        let mut buf = vec![0u8; STREAM_READ_BYTES];
        loop {
            let n = reader.read(&mut buf).map_err(|e| AppendError::Storage {
                message: format!("reading contents to keep: {e}"),
            })?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > max {
                return Err(AppendError::BlobTooLarge { bytes: total, max });
            }
            whole.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| io("writing", path, e))?;
        }
        file.sync_all().map_err(|e| io("syncing", path, e))?;
        Ok((whole.finalize(), total))
    }

    /// Whether the index names `key`. Blobs an earlier aido kept in the legacy trees are not
    /// looked up (that would page their random leaves in): at worst one is stored again.
    fn contains_key(&self, key: &[u8]) -> sled::Result<bool> {
        self.index.contains_key(key)
    }

    /// The bytes of a blob, whole, checked against its name. `None` when no blob of that name
    /// is stored (a name that is not a blake3 hash names none); a blob that is stored but
    /// damaged (its bytes gone or not matching its hash, a legacy chunk missing, the size
    /// wrong) is [`ReadError::BlobCorrupt`], never `None`.
    pub fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, ReadError> {
        let Some(key) = decode_hash(hash) else {
            return Ok(None);
        };
        let damaged = |reason: String| ReadError::BlobCorrupt {
            hash: hash.to_owned(),
            reason,
        };
        let Some(place) = self.index.get(key)? else {
            return self.get_legacy(hash, &key);
        };
        let number = |at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(place.get(at..at + 8)?.try_into().ok()?))
        };
        let bytes = match (place.first(), place.len()) {
            (Some(&IN_LOG), 17) => {
                let (Some(at), Some(len)) = (number(1), number(9)) else {
                    return Err(damaged("its index entry is not one".into()));
                };
                let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
                self.log
                    .file
                    .read_exact_at(&mut bytes, at)
                    .map_err(|e| damaged(format!("its {len} bytes at {at} in the log: {e}")))?;
                bytes
            }
            (Some(&IN_FILE), 9) => {
                let path = self.log.dir.join(STREAMS_DIR).join(hash);
                let bytes = std::fs::read(&path)
                    .map_err(|e| damaged(format!("reading {}: {e}", path.display())))?;
                if Some(bytes.len() as u64) != number(1) {
                    return Err(damaged(format!(
                        "{} holds {} bytes, not {:?}",
                        path.display(),
                        bytes.len(),
                        number(1)
                    )));
                }
                bytes
            }
            _ => return Err(damaged("its index entry is not one".into())),
        };
        if blake3::hash(&bytes).as_bytes() != &key {
            return Err(damaged("its bytes do not match its hash".into()));
        }
        Ok(Some(bytes))
    }

    /// A blob an earlier aido kept in sled: whole, or in chunks of at most 1 MiB.
    fn get_legacy(&self, hash: &str, key: &[u8]) -> Result<Option<Vec<u8>>, ReadError> {
        if let Some(v) = self.blobs.get(key)? {
            return Ok(Some(v.to_vec()));
        }
        let Some(list) = self.chunked.get(key)? else {
            return Ok(None);
        };
        let damaged = |reason: String| ReadError::BlobCorrupt {
            hash: hash.to_owned(),
            reason,
        };
        let (hashes, size) =
            split_list(&list).ok_or_else(|| damaged("its chunk list is not one".into()))?;
        let chunks = hashes.len() as u64 / 32;
        // A list of n chunks holds more than n - 1 and at most n chunks' worth of bytes.
        if size > chunks * LEGACY_CHUNK_BYTES_MAX
            || size <= (chunks.max(1) - 1) * LEGACY_CHUNK_BYTES_MAX
        {
            return Err(damaged(format!("{chunks} chunks cannot hold {size} bytes")));
        }
        let mut out = Vec::with_capacity(size as usize);
        for h in hashes.chunks(32) {
            match self.blobs.get(h)? {
                Some(chunk) => out.extend_from_slice(&chunk),
                None => {
                    return Err(damaged(format!("its chunk {} is missing", hex::encode(h))));
                }
            }
        }
        if out.len() as u64 != size {
            return Err(damaged(format!(
                "its chunks hold {} bytes; its list says {size}",
                out.len()
            )));
        }
        Ok(Some(out))
    }
}

fn split_list(list: &[u8]) -> Option<(&[u8], u64)> {
    let at = list.len().checked_sub(8)?;
    let (hashes, size) = list.split_at(at);
    if hashes.len() % 32 != 0 {
        return None;
    }
    Some((hashes, u64::from_be_bytes(size.try_into().ok()?)))
}

fn decode_hash(hash: &str) -> Option<[u8; 32]> {
    let bytes = hex::decode(hash).ok()?;
    bytes.try_into().ok()
}

/// Move long strings out of `value` into `out` (hash, bytes). A string whose bytes are in
/// `out` already (a body's blob, or the same contents twice in one event, as a read's text and
/// its structured content) takes that blob's name: contents are hashed, and kept, once.
pub(crate) fn externalize(value: Value, out: &mut Vec<(String, Vec<u8>)>) -> Value {
    match value {
        Value::String(s) if s.len() > INLINE_STRING_BYTES_MAX => {
            let known = out
                .iter()
                .find(|(_, bytes)| bytes.as_slice() == s.as_bytes())
                .map(|(hash, _)| hash.clone());
            let hash = match known {
                Some(hash) => hash,
                None => {
                    let hash = hash_hex(s.as_bytes());
                    out.push((hash.clone(), s.into_bytes()));
                    hash
                }
            };
            let mut reference = Map::new();
            reference.insert(BLOB_KEY.to_owned(), Value::String(hash));
            Value::Object(reference)
        }
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| externalize(v, out)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = if k.starts_with('$') {
                        format!("${k}")
                    } else {
                        k
                    };
                    (key, externalize(v, out))
                })
                .collect(),
        ),
        other => other,
    }
}

/// The bytes of a blob by hash, `None` when it is not stored.
pub(crate) type Fetch<'a> = dyn Fn(&str) -> Result<Option<Vec<u8>>, ReadError> + 'a;

/// Put blobs back into the record at `seq`. `fetch` returns a blob's bytes by hash; a missing
/// or non-UTF-8 blob makes the record [`ReadError::Corrupt`], naming the hash; a blob that
/// cannot be read is that read's error.
pub(crate) fn internalize(value: Value, seq: u64, fetch: &Fetch<'_>) -> Result<Value, ReadError> {
    let corrupt = |reason: String| ReadError::Corrupt { seq, reason };
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|v| internalize(v, seq, fetch))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(hash)) = map.get(BLOB_KEY)
            {
                let bytes =
                    fetch(hash)?.ok_or_else(|| corrupt(format!("blob {hash} is missing")))?;
                return String::from_utf8(bytes)
                    .map(Value::String)
                    .map_err(|_| corrupt(format!("blob {hash} is not UTF-8")));
            }
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k.strip_prefix('$') {
                        Some(rest) => rest.to_owned(),
                        None => k,
                    };
                    internalize(v, seq, fetch).map(|v| (key, v))
                })
                .collect::<Result<Map<_, _>, _>>()
                .map(Value::Object)
        }
        other => Ok(other),
    }
}

/// Every blob hash a stored value refers to.
pub(crate) fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(hash)) = map.get(BLOB_KEY)
            {
                out.push(hash.clone());
                return;
            }
            map.values().for_each(|v| references(v, out));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn store() -> (tempfile::TempDir, BlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let store = BlobStore::open(&db, dir.path()).unwrap();
        (dir, store)
    }

    /// Contents of any size round-trip, whether put whole or streamed, name the same hash,
    /// and are kept once; sled holds only the index.
    #[test]
    fn blobs_of_any_size_round_trip_and_sled_holds_only_the_index() {
        let (dir, s) = store();
        for size in [0, 1, 4095, 4096, 70_000, 3 << 20] {
            let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            let hash = hash_hex(&bytes);
            s.put(&hash, &bytes).unwrap();
            assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]), "{size}");
            let streamed = s.put_stream(&mut &bytes[..], u64::MAX).unwrap();
            assert_eq!(streamed.hash, hash, "{size}");
            assert_eq!(streamed.bytes, size as u64);
            assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]), "{size}");
        }
        // Streamed first: a file of its own; put again: not written again.
        let big: Vec<u8> = (0..(2 << 20)).map(|i| (i % 241) as u8).collect();
        let streamed = s.put_stream(&mut &big[..], u64::MAX).unwrap();
        assert!(dir.path().join(STREAMS_DIR).join(&streamed.hash).is_file());
        let log = std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
        s.put(&streamed.hash, &big).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len(),
            log
        );
        assert_eq!(s.get(&streamed.hash).unwrap().as_deref(), Some(&big[..]));
        let err = s.put_stream(&mut &big[..], 10).unwrap_err();
        assert_eq!(err.code(), "journal_blob_too_large");
        // Nothing left half-streamed, nothing in sled but 17-byte index entries.
        let names: Vec<_> = std::fs::read_dir(dir.path().join(STREAMS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        assert!(s.blobs.is_empty() && s.chunked.is_empty());
        for item in s.index.iter() {
            assert!(item.unwrap().1.len() <= 17);
        }
    }

    /// A blob whose bytes are gone or altered is damaged, not absent.
    #[test]
    fn a_damaged_blob_is_an_error_not_none() {
        let (dir, s) = store();
        let bytes = b"contents that will be altered on disk".repeat(100);
        let hash = hash_hex(&bytes);
        s.put(&hash, &bytes).unwrap();
        let log = dir.path().join(LOG_FILE);
        let mut altered = std::fs::read(&log).unwrap();
        altered[7] ^= 1;
        std::fs::write(&log, &altered).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        let streamed = s.put_stream(&mut &bytes[1..], u64::MAX).unwrap();
        std::fs::remove_file(dir.path().join(STREAMS_DIR).join(&streamed.hash)).unwrap();
        assert_eq!(
            s.get(&streamed.hash).unwrap_err().code(),
            "journal_blob_corrupt"
        );
        s.index
            .insert(decode_hash(&hash).unwrap(), &b"L1234"[..])
            .unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        assert_eq!(s.get(&hash_hex(b"never stored")).unwrap(), None);
    }

    /// A blob an earlier aido kept in sled (whole, or in 1 MiB chunks) still reads back, and a
    /// damaged chunk list is an error.
    #[test]
    fn blobs_kept_in_legacy_trees_read_back() {
        let (_d, s) = store();
        let small = b"kept whole by an earlier aido".to_vec();
        s.blobs
            .insert(blake3::hash(&small).as_bytes(), &small[..])
            .unwrap();
        assert_eq!(s.get(&hash_hex(&small)).unwrap(), Some(small));
        let bytes: Vec<u8> = (0..(1 << 20) + 300_000).map(|i| (i % 249) as u8).collect();
        let mut list = Vec::new();
        for chunk in bytes.chunks(1 << 20) {
            let h = blake3::hash(chunk);
            s.blobs.insert(h.as_bytes(), chunk).unwrap();
            list.extend_from_slice(h.as_bytes());
        }
        list.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        let hash = hash_hex(&bytes);
        let key = decode_hash(&hash).unwrap();
        s.chunked.insert(key, list.clone()).unwrap();
        assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]));
        // The list's size says more than its chunks can hold.
        let mut lying = list.clone();
        let at = lying.len() - 8;
        lying[at..].copy_from_slice(&(10u64 << 20).to_be_bytes());
        s.chunked.insert(key, lying).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        s.chunked.insert(key, &list[..7]).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        s.chunked.insert(key, list.clone()).unwrap();
        s.blobs.remove(&list[32..64]).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
    }

    #[test]
    fn long_strings_round_trip_and_dollar_keys_cannot_forge_a_blob() {
        let long = "x".repeat(INLINE_STRING_BYTES_MAX + 1);
        let original =
            json!({"a": long, "b": ["short", long], "$blob": "forged", "c": {"$blob": "also"}});
        let mut blobs = Vec::new();
        let stored = externalize(original.clone(), &mut blobs);
        assert_eq!(blobs.len(), 1, "the same contents are hashed and kept once");
        let mut refs = Vec::new();
        references(&stored, &mut refs);
        assert_eq!(refs.len(), 2, "the forged keys are escaped, not references");
        assert_eq!(refs[0], refs[1]);
        assert_eq!(refs[0], hash_hex(long.as_bytes()));
        let store: HashMap<_, _> = blobs.into_iter().collect();
        let back = internalize(stored, 1, &|h| Ok(store.get(h).cloned())).unwrap();
        assert_eq!(back, original);
    }
}
