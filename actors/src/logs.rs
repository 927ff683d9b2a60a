//! aido's own log and `read_logs`.
//!
//! aido logs through `tracing` to stderr and, with [`RotatingLog`], to
//! `AIDO_HOME/logs/aido.log`: bounded at [`LOG_BYTES_MAX`], rotated once to `aido.log.1`, so
//! the log never holds more than twice that. `read_logs` reads the end of it (or this
//! session's activity from the journal, or a file the walls allow, through the filesystem
//! body), redacts secrets, records the redacted window as the result's input, and builds the
//! result with `aido_walk::tools::logs::render`, which playback calls on the same input.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use aido_actions::tools::{LogSource, ReadLogs};
use aido_actions::{Failure, Input};
use aido_walk::Executed;
use aido_walk::tools::logs::{self, Read as Window};
use aido_walk::tools::redact;
use serde_json::json;

use crate::call::Call;
use crate::error::RuntimeError;
use crate::fs::FsMsg;

/// The folder of aido's log in AIDO_HOME.
pub const LOG_DIR: &str = "logs";
/// aido's log file.
pub const LOG_FILE: &str = "aido.log";
/// A log file is rotated when it would grow past this.
pub const LOG_BYTES_MAX: u64 = 4 << 20;

/// The log file of an AIDO_HOME.
pub fn log_path(aido_home: &Path) -> PathBuf {
    aido_home.join(LOG_DIR).join(LOG_FILE)
}

fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// A log file that rotates itself: when a write would take it past [`LOG_BYTES_MAX`], it is
/// renamed to `aido.log.1` (replacing the older one) and a new one is started. Give it to
/// `tracing_subscriber` behind a `Mutex`.
pub struct RotatingLog {
    path: PathBuf,
    file: File,
    size: u64,
}

