//! Long strings leave records for the blob store. A string longer than
//! `INLINE_STRING_BYTES_MAX` (1024 bytes) becomes `{"$blob": "<blake3 hex>"}`; object keys that
//! start with `$` get one more `$` so that no value of the agent's can pass for a blob
//! reference.

use std::io::Read;

use serde_json::{Map, Value};

use crate::error::{AppendError, ReadError};

/// Strings up to this many bytes stay inline in records.
pub(crate) const INLINE_STRING_BYTES_MAX: usize = 1024;

const BLOB_KEY: &str = "$blob";

/// The blake3 of some bytes, as 64 hex digits.
pub(crate) fn hash_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Journals of earlier aidos stored contents larger than this as chunks of this size, each
/// under its own blake3, with the list of chunks under the whole contents' blake3 in the
/// `chunked` tree; they are still read. Contents of that size are objects now.
pub const BLOB_CHUNK_BYTES: usize = 1 << 20;

/// Contents by blake3: the `blobs` tree (contents smaller than
/// [`crate::objects::OBJECT_BYTES_MIN`]), the objects (larger ones), and the `chunked` tree
/// (chunk lists of earlier aidos). Cheap to clone; safe to use from any thread. A blob stored
/// here is durable with the journal's next flush, which every durable append makes (objects
/// synced before sled), so a body stores what an effect names before the record that names it
/// is acknowledged.
#[derive(Clone, Debug)]
pub struct BlobStore {
    pub(crate) blobs: sled::Tree,
    pub(crate) chunked: sled::Tree,
    /// Large contents, as files beside the journal.
    pub(crate) objects: crate::objects::Objects,
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

impl BlobStore {
    /// Make every blob stored so far durable now (a sled flush), without waiting for the
    /// journal's next durable append.
    pub fn flush(&self) -> Result<(), AppendError> {
        self.objects.sync()?;
        self.blobs.flush().map_err(storage)?;
        self.chunked.flush().map_err(storage)?;
        Ok(())
    }

    /// The object files (contents of [`crate::objects::OBJECT_BYTES_MIN`] or more).
    pub fn objects(&self) -> &crate::objects::Objects {
        &self.objects
    }

    /// Store the contents of `source`, read from its start, streamed (memory stays at one
    /// buffer whatever the size) and named by their blake3: large ones as objects (holes
    /// kept, reflinked where the file system can), small ones in sled. More than `max` bytes
    /// is [`AppendError::BlobTooLarge`] and nothing is named.
    pub fn put_file(&self, source: &std::fs::File, max: u64) -> Result<StoredBlob, AppendError> {
        let size = source
            .metadata()
            .map_err(|e| AppendError::Storage {
                message: format!("stat contents to keep: {e}"),
            })?
            .len();
        if size > max {
            return Err(AppendError::BlobTooLarge { bytes: size, max });
        }
        if size >= crate::objects::OBJECT_BYTES_MIN {
            return self.objects.put_file(source, max);
        }
        let bytes =
            crate::objects::read_all(source, max, size).map_err(|e| AppendError::Storage {
                message: format!("reading contents to keep: {e}"),
            })?;
        if bytes.len() as u64 > max {
            return Err(AppendError::BlobTooLarge {
                bytes: bytes.len() as u64,
                max,
            });
        }
        let hash = hash_hex(&bytes);
        if bytes.len() as u64 >= crate::objects::OBJECT_BYTES_MIN {
            // It grew while it was read.
            self.objects.put_bytes(&hash, &bytes)?;
        } else {
            self.put(&hash, &bytes)?;
        }
        Ok(StoredBlob {
            hash,
            bytes: bytes.len() as u64,
        })
    }

