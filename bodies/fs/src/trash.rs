//! The freedesktop.org trash (Trash specification 1.0), home trash only: items go to
//! `$XDG_DATA_HOME/Trash/files/NAME` with `info/NAME.trashinfo` beside, so any desktop file
//! manager can list and restore them too.

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Mode, OFlags};

use super::error::FsError;
use super::walls;

/// The home trash directory.
pub fn home_trash(home: &Path) -> PathBuf {
    match std::env::var_os("XDG_DATA_HOME") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("Trash"),
        _ => home.join(".local/share/Trash"),
    }
}

/// Most names tried when the plain name is taken (`name.2`, `name.3`, ...).
const NAME_TRIES_MAX: u32 = 10_000;

/// Percent-encode a path as the spec asks (RFC 2396 escaping, `/` kept).
pub fn encode_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undo [`encode_path`].
pub fn decode_path(text: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// `YYYY-MM-DDThh:mm:ss` (UTC) for a Unix time in milliseconds: the toolbelt's RFC 3339 time
/// to the second, without its zone.
pub fn deletion_date(unix_ms: u64) -> String {
    let mut time = aido_walk::tools::logs::format_rfc3339(unix_ms);
    time.truncate("YYYY-MM-DDThh:mm:ss".len());
    time
}

/// Most `.trashinfo` files looked at when looking for an item to restore.
const INFO_FILES_MAX: usize = 100_000;

/// Most bytes read of one `.trashinfo` file (a path and a date; a longer one is not ours).
const INFO_BYTES_MAX: u64 = 64 * 1024;

/// The home trash, open: handles on its `files` and `info` directories, each opened from the
/// trash directory without following a symlink, and every change made through them.
pub struct Trash {
    path: PathBuf,
    files: Dir,
    info: Dir,
}

/// A place in the trash: the item's name in `files` (its info file is `NAME.trashinfo`).
pub struct Slot {
    pub name: String,
    /// `files/NAME`, for messages and the journal.
    pub files: PathBuf,
    /// `info/NAME.trashinfo`, likewise.
    pub info: PathBuf,
}

impl Trash {
    /// Open the trash at `path`. With `create`, the trash and its two directories are made
    /// when missing; without, a missing trash is `Ok(None)`.
    pub fn open(path: &Path, create: bool) -> Result<Option<Self>, FsError> {
        let shown = path.display().to_string();
        let fail = |e: std::io::Error| FsError::Trash {
            path: shown.clone(),
            reason: format!("cannot open the trash: {e}"),
        };
        if create {
            // The trash directory itself is aido's own (from HOME or XDG_DATA_HOME).
            std::fs::create_dir_all(path).map_err(fail)?;
        }
        let top = match Dir::open_ambient_dir(path, ambient_authority()) {
            Ok(top) => top,
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        let sub = |name: &str| -> Result<Option<Dir>, FsError> {
            let name = std::ffi::OsStr::new(name);
            match walls::open_dir(&top, name) {
                Ok(dir) => Ok(Some(dir)),
                Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
                    match rustix::fs::mkdirat(&top, name, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(fail(e.into())),
                    }
                    walls::open_dir(&top, name).map(Some).map_err(fail)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(fail(e)),
            }
        };
        let (Some(files), Some(info)) = (sub("files")?, sub("info")?) else {
            return Ok(None);
        };
        Ok(Some(Self {
            path: path.to_owned(),
            files,
            info,
        }))
    }

    /// The `files` directory, where items are moved to and from.
    pub fn files(&self) -> &Dir {
        &self.files
    }

    fn slot(&self, name: String) -> Slot {
        Slot {
            files: self.path.join("files").join(&name),
            info: self.path.join("info").join(format!("{name}.trashinfo")),
            name,
        }
    }

    /// Reserve `files/NAME` + `info/NAME.trashinfo` for `original`, by creating the info file
    /// exclusively.
    pub fn reserve(&self, original: &Path, unix_ms: u64) -> Result<Slot, FsError> {
        let shown = original.display().to_string();
        let fail = |reason: String| FsError::Trash {
            path: shown.clone(),
            reason,
        };
        let base = original
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "item".into());
        let body = format!(
            "[Trash Info]\nPath={}\nDeletionDate={}\n",
            encode_path(original),
            deletion_date(unix_ms)
        );
        for n in 1..=NAME_TRIES_MAX {
            let name = if n == 1 {
                base.clone()
            } else {
                format!("{base}.{n}")
            };
            if rustix::fs::statat(&self.files, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
                continue;
            }
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let info = format!("{name}.trashinfo");
            match rustix::fs::openat(&self.info, info.as_str(), flags, Mode::from_raw_mode(0o666)) {
                Ok(fd) => {
                    use std::io::Write;
                    let mut f = std::fs::File::from(fd);
                    f.write_all(body.as_bytes())
                        .and_then(|_| f.sync_all())
                        .map_err(|e| fail(e.to_string()))?;
                    return Ok(self.slot(name));
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        Err(fail("no free name in the trash".into()))
    }

    /// Remove a slot's info file (the item left the trash, or never went in).
    pub fn forget(&self, slot: &Slot) {
        let _ = rustix::fs::unlinkat(
            &self.info,
            format!("{}.trashinfo", slot.name).as_str(),
            AtFlags::empty(),
        );
    }

    /// The newest trashed item whose original path is `original`.
    pub fn find(&self, original: &Path) -> Result<Option<Slot>, FsError> {
        let shown = original.display().to_string();
        let entries = self.info.entries().map_err(|e| FsError::Trash {
            path: shown.clone(),
            reason: format!("cannot list the trash: {e}"),
        })?;
        let mut best: Option<(String, String)> = None;
        for (seen, entry) in entries.flatten().enumerate() {
            if seen >= INFO_FILES_MAX {
                return Err(FsError::Trash {
                    path: shown,
                    reason: format!("more than {INFO_FILES_MAX} items in the trash to look at"),
                });
            }
            let file_name = entry.file_name();
            let Some(name) = file_name
                .to_str()
                .and_then(|n| n.strip_suffix(".trashinfo"))
                .map(str::to_owned)
            else {
                continue;
            };
            let Some(text) = self.read_info(&file_name) else {
                continue;
            };
            let mut path = None;
            let mut date = String::new();
            for line in text.lines() {
                if let Some(p) = line.strip_prefix("Path=") {
                    path = Some(decode_path(p));
                } else if let Some(d) = line.strip_prefix("DeletionDate=") {
                    date = d.to_owned();
                }
            }
            if path.as_deref() == Some(original) {
                let newer = match &best {
                    None => true,
                    Some((d, n)) => (date.as_str(), name.as_str()) > (d.as_str(), n.as_str()),
                };
                if newer {
                    best = Some((date, name));
                }
            }
        }
        Ok(best.map(|(_, name)| self.slot(name)))
    }

    /// One info file's text (no-follow, at most [`INFO_BYTES_MAX`]); `None` if unreadable.
    fn read_info(&self, name: &std::ffi::OsStr) -> Option<String> {
        use std::io::Read;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file =
            std::fs::File::from(rustix::fs::openat(&self.info, name, flags, Mode::empty()).ok()?);
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut text = String::new();
        file.take(INFO_BYTES_MAX).read_to_string(&mut text).ok()?;
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_dates_follow_the_spec() {
        let p = Path::new("/w/u/a b/ü%.txt");
        assert_eq!(encode_path(p), "/w/u/a%20b/%C3%BC%25.txt");
        assert_eq!(decode_path(&encode_path(p)), p);
        assert_eq!(deletion_date(0), "1970-01-01T00:00:00");
        assert_eq!(deletion_date(1_764_410_400_000), "2025-11-29T10:00:00");
    }
}
