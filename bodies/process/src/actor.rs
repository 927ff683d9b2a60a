use std::path::PathBuf;
use std::sync::Arc;

use aido_actions::process::{RunCommand, StopHandle};
use aido_actions::{AccessKind, Failure, Input};
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use aido_sandbox::{
    Change, GlobIndex, Outcome, Profile, Request, Sandbox, StartOptions, WriteMode,
};
use aido_walk::process::record::{
    self, ChangeShown, CommandEnded, CommandRecord, CommandStart, Exit, HandleStart, HandleStop,
    SessionNetwork, Unconfined,
};
use aido_walk::process::{
    ANSWERED_BY, command_ran, handle_answered, handle_started, handle_stopped,
};
use serde_json::{Value, json};

use super::ProcessError;
use super::dry::{self, Layers};
use super::handles::{Cell, HandleTable};
use super::profile::{profile_of, request_of};
use aido_body_fs::Executed;
use aido_body_fs::changeset::{CommandChange, Contents};
use aido_call::ticket::Ticket;

/// What it is built from.
#[derive(Clone)]
pub struct ProcessBodyArgs {
    /// The policy: its walls and deny globs become the profile.
    pub policy: Arc<PolicyEngine>,
    /// aido's own directories (`AIDO_HOME`, the journal), hidden from every command.
    pub hidden: Vec<PathBuf>,
    /// Deny globs expanded so far, kept across commands (and body restarts).
    pub globs: Arc<GlobIndex>,
    /// Where dry runs put their copy-on-write layers (outside every write root).
    pub layers: PathBuf,
    /// The background commands, shared by every session (and kept across body restarts).
    pub handles: Arc<HandleTable>,
    /// Each session's shared `/tmp`.
    pub tmps: Arc<super::SessionTmps>,
    /// Fault injection (tests).
    pub faults: Arc<aido_call::faults::Faults>,
}

/// Which call of which session a process primitive is: a background command's registry
/// names the start.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The session (32 hex digits).
    pub session: String,
    /// The proposal's seq.
    pub proposal: u64,
    /// When it was asked for (the runtime's clock), a background command's start time.
    pub now_ms: u64,
}

/// What a command left: its result, and the file changes it made in its layer, judged and
/// waiting to be applied by the filesystem body (none for a dry run).
pub struct Ran {
    /// The result, with the command's record as its input.
    pub executed: Executed,
    /// The changes to apply, with the layer that holds their contents.
    pub pending: Option<Pending>,
}

/// Changes a command made, every one admitted by the walls: the layer holding their
/// contents lives as long as this does.
pub struct Pending {
    /// The changes, in the layer's order.
    pub changes: Vec<CommandChange>,
    /// Each of their paths as the policy admitted it, so the filesystem body judges none
    /// again.
    pub admitted: aido_policy::Admissions,
    /// Most bytes one file of them may hold (the policy's `change_bytes_max`).
    pub file_bytes_max: u64,
    _layers: Layers,
}

/// The caps of one command's change set, from the policy.
pub fn change_caps(policy: &PolicyEngine) -> aido_sandbox::ChangeCaps {
    let processes = &policy.config().processes;
    aido_sandbox::ChangeCaps {
        entries_max: processes.change_files_max,
        bytes_max: processes.change_bytes_max,
    }
}

/// Most bytes of one output stream kept: the action's cap, within a share of the journal's
/// record bound (the output is in the recorded input and in the result).
/// The user's environment for `run`: what the policy's `env_inherit` passes of aido's own,
/// then the call's `env` with the home expanded.
fn user_env(
    args: &ProcessBodyArgs,
    run: &RunCommand,
) -> std::collections::BTreeMap<String, String> {
    let home = std::env::var("HOME").ok();
    super::profile::env_of(
        &args.policy.config().processes.env_inherit,
        std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }),
        &run.env,
        home.as_deref(),
    )
}

/// Points the command's `/tmp` at `session`'s shared one unless it asked for its own: the
/// directory through `profile`, the tmpfs through the sandbox (returned). The holder keeps
/// it while the command runs.
type Tmp = (
    Option<Arc<super::tmp::SessionTmp>>,
    Option<aido_sandbox::SharedTmp>,
);

