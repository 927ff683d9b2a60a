//! Large contents as files beside the journal: `<journal>.objects/<2 hex>/<62 hex>`, each named
//! by the blake3 of its bytes, written whole before it is named and never changed after
//! (mode 0444). sled holds small contents well and large ones badly (a read-only copy of a live
//! journal would copy them, and it keeps every value it was given or read in memory until its
//! page cache's LRU catches up, some 16,000 accesses later whatever `cache_capacity` says: a
//! value of a megabyte per call grew `aido mcp` by a megabyte per call), so contents of
//! [`OBJECT_BYTES_MIN`] or more live here instead, and the largest sled value is about that.
//!
//! Storing is streamed (memory stays at one buffer whatever the size) and keeps holes: the
//! source is read range by range with `SEEK_DATA`/`SEEK_HOLE`, a hole is hashed as the zeros
//! it reads as but never written, so a sparse file's object is as sparse. Where the file system
//! can share extents (btrfs, xfs), the object is a reflink of the source (`FICLONE`) and only
//! the hashing reads it. Copying an object out ([`Objects::copy_to`]) keeps the holes the same
//! way. An object is written to an unnamed file (`O_TMPFILE`) and linked under its name once
//! whole, so a crash leaves no half object behind and no temporary name to clean up.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags, SeekFrom};

use crate::error::{AppendError, ReadError};

/// Contents at least this large are kept as objects; smaller ones in sled. Small enough that
/// the values sled holds in memory until its LRU catches up stay some tens of megabytes
/// (measured by `aido-bench soak`, docs/BENCHMARKS.md); large enough that the strings which
/// leave records (over 1 KiB) are mostly not a file each.
pub const OBJECT_BYTES_MIN: u64 = 4 << 10;

/// Bytes read or written per step when streaming an object.
const STEP_BYTES: usize = 1 << 20;

/// The object files of one journal.
#[derive(Clone, Debug)]
pub struct Objects {
    dir: PathBuf,
    /// An object was written since the last [`Objects::sync`].
    dirty: Arc<AtomicBool>,
    /// What retention's sweep must leave (shared with the blob store).
    pins: crate::pins::Pins,
}

fn io(what: &str, e: impl std::fmt::Display) -> AppendError {
    AppendError::Storage {
        message: format!("{what}: {e}"),
    }
}

/// Where a journal at `journal` keeps its objects.
pub fn objects_dir(journal: &Path) -> PathBuf {
    let name = journal
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "journal".into());
    journal.with_file_name(format!("{name}.objects"))
}

/// The size and blake3 of what was read, and whether it all was.
pub(crate) struct Streamed {
    pub(crate) hash: blake3::Hash,
    pub(crate) bytes: u64,
}

impl Objects {
    /// The objects under `dir` (made when the first one is stored).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            dirty: Arc::new(AtomicBool::new(false)),
            pins: crate::pins::Pins::default(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn pins(&self) -> &crate::pins::Pins {
        &self.pins
    }

    fn path(&self, hash: &str) -> Option<PathBuf> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(self.dir.join(&hash[..2]).join(&hash[2..]))
    }

    /// True when an object of this name is stored.
    pub fn contains(&self, hash: &str) -> bool {
        self.path(hash).is_some_and(|p| p.is_file())
    }