    /// Every entry of a stored change set ([`aido_actions::Effect::Changes`]), part by part
    /// (one part in memory at a time); `visit` returns false to stop. A missing or damaged
    /// part is an error naming it.
    pub fn visit_change_set(
        &self,
        parts: &[String],
        mut visit: impl FnMut(&aido_actions::changes::Entry) -> bool,
    ) -> Result<(), String> {
        for part in parts {
            let bytes = self
                .get(part)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("change set part {part} is not in the blob store"))?;
            if hash_hex(&bytes) != *part {
                return Err(format!("change set part {part} does not hash to its name"));
            }
            for entry in aido_actions::changes::decode_part(&bytes)? {
                if !visit(&entry) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// True when contents of this name are stored (in sled or as an object).
    pub fn contains(&self, hash: &str) -> bool {
        match decode_hash(hash) {
            Some(key) => self.contains_key(&key).unwrap_or(false) || self.objects.contains(hash),
            None => false,
        }
    }

    /// Write the contents named `hash` into `target` from its start (an object's holes kept)
    /// and size it; the bytes written, `None` when nothing of that name is stored.
    pub fn copy_to(&self, hash: &str, target: &std::fs::File) -> Result<Option<u64>, ReadError> {
        if let Some(bytes) = self.objects.copy_to(hash, target)? {
            return Ok(Some(bytes));
        }
        let Some(bytes) = self.get(hash)? else {
            return Ok(None);
        };
        let failed = |e: std::io::Error| ReadError::BlobCorrupt {
            hash: hash.to_owned(),
            reason: format!("writing it out: {e}"),
        };
        use std::os::unix::fs::FileExt;
        target.set_len(0).map_err(failed)?;
        target.write_all_at(&bytes, 0).map_err(failed)?;
        target.set_len(bytes.len() as u64).map_err(failed)?;
        Ok(Some(bytes.len() as u64))
    }

    /// Store `bytes` under `hash` (their blake3, hex, computed by the caller once): in sled
    /// when smaller than [`crate::objects::OBJECT_BYTES_MIN`], else as an object. Contents
    /// already stored are not written again.
    pub fn put(&self, hash: &str, bytes: &[u8]) -> Result<(), AppendError> {
        debug_assert_eq!(hash, hash_hex(bytes), "a blob is stored under its own hash");
        let key = decode_hash(hash).ok_or_else(|| AppendError::Storage {
            message: format!("{hash} is not a blake3 hash"),
        })?;
        if bytes.len() as u64 >= crate::objects::OBJECT_BYTES_MIN {
            // Pins, looks for and writes the object.
            return self.objects.put_bytes(hash, bytes);
        }
        self.pins().pin(&key);
        if self.contains_key(&key).map_err(storage)? {
            return Ok(());
        }
        self.blobs.insert(key, bytes).map_err(storage)?;
        Ok(())
    }

    /// Stream `reader` into the store, hashing as it goes: for contents too large to hold in
    /// memory (a before-image of a big file). It becomes an object whatever its size. At most
    /// `max` bytes are read; more is an error ([`AppendError::BlobTooLarge`]) and nothing is
    /// stored.
    pub fn put_stream(&self, reader: &mut dyn Read, max: u64) -> Result<StoredBlob, AppendError> {
        self.objects.put_reader(reader, max)
    }

    /// Make the objects stored so far durable (one `syncfs` when any was written): before
    /// sled is flushed, so no durable record names contents that are not.
    pub(crate) fn sync(&self) -> Result<(), AppendError> {
        self.objects.sync()
    }

    /// Store `bytes` as chunks of [`BLOB_CHUNK_BYTES`] and a chunk list, as aidos before
    /// objects did: for the tests of reading and sweeping such journals.
    #[cfg(test)]
    pub(crate) fn put_chunked(&self, hash: &str, bytes: &[u8]) -> Result<(), AppendError> {
        let key = decode_hash(hash).ok_or_else(|| AppendError::Storage {
            message: format!("{hash} is not a blake3 hash"),
        })?;
        let mut list = Vec::with_capacity(bytes.len() / BLOB_CHUNK_BYTES * 32 + 40);
        for chunk in bytes.chunks(BLOB_CHUNK_BYTES) {
            let h = blake3::hash(chunk);
            self.blobs.insert(h.as_bytes(), chunk).map_err(storage)?;
            list.extend_from_slice(h.as_bytes());
        }
        list.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        self.chunked.insert(key, list).map_err(storage)?;
        Ok(())
    }

    /// What retention's sweep must leave (the objects' pins: one set for both).
    pub(crate) fn pins(&self) -> &crate::pins::Pins {
        self.objects.pins()
    }

    fn contains_key(&self, key: &[u8]) -> sled::Result<bool> {
        Ok(self.blobs.contains_key(key)? || self.chunked.contains_key(key)?)
    }

    /// The bytes of a blob, whole (chunked ones are put together). `None` when no blob of
    /// that name is stored (a name that is not a blake3 hash names none); a blob that is
    /// stored but damaged (its chunk list unreadable, a chunk missing, the size wrong) is
    /// [`ReadError::BlobCorrupt`], never `None`.
    pub fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, ReadError> {
        let Some(key) = decode_hash(hash) else {
            return Ok(None);
        };
        if let Some(v) = self.blobs.get(key)? {
            return Ok(Some(v.to_vec()));
        }
        let Some(list) = self.chunked.get(key)? else {
            return match self.objects.open(hash)? {
                Some(file) => {
                    let mut out = Vec::new();
                    let mut reader = &file;
                    std::io::Read::read_to_end(&mut reader, &mut out).map_err(|e| {
                        ReadError::BlobCorrupt {
                            hash: hash.to_owned(),
                            reason: format!("reading its object: {e}"),
                        }
                    })?;
                    Ok(Some(out))
                }
                None => Ok(None),
            };
        };
        let damaged = |reason: String| ReadError::BlobCorrupt {
            hash: hash.to_owned(),
            reason,
        };
        let (hashes, size) =
            split_list(&list).ok_or_else(|| damaged("its chunk list is not one".into()))?;
        let chunks = hashes.len() as u64 / 32;
        // A list of n chunks holds more than n - 1 and at most n chunks' worth of bytes.
        if size > chunks * BLOB_CHUNK_BYTES as u64
            || size <= (chunks.max(1) - 1) * BLOB_CHUNK_BYTES as u64
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
        let store = BlobStore {
            blobs: db.open_tree("blobs").unwrap(),
            chunked: db.open_tree("chunked").unwrap(),
            objects: crate::objects::Objects::new(dir.path().join("objects")),
        };
        (dir, store)
    }

    /// Contents of any size round-trip, whether put whole or streamed, and name the same
    /// hash; below `OBJECT_BYTES_MIN` they are a sled value, from it on an object, so no sled
    /// value is larger than that.
    #[test]
    fn small_contents_are_sled_values_and_larger_ones_objects() {
        let (_d, s) = store();
        let min = crate::objects::OBJECT_BYTES_MIN as usize;
        for size in [0, 1, min - 1, min, min + 1, 3 * BLOB_CHUNK_BYTES + 17] {
            let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            let hash = hash_hex(&bytes);
            s.put(&hash, &bytes).unwrap();
            assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]), "{size}");
            let key = decode_hash(&hash).unwrap();
            assert_eq!(s.blobs.contains_key(key).unwrap(), size < min, "{size}");
            assert_eq!(s.objects.contains(&hash), size >= min, "{size}");
            let streamed = s.put_stream(&mut &bytes[..], u64::MAX).unwrap();
            assert_eq!(streamed.hash, hash, "{size}");
            assert_eq!(streamed.bytes, size as u64);
            assert!(s.objects.contains(&hash), "a stream is an object: {size}");
            assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]), "{size}");
        }
        assert!(s.chunked.is_empty(), "nothing is chunked any more");
        assert!(s.blobs.iter().all(|kv| kv.unwrap().1.len() < min));
        let big = vec![7u8; 2 * BLOB_CHUNK_BYTES];
        let err = s.put_stream(&mut &big[..], 10).unwrap_err();
        assert_eq!(err.code(), "journal_blob_too_large");
        assert!(
            !s.contains(&hash_hex(&big)),
            "a refused stream names nothing"
        );
    }

    /// A chunked blob (an earlier aido's) reads back; with a chunk gone or a bad list it is
    /// damaged, not absent.
    #[test]
    fn a_damaged_chunked_blob_is_an_error_not_none() {
        let (_d, s) = store();
        let bytes: Vec<u8> = (0..2 * BLOB_CHUNK_BYTES + 5)
            .map(|i| (i % 253) as u8)
            .collect();
        let hash = hash_hex(&bytes);
        s.put_chunked(&hash, &bytes).unwrap();
        assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]));
        let key = decode_hash(&hash).unwrap();
        let list = s.chunked.get(key).unwrap().unwrap();
        // The list's size says more than its chunks can hold.
        let mut lying = list.to_vec();
        let at = lying.len() - 8;
        lying[at..].copy_from_slice(&(10 * BLOB_CHUNK_BYTES as u64).to_be_bytes());
        s.chunked.insert(key, lying).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        s.chunked.insert(key, &list[..7]).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        s.chunked.insert(key, list.clone()).unwrap();
        assert_eq!(s.get(&hash).unwrap().as_deref(), Some(&bytes[..]));
        s.blobs.remove(&list[32..64]).unwrap();
        assert_eq!(s.get(&hash).unwrap_err().code(), "journal_blob_corrupt");
        assert_eq!(s.get(&hash_hex(b"never stored")).unwrap(), None);
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
