//! The explicit escape hatch: a command run **without** the sandbox, for hosts that cannot
//! build one (no user namespaces in a container, an AppArmor userns restriction) and whose
//! policy says so (`[processes] unconfined`). It is a plain child process: a session and
//! process group of its own (killed whole at the timeout), a cleared environment with a few
//! defaults and the request's variables, its standard input written and closed, its output
//! capped. No namespace, no read-only host, no Landlock or seccomp, no layer: its writes land
//! on the host directly and it reaches whatever aido's user can. The caller journals that on
//! every call; nothing here decides to use it.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{SpawnError, Step};
use crate::profile::{Exit, Outcome, Request};
use crate::spawn::Outputs;

/// How often a running command is checked for its end.
const POLL_MS: u64 = 2;

/// Runs `request` unconfined and waits for it (blocking).
pub fn run_unconfined(request: &Request) -> Result<Outcome, SpawnError> {
    let Some((program, args)) = request.argv.split_first() else {
        return Err(SpawnError::invalid("the command (argv) is empty"));
    };
    let started = Instant::now();
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(&request.cwd)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        )
        .env("LANG", "C.UTF-8")
        .env("TERM", "dumb")
        .envs(std::env::var_os("HOME").map(|home| ("HOME", home)))
        .envs(&request.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A process group of its own: the timeout kills the whole tree it did not detach.
        .process_group(0);
    let mut child = command.spawn().map_err(|error| SpawnError::ExecFailed {
        program: program.clone(),
        errno: error.raw_os_error().unwrap_or(0),
        path: request.env.get("PATH").cloned().unwrap_or_default(),
    })?;
    let outputs = Outputs::start(&mut child, request);
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = request.stdin.clone();
        // A command that does not read its input must not hold this up.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let group = rustix::process::Pid::from_raw(child.id() as i32);
    let deadline = started + Duration::from_millis(request.timeout_ms);
    let exit = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                break match (status.code(), status.signal()) {
                    (Some(code), _) => Exit::Code(code),
                    (None, Some(signal)) => Exit::Signal(signal),
                    (None, None) => Exit::Code(-1),
                };
            }
            Ok(None) if Instant::now() >= deadline => {
                if let Some(group) = group {
                    let _ =
                        rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                break Exit::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(POLL_MS)),
            Err(error) => {
                return Err(SpawnError::setup_io(
                    Step::SpawnInit,
                    &error,
                    "wait for the command",
                ));
            }
        }
    };
    // What the command left running in its group goes with it, as a sandbox's would.
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    let outputs = outputs.finish(
        "output pipes stayed open after the command ended (a process it detached holds them)",
    )?;
    Ok(Outcome::captured(exit, outputs, started))
}
