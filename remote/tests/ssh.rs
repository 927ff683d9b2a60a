//! ssh_exec's runner against a real sshd the test starts on 127.0.0.1: a throwaway config on a
//! free port with its own host key and an authorized key made by ssh-keygen. Without
//! /usr/sbin/sshd the test says what was missing and, under CI=true, fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use aido_remote::Exit;
use aido_remote::ssh::{SshRequest, SshTarget, exec};

struct Sshd {
    dir: tempfile::TempDir,
    child: std::process::Child,
    port: u16,
}

impl Sshd {
    fn start() -> Result<Self, String> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            return Err("no /usr/sbin/sshd (apt-get install openssh-server)".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        for key in ["hostkey", "client", "other"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", key, "-f"])
                .arg(d.join(key))
                .status()
                .map_err(|e| e.to_string())?;
            if !made.success() {
                return Err("ssh-keygen failed".into());
            }
        }
        std::fs::copy(d.join("client.pub"), d.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        std::fs::create_dir_all("/run/sshd").map_err(|e| e.to_string())?;
        // UsePAM yes: without PAM, sshd refuses every login to an account whose shadow
        // password starts with "!" (a locked root, common on fresh machines), keys or not.
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM yes\nStrictModes no\n",
                hk = d.join("hostkey").display(),
                ak = d.join("authorized_keys").display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let child = Command::new(sshd)
            .arg("-D")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .spawn()
            .map_err(|e| e.to_string())?;
        let sshd = Sshd { dir, child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(sshd);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err("sshd did not listen".into())
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn target(&self) -> SshTarget {
        SshTarget {
            host: "127.0.0.1".into(),
            port: self.port,
            user: whoami(),
            host_key: std::fs::read_to_string(self.file("hostkey.pub")).unwrap(),
            key_file: self.file("client"),
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows why sshd refused (e.g. a locked account, a PAM module).
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default();
            eprintln!("sshd.log:\n{log}");
        }
    }
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn sshd_or_say() -> Option<Sshd> {
    match Sshd::start() {
        Ok(sshd) => Some(sshd),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("NOT RUN: no sshd on loopback: {e}");
            None
        }
        Err(e) => panic!("CI must be able to run sshd on loopback: {e}"),
    }
}

#[tokio::test]
async fn a_command_runs_on_a_pinned_host_and_its_status_passes_through() {
    let Some(sshd) = sshd_or_say() else { return };
    let target = sshd.target();
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
    let mut target = sshd.target();
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
    let mut stranger = sshd.target();
    stranger.key_file = sshd.file("other");
    let err = exec(&stranger, &SshRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), "ssh_auth_refused");

    // A key file that cannot be read.
    let mut missing = sshd.target();
    missing.key_file = sshd.file("nope");
    let err = exec(&missing, &SshRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), "ssh_key_unreadable");

    // Nobody listening.
    let mut closed = sshd.target();
    closed.port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = exec(&closed, &SshRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), "ssh_connect_failed");
}
