//! The artifact body: artifact_create, artifact_list, artifact_serve, artifact_save,
//! artifact_stop and artifact_destroy on aido-artifacts, run by the executor (like the human
//! and script groups: the store is a directory and the listener a task, neither needs a
//! mailbox of its own).
//!
//! - The store is `AIDO_HOME/artifacts` (shared by every process of that home); the listener
//!   is one per runtime, on 127.0.0.1, started by the first artifact_serve (port
//!   `[artifacts] port`, 0 for any), and serves only what this runtime was asked to serve.
//! - A file copied in (`from`) is read through the filesystem body (`FsMsg::Tail`, judged
//!   by the walls and deny globs, bounded by the file cap), so the artifact holds only what
//!   read_file could have read. Contents are kept in the journal as blobs by blake3.
//! - An id is 16 bytes of the OS's randomness; the id, the clock, the manifest, the URL and a
//!   save's writes are the answer (`Input::Answer { from: "artifact" }`), and the result is
//!   `aido_walk::artifact::render` of it, live and in playback.
//! - artifact_save hands the filesystem body the files as changes to apply
//!   (`FsMsg::Apply`: each path judged again, written atomically with what it replaced kept,
//!   all or nothing), so a rewind undoes a save like any write.

use std::sync::Arc;

use aido_actions::artifact::{ArtifactCreate, ArtifactSave, ArtifactServe};
use aido_actions::fs::Encoding;
use aido_actions::{AccessKind, ArtifactAction, Failure, Input};
use aido_artifacts::{ArtifactError, Limits, Manifest, Server, Store};
use aido_policy::FsResolver;
use aido_walk::Executed;
use aido_walk::artifact::{ANSWER_FROM, render};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::call::Call;
use crate::fs::FsMsg;
use crate::fs::changeset::{CommandChange, Contents};
use crate::shared::Shared;

pub use place::ARTIFACTS_DIR;
pub(crate) use place::Artifacts;

/// The store's place and listener the shared state holds.
pub(crate) use aido_context::artifact::place;

/// Longest title, in bytes.
const TITLE_BYTES_MAX: usize = 200;

/// Why an artifact call failed before or around the store.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactBodyError {
    /// The store or the listener refused (see aido-artifacts' codes).
    #[error("{0}")]
    Store(#[from] ArtifactError),
    /// A file names both `content` and `from`, or neither.
    #[error("the artifact file {name:?} must give exactly one of content and from")]
    FileSourceInvalid {
        /// Its name.
        name: String,
    },
    /// Inline contents that do not decode (base64), or a title over 200 bytes.
    #[error("{what} is refused: {why}")]
    ContentInvalid {
        /// What.
        what: String,
        /// Why.
        why: String,
    },
    /// A lifetime of 0 or over `[artifacts] ttl_ms_max`.
    #[error("ttl_ms {ttl_ms} is refused: it must be 1 to {max}")]
    TtlInvalid {
        /// What was asked.
        ttl_ms: u64,
        /// The cap.
        max: u64,
    },
    /// A connect origin the net allowlist refuses (judged again here, after the policy).
    #[error("{0}")]
    Connect(aido_net::NetError),
}

aido_actions::coded!(ArtifactBodyError {
    @delegate {
        Self::Store(e) => e.code(),
        Self::Connect(e) => e.code(),
    }
    FileSourceInvalid => "artifact_file_source_invalid",
    ContentInvalid => "artifact_content_invalid",
    TtlInvalid => "artifact_ttl_invalid",
});

fn limits(shared: &Shared) -> Limits {
    let c = &shared.policy.config().artifacts;
    Limits {
        file_bytes_max: c.file_bytes_max,
        artifact_bytes_max: c.artifact_bytes_max,
        total_bytes_max: c.total_bytes_max,
        files_max: c.files_max,
        artifacts_max: c.artifacts_max,
    }
}

/// Run `f` on the store, opened on the blocking pool.
async fn store<T: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce(&Store) -> Result<T, ArtifactError> + Send + 'static,
) -> Result<T, Failure> {
    let (dir, limits) = (shared.artifacts.dir.clone(), limits(shared));
    tokio::task::spawn_blocking(move || Store::open(&dir, limits).and_then(|s| f(&s)))
        .await
        .map_err(|e| {
            Failure::from(ArtifactBodyError::Store(ArtifactError::Corrupt {
                id: String::new(),
                why: format!("the store's task failed: {e}"),
            }))
        })?
        .map_err(|e| ArtifactBodyError::Store(e).into())
}

