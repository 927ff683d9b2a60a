//! The live view and control channel of a running `aido mcp`: an HTTP server on 127.0.0.1
//! (an ephemeral port and a random token, written to `AIDO_HOME/vm/control/PID.json` with mode
//! 0600) that shows the agent's machines to a person, refreshed live with the pointer drawn,
//! and that `aido vm ...` commands use. Looking (screens, pointer, list) is not an action of the
//! agent and is not journaled; a person's input (type, click, snapshots) runs as actions of its
//! own journal session, client `aido vm (person)`, through the same policy as the agent's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use anyhow::{Context, Result};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::vm_client::{ControlFile, control_dir};

#[derive(Clone)]
struct AppState {
    runtime: Arc<Runtime>,
    /// The person's journal session, opened at the first action (looking opens none).
    person: Arc<tokio::sync::OnceCell<Session>>,
    token: Arc<String>,
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn authorized(state: &AppState, headers: &HeaderMap, query: &TokenQuery) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    bearer.or(query.token.as_deref()) == Some(state.token.as_str())
}

/// A coded error response.
fn coded(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({"code": code, "message": message}))).into_response()
}

fn refused() -> Response {
    coded(
        StatusCode::UNAUTHORIZED,
        "control_unauthorized",
        "a valid token is required",
    )
}

/// Start the server for `runtime`; returns the control file's path (removed by the caller).
pub async fn start(runtime: Arc<Runtime>, home: &Path) -> Result<PathBuf> {
    let mut secret = [0u8; 16];
    runtime.clock().random(&mut secret);
    let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the live view")?;
    let url = format!("http://{}", listener.local_addr()?);
    let dir = control_dir(home);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{}.json", std::process::id()));
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)?;
        f.write_all(
            serde_json::to_string(&ControlFile {
                url: url.clone(),
                token: token.clone(),
                pid: std::process::id(),
            })?
            .as_bytes(),
        )?;
    }
    let state = AppState {
        runtime,
        person: Arc::new(tokio::sync::OnceCell::new()),
        token: Arc::new(token),
    };
    let app = Router::new()
        .route("/", get(page))
        .route("/api/vm", get(list))
        .route("/api/vm/{name}/screen.png", get(screen))
        .route("/api/vm/{name}/cursor", get(cursor))
        .route("/api/call/{primitive}", post(call))
        .with_state(state);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the live view stopped");
        }
    });
    tracing::info!(%url, "live view");
    Ok(file)
}

async fn list(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&s, &headers, &q) {
        return refused();
    }
    Json(json!({"machines": s.runtime.vm_names().await})).into_response()
}

async fn screen(
    State(s): State<AppState>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&s, &headers, &q) {
        return refused();
    }
    match s.runtime.vm_peek(&name).await {
        Ok((png, _)) => (
            [
                (header::CONTENT_TYPE, "image/png"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            png,
        )
            .into_response(),
        Err(f) => coded(StatusCode::NOT_FOUND, &f.code, &f.message),
    }
}

async fn cursor(
    State(s): State<AppState>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&s, &headers, &q) {
        return refused();
    }
    match s.runtime.vm_peek(&name).await {
        Ok((_, (x, y))) => Json(json!({"x": x, "y": y})).into_response(),
        Err(f) => coded(StatusCode::NOT_FOUND, &f.code, &f.message),
    }
}

/// A person's action on a machine: any vm_* primitive, judged and journaled like the agent's.
async fn call(
    State(s): State<AppState>,
    UrlPath(primitive): UrlPath<String>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
    Json(args): Json<Value>,
) -> Response {
    if !authorized(&s, &headers, &q) {
        return refused();
    }
    if Action::body_of(&primitive) != Some(aido_actions::Body::Machine) {
        return coded(
            StatusCode::BAD_REQUEST,
            "control_not_a_vm_primitive",
            "the control channel runs machine primitives only",
        );
    }
    let action = match Action::from_tool_call(&primitive, args) {
        Ok(a) => a,
        Err(e) => {
            return coded(StatusCode::BAD_REQUEST, e.code(), &e.to_string());
        }
    };
    let runtime = s.runtime.clone();
    let person = match s
        .person
        .get_or_try_init(|| async { runtime.open_session(Some("aido vm (person)".into())).await })
        .await
    {
        Ok(p) => p,
        Err(e) => {
            return coded(StatusCode::INTERNAL_SERVER_ERROR, e.code(), &e.to_string());
        }
    };
    match person.run(action, Hooks::default()).await {
        Ok(ran) => {
            Json(json!({"seq": ran.seq, "output": ran.outcome.output, "text": ran.outcome.text}))
                .into_response()
        }
        Err(e) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"seq": e.seq, "code": e.failure.code, "message": e.failure.message})),
        )
            .into_response(),
    }
}

async fn page(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&s, &headers, &q) {
        return refused();
    }
    let token = s.token.as_str();
    Html(format!(
        r#"<!doctype html><meta charset="utf-8"><title>aido live view</title>
<style>body{{font:14px system-ui;background:#111;color:#ddd;margin:1em}}figure{{position:relative;display:inline-block;margin:0 1em 1em 0}}
img{{border:1px solid #444;max-width:100%;image-rendering:pixelated}}.cursor{{position:absolute;width:12px;height:12px;margin:-6px;border:2px solid #f33;border-radius:50%;pointer-events:none}}
figcaption{{margin:.3em 0}}</style>
<h1>aido — the agent's machines</h1><p id="none">No machine is running.</p><div id="machines"></div>
<script>
const token = {token:?};
const q = "?token=" + token;
async function tick() {{
  const r = await fetch("/api/vm" + q); const {{machines}} = await r.json();
  document.getElementById("none").hidden = machines.length > 0;
  const box = document.getElementById("machines");
  for (const name of machines) {{
    let fig = document.getElementById("vm-" + name);
    if (!fig) {{
      fig = document.createElement("figure"); fig.id = "vm-" + name;
      fig.innerHTML = `<figcaption>${{name}}</figcaption><img><div class="cursor"></div>`;
      box.appendChild(fig);
    }}
    const img = fig.querySelector("img");
    await new Promise(ok => {{ img.onload = img.onerror = ok; img.src = `/api/vm/${{name}}/screen.png${{q}}&t=${{Date.now()}}`; }});
    const c = await (await fetch(`/api/vm/${{name}}/cursor${{q}}`)).json();
    const scale = img.clientWidth / (img.naturalWidth || 1);
    const dot = fig.querySelector(".cursor");
    dot.style.left = (c.x * scale) + "px"; dot.style.top = (24 + c.y * scale) + "px";
  }}
  for (const fig of [...box.children]) if (!machines.includes(fig.id.slice(3))) fig.remove();
  setTimeout(tick, 500);
}}
tick();
</script>"#
    ))
    .into_response()
}