    /// Open an object for reading, `None` when there is none of that name.
    pub fn open(&self, hash: &str) -> Result<Option<File>, ReadError> {
        let Some(path) = self.path(hash) else {
            return Ok(None);
        };
        match File::open(&path) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ReadError::BlobCorrupt {
                hash: hash.to_owned(),
                reason: format!("its object {} cannot be opened: {e}", path.display()),
            }),
        }
    }

    /// Its size, `None` when there is none of that name.
    pub fn size(&self, hash: &str) -> Option<u64> {
        self.path(hash)
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
    }

    /// Store the contents of `source` (read from its start, at most `max` bytes, holes kept),
    /// named by their blake3. Contents stored already are not written again.
    pub fn put_file(&self, source: &File, max: u64) -> Result<crate::StoredBlob, AppendError> {
        let size = source.metadata().map_err(|e| io("stat contents", e))?.len();
        if size > max {
            return Err(AppendError::BlobTooLarge { bytes: size, max });
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| io("make the objects directory", e))?;
        let temp = self.unnamed()?;
        // A reflink shares the extents (btrfs, xfs); otherwise the data ranges are copied.
        let cloned = rustix::fs::ioctl_ficlone(&temp, source).is_ok();
        let streamed = stream(source, size, |offset, data| {
            if cloned {
                Ok(())
            } else {
                temp.write_all_at(data, offset)
            }
        })
        .map_err(|e| io("copy contents into an object", e))?;
        if streamed.bytes > max {
            return Err(AppendError::BlobTooLarge {
                bytes: streamed.bytes,
                max,
            });
        }
        temp.set_len(streamed.bytes)
            .map_err(|e| io("size an object", e))?;
        let hash = streamed.hash.to_hex().to_string();
        self.pins.pin(streamed.hash.as_bytes());
        self.name(&temp, &hash)?;
        Ok(crate::StoredBlob {
            hash,
            bytes: streamed.bytes,
        })
    }

    /// Store `bytes` (already hashed by the caller) as an object.
    pub fn put_bytes(&self, hash: &str, bytes: &[u8]) -> Result<(), AppendError> {
        self.pins.pin_hex(hash);
        if self.contains(hash) {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| io("make the objects directory", e))?;
        let mut temp = self.unnamed()?;
        temp.write_all(bytes)
            .map_err(|e| io("write an object", e))?;
        self.name(&temp, hash)
    }

    /// Store what `reader` gives (at most `max` bytes; more is
    /// [`AppendError::BlobTooLarge`] and nothing is named), hashed as it is written: for
    /// contents too large to hold in memory that are not a file of their own.
    pub fn put_reader(
        &self,
        reader: &mut dyn Read,
        max: u64,
    ) -> Result<crate::StoredBlob, AppendError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io("make the objects directory", e))?;
        let mut temp = self.unnamed()?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; STEP_BYTES];
        let mut total = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io("reading contents to keep", e)),
            };
            total += n as u64;
            if total > max {
                return Err(AppendError::BlobTooLarge { bytes: total, max });
            }
            hasher.update(&buf[..n]);
            temp.write_all(&buf[..n])
                .map_err(|e| io("write an object", e))?;
        }
        let hash = hasher.finalize();
        self.pins.pin(hash.as_bytes());
        let name = hash.to_hex().to_string();
        self.name(&temp, &name)?;
        Ok(crate::StoredBlob {
            hash: name,
            bytes: total,
        })
    }

    /// An unnamed file in the objects directory, or a named temporary where `O_TMPFILE` is
    /// not supported (it is then renamed, not linked).
    fn unnamed(&self) -> Result<Unnamed, AppendError> {
        match rustix::fs::open(
            &self.dir,
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => Ok(Unnamed {
                file: File::from(fd),
                temp: None,
            }),
            Err(_) => {
                let named = tempfile::Builder::new()
                    .prefix(".object-")
                    .tempfile_in(&self.dir)
                    .map_err(|e| io("make a temporary object", e))?;
                let (file, path) = named.keep().map_err(|e| io("keep a temporary object", e))?;
                Ok(Unnamed {
                    file,
                    temp: Some(path),
                })
            }
        }
    }

    /// Give a whole object its name (read-only). Another copy of the same contents already
    /// named wins: this one is dropped.
    fn name(&self, temp: &Unnamed, hash: &str) -> Result<(), AppendError> {
        let path = self.path(hash).ok_or_else(|| io("name an object", hash))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("make an objects directory", e))?;
        }
        temp.file
            .set_permissions(std::fs::Permissions::from_mode(0o444))
            .map_err(|e| io("make an object read-only", e))?;
        let linked = match &temp.temp {
            Some(named) => std::fs::hard_link(named, &path),
            None => rustix::fs::linkat(
                rustix::fs::CWD,
                format!(
                    "/proc/self/fd/{}",
                    std::os::fd::AsRawFd::as_raw_fd(&temp.file)
                ),
                rustix::fs::CWD,
                &path,
                AtFlags::SYMLINK_FOLLOW,
            )
            .map_err(std::io::Error::from),
        };
        if let Some(named) = &temp.temp {
            let _ = std::fs::remove_file(named);
        }
        match linked {
            Ok(()) => {
                self.dirty.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(io("name an object", e)),
        }
    }

    /// Copy an object's bytes into `target` from its start (holes kept, a reflink where the
    /// file system can), and size it. The bytes copied; `None` when there is no such object.
    pub fn copy_to(&self, hash: &str, target: &File) -> Result<Option<u64>, ReadError> {
        let Some(source) = self.open(hash)? else {
            return Ok(None);
        };
        let failed = |e: std::io::Error| ReadError::BlobCorrupt {
            hash: hash.to_owned(),
            reason: format!("copying its object out: {e}"),
        };
        let size = source.metadata().map_err(failed)?.len();
        if rustix::fs::ioctl_ficlone(target, &source).is_ok() {
            return Ok(Some(size));
        }
        target.set_len(0).map_err(failed)?;
        copy_sparse(&source, target, size).map_err(failed)?;
        target.set_len(size).map_err(failed)?;
        Ok(Some(size))
    }

    /// Make every object named so far durable: one `syncfs` of their file system (and the
    /// directory entries with it), only when one was written since the last sync.
    pub fn sync(&self) -> Result<(), AppendError> {
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let dir = File::open(&self.dir).map_err(|e| io("open the objects directory", e))?;
        rustix::fs::syncfs(&dir).map_err(|e| io("sync the objects", e))
    }

    /// Every object's name.
    pub fn list(&self) -> Result<Vec<String>, ReadError> {
        let mut out = Vec::new();
        let Ok(top) = std::fs::read_dir(&self.dir) else {
            return Ok(out);
        };
        for shard in top.flatten() {
            let prefix = shard.file_name().to_string_lossy().into_owned();
            if prefix.len() != 2 {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(shard.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
                if self.path(&name).is_some() {
                    out.push(name);
                }
            }
        }
        Ok(out)
    }

    /// Its bytes on disk (blocks allocated; a sparse object's holes cost nothing), `None`
    /// when there is none of that name.
    pub fn disk_bytes(&self, hash: &str) -> Option<u64> {
        self.path(hash)
            .and_then(|p| std::fs::symlink_metadata(p).ok())
            .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
    }

    /// Remove an object (retention) unless it is pinned; its bytes on disk, `None` when
    /// there was none or it is pinned.
    pub fn remove(&self, hash: &str) -> Result<Option<u64>, std::io::Error> {
        let (Some(path), Some(key)) = (self.path(hash), crate::pins::decode(hash)) else {
            return Ok(None);
        };
        let bytes = self.disk_bytes(hash).unwrap_or(0);
        let mut result = Ok(None);
        self.pins.unless_pinned(&key, || {
            result = match std::fs::remove_file(&path) {
                Ok(()) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            };
        });
        result
    }
}

