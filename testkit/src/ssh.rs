//! An sshd of the test's own on 127.0.0.1: a throwaway config on a free port, its own host key
//! and an authorized key made by ssh-keygen (`client`), and any other keys a test asks for.
//! Stopped on drop; a failed test shows sshd's log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A running sshd on loopback.
pub struct LoopbackSsh {
    dir: tempfile::TempDir,
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl LoopbackSsh {
    /// Start one whose authorized key is `client`; `extra_keys` are made beside it (not
    /// authorized). Or say why not.
    pub fn start(extra_keys: &[&str]) -> Result<Self, String> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            return Err("no /usr/sbin/sshd (apt-get install openssh-server)".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        for key in ["hostkey", "client"].iter().chain(extra_keys) {
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
        // HOME is the server's own directory: the login shell runs none of the user's start-up
        // files (where one runs `pyenv init`, a rehash lock a killed shell left behind makes
        // every later login wait a minute, and its complaint lands in the command's stderr).
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM yes\nStrictModes no\n\
                 SetEnv HOME={home}\n",
                hk = d.join("hostkey").display(),
                home = d.display(),
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
        let ssh = Self { dir, child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(ssh);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err("sshd did not listen".into())
    }

    /// A file of its folder: `hostkey.pub`, `client` (the authorized key), an extra key.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The libvirt URI of this machine's system libvirtd, reached over this sshd (as root).
    pub fn libvirt_uri(&self) -> String {
        format!(
            "qemu+ssh://root@127.0.0.1:{}/system?keyfile={}&no_verify=1",
            self.port,
            self.file("client").display()
        )
    }
}

impl Drop for LoopbackSsh {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows why sshd refused (e.g. a locked account, a PAM module).
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.file("sshd.log")).unwrap_or_default();
            eprintln!("sshd.log:\n{log}");
        }
    }
}
