//! The process body's actor side: its messages, and each call handed to a task of its own
//! and dispatched to the work in `actor`, `remote` and `listing`.

use std::path::PathBuf;
use std::sync::Arc;

use aido_actions::{Failure, ProcessAction};
use aido_call::{Body, Calls, Reply, Turn};
use aido_policy::SessionContext;

use super::actor::{
    Origin, ProcessBodyArgs, Ran, answered, output_bytes_max, run_command, start_background,
    stop_handle,
};
use super::profile::profile_of;
use aido_call::ticket::Ticket;

/// The process body. Each call runs on a task of its own (the command on a blocking thread),
/// so one long command does not hold up the next.
pub struct ProcessBody {
    args: ProcessBodyArgs,
}

/// Messages to the process body.
pub enum ProcessMsg {
    /// Run one process primitive.
    Run {
        /// The action.
        action: Box<ProcessAction>,
        /// The session's context (its working directory).
        session: SessionContext,
        /// Which call it is.
        origin: Origin,
        /// The answer.
        reply: Reply<Ran>,
    },
}

impl Body for ProcessBody {
    const NAME: &'static str = "process";
    type Args = ProcessBodyArgs;
    type Msg = ProcessMsg;
    /// Its calls share nothing a panic can leave half-done (the handle table outlives the
    /// body anyway): a call that panics is that call's failure, and the body goes on.
    const RESTART_AFTER_PANIC: bool = false;

    async fn build(args: ProcessBodyArgs) -> Result<Self, String> {
        // The first walk of a large write root (a home) happens now, not in the first command;
        // choosing the child's host (which starts the helper once to read its build) too,
        // off the runtime's start. On a thread of its own, not tokio's blocking pool: a runtime
        // that ends (`aido exec`) must not wait for a walk nobody needs any more.
        let (globs, profile) = (
            Arc::clone(&args.globs),
            profile_of(&args.policy, &args.hidden),
        );
        // In `aido exec` too: the walk runs while the session opens, and its one command
        // takes the answer. It needs no executable, so it does not wait for the choice of one.
        std::thread::spawn(move || {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            if let Err(error) = globs.warm(&profile, home.as_deref()) {
                tracing::debug!("deny globs not expanded ahead: {error}");
            }
        });
        std::thread::spawn(|| {
            if let Ok((exe, why)) = aido_sandbox::host_exe() {
                tracing::info!(host = %exe.display(), why, "the sandbox child's executable");
            }
        });
        Ok(Self { args })
    }

    async fn handle(&mut self, msg: ProcessMsg, calls: &Calls) {
        match msg {
            ProcessMsg::Run {
                action,
                session,
                origin,
                reply,
            } => {
                let args = self.args.clone();
                // A command commits when it is about to start (a check never does).
                calls.task(reply, Turn::Shared, false, move |ticket| async move {
                    if args.faults.take_panic_in_process() {
                        panic!("injected fault: a process call panics");
                    }
                    process_call(&args, *action, &session, &origin, &ticket).await
                });
            }
        }
    }
}

/// One call of the process body, on its own task.
async fn process_call(
    args: &ProcessBodyArgs,
    action: ProcessAction,
    session: &SessionContext,
    origin: &Origin,
    ticket: &Ticket,
) -> Result<Ran, Failure> {
    match action {
        ProcessAction::RunCommand(run) if run.background => {
            start_background(args, &run, session, origin, ticket).await
        }
        ProcessAction::RunCommand(run) => run_command(args, &run, session, origin, ticket).await,
        ProcessAction::CheckHandle(check) => args
            .handles
            .check(&check, ticket.deadline(), output_bytes_max(&args.policy))
            .await
            .map(answered),
        ProcessAction::WriteStdin(write) => args.handles.write(&write).await.map(answered),
        ProcessAction::StopHandle(stop) => stop_handle(args, &stop, session).await,
        ProcessAction::ListHandles(_) => Ok(answered(args.handles.list())),
        ProcessAction::SshExec(ssh) => {
            let cap = output_bytes_max(&args.policy);
            super::remote::ssh_exec(args, &ssh, ticket, cap).await
        }
        ProcessAction::RunInSandbox(container) => {
            let cap = output_bytes_max(&args.policy);
            super::remote::run_in_sandbox(args, &container, session, ticket, cap).await
        }
        ProcessAction::RunContainerGroup(group) => {
            let cap = output_bytes_max(&args.policy);
            super::remote::run_container_group(args, &group, session, ticket, cap).await
        }
        ProcessAction::ListProcesses(list) => super::listing::list(args, &list).map(answered),
        // The executor runs these itself (they need the session and the
        // surface's notifier); none is ever sent here.
        ProcessAction::Subscribe(_)
        | ProcessAction::Unsubscribe(_)
        | ProcessAction::ListSubscriptions(_)
        | ProcessAction::WatchAndReact(_) => Err(aido_walk::error::RuntimeError::Internal {
            why: "a subscription primitive reached the process body".into(),
        }
        .into()),
    }
}
