//! One DevTools connection over Chromium's pipes: commands matched to their replies by id, events fanned out to
//! whoever listens. Messages stay `serde_json::Value`: the few fields aido reads are picked out
//! by name, so a newer Chromium adding fields or enum values never breaks a reply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::error::BrowserError;

/// Chromium's answer to a page command while the tab has no active page (mid-navigation).
const NOT_ATTACHED: &str = "Not attached to an active page";
/// How often such a command is sent again, and how long apart: 2 s in all.
const NOT_ATTACHED_TRIES: u32 = 40;
const NOT_ATTACHED_WAIT_MS: u64 = 50;
/// Events buffered for a slow listener before it starts missing them.
const EVENTS_BUFFERED_MAX: usize = 1024;
/// Commands queued for the writer.
const COMMANDS_QUEUED_MAX: usize = 64;

/// An event Chromium sent (`Page.loadEventFired`, `Browser.downloadProgress`, ...).
#[derive(Clone, Debug)]
pub(crate) struct Event {
    /// The method (`Page.loadEventFired`).
    pub method: String,
    /// Its parameters.
    pub params: Value,
    /// The target session it came from; `None` for the browser's own.
    pub session: Option<String>,
}

type Reply = Result<Value, BrowserError>;
type Pending = Arc<Mutex<HashMap<u64, (String, oneshot::Sender<Reply>)>>>;

/// The connection's handle; clones share it. The reader task ends when the socket closes.
#[derive(Clone)]
pub(crate) struct Cdp {
    next_id: Arc<AtomicU64>,
    pending: Pending,
    outgoing: mpsc::Sender<String>,
    events: broadcast::Sender<Event>,
    call_timeout: Duration,
}

impl Cdp {
    /// Speak DevTools over Chromium's pipes (`--remote-debugging-pipe`: it reads commands on
    /// its fd 3 and writes replies and events on its fd 4, each message ended by a NUL).
    pub(crate) fn over_pipes(
        commands: pipe::Sender,
        replies: pipe::Receiver,
        message_bytes_max: usize,
        call_timeout: Duration,
    ) -> Self {
        let pending: Pending = Arc::default();
        let (events, _) = broadcast::channel(EVENTS_BUFFERED_MAX);
        let (outgoing, mut queue) = mpsc::channel::<String>(COMMANDS_QUEUED_MAX);
        tokio::spawn(async move {
            let mut commands = commands;
            while let Some(text) = queue.recv().await {
                let mut message = text.into_bytes();
                message.push(0);
                if commands.write_all(&message).await.is_err() {
                    break;
                }
            }
        });
        let reader_pending = pending.clone();
        let reader_events = events.clone();
        tokio::spawn(async move {
            let mut replies = BufReader::new(replies);
            loop {
                match read_message(&mut replies, message_bytes_max).await {
                    Ok(Some(message)) => match std::str::from_utf8(&message) {
                        Ok(text) => dispatch(text, &reader_pending, &reader_events),
                        Err(_) => tracing::debug!("DevTools sent a message that is not UTF-8"),
                    },
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "the DevTools pipe failed; dropping it");
                        break;
                    }
                }
            }
            // The pipe is gone: every caller still waiting learns it now.
            if let Ok(mut waiting) = reader_pending.lock() {
                for (_, (_, reply)) in waiting.drain() {
                    let _ = reply.send(Err(BrowserError::Closed));
                }
            }
        });
        Self {
            next_id: Arc::new(AtomicU64::new(1)),
            pending,
            outgoing,
            events,
            call_timeout,
        }
    }

    /// Listen to events from now on (subscribe before sending what causes them).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Send one command (to a target's session, or the browser's) and wait for its reply.
    ///
    /// # Cancel safety
    /// Dropping the future forgets the reply; the command may still have run in the browser.
    pub(crate) async fn call(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, BrowserError> {
        // A page command sent while the tab commits a navigation (a click that left the page)
        // finds no active page for a moment: it is sent again, for a bounded while.
        let mut tries = 0;
        loop {
            match self.send(method, params.clone(), session).await {
                Err(BrowserError::Protocol { why, .. })
                    if why.contains(NOT_ATTACHED) && tries < NOT_ATTACHED_TRIES =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(NOT_ATTACHED_WAIT_MS)).await;
                }
                answered => return answered,
            }
        }
    }

    async fn send(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, BrowserError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = Value::from(session);
        }
        let (reply, answer) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| BrowserError::Closed)?
            .insert(id, (method.to_owned(), reply));
        let sent = self.outgoing.send(message.to_string()).await;
        if sent.is_err() {
            self.forget(id);
            return Err(BrowserError::Closed);
        }
        match tokio::time::timeout(self.call_timeout, answer).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(BrowserError::Closed),
            Err(_) => {
                self.forget(id);
                Err(BrowserError::Timeout {
                    what: "a DevTools command",
                    timeout_ms: millis(self.call_timeout),
                })
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut waiting) = self.pending.lock() {
            waiting.remove(&id);
        }
    }
}

/// Route one message: a reply to its caller, an event to the listeners.
fn dispatch(text: &str, pending: &Pending, events: &broadcast::Sender<Event>) {
    let Ok(mut message) = serde_json::from_str::<Value>(text) else {
        tracing::debug!(len = text.len(), "DevTools sent a message that is not JSON");
        return;
    };
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        let Some((method, reply)) = pending.lock().ok().and_then(|mut w| w.remove(&id)) else {
            return;
        };
        let answer = match message.get("error") {
            Some(error) => Err(BrowserError::protocol(
                &method,
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error"),
            )),
            None => Ok(message
                .get_mut("result")
                .map(Value::take)
                .unwrap_or_default()),
        };
        let _ = reply.send(answer);
    } else if let Some(method) = message.get("method").and_then(Value::as_str) {
        let event = Event {
            method: method.to_owned(),
            params: message
                .get_mut("params")
                .map(Value::take)
                .unwrap_or_default(),
            session: message
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        // No listener is fine: most events are of no interest.
        let _ = events.send(event);
    }
}

/// One NUL-ended message, at most `bytes_max` long (longer is an error: the pipe is
/// dropped rather than buffered without bound). `None` at the end of the pipe.
async fn read_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    bytes_max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut message = Vec::new();
    loop {
        let buffered = reader.fill_buf().await?;
        if buffered.is_empty() {
            return Ok(None);
        }
        let (take, done) = match buffered.iter().position(|b| *b == 0) {
            Some(end) => (end, true),
            None => (buffered.len(), false),
        };
        if message.len() + take > bytes_max {
            return Err(std::io::Error::other(format!(
                "a DevTools message is over {bytes_max} bytes"
            )));
        }
        message.extend_from_slice(&buffered[..take]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Some(message));
        }
    }
}

/// A duration in whole milliseconds, for error fields.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::read_message;

    #[tokio::test]
    async fn messages_are_nul_ended_and_bounded() {
        let mut input: &[u8] = b"{\"id\":1}\0{\"id\":2}\0tail";
        assert_eq!(
            read_message(&mut input, 64).await.unwrap().unwrap(),
            b"{\"id\":1}"
        );
        assert_eq!(
            read_message(&mut input, 64).await.unwrap().unwrap(),
            b"{\"id\":2}"
        );
        // A message cut by the end of the pipe is not a message.
        assert_eq!(read_message(&mut input, 64).await.unwrap(), None);
        let mut long: &[u8] = b"0123456789\0";
        assert!(read_message(&mut long, 4).await.is_err());
    }
}
