//! The freedesktop.org trash (Trash specification 1.0), home trash only: items go to
//! `$XDG_DATA_HOME/Trash/files/NAME` with `info/NAME.trashinfo` beside, so any desktop file
//! manager can list and restore them too.

use std::path::{Path, PathBuf};

use super::error::FsError;

/// The home trash directory.
pub(crate) fn home_trash(home: &Path) -> PathBuf {
    match std::env::var_os("XDG_DATA_HOME") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("Trash"),
        _ => home.join(".local/share/Trash"),
    }
}

/// Most names tried when the plain name is taken (`name.2`, `name.3`, ...).
const NAME_TRIES_MAX: u32 = 10_000;

/// Percent-encode a path as the spec asks (RFC 2396 escaping, `/` kept).
pub(crate) fn encode_path(path: &Path) -> String {
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
pub(crate) fn decode_path(text: &str) -> PathBuf {
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

/// `YYYY-MM-DDThh:mm:ss` (UTC) for a Unix time in milliseconds.
pub(crate) fn deletion_date(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A place in the trash, reserved by creating its info file exclusively.
pub(crate) struct Slot {
    pub(crate) files: PathBuf,
    pub(crate) info: PathBuf,
}

/// Reserve `files/NAME` + `info/NAME.trashinfo` for `original`.
pub(crate) fn reserve(trash: &Path, original: &Path, unix_ms: u64) -> Result<Slot, FsError> {
    let shown = original.display().to_string();
    let fail = |reason: String| FsError::Trash {
        path: shown.clone(),
        reason,
    };
    for sub in ["files", "info"] {
        std::fs::create_dir_all(trash.join(sub))
            .map_err(|e| fail(format!("cannot create the trash: {e}")))?;
    }
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
        let info = trash.join("info").join(format!("{name}.trashinfo"));
        let files = trash.join("files").join(&name);
        if files.symlink_metadata().is_ok() {
            continue;
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&info)
        {
            Ok(mut f) => {
                use std::io::Write;
                f.write_all(body.as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|e| fail(e.to_string()))?;
                return Ok(Slot { files, info });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    Err(fail("no free name in the trash".into()))
}

/// The newest trashed item whose original path is `original`: (files path, info path).
pub(crate) fn find(trash: &Path, original: &Path) -> Option<(PathBuf, PathBuf)> {
    let entries = std::fs::read_dir(trash.join("info")).ok()?;
    let mut best: Option<(String, String, PathBuf)> = None;
    for entry in entries.flatten() {
        let info = entry.path();
        let Some(name) = info
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".trashinfo"))
            .map(str::to_owned)
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&info) else {
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
                Some((d, n, _)) => (date.as_str(), name.as_str()) > (d.as_str(), n.as_str()),
            };
            if newer {
                best = Some((date, name, info));
            }
        }
    }
    best.map(|(_, name, info)| (trash.join("files").join(name), info))
}

/// Move across filesystems: copy, then remove the source.
pub(crate) fn move_across(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(18) => {
            // EXDEV: a different filesystem.
            copy_tree(from, to)?;
            if from.is_dir() {
                std::fs::remove_dir_all(from)
            } else {
                std::fs::remove_file(from)
            }
        }
        Err(e) => Err(e),
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = from.symlink_metadata()?;
    if meta.is_dir() {
        std::fs::create_dir(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        std::fs::set_permissions(to, meta.permissions())
    } else if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)
    } else {
        std::fs::copy(from, to).map(|_| ())
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
