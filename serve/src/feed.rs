//! The journal followed as it is written. One thread per journal reads every record the
//! writer inserts ([`aido_journal::Journal::watch_records`]), reads it back checked (with its
//! hash), and
//! - appends it as one JSON line to `AIDO_HOME/audit/YYYY-MM-DD.jsonl` (UTC day of the
//!   record's time), so `tail -f ~/.aido/audit/$(date +%F).jsonl | jq` shows every record as
//!   agents work; each line carries `session`, `seq`, `hash` and `prev`, so the chain can be
//!   re-verified from the files alone. Files are mode 0600, opened `O_APPEND` (several aido
//!   processes on one AIDO_HOME append whole lines to the same day's file);
//! - numbers it and hands it to `/events` listeners (a broadcast channel, and a ring of the
//!   last [`RING`] entries for resuming).

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aido_journal::{Journal, SessionId};
use tokio::sync::broadcast;

/// Entries kept for `/events` clients that reconnect with `Last-Event-ID`.
pub const RING: usize = 4096;

/// One journal record as `/events` sends it.
#[derive(Debug)]
pub struct Entry {
    /// Its number in this feed, from 1.
    pub n: u64,
    /// Its session.
    pub session: SessionId,
    /// Its seq in the session.
    pub seq: u64,
    /// The record as JSON, hash included.
    pub json: String,
}

struct Inner {
    journal: Journal,
    tx: broadcast::Sender<Arc<Entry>>,
    ring: Mutex<VecDeque<Arc<Entry>>>,
    epoch: String,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The followed journal. Cheap to clone.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

/// The UTC calendar day of `ms` since the epoch, as `YYYY-MM-DD`.
pub fn utc_day(ms: u64) -> String {
    // Howard Hinnant's days-to-civil.
    let days = (ms / 86_400_000) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The day files' writer.
struct Audit {
    dir: PathBuf,
    day: String,
    file: Option<std::fs::File>,
}

impl Audit {
    fn write(&mut self, day: &str, line: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        if self.file.is_none() || self.day != day {
            std::fs::create_dir_all(&self.dir)?;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(self.dir.join(format!("{day}.jsonl")))?;
            self.file = Some(file);
            self.day = day.to_owned();
        }
        match &mut self.file {
            // One write of the whole line: O_APPEND puts it at the end in one piece.
            Some(file) => file.write_all(line),
            None => Ok(()),
        }
    }
}

/// Where the audit files of `home` are.
pub fn audit_dir(home: &Path) -> PathBuf {
    aido_journal::dir::audit_dir(home)
}

impl Feed {
    /// Follow `journal`; with `audit`, append every record to the day files in that directory.
    pub fn start(journal: Journal, audit: Option<PathBuf>) -> std::io::Result<Self> {
        let (tx, _) = broadcast::channel(1024);
        let mut epoch = [0u8; 6];
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 40;
        epoch.copy_from_slice(&seed.to_be_bytes()[2..]);
        let inner = Arc::new(Inner {
            journal: journal.clone(),
            tx,
            ring: Mutex::new(VecDeque::with_capacity(RING)),
            epoch: epoch.iter().map(|b| format!("{b:02x}")).collect(),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let subscriber = journal.watch_records();
        let follower = inner.clone();
        let mut audit = audit.map(|dir| Audit {
            dir,
            day: String::new(),
            file: None,
        });
        let thread = std::thread::Builder::new()
            .name("aido-feed".into())
            .spawn(move || follow(&follower, subscriber, audit.as_mut()))?;
        if let Ok(mut slot) = inner.thread.lock() {
            *slot = Some(thread);
        }
        Ok(Self { inner })
    }

    /// The journal followed.
    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// This feed's epoch: ids of another process's feed do not resume here.
    pub fn epoch(&self) -> &str {
        &self.inner.epoch
    }

    /// New entries from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Entry>> {
        self.inner.tx.subscribe()
    }

    /// The entries after `n` still in the ring, or `None` when some are gone.
    pub fn since(&self, n: u64) -> Option<Vec<Arc<Entry>>> {
        let ring = self.inner.ring.lock().ok()?;
        let first = ring.front().map_or(n + 1, |e| e.n);
        if first > n + 1 {
            return None;
        }
        Some(ring.iter().filter(|e| e.n > n).cloned().collect())
    }

    /// The entries after `n` still in the ring, at most `max` (the oldest of them), and
    /// whether some after `n` are gone (then it starts at the oldest the ring holds).
    pub fn recent(&self, n: u64, max: usize) -> (Vec<Arc<Entry>>, bool) {
        let Ok(ring) = self.inner.ring.lock() else {
            return (Vec::new(), false);
        };
        let gap = ring.front().is_some_and(|e| e.n > n + 1);
        let entries = ring.iter().filter(|e| e.n > n).take(max).cloned().collect();
        (entries, gap)
    }

    /// Stop following once what was inserted so far is handled.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        let thread = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn follow(inner: &Inner, mut subscriber: sled::Subscriber, mut audit: Option<&mut Audit>) {
    let mut n = 0u64;
    loop {
        let event = match subscriber.next_timeout(Duration::from_millis(100)) {
            Ok(event) => event,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if inner.stop.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let sled::Event::Insert { key, .. } = event else {
            continue;
        };
        let (Some(session), Some(seq)) = (
            key.get(..16)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(SessionId::from_bytes),
            key.get(16..)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes),
        ) else {
            continue;
        };
        let record = match inner.journal.records(session, seq, Some(seq + 1), 1, false) {
            Ok(mut records) if !records.is_empty() => records.remove(0),
            Ok(_) => continue,
            Err(e) => {
                tracing::error!(code = e.code(), %session, seq, "the feed cannot read a record back");
                continue;
            }
        };
        let json = crate::record_json(&record).to_string();
        if let Some(audit) = audit.as_deref_mut() {
            let mut line = json.clone().into_bytes();
            line.push(b'\n');
            if let Err(e) = audit.write(&utc_day(record.time_ms), &line) {
                tracing::error!(error = %e, dir = %audit.dir.display(), "cannot append to the audit file");
            }
        }
        n += 1;
        let entry = Arc::new(Entry {
            n,
            session,
            seq,
            json,
        });
        if let Ok(mut ring) = inner.ring.lock() {
            if ring.len() == RING {
                ring.pop_front();
            }
            ring.push_back(entry.clone());
        }
        // No listener is not an error.
        let _ = inner.tx.send(entry);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_days() {
        assert_eq!(super::utc_day(0), "1970-01-01");
        assert_eq!(super::utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(super::utc_day(1_796_083_200_000), "2026-12-01");
    }
}
