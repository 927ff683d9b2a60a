//! The journal followed as it is written. One thread per journal reads every record the
//! writer inserts ([`aido_journal::Journal::watch_records`]), reads it back checked (with its
//! hash), and
//! - appends it as one JSON line to `AIDO_HOME/audit/YYYY-MM-DD.jsonl` (UTC day of the
//!   record's time), so `tail -f ~/.aido/audit/$(date +%F).jsonl | jq` shows every record as
//!   agents work; each line carries `session`, `seq`, `hash` and `prev`, so the chain can be
//!   re-verified from the files alone. Files are mode 0600, opened `O_APPEND` (several aido
//!   processes on one AIDO_HOME append whole lines to the same day's file);
//! - numbers it, keeps it in a ring for `/events` listeners that resume or fall behind, and
//!   tells the listeners its number (a [`Notice`] on a broadcast channel).
//!
//! Memory is bounded by the ring alone, whatever the records weigh and however slowly a
//! listener reads: the ring holds at most [`RingLimits::entries_max`] entries and
//! [`RingLimits::bytes_max`] bytes of JSON (the newest entry is always kept), and the
//! broadcast carries only numbers, so a listener that stops reading pins no record. A stdio
//! runtime, which has no listeners, keeps no ring at all ([`RingLimits::NONE`]). Before, the
//! ring held the last 4,096 records' JSON whatever their size, in `aido mcp` too, and the
//! broadcast channel up to 1,024 more for a listener that stopped reading: with calls of 1 MiB
//! arguments, gigabytes.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aido_journal::{Journal, SessionId};
use tokio::sync::broadcast;

/// How much of the journal the feed keeps in memory for `/events` listeners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLimits {
    /// Entries kept at most.
    pub entries_max: usize,
    /// Bytes of record JSON kept at most (the newest entry is kept whatever its size).
    pub bytes_max: usize,
}

impl RingLimits {
    /// What `aido serve` keeps: the last 4,096 records, at most 32 MiB of them.
    pub const SERVE: Self = Self {
        entries_max: 4096,
        bytes_max: 32 << 20,
    };

    /// Nothing: the audit files only (a stdio runtime has no `/events`).
    pub const NONE: Self = Self {
        entries_max: 0,
        bytes_max: 0,
    };
}

/// Notices a listener may fall behind by before it is told it lagged (then it reads the ring).
const NOTICES_MAX: usize = 1024;

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

/// What listeners are told of each new record: where to find it, not the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Its number in this feed ([`Feed::entry`] finds it while the ring holds it).
    pub n: u64,
    /// Its session.
    pub session: SessionId,
    /// Its seq in the session.
    pub seq: u64,
}

/// The last entries, bounded by count and bytes.
struct Ring {
    limits: RingLimits,
    entries: VecDeque<Arc<Entry>>,
    bytes: usize,
    /// The number the next entry gets (so an empty ring still knows what it missed).
    next: u64,
}

impl Ring {
    fn new(limits: RingLimits) -> Self {
        Self {
            limits,
            entries: VecDeque::new(),
            bytes: 0,
            next: 1,
        }
    }

    fn push(&mut self, entry: Arc<Entry>) {
        assert_eq!(entry.n, self.next, "feed numbers are gap-free");
        self.next = entry.n + 1;
        if self.limits.entries_max == 0 {
            return;
        }
        self.bytes += entry.json.len();
        self.entries.push_back(entry);
        while self.entries.len() > 1
            && (self.entries.len() > self.limits.entries_max || self.bytes > self.limits.bytes_max)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.json.len();
            }
        }
        assert!(self.entries.len() <= self.limits.entries_max.max(1));
    }

    /// The oldest number still held (or the next one, when none is).
    fn first(&self) -> u64 {
        self.entries.front().map_or(self.next, |e| e.n)
    }

    /// The entries held after number `n`, oldest first.
    fn after(&self, n: u64) -> impl Iterator<Item = &Arc<Entry>> {
        let skip = usize::try_from((n + 1).saturating_sub(self.first())).unwrap_or(usize::MAX);
        self.entries.iter().skip(skip)
    }
}

