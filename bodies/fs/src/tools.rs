//! `diff` and `render_template` in the filesystem body. Every file is judged by the walls and
//! deny globs before it is opened (both sides of a diff before either is read; each include
//! of a template as MiniJinja asks for it), read through the checked root, and recorded; the
//! result is `aido_walk::tools` of what was read, which is what playback calls too.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aido_actions::tools::{Diff, RenderTemplate};
use aido_actions::{AccessKind, Input};
use aido_policy::SessionContext;
use aido_walk::Executed;
use aido_walk::tools::diff::{self, Side};
use aido_walk::tools::template::{self, INLINE_NAME, Load, Loader};
use serde_json::json;

use super::error::FsError;
use super::ops::{Ctx, finish};
use super::render::blob_name;
use super::walls::Walls;

/// Who answers, in the recorded input, what a template's loader found.
const TEMPLATES_FROM: &str = aido_walk::tools::template::LOADS_FROM;

pub fn diff(cx: &Ctx, a: &Diff) -> Result<Executed, FsError> {
    diff::check(a)?;
    // Both paths are judged before either is opened.
    let first = cx.check(&a.path, AccessKind::Read)?;
    let second = match &a.other_path {
        Some(p) => Some(cx.check(p, AccessKind::Read)?),
        None => None,
    };
    let mut exec = Executed::default();
    let old = cx.read(&first, &mut exec)?;
    let (label, new) = match &second {
        Some(target) => (target.shown(), cx.read(target, &mut exec)?),
        None => (
            "text".to_owned(),
            a.text.clone().unwrap_or_default().into_bytes(),
        ),
    };
    let outcome = diff::diff(
        a,
        Side {
            label: &first.shown(),
            bytes: &old,
        },
        Side {
            label: &label,
            bytes: &new,
        },
    )?;
    Ok(finish(exec, outcome))
}

/// One load as it is recorded: the name asked for, and the file it came from (or nothing).
struct Loaded {
    name: String,
    found: Option<(String, Vec<u8>)>,
}

pub fn render_template(cx: &Ctx, a: &RenderTemplate) -> Result<Executed, FsError> {
    template::check(a)?;
    let mut exec = Executed::default();
    let (name, source, base) = match (&a.path, &a.template) {
        (Some(path), _) => {
            let target = cx.check(path, AccessKind::Read)?;
            let bytes = cx.read(&target, &mut exec)?;
            let source = String::from_utf8(bytes).map_err(|_| FsError::Binary {
                path: target.shown(),
            })?;
            let base = target
                .resolved
                .parent()
                .map_or_else(|| cx.session.cwd.clone(), Path::to_owned);
            (target.shown(), source, base)
        }
        (None, source) => (
            INLINE_NAME.to_owned(),
            source.clone().unwrap_or_default(),
            cx.session.cwd.clone(),
        ),
    };
    let loads = Arc::new(Mutex::new(Vec::<Loaded>::new()));
    let loader = walled_loader(
        cx.walls.policy.clone(),
        cx.session.clone(),
        base,
        cx.limits.read_bytes_max,
        loads.clone(),
    );
    let outcome = template::render(a, &name, &source, loader)?;
    let loads = std::mem::take(&mut *loads.lock().map_err(|_| FsError::Cancelled)?);
    let mut listed = Vec::new();
    for load in loads {
        match load.found {
            Some((path, bytes)) => {
                let blob = blob_name(&bytes);
                listed.push(json!({"name": load.name, "path": path, "blob": blob}));
                exec.blobs.push((blob, bytes));
            }
            None => listed.push(json!({"name": load.name, "missing": true})),
        }
    }
    exec.outcome.inputs.push(Input::Answer {
        from: TEMPLATES_FROM.into(),
        value: json!({"loads": listed}),
    });
    Ok(finish(exec, outcome))
}

/// A loader that judges each name (relative to `base`) by the walls and deny globs, opens it
/// through the checked root, and keeps what it read for the journal.
fn walled_loader(
    policy: Arc<aido_policy::PolicyEngine>,
    session: SessionContext,
    base: PathBuf,
    read_bytes_max: u64,
    loads: Arc<Mutex<Vec<Loaded>>>,
) -> Loader {
    let walls = Walls::new(policy);
    let max = read_bytes_max.min(RenderTemplate::SOURCE_BYTES_MAX as u64);
    Arc::new(move |name: &str| {
        let given = base.join(name);
        let load = walls
            .check(&given.display().to_string(), AccessKind::Read, &session)
            .and_then(|target| {
                let bytes = walls.read_all(&target, &session, max)?;
                let source = String::from_utf8(bytes.clone()).map_err(|_| FsError::Binary {
                    path: target.shown(),
                })?;
                Ok((target.shown(), bytes, source))
            });
        let (load, kept) = match load {
            Ok((path, bytes, source)) => (
                Load::Found {
                    path: path.clone(),
                    source,
                },
                Some((path, bytes)),
            ),
            Err(FsError::NotFound { .. }) => (Load::Missing, None),
            Err(e) => {
                return Load::Refused {
                    code: e.code().to_owned(),
                    reason: e.to_string(),
                };
            }
        };
        if let Ok(mut loads) = loads.lock() {
            loads.push(Loaded {
                name: name.to_owned(),
                found: kept,
            });
        }
        load
    })
}

/// The end of a file, as read_logs reads it.
pub struct Tail {
    /// The resolved path.
    pub path: String,
    /// Whole lines from the end of the file.
    pub bytes: Vec<u8>,
    /// The file holds more before them.
    pub more_before: bool,
}

/// Read at most `window` bytes from the end of `path` (judged by the walls and deny globs
/// before it is opened), starting at a line: a partial first line is dropped.
pub fn tail(
    walls: &Walls,
    session: &SessionContext,
    path: &str,
    window: u64,
) -> Result<Tail, FsError> {
    let target = walls.check(path, AccessKind::Read, session)?;
    let shown = target.shown();
    let mut file = walls.open_read(&target, session)?;
    let size = file
        .metadata()
        .map_err(|e| FsError::io("stat", &shown, e))?
        .len();
    let start = size.saturating_sub(window);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| FsError::io("seek", &shown, e))?;
    let mut bytes = Vec::with_capacity((size - start) as usize);
    // take() bounds a file that grows while it is read.
    file.take(window)
        .read_to_end(&mut bytes)
        .map_err(|e| FsError::io("read", &shown, e))?;
    Ok(Tail {
        path: shown,
        bytes: from_line_start(bytes, start > 0),
        more_before: start > 0,
    })
}

/// Drop a partial first line (the window began inside it).
pub fn from_line_start(mut bytes: Vec<u8>, cut: bool) -> Vec<u8> {
    if cut {
        let first = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..first);
    }
    bytes
}
