use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;

use crate::error::ArtifactError;
use crate::store::{Manifest, Store, valid_id, valid_name};

/// The clock the server judges lifetimes by (the runtime's, so tests can pin it).
pub type NowMs = Arc<dyn Fn() -> u64 + Send + Sync>;

/// An artifact being served: its manifest, until when, and the origins its page may reach.
#[derive(Clone, Debug)]
pub struct Served {
    /// What it holds.
    pub manifest: Manifest,
    /// When it stops being served (milliseconds since the epoch).
    pub until_ms: u64,
    /// Origins `connect-src` allows (empty: `'none'`).
    pub connect: Vec<String>,
}

struct Shared {
    port: u16,
    store: Arc<Store>,
    served: Mutex<HashMap<String, Served>>,
    now_ms: NowMs,
}

/// One listener on 127.0.0.1 serving `/a/<id>/...` for the artifacts it was told to serve,
/// until each one's lifetime ends. Dropping it stops the listener.
pub struct Server {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("port", &self.shared.port)
            .finish_non_exhaustive()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Listen on 127.0.0.1:`port` (0: a port the system picks).
    pub async fn start(port: u16, store: Arc<Store>, now_ms: NowMs) -> Result<Self, ArtifactError> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| ArtifactError::ListenFailed { port, source })?;
        let port = listener
            .local_addr()
            .map_err(|source| ArtifactError::ListenFailed { port, source })?
            .port();
        let shared = Arc::new(Shared {
            port,
            store,
            served: Mutex::new(HashMap::new()),
            now_ms,
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the artifact server stopped");
            }
        });
        Ok(Self { shared, task })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// The URL of artifact `id`'s entry page.
    pub fn url(&self, id: &str) -> String {
        format!("http://127.0.0.1:{}/a/{id}/", self.shared.port)
    }

    fn served(&self) -> std::sync::MutexGuard<'_, HashMap<String, Served>> {
        self.shared
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serve `manifest`'s artifact until `until_ms`, its page reaching only `connect`.
    /// Serving it again replaces its lifetime and origins.
    pub fn serve(&self, manifest: Manifest, until_ms: u64, connect: Vec<String>) {
        let id = manifest.id.clone();
        self.served().insert(
            id,
            Served {
                manifest,
                until_ms,
                connect,
            },
        );
    }

    /// Stop serving `id`; whether it was being served (and its lifetime had not ended).
    pub fn stop(&self, id: &str) -> bool {
        let now = (self.shared.now_ms)();
        self.served().remove(id).is_some_and(|s| s.until_ms > now)
    }

    /// Until when `id` is served, if it is (an ended lifetime is dropped here).
    pub fn serving(&self, id: &str) -> Option<u64> {
        let now = (self.shared.now_ms)();
        let mut served = self.served();
        match served.get(id) {
            Some(s) if s.until_ms > now => Some(s.until_ms),
            Some(_) => {
                served.remove(id);
                None
            }
            None => None,
        }
    }
}

/// The Content-Security-Policy of every response. `sandbox` (without `allow-same-origin`)
/// gives the page an opaque origin: no cookies, no storage, no reading another artifact or
/// anything else on this port. Scripts, styles and images come from the artifact itself (or
/// inline); `connect-src` (fetch, XHR, WebSocket, EventSource, beacons) is `'none'` unless the
/// policy allowed origins. `host` is the checked Host header, named beside `'self'` so the
/// artifact's own files load whichever way the browser computes `'self'` for an opaque origin.
pub fn csp(host: &str, connect: &[String]) -> String {
    let connect = if connect.is_empty() {
        "'none'".to_owned()
    } else {
        connect.join(" ")
    };
    let own = format!("'self' http://{host}");
    format!(
        "sandbox allow-scripts allow-forms; default-src 'none'; \
         script-src {own} 'unsafe-inline'; style-src {own} 'unsafe-inline'; \
         img-src {own} data: blob:; font-src {own} data:; media-src {own} data: blob:; \
         connect-src {connect}; form-action 'none'; base-uri 'none'; worker-src 'none'; \
         frame-src 'none'; object-src 'none'; manifest-src 'none'"
    )
}

