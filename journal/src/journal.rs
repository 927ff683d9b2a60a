use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use serde::Serialize;

use crate::blobs::{self, externalize, internalize};
use crate::error::{AppendError, OpenError, ReadError};
use crate::record::{Event, GENESIS, Record, SessionId};
use crate::writer::{Command, Reply, Writer, WriterState};

pub use crate::stored::{Appended, CommitMode, Limits};
use crate::stored::{Checked, Trees, check_value, key, seq_of};

/// Most records waiting in the writer's queue. An append that finds it full waits for room
/// (an async one yields, a blocking one blocks its thread), so a burst of callers slows down
/// to the disk's pace instead of growing memory without bound.
pub const QUEUE_RECORDS_MAX: usize = 16_384;

/// When the writer acknowledges a record.
enum Ack {
    /// After a flush.
    Flushed,
    /// Once written to the tail.
    Written,
    /// Its seq as soon as it is assigned, then as [`Ack::Written`].
    Sequenced(flume::Sender<u64>),
}

impl Ack {
    fn of(durable: bool) -> Self {
        if durable {
            Self::Flushed
        } else {
            Self::Written
        }
    }
}

/// A record whose seq is assigned and whose write is under way.
#[derive(Debug)]
pub struct Sequenced {
    /// Its seq.
    pub seq: u64,
    durable: flume::Receiver<Result<Appended, AppendError>>,
}

impl Sequenced {
    /// Wait until the record is on disk.
    pub async fn durable(self) -> Result<Appended, AppendError> {
        self.durable
            .recv_async()
            .await
            .map_err(|_| AppendError::WriterGone)?
    }
}

/// A record in the writer's queue, its seq not known yet.
#[derive(Debug)]
pub struct Queued {
    seq: flume::Receiver<u64>,
    durable: flume::Receiver<Result<Appended, AppendError>>,
}

impl Queued {
    /// Wait until the writer has given the record its seq and written it to the tail.
    pub async fn sequenced(self) -> Result<Sequenced, AppendError> {
        let Self { seq, durable } = self;
        match seq.recv_async().await {
            Ok(seq) => Ok(Sequenced { seq, durable }),
            // No seq: the writer refused the record; its reply says why.
            Err(_) => match durable.recv_async().await {
                Ok(Err(e)) => Err(e),
                _ => Err(AppendError::WriterGone),
            },
        }
    }
}

/// A session as `aido replay sessions` lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionSummary {
    /// The id.
    pub id: SessionId,
    /// When it started.
    pub started_ms: u64,
    /// The MCP client, if known.
    pub client: Option<String>,
    /// Its working directory.
    pub cwd: String,
    /// How many records it holds.
    pub records: u64,
}

/// Where verify found the chain broken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Broken {
    /// The first seq that does not check out.
    pub seq: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// What verify found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// The hash of the last good record.
    pub head: String,
    /// Where the chain starts when retention removed the session's older records: the last
    /// record removed (the chain is checked from the one after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned_through: Option<u64>,
    /// The first break, if any.
    pub broken: Option<Broken>,
}

/// Where a session's chain starts after retention removed its older records, as its newest
/// `pruned` record says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// The seq of the `pruned` record.
    pub seq: u64,
    /// The last record removed.
    pub through_seq: u64,
    /// Its hash: the `prev` of the first record kept.
    pub hash: String,
    /// Rewinds among the removed records.
    pub rewinds: u32,
}

impl Cut {
    /// The cut a stored record (blobs by reference) at `seq` makes, if it is a `pruned` one.
    pub(crate) fn of(seq: u64, stored: &serde_json::Value) -> Option<Self> {
        if stored["event"].as_str() != Some("pruned") {
            return None;
        }
        Some(Self {
            seq,
            through_seq: stored["through_seq"].as_u64()?,
            hash: stored["hash"].as_str()?.to_owned(),
            rewinds: stored["rewinds"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
        })
    }
}

struct Inner {
    trees: Arc<Trees>,
    limits: Limits,
    path: PathBuf,
    /// `None` when read-only.
    sender: Option<flume::Sender<Command>>,
    state: Arc<WriterState>,
    writer: Mutex<Option<JoinHandle<()>>>,
    // A copy of a live journal, removed when this handle goes.
    _scratch: Option<tempfile::TempDir>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel lets the writer commit what is queued and stop.
        self.sender.take();
        if let Ok(mut writer) = self.writer.lock()
            && let Some(handle) = writer.take()
        {
            let _ = handle.join();
        }
    }
}

/// A handle on one journal. Cheap to clone; the writer stops when the last clone goes.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.inner.path)
            .finish()
    }
}

