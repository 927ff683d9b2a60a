use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use aido_actions::Failure;
use aido_walk::error::RuntimeError;
use ractor::{Actor, ActorCell, ActorId, ActorRef};

use crate::body::{Body, BodyActor, Letter, Start};
use crate::faults::Faults;
use crate::reply::{Note, Reply};
use crate::ticket::Ticket;

/// Most restarts of one body within [`RESTART_WINDOW_MS`].
pub const RESTARTS_MAX: u32 = 5;
/// The window restarts are counted in.
pub const RESTART_WINDOW_MS: u64 = 60_000;

/// How long a caller waits, past its deadline, for a body that committed to a call (it is
/// changing the world, so its answer is what the journal must record) before it reports the
/// body stuck.
const BODY_STUCK_MS: u64 = 600_000;

/// What became of a failed body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restarted {
    /// It runs again.
    Again,
    /// Its restart budget is spent (or it could not be spawned): it is stopped for good.
    Failed {
        /// Restarts within the window.
        restarts: u32,
        /// Why it is stopped.
        why: String,
    },
}

/// One body's place in the supervision tree: how to build it, the actor running now, its
/// restart history, and its last crash (the answer owed to the calls a crash takes with it).
///
/// Restart policy: a body that fails is restarted at once, at most [`RESTARTS_MAX`] times
/// within [`RESTART_WINDOW_MS`]; one more failure in that window marks it failed, and every
/// call to it gets `body_failed` from then on (the rest of the runtime goes on serving). A
/// restart that cannot spawn the body marks it failed too; it never stops the supervisor.
pub struct Slot<B: Body> {
    start: Start<B::Args>,
    current: RwLock<Option<ActorRef<Letter<B::Msg>>>>,
    restarts: Mutex<VecDeque<Instant>>,
    failed: RwLock<Option<u32>>,
}

impl<B: Body> Slot<B> {
    /// The slot of a body built from `args`; `faults` (tests and the simulation) reach its
    /// gate and work when given.
    pub fn new(args: B::Args, faults: Option<Arc<Faults>>) -> Self {
        crate::reply::catch_panics();
        Self {
            start: Start {
                args,
                note: Arc::new(Note::default()),
                faults,
            },
            current: RwLock::new(None),
            restarts: Mutex::new(VecDeque::new()),
            failed: RwLock::new(None),
        }
    }

