use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aido_net::{Host, NetPolicy, Target, redact};
use base64::Engine as _;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde_json::{Value, json};
use url::Url;

use super::NetBodyError;

/// Longest a name may take to resolve.
pub const RESOLVE_TIMEOUT_MS: u64 = 5_000;

/// The addresses each name was judged to, for the client's resolver: it answers from here
/// and never asks DNS itself, so the client connects only to an address the judge saw.
#[derive(Debug, Default)]
struct Pins(Mutex<HashMap<String, Vec<SocketAddr>>>);

impl Pins {
    fn set(&self, name: &str, addresses: Vec<SocketAddr>) {
        if let Ok(mut pins) = self.0.lock() {
            pins.insert(name.to_owned(), addresses);
        }
    }

    fn get(&self, name: &str) -> Option<Vec<SocketAddr>> {
        self.0.lock().ok().and_then(|pins| pins.get(name).cloned())
    }
}

/// The client's resolver: the judged addresses of a name, or an error for a name nobody
/// judged (it cannot happen: every hop is judged before it is sent; if it did, nothing is
/// reached).
struct Pinned(Arc<Pins>);

impl Resolve for Pinned {
    fn resolve(&self, name: Name) -> Resolving {
        let found = self.0.get(name.as_str());
        let name = name.as_str().to_owned();
        Box::pin(async move {
            match found {
                Some(addresses) if !addresses.is_empty() => {
                    Ok(Box::new(addresses.into_iter()) as Addrs)
                }
                _ => Err(format!("{name} was not judged; refusing to resolve it").into()),
            }
        })
    }
}

/// One HTTP request as the body sends it.
pub(crate) struct Request {
    pub(crate) method: reqwest::Method,
    pub(crate) url: Url,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Option<String>,
    pub(crate) timeout: Duration,
    pub(crate) max_bytes: u64,
    pub(crate) follow_redirects: bool,
    pub(crate) max_redirects: u32,
}

/// A name's addresses after judging: the ones the connection may use, and the ones refused.
pub(crate) struct Judged {
    pub(crate) target: Target,
    pub(crate) addresses: Vec<SocketAddr>,
    pub(crate) refused: Vec<Value>,
}

/// The HTTP client (no proxy, no redirects of its own, a pinned resolver) and the judge.
///
/// The reqwest client is built on the first request, not when the body starts: building it
/// loads the system's root certificates (about 150 files, milliseconds of CPU), which a
/// runtime that never makes a request (`aido exec`, most sessions) should not pay.
#[derive(Clone)]
pub(crate) struct Client {
    http: Arc<std::sync::OnceLock<Result<reqwest::Client, String>>>,
    pins: Arc<Pins>,
}

impl Client {
    pub(crate) fn new() -> Self {
        Self {
            http: Arc::default(),
            pins: Arc::new(Pins::default()),
        }
    }

