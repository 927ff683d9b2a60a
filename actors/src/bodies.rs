//! The body table. A body is one entry: a [`Slot`] holding how to build it (its actor and
//! arguments), the actor running now, and its restart history. Supervision, restart
//! journaling, crash errors and the handle callers use are generic over it, so a new body
//! (processes, services, the desktop, the network) is a field here, an entry in
//! [`Bodies::all`], and a group of the `actions!` table its actor matches without a wildcard.
//!
//! Restart policy: a body that fails is restarted at once, at most [`RESTARTS_MAX`] times
//! within [`RESTART_WINDOW_MS`]; one more failure in that window marks it failed, and every
//! call to it gets `body_failed` from then on (the rest of the runtime goes on serving). A
//! restart that cannot spawn the body marks it failed too; it never stops the supervisor.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorId, ActorRef};

#[cfg(feature = "prim-desktop")]
use crate::desktop::DesktopBody;
use crate::error::RuntimeError;
use crate::fs::FsBody;
#[cfg(feature = "prim-memory")]
use crate::memory::MemoryBody;
#[cfg(feature = "prim-net")]
use crate::net::NetBody;
#[cfg(feature = "prim-process")]
use crate::process::ProcessBody;
#[cfg(feature = "prim-search")]
use crate::search::SearchBody;
#[cfg(feature = "prim-vm")]
use crate::vm::VmBody;

/// Most restarts of one body within [`RESTART_WINDOW_MS`].
pub const RESTARTS_MAX: u32 = 5;
/// The window restarts are counted in.
pub const RESTART_WINDOW_MS: u64 = 60_000;

/// What became of a failed body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Restarted {
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

/// One body of the table.
pub(crate) struct Slot<A: Actor + Clone>
where
    A::Arguments: Clone,
{
    name: &'static str,
    actor: A,
    args: A::Arguments,
    current: RwLock<Option<ActorRef<A::Msg>>>,
    restarts: Mutex<VecDeque<Instant>>,
    failed: RwLock<Option<RuntimeError>>,
}

impl<A: Actor + Clone> Slot<A>
where
    A::Arguments: Clone,
{
    pub(crate) fn new(name: &'static str, actor: A, args: A::Arguments) -> Self {
        Self {
            name,
            actor,
            args,
            current: RwLock::new(None),
            restarts: Mutex::new(VecDeque::new()),
            failed: RwLock::new(None),
        }
    }

    /// The body's actor, or why there is none (it failed for good).
    pub(crate) fn get(&self) -> Result<ActorRef<A::Msg>, RuntimeError> {
        if let Ok(failed) = self.failed.read()
            && let Some(RuntimeError::BodyFailed {
                body,
                restarts,
                window_ms,
            }) = &*failed
        {
            return Err(RuntimeError::BodyFailed {
                body,
                restarts: *restarts,
                window_ms: *window_ms,
            });
        }
        self.current
            .read()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| RuntimeError::BodyCrashed {
                body: self.name,
                why: "it is not running".into(),
            })
    }

    async fn spawn(&self, supervisor: ActorCell) -> Result<(), String> {
        let (actor, _) =
            Actor::spawn_linked(None, self.actor.clone(), self.args.clone(), supervisor)
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
            *failed = Some(RuntimeError::BodyFailed {
                body: self.name,
                restarts,
                window_ms: RESTART_WINDOW_MS,
            });
        }
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the supervisor needs of a body, whatever its messages.
pub(crate) trait Supervised: Send + Sync {
    /// Its name in records and errors (`filesystem`, `vm`).
    fn name(&self) -> &'static str;
    /// Whether `id` is the actor running now.
    fn is(&self, id: ActorId) -> bool;
    /// Spawn it (at start-up).
    fn start(&self, supervisor: ActorCell) -> Boxed<'_, Result<(), String>>;
    /// It failed: restart it within its budget, or mark it failed.
    fn restart(&self, supervisor: ActorCell) -> Boxed<'_, Restarted>;
}

impl<A: Actor + Clone> Supervised for Slot<A>
where
    A::Arguments: Clone + Sync,
{
    fn name(&self) -> &'static str {
        self.name
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

    fn restart(&self, supervisor: ActorCell) -> Boxed<'_, Restarted> {
        Box::pin(async move {
            let now = Instant::now();
            let window = Duration::from_millis(RESTART_WINDOW_MS);
            let count = match self.restarts.lock() {
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
            };
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

/// The table of bodies.
pub(crate) struct Bodies {
    /// The filesystem body.
    pub(crate) fs: Slot<FsBody>,
    /// The VM body.
    #[cfg(feature = "prim-vm")]
    pub(crate) vm: Slot<VmBody>,
    /// The memory body.
    #[cfg(feature = "prim-memory")]
    pub(crate) memory: Slot<MemoryBody>,
    /// The process body.
    #[cfg(feature = "prim-process")]
    pub(crate) process: Slot<ProcessBody>,
    /// The search body.
    #[cfg(feature = "prim-search")]
    pub(crate) search: Slot<SearchBody>,
    /// The net body.
    #[cfg(feature = "prim-net")]
    pub(crate) net: Slot<NetBody>,
    /// The desktop body.
    #[cfg(feature = "prim-desktop")]
    pub(crate) desktop: Slot<DesktopBody>,
}

impl Bodies {
    /// Every body, for supervision.
    pub(crate) fn all(&self) -> Vec<&dyn Supervised> {
        vec![
            &self.fs,
            #[cfg(feature = "prim-vm")]
            &self.vm,
            #[cfg(feature = "prim-memory")]
            &self.memory,
            #[cfg(feature = "prim-process")]
            &self.process,
            #[cfg(feature = "prim-search")]
            &self.search,
            #[cfg(feature = "prim-net")]
            &self.net,
            #[cfg(feature = "prim-desktop")]
            &self.desktop,
        ]
    }

    /// The body whose actor is `id`.
    pub(crate) fn find(&self, id: ActorId) -> Option<&dyn Supervised> {
        self.all().into_iter().find(|b| b.is(id))
    }
}
