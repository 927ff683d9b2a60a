//! The audit files (`AIDO_HOME/audit/YYYY-MM-DD.jsonl`, one line per record, appended by the
//! feed of `aido mcp` and `aido serve`) lose the lines of the records retention removed. A
//! file written to within [`AUDIT_QUIET_MS`] is left whole (a running aido may still append
//! to it; a day's file is appended to only during that UTC day). A file is rewritten beside
//! itself (mode 0600, synced) and renamed over, or removed when no line is left; a line that
//! does not parse, or names a record that remains, stays.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::Deserialize;

use crate::record::{SessionId, Skipped};

use super::{AUDIT_QUIET_MS, Kept, RetentionError, skipped};

/// Longest audit line read (a record with its contents put back can be long); a file with a
/// longer one is kept whole.
pub(crate) const AUDIT_LINE_BYTES_MAX: u64 = 256 << 20;

/// The records that are gone: the sessions a run removed, the cuts (through a seq, this run's
/// and earlier ones'), and every session the journal does not hold (removed by an earlier run
/// while its audit file was still being written).
#[derive(Debug, Default)]
pub(crate) struct Gone {
    pub(crate) sessions: HashSet<SessionId>,
    pub(crate) cuts: HashMap<SessionId, u64>,
    /// Every session the journal held when the run read it.
    pub(crate) known: HashSet<SessionId>,
}

impl Gone {
    pub(crate) fn contains(&self, session: SessionId, seq: u64) -> bool {
        self.sessions.contains(&session)
            || !self.known.contains(&session)
            || self.cuts.get(&session).is_some_and(|t| seq <= *t)
    }
}

#[derive(Deserialize)]
struct LineKey {
    session: SessionId,
    seq: u64,
}

/// What the audit files gave back.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AuditSwept {
    pub(crate) lines: u64,
    pub(crate) files_removed: u64,
}

/// Leave out the lines of `gone` records from every quiet audit file in `dir`.
pub(crate) fn sweep_audit(
    dir: &Path,
    gone: &Gone,
    now_ms: u64,
    dry: bool,
    skipped_out: &mut Vec<Skipped>,
) -> Result<AuditSwept, RetentionError> {
    let mut out = AuditSwept::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(RetentionError::io("read", dir, e)),
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "jsonl")
                && p.file_name()
                    .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    for path in files {
        let meta = std::fs::metadata(&path).map_err(|e| RetentionError::io("stat", &path, e))?;
        let modified_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(u64::MAX, |d| d.as_millis() as u64);
        let quiet = modified_ms.saturating_add(AUDIT_QUIET_MS) <= now_ms;
        match filter_file(&path, gone, dry || !quiet)? {
            Ok((_, 0)) => {}
            Ok((_, dropped)) if !quiet => {
                skipped_out.push(skipped(
                    path.display().to_string(),
                    Kept::AuditInUse,
                    format!("{dropped} line(s) of removed records stay until it has been quiet for two days"),
                ));
            }
            Ok((kept, dropped)) => {
                out.lines += dropped;
                if kept == 0 {
                    out.files_removed += 1;
                }
                if !dry {
                    finish(&path, kept)?;
                }
            }
            Err(why) => skipped_out.push(skipped(
                path.display().to_string(),
                Kept::AuditUnreadable,
                why,
            )),
        }
    }
    Ok(out)
}

fn temp_of(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.retention"))
}

/// Read `path`, writing the lines to keep beside it unless `count_only`: (kept, dropped), or
/// why the file is kept whole.
fn filter_file(
    path: &Path,
    gone: &Gone,
    count_only: bool,
) -> Result<Result<(u64, u64), String>, RetentionError> {
    let file = std::fs::File::open(path).map_err(|e| RetentionError::io("read", path, e))?;
    let mut reader = std::io::BufReader::new(file);
    let temp = temp_of(path);
    let mut out = if count_only {
        None
    } else {
        Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)
                .map_err(|e| RetentionError::io("write", &temp, e))?,
        )
    };
    let mut kept = 0u64;
    let mut dropped = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(AUDIT_LINE_BYTES_MAX + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| RetentionError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        if n as u64 > AUDIT_LINE_BYTES_MAX {
            drop(out);
            let _ = std::fs::remove_file(&temp);
            return Ok(Err(format!(
                "a line is longer than {AUDIT_LINE_BYTES_MAX} bytes; the file is kept whole"
            )));
        }
        let goes = serde_json::from_slice::<LineKey>(&line)
            .map(|k| gone.contains(k.session, k.seq))
            .unwrap_or(false);
        if goes {
            dropped += 1;
            continue;
        }
        kept += 1;
        if let Some(out) = out.as_mut() {
            out.write_all(&line)
                .map_err(|e| RetentionError::io("write", &temp, e))?;
        }
    }
    if let Some(out) = out {
        out.sync_all()
            .map_err(|e| RetentionError::io("sync", &temp, e))?;
        if dropped == 0 {
            drop(out);
            let _ = std::fs::remove_file(&temp);
        }
    }
    Ok(Ok((kept, dropped)))
}

/// Put the filtered file in place, or remove the file when nothing is left.
fn finish(path: &Path, kept: u64) -> Result<(), RetentionError> {
    let temp = temp_of(path);
    if kept == 0 {
        let _ = std::fs::remove_file(&temp);
        std::fs::remove_file(path).map_err(|e| RetentionError::io("remove", path, e))?;
        return Ok(());
    }
    std::fs::rename(&temp, path).map_err(|e| RetentionError::io("rename", &temp, e))?;
    if let Some(parent) = path.parent()
        && let Ok(dir) = std::fs::File::open(parent)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn quiet_files_lose_the_lines_of_removed_records_and_busy_ones_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let a = SessionId::from_bytes([1; 16]);
        let b = SessionId::from_bytes([2; 16]);
        let line = |s: SessionId, seq: u64| {
            format!("{{\"session\":\"{s}\",\"seq\":{seq},\"event\":\"x\"}}\n")
        };
        let old = dir.path().join("2020-01-01.jsonl");
        std::fs::write(
            &old,
            [
                line(a, 1),
                line(b, 1),
                "not json\n".into(),
                line(a, 2),
                line(b, 5),
            ]
            .concat(),
        )
        .unwrap();
        let only_a = dir.path().join("2020-01-02.jsonl");
        std::fs::write(&only_a, [line(a, 3), line(a, 4)].concat()).unwrap();
        let mut gone = Gone::default();
        gone.sessions.insert(a);
        gone.cuts.insert(b, 2);
        gone.known.extend([a, b]);
        let mut skipped = Vec::new();
        let far = u64::MAX / 2;
        // Dry: counted, nothing changed.
        let dry = sweep_audit(dir.path(), &gone, far, true, &mut skipped).unwrap();
        assert_eq!((dry.lines, dry.files_removed), (5, 1));
        assert!(only_a.exists());
        // Written just now: in use.
        let busy = sweep_audit(dir.path(), &gone, 0, false, &mut skipped).unwrap();
        assert_eq!(busy.lines, 0);
        assert_eq!(skipped.len(), 2);
        assert!(skipped.iter().all(|s| s.code == "retention_audit_in_use"));
        let swept = sweep_audit(dir.path(), &gone, far, false, &mut skipped).unwrap();
        assert_eq!((swept.lines, swept.files_removed), (5, 1));
        assert!(!only_a.exists());
        assert_eq!(
            std::fs::read_to_string(&old).unwrap(),
            ["not json\n".to_owned(), line(b, 5)].concat()
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&old).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
