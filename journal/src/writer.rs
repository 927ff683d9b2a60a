use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use crate::error::AppendError;
use crate::record::{FORMAT_VERSION, SessionId};
use crate::stored::{
    Appended, CommitMode, Limits, RECORD_INLINE_BYTES_MAX, Trees, check_value, key,
    prev_of_genesis, seq_of,
};

/// What the writer thread shares with the journal's handles.
#[derive(Debug, Default)]
pub(crate) struct WriterState {
    /// Set when the writer panicked: appends are refused at once with
    /// [`AppendError::WriterGone`] instead of being queued.
    pub(crate) gone: AtomicBool,
    /// The most records the writer found waiting in its queue.
    pub(crate) queue_records_peak: AtomicUsize,
    /// Each session's last written seq, as the writer knows it (published after each batch is
    /// in the tree), so a caller asking a session's head pays a map read, not a tree scan.
    pub(crate) heads: std::sync::Mutex<HashMap<SessionId, u64>>,
}

/// Test hook: a record of this time makes the writer panic when it takes it.
#[cfg(test)]
pub(crate) const PANIC_TIME_MS: u64 = u64::MAX - 1;
/// Test hook: a record of this time makes the writer's cached head skip ahead (as a bug in
/// the head cache would), just before the chain is asserted.
#[cfg(test)]
pub(crate) const SKEW_TIME_MS: u64 = u64::MAX - 10;
/// Test hook: a record of time `HOLD_TIME_MS - n` (n < [`HOLDS`]'s length, one per test)
/// makes the writer set `HELD[n]` and wait for `HOLDS[n]` when it takes the record.
#[cfg(test)]
pub(crate) const HOLD_TIME_MS: u64 = u64::MAX - 2;
#[cfg(test)]
pub(crate) static HOLDS: [std::sync::Mutex<()>; 2] =
    [std::sync::Mutex::new(()), std::sync::Mutex::new(())];
#[cfg(test)]
pub(crate) static HELD: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// Most records one group commit takes from the queue.
const BATCH_RECORDS_MAX: usize = 4096;

/// Longest a written but unflushed record waits for a flush (it is in the tail meanwhile, so
/// only a power loss in this window can lose it).
pub const LAZY_FLUSH_MS: u64 = 20;

type Ack = (Reply, Result<Appended, AppendError>);

pub(crate) enum Reply {
    Async(flume::Sender<Result<Appended, AppendError>>),
    Blocking(mpsc::SyncSender<Result<Appended, AppendError>>),
}

impl Command {
    /// Answer a command the writer will not take.
    fn refuse(self, error: AppendError) {
        let Self::Append { reply, .. } = self;
        reply.send(Err(error));
    }
}

impl Reply {
    fn send(self, result: Result<Appended, AppendError>) {
        // A caller that stopped waiting is not an error for the writer.
        match self {
            Self::Async(tx) => {
                let _ = tx.send(result);
            }
            Self::Blocking(tx) => {
                let _ = tx.send(result);
            }
        }
    }
}

pub(crate) enum Command {
    Append {
        session: SessionId,
        time_ms: u64,
        event_json: Vec<u8>,
        blobs: Vec<(String, Vec<u8>)>,
        session_meta: Option<String>,
        /// Told the seq as soon as it is assigned, before the batch is durable.
        sequenced: Option<flume::Sender<u64>>,
        /// Whether this record needs a flush of its own. A record that does not is written
        /// to the tail at once and acknowledged then (it survives kill -9 of aido), and made
        /// durable by the next flush (the next durable record, or [`LAZY_FLUSH_MS`] later).
        durable: bool,
        reply: Reply,
    },
}

/// The one writer. It alone assigns seqs and prev hashes, so they are gap-free and chained.
pub(crate) struct Writer {
    trees: Arc<Trees>,
    limits: Limits,
    mode: CommitMode,
    heads: HashMap<SessionId, (u64, [u8; 32])>,
    /// Set by the first failed write or flush. After it the writer refuses everything: what
    /// reached the disk is unknown, and refusing keeps the promise that a durable record
    /// implies every earlier one is durable too.
    poisoned: Option<String>,
    /// Written, not yet flushed, not yet acknowledged (only without a tail).
    waiting: Vec<Ack>,
    state: Arc<WriterState>,
    /// Where written but unflushed batches go, so kill -9 cannot lose them.
    tail: Option<crate::tail::Tail>,
    /// Since when something written is not flushed.
    dirty_since: Option<std::time::Instant>,
}