    /// The body's actor, or why there is none (it failed for good, or it is down).
    fn actor(&self) -> Result<ActorRef<Letter<B::Msg>>, RuntimeError> {
        if let Ok(failed) = self.failed.read()
            && let Some(restarts) = *failed
        {
            return Err(RuntimeError::BodyFailed {
                body: B::NAME,
                restarts,
                window_ms: RESTART_WINDOW_MS,
            });
        }
        self.current
            .read()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| self.crashed())
    }

    /// The error of a call a crash took with it.
    fn crashed(&self) -> RuntimeError {
        RuntimeError::BodyCrashed {
            body: B::NAME,
            why: self
                .start
                .note
                .last()
                .unwrap_or_else(|| "it is not running".into()),
        }
    }

    /// Send the body a message that carries no [`Reply`] (a query of its state).
    pub fn cast(&self, msg: B::Msg) -> Result<(), RuntimeError> {
        self.actor()?
            .cast(Letter::Call(msg))
            .map_err(|_| self.crashed())
    }

    /// Ask the body and wait: at most `timeout` for it to take the call (a call it has not
    /// taken by then never runs), and for a call it committed to (it is changing the world),
    /// until it answers, bounded by ten minutes more. A crashed, failed or stuck body is a
    /// coded failure for the call, never a hang.
    pub async fn ask<T: Send + 'static>(
        &self,
        timeout: Duration,
        msg: impl FnOnce(Reply<T>) -> B::Msg,
    ) -> Result<T, Failure> {
        let actor = self.actor()?;
        let ticket = Ticket::new(Instant::now() + timeout);
        let (reply, mut answer) = Reply::new(B::NAME, ticket.clone(), self.start.note.clone());
        actor
            .cast(Letter::Call(msg(reply)))
            .map_err(|_| self.crashed())?;
        match tokio::time::timeout(timeout, &mut answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.crashed().into()),
            Err(_) if ticket.abandon() => Err(RuntimeError::BodyTimeout {
                body: B::NAME,
                timeout_ms: timeout.as_millis() as u64,
            }
            .into()),
            Err(_) => {
                match tokio::time::timeout(Duration::from_millis(BODY_STUCK_MS), answer).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(_)) => Err(self.crashed().into()),
                    Err(_) => Err(RuntimeError::BodyStuck {
                        body: B::NAME,
                        waited_ms: timeout.as_millis() as u64 + BODY_STUCK_MS,
                    }
                    .into()),
                }
            }
        }
    }

    async fn spawn(&self, supervisor: ActorCell) -> Result<(), String> {
        let (actor, _) =
            Actor::spawn_linked(None, BodyActor::<B>::new(), self.start.clone(), supervisor)
                .await
                .map_err(|e| e.to_string())?;
        if let Ok(mut slot) = self.current.write() {
            *slot = Some(actor);
        }
        Ok(())
    }

    fn mark_failed(&self, restarts: u32) {
        if let Ok(mut current) = self.current.write() {
            *current = None;
        }
        if let Ok(mut failed) = self.failed.write() {
            *failed = Some(restarts);
        }
    }

    /// Count a failure now; the restarts within the window, this one included.
    fn count_restart(&self) -> u32 {
        let now = Instant::now();
        let window = Duration::from_millis(RESTART_WINDOW_MS);
        match self.restarts.lock() {
            Ok(mut times) => {
                while times
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > window)
                {
                    times.pop_front();
                }
                times.push_back(now);
                times.len() as u32
            }
            Err(_) => RESTARTS_MAX + 1,
        }
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the supervisor needs of a body, whatever its messages.
pub trait Supervised: Send + Sync {
    /// Its name in records and errors (`filesystem`, `vm`).
    fn name(&self) -> &'static str;
    /// Whether `id` is the actor running now.
    fn is(&self, id: ActorId) -> bool;
    /// Spawn it (at start-up).
    fn start(&self, supervisor: ActorCell) -> Boxed<'_, Result<(), String>>;
    /// It failed with `why`: note it (the answer of the calls it took with it), and restart
    /// it within its budget, or mark it failed.
    fn restart(&self, supervisor: ActorCell, why: &str) -> Boxed<'_, Restarted>;
}

impl<B: Body> Supervised for Slot<B> {
    fn name(&self) -> &'static str {
        B::NAME
    }

    fn is(&self, id: ActorId) -> bool {
        self.current
            .read()
            .ok()
            .and_then(|g| g.as_ref().map(|a| a.get_id() == id))
            .unwrap_or(false)
    }

    fn start(&self, supervisor: ActorCell) -> Boxed<'_, Result<(), String>> {
        Box::pin(self.spawn(supervisor))
    }

    fn restart(&self, supervisor: ActorCell, why: &str) -> Boxed<'_, Restarted> {
        self.start.note.set(why);
        Box::pin(async move {
            let count = self.count_restart();
            if count > RESTARTS_MAX {
                self.mark_failed(count - 1);
                return Restarted::Failed {
                    restarts: count - 1,
                    why: format!(
                        "it failed {count} times within {RESTART_WINDOW_MS} ms (at most {RESTARTS_MAX} restarts)"
                    ),
                };
            }
            match self.spawn(supervisor).await {
                Ok(()) => Restarted::Again,
                Err(e) => {
                    self.mark_failed(count);
                    Restarted::Failed {
                        restarts: count,
                        why: format!("it could not be spawned again: {e}"),
                    }
                }
            }
        })
    }
}