fn is_lock_error(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

/// sled's page cache, in bytes of pages as stored on disk. sled holds several times this in
/// memory (a page's keys and values are allocations of their own), and more until its LRU
/// catches up (it takes accesses in blocks of 64 per shard, 256 shards). More cache buys little
/// for an append-only journal whose readers mostly read what was just written.
const PAGE_CACHE_BYTES_MAX: u64 = 4 << 20;

/// How every journal's sled database is configured (retention's compaction makes a fresh one
/// the same way, since sled refuses to reopen a database under other settings).
pub(crate) fn sled_config(path: &Path) -> sled::Config {
    sled::Config::new()
        .path(path)
        .cache_capacity(PAGE_CACHE_BYTES_MAX)
        // The writer flushes every batch itself; the background flusher only adds work.
        .flush_every_ms(None)
}

fn open_trees(path: &Path, objects: &Path) -> Result<Trees, OpenError> {
    let storage = |source: sled::Error| {
        if is_lock_error(&source) {
            OpenError::Locked {
                path: path.display().to_string(),
            }
        } else {
            OpenError::Storage {
                path: path.display().to_string(),
                source,
            }
        }
    };
    let db = sled_config(path).open().map_err(storage)?;
    let records = db.open_tree("records").map_err(storage)?;
    let blobs = blobs::BlobStore {
        blobs: db.open_tree("blobs").map_err(storage)?,
        chunked: db.open_tree("chunked").map_err(storage)?,
        objects: crate::objects::Objects::new(objects.to_owned()),
    };
    let sessions = db.open_tree("sessions").map_err(storage)?;
    Ok(Trees {
        db,
        records,
        blobs,
        sessions,
    })
}

impl Journal {
    /// Open (or create) the journal in `path` and start its writer, whose queue holds up to
    /// [`QUEUE_RECORDS_MAX`] records.
    pub fn open(path: &Path, limits: Limits, mode: CommitMode) -> Result<Self, OpenError> {
        Self::open_with_queue(path, limits, mode, QUEUE_RECORDS_MAX)
    }

    /// As [`Journal::open`], with a writer queue of `queue_records_max` records (at least 1).
    pub fn open_with_queue(
        path: &Path,
        limits: Limits,
        mode: CommitMode,
        queue_records_max: usize,
    ) -> Result<Self, OpenError> {
        let trees = Arc::new(open_trees(path, &crate::objects::objects_dir(path))?);
        let tail_err = |source: std::io::Error| OpenError::Tail {
            path: path.join(crate::tail::TAIL_FILE).display().to_string(),
            source,
        };
        // What the last writer wrote and did not flush (it was killed) goes back first.
        let restored = crate::tail::replay(path, &trees.records, &trees.sessions, &trees.blobs)
            .map_err(tail_err)?;
        if restored > 0 {
            trees
                .blobs
                .sync()
                .map_err(|e| tail_err(std::io::Error::other(e.to_string())))?;
            trees
                .db
                .flush()
                .map_err(|e| tail_err(std::io::Error::other(e.to_string())))?;
        }
        let tail = crate::tail::Tail::open(path).map_err(tail_err)?;
        let mut tail = tail;
        tail.empty().map_err(tail_err)?;
        let (sender, receiver) = flume::bounded(queue_records_max.max(1));
        let state = Arc::new(WriterState::default());
        let writer = Writer::new(trees.clone(), limits, mode, state.clone(), Some(tail));
        let handle = writer
            .spawn(receiver)
            .map_err(|source| OpenError::WriterStart {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                trees,
                limits,
                path: path.to_owned(),
                sender: Some(sender),
                state,
                writer: Mutex::new(Some(handle)),
                _scratch: None,
            }),
        })
    }

    /// Open a journal for reading only. If a running aido holds it, read a copy taken now
    /// (sled recovers the copy as it would after a crash: every acknowledged record is in it).
    pub fn open_read_only(path: &Path) -> Result<Self, OpenError> {
        let objects = crate::objects::objects_dir(path);
        let (trees, scratch) = match open_trees(path, &objects) {
            Ok(trees) => (trees, None),
            Err(OpenError::Locked { .. }) => {
                let copy_err = |source| OpenError::Copy {
                    path: path.display().to_string(),
                    source,
                };
                let scratch = tempfile::tempdir().map_err(copy_err)?;
                copy_dir(path, scratch.path()).map_err(copy_err)?;
                let trees = open_trees(scratch.path(), &objects)?;
                // The copy's tail holds what the live writer has written but not flushed.
                crate::tail::replay(
                    scratch.path(),
                    &trees.records,
                    &trees.sessions,
                    &trees.blobs,
                )
                .map_err(copy_err)?;
                (trees, Some(scratch))
            }
            Err(e) => return Err(e),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                trees: Arc::new(trees),
                limits: Limits::default(),
                path: path.to_owned(),
                sender: None,
                state: Arc::new(WriterState::default()),
                writer: Mutex::new(None),
                _scratch: scratch,
            }),
        })
    }

    /// The directory this journal lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Its trees, for retention.
    pub(crate) fn trees(&self) -> &Trees {
        &self.inner.trees
    }

    /// True when this handle reads a copy of a journal a running aido holds.
    pub fn is_copy(&self) -> bool {
        self.inner._scratch.is_some()
    }

    /// True when this handle takes appends (it holds the journal's lock and its writer).
    pub fn is_writer(&self) -> bool {
        self.inner.sender.is_some()
    }

    /// Pin everything this journal stores from now on against retention's sweep, until the
    /// guard drops (see [`crate::PinGuard`]). Take it before anything is stored.
    pub fn pin_blobs(&self) -> crate::PinGuard {
        self.inner.trees.blobs.pins().guard()
    }

    /// The limits it enforces.
    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// Encode a record for the writer. Limits are checked here, before a seq is taken.
    fn command(
        &self,
        session: SessionId,
        time_ms: u64,
        event: &Event,
        extra: Vec<(String, Vec<u8>)>,
        ack: Ack,
        reply: Reply,
    ) -> Result<Command, AppendError> {
        let (durable, sequenced) = match ack {
            Ack::Flushed => (true, None),
            Ack::Written => (false, None),
            Ack::Sequenced(tx) => (false, Some(tx)),
        };
        let limits = self.inner.limits;
        let value = serde_json::to_value(event).map_err(|e| AppendError::Storage {
            message: format!("cannot encode the event: {e}"),
        })?;
        // The blobs the caller named come first, so a long string with the same bytes (a
        // read's contents in its outcome) takes their hash instead of being hashed again.
        let mut blobs = extra;
        blobs.dedup_by(|a, b| a.0 == b.0);
        let stored = externalize(value, &mut blobs);
        if let Some((_, big)) = blobs
            .iter()
            .find(|(_, b)| b.len() as u64 > limits.blob_bytes_max)
        {
            return Err(AppendError::BlobTooLarge {
                bytes: big.len() as u64,
                max: limits.blob_bytes_max,
            });
        }
        let event_json = serde_json::to_vec(&stored).map_err(|e| AppendError::Storage {
            message: format!("cannot encode the event: {e}"),
        })?;
        // The writer splices the event's fields after the header's: it must be an object.
        assert!(
            event_json.first() == Some(&b'{'),
            "an event encodes as a JSON object"
        );
        assert!(
            event_json.last() == Some(&b'}'),
            "an event encodes as a JSON object"
        );
        // The header (version, session, seq, time, prev) adds under 200 bytes.
        let bytes = event_json.len() as u64 + 200;
        if bytes > limits.record_bytes_max {
            return Err(AppendError::RecordTooLarge {
                bytes,
                max: limits.record_bytes_max,
            });
        }
        let session_meta = match event {
            Event::SessionStarted { client, cwd, .. } => Some(
                serde_json::json!({"started_ms": time_ms, "client": client, "cwd": cwd})
                    .to_string(),
            ),
            _ => None,
        };
        Ok(Command::Append {
            session,
            time_ms,
            event_json,
            blobs,
            session_meta,
            durable,
            sequenced,
            reply,
        })
    }

    /// The writer's queue, if the writer takes appends.
    fn sender(&self) -> Result<&flume::Sender<Command>, AppendError> {
        let sender = self.inner.sender.as_ref().ok_or(AppendError::ReadOnly)?;
        if self.inner.state.gone.load(Ordering::Acquire) {
            return Err(AppendError::WriterGone);
        }
        Ok(sender)
    }

    /// Queue a command, waiting (without blocking the thread) while the queue is full.
    async fn submit(&self, command: Command) -> Result<(), AppendError> {
        self.sender()?
            .send_async(command)
            .await
            .map_err(|_| AppendError::WriterGone)
    }

    /// Queue a record and wait for its acknowledgement: after a flush when `durable`, else once
    /// it is written to the tail.
    async fn wait(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
        blobs: Vec<(String, Vec<u8>)>,
        durable: bool,
    ) -> Result<Appended, AppendError> {
        let (tx, rx) = flume::bounded(1);
        let command = self.command(
            session,
            time_ms,
            &event,
            blobs,
            Ack::of(durable),
            Reply::Async(tx),
        )?;
        self.submit(command).await?;
        rx.recv_async().await.map_err(|_| AppendError::WriterGone)?
    }

    /// As [`Journal::wait`], blocking the thread.
    fn wait_blocking(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
        durable: bool,
    ) -> Result<Appended, AppendError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let command = self.command(
            session,
            time_ms,
            &event,
            Vec::new(),
            Ack::of(durable),
            Reply::Blocking(tx),
        )?;
        self.submit_blocking(command)?;
        rx.recv().map_err(|_| AppendError::WriterGone)?
    }

    /// Queue a command, blocking the thread while the queue is full.
    fn submit_blocking(&self, command: Command) -> Result<(), AppendError> {
        self.sender()?
            .send(command)
            .map_err(|_| AppendError::WriterGone)
    }

    /// Records waiting in the writer's queue now (for tests and gauges).
    #[doc(hidden)]
    pub fn queue_records(&self) -> usize {
        self.inner.sender.as_ref().map_or(0, flume::Sender::len)
    }

    /// The most records the writer has found waiting in its queue since the journal opened
    /// (for tests and gauges).
    #[doc(hidden)]
    pub fn queue_records_peak(&self) -> usize {
        self.inner.state.queue_records_peak.load(Ordering::Relaxed)
    }

    /// Append a record and wait until it is durable. While the writer's queue is full this
    /// waits for room first.
    ///
    /// # Cancel safety
    /// Dropping the future while it waits for room in the queue drops the record unqueued.
    /// Dropping it after the record was queued does not unqueue it: it may still be written,
    /// and only its acknowledgement is lost.
    pub async fn append(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
    ) -> Result<Appended, AppendError> {
        self.wait(session, time_ms, event, Vec::new(), true).await
    }

    /// Append a record together with blobs its event names by hash (file contents that an
    /// effect refers to), each given with its blake3 (hex) as the body computed it, and wait
    /// until all of it is durable.
    ///
    /// # Cancel safety
    /// As [`Journal::append`].
    pub async fn append_with_blobs(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
        blobs: Vec<(String, Vec<u8>)>,
    ) -> Result<Appended, AppendError> {
        self.wait(session, time_ms, event, blobs, true).await
    }

    /// Append a record (with the blobs its event names, as [`Journal::append_with_blobs`]) and
    /// wait until it is written to the tail: it survives kill -9 of aido from then on, and is
    /// durable (survives a power loss) at the next flush, at most
    /// [`LAZY_FLUSH_MS`](crate::LAZY_FLUSH_MS) later. For the records of actions that change
    /// nothing; a mutation's records use [`Journal::append_with_blobs`].
    ///
    /// # Cancel safety
    /// As [`Journal::append`].
    pub async fn append_written(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
        blobs: Vec<(String, Vec<u8>)>,
    ) -> Result<Appended, AppendError> {
        self.wait(session, time_ms, event, blobs, false).await
    }

    /// As [`Journal::append_written`], blocking the thread. Not for async contexts.
    pub fn append_written_blocking(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
    ) -> Result<Appended, AppendError> {
        self.wait_blocking(session, time_ms, event, false)
    }

    /// Append a record and return as soon as its seq is assigned, before it is durable; await
    /// [`Sequenced::durable`] for that. A later record's durable acknowledgement implies this
    /// one is durable too: records are written in order, and after a failed write the journal
    /// refuses every later append.
    ///
    /// # Cancel safety
    /// As [`Journal::append`].
    pub async fn append_sequenced(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
    ) -> Result<Sequenced, AppendError> {
        self.append_queued(session, time_ms, event)
            .await?
            .sequenced()
            .await
    }

    /// Queue a record and return as soon as it is queued, before the writer has taken it:
    /// await [`Queued::sequenced`] for its seq (the record is then written to the tail).
    /// Records are written in the order they are queued, so a caller may start work that
    /// does not need the seq while the writer writes. For the records of actions that change
    /// nothing, whose proposal need not be written before they run.
    ///
    /// # Cancel safety
    /// As [`Journal::append`].
    pub async fn append_queued(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
    ) -> Result<Queued, AppendError> {
        let (tx, durable) = flume::bounded(1);
        let (seq_tx, seq) = flume::bounded(1);
        let command = self.command(
            session,
            time_ms,
            &event,
            Vec::new(),
            Ack::Sequenced(seq_tx),
            Reply::Async(tx),
        )?;
        self.submit(command).await?;
        Ok(Queued { seq, durable })
    }

    /// Append a record and block the thread until it is durable (and, while the writer's
    /// queue is full, until there is room). Not for async contexts.
    pub fn append_blocking(
        &self,
        session: SessionId,
        time_ms: u64,
        event: Event,
    ) -> Result<Appended, AppendError> {
        self.wait_blocking(session, time_ms, event, true)
    }

    /// Bytes of a blob by hash (hex), put together if it is stored in chunks.
    pub fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, ReadError> {
        self.inner.trees.blobs.get(hash)
    }

    /// The blob store, for bodies that keep contents (a large before-image) themselves, by
    /// streaming, before the record naming them is appended.
    pub fn blob_store(&self) -> blobs::BlobStore {
        self.inner.trees.blobs.clone()
    }

    /// Read the record stored under (session, seq): its bytes must match its hash, its format
    /// be one this aido reads, and its header name the key it is stored under.
    fn decode(&self, session: SessionId, seq: u64, value: &[u8]) -> Result<Record, ReadError> {
        let checked = check_value(&self.inner.trees.blobs, session, seq, value)?;
        let fetch = |h: &str| self.blob(h);
        let value = internalize(checked.stored, seq, &fetch)?;
        let mut record: Record = serde_json::from_value(value).map_err(|e| ReadError::Corrupt {
            seq,
            reason: format!("not a record: {e}"),
        })?;
        // The header was checked as JSON above; the typed record must agree with it.
        assert!(record.seq == seq, "a checked record keeps its seq");
        assert!(
            record.session == session,
            "a checked record keeps its session"
        );
        record.hash = hex::encode(checked.hash);
        crate::record::upgrade(&mut record);
        Ok(record)
    }

    /// Records of a session with `from <= seq < to`, oldest first; at most `limit`, taken from
    /// the newest end when `newest` is set.
    pub fn records(
        &self,
        session: SessionId,
        from: u64,
        to: Option<u64>,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<Record>, ReadError> {
        let start = key(session, from.max(1));
        let end = match to {
            Some(to) => Bound::Excluded(key(session, to).to_vec()),
            None => Bound::Excluded(key(session, u64::MAX).to_vec()),
        };
        let range = self
            .inner
            .trees
            .records
            .range((Bound::Included(start.to_vec()), end));
        let mut out = Vec::new();
        let items: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> = if newest {
            Box::new(range.rev())
        } else {
            Box::new(range)
        };
        for item in items.take(limit) {
            let (k, v) = item?;
            out.push(self.decode(session, seq_of(&k)?, &v)?);
        }
        if newest {
            out.reverse();
        }
        Ok(out)
    }

    /// Every record of a session, oldest first.
    pub fn all_records(&self, session: SessionId) -> Result<Vec<Record>, ReadError> {
        self.records(session, 1, None, usize::MAX, false)
    }

    /// The seq of a session's last record as this handle's writer last wrote it, without a
    /// scan of the tree: what admission control asks once per proposal. A session this
    /// writer has not written yet (or a read-only handle) is looked up as [`Self::head_seq`]
    /// does.
    pub fn written_head(&self, session: SessionId) -> Result<u64, ReadError> {
        let published = self
            .inner
            .state
            .heads
            .lock()
            .ok()
            .and_then(|heads| heads.get(&session).copied());
        match published {
            Some(seq) => Ok(seq),
            None => self.head_seq(session),
        }
    }

    /// Forget a session's published head (its records were removed whole).
    pub(crate) fn forget_head(&self, session: SessionId) {
        if let Ok(mut heads) = self.inner.state.heads.lock() {
            heads.remove(&session);
        }
    }

    /// The seq of a session's last record (0 when it has none).
    pub fn head_seq(&self, session: SessionId) -> Result<u64, ReadError> {
        match self
            .inner
            .trees
            .records
            .scan_prefix(session.as_bytes())
            .next_back()
            .transpose()?
        {
            None => Ok(0),
            Some((k, _)) => seq_of(&k),
        }
    }

    /// Every session in this journal, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionSummary>, ReadError> {
        let mut out = Vec::new();
        for item in self.inner.trees.sessions.iter() {
            let (k, v) = item?;
            let bytes =
                <[u8; 16]>::try_from(k.as_ref()).map_err(|_| ReadError::SessionCorrupt {
                    session: hex::encode(&k),
                    reason: format!("its key is {} bytes, not 16", k.len()),
                })?;
            let id = SessionId::from_bytes(bytes);
            let meta: SessionMeta =
                serde_json::from_slice(&v).map_err(|e| ReadError::SessionCorrupt {
                    session: id.to_string(),
                    reason: e.to_string(),
                })?;
            out.push(SessionSummary {
                id,
                started_ms: meta.started_ms,
                client: meta.client,
                cwd: meta.cwd,
                records: self.head_seq(id)?,
            });
        }
        out.sort_by_key(|s| (s.started_ms, s.id));
        Ok(out)
    }

    /// Find a session by its id or a unique prefix of it.
    pub fn find_session(&self, prefix: &str) -> Result<SessionId, ReadError> {
        let prefix = prefix.to_ascii_lowercase();
        let matches: Vec<_> = self
            .sessions()?
            .into_iter()
            .filter(|s| s.id.to_string().starts_with(&prefix))
            .collect();
        match matches.as_slice() {
            [one] => Ok(one.id),
            [] => Err(ReadError::NoSuchSession(prefix)),
            _ => Err(ReadError::AmbiguousSession(prefix)),
        }
    }

    /// Check a session's chain: seqs gap-free from 1, each record's bytes matching its hash,
    /// each `prev` naming the record before, each blob present and matching its hash.
    ///
    /// A session whose older records retention removed starts after a cut: its newest
    /// `pruned` record names the last record removed and that record's hash, and the chain
    /// is checked from the record after it, whose `prev` must be that hash. Records at or
    /// before the cut that are still stored (a prune cut short by a crash) are not checked:
    /// they are on their way out.
    pub fn verify(&self, session: SessionId) -> Result<VerifyReport, ReadError> {
        let base = match self.chain_start(session)? {
            Ok(base) => base,
            Err((seq, reason)) => {
                return Ok(VerifyReport {
                    records: 0,
                    head: hex::encode(GENESIS),
                    pruned_through: None,
                    broken: Some(crate::Broken { seq, reason }),
                });
            }
        };
        let (mut expected, mut prev) = match &base {
            Some(cut) => (cut.through_seq + 1, cut.hash.clone()),
            None => (1u64, hex::encode(GENESIS)),
        };
        let origin = expected;
        let broken = |seq, reason: String, records, head: &str| VerifyReport {
            records,
            head: head.to_owned(),
            pruned_through: base.as_ref().map(|c| c.through_seq),
            broken: Some(crate::Broken { seq, reason }),
        };
        for item in self.inner.trees.records.scan_prefix(session.as_bytes()) {
            let (k, v) = item?;
            let checked = expected - origin;
            let seq = match seq_of(&k) {
                Ok(seq) => seq,
                Err(e) => return Ok(broken(expected, e.to_string(), checked, &prev)),
            };
            if seq < expected {
                // Removed by a cut that a crash interrupted.
                continue;
            }
            if seq != expected {
                return Ok(broken(
                    expected,
                    format!("seq {expected} is missing (next is {seq})"),
                    checked,
                    &prev,
                ));
            }
            let Checked { hash, stored, .. } =
                match check_value(&self.inner.trees.blobs, session, seq, &v) {
                    Ok(c) => c,
                    Err(ReadError::Corrupt { reason, .. }) => {
                        return Ok(broken(seq, reason, checked, &prev));
                    }
                    Err(e) => return Ok(broken(seq, e.to_string(), checked, &prev)),
                };
            if stored["prev"].as_str() != Some(prev.as_str()) {
                let reason = match &base {
                    Some(cut) if seq == origin => format!(
                        "its prev hash is not the hash the cut through seq {} recorded",
                        cut.through_seq
                    ),
                    _ => "its prev hash does not name the record before".into(),
                };
                return Ok(broken(seq, reason, checked, &prev));
            }
            if let Some(reason) = self.cut_disagrees(session, seq, &stored)? {
                return Ok(broken(seq, reason, checked, &prev));
            }
            if let Some(reason) = self.blob_damage(&stored)? {
                return Ok(broken(seq, reason, checked, &prev));
            }
            prev = hex::encode(hash);
            expected += 1;
        }
        if let (Some(cut), true) = (&base, expected == origin) {
            // A cut that left nothing after it: the pruned record itself is after the cut,
            // so this cannot be one retention made.
            return Ok(broken(
                origin,
                format!(
                    "the cut through seq {} leaves no record after it",
                    cut.through_seq
                ),
                0,
                &prev,
            ));
        }
        Ok(VerifyReport {
            records: expected - origin,
            head: prev,
            pruned_through: base.map(|c| c.through_seq),
            broken: None,
        })
    }

    /// Where a session's chain starts: at genesis (`None`) when its first stored record is
    /// seq 1, else after its newest cut. A record that does not check out on the way back to
    /// the cut may be the cut itself: the chain is broken there (`Err`).
    fn chain_start(
        &self,
        session: SessionId,
    ) -> Result<Result<Option<Cut>, (u64, String)>, ReadError> {
        let first = match self
            .inner
            .trees
            .records
            .scan_prefix(session.as_bytes())
            .next()
            .transpose()?
        {
            Some((k, _)) => seq_of(&k).ok(),
            None => None,
        };
        match first {
            Some(first) if first > 1 => self.cut_or_damage(session),
            _ => Ok(Ok(None)),
        }
    }

    /// Why the blobs a stored record references do not check out (one missing, damaged, or
    /// not hashing to its name), if they do not.
    fn blob_damage(&self, stored: &serde_json::Value) -> Result<Option<String>, ReadError> {
        let mut refs = Vec::new();
        blobs::references(stored, &mut refs);
        for r in refs {
            let found = match self.blob(&r) {
                Ok(found) => found,
                Err(ReadError::BlobCorrupt { reason, .. }) => {
                    return Ok(Some(format!("blob {r}: {reason}")));
                }
                Err(e) => return Err(e),
            };
            match found {
                Some(bytes) if blobs::hash_hex(&bytes) == r => {}
                Some(_) => return Ok(Some(format!("blob {r} does not match its hash"))),
                None => return Ok(Some(format!("blob {r} is missing"))),
            }
        }
        Ok(None)
    }

    /// The newest `pruned` record of a session: where its chain starts now. Searched from the
    /// newest record back (a cut is recorded after every record it removes, so it is near the
    /// head); a record that does not check out on the way stops the search (`None`).
    pub fn newest_cut(&self, session: SessionId) -> Result<Option<Cut>, ReadError> {
        Ok(self.cut_or_damage(session)?.unwrap_or(None))
    }

    /// The newest cut, or the first record (from the head back) that does not check out
    /// before one is found: its seq and why.
    fn cut_or_damage(
        &self,
        session: SessionId,
    ) -> Result<Result<Option<Cut>, (u64, String)>, ReadError> {
        for item in self
            .inner
            .trees
            .records
            .scan_prefix(session.as_bytes())
            .rev()
        {
            let (k, v) = item?;
            let seq = match seq_of(&k) {
                Ok(seq) => seq,
                Err(e) => return Ok(Err((0, e.to_string()))),
            };
            let checked = match check_value(&self.inner.trees.blobs, session, seq, &v) {
                Ok(c) => c,
                Err(ReadError::Corrupt { reason, .. }) => return Ok(Err((seq, reason))),
                Err(e) => return Ok(Err((seq, e.to_string()))),
            };
            if let Some(cut) = Cut::of(seq, &checked.stored) {
                return Ok(Ok(Some(cut)));
            }
        }
        Ok(Ok(None))
    }

    /// For a `pruned` record whose last removed record is still stored (the prune has not
    /// removed it yet): whether the hash it recorded is not that record's.
    fn cut_disagrees(
        &self,
        session: SessionId,
        seq: u64,
        stored: &serde_json::Value,
    ) -> Result<Option<String>, ReadError> {
        let Some(cut) = Cut::of(seq, stored) else {
            return Ok(None);
        };
        if cut.through_seq >= seq {
            return Ok(Some(format!(
                "it cuts through seq {}, which is not before it",
                cut.through_seq
            )));
        }
        let Some(value) = self
            .inner
            .trees
            .records
            .get(key(session, cut.through_seq))?
        else {
            return Ok(None);
        };
        let actual = match check_value(&self.inner.trees.blobs, session, cut.through_seq, &value) {
            Ok(c) => hex::encode(c.hash),
            // Damage at or before the cut is on its way out; the cut names what it was.
            Err(_) => return Ok(None),
        };
        Ok((actual != cut.hash).then(|| {
            format!(
                "it says seq {} hashed to {}, but that record hashes to {actual}",
                cut.through_seq, cut.hash
            )
        }))
    }

    /// Every record as the writer inserts it (readable from then on, durable at the batch's
    /// flush): what the audit files and `aido serve`'s `/events` follow. sled hands each insert
    /// to the subscriber through a bounded channel, so a subscriber must keep reading.
    pub fn watch_records(&self) -> sled::Subscriber {
        self.inner.trees.records.watch_prefix(Vec::new())
    }

    /// Raw access for tools that inspect or test the on-disk form (e.g. the tamper test).
    #[doc(hidden)]
    pub fn raw_records_tree(&self) -> sled::Tree {
        self.inner.trees.records.clone()
    }
}

