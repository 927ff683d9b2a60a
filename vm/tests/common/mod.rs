//! The guest images the VM tests boot, built once per target dir with vm/guest/build-image
//! (concurrent test processes wait on a lock file).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn build(name: &str, framebuffer: bool) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.join(".lock")).unwrap();
    lock.lock().unwrap();
    if !dir.join("manifest.json").exists() {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("guest/build-image");
        let mut cmd = std::process::Command::new(script);
        cmd.arg(&dir);
        if framebuffer {
            cmd.arg("--framebuffer");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "build-image failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// The VGA text guest.
pub fn guest() -> PathBuf {
    build("aido-guest", false)
}

/// The framebuffer guest.
pub fn guest_fb() -> PathBuf {
    build("aido-guest-fb", true)
}

/// An sshd of the test's own on 127.0.0.1 (its own host key, config and authorized key; root
/// only, as libvirt's system socket is), for `qemu+ssh://` URIs. Stopped on drop.
pub struct LoopbackSsh {
    dir: tempfile::TempDir,
    child: std::process::Child,
    pub port: u16,
}

impl LoopbackSsh {
    /// Start one, or say why not.
    pub fn start() -> Result<Self, String> {
        let sshd = std::path::Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            return Err("no /usr/sbin/sshd (apt-get install openssh-server)".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        for key in ["hostkey", "client"] {
            let made = std::process::Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
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
        let child = std::process::Command::new(sshd)
            .arg("-D")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .spawn()
            .map_err(|e| e.to_string())?;
        let ssh = Self { dir, child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(ssh);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err("sshd did not listen".into())
    }

    /// The libvirt URI of this machine's system libvirtd, reached over this sshd.
    pub fn libvirt_uri(&self) -> String {
        format!(
            "qemu+ssh://root@127.0.0.1:{}/system?keyfile={}&no_verify=1",
            self.port,
            self.dir.path().join("client").display()
        )
    }
}

impl Drop for LoopbackSsh {
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

/// QEMU processes started by this test binary (children of this process or of its setpriv).
pub fn qemu_pids() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            cmd.contains("qemu-system-x86_64") && ppid == Some(me) && !stat.contains(") Z ")
        })
        .collect()
}

/// Assert that, within 5 s, no QEMU of this test binary runs but those in `before`.
pub fn no_qemu_left_but(before: &[u32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while qemu_pids().iter().any(|p| !before.contains(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left: Vec<u32> = qemu_pids()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(left.is_empty(), "QEMU processes left behind: {left:?}");
}
