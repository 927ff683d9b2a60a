//! Claude Code's file tools, journaled: what the hook keeps of a file at `PreToolUse` (its
//! contents, bits and time, or that it was not there) and, at `PostToolUse`, the write made
//! again through aido — so it is judged, journaled and undone by a rewind like any
//! `write_file`.
//!
//! Claude Code's own tool writes the file first; at `PostToolUse` the hook puts back what was
//! there (kept at `PreToolUse`), then runs `write_file` of what Claude Code wrote, with the
//! modification time Claude Code's write gave it (`mtime_ns`): Claude Code refuses to edit a
//! file whose time moved since it read or wrote it. If aido refuses or cannot journal the
//! write, the file stays as it was before the tool ran and the model is told why: a change is
//! never left applied but not journaled.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Files larger than this are left to Claude Code's own checkpoints (not kept, not journaled).
pub(crate) const KEPT_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// What a file was before a file tool ran.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Before {
    /// The file, as the tool named it (absolute).
    pub(crate) path: PathBuf,
    /// Its contents (base64), bits and time; `None` when it was not there.
    pub(crate) file: Option<Kept>,
    /// Its missing ancestors, outermost first (the tool may make them).
    pub(crate) missing: Vec<PathBuf>,
}

/// A file's contents, bits and time.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Kept {
    pub(crate) contents: String,
    pub(crate) mode: u32,
    pub(crate) mtime_ns: i64,
}

fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.mtime() * 1_000_000_000 + meta.mtime_nsec()
}

/// Where the hook keeps `tool_use_id`'s before-image.
pub(crate) fn stash_path(home: &Path, tool_use_id: &str) -> Result<PathBuf> {
    anyhow::ensure!(
        !tool_use_id.is_empty()
            && tool_use_id.len() <= 128
            && tool_use_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "the call's tool_use_id {tool_use_id:?} is not a plain id"
    );
    Ok(home
        .join("hooks")
        .join("claude-code")
        .join(format!("{tool_use_id}.json")))
}

/// Keep what `path` is now, for the write the tool is about to make. `None` when the file is
/// too large to keep (the write is then left to Claude Code).
pub(crate) fn keep(home: &Path, tool_use_id: &str, path: &Path) -> Result<Option<PathBuf>> {
    let file = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {
            if meta.len() > KEPT_BYTES_MAX {
                return Ok(None);
            }
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(Kept {
                contents: base64::engine::general_purpose::STANDARD.encode(bytes),
                mode: meta.permissions().mode() & 0o7777,
                mtime_ns: mtime_ns(&meta),
            })
        }
        // A link, a directory: the tool's write fails or follows it; aido judged the path.
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("stat {}", path.display())),
    };
    let mut missing = Vec::new();
    let mut at = path.parent();
    while let Some(dir) = at {
        if std::fs::symlink_metadata(dir).is_ok() {
            break;
        }
        missing.push(dir.to_owned());
        at = dir.parent();
    }
    missing.reverse();
    let before = Before {
        path: path.to_owned(),
        file,
        missing,
    };
    let stash = stash_path(home, tool_use_id)?;
    let dir = stash.parent().context("the stash's directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    forget_stale(dir);
    std::fs::write(&stash, serde_json::to_vec(&before)?)
        .with_context(|| format!("writing {}", stash.display()))?;
    Ok(Some(stash))
}

/// Kept files older than a day: their calls failed (Claude Code sends no `PostToolUse` then)
/// and the file was not changed by them.
fn forget_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let day = std::time::Duration::from_secs(24 * 3600);
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age > day);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The before-image kept for `tool_use_id`, removed from the stash; `None` when none was kept.
pub(crate) fn take(home: &Path, tool_use_id: &str) -> Result<Option<Before>> {
    let stash = stash_path(home, tool_use_id)?;
    let bytes = match std::fs::read(&stash) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", stash.display())),
    };
    let _ = std::fs::remove_file(&stash);
    Ok(Some(serde_json::from_slice(&bytes)?))
}

/// What the tool left at the path: its contents and time (`None`: nothing there).
pub(crate) fn after(path: &Path) -> Result<Option<(Vec<u8>, i64)>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Ok(Some((bytes, mtime_ns(&meta))))
        }
        Ok(_) => anyhow::bail!("{} is no longer a file", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("stat {}", path.display())),
    }
}

/// Put back what `before` kept: the contents, bits and time, or nothing (and no directory the
/// tool made), so the write can be made again through aido.
pub(crate) fn put_back(before: &Before) -> Result<()> {
    let path = &before.path;
    match &before.file {
        Some(kept) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(&kept.contents)?;
            let dir = path.parent().context("the file's directory")?;
            let temp = dir.join(format!(
                ".{}.aido-hook-{}.tmp",
                path.file_name().unwrap_or_default().to_string_lossy(),
                std::process::id()
            ));
            let mut file = std::fs::File::create(&temp)
                .with_context(|| format!("writing {}", temp.display()))?;
            std::io::Write::write_all(&mut file, &bytes)?;
            file.set_permissions(std::fs::Permissions::from_mode(kept.mode))?;
            file.set_modified(
                std::time::UNIX_EPOCH
                    + std::time::Duration::from_nanos(u64::try_from(kept.mtime_ns).unwrap_or(0)),
            )?;
            drop(file);
            std::fs::rename(&temp, path)
                .with_context(|| format!("putting back {}", path.display()))?;
        }
        None => {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
            }
            for dir in before.missing.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    Ok(())
}

/// The `write_file` that makes `after` again through aido, with the time the tool gave it.
pub(crate) fn write_action(
    path: &Path,
    contents: &[u8],
    mtime_ns: i64,
) -> Result<aido_actions::Action> {
    let value = serde_json::json!({
        "type": "write_file",
        "path": path.display().to_string(),
        "content": base64::engine::general_purpose::STANDARD.encode(contents),
        "encoding": "base64",
        "create_parents": true,
        "mtime_ns": mtime_ns,
    });
    Ok(serde_json::from_value(value)?)
}