/// A file being made into an object.
struct Unnamed {
    file: File,
    /// Its temporary name where it has one.
    temp: Option<PathBuf>,
}

impl std::ops::Deref for Unnamed {
    type Target = File;
    fn deref(&self) -> &File {
        &self.file
    }
}

impl AsFd for Unnamed {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl Unnamed {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)
    }
}

static ZEROS: [u8; STEP_BYTES] = [0; STEP_BYTES];

/// Read `source` (of `size` bytes, from its start) range by range, skipping holes: every data
/// range goes to `data(offset, bytes)`, and everything (holes as zeros) into the hash. What
/// the file holds past `size` when it grew meanwhile is counted too.
pub(crate) fn stream(
    source: &File,
    size: u64,
    mut data: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<Streamed> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; STEP_BYTES];
    let mut at = 0u64;
    let zeros = |hasher: &mut blake3::Hasher, mut n: u64| {
        while n > 0 {
            let step = n.min(STEP_BYTES as u64) as usize;
            hasher.update(&ZEROS[..step]);
            n -= step as u64;
        }
    };
    loop {
        // The next data at or after `at`; none (ENXIO) means the rest is a hole up to `size`.
        let start = match rustix::fs::seek(source, SeekFrom::Data(at)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => {
                if size > at {
                    zeros(&mut hasher, size - at);
                    at = size;
                }
                break;
            }
            // No SEEK_DATA here: the whole file is one data range.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => at,
            Err(e) => return Err(e.into()),
        };
        zeros(&mut hasher, start - at);
        let end = rustix::fs::seek(source, SeekFrom::Hole(start)).unwrap_or(u64::MAX);
        let mut offset = start;
        while offset < end {
            let want = ((end - offset).min(STEP_BYTES as u64)) as usize;
            let n = read_at(source, &mut buf[..want], offset)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            data(offset, &buf[..n])?;
            offset += n as u64;
        }
        at = offset;
        if offset < end && end != u64::MAX {
            // The file shrank meanwhile: what is left reads as nothing.
            break;
        }
        if end == u64::MAX {
            break;
        }
    }
    Ok(Streamed {
        hash: hasher.finalize(),
        bytes: at,
    })
}

fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Copy `size` bytes of `source` into `target` at the same offsets, data ranges only (holes
/// stay holes). The caller sizes `target`.
pub fn copy_sparse(source: &File, target: &File, size: u64) -> std::io::Result<u64> {
    let streamed = stream(source, size, |offset, data| {
        target.write_all_at(data, offset)
    })?;
    Ok(streamed.bytes)
}

/// Hash `source` from its start the way [`Objects::put_file`] names it, storing nothing.
pub fn hash_file(source: &File) -> std::io::Result<(String, u64)> {
    let size = source.metadata()?.len();
    let streamed = stream(source, size, |_, _| Ok(()))?;
    Ok((streamed.hash.to_hex().to_string(), streamed.bytes))
}

/// Read a whole small file (for contents kept in sled).
/// All of `source`, at most `max + 1` bytes (one past says it is too large). `size` is what
/// its stat said: room for it and the end is made at once, so a small file is one read and
/// the end, not a probe first.
pub(crate) fn read_all(source: &File, max: u64, size: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size.min(max).saturating_add(1) as usize);
    source.take(max + 1).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A sparse file's object is as sparse, named by the hash of its bytes (holes as zeros),
    /// and copies out sparse and equal.
    #[test]
    fn objects_keep_holes_and_hash_the_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let objects = Objects::new(dir.path().join("objects"));
        let source_path = dir.path().join("sparse");
        let source = File::create(&source_path).unwrap();
        source.write_all_at(b"head", 0).unwrap();
        source.write_all_at(b"tail", 64 << 20).unwrap();
        let size = source.metadata().unwrap().len();
        let source = File::open(&source_path).unwrap();
        let stored = objects.put_file(&source, u64::MAX).unwrap();
        let whole = std::fs::read(&source_path).unwrap();
        assert_eq!(stored.hash, blake3::hash(&whole).to_hex().to_string());
        assert_eq!(stored.bytes, size);
        let object = objects.path(&stored.hash).unwrap();
        let meta = std::fs::metadata(&object).unwrap();
        assert_eq!(meta.len(), size);
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "the object is sparse: {} blocks",
            meta.blocks()
        );
        assert_eq!(meta.mode() & 0o777, 0o444);
        let out_path = dir.path().join("out");
        let out = File::create(&out_path).unwrap();
        assert_eq!(objects.copy_to(&stored.hash, &out).unwrap(), Some(size));
        assert_eq!(std::fs::read(&out_path).unwrap(), whole);
        assert!(std::fs::metadata(&out_path).unwrap().blocks() * 512 < 1 << 20);
        // The same contents again: one object.
        objects.put_file(&source, u64::MAX).unwrap();
        assert_eq!(objects.list().unwrap(), vec![stored.hash.clone()]);
        assert_eq!(
            objects.put_file(&source, 10).unwrap_err().code(),
            "journal_blob_too_large"
        );
        objects.sync().unwrap();
        assert!(objects.remove(&stored.hash).unwrap().unwrap() < 1 << 20);
        assert!(!objects.contains(&stored.hash));
    }
}