struct Inner {
    journal: Journal,
    tx: broadcast::Sender<Notice>,
    ring: Mutex<Ring>,
    epoch: String,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The followed journal. Cheap to clone.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

/// The UTC calendar day of `ms` since the epoch, as `YYYY-MM-DD` (the date part of the
/// toolbelt's RFC 3339 time).
pub fn utc_day(ms: u64) -> String {
    let mut time = aido_toolbelt::logs::format_rfc3339(ms);
    time.truncate("YYYY-MM-DD".len());
    time
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
    /// Follow `journal`; with `audit`, append every record to the day files in that directory;
    /// keep what `ring` allows for `/events` listeners.
    pub fn start(
        journal: Journal,
        audit: Option<PathBuf>,
        ring: RingLimits,
    ) -> std::io::Result<Self> {
        let (tx, _) = broadcast::channel(NOTICES_MAX);
        let mut epoch = [0u8; 6];
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 40;
        epoch.copy_from_slice(&seed.to_be_bytes()[2..]);
        let inner = Arc::new(Inner {
            journal: journal.clone(),
            tx,
            ring: Mutex::new(Ring::new(ring)),
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

    /// Notices of new entries from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.inner.tx.subscribe()
    }

    /// The number of the newest entry so far (0 before the first).
    pub fn last(&self) -> u64 {
        self.inner.ring.lock().map_or(0, |ring| ring.next - 1)
    }

    /// Entry `n`, while the ring holds it.
    pub fn entry(&self, n: u64) -> Option<Arc<Entry>> {
        let ring = self.inner.ring.lock().ok()?;
        let index = n.checked_sub(ring.first())?;
        ring.entries.get(usize::try_from(index).ok()?).cloned()
    }

    /// The entries after `n` still in the ring, or `None` when some are gone.
    pub fn since(&self, n: u64) -> Option<Vec<Arc<Entry>>> {
        let ring = self.inner.ring.lock().ok()?;
        if ring.first() > n + 1 {
            return None;
        }
        Some(ring.after(n).cloned().collect())
    }

    /// The entries after `n` still in the ring, at most `max` (the oldest of them), and
    /// whether some after `n` are gone (then it starts at the oldest the ring holds).
    pub fn recent(&self, n: u64, max: usize) -> (Vec<Arc<Entry>>, bool) {
        let Ok(ring) = self.inner.ring.lock() else {
            return (Vec::new(), false);
        };
        let gap = ring.first() > n + 1;
        let entries = ring.after(n).take(max).cloned().collect();
        (entries, gap)
    }

    /// The entries and bytes of JSON the ring holds.
    pub fn held(&self) -> (usize, usize) {
        self.inner
            .ring
            .lock()
            .map_or((0, 0), |ring| (ring.entries.len(), ring.bytes))
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
        // The event holds the inserted value; only its key is needed.
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
        let mut line = crate::record_json(&record).to_string();
        let day = utc_day(record.time_ms);
        drop(record);
        if let Some(audit) = audit.as_deref_mut() {
            line.push('\n');
            if let Err(e) = audit.write(&day, line.as_bytes()) {
                tracing::error!(error = %e, dir = %audit.dir.display(), "cannot append to the audit file");
            }
            line.pop();
        }
        n += 1;
        let notice = Notice { n, session, seq };
        if let Ok(mut ring) = inner.ring.lock() {
            let entry = Entry {
                n,
                session,
                seq,
                json: if ring.limits.entries_max == 0 {
                    String::new()
                } else {
                    std::mem::take(&mut line)
                },
            };
            ring.push(Arc::new(entry));
        }
        // No listener is not an error.
        let _ = inner.tx.send(notice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64, bytes: usize) -> Arc<Entry> {
        Arc::new(Entry {
            n,
            session: SessionId::from_bytes([1; 16]),
            seq: n,
            json: "x".repeat(bytes),
        })
    }

    /// The ring holds at most its entries and its bytes (the newest entry always), and knows
    /// what it no longer holds.
    #[test]
    fn the_ring_is_bounded_by_entries_and_bytes() {
        let mut ring = Ring::new(RingLimits {
            entries_max: 4,
            bytes_max: 100,
        });
        for n in 1..=6 {
            ring.push(entry(n, 10));
        }
        assert_eq!((ring.entries.len(), ring.bytes, ring.first()), (4, 40, 3));
        ring.push(entry(7, 80));
        assert_eq!((ring.entries.len(), ring.bytes, ring.first()), (3, 100, 5));
        ring.push(entry(8, 500));
        assert_eq!((ring.entries.len(), ring.bytes, ring.first()), (1, 500, 8));
        let after: Vec<u64> = ring.after(7).map(|e| e.n).collect();
        assert_eq!(after, [8]);
        assert_eq!(ring.after(8).count(), 0);
        assert_eq!(ring.after(2).count(), 1);
        // Nothing kept: still numbered, so a listener knows it missed them.
        let mut none = Ring::new(RingLimits::NONE);
        none.push(entry(1, 10));
        assert_eq!((none.entries.len(), none.bytes, none.first()), (0, 0, 2));
    }

    #[test]
    fn utc_days() {
        assert_eq!(super::utc_day(0), "1970-01-01");
        assert_eq!(super::utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(super::utc_day(1_796_083_200_000), "2026-12-01");
    }
}
