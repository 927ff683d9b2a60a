use std::sync::{Arc, Mutex};

use aido_actions::Failure;
use aido_walk::error::RuntimeError;
use tokio::sync::oneshot;

use crate::ticket::Ticket;

thread_local! {
    /// The text of the panic this thread is unwinding from, set by the hook [`catch_panics`]
    /// installs (a reply dropped by the unwinding answers with it).
    static PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Note the text of every panic on its thread before it unwinds (chained to the hook that was
/// there), once per process.
pub(crate) fn catch_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info.payload_as_str().unwrap_or("a panic").to_owned();
            PANIC.with(|last| *last.borrow_mut() = Some(text));
            before(info);
        }));
    });
}

/// What a body last died of, kept by its slot across restarts: the answer owed to calls the
/// crash took with it.
#[derive(Debug, Default)]
pub(crate) struct Note {
    last: Mutex<Option<String>>,
}

impl Note {
    pub(crate) fn set(&self, why: &str) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(why.to_owned());
        }
    }

    pub(crate) fn last(&self) -> Option<String> {
        self.last.lock().ok().and_then(|last| last.clone())
    }
}

/// The answer of one body call: the call's [`Ticket`] and the port its answer goes back on.
///
/// A body answers each call exactly once with [`Reply::send`]. One it drops unanswered (its
/// work panicked, or the body stopped with the call in its mailbox) answers by itself:
/// `body_crashed`, with the crash that took it.
#[derive(Debug)]
pub struct Reply<T> {
    body: &'static str,
    ticket: Ticket,
    port: Option<oneshot::Sender<Result<T, Failure>>>,
    note: Arc<Note>,
}

impl<T> Reply<T> {
    pub(crate) fn new(
        body: &'static str,
        ticket: Ticket,
        note: Arc<Note>,
    ) -> (Self, oneshot::Receiver<Result<T, Failure>>) {
        let (port, answer) = oneshot::channel();
        let reply = Self {
            body,
            ticket,
            port: Some(port),
            note,
        };
        (reply, answer)
    }

    /// The call's deadline and state.
    pub fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// The body takes the call; `commits` says whether it changes the world from the start
    /// (then the caller waits for its answer past the deadline). `None` when the deadline
    /// passed or the caller gave up: the call is answered `body_timeout` and must not run.
    pub fn take(self, commits: bool) -> Option<Self> {
        if self.ticket.start() && (!commits || self.ticket.commit()) {
            return Some(self);
        }
        let body = self.body;
        self.send(Err(RuntimeError::BodyTimeout {
            body,
            timeout_ms: 0,
        }
        .into()));
        None
    }

    /// The answer.
    pub fn send(mut self, answer: Result<T, Failure>) {
        if let Some(port) = self.port.take() {
            // The caller may have given up on a call that never committed: nobody listens.
            let _ = port.send(answer);
        }
    }

    /// The call's work on another thread panicked (or was cancelled): the call is answered
    /// `body_crashed` with that panic's text, and the body panics with it too, so it is
    /// restarted. For a serial body that runs its work off the async workers.
    pub fn crash(self, error: tokio::task::JoinError) -> ! {
        let why = match error.try_into_panic() {
            Ok(payload) => crate::panic_text(payload.as_ref()),
            Err(error) => error.to_string(),
        };
        self.crashed(&why);
        panic!("{why}");
    }

    /// The call's work panicked with `why`: the call is answered `body_crashed` with it.
    pub(crate) fn crashed(self, why: &str) {
        self.note.set(why);
        let body = self.body;
        self.send(Err(RuntimeError::BodyCrashed {
            body,
            why: why.to_owned(),
        }
        .into()));
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(port) = self.port.take() {
            // Dropped while a panic unwinds the work that held it: that panic is the answer.
            let unwinding = std::thread::panicking()
                .then(|| PANIC.with(|last| last.borrow().clone()))
                .flatten();
            let why = unwinding
                .or_else(|| self.note.last())
                .unwrap_or_else(|| "it stopped before it answered".into());
            let _ = port.send(Err(RuntimeError::BodyCrashed {
                body: self.body,
                why,
            }
            .into()));
        }
    }
}