fn session_tmp(
    args: &ProcessBodyArgs,
    run: &RunCommand,
    session: &str,
    profile: &mut Profile,
) -> Result<Tmp, Failure> {
    if run.private_tmp {
        return Ok((None, None));
    }
    let tmp = args
        .tmps
        .of(session, profile.run_as, profile.tmp_bytes_max)
        .map_err(|error| {
        Failure::new(
            "sandbox_setup_failed",
            format!(
                "the session's /tmp under {} (private_tmp gives the command one of its own): {error}",
                args.layers.display()
            ),
        )
        })?;
    let tmpfs = tmp.apply(profile);
    Ok((Some(tmp), tmpfs))
}

pub(super) fn output_bytes_max(policy: &PolicyEngine) -> usize {
    let record = policy.config().limits.record_bytes_max as usize;
    RunCommand::OUTPUT_BYTES_MAX.min(record / 8)
}

/// What a command runs with, made the same way for a foreground and a background one: its
/// request (its working directory judged again), its sandbox profile writing into a layer of
/// its own (read back afterwards: a dry run returns the changes and throws the layer away;
/// otherwise they are applied as journaled effects), and the sandbox child to run it in.
struct Prepared {
    request: Request,
    profile: Profile,
    layers: Layers,
    exe: std::path::PathBuf,
}

fn prepare(
    args: &ProcessBodyArgs,
    run: &RunCommand,
    session: &SessionContext,
) -> Result<Prepared, Failure> {
    check_expose(args, run)?;
    // The walls were judged by the policy; the body checks the directory it will use again.
    let cwd = args
        .policy
        .check_path(&run.cwd_given(), AccessKind::Read, session, &FsResolver)
        .map_err(|refusal| Failure::new(refusal.code().code(), refusal.to_string()))?
        .resolved;
    if !cwd.is_dir() {
        return Err(ProcessError::InvalidCommand {
            why: format!("cwd {} is not a directory", cwd.display()),
        }
        .into_failure());
    }
    let request = request_of(
        run,
        &cwd,
        output_bytes_max(&args.policy),
        user_env(args, run),
    )
    .map_err(ProcessError::into_failure)?;
    let mut profile = profile_of(&args.policy, &args.hidden);
    let layers = Layers::new(&args.layers).map_err(|error| Layers::failure(&args.layers, error))?;
    profile.writes = WriteMode::Overlay {
        layers_dir: layers.dir.clone(),
    };
    let (exe, _) = aido_sandbox::host_exe().map_err(|error| {
        ProcessError::ExecutableMissing {
            why: error.to_string(),
        }
        .into_failure()
    })?;
    Ok(Prepared {
        request,
        profile,
        layers,
        exe,
    })
}

