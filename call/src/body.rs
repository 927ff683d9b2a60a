use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use aido_actions::Failure;
use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::faults::Faults;
use crate::reply::{Note, Reply};
use crate::ticket::Ticket;

/// A body: the one owner of a part of the world. It is built from its [`Body::Args`] (kept by
/// its [`crate::Slot`], so a restart builds it afresh) and takes its [`Body::Msg`]s one at a
/// time in [`Body::handle`].
pub trait Body: Sized + Send + 'static {
    /// Its name in records and errors (`filesystem`, `vm`).
    const NAME: &'static str;
    /// What it is built from.
    type Args: Clone + Send + Sync + 'static;
    /// The calls it takes. Each call that acts carries a [`Reply`].
    type Msg: Send + 'static;
    /// Whether a panic in a call's work on [`Calls`] restarts the body, because its calls
    /// share state the panic may have left half-changed (a panic in [`Body::handle`] always
    /// does). When false, such a panic is only that call's failure: the body and its queued
    /// calls go on.
    const RESTART_AFTER_PANIC: bool = true;

    /// Build the body (at start-up and after every crash). A failure stops the body.
    fn build(args: Self::Args) -> impl Future<Output = Result<Self, String>> + Send;

    /// Take one message. A serial body does the call's work here; a concurrent one hands it
    /// to `calls`. A panic here answers the call `body_crashed` with the panic's text and
    /// restarts the body.
    fn handle(&mut self, msg: Self::Msg, calls: &Calls) -> impl Future<Output = ()> + Send;

    /// The body stops (shutdown or a crash): let go of what it holds outside aido.
    fn stop(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// What a body's actor takes: a call, or the news that a call's work panicked on a task.
pub enum Letter<M> {
    /// A call.
    Call(M),
    /// A call's work panicked (the call was answered): the body fails and is restarted.
    Crashed(String),
}

/// The one actor every body runs in.
pub struct BodyActor<B>(PhantomData<fn() -> B>);

impl<B> BodyActor<B> {
    /// The actor of body `B`.
    pub fn new() -> Self {
        Self(PhantomData)
    }
}

impl<B> Default for BodyActor<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B> Clone for BodyActor<B> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

/// A body's actor state: the body and its way to run calls.
pub struct Held<B> {
    body: B,
    calls: Calls,
}

/// What the generic actor is spawned with: the body's arguments, its crash note, its faults.
#[derive(Clone)]
pub struct Start<A> {
    pub(crate) args: A,
    pub(crate) note: Arc<Note>,
    pub(crate) faults: Option<Arc<Faults>>,
}

impl<B: Body> Actor for BodyActor<B> {
    type Msg = Letter<B::Msg>;
    type State = Held<B>;
    type Arguments = Start<B::Args>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        start: Start<B::Args>,
    ) -> Result<Held<B>, ActorProcessingErr> {
        let body = B::build(start.args).await?;
        let crashes: Arc<dyn Fn(String) + Send + Sync> = Arc::new(move |why| {
            if B::RESTART_AFTER_PANIC {
                let _ = myself.cast(Letter::Crashed(why));
            }
        });
        Ok(Held {
            body,
            calls: Calls {
                name: B::NAME,
                gate: Arc::new(RwLock::new(())),
                crashes,
                note: start.note,
                faults: start.faults,
            },
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        letter: Self::Msg,
        held: &mut Held<B>,
    ) -> Result<(), ActorProcessingErr> {
        let msg = match letter {
            Letter::Call(msg) => msg,
            Letter::Crashed(why) => return Err(why.into()),
        };
        let Held { body, calls } = held;
        if calls.faults.as_ref().is_some_and(|f| f.take_panic()) {
            let why = format!(
                "injected fault: the {} body panics on this message",
                B::NAME
            );
            calls.note.set(&why);
            // The message (and its reply) is dropped: its caller is answered with the crash.
            drop(msg);
            return Err(why.into());
        }
        let mut work = Box::pin(AssertUnwindSafe(body.handle(msg, calls)).catch_unwind());
        match (&mut work).await {
            Ok(()) => Ok(()),
            Err(payload) => {
                let why = crate::panic_text(payload.as_ref());
                // Noted before the call's reply is dropped with the work: it answers with it.
                calls.note.set(&why);
                drop(work);
                Err(why.into())
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        held: &mut Held<B>,
    ) -> Result<(), ActorProcessingErr> {
        held.body.stop().await;
        Ok(())
    }
}

/// A call's turn at its body's gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Beside other shared calls.
    Shared,
    /// Alone: no other call of the body runs meanwhile (it must see or leave the body whole).
    Exclusive,
}

/// A turn held until the call's work is done.
enum Hold {
    Shared(#[expect(dead_code, reason = "held, not read")] OwnedRwLockReadGuard<()>),
    Exclusive(#[expect(dead_code, reason = "held, not read")] OwnedRwLockWriteGuard<()>),
}

/// How a concurrent body runs its calls: each on a task or on the blocking pool, after its
/// [`Turn`] at the body's gate, answered from there. A panic in the work answers its call with
/// `body_crashed` and the panic's text, and fails the body (which is restarted) unless its
/// [`Body::RESTART_AFTER_PANIC`] says otherwise; the other calls in flight finish.
pub struct Calls {
    name: &'static str,
    gate: Arc<RwLock<()>>,
    crashes: Arc<dyn Fn(String) + Send + Sync>,
    note: Arc<Note>,
    faults: Option<Arc<Faults>>,
}

impl Calls {
    fn try_turn(&self, turn: Turn) -> Option<Hold> {
        match turn {
            Turn::Shared => self.gate.clone().try_read_owned().ok().map(Hold::Shared),
            Turn::Exclusive => self
                .gate
                .clone()
                .try_write_owned()
                .ok()
                .map(Hold::Exclusive),
        }
    }

    async fn wait_turn(gate: Arc<RwLock<()>>, turn: Turn) -> Hold {
        match turn {
            Turn::Shared => Hold::Shared(gate.read_owned().await),
            Turn::Exclusive => Hold::Exclusive(gate.write_owned().await),
        }
    }

    /// Run blocking `work` on the blocking pool, after its turn at the gate, if its ticket is
    /// still valid when the turn comes; `commits` says whether it changes the world (then it
    /// commits its ticket before it starts, so the caller waits for it past its deadline).
    ///
    /// When the gate is free and no fault delays the call, the work goes to the blocking pool
    /// at once and answers from there; otherwise a task waits for the turn first.
    pub fn blocking<T: Send + 'static>(
        &self,
        reply: Reply<T>,
        turn: Turn,
        commits: bool,
        work: impl FnOnce(&Ticket) -> Result<T, Failure> + Send + 'static,
    ) {
        let (name, crashes) = (self.name, self.crashes.clone());
        let faults = self.faults.clone();
        let delay = self.faults.as_ref().and_then(|f| f.before_start());
        let after = self.faults.as_ref().and_then(|f| f.after_start());
        let job = move |held: Hold| {
            let _held = held;
            let Some(reply) = reply.take(commits) else {
                return;
            };
            if let Some(after) = after {
                std::thread::sleep(after);
            }
            let ticket = reply.ticket().clone();
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
                if faults.as_ref().is_some_and(|f| f.take_panic_in_work()) {
                    panic!("injected fault: the {name} body panics in its work");
                }
                work(&ticket)
            }));
            match ran {
                Ok(answer) => reply.send(answer),
                Err(payload) => {
                    let why = crate::panic_text(payload.as_ref());
                    reply.crashed(&why);
                    crashes(why);
                }
            }
        };
        if delay.is_none()
            && let Some(held) = self.try_turn(turn)
        {
            tokio::task::spawn_blocking(move || job(held));
            return;
        }
        let gate = self.gate.clone();
        tokio::spawn(async move {
            let held = Self::wait_turn(gate, turn).await;
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            // A panic there was answered and reported by the job itself.
            let _ = tokio::task::spawn_blocking(move || job(held)).await;
        });
    }

    /// Run async `work` on a task of its own, after its turn at the gate, if its ticket is
    /// still valid when the turn comes (`commits` as for [`Calls::blocking`]). The work gets
    /// the ticket (a call that changes the world only later commits it then).
    pub fn task<T, F>(
        &self,
        reply: Reply<T>,
        turn: Turn,
        commits: bool,
        work: impl FnOnce(Ticket) -> F + Send + 'static,
    ) where
        T: Send + 'static,
        F: Future<Output = Result<T, Failure>> + Send + 'static,
    {
        let crashes = self.crashes.clone();
        let held = self.try_turn(turn);
        let gate = self.gate.clone();
        tokio::spawn(async move {
            let _held = match held {
                Some(held) => held,
                None => Self::wait_turn(gate, turn).await,
            };
            let Some(reply) = reply.take(commits) else {
                return;
            };
            let ticket = reply.ticket().clone();
            let work = AssertUnwindSafe(async move { work(ticket).await }).catch_unwind();
            match work.await {
                Ok(answer) => reply.send(answer),
                Err(payload) => {
                    let why = crate::panic_text(payload.as_ref());
                    reply.crashed(&why);
                    crashes(why);
                }
            }
        });
    }
}
