//! The parent's side: one runtime serves every command's proxy; a command's proxy is an
//! accept loop on its listener, a log, and a count of its open connections (each a task
//! holding a [`Slot`]).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{Semaphore, watch};

use super::{
    EGRESS_MESSAGE_BYTES_MAX, EGRESS_RECORDS_MAX, EGRESS_RESOLUTIONS_MAX,
    EGRESS_RESOLUTIONS_TOTAL_MAX, EGRESS_WORKER_THREADS, EgressPolicy, EgressRecord, EgressTotals,
    ProxyError,
};

/// Connections open through every proxy of this process (what `connections_total_max`
/// bounds).
static OPEN_TOTAL: AtomicUsize = AtomicUsize::new(0);

/// How long finishing waits for open connections to close after the command ended.
const FINISH_GRACE_MS: u64 = 500;
/// How long finishing then waits for the connections it cut to record themselves.
const CUT_GRACE_MS: u64 = 200;
/// The pause after a failed accept (out of descriptors, say): the listener stays readable,
/// so accepting again at once would spin.
const ACCEPT_BACKOFF_MS: u64 = 50;

pub(super) fn connections_open() -> usize {
    OPEN_TOTAL.load(Ordering::SeqCst)
}

/// The runtime of every proxy of the process, made with the first: a fixed number of
/// workers, and a blocking pool no larger than the resolver permits (name resolution is the
/// only blocking work), so its threads are bounded whatever the commands do.
fn runtime() -> std::io::Result<&'static Runtime> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(EGRESS_WORKER_THREADS)
                .max_blocking_threads(EGRESS_RESOLUTIONS_TOTAL_MAX)
                .thread_name("aido-egress")
                .enable_io()
                .enable_time()
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|error| std::io::Error::other(error.clone()))
}

/// Where a command's proxy is in its life; each phase follows the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    /// Accepting and serving.
    Serving,
    /// The command ended: no more accepts; open connections may finish.
    Draining,
    /// Every connection still open is cut.
    Cut,
}

/// Resolves once the proxy reached `phase` (or was dropped).
pub(super) async fn reached(phase: &mut watch::Receiver<Phase>, at: Phase) {
    let _ = phase.wait_for(|now| *now >= at).await;
}

/// What a command's proxy shares with its tasks.
pub(super) struct Shared {
    pub(super) policy: EgressPolicy,
    pub(super) log: Mutex<Log>,
    /// The command's resolver permits.
    pub(super) resolvers: Arc<Semaphore>,
    pub(super) phase: watch::Receiver<Phase>,
    open: AtomicUsize,
}

/// What the proxy has seen so far.
#[derive(Default)]
pub(super) struct Log {
    pub(super) records: Vec<EgressRecord>,
    totals: EgressTotals,
}

impl Log {
    /// Appends a record; its index, to update the byte counts later.
    fn record(&mut self, entry: EgressRecord) -> Option<usize> {
        if self.records.len() >= EGRESS_RECORDS_MAX {
            self.totals.records_dropped += 1;
            return None;
        }
        self.records.push(entry);
        Some(self.records.len() - 1)
    }

    /// An admitted connection's record.
    pub(super) fn admitted(&mut self, entry: EgressRecord) -> Option<usize> {
        self.totals.admitted += 1;
        self.record(entry)
    }

    /// Counts a refusal and records it; one that names no target (over a cap, a bad or
    /// late head) only the first time its code is seen, so a flood cannot fill the list.
    pub(super) fn refused(&mut self, mut entry: EgressRecord, error: &ProxyError) {
        let count = self
            .totals
            .refused
            .entry(error.code().to_owned())
            .or_default();
        *count += 1;
        if entry.host.is_empty() && *count > 1 {
            self.totals.records_dropped += 1;
            return;
        }
        entry.code = Some(error.code().to_owned());
        entry.message = Some(cut(error.to_string(), EGRESS_MESSAGE_BYTES_MAX));
        self.record(entry);
    }
}

