use std::collections::HashMap;
use std::sync::{Arc, mpsc};

use crate::error::AppendError;
use crate::journal::{Appended, CommitMode, Limits, Trees, key, prev_of_genesis};
use crate::record::{FORMAT_VERSION, SessionId};

/// Most records one group commit takes from the queue.
const BATCH_RECORDS_MAX: usize = 4096;

/// Longest a written but unflushed record waits for a flush when nothing else arrives.
const LAZY_FLUSH_MS: u64 = 20;

type Ack = (Reply, Result<Appended, AppendError>);

pub(crate) enum Reply {
    Async(tokio::sync::oneshot::Sender<Result<Appended, AppendError>>),
    Blocking(mpsc::SyncSender<Result<Appended, AppendError>>),
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
        sequenced: Option<tokio::sync::oneshot::Sender<u64>>,
        /// Whether this record needs a flush of its own. A record that does not is written
        /// at once and made durable by the next flush (the next durable record, or
        /// [`LAZY_FLUSH_MS`] of quiet), and acknowledged then.
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
    /// Written, not yet flushed, not yet acknowledged.
    waiting: Vec<Ack>,
}

impl Writer {
    pub(crate) fn new(trees: Arc<Trees>, limits: Limits, mode: CommitMode) -> Self {
        Self {
            trees,
            limits,
            mode,
            heads: HashMap::new(),
            poisoned: None,
            waiting: Vec::new(),
        }
    }

    pub(crate) fn run(mut self, receiver: mpsc::Receiver<Command>) {
        let batch_max = match self.mode {
            CommitMode::Group => BATCH_RECORDS_MAX,
            CommitMode::PerRecord => 1,
        };
        loop {
            let first = if self.waiting.is_empty() {
                match receiver.recv() {
                    Ok(c) => c,
                    Err(_) => break,
                }
            } else {
                match receiver.recv_timeout(std::time::Duration::from_millis(LAZY_FLUSH_MS)) {
                    Ok(c) => c,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.settle(Vec::new(), true);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
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
        if all.is_empty() {
            return;
        }
        match self.trees.db.flush() {
            Ok(_) => all
                .into_iter()
                .for_each(|(reply, result)| reply.send(result)),
            Err(e) => self.fail(all, e.to_string()),
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
                let seq = k
                    .get(16..24)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map_or(0, u64::from_be_bytes);
                let hash = v
                    .get(..32)
                    .and_then(|h| <[u8; 32]>::try_from(h).ok())
                    .unwrap_or_default();
                (seq, hash)
            }
        };
        self.heads.insert(session, head);
        Ok(head)
    }

    fn commit(&mut self, batch: Vec<Command>) {
        if let Some(why) = &self.poisoned {
            for Command::Append { reply, .. } in batch {
                reply.send(Err(AppendError::Storage {
                    message: format!("the journal stopped after a failed write: {why}"),
                }));
            }
            return;
        }
        let flush = self.mode == CommitMode::PerRecord
            || batch.iter().any(|Command::Append { durable, .. }| *durable);
        let mut records = sled::Batch::default();
        let mut sessions = sled::Batch::default();
        let mut staged: HashMap<SessionId, (u64, [u8; 32])> = HashMap::new();
        let mut acks: Vec<Ack> = Vec::with_capacity(batch.len());
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
                durable: _,
            } = command;
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
            }
            let mut bytes = format!(
                "{{\"v\":{FORMAT_VERSION},\"session\":\"{session}\",\"seq\":{seq},\"time_ms\":{time_ms},\"prev\":\"{}\",",
                hex::encode(prev)
            )
            .into_bytes();
            // The event is a JSON object; splice its fields after the header's.
            bytes.extend_from_slice(event_json.get(1..).unwrap_or(b"}"));
            let hash = *blake3::hash(&bytes).as_bytes();
            let mut value = Vec::with_capacity(32 + bytes.len());
            value.extend_from_slice(&hash);
            value.extend_from_slice(&bytes);
            records.insert(&key(session, seq)[..], value);
            if let Some(meta) = session_meta {
                sessions.insert(&session.as_bytes()[..], meta.into_bytes());
            }
            staged.insert(session, (seq, hash));
            if let Some(tx) = sequenced {
                early.push((tx, seq));
            }
            acks.push((
                reply,
                Ok(Appended {
                    seq,
                    hash: hex::encode(hash),
                }),
            ));
        }
        let written = match blob_error {
            Some(message) => Err(message),
            None => self
                .trees
                .sessions
                .apply_batch(sessions)
                .and_then(|_| self.trees.records.apply_batch(records))
                .map_err(|e| e.to_string()),
        };
        match written {
            Ok(()) => {
                self.heads.extend(staged);
                for (tx, seq) in early {
                    let _ = tx.send(seq);
                }
                self.settle(acks, flush);
            }
            Err(message) => {
                // Nothing in this batch is acknowledged, and nothing after it will be.
                let mut all = std::mem::take(&mut self.waiting);
                all.extend(acks);
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