#[allow(clippy::too_many_lines)]
pub(super) async fn run_command(
    args: &ProcessBodyArgs,
    run: &RunCommand,
    session: &SessionContext,
    origin: &Origin,
    ticket: &Ticket,
) -> Result<Ran, Failure> {
    let Prepared {
        request,
        mut profile,
        layers,
        exe,
    } = prepare(args, run, session)?;
    // Past this the command runs: the caller waits for its answer.
    if !ticket.commit() {
        return Err(Failure::new(
            "body_timeout",
            "the call was abandoned before it ran",
        ));
    }
    // The session's /tmp, held while the command runs (a dry run's is its own: it leaves the
    // host exactly as it was).
    let (tmp, tmpfs) = if run.dry_run {
        (None, None)
    } else {
        session_tmp(args, run, &origin.session, &mut profile)?
    };
    let (profile_sent, request_sent) = (profile.clone(), request.clone());
    // A running background command of the session shares its network: its servers are on
    // this command's loopback too.
    let network = args.handles.network_of(&origin.session);
    let network_record = network.as_ref().map(network_of_record);
    let sandbox = Sandbox::new(exe)
        .with_globs(Arc::clone(&args.globs))
        .with_network(network)
        .with_tmp(tmpfs);
    let diff_budget = output_bytes_max(&args.policy);
    let dry_run = run.dry_run;
    let caps = change_caps(&args.policy);
    let unconfined = args.policy.config().processes.unconfined.clone();
    if unconfined == "always" {
        return run_unconfined(
            args,
            &request,
            "[processes] unconfined = \"always\"",
            dry_run,
        )
        .await;
    }
    let ran = tokio::task::spawn_blocking(move || {
        let outcome = sandbox.run(&profile_sent, &request_sent)?;
        // The layer of root i overlays the root as the sandbox resolved it.
        let roots: Vec<PathBuf> = profile_sent
            .writable_roots
            .iter()
            .map(|root| root.canonicalize().unwrap_or_else(|_| root.clone()))
            .collect();
        // Changes past the caps refuse the lot; the command's own result goes with the refusal.
        let changes = aido_sandbox::collect_changes(&*layers.fd, &roots, caps);
        if dry_run {
            let shown = match changes {
                Ok(changes) => dry::render(&changes, diff_budget),
                Err(error) => return Err(error),
            };
            drop(layers);
            return Ok::<_, aido_sandbox::SpawnError>((outcome, Err(shown), None));
        }
        Ok((outcome, Ok(changes), Some(layers)))
    })
    .await
    .map_err(|error| Failure::from(aido_sandbox::SpawnError::protocol(error.to_string())))?;
    let (outcome, changes, layers) = match ran {
        Ok(ran) => ran,
        // Nothing ran (a missing layer is refused before the command starts); the policy
        // allows this host to run it without the sandbox.
        Err(error @ aido_sandbox::SpawnError::SandboxUnavailable { .. })
            if unconfined == "if_unavailable" =>
        {
            let why = format!("[processes] unconfined = \"if_unavailable\": {error}");
            return run_unconfined(args, &request, &why, dry_run).await;
        }
        Err(error) => {
            return Err(Failure::from(error));
        }
    };
    let mut record = record_of(&request, &profile, &outcome);
    record.tmp = Some(tmp_of_record(tmp.is_some()));
    record.network = network_record;
    let changes = match changes {
        Ok(Err(error)) => return Err(refused_whole(error, &command_ran(&record).output)),
        Ok(Ok(changes)) => Ok(changes),
        Err(shown) => Err(shown),
    };
    let changes = match (changes, layers) {
        (Ok(changes), Some(layers)) => {
            let (pending, admitted) = admit(args, session, changes, &command_ran(&record).output)?;
            record.file_changes_journaled = Some(true);
            return Ok(recorded(
                Executed::new(command_ran(&record)),
                record::to_value(&record),
                Some(Pending {
                    changes: pending,
                    admitted,
                    file_bytes_max: caps.bytes_max,
                    _layers: layers,
                }),
            ));
        }
        (Ok(_), None) => None,
        (Err(shown), _) => Some(shown),
    };
    if let Some(mut changes) = changes {
        // What the walls and deny globs would say of each path, were the changes applied.
        for change in &mut changes.changes {
            judge_shown(args, session, change);
        }
        record.dry_run = Some(changes);
    }
    Ok(recorded(
        Executed::new(command_ran(&record)),
        record::to_value(&record),
        None,
    ))
}

/// Marks a dry run's change with the code the walls, the deny globs or (for a link) its
/// target's check would refuse it with, were it applied.
fn judge_shown(args: &ProcessBodyArgs, session: &SessionContext, change: &mut ChangeShown) {
    let judged = args
        .policy
        .check_path(&change.path, AccessKind::Write, session, &FsResolver)
        .map(drop)
        .and_then(|()| match &change.kind {
            // A link: also where it points.
            record::ChangeKind::LinkCreated { target } => args.policy.check_link_target(
                std::path::Path::new(&change.path),
                target,
                session,
                &FsResolver,
            ),
            _ => Ok(()),
        });
    if let Err(refusal) = judged {
        change.refused = Some(refusal.code().code().to_owned());
    }
}

/// A handle primitive's result: the recorded answer is the result (playback renders it back
/// with [`handle_answered`]).
/// `run_command` without the sandbox, as `[processes] unconfined` allows (`why`): a plain
/// child process ([`aido_sandbox::run_unconfined`]). Its record says `unconfined` with why, and
/// that its file changes are not journaled effects. A dry run needs the sandbox's layer.
async fn run_unconfined(
    args: &ProcessBodyArgs,
    request: &aido_sandbox::Request,
    why: &str,
    dry_run: bool,
) -> Result<Ran, Failure> {
    if dry_run {
        return Err(ProcessError::InvalidCommand {
            why: format!("dry_run needs the sandbox's copy-on-write layer, and this command would run unconfined ({why})"),
        }
        .into_failure());
    }
    tracing::warn!(argv = ?request.argv, why, "a command runs without the sandbox");
    let sent = request.clone();
    let outcome = tokio::task::spawn_blocking(move || aido_sandbox::run_unconfined(&sent))
        .await
        .map_err(|error| Failure::from(aido_sandbox::SpawnError::protocol(error.to_string())))?
        .map_err(Failure::from)?;
    let mut profile = profile_of(&args.policy, &args.hidden);
    profile.writes = WriteMode::Direct;
    let mut record = record_of(request, &profile, &outcome);
    record.start.profile = json!({"confinement": "none"});
    record.unconfined = Some(Unconfined {
        why: why.to_owned(),
    });
    record.file_changes_journaled = Some(false);
    Ok(recorded(
        Executed::new(command_ran(&record)),
        record::to_value(&record),
        None,
    ))
}