impl Writer {
    pub(crate) fn new(
        trees: Arc<Trees>,
        limits: Limits,
        mode: CommitMode,
        state: Arc<WriterState>,
        tail: Option<crate::tail::Tail>,
    ) -> Self {
        Self {
            trees,
            limits,
            mode,
            heads: HashMap::new(),
            poisoned: None,
            waiting: Vec::new(),
            state,
            tail,
            dirty_since: None,
        }
    }

    /// Start the writer thread. If the writer panics (an invariant of the chain failed: a
    /// bug), every caller still gets an answer: unwinding drops the replies of what it held,
    /// which their callers read as [`AppendError::WriterGone`]; the thread then marks itself
    /// gone, so new appends are refused at once, and answers everything still queued with the
    /// same error until the journal closes. Nobody waits on an acknowledgement forever.
    pub(crate) fn spawn(
        self,
        receiver: flume::Receiver<Command>,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("aido-journal-writer".into())
            .spawn(move || {
                let state = self.state.clone();
                let ran = std::panic::catch_unwind(AssertUnwindSafe(|| self.run(&receiver)));
                if ran.is_err() {
                    state.gone.store(true, Ordering::Release);
                    // Until the last handle drops its sender: what was queued before the flag
                    // was seen.
                    for command in receiver.iter() {
                        command.refuse(AppendError::WriterGone);
                    }
                }
            })
    }