/// What a request path asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    /// `/a/<id>`: the entry lives at `/a/<id>/`, so relative links resolve inside it.
    Redirect(&'a str),
    /// `/a/<id>/<name>` (an empty name: the entry).
    File(&'a str, &'a str),
    /// A spelling no artifact file has (escapes, dot segments, backslashes, empty segments).
    Refused(&'static str),
    /// Anything else.
    NotFound,
}

fn route(path: &str) -> Route<'_> {
    let Some(rest) = path.strip_prefix("/a/") else {
        return Route::NotFound;
    };
    // Names never need escaping (see `valid_name`), so an escape is only ever a second
    // spelling: `%2e%2e`, `%2f`, `%00` are refused before anything is decoded.
    if rest.contains('%') {
        return Route::Refused("percent-escapes are refused");
    }
    if rest.contains('\\') {
        return Route::Refused("backslashes are refused");
    }
    let (id, name) = match rest.split_once('/') {
        Some((id, name)) => (id, name),
        None => {
            return if valid_id(rest) {
                Route::Redirect(rest)
            } else {
                Route::NotFound
            };
        }
    };
    if !valid_id(id) {
        return Route::NotFound;
    }
    // A directory (`js/`): no file has that name, and nothing is listed.
    if name
        .strip_suffix('/')
        .is_some_and(|dir| !dir.ends_with('/') && valid_name(dir))
    {
        return Route::NotFound;
    }
    if !name.is_empty() && !valid_name(name) {
        return Route::Refused("dot segments, hidden names and empty segments are refused");
    }
    Route::File(id, name)
}

/// Whether the Host header names this listener: `127.0.0.1:PORT` or `localhost:PORT`. Any
/// other name is refused, so a page on a name that was made to resolve to 127.0.0.1 (DNS
/// rebinding) reads nothing.
fn host_allowed(host: &str, port: u16) -> bool {
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    p == port.to_string() && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost"))
}

/// The Cross-Origin-Resource-Policy of a response of type `media`. Pages (and refusals) are
/// `same-origin`. A page's own scripts, styles and images are `cross-origin`: the CSP's
/// `sandbox` gives the page an opaque origin, so every file it loads is a cross-origin load to
/// the browser, and `same-origin` would block them all (Chromium:
/// `ERR_BLOCKED_BY_RESPONSE.NotSameOrigin`). What keeps another site from embedding them is
/// the Host check and the 128-bit id in their path.
fn resource_policy(media: &str) -> &'static str {
    if media.starts_with("text/html") || media.starts_with("text/plain") {
        "same-origin"
    } else {
        "cross-origin"
    }
}

fn respond(
    status: StatusCode,
    host: &str,
    connect: &[String],
    body: Body,
    media: &str,
) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let pairs: [(header::HeaderName, String); 9] = [
        (header::CONTENT_TYPE, media.to_owned()),
        (header::CONTENT_SECURITY_POLICY, csp(host, connect)),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".into()),
        (header::REFERRER_POLICY, "no-referrer".into()),
        (
            header::HeaderName::from_static("cross-origin-resource-policy"),
            resource_policy(media).into(),
        ),
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin".into(),
        ),
        (header::CACHE_CONTROL, "no-store".into()),
        (header::X_DNS_PREFETCH_CONTROL, "off".into()),
        (
            header::HeaderName::from_static("permissions-policy"),
            "camera=(), microphone=(), geolocation=(), usb=(), serial=(), payment=()".into(),
        ),
    ];
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