/// A finished run's file changes, taken over: the layer of `roots[i]` is `layers/i/upper`;
/// its changes are read back and judged ([`admit`]) for the executor to apply. `command` (the
/// run's result or record) is in the details of a refusal. Blocking.
pub(super) fn take_over(
    args: &ProcessBodyArgs,
    session: &SessionContext,
    layers: Layers,
    roots: &[PathBuf],
    command: &Value,
) -> Result<Pending, Failure> {
    let caps = change_caps(&args.policy);
    let changes = aido_sandbox::collect_changes(&*layers.fd, roots, caps)
        .map_err(|error| refused_whole(error, command))?;
    let (changes, admitted) = admit(args, session, changes, command)?;
    Ok(Pending {
        changes,
        admitted,
        file_bytes_max: caps.bytes_max,
        _layers: layers,
    })
}

pub(super) fn answered(value: Value) -> Ran {
    recorded(Executed::new(handle_answered(&value)), value, None)
}

/// `run_command` with `background`: set up exactly as a finished command is (the walls, the
/// profile, an overlay layer of the write roots), started, and answered with its handle.
#[allow(clippy::too_many_lines)]
pub(super) async fn start_background(
    args: &ProcessBodyArgs,
    run: &RunCommand,
    session: &SessionContext,
    origin: &Origin,
    ticket: &Ticket,
) -> Result<Ran, Failure> {
    if run.dry_run {
        return Err(ProcessError::InvalidCommand {
            why: "a background command cannot be a dry run (stop_handle applies its changes)"
                .into(),
        }
        .into_failure());
    }
    // With `[processes] egress`, the command has its own egress proxy for as long as it runs.
    let Prepared {
        request,
        mut profile,
        layers,
        exe,
    } = prepare(args, run, session)?;
    let info = json!({
        "argv": request.argv,
        "cwd": request.cwd,
        "pty": run.pty,
        "session": origin.session,
        "proposal": origin.proposal,
        "started_unix_ms": origin.now_ms,
        "layers_dir": layers.dir,
    });
    let (id, registry) = args.handles.reserve(&info)?;
    if !ticket.commit() {
        let _ = std::fs::remove_file(&registry);
        return Err(Failure::new(
            "body_timeout",
            "the call was abandoned before it ran",
        ));
    }
    // It joins the network of the session's running background commands, or makes one they
    // and the session's later commands join.
    let options = StartOptions {
        pty: run.pty.then_some((24, 80)),
        share_network: true,
    };
    let cell = Cell::new(if run.pty { 1 } else { 2 });
    // The session's /tmp stays while the command runs, even past the session's end.
    let (tmp, tmpfs) = session_tmp(args, run, &origin.session, &mut profile)?;
    let shared_tmp = tmp.is_some();
    // Its exposed ports' relays end with it.
    let exposed: Arc<std::sync::Mutex<Exposures>> = Arc::default();
    let on_end = {
        let on_end = cell.on_end();
        let exposed = Arc::clone(&exposed);
        Box::new(move |end| {
            on_end(end);
            drop(tmp);
            if let Ok(mut exposed) = exposed.lock() {
                exposed.ended = true;
                exposed.relays.clear();
            }
        }) as aido_sandbox::OnEnd
    };
    let joined = args.handles.network_of(&origin.session);
    let sandbox = Sandbox::new(exe.clone())
        .with_globs(Arc::clone(&args.globs))
        .with_network(joined.clone())
        .with_tmp(tmpfs);
    let (profile_sent, request_sent) = (profile.clone(), request.clone());
    let started = tokio::task::spawn_blocking(move || {
        sandbox.start(&profile_sent, &request_sent, options, on_end)
    })
    .await
    .map_err(|error| Failure::from(aido_sandbox::SpawnError::protocol(error.to_string())));
    let started = match started {
        Ok(Ok(started)) => started,
        Ok(Err(error)) => {
            let _ = std::fs::remove_file(&registry);
            return Err(Failure::from(error));
        }
        Err(failure) => {
            let _ = std::fs::remove_file(&registry);
            return Err(failure);
        }
    };
    let network = started.network.clone().or(joined);
    let relays = match expose(&exe, network, &run.expose_ports).await {
        Ok(relays) => relays,
        Err(failure) => {
            started.control.kill();
            let _ = std::fs::remove_file(&registry);
            return Err(failure);
        }
    };
    let hosts: Vec<String> = relays.iter().map(|relay| relay.host.to_string()).collect();
    if let Ok(mut exposed) = exposed.lock()
        && !exposed.ended
    {
        exposed.relays = relays;
    }
    cell.read(started.output);
    let record = HandleStart {
        start: start_record(&request, &profile),
        handle: id.clone(),
        background: true,
        pty: run.pty,
        exposed: hosts,
        tmp: Some(tmp_of_record(shared_tmp)),
        network: started.network.as_ref().map(network_of_record),
    };
    let done = recorded(
        Executed::new(handle_started(&record)),
        record::to_value(&record),
        None,
    );
    args.handles.insert(
        id,
        registry,
        info,
        (record, profile.writable_roots),
        (started.control, started.network),
        cell,
        layers,
    );
    Ok(done)
}

