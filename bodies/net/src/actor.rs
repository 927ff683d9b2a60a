use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aido_actions::NetAction;
use aido_actions::net::{DnsLookup, FetchUrl, HttpRequest, Method, OllamaEndpoint, PortCheck};
use aido_call::{Body, Calls, Reply, Turn};
use aido_net::{Host, NetPolicy, Target, classify};
use aido_policy::PolicyEngine;
use serde_json::{Value, json};

use super::NetBodyError;
use super::http::{Client, Request, resolve};
use super::llm::{self, LLM_TIMEOUT_MS_DEFAULT};

/// An exchange's time when the call names none.
pub const TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// The response bytes http_request keeps when the call names no bound.
pub const HTTP_BYTES_DEFAULT: u64 = 1 << 20;
/// Redirects followed when the call names no bound.
pub const REDIRECTS_DEFAULT: u32 = 5;
/// A port check's time when the call names none.
pub const PORT_TIMEOUT_MS_DEFAULT: u64 = 3_000;

/// What it is built from.
#[derive(Clone)]
pub struct NetBodyArgs {
    /// The policy: its allowlist judges every hop and address.
    pub policy: Arc<PolicyEngine>,
}

/// The net body: the client and the port checks of the last minute. Each call works in a
/// task of its own, so one slow server does not hold up the next call.
pub struct NetBody {
    policy: Arc<PolicyEngine>,
    client: Client,
    port_checks: Arc<Mutex<VecDeque<Instant>>>,
}

/// Messages to the net body.
pub enum NetMsg {
    /// Run one network primitive.
    Run {
        /// The action.
        action: Box<NetAction>,
        /// The exchange as the journal records it (the result is rendered from it).
        reply: Reply<Value>,
    },
}

impl Body for NetBody {
    const NAME: &'static str = "net";
    type Args = NetBodyArgs;
    type Msg = NetMsg;

    async fn build(args: NetBodyArgs) -> Result<Self, String> {
        Ok(Self {
            policy: args.policy,
            client: Client::new(),
            port_checks: Arc::default(),
        })
    }

    async fn handle(&mut self, msg: NetMsg, calls: &Calls) {
        match msg {
            NetMsg::Run { action, reply } => {
                let (policy, client) = (self.policy.clone(), self.client.clone());
                let port_checks = self.port_checks.clone();
                // A request may change the world on the other side: once it is sent the
                // caller waits for its answer, so the body commits before sending.
                calls.task(reply, Turn::Shared, true, move |ticket| async move {
                    let left = ticket.deadline().saturating_duration_since(Instant::now());
                    run(&policy, &client, &port_checks, *action, left)
                        .await
                        .map_err(NetBodyError::into_failure)
                });
            }
        }
    }
}

/// A call's time: what it asked for (or the default), within the policy's bound and a little
/// inside the call's deadline, so the exchange answers (timed out) before the caller gives up.
fn timeout_of(
    asked: Option<u64>,
    default_ms: u64,
    limits: &aido_policy::Net,
    left: Duration,
) -> Result<Duration, NetBodyError> {
    let ms = asked.unwrap_or(default_ms.min(limits.timeout_ms_max));
    if ms > limits.timeout_ms_max {
        return Err(NetBodyError::OverBound {
            what: "timeout_ms",
            asked: ms,
            max: limits.timeout_ms_max,
            key: "timeout_ms_max",
        });
    }
    let margin = (left / 10).min(Duration::from_secs(2));
    Ok(Duration::from_millis(ms).min(left.saturating_sub(margin)))
}

