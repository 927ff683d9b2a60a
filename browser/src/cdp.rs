//! One DevTools connection: commands matched to their replies by id, events fanned out to
//! whoever listens. Messages stay `serde_json::Value`: the few fields aido reads are picked out
//! by name, so a newer Chromium adding fields or enum values never breaks a reply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::error::BrowserError;

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
    /// Connect to the browser's DevTools WebSocket.
    pub(crate) async fn connect(
        url: &str,
        message_bytes_max: usize,
        call_timeout: Duration,
    ) -> Result<Self, BrowserError> {
        let config = WebSocketConfig::default()
            .max_message_size(Some(message_bytes_max))
            .max_frame_size(Some(message_bytes_max));
        let (socket, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), false)
            .await
            .map_err(|e| BrowserError::LaunchFailed {
                why: format!("cannot connect to DevTools at {url}: {e}"),
            })?;
        let (mut sink, mut stream) = socket.split();
        let pending: Pending = Arc::default();
        let (events, _) = broadcast::channel(EVENTS_BUFFERED_MAX);
        let (outgoing, mut queue) = mpsc::channel::<String>(COMMANDS_QUEUED_MAX);
        tokio::spawn(async move {
            while let Some(text) = queue.recv().await {
                if sink.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        let reader_pending = pending.clone();
        let reader_events = events.clone();
        tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                if let Message::Text(text) = message {
                    dispatch(text.as_str(), &reader_pending, &reader_events);
                }
            }
            // The socket is gone: every caller still waiting learns it now.
            if let Ok(mut waiting) = reader_pending.lock() {
                for (_, (_, reply)) in waiting.drain() {
                    let _ = reply.send(Err(BrowserError::Closed));
                }
            }
        });
        Ok(Self {
            next_id: Arc::new(AtomicU64::new(1)),
            pending,
            outgoing,
            events,
            call_timeout,
        })
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

/// A duration in whole milliseconds, for error fields.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