/// A background command's exposed ports: the relays, dropped when it ends.
#[derive(Debug, Default)]
struct Exposures {
    ended: bool,
    relays: Vec<aido_sandbox::Exposed>,
}

/// `expose_ports` asks only what the policy's `[processes] expose_ports` lists, for a
/// background command on the session's shared loopback (one with egress has its own).
fn check_expose(args: &ProcessBodyArgs, run: &RunCommand) -> Result<(), Failure> {
    let processes = &args.policy.config().processes;
    for &port in &run.expose_ports {
        let why = if !run.background {
            "expose_ports needs background: true (a server that keeps running)"
        } else if !processes.expose_ports.contains(&port) {
            "[processes] expose_ports does not list it (the default lists none)"
        } else if !processes.egress.is_empty() {
            "a command with [processes] egress has a network namespace of its own (its proxy's), not the session's shared loopback"
        } else {
            continue;
        };
        return Err(ProcessError::ExposeRefused {
            port,
            why: why.into(),
        }
        .into_failure());
    }
    Ok(())
}

/// Binds each port on the host's 127.0.0.1 and starts its relay into `network`.
async fn expose(
    exe: &std::path::Path,
    network: Option<aido_sandbox::SharedNetwork>,
    ports: &[u16],
) -> Result<Vec<aido_sandbox::Exposed>, Failure> {
    /// Connections one exposed port relays at once.
    const CONNECTIONS_MAX: usize = 64;
    if ports.is_empty() {
        return Ok(Vec::new());
    }
    let Some(network) = network else {
        return Err(ProcessError::ExposeRefused {
            port: ports[0],
            why: "the command has no shared network namespace to expose".into(),
        }
        .into_failure());
    };
    let (exe, ports) = (exe.to_owned(), ports.to_vec());
    tokio::task::spawn_blocking(move || {
        ports
            .iter()
            .map(|&port| {
                aido_sandbox::Exposed::start(&exe, &network, port, CONNECTIONS_MAX).map_err(
                    |error| {
                        ProcessError::ExposeRefused {
                            port,
                            why: error.to_string(),
                        }
                        .into_failure()
                    },
                )
            })
            .collect()
    })
    .await
    .map_err(|error| Failure::from(aido_sandbox::SpawnError::protocol(error.to_string())))?
}