    /// The reqwest client, built once; a build that failed fails every request the same way.
    fn http(&self, url: &str) -> Result<&reqwest::Client, NetBodyError> {
        self.http
            .get_or_init(|| {
                reqwest::Client::builder()
                    .no_proxy()
                    .redirect(reqwest::redirect::Policy::none())
                    .dns_resolver(Pinned(self.pins.clone()))
                    .user_agent(concat!("aido/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("the HTTP client cannot be built: {e}"))
            })
            .as_ref()
            .map_err(|why| NetBodyError::RequestFailed {
                url: url.to_owned(),
                why: why.clone(),
            })
    }

    /// Judge a target: its host and port by the allowlist, then the address (a literal) or
    /// every address its name resolves to. The addresses kept are pinned for the client.
    pub(crate) async fn judge(
        &self,
        policy: &NetPolicy,
        target: Target,
        pin_as: Option<&str>,
    ) -> Result<Judged, NetBodyError> {
        policy.admit(&target)?;
        let name = match &target.host {
            Host::Ip(ip) => {
                return Ok(Judged {
                    addresses: vec![SocketAddr::new(*ip, target.port)],
                    target,
                    refused: Vec::new(),
                });
            }
            Host::Domain(name) => name.clone(),
        };
        let found = resolve(&name, target.port).await?;
        let (mut addresses, mut refused, mut first) = (Vec::new(), Vec::new(), None);
        for address in found {
            match policy.check_address(&name, address.ip()) {
                Ok(()) => addresses.push(address),
                Err(e) => {
                    refused
                        .push(json!({"address": address.ip().to_string(), "why": e.to_string()}));
                    first.get_or_insert(e);
                }
            }
        }
        if addresses.is_empty() {
            return Err(match first {
                Some(e) => e.into(),
                None => NetBodyError::DnsFailed {
                    host: name,
                    why: "no addresses".into(),
                },
            });
        }
        if let Some(pin) = pin_as {
            self.pins.set(pin, addresses.clone());
        }
        Ok(Judged {
            target,
            addresses,
            refused,
        })
    }

    /// Send `request`, following redirects hop by hop (each judged like the first), and
    /// return the exchange as the journal records it.
    #[allow(clippy::too_many_lines)]
    pub(crate) async fn exchange(
        &self,
        policy: &NetPolicy,
        request: Request,
    ) -> Result<Value, NetBodyError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + request.timeout);
        let timeout_ms = request.timeout.as_millis() as u64;
        let secrets = secret_values(&request.url, &request.headers);
        let sent = json!({
            "method": request.method.as_str(),
            "url": redact::url(&request.url),
            "headers": redacted_headers(&request.headers),
            "body_bytes": request.body.as_ref().map_or(0, String::len),
        });
        let (mut url, mut method, mut body) = (request.url, request.method, request.body);
        let mut headers = request.headers;
        let mut hops: Vec<Value> = Vec::new();
        loop {
            let shown = redact::url(&url);
            let timed_out = || NetBodyError::Timeout {
                url: shown.clone(),
                timeout_ms,
            };
            let target = Target::of(&url)?;
            let judged =
                tokio::time::timeout_at(deadline, self.judge(policy, target, url.host_str()))
                    .await
                    .map_err(|_| timed_out())??;
            let mut builder = self.http(&shown)?.request(method.clone(), url.clone());
            for (name, value) in &headers {
                let name_ok = reqwest::header::HeaderName::from_bytes(name.as_bytes());
                let value_ok = reqwest::header::HeaderValue::from_str(value);
                let (Ok(n), Ok(v)) = (name_ok, value_ok) else {
                    return Err(NetBodyError::HeaderInvalid { name: name.clone() });
                };
                builder = builder.header(n, v);
            }
            if let Some(text) = &body {
                builder = builder.body(text.clone());
            }
            let mut response = tokio::time::timeout_at(deadline, builder.send())
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| sending(&shown, e))?;
            let status = response.status().as_u16();
            let address = response.remote_addr().map(|a| a.to_string());
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
            if request.follow_redirects
                && matches!(status, 301 | 302 | 303 | 307 | 308)
                && let Some(location) = location
            {
                let next = url
                    .join(&location)
                    .map_err(|_| NetBodyError::RedirectInvalid { url: shown.clone() })?;
                if hops.len() as u32 >= request.max_redirects {
                    return Err(NetBodyError::RedirectsExceeded {
                        max: request.max_redirects,
                        url: redact::url(&next),
                    });
                }
                hops.push(json!({
                    "url": shown,
                    "address": address,
                    "status": status,
                    "location": redact::url(&next),
                    "refused": judged.refused,
                }));
                // Browsers' rules: 303, and 301/302 after a POST, become a GET without a body.
                if status == 303 || (matches!(status, 301 | 302) && method == reqwest::Method::POST)
                {
                    method = reqwest::Method::GET;
                    body = None;
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
                }
                // Credentials never follow a redirect to another origin.
                if next.origin() != url.origin() {
                    headers.retain(|(n, _)| !redact::is_secret_header(n));
                }
                url = next;
                continue;
            }
            let kept_headers: Vec<Value> = response
                .headers()
                .iter()
                .map(|(n, v)| {
                    let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                    let value = if redact::is_secret_header(n.as_str()) {
                        redact::marker(&value)
                    } else {
                        value
                    };
                    json!([n.as_str(), value])
                })
                .collect();
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            let cap = usize::try_from(request.max_bytes).unwrap_or(usize::MAX);
            let (mut bytes, mut truncated) = (Vec::new(), false);
            while let Some(chunk) = tokio::time::timeout_at(deadline, response.chunk())
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| sending(&shown, e))?
            {
                let room = cap - bytes.len();
                if chunk.len() > room {
                    bytes.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                bytes.extend_from_slice(&chunk);
            }
            let (text, base64) = body_text(bytes.clone(), truncated);
            let mut exchange = json!({
                "request": sent,
                "hops": hops,
                "response": {
                    "status": status,
                    "url": shown,
                    "address": address,
                    "headers": kept_headers,
                    "content_type": content_type,
                    "body": text,
                    "body_base64": base64,
                    "bytes": bytes.len(),
                    "truncated": truncated,
                    "refused": judged.refused,
                },
                "duration_ms": started.elapsed().as_millis() as u64,
            });
            scrub(&mut exchange, &secrets);
            return Ok(exchange);
        }
    }
}