/// `text` cut to at most `bytes_max` bytes (on a character boundary), marked when cut.
fn cut(mut text: String, bytes_max: usize) -> String {
    if text.len() > bytes_max {
        let mut end = bytes_max - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// One open connection's place under the command's and the process's caps, given back when
/// its task ends, however it ends.
pub(super) struct Slot {
    shared: Arc<Shared>,
}

impl Slot {
    fn take(shared: &Arc<Shared>) -> Result<Slot, ProxyError> {
        let below = |max: usize| move |open: usize| (open < max).then_some(open + 1);
        let mine = shared.policy.connections_max;
        shared
            .open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, below(mine))
            .map_err(|_| ProxyError::ConnectionsMax { open: mine })?;
        let total = shared.policy.connections_total_max;
        if OPEN_TOTAL
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, below(total))
            .is_err()
        {
            shared.open.fetch_sub(1, Ordering::SeqCst);
            return Err(ProxyError::ConnectionsTotalMax { open: total });
        }
        Ok(Slot {
            shared: Arc::clone(shared),
        })
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        OPEN_TOTAL.fetch_sub(1, Ordering::SeqCst);
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running proxy's records, read while it runs.
#[derive(Clone)]
pub(crate) struct EgressLog(Arc<Shared>);

impl EgressLog {
    /// Every attempt recorded so far.
    pub(crate) fn records(&self) -> Vec<EgressRecord> {
        self.0
            .log
            .lock()
            .map(|log| log.records.clone())
            .unwrap_or_default()
    }

    /// Every connection counted so far.
    pub(crate) fn totals(&self) -> EgressTotals {
        self.0
            .log
            .lock()
            .map(|log| log.totals.clone())
            .unwrap_or_default()
    }
}

/// A running proxy for one command. Dropping it cuts every connection at once.
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    phase: watch::Sender<Phase>,
}

impl Proxy {
    /// Serves `listener` (the socket the child bound) with `policy`, on the egress runtime.
    pub(crate) fn start(listener: OwnedFd, policy: EgressPolicy) -> std::io::Result<Self> {
        let runtime = runtime()?;
        let listener = std::net::TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let (phase, watching) = watch::channel(Phase::Serving);
        let shared = Arc::new(Shared {
            policy,
            log: Mutex::default(),
            resolvers: Arc::new(Semaphore::new(EGRESS_RESOLUTIONS_MAX)),
            phase: watching,
            open: AtomicUsize::new(0),
        });
        runtime.spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Proxy { shared, phase })
    }

    /// What it has recorded so far, readable while it runs (a background command's).
    pub(crate) fn log(&self) -> EgressLog {
        EgressLog(Arc::clone(&self.shared))
    }

    /// Stops accepting, gives open connections a moment to close, cuts the rest, and returns
    /// the records and totals.
    pub(crate) fn finish(self) -> (Vec<EgressRecord>, EgressTotals) {
        let _ = self.phase.send(Phase::Draining);
        self.wait_closed(FINISH_GRACE_MS);
        let _ = self.phase.send(Phase::Cut);
        self.wait_closed(CUT_GRACE_MS);
        match self.shared.log.lock() {
            Ok(mut log) => (
                std::mem::take(&mut log.records),
                std::mem::take(&mut log.totals),
            ),
            Err(_) => Default::default(),
        }
    }

    fn wait_closed(&self, grace_ms: u64) {
        let deadline = Instant::now() + Duration::from_millis(grace_ms);
        while self.shared.open.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut phase = shared.phase.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = reached(&mut phase, Phase::Draining) => return,
        };
        match accepted {
            Ok((client, _)) => take(client, &shared),
            Err(_) => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ACCEPT_BACKOFF_MS)) => {}
                    () = reached(&mut phase, Phase::Draining) => return,
                }
            }
        }
    }
}

/// A new connection: a task under the caps, or, over one, an answer and a close right here
/// (no task, no wait).
fn take(client: TcpStream, shared: &Arc<Shared>) {
    if let Ok(mut log) = shared.log.lock() {
        log.totals.connections += 1;
    }
    match Slot::take(shared) {
        Ok(slot) => {
            tokio::spawn(super::connection::serve(client, slot));
        }
        Err(refusal) => {
            // A few hundred bytes fit the send buffer of any new socket, so this never waits;
            // a client that already sent data may see a reset instead of the answer.
            let _ = client.try_write(refusal.answer().as_bytes());
            if let Ok(mut log) = shared.log.lock() {
                log.refused(EgressRecord::anonymous(), &refusal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short".into(), 512), "short");
        let long = "é".repeat(400);
        let kept = cut(long, 512);
        assert!(kept.len() <= 512 && kept.ends_with('…'), "{}", kept.len());
    }

    /// A refusal that names no target is recorded the first time its code is seen, and
    /// counted every time; past the record cap, attempts are counted only.
    #[test]
    fn refusals_are_recorded_once_per_code_when_anonymous_and_always_counted() {
        let mut log = Log::default();
        for _ in 0..3 {
            log.refused(EgressRecord::anonymous(), &ProxyError::HeadTimeout);
        }
        let mut named = EgressRecord::anonymous();
        named.host = "example.com".into();
        let refusal = ProxyError::Net(aido_net::NetError::HostDenied {
            host: "example.com".into(),
            port: 443,
        });
        for _ in 0..EGRESS_RECORDS_MAX {
            log.refused(named.clone(), &refusal);
        }
        assert_eq!(log.records.len(), EGRESS_RECORDS_MAX);
        assert_eq!(log.totals.refused["egress_head_timeout"], 3);
        assert_eq!(log.totals.refused["net_denied"], EGRESS_RECORDS_MAX as u64);
        assert_eq!(log.totals.records_dropped, 2 + 1);
    }
}
