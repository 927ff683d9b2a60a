//! The gateway's MCP client handler: it tells the downstream what the gateway can do
//! (elicitation) and relays the downstream's progress and elicitations to the upstream of the
//! call they belong to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, Implementation,
    ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};

use crate::upstream::{Progress, Upstream, declined};

/// The calls in flight on one downstream, with their upstreams; shared by the handler of
/// each connection and the calls.
#[derive(Default)]
pub(crate) struct Calls {
    /// Held while a call is sent and registered, so a progress notification that races its
    /// registration waits for it instead of being lost.
    registering: tokio::sync::Mutex<()>,
    /// In the order the calls started.
    entries: Mutex<Vec<Entry>>,
    next: Mutex<u64>,
}

/// One call in flight.
struct Entry {
    id: u64,
    token: ProgressToken,
    upstream: Arc<dyn Upstream>,
    /// The last progress forwarded: rmcp handles each notification on a task of its own, so
    /// they may come out of order; one that does not go beyond it is dropped (progress only
    /// grows), and the upstream sees a growing sequence.
    last: Option<f64>,
}

/// Removes its call from [`Calls`] when the call ends, however it ends.
pub(crate) struct Registered {
    calls: Arc<Calls>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut entries) = self.calls.entries.lock() {
            entries.retain(|entry| entry.id != self.id);
        }
    }
}

impl Calls {
    /// Holds registration while `send` sends the request, then registers the call under the
    /// progress token it was sent with.
    pub(crate) async fn register<T, E>(
        self: &Arc<Self>,
        upstream: Arc<dyn Upstream>,
        send: impl Future<Output = Result<T, E>>,
        token: impl FnOnce(&T) -> ProgressToken,
    ) -> Result<(T, Registered), E> {
        let _registering = self.registering.lock().await;
        let sent = send.await?;
        let id = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.push(Entry {
            id,
            token: token(&sent),
            upstream,
            last: None,
        });
        drop(entries);
        let registered = Registered {
            calls: Arc::clone(self),
            id,
        };
        Ok((sent, registered))
    }

    /// The upstream of the call `token` belongs to, if `progress` goes beyond what it was
    /// last sent.
    async fn for_progress(
        &self,
        token: &ProgressToken,
        progress: f64,
    ) -> Option<Arc<dyn Upstream>> {
        drop(self.registering.lock().await);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.iter_mut().find(|entry| entry.token == *token)?;
        if entry.last.is_some_and(|last| progress <= last) {
            return None;
        }
        entry.last = Some(progress);
        Some(Arc::clone(&entry.upstream))
    }

    /// The upstream of the latest call in flight: an elicitation over stdio names no call,
    /// so it goes to the one that started last.
    async fn latest(&self) -> Option<Arc<dyn Upstream>> {
        drop(self.registering.lock().await);
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.last().map(|entry| Arc::clone(&entry.upstream))
    }
}

/// The client handler of one connection to a downstream.
#[derive(Clone)]
pub(crate) struct Relay {
    pub(crate) server: String,
    pub(crate) calls: Arc<Calls>,
    /// Set when the downstream says its tool list changed.
    pub(crate) tools_changed: Arc<AtomicBool>,
}

impl rmcp::ClientHandler for Relay {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        Ok(match self.calls.latest().await {
            Some(upstream) => upstream.elicit(&self.server, request).await,
            None => declined(),
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(upstream) = self
            .calls
            .for_progress(&params.progress_token, params.progress)
            .await
        {
            let progress = Progress {
                server: self.server.clone(),
                progress: params.progress,
                total: params.total,
                message: params.message,
            };
            upstream.progress(progress).await;
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.store(true, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(capabilities(), client_info())
    }
}

/// What the gateway tells a downstream it can do: answer elicitations (forms).
fn capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({ "elicitation": { "form": {} } })).unwrap_or_default()
}

fn client_info() -> Implementation {
    Implementation::new("aido-gateway", env!("CARGO_PKG_VERSION"))
}