/// Run an artifact primitive.
pub(crate) async fn run(call: &Call<'_>, action: ArtifactAction) -> Result<Executed, Failure> {
    let mut blobs = Vec::new();
    let answer = match &action {
        ArtifactAction::ArtifactCreate(a) => create(call, a, &mut blobs).await?,
        ArtifactAction::ArtifactList(_) => list(call).await?,
        ArtifactAction::ArtifactServe(a) => serve(call, a).await?,
        ArtifactAction::ArtifactSave(a) => save(call, a).await?,
        ArtifactAction::ArtifactStop(a) => {
            let was_served = match call.shared.artifacts.server.lock().await.as_ref() {
                Some(server) => server.stop(&a.id),
                None => false,
            };
            let id = a.id.clone();
            store(&call.shared, move |s| s.get(&id)).await?;
            json!({"id": a.id, "was_served": was_served})
        }
        ArtifactAction::ArtifactDestroy(a) => {
            let was_served = match call.shared.artifacts.server.lock().await.as_ref() {
                Some(server) => server.stop(&a.id),
                None => false,
            };
            let id = a.id.clone();
            let gone = store(&call.shared, move |s| s.destroy(&id)).await?;
            json!({"id": a.id, "was_served": was_served, "files": gone.files.len(),
                   "bytes": gone.bytes})
        }
    };
    let mut done = Executed::new(render(&action, &answer));
    done.outcome.inputs.push(Input::Answer {
        from: ANSWER_FROM.into(),
        value: answer,
    });
    done.blobs = blobs;
    Ok(done)
}

async fn create(
    call: &Call<'_>,
    a: &ArtifactCreate,
    blobs: &mut Vec<(String, Vec<u8>)>,
) -> Result<Value, Failure> {
    let shared = &call.shared;
    let title = a.title.clone().unwrap_or_default();
    if title.len() > TITLE_BYTES_MAX {
        return Err(ArtifactBodyError::ContentInvalid {
            what: "the title".into(),
            why: format!("it is over {TITLE_BYTES_MAX} bytes"),
        }
        .into());
    }
    let cap = limits(shared).file_bytes_max;
    let mut files = Vec::with_capacity(a.files.len());
    for file in &a.files {
        let bytes = match (&file.content, &file.from) {
            (Some(content), None) => match file.encoding {
                Encoding::Utf8 => content.as_bytes().to_vec(),
                Encoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(content)
                    .map_err(|e| ArtifactBodyError::ContentInvalid {
                        what: format!("the content of {:?}", file.name),
                        why: format!("it is not base64: {e}"),
                    })?,
            },
            (None, Some(from)) => read_in(call, from, cap).await?,
            _ => {
                return Err(ArtifactBodyError::FileSourceInvalid {
                    name: file.name.clone(),
                }
                .into());
            }
        };
        files.push((file.name.clone(), bytes));
    }
    let mut id = [0u8; 16];
    shared.clock.random(&mut id);
    let id = hex::encode(id);
    let created_ms = shared.clock.now_ms();
    // The contents go to the journal too, named by the blake3 the manifest lists.
    blobs.extend(
        files
            .iter()
            .map(|(_, b)| (blake3::hash(b).to_hex().to_string(), b.clone())),
    );
    let entry = a.entry.clone();
    let manifest = store(shared, move |s| {
        s.create(&id, &title, entry.as_deref(), files, created_ms)
    })
    .await?;
    Ok(json!({"manifest": manifest}))
}

/// Read a file the walls allow, whole, through the filesystem body; over `cap` is refused.
async fn read_in(call: &Call<'_>, from: &str, cap: u64) -> Result<Vec<u8>, Failure> {
    let timeout = call.shared.action_timeout();
    let (path, session) = (from.to_owned(), call.ctx.clone());
    let tail: crate::fs::tools::Tail = call
        .shared
        .bodies
        .fs
        .ask(timeout, |reply| FsMsg::Tail {
            path,
            window: cap.saturating_add(1),
            session,
            reply,
        })
        .await?;
    if tail.more_before || tail.bytes.len() as u64 > cap {
        return Err(ArtifactBodyError::Store(ArtifactError::TooLarge {
            what: "a file",
            size: cap.saturating_add(1),
            max: cap,
        })
        .into());
    }
    Ok(tail.bytes)
}

/// Each artifact, with its URL and lifetime when this runtime serves it.
async fn list(call: &Call<'_>) -> Result<Value, Failure> {
    let all = store(&call.shared, |s| s.list()).await?;
    let server = call.shared.artifacts.server.lock().await;
    let listed: Vec<Value> = all
        .into_iter()
        .map(|m| {
            let mut shown = json!(m);
            if let Some(server) = server.as_ref()
                && let Some(until) = server.serving(&m.id)
            {
                shown["url"] = json!(server.url(&m.id));
                shown["served_until_ms"] = json!(until);
            }
            shown
        })
        .collect();
    Ok(json!({"artifacts": listed}))
}

