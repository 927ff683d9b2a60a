//! Several downstreams behind one name space: a namespaced tool name routed to its server.

use std::collections::BTreeMap;
use std::sync::Arc;

use aido_sandbox::Sandbox;
use rmcp::model::{CallToolResult, JsonObject};

use crate::config::{DownstreamConfig, validate_all};
use crate::downstream::Downstream;
use crate::error::{ConfigError, DownstreamError};
use crate::tools::{DownstreamTool, server_of};
use crate::upstream::Upstream;

/// The downstreams of a configuration, by name. Routing needs no table: server names hold
/// no `__`, so a namespaced tool name's server is the text before its first `__`.
#[derive(Default)]
pub struct Gateway {
    downstreams: BTreeMap<String, Arc<Downstream>>,
}

/// What [`Gateway::start`] gives: the gateway of the downstreams that started, and the
/// errors of those that did not (each names its downstream; the others run without them).
pub type Started = (Gateway, Vec<DownstreamError>);

impl Gateway {
    /// Checks the entries together (valid, names unique), then starts each of them in
    /// `sandbox` with the profile its entry gives; one that fails to start is left out and
    /// its error returned beside the gateway.
    pub async fn start(
        entries: Vec<DownstreamConfig>,
        sandbox: &Sandbox,
    ) -> Result<Started, ConfigError> {
        validate_all(&entries)?;
        let mut gateway = Gateway::default();
        let mut failed = Vec::new();
        for entry in entries {
            match Downstream::start(entry, sandbox.clone(), None).await {
                Ok(downstream) => gateway.insert(downstream),
                Err(error) => failed.push(error),
            }
        }
        Ok((gateway, failed))
    }

    /// Adds (or replaces) a downstream started by the caller.
    pub fn insert(&mut self, downstream: Downstream) {
        self.downstreams
            .insert(downstream.name().to_owned(), Arc::new(downstream));
    }

    /// The downstream named `server`.
    pub fn downstream(&self, server: &str) -> Option<&Arc<Downstream>> {
        self.downstreams.get(server)
    }

    /// The names of its downstreams, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.downstreams.keys().map(String::as_str)
    }

    /// Every downstream's tools, by downstream (an unavailable one gives its error, the
    /// others still list).
    pub async fn tools(&self) -> Vec<(String, Result<Vec<DownstreamTool>, DownstreamError>)> {
        let mut tools = Vec::with_capacity(self.downstreams.len());
        for (name, downstream) in &self.downstreams {
            tools.push((name.clone(), downstream.tools().await));
        }
        tools
    }

    /// Calls the tool namespaced `name` on its downstream (see [`Downstream::call`]);
    /// `downstream_tool_unknown` when no downstream of the gateway has that name.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        upstream: Arc<dyn Upstream>,
    ) -> Result<CallToolResult, DownstreamError> {
        let server = server_of(name).unwrap_or_default();
        let Some(downstream) = self.downstreams.get(server) else {
            return Err(DownstreamError::ToolUnknown {
                server: server.to_owned(),
                name: name.to_owned(),
            });
        };
        downstream.call(name, arguments, upstream).await
    }
}
