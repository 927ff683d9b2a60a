//! What each tab's page logged and requested, kept from DevTools' events until read: console
//! messages and uncaught exceptions, the requests with their status, type and timing, and the
//! JavaScript dialogs the page opened. A dialog would block the page (and every later call on
//! it) until answered: each is answered at once, an alert or a leave-page question accepted, a
//! confirm or a prompt dismissed (the page hears "no"), and kept for the next call to report.
//! Bounded per browser (the oldest go first, and a read says how many were dropped).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::cdp::{Cdp, Event};

/// Entries of each kind kept until read.
const ENTRIES_MAX: usize = 1000;
/// A console line is cut here.
const LINE_CHARS_MAX: usize = 2000;

/// One console message or uncaught exception.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleEntry {
    /// `log`, `info`, `warning`, `error`, `debug`, `exception`, ...
    pub level: String,
    /// Its text (arguments joined by spaces), cut at 2,000 characters.
    pub text: String,
}

/// One request a page made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkEntry {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The URL asked for.
    pub url: String,
    /// The response's status, when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u64>,
    /// The response's MIME type, when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// From the request to the end of its load (or its failure), when it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// Why it failed (`net::ERR_TUNNEL_CONNECTION_FAILED` for one the proxy refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// A JavaScript dialog the page opened, and how it was answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dialog {
    /// `alert`, `confirm`, `prompt` or `beforeunload`.
    pub kind: String,
    /// What it said (cut at 2,000 characters).
    pub message: String,
    /// Whether it was accepted (an alert, a leave-page question) or dismissed.
    pub accepted: bool,
}

/// What one read takes: the entries since the last read, and how many were dropped for the
/// bound meanwhile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Read<T> {
    /// The entries, oldest first.
    pub entries: Vec<T>,
    /// Entries of this tab dropped for the bound since the last read.
    pub dropped: usize,
}

struct Pending {
    session: String,
    id: String,
    started: f64,
    entry: NetworkEntry,
}

#[derive(Default)]
struct Kept {
    console: VecDeque<(String, ConsoleEntry)>,
    dialogs: VecDeque<Dialog>,
    network: VecDeque<Pending>,
    /// Per session: entries dropped since its last read.
    dropped_console: Vec<(String, usize)>,
    dropped_network: Vec<(String, usize)>,
}

/// The logs of one browser, filled by a task that listens to its events.
#[derive(Clone, Default)]
pub(crate) struct Logs {
    kept: Arc<Mutex<Kept>>,
}

fn count(dropped: &mut Vec<(String, usize)>, session: &str) {
    match dropped.iter_mut().find(|(s, _)| s == session) {
        Some((_, n)) => *n += 1,
        None => dropped.push((session.to_owned(), 1)),
    }
}

fn take_count(dropped: &mut Vec<(String, usize)>, session: &str) -> usize {
    match dropped.iter().position(|(s, _)| s == session) {
        Some(i) => dropped.remove(i).1,
        None => 0,
    }
}

fn cut(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(LINE_CHARS_MAX) {
        text.truncate(at);
        text.push('…');
    }
    text
}

/// A console argument as the console would print it.
fn argument(arg: &Value) -> String {
    match arg.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => arg
            .get("description")
            .or_else(|| arg.get("unserializableValue"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| arg.get("type").and_then(Value::as_str).unwrap_or("?"))
            .to_owned(),
    }
}

