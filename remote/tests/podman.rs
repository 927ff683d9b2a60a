//! The container runner against the real podman CLI with an image built locally from Debian's
//! busybox-static (`scripts/podman-test-image`: `podman import`, no registry). Without podman
//! the test says what was missing and, under CI=true, fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use aido_remote::Exit;
use aido_remote::podman::{ContainerSpec, Mount, Podman, run, run_group};

const IMAGE: &str = "localhost/aido-test:latest";

async fn podman_or_say() -> Option<Podman> {
    let missing = |why: String| {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI must be able to run podman: {why}");
        }
        eprintln!("NOT RUN: {why}");
    };
    let podman = match Podman::locate("podman", "runc").await {
        Ok(podman) => podman,
        Err(e) => {
            missing(format!("{e} (scripts/setup-debian installs podman)"));
            return None;
        }
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/podman-test-image");
    let built = std::process::Command::new(script).status().unwrap();
    if !built.success() {
        missing("scripts/podman-test-image failed".into());
        return None;
    }
    Some(podman)
}

fn spec(shell: &str) -> ContainerSpec {
    ContainerSpec {
        image: IMAGE.into(),
        argv: vec!["sh".into(), "-c".into(), shell.into()],
        env: BTreeMap::new(),
        workdir: None,
        mounts: Vec::new(),
        pids_max: 64,
        memory_bytes: 128 << 20,
        stdin: Vec::new(),
        timeout_ms: 20_000,
        stdout_bytes_max: 64 << 10,
        stderr_bytes_max: 64 << 10,
    }
}

fn names_left(prefix: &str) -> String {
    let out = std::process::Command::new("podman")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| n.starts_with(prefix))
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test]
async fn a_container_runs_confined_and_is_removed() {
    let Some(podman) = podman_or_say().await else {
        return;
    };
    let mut s = spec(
        "read line; echo \"got $line $GREETING\"; \
         grep -c : /proc/net/dev; \
         touch /rootfile 2>/dev/null && echo root-writable || echo root-readonly; \
         grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; \
         cat /workspace/seen.txt; touch /workspace/new 2>/dev/null && echo ws-writable || echo ws-readonly; \
         exit 3",
    );
    s.stdin = b"hello\n".to_vec();
    s.env.insert("GREETING".into(), "world".into());
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("seen.txt"), "from-host\n").unwrap();
    s.mounts.push(Mount {
        host: work.path().to_owned(),
        container: "/workspace".into(),
        read_only: true,
        layer: None,
    });
    let done = run(&podman, &s).await.unwrap();
    let out = &done.outcome.stdout;
    assert_eq!(done.outcome.exit, Exit::Code(3), "{done:?}");
    assert!(out.contains("got hello world"), "{out}");
    // /proc/net/dev: two header lines and lo, nothing else.
    assert!(out.contains("\n1\n"), "only loopback: {out}");
    assert!(out.contains("root-readonly"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(
        out.contains("from-host") && out.contains("ws-readonly"),
        "{out}"
    );
    assert!(!work.path().join("new").exists());
    assert!(!done.oom_killed);
    assert_eq!(names_left(&done.name), "", "the container is removed");
}

#[tokio::test]
async fn limits_hold_a_fork_bomb_and_the_timeout_kills() {
    let Some(podman) = podman_or_say().await else {
        return;
    };
    // The subshell forks until the limit stops it (and dies there); the shell counts what
    // is alive without forking (a glob).
    let mut bomb = spec(
        "(while :; do sleep 20 & done) 2>/dev/null; \
         n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo running $n",
    );
    bomb.pids_max = 16;
    let done = run(&podman, &bomb).await.unwrap();
    let count: usize = done
        .outcome
        .stdout
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    assert!((2..=16).contains(&count), "pids limit: {done:?}");

    let mut slow = spec("sleep 60");
    slow.timeout_ms = 1500;
    let began = std::time::Instant::now();
    let done = run(&podman, &slow).await.unwrap();
    assert_eq!(done.outcome.exit, Exit::TimedOut);
    assert!(began.elapsed().as_secs() < 30);
    assert_eq!(names_left(&done.name), "");

    let mut missing = spec("true");
    missing.image = "localhost/aido-no-such-image:latest".into();
    let err = run(&podman, &missing).await.unwrap_err();
    assert_eq!(err.code(), "container_image_missing");
}

#[tokio::test]
async fn a_group_shares_only_its_loopback_and_the_pod_is_removed() {
    let Some(podman) = podman_or_say().await else {
        return;
    };
    let server = spec("echo pong | nc -l -p 7000 127.0.0.1 >/dev/null; echo served");
    let client = spec(
        "for i in $(seq 1 50); do r=$(nc 127.0.0.1 7000 </dev/null 2>/dev/null) && [ -n \"$r\" ] && break; sleep 0.2; done; \
         echo \"got $r\"; grep -c : /proc/net/dev",
    );
    let done = run_group(&podman, &[server, client]).await.unwrap();
    assert_eq!(done.len(), 2);
    assert!(done[0].outcome.stdout.contains("served"), "{done:?}");
    assert!(done[1].outcome.stdout.contains("got pong"), "{done:?}");
    assert!(done[1].outcome.stdout.ends_with("\n1\n"), "{done:?}");
    let pods = std::process::Command::new("podman")
        .args(["pod", "ls", "--format", "{{.Name}}"])
        .output()
        .unwrap();
    let pods = String::from_utf8_lossy(&pods.stdout);
    assert!(
        !pods
            .lines()
            .any(|p| p.starts_with(&format!("aido-pod-{}-", std::process::id()))),
        "the pod is removed: {pods}"
    );
}
