//! One command on a policy-named host over SSH (russh). The caller gives everything: host,
//! port, user, the pinned host key and the private key file. Nothing is read from `~/.ssh`
//! (no `config`, no `known_hosts`, no agent), and the host key is judged during the key
//! exchange, before the client authenticates: a server whose key is not the pinned one never
//! sees a signature of ours.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use russh::client;
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use russh::{ChannelMsg, Disconnect};
use tokio::time::timeout_at;

use crate::output::{Capture, Exit, RemoteOutcome, Stream};

/// Where to connect and as whom: one `[[ssh.hosts]]` entry of the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshTarget {
    /// A name or an address.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The remote user.
    pub user: String,
    /// The pinned host key: an OpenSSH public key line (`ssh-ed25519 AAAA… comment`) or its
    /// `SHA256:` fingerprint.
    pub host_key: String,
    /// The private key file (OpenSSH format, no passphrase).
    pub key_file: PathBuf,
}

/// The command and its bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshRequest {
    /// The command line as the remote shell runs it (SSH carries one string, not an argv).
    pub command: String,
    /// Bytes written to its standard input, which is then closed.
    pub stdin: Vec<u8>,
    /// Wall-clock bound for the whole exchange, connection included.
    pub timeout_ms: u64,
    /// Standard output kept.
    pub stdout_bytes_max: usize,
    /// Standard error kept.
    pub stderr_bytes_max: usize,
}

impl SshRequest {
    /// A request with a 10 s timeout and 64 KiB output caps.
    pub fn new(command: impl Into<String>) -> Self {
        SshRequest {
            command: command.into(),
            stdin: Vec::new(),
            timeout_ms: 10_000,
            stdout_bytes_max: 64 << 10,
            stderr_bytes_max: 64 << 10,
        }
    }
}

/// Why a command could not be run on the host (its own failures are its exit status).
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// The policy's pinned host key is neither an OpenSSH public key line nor a `SHA256:`
    /// fingerprint.
    #[error(
        "the pinned host key for {host} is not an OpenSSH public key or SHA256 fingerprint: {why}"
    )]
    HostKeyInvalid {
        /// The host.
        host: String,
        /// What the parser said.
        why: String,
    },
    /// The private key file named by the policy cannot be read or parsed.
    #[error("the private key file {path} cannot be used: {why}")]
    KeyUnreadable {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// The TCP connection or the SSH handshake failed (or did not finish in time).
    #[error("cannot connect to {host}:{port}: {why}")]
    ConnectFailed {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// Why.
        why: String,
    },
    /// The server's host key is not the pinned one: nothing was sent to it.
    #[error(
        "{host}:{port} offered host key {seen}, not the pinned {expected}; refused before authenticating"
    )]
    HostKeyMismatch {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The pinned fingerprint.
        expected: String,
        /// The fingerprint the server offered (or what it offered instead of a key).
        seen: String,
    },
    /// The server refused the key for this user.
    #[error("{host}:{port} refused the key for user {user}")]
    AuthRefused {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The user.
        user: String,
    },
    /// The session broke after authentication (opening the channel, sending the command).
    #[error("the SSH session with {host} failed: {why}")]
    SessionFailed {
        /// The host.
        host: String,
        /// Why.
        why: String,
    },
}

aido_actions::coded!(SshError {
    HostKeyInvalid => "ssh_host_key_invalid",
    KeyUnreadable => "ssh_key_unreadable",
    ConnectFailed => "ssh_connect_failed",
    HostKeyMismatch => "ssh_host_key_mismatch",
    AuthRefused => "ssh_auth_refused",
    SessionFailed => "ssh_session_failed",
});