async fn run(
    policy: &PolicyEngine,
    client: &Client,
    port_checks: &Mutex<VecDeque<Instant>>,
    action: NetAction,
    left: Duration,
) -> Result<Value, NetBodyError> {
    let limits = &policy.config().net;
    let net = policy.net();
    match action {
        NetAction::HttpRequest(a) => http_request(net, client, limits, a, left).await,
        NetAction::FetchUrl(a) => fetch_url(net, client, limits, a, left).await,
        NetAction::PortCheck(a) => {
            admit_port_check(port_checks, limits.port_checks_per_minute_max)?;
            port_check(net, client, limits, a, left).await
        }
        NetAction::DnsLookup(a) => dns_lookup(net, a).await,
        NetAction::LlmCall(a) => {
            let timeout = timeout_of(a.timeout_ms, LLM_TIMEOUT_MS_DEFAULT, limits, left)?;
            let (request, provider) = llm::llm_request(&policy.config().llm, &a, timeout)?;
            model_call(net, client, limits, request, provider, "chat_completions").await
        }
        NetAction::OllamaChat(a) => {
            let timeout = timeout_of(a.timeout_ms, LLM_TIMEOUT_MS_DEFAULT, limits, left)?;
            let request = llm::ollama_chat_request(&policy.config().ollama.base_url, &a, timeout)?;
            model_call(net, client, limits, request, "ollama", "chat").await
        }
        NetAction::OllamaApi(a) => {
            let timeout = timeout_of(a.timeout_ms, LLM_TIMEOUT_MS_DEFAULT, limits, left)?;
            let request = llm::ollama_api_request(&policy.config().ollama.base_url, &a, timeout)?;
            let endpoint = match a.endpoint {
                OllamaEndpoint::Chat => "chat",
                OllamaEndpoint::Generate => "generate",
                OllamaEndpoint::Tags => "tags",
                OllamaEndpoint::Show => "show",
            };
            model_call(net, client, limits, request, "ollama", endpoint).await
        }
    }
}

/// Send a model call (no redirects: an API that moves is an error), and refuse an error
/// status with its code; the exchange is the answer, marked with its wire shape.
async fn model_call(
    net: &NetPolicy,
    client: &Client,
    limits: &aido_policy::Net,
    mut request: Request,
    provider: &str,
    endpoint: &str,
) -> Result<Value, NetBodyError> {
    request.max_bytes = limits.response_bytes_max;
    let mut exchange = client.exchange(net, request).await?;
    let status = exchange["response"]["status"].as_u64().unwrap_or(0);
    if !(200..300).contains(&status) {
        let body = exchange["response"]["body"].as_str().unwrap_or("");
        return Err(NetBodyError::LlmStatus {
            status,
            body: body.chars().take(500).collect(),
        });
    }
    exchange["provider"] = json!(provider);
    exchange["endpoint"] = json!(endpoint);
    Ok(exchange)
}

fn method_of(method: Method) -> reqwest::Method {
    match method {
        Method::Get => reqwest::Method::GET,
        Method::Head => reqwest::Method::HEAD,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
        Method::Options => reqwest::Method::OPTIONS,
    }
}

fn bounded(
    asked: Option<u64>,
    default: u64,
    max: u64,
    what: &'static str,
    key: &'static str,
) -> Result<u64, NetBodyError> {
    let value = asked.unwrap_or(default.min(max));
    if value > max {
        return Err(NetBodyError::OverBound {
            what,
            asked: value,
            max,
            key,
        });
    }
    Ok(value)
}

async fn http_request(
    net: &NetPolicy,
    client: &Client,
    limits: &aido_policy::Net,
    a: HttpRequest,
    left: Duration,
) -> Result<Value, NetBodyError> {
    let (url, _) = Target::from_url(&a.url)?;
    let request = Request {
        method: method_of(a.method),
        url,
        headers: a.headers.into_iter().collect(),
        body: a.body,
        timeout: timeout_of(a.timeout_ms, TIMEOUT_MS_DEFAULT, limits, left)?,
        max_bytes: bounded(
            a.max_bytes,
            HTTP_BYTES_DEFAULT,
            limits.response_bytes_max,
            "max_bytes",
            "response_bytes_max",
        )?,
        follow_redirects: a.follow_redirects,
        max_redirects: bounded(
            a.max_redirects.map(u64::from),
            u64::from(REDIRECTS_DEFAULT),
            u64::from(limits.redirects_max),
            "max_redirects",
            "redirects_max",
        )? as u32,
    };
    client.exchange(net, request).await
}