/// What a session's metadata holds, as [`Journal::command`] writes it.
#[derive(serde::Deserialize)]
struct SessionMeta {
    started_ms: u64,
    client: Option<String>,
    cwd: String,
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::FORMAT_VERSION;
    use crate::stored::RECORD_INLINE_BYTES_MAX;

    fn open(limits: Limits) -> (tempfile::TempDir, Journal) {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), limits, CommitMode::Group).unwrap();
        (dir, j)
    }

    fn ended(reason: &str) -> Event {
        Event::SessionEnded {
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn seqs_are_gap_free_per_session_and_chained() {
        let (_d, j) = open(Limits::default());
        let a = SessionId::from_bytes([1; 16]);
        let b = SessionId::from_bytes([2; 16]);
        for n in 0..5 {
            assert_eq!(j.append_blocking(a, n, ended("a")).unwrap().seq, n + 1);
            assert_eq!(j.append_blocking(b, n, ended("b")).unwrap().seq, n + 1);
        }
        let records = j.all_records(a).unwrap();
        assert_eq!(
            records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(records[0].prev, hex::encode(GENESIS));
        for pair in records.windows(2) {
            assert_eq!(pair[1].prev, pair[0].hash);
        }
        assert_eq!(j.verify(b).unwrap().records, 5);
    }

    #[test]
    fn long_strings_are_stored_once_as_blobs() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([3; 16]);
        let content = "line\n".repeat(10_000);
        for n in 0..3 {
            j.append_blocking(s, n, ended(&content)).unwrap();
        }
        // Three records, one blob (50 kB: an object): its bytes are stored once.
        let objects = j.inner.trees.blobs.objects().list().unwrap();
        assert_eq!(objects, vec![blobs::hash_hex(content.as_bytes())]);
        assert!(
            j.inner.trees.blobs.blobs.is_empty(),
            "three records, one blob"
        );
        let record_bytes: usize = j
            .inner
            .trees
            .records
            .iter()
            .map(|kv| kv.unwrap().1.len())
            .sum();
        assert!(
            record_bytes < 3 * 500,
            "records hold references, not contents ({record_bytes} bytes)"
        );
        let records = j.all_records(s).unwrap();
        assert!(records.iter().all(|r| r.event == ended(&content)));
    }

    /// A record larger than `RECORD_INLINE_BYTES_MAX` keeps its bytes in the blob store under its own hash and
    /// reads back, verifies and chains as any; its bytes gone, it is damaged, not absent.
    #[test]
    fn a_large_record_keeps_its_bytes_in_the_blob_store() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([4; 16]);
        let paths: Vec<String> = (0..300)
            .map(|k| format!("~/d/{k}/{}", "p".repeat(90)))
            .collect();
        let action =
            aido_actions::Action::from_tool_call("stat_files", serde_json::json!({"paths": paths}))
                .unwrap();
        let large = Event::ActionProposed {
            action,
            verdict: aido_actions::Verdict::Allow,
            parent: None,
        };
        j.append_blocking(s, 1, ended("before")).unwrap();
        let appended = j.append_blocking(s, 2, large.clone()).unwrap();
        j.append_blocking(s, 3, ended("after")).unwrap();
        let stored = j.inner.trees.records.get(key(s, 2)).unwrap().unwrap();
        assert_eq!(
            hex::encode(&stored),
            appended.hash,
            "the tree holds the hash alone"
        );
        let records = j.all_records(s).unwrap();
        assert_eq!(records[1].event, large);
        assert_eq!(records[1].hash, appended.hash);
        assert_eq!(records[2].prev, appended.hash);
        assert_eq!(j.verify(s).unwrap().broken, None);
        for item in j.inner.trees.records.iter() {
            assert!(item.unwrap().1.len() <= RECORD_INLINE_BYTES_MAX);
        }
        // Its bytes gone from the blob store: verify names it, a read is an error.
        let objects = j.inner.trees.blobs.objects();
        assert!(objects.contains(&appended.hash), "kept as an object");
        assert!(objects.remove(&appended.hash).unwrap().is_some());
        assert_eq!(j.verify(s).unwrap().broken.map(|b| b.seq), Some(2));
        assert_eq!(
            j.all_records(s).unwrap_err().code(),
            "journal_record_corrupt"
        );
    }

    #[test]
    fn limits_are_coded_and_take_no_seq() {
        let limits = Limits {
            record_bytes_max: 600,
            blob_bytes_max: 2000,
            records_per_session_max: 3,
        };
        let (_d, j) = open(limits);
        let s = SessionId::from_bytes([4; 16]);
        let too_long_inline = "x".repeat(1000); // inline (<= 1024) but over the record limit
        assert_eq!(
            j.append_blocking(s, 0, ended(&too_long_inline))
                .unwrap_err()
                .code(),
            "journal_record_too_large"
        );
        assert_eq!(
            j.append_blocking(s, 0, ended(&"y".repeat(3000)))
                .unwrap_err()
                .code(),
            "journal_blob_too_large"
        );
        for n in 1..=3 {
            assert_eq!(j.append_blocking(s, 0, ended("ok")).unwrap().seq, n);
        }
        assert_eq!(
            j.append_blocking(s, 0, ended("ok")).unwrap_err().code(),
            "journal_session_full"
        );
        assert_eq!(
            j.verify(s).unwrap(),
            VerifyReport {
                records: 3,
                head: j.all_records(s).unwrap()[2].hash.clone(),
                pruned_through: None,
                broken: None
            }
        );
        // Another session is not affected.
        assert_eq!(
            j.append_blocking(SessionId::from_bytes([5; 16]), 0, ended("ok"))
                .unwrap()
                .seq,
            1
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_async_appends_stay_gap_free() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([6; 16]);
        let tasks: Vec<_> = (0..200)
            .map(|n| {
                let j = j.clone();
                tokio::spawn(async move { j.append(s, n, ended("c")).await.unwrap().seq })
            })
            .collect();
        let mut seqs = Vec::new();
        for t in tasks {
            seqs.push(t.await.unwrap());
        }
        seqs.sort();
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>());
        assert_eq!(j.verify(s).unwrap().broken, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sequenced_appends_get_their_seq_before_they_are_durable() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([10; 16]);
        let first = j.append_sequenced(s, 0, ended("a")).await.unwrap();
        assert_eq!(first.seq, 1);
        // A later durable record implies the earlier one is on disk.
        let second = j.append(s, 0, ended("b")).await.unwrap();
        assert_eq!(second.seq, 2);
        assert_eq!(j.head_seq(s).unwrap(), 2);
        assert_eq!(first.durable().await.unwrap().seq, 1);
        let full = Limits {
            records_per_session_max: 2,
            ..Limits::default()
        };
        let (_d2, k) = open(full);
        k.append(s, 0, ended("1")).await.unwrap();
        k.append(s, 0, ended("2")).await.unwrap();
        let refused = k.append_sequenced(s, 0, ended("3")).await.unwrap_err();
        assert_eq!(refused.code(), "journal_session_full");
    }

    /// The head a proposal's admission reads comes from the writer, and is the tree's: for a
    /// session this handle wrote, one it has not (written by an earlier handle), and one with
    /// no record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_written_head_is_the_stored_head() {
        let dir = tempfile::tempdir().unwrap();
        let (s, other, none) = (
            SessionId::from_bytes([21; 16]),
            SessionId::from_bytes([22; 16]),
            SessionId::from_bytes([23; 16]),
        );
        {
            let j = Journal::open(dir.path(), Limits::default(), CommitMode::Group).unwrap();
            for n in 0..3 {
                j.append(other, 0, ended(&n.to_string())).await.unwrap();
            }
        }
        let j = Journal::open(dir.path(), Limits::default(), CommitMode::Group).unwrap();
        assert_eq!(
            j.written_head(other).unwrap(),
            3,
            "a session of an earlier handle"
        );
        assert_eq!(j.written_head(none).unwrap(), 0, "a session with no record");
        for n in 1..=5u64 {
            j.append(s, 0, ended(&n.to_string())).await.unwrap();
            assert_eq!(j.written_head(s).unwrap(), n);
            assert_eq!(j.written_head(s).unwrap(), j.head_seq(s).unwrap());
        }
        j.append(other, 0, ended("4")).await.unwrap();
        assert_eq!(j.written_head(other).unwrap(), 4);
    }

    /// A queued record takes its place in the order it was queued: a record appended after
    /// it, before its seq was awaited, still comes after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_appends_keep_their_place_in_the_order() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([11; 16]);
        let queued = j.append_queued(s, 0, ended("proposal")).await.unwrap();
        let after = j.append_written(s, 0, ended("outcome"), Vec::new()).await;
        assert_eq!(after.unwrap().seq, 2);
        assert_eq!(queued.sequenced().await.unwrap().seq, 1);
        assert_eq!(j.verify(s).unwrap().broken, None);
    }

    /// Contents a caller hands over with their hash are not hashed or kept again when the
    /// event carries the same string (a read's outcome carries what the body read).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_string_the_caller_kept_takes_its_blob() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([12; 16]);
        let content = "read me\n".repeat(500);
        let hash = blobs::hash_hex(content.as_bytes());
        let blob = (hash.clone(), content.clone().into_bytes());
        j.append_written(s, 0, ended(&content), vec![blob])
            .await
            .unwrap();
        assert_eq!(j.inner.trees.blobs.blobs.len(), 1);
        let stored = j.inner.trees.records.iter().next().unwrap().unwrap().1;
        let text = String::from_utf8_lossy(&stored);
        assert!(text.contains(&hash), "the record names the caller's blob");
        assert_eq!(j.all_records(s).unwrap()[0].event, ended(&content));
    }

    #[test]
    fn a_live_journal_can_be_read_from_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let live = Journal::open(dir.path(), Limits::default(), CommitMode::Group).unwrap();
        let s = SessionId::from_bytes([8; 16]);
        let started = Event::SessionStarted {
            client: Some("t".into()),
            cwd: "/".into(),
            runtime: "x".into(),
            grant: None,
        };
        live.append_blocking(s, 1, started).unwrap();
        assert!(matches!(
            Journal::open(dir.path(), Limits::default(), CommitMode::Group),
            Err(OpenError::Locked { .. })
        ));
        let reader = Journal::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.sessions().unwrap()[0].id, s);
        assert_eq!(
            reader.append_blocking(s, 2, ended("x")).unwrap_err().code(),
            "journal_read_only"
        );
    }

    /// Poll until `cond` holds, for at most 10 s.
    fn wait_until(cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "timed out");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Await futures polling them in the order given, so that those that queue do so in
    /// that order.
    async fn in_order<T>(
        mut futures: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + '_>>>,
    ) -> Vec<T> {
        let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            for (future, out) in futures.iter_mut().zip(done.iter_mut()) {
                if out.is_none()
                    && let std::task::Poll::Ready(v) = future.as_mut().poll(cx)
                {
                    *out = Some(v);
                }
            }
            if done.iter().all(Option::is_some) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        done.into_iter().flatten().collect()
    }

    const WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

    /// A burst far larger than the queue: the queue fills to its bound and no further, async
    /// callers wait (without blocking their threads) and a blocking caller blocks, and once
    /// the writer moves every record lands in submission order, gap-free.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // Holding the writer's hold lock across awaits is the point: the writer thread waits on
    // it, never a task of this runtime.
    #[allow(clippy::await_holding_lock)]
    async fn a_burst_larger_than_the_queue_waits_and_lands_in_order() {
        const BOUND: usize = 8;
        const BURST: u64 = 1000;
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open_with_queue(dir.path(), Limits::default(), CommitMode::Group, BOUND)
            .unwrap();
        let held = SessionId::from_bytes([20; 16]);
        let s = SessionId::from_bytes([21; 16]);
        let other = SessionId::from_bytes([22; 16]);
        let hold = crate::writer::HOLDS[0].lock().unwrap();
        let holder = {
            let j = j.clone();
            tokio::spawn(async move {
                j.append(held, crate::writer::HOLD_TIME_MS, ended("h"))
                    .await
            })
        };
        wait_until(|| crate::writer::HELD[0].load(Ordering::SeqCst));
        let burst = {
            let j = j.clone();
            tokio::spawn(async move {
                let futures = (1..=BURST)
                    .map(|n| {
                        Box::pin(j.append(s, n, ended("b")))
                            as std::pin::Pin<
                                Box<
                                    dyn std::future::Future<Output = Result<Appended, AppendError>>
                                        + Send,
                                >,
                            >
                    })
                    .collect();
                in_order(futures).await
            })
        };
        wait_until(|| j.queue_records() == BOUND);
        let blocked = {
            let j = j.clone();
            std::thread::spawn(move || j.append_blocking(other, 1, ended("o")))
        };
        // While the writer is held the queue stays at its bound.
        for _ in 0..50 {
            assert!(j.queue_records() <= BOUND, "{}", j.queue_records());
            assert!(!blocked.is_finished(), "a blocking append waits for room");
            tokio::task::yield_now().await;
        }
        drop(hold);
        let results = tokio::time::timeout(WITHIN, burst).await.unwrap().unwrap();
        let seqs: Vec<u64> = results.into_iter().map(|r| r.unwrap().seq).collect();
        assert_eq!(seqs, (1..=BURST).collect::<Vec<_>>());
        assert_eq!(holder.await.unwrap().unwrap().seq, 1);
        assert_eq!(blocked.join().unwrap().unwrap().seq, 1);
        let records = j.all_records(s).unwrap();
        assert!(
            records.iter().all(|r| r.time_ms == r.seq),
            "submission order"
        );
        assert_eq!(records.len() as u64, BURST);
        assert_eq!(j.verify(s).unwrap().broken, None);
        assert!(
            j.queue_records_peak() <= BOUND,
            "{}",
            j.queue_records_peak()
        );
        assert_eq!(
            j.queue_records_peak(),
            BOUND,
            "the writer found the queue full"
        );
    }

    /// A panic in the writer (a failed chain assertion is one) answers the record it held,
    /// the records queued behind it and every later append with `journal_writer_gone`; none
    /// waits forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_panic_answers_every_append_with_writer_gone() {
        let dir = tempfile::tempdir().unwrap();
        // One record per batch, so the records queued behind the panic stay queued.
        let j = Journal::open(dir.path(), Limits::default(), CommitMode::PerRecord).unwrap();
        let s = SessionId::from_bytes([23; 16]);
        let hold = crate::writer::HOLDS[1].lock().unwrap();
        let holder = {
            let j = j.clone();
            tokio::spawn(async move {
                j.append(s, crate::writer::HOLD_TIME_MS - 1, ended("h"))
                    .await
            })
        };
        wait_until(|| crate::writer::HELD[1].load(Ordering::SeqCst));
        let panicking = {
            let j = j.clone();
            tokio::spawn(async move { j.append(s, crate::writer::PANIC_TIME_MS, ended("p")).await })
        };
        wait_until(|| j.queue_records() == 1);
        let queued: Vec<_> = (0..10)
            .map(|n| {
                let j = j.clone();
                tokio::spawn(async move {
                    if n % 2 == 0 {
                        j.append(s, n, ended("q")).await.map(|_| ())
                    } else {
                        j.append_sequenced(s, n, ended("q")).await.map(|_| ())
                    }
                })
            })
            .collect();
        wait_until(|| j.queue_records() == 11);
        drop(hold);
        assert_eq!(holder.await.unwrap().unwrap().seq, 1);
        let code = |r: Result<(), AppendError>| r.unwrap_err().code();
        let panicked = tokio::time::timeout(WITHIN, panicking)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(code(panicked.map(|_| ())), "journal_writer_gone");
        for q in queued {
            let r = tokio::time::timeout(WITHIN, q).await.unwrap().unwrap();
            assert_eq!(code(r), "journal_writer_gone");
        }
        // Later appends, of any kind and any session, are refused at once.
        let later = tokio::time::timeout(WITHIN, j.append(s, 0, ended("l")))
            .await
            .unwrap();
        assert_eq!(code(later.map(|_| ())), "journal_writer_gone");
        let fresh = SessionId::from_bytes([24; 16]);
        let later = j.append_sequenced(fresh, 0, ended("l")).await.map(|_| ());
        assert_eq!(code(later), "journal_writer_gone");
        let blocking = {
            let j = j.clone();
            tokio::task::spawn_blocking(move || j.append_blocking(fresh, 0, ended("l")))
        };
        let later = tokio::time::timeout(WITHIN, blocking)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(code(later.map(|_| ())), "journal_writer_gone");
        // What was acknowledged is still there and whole.
        assert_eq!(j.verify(s).unwrap().records, 1);
    }

    /// The chain is asserted right before each record joins the batch: a writer whose head
    /// went wrong stops (`journal_writer_gone`) instead of writing a gap or a fork.
    #[test]
    fn a_broken_chain_stops_the_writer_before_it_writes() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([26; 16]);
        for n in 1..=3 {
            assert_eq!(j.append_blocking(s, n, ended("a")).unwrap().seq, n);
        }
        let refused = j
            .append_blocking(s, crate::writer::SKEW_TIME_MS, ended("skewed"))
            .unwrap_err();
        assert_eq!(refused.code(), "journal_writer_gone");
        assert_eq!(
            j.append_blocking(s, 4, ended("after")).unwrap_err().code(),
            "journal_writer_gone"
        );
        assert_eq!(j.head_seq(s).unwrap(), 3, "nothing was written");
        assert_eq!(j.verify(s).unwrap().broken, None);
    }

    /// Unreadable session metadata, and keys that are not keys, are errors, never defaults.
    #[test]
    fn unreadable_metadata_and_keys_are_coded_errors() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([25; 16]);
        let started = Event::SessionStarted {
            client: None,
            cwd: "/w".into(),
            runtime: "t".into(),
            grant: None,
        };
        j.append_blocking(s, 5, started).unwrap();
        assert_eq!(j.sessions().unwrap()[0].started_ms, 5);
        let sessions = &j.inner.trees.sessions;
        for bad in [
            &b"not json"[..],
            br#"{"client":null,"cwd":"/w"}"#,
            br#"{"started_ms":1}"#,
        ] {
            sessions.insert(s.as_bytes(), bad).unwrap();
            assert_eq!(j.sessions().unwrap_err().code(), "journal_session_corrupt");
            assert_eq!(
                j.find_session("").unwrap_err().code(),
                "journal_session_corrupt"
            );
        }
        sessions.remove(s.as_bytes()).unwrap();
        sessions.insert(&b"short"[..], &b"{}"[..]).unwrap();
        assert_eq!(j.sessions().unwrap_err().code(), "journal_session_corrupt");
        sessions.remove(&b"short"[..]).unwrap();
        assert_eq!(j.sessions().unwrap(), vec![]);

        let mut bad_key = s.as_bytes().to_vec();
        bad_key.extend_from_slice(&[0xff; 4]);
        j.inner.trees.records.insert(bad_key, &b"x"[..]).unwrap();
        assert_eq!(j.head_seq(s).unwrap_err().code(), "journal_key_corrupt");
        assert_eq!(j.all_records(s).unwrap_err().code(), "journal_key_corrupt");
        assert_eq!(j.verify(s).unwrap().broken.map(|b| b.seq), Some(2));
    }

    /// Records written by an aido of format 2 (before retention) read and verify as they
    /// did; a format newer than this aido's is refused with its code.
    #[test]
    fn records_of_format_2_still_read_and_verify() {
        let (_d, j) = open(Limits::default());
        let s = SessionId::from_bytes([27; 16]);
        for n in 1..=3 {
            j.append_blocking(s, n, ended("two")).unwrap();
        }
        // Rewrite the chain as format 2 wrote it: same records, `"v":2`, each re-hashed and
        // chained to the one before.
        let tree = j.raw_records_tree();
        let mut prev = hex::encode(GENESIS);
        for seq in 1..=3 {
            let k = key(s, seq);
            let value = tree.get(k).unwrap().unwrap();
            let text = String::from_utf8(value[32..].to_vec()).unwrap();
            let mut stored: serde_json::Value = serde_json::from_str(&text).unwrap();
            stored["v"] = 2.into();
            stored["prev"] = prev.clone().into();
            let bytes = serde_json::to_vec(&stored).unwrap();
            let hash = blake3::hash(&bytes);
            let mut out = hash.as_bytes().to_vec();
            out.extend_from_slice(&bytes);
            tree.insert(k, out).unwrap();
            prev = hash.to_hex().to_string();
        }
        let records = j.all_records(s).unwrap();
        assert!(records.iter().all(|r| r.v == 2 && r.event == ended("two")));
        let report = j.verify(s).unwrap();
        assert_eq!((report.records, report.broken), (3, None));
        assert_eq!(FORMAT_VERSION, 3);
    }

    /// Every journal error code, pinned.
    #[test]
    fn error_code_table() {
        let io = || std::io::Error::other("");
        let codes = [
            AppendError::RecordTooLarge { bytes: 0, max: 0 }.code(),
            AppendError::BlobTooLarge { bytes: 0, max: 0 }.code(),
            AppendError::SessionFull { max: 0 }.code(),
            AppendError::Storage {
                message: String::new(),
            }
            .code(),
            AppendError::WriterGone.code(),
            AppendError::ReadOnly.code(),
            AppendError::HeadCorrupt {
                session: String::new(),
                seq: 0,
                reason: String::new(),
            }
            .code(),
            ReadError::Storage(sled::Error::Unsupported(String::new())).code(),
            ReadError::Corrupt {
                seq: 0,
                reason: String::new(),
            }
            .code(),
            ReadError::UnsupportedVersion {
                seq: 0,
                version: 0,
                supported: 0,
            }
            .code(),
            ReadError::KeyCorrupt { key: String::new() }.code(),
            ReadError::SessionCorrupt {
                session: String::new(),
                reason: String::new(),
            }
            .code(),
            ReadError::BlobCorrupt {
                hash: String::new(),
                reason: String::new(),
            }
            .code(),
            ReadError::NoSuchSession(String::new()).code(),
            ReadError::AmbiguousSession(String::new()).code(),
            OpenError::Storage {
                path: String::new(),
                source: sled::Error::Unsupported(String::new()),
            }
            .code(),
            OpenError::Locked {
                path: String::new(),
            }
            .code(),
            OpenError::Unreadable {
                path: String::new(),
                source: io(),
            }
            .code(),
            OpenError::WriterStart {
                path: String::new(),
                source: io(),
            }
            .code(),
            OpenError::Copy {
                path: String::new(),
                source: io(),
            }
            .code(),
        ];
        assert_eq!(
            codes,
            [
                "journal_record_too_large",
                "journal_blob_too_large",
                "journal_session_full",
                "journal_storage_failed",
                "journal_writer_gone",
                "journal_read_only",
                "journal_head_corrupt",
                "journal_read_failed",
                "journal_record_corrupt",
                "journal_format_unsupported",
                "journal_key_corrupt",
                "journal_session_corrupt",
                "journal_blob_corrupt",
                "session_not_found",
                "session_ambiguous",
                "journal_open_failed",
                "journal_locked",
                "journal_dir_unreadable",
                "journal_writer_start_failed",
                "journal_copy_failed",
            ]
        );
        let mut unique = codes.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), codes.len(), "a code is never reused");
    }
}
