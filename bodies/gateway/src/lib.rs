//! The gateway body: the downstream MCP servers of `[[downstream]]` (aido-gateway), started
//! when the body starts, each inside aido's sandbox, and their tools' calls.
//!
//! - **Calls are aido actions.** A call of a downstream tool reaches this body only as a
//!   `downstream_call` the policy judged (its class from the tool's annotations or the
//!   entry's `classes`; its entry's `deny_tools`); the server's whole `CallToolResult` is the
//!   body's answer, which the journal keeps and playback renders again.
//! - **The tool list is the servers'.** [`GatewayMsg::Tools`] lists every server's tools
//!   (namespaced, with their own schemas and annotations), refreshes the table the MCP
//!   surface maps tool names by ([`Registry`]) and tells the policy their classes.
//! - **Entries that cannot start are named, not fatal.** An entry the gateway refuses or a
//!   server that does not start is logged with its code and left out; the others run.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use aido_actions::downstream::DownstreamCall;
use aido_actions::{Failure, SideEffectClass};
use aido_call::{Body, Calls, Reply, Turn};
use aido_gateway::{DownstreamConfig, DownstreamTool, Gateway, ToolClass, Upstream};
use aido_policy::PolicyEngine;
use serde_json::Value;

/// The downstream tools last listed, shared with the surfaces (which list them and map their
/// names to `downstream_call`s).
pub type Registry = Arc<RwLock<Vec<DownstreamTool>>>;

/// What it is built from; kept by the supervisor to build a fresh body after a crash.
#[derive(Clone)]
pub struct GatewayBodyArgs {
    /// The policy: its `[[downstream]]` entries, and the classes it is told.
    pub policy: Arc<PolicyEngine>,
    /// The sandbox the stdio servers run in.
    pub sandbox: aido_sandbox::Sandbox,
    /// The tools last listed.
    pub registry: Registry,
}

/// The gateway body: the started downstreams.
pub struct GatewayBody {
    gateway: Arc<Gateway>,
    policy: Arc<PolicyEngine>,
    registry: Registry,
}

/// Messages to the gateway body.
pub enum GatewayMsg {
    /// Call one downstream tool.
    Run {
        /// The call.
        call: Box<DownstreamCall>,
        /// Where the server's progress and questions go.
        upstream: Arc<dyn Upstream>,
        /// The server's `CallToolResult`, as JSON.
        reply: Reply<Value>,
    },
    /// List every server's tools (and refresh the registry and the policy's classes).
    Tools {
        /// The tools.
        reply: Reply<Vec<DownstreamTool>>,
    },
    /// Each server: its name, whether it runs, its process id, its tools' count (for
    /// Mission Control; looking is not journaled).
    Status {
        /// One object per server.
        reply: Reply<Vec<Value>>,
    },
}

/// The entries of the policy's `[[downstream]]` as the gateway reads them; an entry it cannot
/// read is logged with why and left out.
pub fn entries(policy: &PolicyEngine) -> Vec<DownstreamConfig> {
    let mut read = Vec::new();
    for entry in &policy.config().downstream {
        let mut table = entry.server.clone();
        table.insert("name".into(), toml::Value::String(entry.name.clone()));
        match toml::Value::Table(table).try_into::<DownstreamConfig>() {
            // aido reaches an HTTP server itself: its URL is judged by `[net]` like any.
            Ok(config) if let Some(refusal) = url_refused(policy, &config) => tracing::error!(
                downstream = %entry.name,
                code = %aido_policy::net::deny_code(&refusal).code(),
                "[[downstream]] {:?} is left out: its url: {refusal}",
                entry.name
            ),
            Ok(config) => read.push(config),
            Err(error) => tracing::error!(
                downstream = %entry.name,
                code = "downstream_config_invalid",
                "[[downstream]] {:?} is left out: {error}",
                entry.name
            ),
        }
    }
    read
}

/// Why `[net]` refuses an HTTP entry's URL (`None` for a stdio entry, or an admitted URL).
fn url_refused(policy: &PolicyEngine, config: &DownstreamConfig) -> Option<aido_net::NetError> {
    let url = config.url.as_deref()?;
    aido_net::Target::from_url(url)
        .and_then(|(_, target)| policy.net().admit(&target))
        .err()
}

/// The policy class of a tool of this gateway class: what it reads is read-only; anything
/// else changes something aido cannot undo.
pub fn policy_class(class: ToolClass) -> SideEffectClass {
    match class {
        ToolClass::Read => SideEffectClass::ReadOnly,
        ToolClass::Destructive => SideEffectClass::Destructive,
        ToolClass::Write | ToolClass::OpenWorld => SideEffectClass::Network,
    }
}