fn refuse(status: StatusCode, host: &str, why: &str) -> Response {
    respond(
        status,
        host,
        &[],
        Body::from(format!("{why}\n")),
        "text/plain; charset=utf-8",
    )
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !host_allowed(&host, shared.port) {
        // The refused name is not echoed into the CSP.
        let own = format!("127.0.0.1:{}", shared.port);
        return refuse(StatusCode::FORBIDDEN, &own, "this Host is refused");
    }
    if request.uri().authority().is_some() {
        return refuse(
            StatusCode::BAD_REQUEST,
            &host,
            "absolute-form requests are refused",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut refused = refuse(StatusCode::METHOD_NOT_ALLOWED, &host, "GET and HEAD only");
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return refused;
    }
    let path = request.uri().path().to_owned();
    let (id, name) = match route(&path) {
        Route::NotFound => return refuse(StatusCode::NOT_FOUND, &host, "not found"),
        Route::Refused(why) => return refuse(StatusCode::BAD_REQUEST, &host, why),
        Route::Redirect(id) => {
            let mut moved = refuse(StatusCode::PERMANENT_REDIRECT, &host, "see the location");
            if let Ok(to) = HeaderValue::from_str(&format!("/a/{id}/")) {
                moved.headers_mut().insert(header::LOCATION, to);
            }
            return moved;
        }
        Route::File(id, name) => (id.to_owned(), name.to_owned()),
    };
    let now = (shared.now_ms)();
    let served = {
        let mut served = shared
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match served.get(&id) {
            Some(s) if s.until_ms > now => Some(s.clone()),
            Some(_) => {
                served.remove(&id);
                None
            }
            None => None,
        }
    };
    // An artifact that is not served (never, stopped, or its lifetime over) and a name it
    // does not hold (a directory included: nothing is listed) look the same.
    let Some(served) = served else {
        return refuse(StatusCode::NOT_FOUND, &host, "not found");
    };
    let name = if name.is_empty() {
        served.manifest.entry.clone()
    } else {
        name
    };
    let Some(entry) = served.manifest.file(&name).cloned() else {
        return refuse(StatusCode::NOT_FOUND, &host, "not found");
    };
    let store = shared.store.clone();
    let read =
        tokio::task::spawn_blocking(move || store.read_entry(&id, &entry).map(|b| (b, entry)))
            .await;
    match read {
        Ok(Ok((bytes, entry))) => respond(
            StatusCode::OK,
            &host,
            &served.connect,
            Body::from(bytes),
            &entry.media_type,
        ),
        Ok(Err(e)) => {
            tracing::warn!(code = e.code(), error = %e, "an artifact file could not be served");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, &host, e.code())
        }
        Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &host, "the read failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn routes_have_one_spelling() {
        assert_eq!(route(&format!("/a/{ID}")), Route::Redirect(ID));
        assert_eq!(route(&format!("/a/{ID}/")), Route::File(ID, ""));
        assert_eq!(
            route(&format!("/a/{ID}/js/a.js")),
            Route::File(ID, "js/a.js")
        );
        for refused in [
            "/../x",
            "/%2e%2e/x",
            "/a%2fb",
            "/js/../../x",
            "/./a",
            "/a//b",
            "/a\\b",
            "/.git/x",
            "/%00",
        ] {
            assert!(
                matches!(route(&format!("/a/{ID}{refused}")), Route::Refused(_)),
                "{refused}"
            );
        }
        assert_eq!(route("/a/nothex/x"), Route::NotFound);
        assert_eq!(route("/etc/passwd"), Route::NotFound);
        assert_eq!(route("/"), Route::NotFound);
    }

    #[test]
    fn only_this_listener_s_names_pass_the_host_check() {
        assert!(host_allowed("127.0.0.1:8080", 8080));
        assert!(host_allowed("localhost:8080", 8080));
        assert!(host_allowed("LocalHost:8080", 8080));
        for bad in [
            "127.0.0.1:8081",
            "127.0.0.1",
            "evil.example:8080",
            "127.0.0.1.nip.io:8080",
            "localhost.evil:8080",
            "[::1]:8080",
            "",
        ] {
            assert!(!host_allowed(bad, 8080), "{bad}");
        }
    }

    #[test]
    fn the_csp_sandboxes_and_allows_no_connections_by_default() {
        let c = csp("127.0.0.1:1", &[]);
        assert!(c.starts_with("sandbox allow-scripts allow-forms;"));
        assert!(!c.contains("allow-same-origin"));
        assert!(c.contains("connect-src 'none'"));
        assert!(c.contains("default-src 'none'"));
        let widened = csp("127.0.0.1:1", &["https://api.example.com".into()]);
        assert!(widened.contains("connect-src https://api.example.com;"));
    }
}