/// `stop_handle`: the tree stopped (see [`HandleTable::stop`]), then its file changes judged
/// as a finished command's are, and handed to the filesystem body to apply.
pub(super) async fn stop_handle(
    args: &ProcessBodyArgs,
    stop: &StopHandle,
    session: &SessionContext,
) -> Result<Ran, Failure> {
    let grace_ms = stop
        .grace_ms
        .unwrap_or(StopHandle::GRACE_MS_DEFAULT)
        .min(StopHandle::GRACE_MS_MAX);
    let (handle, state, layers) = args.handles.stop(&stop.handle, grace_ms).await?;
    let mut record = HandleStop {
        start: handle.record.clone(),
        state,
        file_changes_journaled: false,
    };
    let Some(layers) = layers else {
        // Stopped before: its changes went with that stop.
        return Ok(stopped(&record, None));
    };
    let roots: Vec<PathBuf> = handle
        .roots
        .iter()
        .map(|root| root.canonicalize().unwrap_or_else(|_| root.clone()))
        .collect();
    let fd = layers.fd.clone();
    let caps = change_caps(&args.policy);
    let command = handle_stopped(&record).output;
    let changes =
        tokio::task::spawn_blocking(move || aido_sandbox::collect_changes(&*fd, &roots, caps))
            .await
            .map_err(|error| Failure::from(aido_sandbox::SpawnError::protocol(error.to_string())))?
            .map_err(|error| refused_whole(error, &command))?;
    let (pending, admitted) = admit(args, session, changes, &command)?;
    record.file_changes_journaled = true;
    Ok(stopped(
        &record,
        Some(Pending {
            changes: pending,
            admitted,
            file_bytes_max: caps.bytes_max,
            _layers: layers,
        }),
    ))
}

fn stopped(record: &HandleStop, pending: Option<Pending>) -> Ran {
    recorded(
        Executed::new(handle_stopped(record)),
        record::to_value(record),
        pending,
    )
}

/// `executed` with the record it was rendered from as its answer (what playback renders from).
fn recorded(mut executed: Executed, record: Value, pending: Option<Pending>) -> Ran {
    executed.outcome.inputs.push(Input::Answer {
        from: ANSWERED_BY.into(),
        value: record,
    });
    Ran { executed, pending }
}

