//! The parent's side: one runtime serves every command's proxy; a command's proxy is an
//! accept loop on its listener, a log, and a count of its open connections (each a task
//! holding a [`Slot`]).

use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::shared::{Phase, Shared, Slot, reached};
use crate::{
    EGRESS_RESOLUTIONS_TOTAL_MAX, EGRESS_WORKER_THREADS, EgressPolicy, EgressRecord, EgressTotals,
};

/// How long finishing waits for open connections to close after the command ended.
const FINISH_GRACE_MS: u64 = 500;
/// How long finishing then waits for the connections it cut to record themselves.
const CUT_GRACE_MS: u64 = 200;
/// The pause after a failed accept (out of descriptors, say): the listener stays readable,
/// so accepting again at once would spin.
const ACCEPT_BACKOFF_MS: u64 = 50;

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

/// A running proxy's records, read while it runs.
#[derive(Clone)]
pub struct EgressLog(Arc<Shared>);

impl EgressLog {
    /// Every attempt recorded so far.
    pub fn records(&self) -> Vec<EgressRecord> {
        self.0
            .log
            .lock()
            .map(|log| log.records.clone())
            .unwrap_or_default()
    }

    /// Every connection counted so far.
    pub fn totals(&self) -> EgressTotals {
        self.0
            .log
            .lock()
            .map(|log| log.totals.clone())
            .unwrap_or_default()
    }
}

/// A running proxy for one command. Dropping it cuts every connection at once.
pub struct Proxy {
    shared: Arc<Shared>,
    phase: watch::Sender<Phase>,
}

impl Proxy {
    /// Serves `listener` (the socket the child bound) with `policy`, on the egress runtime.
    pub fn start(listener: OwnedFd, policy: EgressPolicy) -> std::io::Result<Self> {
        let runtime = runtime()?;
        let listener = std::net::TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let (phase, watching) = watch::channel(Phase::Serving);
        let shared = Arc::new(Shared::new(policy, watching));
        runtime.spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Proxy { shared, phase })
    }

    /// What it has recorded so far, readable while it runs (a background command's).
    pub fn log(&self) -> EgressLog {
        EgressLog(Arc::clone(&self.shared))
    }

    /// Stops accepting, gives open connections a moment to close, cuts the rest, and returns
    /// the records and totals.
    pub fn finish(self) -> (Vec<EgressRecord>, EgressTotals) {
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
        while self.shared.open() > 0 && Instant::now() < deadline {
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
            tokio::spawn(crate::connection::serve(client, slot));
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