async fn fetch_url(
    net: &NetPolicy,
    client: &Client,
    limits: &aido_policy::Net,
    a: FetchUrl,
    left: Duration,
) -> Result<Value, NetBodyError> {
    let (url, _) = Target::from_url(&a.url)?;
    let request = Request {
        method: reqwest::Method::GET,
        url,
        headers: vec![(
            "accept".into(),
            "text/html, text/markdown, text/plain;q=0.9, */*;q=0.5".into(),
        )],
        body: None,
        timeout: timeout_of(a.timeout_ms, TIMEOUT_MS_DEFAULT, limits, left)?,
        max_bytes: limits.response_bytes_max,
        follow_redirects: true,
        max_redirects: REDIRECTS_DEFAULT.min(limits.redirects_max),
    };
    client.exchange(net, request).await
}

/// Refuse a port check past the per-minute bound (the window slides).
fn admit_port_check(window: &Mutex<VecDeque<Instant>>, max: u32) -> Result<(), NetBodyError> {
    let now = Instant::now();
    let mut times = window
        .lock()
        .map_err(|_| NetBodyError::PortChecksExceeded { max })?;
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(60))
    {
        times.pop_front();
    }
    if times.len() as u32 >= max {
        return Err(NetBodyError::PortChecksExceeded { max });
    }
    times.push_back(now);
    Ok(())
}

async fn port_check(
    net: &NetPolicy,
    client: &Client,
    limits: &aido_policy::Net,
    a: PortCheck,
    left: Duration,
) -> Result<Value, NetBodyError> {
    let timeout = timeout_of(a.timeout_ms, PORT_TIMEOUT_MS_DEFAULT, limits, left)?;
    let target = Target::tcp(&a.host, a.port)?;
    let judged = client.judge(net, target, None).await?;
    let started = Instant::now();
    let (mut open, mut reached, mut error) = (false, None::<SocketAddr>, None::<String>);
    for address in &judged.addresses {
        let left = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, tokio::net::TcpStream::connect(address)).await {
            Ok(Ok(_stream)) => {
                open = true;
                reached = Some(*address);
                break;
            }
            Ok(Err(e)) => error = Some(format!("{address}: {e}")),
            Err(_) => {
                error = Some(format!(
                    "{address}: no answer within {} ms",
                    timeout.as_millis()
                ));
                break;
            }
        }
    }
    Ok(json!({
        "host": judged.target.host.to_string(),
        "port": a.port,
        "open": open,
        "address": reached.map(|a| a.to_string()),
        "tried": judged.addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "refused": judged.refused,
        "error": if open { None } else { error },
    }))
}

async fn dns_lookup(net: &NetPolicy, a: DnsLookup) -> Result<Value, NetBodyError> {
    let target = Target::tcp(&a.host, 0)?;
    net.admit_any_port(&target)?;
    let Host::Domain(name) = &target.host else {
        return Err(aido_net::NetError::UrlInvalid {
            url: a.host.clone(),
            why: "dns_lookup takes a name, not an address".into(),
        }
        .into());
    };
    let mut ips: Vec<_> = resolve(name, 0)
        .await?
        .into_iter()
        .map(|s| s.ip())
        .collect();
    ips.sort();
    ips.dedup();
    let addresses: Vec<Value> = ips
        .into_iter()
        .map(|ip| {
            let range = classify(ip);
            let allowed = net.check_address(name, ip).is_ok();
            json!({
                "address": ip.to_string(),
                "family": if ip.is_ipv4() { "ipv4" } else { "ipv6" },
                "range": range.map(|r| r.kind.name()),
                "block": range.map(|r| r.block.to_string()),
                "reachable": allowed,
            })
        })
        .collect();
    Ok(json!({"host": name, "addresses": addresses}))
}