impl RotatingLog {
    /// Open (or create) `AIDO_HOME/logs/aido.log` for appending.
    pub fn open(aido_home: &Path) -> std::io::Result<Self> {
        let path = log_path(aido_home);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Self { path, file, size })
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        std::fs::rename(&self.path, rotated(&self.path))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

impl Write for RotatingLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.size > 0 && self.size + buf.len() as u64 > LOG_BYTES_MAX {
            self.rotate()?;
        }
        // One event larger than the bound is cut: the log stays bounded.
        let take = buf.len().min(LOG_BYTES_MAX as usize);
        self.file.write_all(&buf[..take])?;
        self.size += take as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The last `window` bytes of aido's log (the rotated file first), from a line start, and
/// whether more came before. Missing files are empty.
fn read_own_log(aido_home: &Path, window: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let current = log_path(aido_home);
    let mut out = Vec::new();
    let mut left = window;
    let mut more = false;
    // Whether the oldest file read was entered mid-way (its first line may be partial).
    let mut cut = false;
    for path in [current.clone(), rotated(&current)] {
        if left == 0 {
            more |= path.exists();
            break;
        }
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let size = file.metadata()?.len();
        let start = size.saturating_sub(left);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.take(left).read_to_end(&mut bytes)?;
        left -= bytes.len() as u64;
        more |= start > 0;
        cut = start > 0;
        bytes.extend_from_slice(&out);
        out = bytes;
    }
    Ok((crate::fs::tools::from_line_start(out, cut), more))
}

/// read_logs: the filters are checked before anything is read; what is read is redacted,
/// then recorded, then rendered.
pub(crate) async fn read_logs(call: &Call<'_>, a: &ReadLogs) -> Result<Executed, Failure> {
    logs::check(a).map_err(Failure::from)?;
    let window = a.scan();
    let mut done = Executed::default();
    let (label, text, more_before) = match a.source {
        LogSource::Activity => {
            // `check` made sure a given id parses.
            let session = a
                .session
                .as_deref()
                .and_then(aido_journal::SessionId::parse)
                .unwrap_or(call.session);
            let records = call
                .shared
                .journal
                .all_records(session)
                .map_err(Failure::from)?;
            let all = logs::activity(&records);
            let bytes = crate::fs::tools::from_line_start(
                tail_of(all.as_bytes(), window),
                all.len() as u64 > window,
            );
            let text = redact::redact(&String::from_utf8_lossy(&bytes));
            let label = format!("journal:{session}");
            let more = all.len() as u64 > window;
            done.outcome.inputs.push(Input::Answer {
                from: logs::ACTIVITY_FROM.into(),
                value: json!({"label": label, "text": text, "more_before": more}),
            });
            (label, text, more)
        }
        LogSource::Aido => {
            let home = call.shared.policy.aido_home().to_owned();
            let (bytes, more) = tokio::task::spawn_blocking(move || read_own_log(&home, window))
                .await
                .map_err(|e| internal(e.to_string()))?
                .map_err(|e| {
                    let path = log_path(call.shared.policy.aido_home());
                    Failure::from(crate::fs::FsError::io(
                        "read aido's log",
                        &path.display().to_string(),
                        e,
                    ))
                })?;
            let label = log_path(call.shared.policy.aido_home())
                .display()
                .to_string();
            let text = redact::redact(&String::from_utf8_lossy(&bytes));
            lines_read(&mut done, &label, &text, more);
            (label, text, more)
        }
        LogSource::File => {
            let path = a.path.clone().unwrap_or_default();
            let session = call.ctx.clone();
            let tail = call
                .shared
                .bodies
                .fs
                .ask(call.shared.action_timeout(), |reply| FsMsg::Tail {
                    path,
                    window,
                    session,
                    reply,
                })
                .await?;
            let text = redact::redact(&String::from_utf8_lossy(&tail.bytes));
            lines_read(&mut done, &tail.path, &text, tail.more_before);
            (tail.path, text, tail.more_before)
        }
    };
    let read = Window {
        label: &label,
        text: &text,
        more_before,
        redacted: redact::count(&text),
    };
    let outcome = logs::render(a, &read).map_err(Failure::from)?;
    Ok(aido_walk::walk::outcome(done, |_| outcome))
}

/// Record a redacted window of a file: the text goes to the blob store.
fn lines_read(done: &mut Executed, label: &str, text: &str, more: bool) {
    let blob = aido_walk::fs::render::blob_name(text.as_bytes());
    done.outcome.inputs.push(Input::Lines {
        path: label.to_owned(),
        blob: blob.clone(),
        more,
    });
    done.blobs.push((blob, text.as_bytes().to_vec()));
}

fn tail_of(bytes: &[u8], window: u64) -> Vec<u8> {
    let start = bytes.len().saturating_sub(window as usize);
    bytes[start..].to_vec()
}

fn internal(why: String) -> Failure {
    RuntimeError::Internal { why }.into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_log_rotates_once_and_stays_bounded() {
        let home = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(home.path()).unwrap();
        let line = vec![b'x'; 1023]
            .into_iter()
            .chain([b'\n'])
            .collect::<Vec<_>>();
        for _ in 0..(3 * LOG_BYTES_MAX / 1024) {
            log.write_all(&line).unwrap();
        }
        let current = std::fs::metadata(log_path(home.path())).unwrap().len();
        let older = std::fs::metadata(rotated(&log_path(home.path())))
            .unwrap()
            .len();
        assert!(current <= LOG_BYTES_MAX && older <= LOG_BYTES_MAX);
        let (bytes, more) = read_own_log(home.path(), 10_000).unwrap();
        assert!(more);
        assert_eq!(bytes.len() % 1024, 0, "whole lines only");
        assert!(bytes.len() <= 10_000);
        // A window that ends exactly at the start of the current file keeps its first line.
        let whole = std::fs::read(log_path(home.path())).unwrap();
        let (bytes, more) = read_own_log(home.path(), whole.len() as u64).unwrap();
        assert!(more, "the rotated file holds more");
        assert_eq!(bytes, whole);
    }
}