    fn run(mut self, receiver: &flume::Receiver<Command>) {
        let batch_max = match self.mode {
            CommitMode::Group => BATCH_RECORDS_MAX,
            CommitMode::PerRecord => 1,
        };
        loop {
            self.state
                .queue_records_peak
                .fetch_max(receiver.len(), Ordering::Relaxed);
            let lazy = std::time::Duration::from_millis(LAZY_FLUSH_MS);
            let first = match (self.waiting.is_empty(), self.dirty_since) {
                (true, None) => match receiver.recv() {
                    Ok(c) => c,
                    Err(_) => break,
                },
                (_, since) => {
                    let wait = since.map_or(lazy, |t| lazy.saturating_sub(t.elapsed()));
                    match receiver.recv_timeout(wait) {
                        Ok(c) => c,
                        Err(flume::RecvTimeoutError::Timeout) => {
                            self.settle(Vec::new(), true);
                            continue;
                        }
                        Err(flume::RecvTimeoutError::Disconnected) => break,
                    }
                }
            };
            let mut batch = vec![first];
            while batch.len() < batch_max {
                match receiver.try_recv() {
                    Ok(command) => batch.push(command),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
        self.settle(Vec::new(), true);
    }

    /// Flush if asked (or if this mode flushes every batch), then acknowledge what is durable;
    /// without a flush, hold the acknowledgements for the next one.
    fn settle(&mut self, acks: Vec<Ack>, flush: bool) {
        if !flush {
            self.waiting.extend(acks);
            return;
        }
        let mut all = std::mem::take(&mut self.waiting);
        all.extend(acks);
        if all.is_empty() && self.dirty_since.is_none() {
            return;
        }
        // The objects first: no durable record may name contents that are not.
        let flushed = self
            .trees
            .blobs
            .sync()
            .map_err(|e| e.to_string())
            .and_then(|()| self.trees.db.flush().map_err(|e| e.to_string()));
        match flushed {
            Ok(_) => {
                self.dirty_since = None;
                // Everything the tail holds is durable in sled now.
                if let Some(tail) = self.tail.as_mut()
                    && let Err(e) = tail.empty()
                {
                    tracing_poison(&format!(
                        "cannot empty the tail {} ({e}); it is replayed again at the next open",
                        tail.path().display()
                    ));
                }
                all.into_iter()
                    .for_each(|(reply, result)| reply.send(result));
            }
            Err(e) => self.fail(all, e),
        }
    }

    /// A write or flush failed: refuse these and everything after them.
    fn fail(&mut self, acks: Vec<Ack>, message: String) {
        tracing_poison(&message);
        self.poisoned = Some(message.clone());
        for (reply, result) in acks {
            reply.send(result.and(Err(AppendError::Storage {
                message: message.clone(),
            })));
        }
    }

    /// The seq and hash to chain the session's next record to: from the cache, or from its
    /// newest stored record, which must check out as any read does (its bytes match its hash,
    /// its header names its key). A head that does not is [`AppendError::HeadCorrupt`], and
    /// is not cached, so every append to the session is refused until it is repaired.
    ///
    /// The writer refuses the session rather than poisoning itself: nothing was written, so
    /// the promise that a durable record implies every earlier one is untouched, and the
    /// other sessions' chains do not depend on this one. One damaged (or tampered) session
    /// must not stop every other agent's journal.
    fn head(&mut self, session: SessionId) -> Result<(u64, [u8; 32]), AppendError> {
        if let Some(head) = self.heads.get(&session) {
            return Ok(*head);
        }
        let last = self
            .trees
            .records
            .scan_prefix(session.as_bytes())
            .next_back()
            .transpose()
            .map_err(|e| AppendError::Storage {
                message: e.to_string(),
            })?;
        let head = match last {
            None => (0, prev_of_genesis()),
            Some((k, v)) => {
                let corrupt = |seq: u64, reason: String| AppendError::HeadCorrupt {
                    session: session.to_string(),
                    seq,
                    reason,
                };
                let seq = seq_of(&k).map_err(|e| corrupt(0, e.to_string()))?;
                let checked = check_value(&self.trees.blobs, session, seq, &v)
                    .map_err(|e| corrupt(seq, e.to_string()))?;
                (seq, checked.hash)
            }
        };
        self.heads.insert(session, head);
        Ok(head)
    }

    /// The head the writer chains a session's next record to, staged in this batch or not.
    fn chained(
        &self,
        staged: &HashMap<SessionId, (u64, [u8; 32])>,
        session: SessionId,
    ) -> Option<(u64, [u8; 32])> {
        staged
            .get(&session)
            .or_else(|| self.heads.get(&session))
            .copied()
    }

    /// Put a batch's session metadata and records into their trees, in order.
    fn insert(
        &self,
        sessions: Vec<(SessionId, String)>,
        records: Vec<([u8; 24], Vec<u8>)>,
    ) -> sled::Result<()> {
        for (session, meta) in sessions {
            self.trees
                .sessions
                .insert(&session.as_bytes()[..], meta.into_bytes())?;
        }
        for (key, value) in records {
            self.trees.records.insert(&key[..], value)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_lines)]
    fn commit(&mut self, batch: Vec<Command>) {
        if let Some(why) = &self.poisoned {
            for command in batch {
                command.refuse(AppendError::Storage {
                    message: format!("the journal stopped after a failed write: {why}"),
                });
            }
            return;
        }
        let flush = self.mode == CommitMode::PerRecord
            || batch.iter().any(|Command::Append { durable, .. }| *durable);
        // Inserted one by one, not as a `sled::Batch`: sled writes (and syncs) its log buffer
        // around every batch it applies, which would put a device write on every record the
        // writer takes. The order of the inserts is the order of the seqs, and a flush makes
        // every insert before it durable, so group commit is unchanged.
        let mut records: Vec<([u8; 24], Vec<u8>)> = Vec::with_capacity(batch.len());
        let mut sessions: Vec<(SessionId, String)> = Vec::new();
        let mut staged: HashMap<SessionId, (u64, [u8; 32])> = HashMap::new();
        let mut acks: Vec<Ack> = Vec::with_capacity(batch.len());
        // Acknowledged once the batch is in the tail, without waiting for a flush.
        let mut written_acks: Vec<Ack> = Vec::new();
        let mut frames = crate::tail::Frames::default();
        // Seqs told early, once the batch is written (readable) but before it is flushed.
        let mut early = Vec::new();
        let mut blob_error = None;
        for command in batch {
            let Command::Append {
                session,
                time_ms,
                event_json,
                blobs,
                session_meta,
                sequenced,
                reply,
                durable,
            } = command;
            let at_once = !durable && self.tail.is_some() && self.mode == CommitMode::Group;
            #[cfg(test)]
            if time_ms == PANIC_TIME_MS {
                panic!("a test asked the journal writer to panic");
            }
            #[cfg(test)]
            if let Some(n) = HOLD_TIME_MS.checked_sub(time_ms)
                && let (Some(held), Some(hold)) = (HELD.get(n as usize), HOLDS.get(n as usize))
            {
                held.store(true, Ordering::SeqCst);
                drop(hold.lock());
            }
            let head = match staged.get(&session) {
                Some(h) => Ok(*h),
                None => self.head(session),
            };
            let (seq, prev) = match head {
                Ok((seq, prev)) => (seq + 1, prev),
                Err(e) => {
                    acks.push((reply, Err(e)));
                    continue;
                }
            };
            if seq > self.limits.records_per_session_max {
                acks.push((
                    reply,
                    Err(AppendError::SessionFull {
                        max: self.limits.records_per_session_max,
                    }),
                ));
                continue;
            }
            for (hash, bytes) in blobs {
                if let Err(e) = self.trees.blobs.put(&hash, &bytes) {
                    blob_error = Some(e.to_string());
                }
                if self.tail.is_some() {
                    frames.blob(&hash, &bytes);
                }
            }
            let mut bytes = format!(
                "{{\"v\":{FORMAT_VERSION},\"session\":\"{session}\",\"seq\":{seq},\"time_ms\":{time_ms},\"prev\":\"{}\",",
                hex::encode(prev)
            )
            .into_bytes();
            // The event is a JSON object; splice its fields after the header's.
            bytes.extend_from_slice(event_json.get(1..).unwrap_or(b"}"));
            let hash = *blake3::hash(&bytes).as_bytes();
            // A large record's bytes go to the blob store under its hash; the tree holds the
            // hash alone (no sled value over a chunk: see `RECORD_INLINE_BYTES_MAX`).
            let value = if 32 + bytes.len() > RECORD_INLINE_BYTES_MAX {
                let name = hex::encode(hash);
                if let Err(e) = self.trees.blobs.put(&name, &bytes) {
                    blob_error = Some(e.to_string());
                }
                if self.tail.is_some() {
                    frames.blob(&name, &bytes);
                }
                hash.to_vec()
            } else {
                let mut value = Vec::with_capacity(32 + bytes.len());
                value.extend_from_slice(&hash);
                value.extend_from_slice(&bytes);
                value
            };
            #[cfg(test)]
            if time_ms == SKEW_TIME_MS {
                self.heads.insert(session, (seq + 1, prev));
            }
            // The chain, checked right before the record joins the batch (readers check it
            // again after the read): gap-free seqs, each naming its predecessor's hash.
            let head = self.chained(&staged, session);
            assert!(
                head.map(|(seq, _)| seq + 1) == Some(seq),
                "session {session}: seq {seq} does not follow the head {head:?}"
            );
            assert!(
                head.map(|(_, hash)| hash) == Some(prev),
                "session {session}: seq {seq} does not name the head's hash"
            );
            if let Some(meta) = session_meta {
                if self.tail.is_some() {
                    frames.session(session.as_bytes(), meta.as_bytes());
                }
                sessions.push((session, meta));
            }
            if self.tail.is_some() {
                frames.record(&key(session, seq), &value);
            }
            records.push((key(session, seq), value));
            staged.insert(session, (seq, hash));
            if let Some(tx) = sequenced {
                early.push((tx, seq));
            }
            let ack = (
                reply,
                Ok(Appended {
                    seq,
                    hash: hex::encode(hash),
                }),
            );
            if at_once {
                written_acks.push(ack);
            } else {
                acks.push(ack);
            }
        }
        let written = match blob_error {
            Some(message) => Err(message),
            None => self.insert(sessions, records).map_err(|e| e.to_string()),
        }
        .and_then(|()| match self.tail.as_mut() {
            // Handed to the kernel before anything of this batch is acknowledged.
            Some(tail) => tail
                .write(&frames)
                .map_err(|e| format!("writing the tail: {e}")),
            None => Ok(()),
        });
        match written {
            Ok(()) => {
                if let Ok(mut published) = self.state.heads.lock() {
                    published.extend(staged.iter().map(|(session, (seq, _))| (*session, *seq)));
                }
                self.heads.extend(staged);
                if !frames.is_empty() && self.dirty_since.is_none() {
                    self.dirty_since = Some(std::time::Instant::now());
                }
                for (tx, seq) in early {
                    let _ = tx.send(seq);
                }
                written_acks
                    .into_iter()
                    .for_each(|(reply, result)| reply.send(result));
                self.settle(acks, flush);
            }
            Err(message) => {
                // Nothing in this batch is acknowledged, and nothing after it will be.
                let mut all = std::mem::take(&mut self.waiting);
                all.extend(acks);
                all.extend(written_acks);
                self.fail(all, message);
            }
        }
    }
}

fn tracing_poison(message: &str) {
    // The journal crate has no logger; stderr is the operator's last resort here.
    #[allow(clippy::print_stderr)]
    {
        eprintln!("aido journal: a write failed ({message}); refusing further appends");
    }
}