impl GatewayBody {
    /// Every server's tools; one that cannot list is logged and left out.
    async fn list(
        gateway: &Gateway,
        policy: &PolicyEngine,
        registry: &Registry,
    ) -> Vec<DownstreamTool> {
        let mut all = Vec::new();
        for (server, tools) in gateway.tools().await {
            match tools {
                Ok(tools) => all.extend(tools),
                Err(error) => {
                    tracing::warn!(downstream = %server, code = %aido_actions::Coded::code(&error), "cannot list its tools: {error}")
                }
            }
        }
        policy.set_downstream_classes(
            all.iter()
                .map(|tool| (tool.name.clone(), policy_class(tool.class)))
                .collect::<BTreeMap<_, _>>(),
        );
        if let Ok(mut known) = registry.write() {
            known.clone_from(&all);
        }
        all
    }
}

impl Body for GatewayBody {
    const NAME: &'static str = "gateway";
    type Args = GatewayBodyArgs;
    type Msg = GatewayMsg;
    // A panic in one call leaves the servers and the other calls as they were.
    const RESTART_AFTER_PANIC: bool = false;

    async fn build(args: GatewayBodyArgs) -> Result<Self, String> {
        let entries = entries(&args.policy);
        let gateway = match Gateway::start(entries, &args.sandbox).await {
            Ok((gateway, failed)) => {
                for error in failed {
                    tracing::error!(code = %aido_actions::Coded::code(&error), "a downstream did not start: {error}");
                }
                gateway
            }
            Err(error) => {
                tracing::error!(code = %aido_actions::Coded::code(&error), "[[downstream]] is refused: {error}");
                Gateway::default()
            }
        };
        let body = Self {
            gateway: Arc::new(gateway),
            policy: args.policy,
            registry: args.registry,
        };
        Self::list(&body.gateway, &body.policy, &body.registry).await;
        Ok(body)
    }

    async fn handle(&mut self, msg: GatewayMsg, calls: &Calls) {
        let (gateway, policy, registry) = (
            self.gateway.clone(),
            self.policy.clone(),
            self.registry.clone(),
        );
        match msg {
            GatewayMsg::Run {
                call,
                upstream,
                reply,
            } => {
                // Once sent, a call may change the world on the server: it commits first.
                calls.task(reply, Turn::Shared, true, move |_ticket| async move {
                    let DownstreamCall { tool, arguments } = *call;
                    let result = gateway
                        .call(&tool, Some(arguments), upstream)
                        .await
                        .map_err(Failure::from)?;
                    serde_json::to_value(&result).map_err(|e| {
                        Failure::from(aido_gateway::DownstreamError::Protocol {
                            server: aido_gateway::server_of(&tool)
                                .unwrap_or_default()
                                .to_owned(),
                            why: format!("its result of {tool} is not JSON: {e}"),
                        })
                    })
                });
            }
            GatewayMsg::Tools { reply } => {
                calls.task(reply, Turn::Shared, false, move |_ticket| async move {
                    Ok(Self::list(&gateway, &policy, &registry).await)
                });
            }
            GatewayMsg::Status { reply } => {
                calls.task(reply, Turn::Shared, false, move |_ticket| async move {
                    let known = registry.read().map(|t| t.clone()).unwrap_or_default();
                    let mut servers = Vec::new();
                    for name in gateway.names() {
                        let Some(downstream) = gateway.downstream(name) else {
                            continue;
                        };
                        let tools = known.iter().filter(|tool| tool.server == name).count();
                        servers.push(serde_json::json!({
                            "name": name,
                            "running": downstream.running().await,
                            "pid": downstream.pid().await,
                            "tools": tools,
                        }));
                    }
                    Ok(servers)
                });
            }
        }
    }
}

/// What a person's answer to a downstream's form becomes: accepted with its content, or
/// declined, or cancelled (dismissed, timed out, or no one could be asked).
pub enum Answered {
    /// Submitted with this content.
    Accepted(Value),
    /// Declined.
    Declined,
    /// Dismissed, unanswered, or unaskable.
    Cancelled,
}

/// The elicitation result an answer is.
pub fn elicit_result(answer: Answered) -> aido_gateway::ElicitResult {
    use rmcp::model::ElicitationAction;
    match answer {
        Answered::Accepted(content) => {
            aido_gateway::ElicitResult::new(ElicitationAction::Accept).with_content(content)
        }
        Answered::Declined => aido_gateway::declined(),
        Answered::Cancelled => aido_gateway::ElicitResult::new(ElicitationAction::Cancel),
    }
}

/// A form elicitation's message and schema (as JSON); `None` for another mode (a URL), which
/// aido does not relay.
pub fn form_of(request: &aido_gateway::ElicitRequestParams) -> Option<(String, Value)> {
    match request {
        aido_gateway::ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => Some((
            message.clone(),
            serde_json::to_value(requested_schema).unwrap_or(Value::Null),
        )),
        _ => None,
    }
}