/// The `SHA256:` fingerprint a pin stands for: the pin itself when it is one, else the
/// fingerprint of the OpenSSH public key line.
pub fn pin_fingerprint(host: &str, pin: &str) -> Result<String, SshError> {
    let pin = pin.trim();
    let invalid = |why: String| SshError::HostKeyInvalid {
        host: host.to_owned(),
        why,
    };
    if let Some(digest) = pin.strip_prefix("SHA256:") {
        // 32 bytes in unpadded base64 are 43 characters.
        let base64 = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/';
        if digest.len() != 43 || !digest.chars().all(base64) {
            return Err(invalid(
                "a SHA256 fingerprint is 43 base64 characters".into(),
            ));
        }
        return Ok(pin.to_owned());
    }
    let key = PublicKey::from_openssh(pin).map_err(|e| invalid(e.to_string()))?;
    Ok(key.fingerprint(HashAlg::Sha256).to_string())
}

/// The client side of the key exchange: accepts only the pinned key, and remembers what the
/// server offered so a mismatch can name it.
struct Pinned {
    expected: String,
    seen: Arc<Mutex<Option<String>>>,
}

impl client::Handler for Pinned {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        offered: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let seen = match offered {
            PublicKeyOrCertificate::PublicKey { key, .. } => {
                key.fingerprint(HashAlg::Sha256).to_string()
            }
            // A host certificate is not a pinned key: refused (no CA is configured).
            PublicKeyOrCertificate::Certificate(_) => "a host certificate".to_owned(),
        };
        let matches = seen == self.expected;
        if let Ok(mut slot) = self.seen.lock() {
            *slot = Some(seen);
        }
        Ok(matches)
    }
}