/// One entry of a removed directory: `Ok(is_dir)`, or what it is when it cannot be taken over.
type TreeEntry = (PathBuf, Result<bool, &'static str>);

/// Most entries of a removed directory taken over.
const REMOVED_TREE_ENTRIES_MAX: usize = 100_000;

/// A removed directory as the host still has it: every entry, deepest first (a directory after
/// what it holds, itself last), each `Ok(true)` for a directory, `Ok(false)` for a regular file,
/// `Err(what)` for anything that cannot be taken over (a symbolic link, a device). Links are
/// never followed. Too many entries, or an unreadable directory, is the refusal's code.
fn removed_tree(top: &std::path::Path) -> Result<Vec<TreeEntry>, &'static str> {
    fn visit(dir: &std::path::Path, out: &mut Vec<TreeEntry>) -> Result<(), &'static str> {
        let entries = std::fs::read_dir(dir).map_err(|_| "sandbox_changes_unreadable")?;
        for entry in entries {
            let entry = entry.map_err(|_| "sandbox_changes_unreadable")?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|_| "sandbox_changes_unreadable")?;
            if out.len() >= REMOVED_TREE_ENTRIES_MAX {
                return Err("command_changes_too_large");
            }
            if kind.is_dir() {
                visit(&path, out)?;
                out.push((path, Ok(true)));
            } else if kind.is_file() || kind.is_symlink() {
                // A link is removed as itself (what it pointed at is kept).
                out.push((path, Ok(false)));
            } else {
                out.push((path, Err("special file")));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    visit(top, &mut out)?;
    out.push((top.to_owned(), Ok(true)));
    Ok(out)
}

/// A command's changes refused whole before any was judged or applied (past the policy's
/// caps, or unreadable): the command's own result goes with the refusal, as with a refused
/// path.
fn refused_whole(error: aido_sandbox::SpawnError, command: &Value) -> Failure {
    let details = json!({
        "error": serde_json::to_value(&error).unwrap_or_default(),
        "command": command,
    });
    Failure::from(error).with_details(details)
}

/// Judge every change a command made, as its own primitive would be judged: a path the walls
/// or deny globs refuse (for a symbolic link, also one pointing into a denied path), a kind the
/// journal cannot take over (a device, a fifo, one inside a removed directory, a name that is
/// not UTF-8) refuses them all, and the call fails naming each, with the command's result in
/// the details. Nothing is applied then.
#[allow(clippy::too_many_lines)]
fn admit(
    args: &ProcessBodyArgs,
    session: &SessionContext,
    changes: Vec<Change>,
    command: &Value,
) -> Result<(Vec<CommandChange>, aido_policy::Admissions), Failure> {
    // Each path admitted here is handed on, so the filesystem body's staging does not judge
    // it again.
    let checks = std::cell::RefCell::new(Vec::new());
    let walls = |path: &std::path::Path, kind| {
        args.policy
            .check_path(&path.display().to_string(), kind, session, &FsResolver)
            .map(|check| checks.borrow_mut().push(check))
            .map_err(|refusal| refusal.code().code())
    };
    let unsupported = |path: &std::path::Path, what: &str| {
        ProcessError::ChangeUnsupported {
            path: path.display().to_string(),
            what: what.to_owned(),
        }
        .code()
    };
    let mut admitted = Vec::new();
    let mut refused = Vec::new();
    let mut refuse = |path: &std::path::Path, change: &str, code: &str| {
        // Shown as text (a name that is not UTF-8 shows U+FFFD): serializing the path itself
        // would fail on exactly the names refused for it.
        refused.push(json!({"path": path.display().to_string(), "change": change, "code": code}));
    };
    for change in changes {
        match change {
            Change::File {
                path,
                mode,
                mtime_ns,
                contents,
                ..
            } => match (walls(&path, AccessKind::Write), contents) {
                (Err(code), _) => refuse(&path, "changed", code),
                (Ok(()), Some(upper)) => admitted.push(CommandChange::File {
                    path,
                    mode,
                    mtime_ns: Some(mtime_ns),
                    contents: Contents::Layer {
                        dir: upper.dir,
                        name: upper.name,
                    },
                }),
                (Ok(()), None) => refuse(&path, "changed", "sandbox_changes_unreadable"),
            },
            Change::Dir {
                path,
                mode,
                mtime_ns,
                upper,
            } => match walls(&path, AccessKind::Write) {
                Err(code) => refuse(&path, "changed", code),
                Ok(()) => admitted.push(CommandChange::Dir {
                    path,
                    mode,
                    mtime_ns: Some(mtime_ns),
                    layer: upper.map(|upper| Contents::Layer {
                        dir: upper.dir,
                        name: upper.name,
                    }),
                }),
            },
            // A directory whose bits changed: the filesystem body keeps its time.
            Change::DirMode { path, mode, .. } => match walls(&path, AccessKind::Write) {
                Err(code) => refuse(&path, "changed", code),
                Ok(()) => admitted.push(CommandChange::Dir {
                    path,
                    mode,
                    mtime_ns: None,
                    layer: None,
                }),
            },
            Change::Removed { path, dir } => match walls(&path, AccessKind::Delete) {
                Err(code) => refuse(&path, "changed", code),
                Ok(()) if !dir => admitted.push(CommandChange::Removed { path }),
                // What it held, deepest first, each judged as its own removal.
                Ok(()) => match removed_tree(&path) {
                    Err(code) => refuse(&path, "dir_removed", code),
                    Ok(entries) => {
                        for (entry, kind) in entries {
                            match (kind, walls(&entry, AccessKind::Delete)) {
                                (Err(what), _) => refuse(&entry, what, unsupported(&entry, what)),
                                (Ok(_), Err(code)) => refuse(&entry, "removed", code),
                                (Ok(true), Ok(())) => {
                                    admitted.push(CommandChange::RemovedDir { path: entry });
                                }
                                (Ok(false), Ok(())) => {
                                    admitted.push(CommandChange::Removed { path: entry });
                                }
                            }
                        }
                    }
                },
            },
            // The link is the change; where it points is judged too (not into a denied path).
            Change::Symlink { path, target } => {
                match (walls(&path, AccessKind::Write), target.to_str()) {
                    (Err(code), _) => refuse(&path, "link_created", code),
                    (Ok(()), None) => refuse(&path, "link_created", "path_not_utf8"),
                    (Ok(()), Some(points_to)) => {
                        match args
                            .policy
                            .check_link_target(&path, points_to, session, &FsResolver)
                        {
                            Err(refusal) => refuse(&path, "link_created", refusal.code().code()),
                            Ok(()) => admitted.push(CommandChange::Link {
                                path,
                                target: points_to.to_owned(),
                            }),
                        }
                    }
                }
            }
            Change::Unsupported { path, what, code } => {
                let code = if code == "path_not_utf8" {
                    "path_not_utf8"
                } else {
                    unsupported(&path, &what)
                };
                refuse(&path, "unsupported", code);
            }
        }
    }
    if refused.is_empty() {
        let admissions = aido_policy::Admissions::new(session.cwd.clone(), checks.into_inner());
        return Ok((admitted, admissions));
    }
    let paths: Vec<String> = refused
        .iter()
        .filter_map(|r| r["path"].as_str().map(str::to_owned))
        .take(5)
        .collect();
    let count = refused.len();
    // The details list at most a bounded number of refusals (a command that wrote 100,000
    // denied files must not make a record of them all).
    refused.truncate(REFUSED_SHOWN_MAX);
    Err(ProcessError::ChangesRefused {
        count,
        paths: paths.join(", "),
    }
    .into_failure()
    .with_details(json!({
        "refused": refused,
        "refused_total": count,
        "command": command,
    })))
}

/// Refusals a failure's details list by path.
const REFUSED_SHOWN_MAX: usize = 200;

/// Which `/tmp` a command had, for the journal.
fn tmp_of_record(shared: bool) -> record::Tmp {
    if shared {
        record::Tmp::Session
    } else {
        record::Tmp::Command
    }
}

/// What the journal keeps of a command: everything its result is rendered from. Values of
/// secret-looking variables are kept as their blake3 only.
pub fn record_of(request: &Request, profile: &Profile, outcome: &Outcome) -> CommandRecord {
    let ended = CommandEnded {
        exit: match outcome.exit {
            aido_sandbox::Exit::Code(code) => Exit::Code(code),
            aido_sandbox::Exit::Signal(signal) => Exit::Signal(signal),
            aido_sandbox::Exit::TimedOut => Exit::TimedOut,
        },
        stdout: String::from_utf8_lossy(&outcome.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&outcome.stderr).into_owned(),
        stdout_bytes_total: outcome.stdout_bytes_total,
        stderr_bytes_total: outcome.stderr_bytes_total,
        stdout_truncated: outcome.stdout_truncated,
        stderr_truncated: outcome.stderr_truncated,
        duration_ms: outcome.duration_ms,
        usage: json!(outcome.usage),
        cgroup: outcome.cgroup.clone(),
        egress: outcome.egress.iter().map(|record| json!(record)).collect(),
        egress_totals: outcome.egress_totals.as_ref().map(|totals| json!(totals)),
    };
    CommandRecord::new(start_record(request, profile), ended)
}

/// What the journal says of a command's network when it is its session's shared one: the
/// namespace (`net:[inode]`, as `/proc/PID/ns/net` names it).
fn network_of_record(network: &aido_sandbox::SharedNetwork) -> SessionNetwork {
    SessionNetwork {
        session_namespace: format!("net:[{}]", network.inode()),
    }
}

/// What the journal keeps of a command before it runs: the command line, its working
/// directory, its environment (secret-looking values as their blake3), its input's size, its
/// timeout and its profile.
pub fn start_record(request: &Request, profile: &Profile) -> CommandStart {
    CommandStart::new(
        request.argv.clone(),
        &request.cwd,
        &request.env,
        (request.stdin.len(), request.timeout_ms),
        json!(profile),
    )
}

impl ProcessError {
    pub fn into_failure(self) -> Failure {
        Failure::new(self.code(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_values_are_journaled_as_hashes() {
        let mut request = Request::new(["true"], std::path::Path::new("/"));
        request.env.insert("API_KEY".into(), "hunter2".into());
        request.env.insert("MODE".into(), "fast".into());
        let profile = Profile::new(vec![]);
        let outcome = Outcome {
            exit: aido_sandbox::Exit::Code(0),
            stdout: b"ok\n".to_vec(),
            stderr: Vec::new(),
            stdout_bytes_total: 3,
            stderr_bytes_total: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            usage: Default::default(),
            cgroup: None,
            duration_ms: 1,
            egress: Vec::new(),
            egress_totals: None,
        };
        let typed = record_of(&request, &profile, &outcome);
        let record = record::to_value(&typed);
        assert_eq!(record["env"]["MODE"], "fast");
        assert!(!record.to_string().contains("hunter2"));
        assert_eq!(
            record["env"]["API_KEY"]["blake3"],
            blake3::hash(b"hunter2").to_hex().to_string()
        );
        let ran = command_ran(&typed);
        assert_eq!(ran.output["exit_code"], 0);
        assert_eq!(ran.output["stdout"], "ok\n");
    }
}
