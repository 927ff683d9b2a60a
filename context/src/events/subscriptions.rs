//! The runtime's file-change subscriptions and reactions, by id: the table the shared state
//! holds (in memory: they end with their session). Starting them is `process::events`'s.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aido_journal::SessionId;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::error::EventsError;

/// Most subscriptions (and reactions) one session holds.
pub const SUBSCRIPTIONS_MAX: usize = 16;
/// Changes queued between notify's thread and a subscription's task; more are dropped and
/// counted as `lagged`.
pub const QUEUE_EVENTS_MAX: usize = 4096;
/// Most changed paths one batch delivers; the rest are counted as `lagged`.
pub const BATCH_CHANGES_MAX: usize = 256;
/// How long a session's end waits for its subscriptions' tasks (a batch being journaled, a
/// reaction firing) before it is journaled itself.
const END_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long after a firing ends changes of the paths it changed are not fed back to it.
pub const OWN_CHANGES_SETTLE_MS: u64 = 1_000;

/// What a subscription counted, shown by list_subscriptions and unsubscribe.
#[derive(Default)]
pub struct Stats {
    pub batches: AtomicU64,
    pub delivered: AtomicU64,
    pub lagged: AtomicU64,
    pub fired: AtomicU64,
    pub denied: AtomicU64,
    pub failed: AtomicU64,
    pub rate_limited: AtomicU64,
    pub suppressed: AtomicU64,
    pub ended: Mutex<Option<&'static str>>,
}

impl Stats {
    pub fn json(&self) -> Value {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ended = self.ended.lock().map(|e| *e).unwrap_or(None);
        json!({
            "batches": n(&self.batches),
            "delivered": n(&self.delivered),
            "lagged": n(&self.lagged),
            "fired": n(&self.fired),
            "denied": n(&self.denied),
            "failed": n(&self.failed),
            "rate_limited": n(&self.rate_limited),
            "own_changes_ignored": n(&self.suppressed),
            "state": ended.map_or("active".to_owned(), |why| format!("ended: {why}")),
        })
    }

    pub fn end(&self, why: &'static str) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.get_or_insert(why);
        }
    }
}

/// One live subscription. Dropping it stops its watcher and its task.
pub struct Entry {
    pub session: SessionId,
    /// What list_subscriptions shows of how it was made.
    pub info: Value,
    pub stats: Arc<Stats>,
    pub _watcher: notify::RecommendedWatcher,
    pub stop: CancellationToken,
    /// The task that journals and delivers its batches.
    pub task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Every subscription of this runtime, by id.
#[derive(Default)]
pub struct Subscriptions {
    pub next: AtomicU64,
    pub table: Mutex<BTreeMap<String, Entry>>,
}

impl Subscriptions {
    pub fn locked<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Entry>) -> T) -> T {
        let mut table = match self.table.lock() {
            Ok(t) => t,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut table)
    }

    /// End every subscription of `session` (it closed).
    /// Ends `session`'s subscriptions and waits (a bounded while) for their tasks, so no batch
    /// is journaled after the session's end.
    pub async fn end_session(&self, session: SessionId) {
        let mut ended: Vec<Entry> = self.locked(|table| {
            let ids: Vec<String> = table
                .iter()
                .filter(|(_, e)| e.session == session)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| table.remove(id)).collect()
        });
        for entry in &ended {
            entry.stats.end("the session ended");
            entry.stop.cancel();
        }
        let deadline = tokio::time::Instant::now() + END_WAIT;
        for entry in &mut ended {
            if let Some(task) = entry.task.take()
                && tokio::time::timeout_at(deadline, task).await.is_err()
            {
                tracing::warn!("a subscription's task did not end with its session");
            }
        }
    }

    /// unsubscribe: end one of `session`'s subscriptions.
    pub fn remove(&self, session: SessionId, id: &str) -> Result<Value, EventsError> {
        let entry = self.locked(|table| match table.get(id) {
            Some(e) if e.session == session => table.remove(id),
            _ => None,
        });
        let entry = entry.ok_or_else(|| EventsError::Unknown {
            subscription: id.to_owned(),
        })?;
        entry.stats.end("unsubscribed");
        let mut out = entry.info.clone();
        out["ended"] = json!(true);
        merge(&mut out, entry.stats.json());
        Ok(out)
    }

    /// list_subscriptions: `session`'s subscriptions with their counts.
    pub fn list(&self, session: SessionId) -> Value {
        let listed: Vec<Value> = self.locked(|table| {
            table
                .values()
                .filter(|e| e.session == session)
                .map(|e| {
                    let mut out = e.info.clone();
                    merge(&mut out, e.stats.json());
                    out
                })
                .collect()
        });
        json!({"subscriptions": listed})
    }
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}