/// Run `request` on `target`. The exit status passes through; past `timeout_ms` the channel
/// is sent KILL and closed and the outcome says `timed_out`.
///
/// # Cancel safety
///
/// Dropping the future drops the connection, which ends the remote command (sshd hangs it
/// up); what it printed so far is lost.
#[allow(clippy::too_many_lines)]
pub async fn exec(target: &SshTarget, request: &SshRequest) -> Result<RemoteOutcome, SshError> {
    let expected = pin_fingerprint(&target.host, &target.host_key)?;
    let key = russh::keys::load_secret_key(&target.key_file, None).map_err(|e| {
        SshError::KeyUnreadable {
            path: target.key_file.display().to_string(),
            why: e.to_string(),
        }
    })?;
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms);
    let connect_failed = |why: String| SshError::ConnectFailed {
        host: target.host.clone(),
        port: target.port,
        why,
    };
    let seen = Arc::new(Mutex::new(None));
    let handler = Pinned {
        expected: expected.clone(),
        seen: Arc::clone(&seen),
    };
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(Duration::from_millis(request.timeout_ms)),
        nodelay: true,
        ..Default::default()
    });
    let connect = client::connect(config, (target.host.as_str(), target.port), handler);
    let mut handle = match timeout_at(deadline, connect).await {
        Err(_) => return Err(connect_failed("timed out".into())),
        Ok(Ok(handle)) => handle,
        Ok(Err(russh::Error::UnknownKey)) => {
            let seen = seen
                .lock()
                .ok()
                .and_then(|s| s.clone())
                .unwrap_or_else(|| "no key".into());
            return Err(SshError::HostKeyMismatch {
                host: target.host.clone(),
                port: target.port,
                expected,
                seen,
            });
        }
        Ok(Err(error)) => return Err(connect_failed(error.to_string())),
    };
    let session_failed = |why: String| SshError::SessionFailed {
        host: target.host.clone(),
        why,
    };
    let authenticated = async {
        let hash = handle.best_supported_rsa_hash().await?.flatten();
        handle
            .authenticate_publickey(
                target.user.clone(),
                PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
    };
    match timeout_at(deadline, authenticated).await {
        Err(_) => return Err(connect_failed("timed out authenticating".into())),
        Ok(Err(error)) => return Err(connect_failed(error.to_string())),
        Ok(Ok(result)) if !result.success() => {
            return Err(SshError::AuthRefused {
                host: target.host.clone(),
                port: target.port,
                user: target.user.clone(),
            });
        }
        Ok(Ok(_)) => {}
    }
    let opened = async {
        let mut channel = handle.channel_open_session().await?;
        channel.exec(true, request.command.as_bytes()).await?;
        // Stdin and its end only once the server says the command started: OpenSSH drops
        // channel data and EOF that arrive before the command has its stdin, and a command
        // reading stdin (`cat`) then waits for an EOF that never comes.
        let mut early = Vec::new();
        loop {
            match channel.wait().await {
                Some(ChannelMsg::Success) => break,
                Some(ChannelMsg::Failure) => {
                    return Ok(Err("the server refused to run the command".to_owned()));
                }
                Some(other) => early.push(other),
                None => return Ok(Err("the channel closed before the command ran".to_owned())),
            }
        }
        if !request.stdin.is_empty() {
            channel.data(&request.stdin[..]).await?;
        }
        channel.eof().await?;
        Ok::<_, russh::Error>(Ok((channel, early)))
    };
    let (mut channel, early) = match timeout_at(deadline, opened).await {
        Ok(Ok(Ok(opened))) => opened,
        Ok(Ok(Err(refused))) => return Err(session_failed(refused)),
        Ok(Err(error)) => return Err(session_failed(error.to_string())),
        Err(_) => {
            let capture = Capture::new(started, 0, 0);
            let _ = handle.disconnect(Disconnect::ByApplication, "", "en").await;
            return Ok(capture.finish(Exit::TimedOut));
        }
    };
    let mut capture = Capture::new(started, request.stdout_bytes_max, request.stderr_bytes_max);
    let mut exit = Exit::Unknown;
    let mut early = early.into_iter();
    loop {
        let next = match early.next() {
            Some(message) => Ok(Some(message)),
            None => timeout_at(deadline, channel.wait()).await,
        };
        match next {
            Err(_) => {
                let _ = channel.signal(russh::Sig::KILL).await;
                let _ = channel.close().await;
                exit = Exit::TimedOut;
                break;
            }
            Ok(None) => break,
            Ok(Some(ChannelMsg::Data { data })) => capture.push(Stream::Stdout, &data),
            Ok(Some(ChannelMsg::ExtendedData { data, ext: 1 })) => {
                capture.push(Stream::Stderr, &data);
            }
            Ok(Some(ChannelMsg::ExitStatus { exit_status })) => {
                exit = Exit::Code(i64::from(exit_status));
            }
            Ok(Some(ChannelMsg::ExitSignal { signal_name, .. })) => {
                exit = Exit::Signal(signal_text(&signal_name));
            }
            Ok(Some(_)) => {}
        }
    }
    let _ = handle.disconnect(Disconnect::ByApplication, "", "en").await;
    Ok(capture.finish(exit))
}

/// A signal's SSH name (`KILL`, or the custom name as sent).
fn signal_text(signal: &russh::Sig) -> String {
    match signal {
        russh::Sig::Custom(name) => name.clone(),
        known => format!("{known:?}"),
    }
}

/// `argv` as one command line for the remote POSIX shell, each word single-quoted.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            let safe = !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
            if safe {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_fingerprints_or_key_lines() {
        let line =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ test";
        let fp = pin_fingerprint("h", line).unwrap();
        assert!(fp.starts_with("SHA256:"), "{fp}");
        assert_eq!(pin_fingerprint("h", &fp).unwrap(), fp);
        for bad in ["", "SHA256:short", "ssh-ed25519 !!!", "md5:aa:bb"] {
            assert_eq!(
                pin_fingerprint("h", bad).unwrap_err().code(),
                "ssh_host_key_invalid",
                "{bad}"
            );
        }
    }

    #[test]
    fn argv_is_quoted_for_the_remote_shell() {
        let argv: Vec<String> = ["printf", "%s\\n", "it's", "a b", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_join(&argv), r"printf '%s\n' 'it'\''s' 'a b' ''");
    }
}
