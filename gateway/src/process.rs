//! A stdio downstream's process inside aido's sandbox: its standard output and input as the
//! async stream pair rmcp's client speaks over, the end of its standard error for error
//! messages, its end, and its shutdown (input closed, then killed after a grace).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use aido_sandbox::{Control, Ended, Output, Profile, Request, Sandbox, SpawnError, StartOptions};
use tokio::io::{AsyncReadExt, DuplexStream};

use crate::error::DownstreamError;

/// The end of a downstream's standard error kept for error messages.
pub const STDERR_TAIL_BYTES_MAX: usize = 4096;
/// Bytes of input buffered between the client and the process.
pub const STDIN_BUFFER_BYTES: usize = 64 * 1024;
/// How long a downstream has to exit by itself once its input is closed, before it is
/// killed.
pub const SHUTDOWN_GRACE_MS: u64 = 2000;

/// How the process ended, once it has.
#[derive(Default)]
struct End {
    how: Mutex<Option<String>>,
    changed: Condvar,
}

impl End {
    fn set(&self, how: String) {
        let mut slot = self.how.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(how);
        self.changed.notify_all();
    }

    fn get(&self) -> Option<String> {
        self.how.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `wait` for the end; whether it came.
    fn wait(&self, wait: Duration) -> bool {
        let slot = self.how.lock().unwrap_or_else(|e| e.into_inner());
        let (slot, _) = self
            .changed
            .wait_timeout_while(slot, wait, |how| how.is_none())
            .unwrap_or_else(|e| e.into_inner());
        slot.is_some()
    }
}

/// A running downstream process; dropping it shuts the process down.
pub(crate) struct Process {
    control: Arc<Control>,
    end: Arc<End>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// The process's output, as the client reads it, and its input, as the client writes it.
pub(crate) type Streams = (tokio::process::ChildStdout, DuplexStream);

impl Process {
    /// Starts `request` confined by `profile`. Fails closed: a sandbox that cannot be built
    /// is an error, never an unconfined run.
    pub(crate) async fn start(
        server: &str,
        sandbox: &Sandbox,
        profile: &Profile,
        request: &Request,
    ) -> Result<(Process, Streams), DownstreamError> {
        let end = Arc::new(End::default());
        let on_end = {
            let end = Arc::clone(&end);
            Box::new(move |ended: Result<Ended, SpawnError>| {
                end.set(match ended {
                    Ok(ended) => format!("it ended with {:?}", ended.exit),
                    Err(error) => format!("its sandbox failed: {error}"),
                });
            })
        };
        let (sandbox, profile, request) = (sandbox.clone(), profile.clone(), request.clone());
        let started = tokio::task::spawn_blocking(move || {
            sandbox.start(&profile, &request, StartOptions::default(), on_end)
        })
        .await
        .map_err(|error| DownstreamError::SandboxFailed {
            server: server.to_owned(),
            sandbox_code: "sandbox_protocol_failed",
            message: format!("the starting task failed: {error}"),
        })?
        .map_err(|error| spawn_error(server, error))?;
        let Output::Pipes { stdout, stderr } = started.output else {
            started.control.kill();
            return Err(DownstreamError::SandboxFailed {
                server: server.to_owned(),
                sandbox_code: "sandbox_protocol_failed",
                message: "the sandbox gave a terminal instead of pipes".into(),
            });
        };
        let process = Process {
            control: started.control,
            end,
            stderr: Arc::new(Mutex::new(Vec::new())),
        };
        let converted = tokio::process::ChildStdout::from_std(stdout)
            .and_then(|stdout| Ok((stdout, tokio::process::ChildStderr::from_std(stderr)?)));
        let (stdout, stderr) = converted.map_err(|error| DownstreamError::SandboxFailed {
            server: server.to_owned(),
            sandbox_code: "sandbox_protocol_failed",
            message: format!("the output pipes: {error}"),
        })?;
        tokio::spawn(keep_tail(stderr, Arc::clone(&process.stderr)));
        let (ours, theirs) = tokio::io::duplex(STDIN_BUFFER_BYTES);
        tokio::spawn(feed_stdin(theirs, Arc::clone(&process.control)));
        Ok((process, (stdout, ours)))
    }

    /// The host pid of the sandbox's init (the server is its child): killing it ends the
    /// whole tree.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.control.init_pid()
    }

    /// How the process ended, if it has.
    pub(crate) fn ended(&self) -> Option<String> {
        self.end.get()
    }

    /// Waits up to `wait` for the process to end and says how, or that it still runs.
    pub(crate) async fn wait_end(&self, wait: Duration) -> String {
        let end = Arc::clone(&self.end);
        let ended = tokio::task::spawn_blocking(move || end.wait(wait).then(|| end.get()))
            .await
            .ok()
            .flatten()
            .flatten();
        ended.unwrap_or_else(|| "its transport closed".into())
    }

    /// The end of its standard error, as text.
    pub(crate) fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).trim().to_owned()
    }
}

impl Drop for Process {
    /// Closes the input (a stdio server exits at the end of its input), and kills the tree if
    /// it is still there after [`SHUTDOWN_GRACE_MS`]. Never blocks the caller: a write of
    /// input blocked on a server that does not read holds the input, so the close and the
    /// kill run on threads of their own.
    fn drop(&mut self) {
        let control = Arc::clone(&self.control);
        let _ = std::thread::Builder::new()
            .name("aido-gateway-close".into())
            .spawn(move || {
                let _ = control.close_stdin();
            });
        let (control, end) = (Arc::clone(&self.control), Arc::clone(&self.end));
        let killer = std::thread::Builder::new()
            .name("aido-gateway-stop".into())
            .spawn(move || {
                if !end.wait(Duration::from_millis(SHUTDOWN_GRACE_MS)) {
                    control.kill();
                }
            });
        if killer.is_err() {
            self.control.kill();
        }
    }
}

fn spawn_error(server: &str, error: SpawnError) -> DownstreamError {
    match error {
        SpawnError::ExecFailed { .. } => DownstreamError::CommandMissing {
            server: server.to_owned(),
            message: error.to_string(),
        },
        error => DownstreamError::SandboxFailed {
            server: server.to_owned(),
            sandbox_code: error.code(),
            message: error.to_string(),
        },
    }
}

/// Keeps the last [`STDERR_TAIL_BYTES_MAX`] bytes of the process's standard error.
async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buffer = vec![0u8; 4096];
    while let Ok(read) = stderr.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(&buffer[..read]);
        let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES_MAX);
        tail.drain(..excess);
    }
}

/// Writes what the client sends to the process's input (the sandbox's input is written
/// through its control socket, a blocking call); closes it when the client closes its side.
async fn feed_stdin(mut from: DuplexStream, control: Arc<Control>) {
    let mut buffer = vec![0u8; STDIN_BUFFER_BYTES];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let bytes = buffer[..read].to_vec();
        let control = Arc::clone(&control);
        let written = tokio::task::spawn_blocking(move || control.write_stdin(&bytes)).await;
        if !matches!(written, Ok(Ok(()))) {
            return;
        }
    }
    let _ = tokio::task::spawn_blocking(move || control.close_stdin()).await;
}