impl Logs {
    /// Start listening to `cdp`'s events; the task ends with the connection.
    pub(crate) fn listen(cdp: &Cdp) -> Self {
        let logs = Self::default();
        let mut events = cdp.subscribe();
        let kept = logs.clone();
        let answering = cdp.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) if event.method == "Page.javascriptDialogOpening" => {
                        kept.answer_dialog(&answering, &event);
                    }
                    Ok(event) => kept.take_event(&event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "browser log events were missed");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        logs
    }

    /// Answer a dialog at once (on a task of its own: the listener keeps reading events), and
    /// keep it for the next call to report.
    fn answer_dialog(&self, cdp: &Cdp, event: &Event) {
        let kind = event
            .params
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("alert")
            .to_owned();
        let accepted = kind == "alert" || kind == "beforeunload";
        let message = cut(event
            .params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned());
        if let Ok(mut kept) = self.kept.lock() {
            if kept.dialogs.len() == ENTRIES_MAX {
                kept.dialogs.pop_front();
            }
            kept.dialogs.push_back(Dialog {
                kind,
                message,
                accepted,
            });
        }
        let cdp = cdp.clone();
        let session = event.session.clone();
        tokio::spawn(async move {
            let answer = serde_json::json!({ "accept": accepted });
            if let Err(e) = cdp
                .call("Page.handleJavaScriptDialog", answer, session.as_deref())
                .await
            {
                tracing::warn!(error = %e, "a page's dialog could not be answered");
            }
        });
    }

    /// The dialogs answered since the last look.
    pub(crate) fn dialogs(&self) -> Vec<Dialog> {
        self.kept
            .lock()
            .map(|mut kept| kept.dialogs.drain(..).collect())
            .unwrap_or_default()
    }

    fn take_event(&self, event: &Event) {
        let Some(session) = event.session.as_deref() else {
            return;
        };
        let p = &event.params;
        let text = |pointer: &str| {
            p.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let console = match event.method.as_str() {
            "Runtime.consoleAPICalled" => Some(ConsoleEntry {
                level: text("/type"),
                text: p
                    .get("args")
                    .and_then(Value::as_array)
                    .map(|args| args.iter().map(argument).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default(),
            }),
            "Runtime.exceptionThrown" => Some(ConsoleEntry {
                level: "exception".to_owned(),
                text: p
                    .pointer("/exceptionDetails/exception/description")
                    .or_else(|| p.pointer("/exceptionDetails/text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            "Log.entryAdded" => Some(ConsoleEntry {
                level: text("/entry/level"),
                text: text("/entry/text"),
            }),
            _ => None,
        };
        if let Some(mut entry) = console {
            entry.text = cut(entry.text);
            if kept.console.len() == ENTRIES_MAX
                && let Some((old, _)) = kept.console.pop_front()
            {
                count(&mut kept.dropped_console, &old);
            }
            kept.console.push_back((session.to_owned(), entry));
            return;
        }
        let id = text("/requestId");
        let at = p.get("timestamp").and_then(Value::as_f64).unwrap_or(0.0);
        let found = kept
            .network
            .iter()
            .rposition(|r| r.id == id && r.session == session);
        match event.method.as_str() {
            "Network.requestWillBeSent" => {
                if kept.network.len() == ENTRIES_MAX
                    && let Some(old) = kept.network.pop_front()
                {
                    count(&mut kept.dropped_network, &old.session);
                }
                kept.network.push_back(Pending {
                    session: session.to_owned(),
                    id,
                    started: at,
                    entry: NetworkEntry {
                        method: text("/request/method"),
                        url: cut(text("/request/url")),
                        status: None,
                        mime: None,
                        ms: None,
                        failed: None,
                    },
                });
            }
            "Network.responseReceived" => {
                if let Some(found) = found.and_then(|i| kept.network.get_mut(i)) {
                    found.entry.status = p.pointer("/response/status").and_then(Value::as_u64);
                    found.entry.mime = Some(text("/response/mimeType"));
                }
            }
            "Network.loadingFinished" | "Network.loadingFailed" => {
                if let Some(found) = found.and_then(|i| kept.network.get_mut(i)) {
                    let elapsed = ((at - found.started) * 1000.0).max(0.0);
                    found.entry.ms = Some(elapsed.round() as u64);
                    if event.method == "Network.loadingFailed" {
                        found.entry.failed = Some(text("/errorText"));
                    }
                }
            }
            _ => {}
        }
    }

    /// The console entries of `session` since its last read.
    pub(crate) fn console(&self, session: &str) -> Read<ConsoleEntry> {
        let Ok(mut kept) = self.kept.lock() else {
            return Read {
                entries: Vec::new(),
                dropped: 0,
            };
        };
        let (mine, others): (VecDeque<_>, VecDeque<_>) =
            kept.console.drain(..).partition(|(s, _)| s == session);
        kept.console = others;
        Read {
            entries: mine.into_iter().map(|(_, e)| e).collect(),
            dropped: take_count(&mut kept.dropped_console, session),
        }
    }

    /// The requests of `session` since its last read (those still loading included).
    pub(crate) fn network(&self, session: &str) -> Read<NetworkEntry> {
        let Ok(mut kept) = self.kept.lock() else {
            return Read {
                entries: Vec::new(),
                dropped: 0,
            };
        };
        let (mine, others): (VecDeque<_>, VecDeque<_>) =
            kept.network.drain(..).partition(|r| r.session == session);
        kept.network = others;
        Read {
            entries: mine.into_iter().map(|r| r.entry).collect(),
            dropped: take_count(&mut kept.dropped_network, session),
        }
    }
}