/// A body as text when it is UTF-8 (a cut at the size cap may split the last character:
/// that tail is dropped), otherwise as base64.
fn body_text(bytes: Vec<u8>, truncated: bool) -> (Option<String>, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(text) => (Some(text), None),
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            if truncated && bytes.len() - valid < 4 && e_is_tail(&bytes[valid..]) {
                let text = String::from_utf8_lossy(&bytes[..valid]).into_owned();
                (Some(text), None)
            } else {
                (
                    None,
                    Some(base64::engine::general_purpose::STANDARD.encode(&bytes)),
                )
            }
        }
    }
}

/// Whether `tail` is the start of one UTF-8 character (a lead byte and continuations).
fn e_is_tail(tail: &[u8]) -> bool {
    matches!(tail.first(), Some(b) if *b >= 0xC0) && tail[1..].iter().all(|b| b & 0xC0 == 0x80)
}

/// The secret values a request carries (secret headers, URL userinfo, secret query values):
/// scrubbed from everything recorded, in case the server echoes them back.
fn secret_values(url: &Url, headers: &[(String, String)]) -> Vec<String> {
    let mut secrets: Vec<String> = headers
        .iter()
        .filter(|(n, _)| redact::is_secret_header(n))
        .flat_map(|(_, v)| {
            // "Bearer TOKEN": the token alone is a secret too.
            let token = v.split_once(' ').map(|(_, t)| t.trim().to_owned());
            std::iter::once(v.clone()).chain(token)
        })
        .collect();
    secrets.extend(url.password().map(str::to_owned));
    if !url.username().is_empty() {
        secrets.push(url.username().to_owned());
    }
    let redacted = redact::url(url);
    secrets.extend(
        url.query_pairs()
            .map(|(_, v)| v.into_owned())
            .filter(|v| !redacted.contains(v.as_str())),
    );
    // Short values would scrub ordinary text; longest first, so a token inside its header
    // value is replaced as part of the whole.
    secrets.retain(|s| s.len() >= 6);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// Replace every secret value in every string of `value` by its marker.
fn scrub(value: &mut Value, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    match value {
        Value::String(text) => {
            for secret in secrets {
                if text.contains(secret.as_str()) {
                    *text = text.replace(secret.as_str(), &redact::marker(secret));
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| scrub(v, secrets)),
        _ => {}
    }
}

fn redacted_headers(headers: &[(String, String)]) -> Value {
    Value::Object(
        headers
            .iter()
            .map(|(n, v)| {
                let v = if redact::is_secret_header(n) {
                    redact::marker(v)
                } else {
                    v.clone()
                };
                (n.clone(), Value::String(v))
            })
            .collect(),
    )
}

fn sending(url: &str, error: reqwest::Error) -> NetBodyError {
    let mut why = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(inner) = source {
        why = format!("{why}: {inner}");
        source = inner.source();
    }
    if error.is_connect() {
        NetBodyError::ConnectFailed {
            url: url.to_owned(),
            why,
        }
    } else {
        NetBodyError::RequestFailed {
            url: url.to_owned(),
            why,
        }
    }
}

/// Resolve a name (the system's resolver: /etc/hosts, then DNS), bounded in time.
pub(crate) async fn resolve(name: &str, port: u16) -> Result<Vec<SocketAddr>, NetBodyError> {
    let failed = |why: String| NetBodyError::DnsFailed {
        host: name.to_owned(),
        why,
    };
    let found = tokio::time::timeout(
        Duration::from_millis(RESOLVE_TIMEOUT_MS),
        tokio::net::lookup_host((name, port)),
    )
    .await
    .map_err(|_| failed(format!("no answer within {RESOLVE_TIMEOUT_MS} ms")))?
    .map_err(|e| failed(e.to_string()))?;
    let mut addresses: Vec<SocketAddr> = found.collect();
    addresses.dedup();
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_cut_inside_a_character_stays_text() {
        let cut = "héllo".as_bytes()[..2].to_vec();
        assert_eq!(body_text(cut, true), (Some("h".into()), None));
        let binary = vec![0xff, 0x00, 0x10];
        assert!(body_text(binary, false).1.is_some());
    }
}