async fn serve(call: &Call<'_>, a: &ArtifactServe) -> Result<Value, Failure> {
    let shared = &call.shared;
    let config = &shared.policy.config().artifacts;
    let ttl_ms = a.ttl_ms.unwrap_or(config.ttl_ms_default);
    if ttl_ms == 0 || ttl_ms > config.ttl_ms_max {
        return Err(ArtifactBodyError::TtlInvalid {
            ttl_ms,
            max: config.ttl_ms_max,
        }
        .into());
    }
    // Judged again (the policy judged them), and written as the browser serializes them.
    let mut connect = Vec::with_capacity(a.connect.len());
    for origin in &a.connect {
        let (origin, _) = aido_policy::net::connect_origin(shared.policy.net(), origin)
            .map_err(ArtifactBodyError::Connect)?;
        connect.push(origin);
    }
    let id = a.id.clone();
    let manifest: Manifest = store(shared, move |s| s.get(&id)).await?;
    let mut server = shared.artifacts.server.lock().await;
    if server.is_none() {
        let dir = shared.artifacts.dir.clone();
        let opened = Arc::new(Store::open(&dir, limits(shared)).map_err(ArtifactBodyError::Store)?);
        let clock = shared.clock.clone();
        let started = Server::start(config.port, opened, Arc::new(move || clock.now_ms()))
            .await
            .map_err(ArtifactBodyError::Store)?;
        tracing::info!(port = started.port(), "artifacts are served on 127.0.0.1");
        *server = Some(started);
    }
    let Some(server) = server.as_ref() else {
        return Err(crate::error::RuntimeError::Internal {
            why: "the artifact server is gone".into(),
        }
        .into());
    };
    let until_ms = shared.clock.now_ms().saturating_add(ttl_ms);
    let entry = manifest.entry.clone();
    server.serve(manifest, until_ms, connect.clone());
    Ok(json!({
        "id": a.id,
        "url": server.url(&a.id),
        "port": server.port(),
        "entry": entry,
        "ttl_ms": ttl_ms,
        "until_ms": until_ms,
        "connect": connect,
    }))
}

async fn save(call: &Call<'_>, a: &ArtifactSave) -> Result<Value, Failure> {
    let shared = &call.shared;
    let to = shared
        .policy
        .check_path(&a.to, AccessKind::Write, call.ctx, &FsResolver)
        .map_err(|e| Failure::new(e.code().code(), e.to_string()))?
        .resolved;
    let (id, dir) = (a.id.clone(), shared.artifacts.dir.clone());
    // Every file checked against its blake3 before the filesystem body copies it.
    let manifest = store(shared, move |s| {
        let manifest = s.get(&id)?;
        for entry in &manifest.files {
            s.read_entry(&id, entry)?;
        }
        Ok(manifest)
    })
    .await?;
    let files_dir = dir.join(&a.id).join("files");
    let mut changes = vec![CommandChange::Dir {
        path: to.clone(),
        mode: 0o755,
        mtime_ns: None,
        layer: None,
    }];
    let mut dirs = std::collections::BTreeSet::new();
    for entry in &manifest.files {
        let mut parent = std::path::Path::new(&entry.name).parent();
        let mut chain = Vec::new();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            chain.push(p.to_owned());
            parent = p.parent();
        }
        for p in chain.into_iter().rev() {
            if dirs.insert(p.clone()) {
                changes.push(CommandChange::Dir {
                    path: to.join(p),
                    mode: 0o755,
                    mtime_ns: None,
                    layer: None,
                });
            }
        }
    }
    for entry in &manifest.files {
        changes.push(CommandChange::File {
            path: to.join(&entry.name),
            mode: 0o644,
            mtime_ns: None,
            contents: Contents::File(files_dir.join(&entry.name)),
        });
    }
    let max = shared.policy.config().processes.change_bytes_max;
    let applied =
        crate::change_sets::apply(shared, call.session, call.proposal, call.ctx, changes, max)
            .await?;
    let files: Vec<Value> = manifest
        .files
        .iter()
        .map(|f| {
            json!({"name": f.name, "path": to.join(&f.name).display().to_string(),
                   "bytes": f.bytes, "blake3": f.blake3})
        })
        .collect();
    Ok(json!({
        "id": a.id,
        "to": to.display().to_string(),
        "files": files,
        "applied": applied.shown["applied"],
        "effects": applied.effects,
    }))
}
