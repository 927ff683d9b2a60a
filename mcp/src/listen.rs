//! `subscriptions/listen` (MCP 2026-07-28): where a 2026-07-28 client hears of changes once
//! its request is answered.
//!
//! A 2026-07-28 request gets its own notifications only while it is answered, so a
//! subscription's file changes (the `subscribe` and `watch_and_react` primitives of the events
//! toolset), which arrive long after the `subscribe` call returned, reach the client through
//! the listen streams it holds open in the same place. The revision defines a small
//! vocabulary for those streams; aido's changes are a resource, [`EVENTS_URI`]:
//! - a batch is journaled first (`events_delivered`, as for every client) and kept in a bounded
//!   ring here ([`EVENTS_KEPT_MAX`] batches);
//! - every stream that subscribed to [`EVENTS_URI`] gets `notifications/resources/updated`
//!   for it, the batch in the notification's `_meta` under [`EVENTS_META`];
//! - `resources/read` of [`EVENTS_URI`] returns the kept batches, oldest first, for a client
//!   that only saw the notification.
//!
//! `tools_list_changed` streams hear of defined functions and custom primitives coming and
//! going, as `tools/list_changed` told legacy clients.

use std::collections::VecDeque;
use std::sync::Mutex;

use rmcp::model::{
    GetMeta, ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerNotification,
};
use rmcp::service::SubscriptionSink;
use serde_json::{Value, json};

/// The resource whose updates are a place's subscription batches.
pub const EVENTS_URI: &str = "aido://events";

/// The `_meta` key of the batch in an [`EVENTS_URI`] update.
pub const EVENTS_META: &str = "aido/events";

/// Batches kept for `resources/read` of [`EVENTS_URI`].
pub(crate) const EVENTS_KEPT_MAX: usize = 64;

/// Listen streams open at once in one place; one more is refused.
pub(crate) const STREAMS_MAX: usize = 16;

/// The listen streams open in one place, and the batches it kept.
#[derive(Default)]
pub(crate) struct Listeners {
    sinks: Mutex<Vec<SubscriptionSink>>,
    kept: Mutex<VecDeque<Value>>,
}

impl Listeners {
    /// Hold `sink` until [`Self::remove`]; false when [`STREAMS_MAX`] are open.
    pub(crate) fn add(&self, sink: SubscriptionSink) -> bool {
        let mut sinks = self.sinks.lock().unwrap_or_else(|p| p.into_inner());
        if sinks.len() >= STREAMS_MAX {
            return false;
        }
        sinks.push(sink);
        true
    }

    /// Forget the stream of the listen request `id`.
    pub(crate) fn remove(&self, id: &rmcp::model::RequestId) {
        self.sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|sink| sink.id() != id);
    }

    /// Whether a stream is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    fn sinks(&self) -> Vec<SubscriptionSink> {
        self.sinks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Tell the streams that asked that the tool list changed.
    pub(crate) fn tools_changed(&self) {
        for sink in self.sinks() {
            if sink.accepted().tools_list_changed == Some(true) {
                tokio::spawn(async move {
                    if let Err(e) = sink.notify_tool_list_changed().await {
                        tracing::debug!(error = %e, "a listen stream missed tools/list_changed");
                    }
                });
            }
        }
    }

    /// Tell the streams that asked that the list of prompts changed (conformance fixtures).
    #[cfg(feature = "conformance")]
    pub(crate) fn prompts_changed(&self) {
        for sink in self.sinks() {
            if sink.accepted().prompts_list_changed == Some(true) {
                tokio::spawn(async move {
                    let _ = sink.notify_prompt_list_changed().await;
                });
            }
        }
    }

    /// Keep `batch` and send it to the streams subscribed to [`EVENTS_URI`].
    pub(crate) fn events(&self, batch: Value) {
        {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() >= EVENTS_KEPT_MAX {
                kept.pop_front();
            }
            kept.push_back(batch.clone());
        }
        for sink in self.sinks() {
            let wanted = sink
                .accepted()
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.iter().any(|uri| uri == EVENTS_URI));
            if !wanted {
                continue;
            }
            let mut notification = ServerNotification::ResourceUpdatedNotification(
                ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(EVENTS_URI)),
            );
            notification
                .get_meta_mut()
                .insert(EVENTS_META.to_owned(), batch.clone());
            tokio::spawn(async move {
                let sent = sink.send(notification).await;
                if let Err(e) = sent {
                    tracing::debug!(error = %e, "a listen stream missed an events batch");
                }
            });
        }
    }

    /// The kept batches, oldest first.
    pub(crate) fn kept(&self) -> Value {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        json!({"batches": kept.iter().collect::<Vec<_>>()})
    }
}

/// Delivers a call's subscription batches to the place's listen streams (2026-07-28).
pub(crate) struct ToListeners(pub(crate) std::sync::Arc<Listeners>);

impl aido_actors::Notifier for ToListeners {
    fn notify(&self, batch: Value) {
        self.0.events(batch);
    }
}
