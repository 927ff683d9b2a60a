//! ssh_exec's runner against a real sshd the test starts on 127.0.0.1: a throwaway config on a
//! free port with its own host key and an authorized key made by ssh-keygen. Without
//! /usr/sbin/sshd the test says what was missing and, under CI, fails (`aido_testkit::lacking`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use aido_remote::Exit;
use aido_remote::ssh::{SshRequest, SshTarget, exec};
use aido_testkit::ssh::LoopbackSsh;

/// The sshd with the target ssh_exec is given: its host key pinned, the authorized key, and
/// `other` (a key of neither) made beside them.
fn pinned(sshd: &LoopbackSsh) -> SshTarget {
    SshTarget {
        host: "127.0.0.1".into(),
        port: sshd.port,
        user: whoami(),
        host_key: std::fs::read_to_string(sshd.file("hostkey.pub")).unwrap(),
        key_file: sshd.file("client"),
    }
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn sshd_or_say() -> Option<LoopbackSsh> {
    aido_testkit::lacking("sshd on loopback", LoopbackSsh::start(&["other"]))
}

#[tokio::test]
async fn a_command_runs_on_a_pinned_host_and_its_status_passes_through() {
    let Some(sshd) = sshd_or_say() else { return };
    let target = pinned(&sshd);
    let mut request = SshRequest::new("cat; echo out; echo err >&2; exit 7");
    request.stdin = b"in-".to_vec();
    let outcome = exec(&target, &request).await.unwrap();
    assert_eq!(outcome.exit, Exit::Code(7));
    assert_eq!(outcome.stdout, "in-out\n");
    assert_eq!(outcome.stderr, "err\n");
    assert!(!outcome.frames.is_empty());

    // The fingerprint pins as well as the key line.
    let line = std::fs::read_to_string(sshd.file("hostkey.pub")).unwrap();
    let mut by_fingerprint = target.clone();
    by_fingerprint.host_key = aido_remote::ssh::pin_fingerprint("h", &line).unwrap();
    let outcome = exec(&by_fingerprint, &SshRequest::new("echo fp"))
        .await
        .unwrap();
    assert_eq!(outcome.stdout, "fp\n");

    // Output past the cap is counted, not kept.
    let mut capped = SshRequest::new("head -c 100000 /dev/zero | tr '\\0' x");
    capped.stdout_bytes_max = 1000;
    let outcome = exec(&target, &capped).await.unwrap();
    assert_eq!(outcome.stdout.len(), 1000);
    assert_eq!(outcome.stdout_bytes_total, 100_000);
    assert!(outcome.stdout_truncated);

    // The timeout kills it.
    let mut slow = SshRequest::new("sleep 30");
    slow.timeout_ms = 1500;
    let began = std::time::Instant::now();
    let outcome = exec(&target, &slow).await.unwrap();
    assert_eq!(outcome.exit, Exit::TimedOut);
    assert!(began.elapsed().as_secs() < 10);
}

#[tokio::test]
async fn a_host_whose_key_is_not_the_pinned_one_is_refused_before_authenticating() {
    let Some(sshd) = sshd_or_say() else { return };
    let mut target = pinned(&sshd);
    target.host_key = std::fs::read_to_string(sshd.file("other.pub")).unwrap();
    let err = exec(&target, &SshRequest::new("touch pwned"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ssh_host_key_mismatch");
    let real = aido_remote::ssh::pin_fingerprint(
        "h",
        &std::fs::read_to_string(sshd.file("hostkey.pub")).unwrap(),
    )
    .unwrap();
    assert!(err.to_string().contains(&real), "{err}");
    // Nothing reached authentication: sshd logged no accepted or failed key.
    let log = std::fs::read_to_string(sshd.file("sshd.log")).unwrap_or_default();
    assert!(!log.contains("Accepted publickey"), "{log}");

    // A key the server does not authorize is refused, coded.
    let mut stranger = pinned(&sshd);
    stranger.key_file = sshd.file("other");
    let err = exec(&stranger, &SshRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), "ssh_auth_refused");

    // A key file that cannot be read.
    let mut missing = pinned(&sshd);
    missing.key_file = sshd.file("nope");
    let err = exec(&missing, &SshRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), "ssh_key_unreadable");

    // Nobody listening.
    let mut closed = pinned(&sshd);
    closed.port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = exec(&closed, &SshRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), "ssh_connect_failed");
}
