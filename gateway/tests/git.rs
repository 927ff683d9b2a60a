//! `mcp-server-git` (PyPI) as a downstream, in the sandbox, confined to one repository.

use std::path::Path;
use std::sync::Arc;

use aido_gateway::{Declining, Downstream, DownstreamConfig, ToolClass};
use serde_json::json;

use crate::support::{Fixture, downstream, object, sandbox, text};

/// A repository with one commit at `path` (made on the host, by the test).
fn repository(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=aido", "-c", "user.email=aido@example.com"])
            .args(args)
            .current_dir(path)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(path.join("README"), "hello\n").unwrap();
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "first"]);
    std::fs::write(path.join("new.txt"), "untracked\n").unwrap();
}

pub async fn status_inside_and_outside() {
    let Some(server) = downstream("mcp-server-git", "venv/bin/mcp-server-git") else {
        return;
    };
    let fixture = Fixture::new();
    let inside = fixture.work.join("repo");
    let outside = fixture.outside.join("repo");
    repository(&inside);
    repository(&outside);
    let mut config = DownstreamConfig::stdio(
        "git",
        &server.display().to_string(),
        ["--repository".to_owned(), inside.display().to_string()],
    );
    config.writable = vec![fixture.work.clone()];
    // The outside repository is also hidden from the server by the sandbox.
    config.deny = vec![fixture.outside.display().to_string()];
    config.tools = Some(vec![
        "git_status".into(),
        "git_add".into(),
        "git_commit".into(),
    ]);
    for (name, value) in [
        ("GIT_AUTHOR_NAME", "aido"),
        ("GIT_AUTHOR_EMAIL", "aido@example.com"),
        ("GIT_COMMITTER_NAME", "aido"),
        ("GIT_COMMITTER_EMAIL", "aido@example.com"),
    ] {
        config.env.insert(name.into(), value.into());
    }
    let git = Downstream::start(config, sandbox(), None).await;
    let git = git.unwrap_or_else(|error| panic!("start ({}): {error}", error.code()));
    let tools = git.tools().await.unwrap();
    let status = tools
        .iter()
        .find(|tool| tool.name == "git__git_status")
        .unwrap();
    assert_eq!(status.class, ToolClass::Read);
    let commit = tools
        .iter()
        .find(|tool| tool.name == "git__git_commit")
        .unwrap();
    assert_ne!(commit.class, ToolClass::Read);

    let result = git
        .call(
            "git__git_status",
            object(json!({"repo_path": inside.display().to_string()})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    let status = text(&result);
    assert!(status.contains("new.txt"), "{status}");

    let error = git
        .call(
            "git__git_status",
            object(json!({"repo_path": outside.display().to_string()})),
            Arc::new(Declining),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.code(),
            "downstream_tool_failed" | "downstream_refused"
        ),
        "{error}"
    );
    // The server's own words come back (this reads the downstream's text, not ours).
    let message = aido_codes::Failure::from(error).message;
    assert!(message.contains("outside"), "{message}");

    // Inside the walls it writes: a commit lands in the host's repository.
    let repo_path = inside.display().to_string();
    git.call(
        "git__git_add",
        object(json!({"repo_path": repo_path, "files": ["new.txt"]})),
        Arc::new(Declining),
    )
    .await
    .unwrap();
    git.call(
        "git__git_commit",
        object(json!({"repo_path": repo_path, "message": "committed through the gateway"})),
        Arc::new(Declining),
    )
    .await
    .unwrap();
    let log = std::process::Command::new("git")
        .args(["log", "-1", "--format=%s"])
        .current_dir(&inside)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "committed through the gateway"
    );
}
