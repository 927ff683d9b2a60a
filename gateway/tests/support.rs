//! Fixtures: a work tree outside `/tmp` (the sandbox's `/tmp` is private), the servers
//! `scripts/test` prepared, a sandbox, and an upstream that records what it is sent.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aido_gateway::{BoxFuture, CallToolResult, ElicitRequestParams, ElicitResult, Progress};

/// The variable naming the directory `scripts/test` installs the servers into.
pub const DOWNSTREAMS_VAR: &str = "AIDO_TEST_DOWNSTREAMS";

pub struct Fixture {
    _base: tempfile::TempDir,
    /// The downstream's only writable root.
    pub work: PathBuf,
    /// A directory outside it.
    pub outside: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        // A checkout under /tmp (a CI clone) has its target dir there too, which the
        // sandbox's private /tmp would hide: then the fixtures go under /var/tmp.
        let mut parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if parent.starts_with("/tmp") {
            parent = PathBuf::from("/var/tmp/aido-gateway-tests");
            eprintln!(
                "fixtures under {} (the target dir is under /tmp)",
                parent.display()
            );
        }
        std::fs::create_dir_all(&parent).unwrap();
        let base = tempfile::Builder::new()
            .prefix("gateway-")
            .tempdir_in(&parent)
            .unwrap();
        let path = base.path().canonicalize().unwrap();
        let (work, outside) = (path.join("work"), path.join("outside"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        Fixture {
            _base: base,
            work,
            outside,
        }
    }
}

/// The sandbox, re-executing this test binary as its child.
pub fn sandbox() -> aido_sandbox::Sandbox {
    aido_sandbox::Sandbox::new(std::env::current_exe().unwrap())
}

/// `relative` under the prepared servers' directory, or `None` (through
/// `aido_testkit::lacking`) when it is not there.
pub fn downstream(what: &str, relative: &str) -> Option<PathBuf> {
    let found = match std::env::var_os(DOWNSTREAMS_VAR) {
        None => Err(format!(
            "{DOWNSTREAMS_VAR} is not set (scripts/test sets it)"
        )),
        Some(dir) => {
            let path = Path::new(&dir).join(relative);
            if path.starts_with("/tmp") {
                Err(format!(
                    "{} is under /tmp, which the sandbox hides",
                    path.display()
                ))
            } else if path.exists() {
                Ok(path)
            } else {
                Err(format!("{} is missing (run scripts/test)", path.display()))
            }
        }
    };
    aido_testkit::lacking(what, found)
}

/// server-everything's entry point.
pub fn everything_script() -> Option<PathBuf> {
    downstream(
        "@modelcontextprotocol/server-everything",
        "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    )
}

/// The text of a result's content, joined.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|content| content.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An upstream that records progress and elicitations, and answers elicitations with
/// `answer` (accepting with it as content), or declines without one.
#[derive(Default)]
pub struct Recorder {
    pub progress: Mutex<Vec<Progress>>,
    pub elicitations: Mutex<Vec<ElicitRequestParams>>,
    pub answer: Option<serde_json::Value>,
}

impl Recorder {
    pub fn answering(answer: serde_json::Value) -> Arc<Self> {
        Arc::new(Recorder {
            answer: Some(answer),
            ..Recorder::default()
        })
    }

    pub fn progress_count(&self) -> usize {
        self.progress.lock().unwrap().len()
    }
}

impl aido_gateway::Upstream for Recorder {
    fn progress(&self, progress: Progress) -> BoxFuture<'_, ()> {
        self.progress.lock().unwrap().push(progress);
        Box::pin(std::future::ready(()))
    }

    fn elicit(&self, _server: &str, request: ElicitRequestParams) -> BoxFuture<'_, ElicitResult> {
        self.elicitations.lock().unwrap().push(request);
        let result = match &self.answer {
            Some(answer) => ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(answer.clone()),
            None => aido_gateway::declined(),
        };
        Box::pin(std::future::ready(result))
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes; whether it held.
pub async fn wait_until(mut condition: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

/// A JSON object, for arguments.
pub fn object(value: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    value.as_object().cloned()
}
