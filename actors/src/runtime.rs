use std::path::PathBuf;
use std::sync::Arc;

use aido_journal::{Event, Journal, SessionId};
use aido_policy::{Config, Environment, FsResolver, PolicyEngine, SessionContext};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};

use aido_call::{Restarted, Supervised};

use crate::bodies::Bodies;
use crate::clock::Clock;
use crate::error::StartError;
use crate::faults::Faults;
use crate::session::{Session, SessionActor, SessionArgs};
use crate::shared::Shared;
#[cfg(feature = "prim-vm")]
use crate::vm::VmMsg;

/// How long a tool list waits for the downstream servers to list theirs.
#[cfg(feature = "prim-gateway")]
const DOWNSTREAM_LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a runtime is built from.
pub struct RuntimeOptions {
    /// The effective config.
    pub config: Config,
    /// Home and AIDO_HOME.
    pub env: Environment,
    /// The journal every session writes to.
    pub journal: Journal,
    /// Time and ids.
    pub clock: Arc<dyn Clock>,
}

/// A running aido: the supervisor, its bodies, and the sessions opened on it.
pub struct Runtime {
    shared: Arc<Shared>,
    supervisor: ActorRef<RuntimeMsg>,
    handle: tokio::task::JoinHandle<()>,
}

pub use crate::bodies::MEMORY_FILE;
pub use crate::shared::{DefinedTool, QUESTIONS_FILE, SCRIPTS_DIR, VERSION};

/// How long a look at a body for a person (a machine's screen, its names) may wait.
#[cfg(any(
    feature = "prim-vm",
    feature = "prim-browser",
    feature = "prim-gateway"
))]
const LOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Runtime {
    /// Compile the policy, start the supervisor and the filesystem body.
    pub async fn start(options: RuntimeOptions) -> Result<Self, StartError> {
        // A family this build lacks is refused by the policy, so simulate says so too.
        let policy = Arc::new(
            PolicyEngine::new(&options.config, &options.env, &FsResolver)?
                .without_bodies(crate::families::unbuilt()),
        );
        // The runtime's own session is journaled only when something happens to the runtime
        // itself (a body restart), so quiet runs do not add a session per start.
        let runtime_session = options.clock.session_id();
        let faults = Arc::new(Faults::default());
        let built = Bodies::build(&crate::bodies::From {
            config: &options.config,
            env: &options.env,
            journal: &options.journal,
            policy: &policy,
            clock: &options.clock,
            faults: &faults,
        });
        let shared = Arc::new(Shared {
            journal: options.journal,
            policy,
            clock: options.clock.clone(),
            bodies: built.bodies,
            runtime_session,
            runtime_session_started: tokio::sync::Mutex::new(false),
            faults,
            questions: options.env.aido_home.join(QUESTIONS_FILE),
            grants: crate::grants::Grants::new(
                options.env.aido_home.join(crate::grants::GRANTS_FILE),
            ),
            scripts: options.env.aido_home.join(SCRIPTS_DIR),
            #[cfg(feature = "prim-artifact")]
            artifacts: crate::artifact::Artifacts::new(&options.env.aido_home),
            marks: Default::default(),
            observer: std::sync::OnceLock::new(),
            #[cfg(feature = "prim-process")]
            events: Default::default(),
            #[cfg(feature = "prim-process")]
            tmps: built.tmps,
        });
        let (supervisor, handle) = Actor::spawn(
            None,
            RuntimeActor,
            RuntimeArgs {
                shared: shared.clone(),
            },
        )
        .await
        .map_err(|e| StartError::Spawn {
            actor: "runtime",
            message: e.to_string(),
        })?;
        // Background commands of an aido process that ended died with it: each is journaled
        // as lost (its file changes were never applied).
        #[cfg(feature = "prim-process")]
        for lost in crate::process::recover_lost(
            &options.env.aido_home.join(crate::bodies::HANDLES_DIR),
            shared.clock.now_ms(),
        ) {
            tracing::warn!(handle = %lost.handle, "a background command was lost with its aido process");
            shared
                .journal_runtime(Event::HandleLost {
                    handle: lost.handle,
                    started_in: lost.session,
                    proposal: lost.proposal,
                    argv: lost.argv,
                    changes_discarded: lost.changes_discarded,
                })
                .await;
        }
        let recovered = crate::recovery::Recovery::recover(&shared).await;
        if recovered > 0 {
            tracing::warn!(
                recovered,
                "finished restores or rewinds a crash had interrupted"
            );
        }
        Ok(Self {
            shared,
            supervisor,
            handle,
        })
    }

    /// Tell `observer` about every action and journal write from now on (telemetry). A
    /// runtime has at most one observer: `false` if one was already set.
    pub fn observe(&self, observer: Arc<dyn crate::observe::Observer>) -> bool {
        self.shared.observer.set(observer).is_ok()
    }

    /// Open a session for one agent connection: journal its start and spawn its actor under
    /// the supervisor.
    pub async fn open_session(&self, client: Option<String>) -> Result<Session, StartError> {
        let cwd = self.shared.policy.workdir().to_owned();
        self.start_session(client, SessionContext::new(cwd), None)
            .await
    }

    /// Open a session that runs under the capability grant `token` names: it can never
    /// exceed the grant, and the grants it mints only narrow it. An invalid token starts
    /// nothing (`grant_token_invalid`).
    pub async fn open_session_granted(
        &self,
        client: Option<String>,
        token: String,
    ) -> Result<Session, StartError> {
        let mut ctx = SessionContext::new(self.shared.policy.workdir().to_owned());
        let grant = crate::grants::authenticate(&self.shared, token, &mut ctx).await?;
        self.start_session(client, ctx, Some(grant)).await
    }

    /// The id of the grant `token` names, if it is a token of this `AIDO_HOME`'s store.
    pub async fn grant_of(&self, token: &str) -> Result<String, StartError> {
        let mut ctx = SessionContext::new(self.shared.policy.workdir().to_owned());
        Ok(crate::grants::authenticate(&self.shared, token.to_owned(), &mut ctx).await?)
    }

    /// As [`Runtime::grant_of`], and refused when the grant (or one it was narrowed from) is
    /// revoked or expired: how `aido serve` checks a grant's bearer token on every request.
    pub async fn grant_live(&self, token: &str) -> Result<String, StartError> {
        Ok(crate::grants::live(&self.shared, token.to_owned()).await?)
    }

    async fn start_session(
        &self,
        client: Option<String>,
        ctx: SessionContext,
        grant: Option<String>,
    ) -> Result<Session, StartError> {
        let id = self.shared.clock.session_id();
        let event = Event::SessionStarted {
            client,
            cwd: ctx.cwd.display().to_string(),
            runtime: format!("aido {VERSION}"),
            grant,
        };
        self.shared
            .journal
            .append(id, self.shared.clock.now_ms(), event)
            .await?;
        self.spawn_session_with(id, ctx).await
    }

    /// Spawn the actor of session `id` under the supervisor.
    async fn spawn_session(&self, id: SessionId, cwd: PathBuf) -> Result<Session, StartError> {
        self.spawn_session_with(id, SessionContext::new(cwd)).await
    }

    async fn spawn_session_with(
        &self,
        id: SessionId,
        ctx: SessionContext,
    ) -> Result<Session, StartError> {
        let args = SessionArgs {
            shared: self.shared.clone(),
            id,
            ctx: ctx.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, SessionActor, args, self.supervisor.get_cell())
            .await
            .map_err(|e| StartError::Spawn {
                actor: "session",
                message: e.to_string(),
            })?;
        Ok(Session::new(id, actor, self.shared.clone(), ctx))
    }

    /// Continue an existing session (its records go on from its last seq), e.g. for a person
    /// rewinding it with `aido replay rewind`. Journals who resumed it.
    pub async fn resume_session(
        &self,
        id: SessionId,
        client: String,
    ) -> Result<Session, StartError> {
        let now = self.shared.clock.now_ms();
        self.shared
            .journal
            .append(id, now, Event::SessionResumed { client })
            .await?;
        let cwd = self.shared.policy.workdir().to_owned();
        self.spawn_session(id, cwd).await
    }

    /// A machine's screen (PNG) and pointer, for a person watching; not journaled.
    #[cfg(feature = "prim-vm")]
    pub async fn vm_peek(
        &self,
        vm: &str,
    ) -> Result<crate::vm::actor::Peeked, aido_actions::Failure> {
        self.shared
            .bodies
            .vm
            .ask(LOOK_TIMEOUT, |reply| VmMsg::Peek {
                vm: vm.to_owned(),
                reply,
            })
            .await
    }

    /// The running machines' names.
    #[cfg(feature = "prim-vm")]
    pub async fn vm_names(&self) -> Vec<String> {
        let names = self
            .shared
            .bodies
            .vm
            .ask(LOOK_TIMEOUT, |reply| VmMsg::Names { reply });
        names.await.unwrap_or_default()
    }

    /// What the VM body's warm pool holds, for a person watching (`None` before its first
    /// use); not journaled.
    #[cfg(feature = "prim-vm")]
    pub async fn vm_pool_status(&self) -> Option<crate::vm::PoolStatus> {
        let status = self
            .shared
            .bodies
            .vm
            .ask(LOOK_TIMEOUT, |reply| VmMsg::PoolStatus { reply });
        status.await.ok().flatten()
    }

    /// The question store's file (`AIDO_HOME/questions.sqlite`), where questions no client
    /// could ask wait for a person.
    pub fn questions_file(&self) -> &std::path::Path {
        &self.shared.questions
    }

    /// The defined functions and custom primitives an MCP tool list shows. Empty in a build
    /// without prim-script.
    pub fn defined_tools(&self) -> Vec<DefinedTool> {
        #[cfg(feature = "prim-script")]
        return crate::script::tools(&self.shared.scripts);
        #[cfg(not(feature = "prim-script"))]
        Vec::new()
    }

    /// The action a call of the defined tool `name` is: call_function or call_primitive
    /// (`None` when nothing of that name is defined, or in a build without prim-script).
    pub fn defined_call(
        &self,
        name: &str,
        args: aido_actions::script::Object,
    ) -> Option<aido_actions::Action> {
        #[cfg(feature = "prim-script")]
        return crate::script::tool_call(&self.shared.scripts, name, args);
        #[cfg(not(feature = "prim-script"))]
        {
            let _ = (name, args);
            None
        }
    }

    /// The tools of the downstream MCP servers (`[[downstream]]`), listed afresh, each as the
    /// MCP tool JSON a client is shown (its namespaced name, the server's own description,
    /// schemas and annotations). Empty without downstreams, or in a build without
    /// prim-gateway.
    pub async fn downstream_tools(&self) -> Vec<serde_json::Value> {
        #[cfg(feature = "prim-gateway")]
        {
            let listed = self
                .shared
                .bodies
                .gateway
                .ask(DOWNSTREAM_LIST_TIMEOUT, |reply| {
                    crate::gateway::GatewayMsg::Tools { reply }
                })
                .await
                .unwrap_or_default();
            listed
                .iter()
                .filter_map(|tool| serde_json::to_value(tool.exposed()).ok())
                .collect()
        }
        #[cfg(not(feature = "prim-gateway"))]
        Vec::new()
    }

    /// The action a call of the downstream tool `name` is (a `downstream_call`); `None` when
    /// no downstream listed a tool of that name.
    pub fn downstream_call(
        &self,
        name: &str,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<aido_actions::Action> {
        #[cfg(feature = "prim-gateway")]
        {
            let known = self.shared.bodies.downstream_tools.read().ok()?;
            known.iter().any(|tool| tool.name == name).then(|| {
                aido_actions::Action::DownstreamCall(aido_actions::downstream::DownstreamCall {
                    tool: name.to_owned(),
                    arguments: args.clone(),
                })
            })
        }
        #[cfg(not(feature = "prim-gateway"))]
        {
            let _ = (name, args);
            None
        }
    }

    /// The downstream servers (name, running, pid, tools' count), for Mission Control; empty
    /// without them or in a build without prim-gateway.
    pub async fn downstream_status(&self) -> Vec<serde_json::Value> {
        #[cfg(feature = "prim-gateway")]
        return self
            .shared
            .bodies
            .gateway
            .ask(LOOK_TIMEOUT, |reply| crate::gateway::GatewayMsg::Status {
                reply,
            })
            .await
            .unwrap_or_default();
        #[cfg(not(feature = "prim-gateway"))]
        Vec::new()
    }

    /// The open browsers (session, tabs), for Mission Control; empty in a build without
    /// prim-browser.
    pub async fn browser_sessions(&self) -> Vec<serde_json::Value> {
        #[cfg(feature = "prim-browser")]
        return self
            .shared
            .bodies
            .browser
            .ask(LOOK_TIMEOUT, |reply| crate::browser::BrowserMsg::Status {
                reply,
            })
            .await
            .unwrap_or_default();
        #[cfg(not(feature = "prim-browser"))]
        Vec::new()
    }

    /// A PNG of a session's browser's current tab; not journaled (a look, not an action).
    pub async fn browser_peek(&self, session: &str) -> Result<Vec<u8>, aido_actions::Failure> {
        #[cfg(feature = "prim-browser")]
        return self
            .shared
            .bodies
            .browser
            .ask(LOOK_TIMEOUT, |reply| crate::browser::BrowserMsg::Peek {
                session: session.to_owned(),
                reply,
            })
            .await;
        #[cfg(not(feature = "prim-browser"))]
        {
            let _ = session;
            Err(crate::families::not_built(aido_actions::Body::Browser))
        }
    }

    /// The runtime's clock (and randomness).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The compiled policy.
    pub fn policy(&self) -> &PolicyEngine {
        &self.shared.policy
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.shared.journal
    }

    /// The runtime's own journal session.
    pub fn runtime_session(&self) -> SessionId {
        self.shared.runtime_session
    }

    /// Fault injection: the filesystem body panics on its next message. For supervision tests.
    #[doc(hidden)]
    pub fn inject_body_panic(&self) {
        self.shared.faults.panic_next();
    }

    /// Fault injection knobs (slow or panicking bodies), for tests and the seeded simulation.
    #[doc(hidden)]
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Stop every actor and wait for the supervisor.
    pub async fn shutdown(self) {
        self.supervisor.stop(Some("shutdown".into()));
        let _ = self.handle.await;
        // A child started ahead for a command that never came: killed, its cgroup removed.
        #[cfg(feature = "prim-process")]
        let _ = tokio::task::spawn_blocking(aido_sandbox::discard_standby).await;
    }
}

/// The supervisor.
pub(crate) struct RuntimeActor;

pub(crate) struct RuntimeArgs {
    shared: Arc<Shared>,
}

pub(crate) struct RuntimeState {
    shared: Arc<Shared>,
    restarts: u64,
}

/// The supervisor takes no requests of its own; it exists to own and restart children.
pub(crate) enum RuntimeMsg {}

impl RuntimeState {
    /// Journal an event of the runtime's own session (started on its first record).
    async fn journal(&mut self, event: Event) {
        self.restarts += 1;
        self.shared.journal_runtime(event).await;
    }

    /// A body failed: restart it within its budget, and journal what became of it.
    async fn body_failed(&mut self, body: &dyn Supervised, supervisor: ActorCell, reason: String) {
        let name = body.name();
        tracing::error!(%reason, body = name, "a body crashed");
        match body.restart(supervisor, &reason).await {
            Restarted::Again => {
                self.journal(Event::BodyRestarted {
                    body: name.into(),
                    reason,
                })
                .await;
            }
            Restarted::Failed { restarts, why } => {
                tracing::error!(body = name, %why, "a body is stopped for good; its calls get body_failed");
                self.journal(Event::BodyFailed {
                    body: name.into(),
                    reason,
                    restarts,
                    why,
                })
                .await;
            }
        }
    }
}

impl Actor for RuntimeActor {
    type Msg = RuntimeMsg;
    type State = RuntimeState;
    type Arguments = RuntimeArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RuntimeMsg>,
        args: RuntimeArgs,
    ) -> Result<RuntimeState, ActorProcessingErr> {
        for body in args.shared.bodies.all() {
            body.start(myself.get_cell())
                .await
                .map_err(|e| format!("cannot start the {} body: {e}", body.name()))?;
        }
        Ok(RuntimeState {
            shared: args.shared,
            restarts: 0,
        })
    }

    /// Restart policy (see [`crate::bodies`]): a failed body is restarted at once, within its
    /// budget, and each restart is journaled in the runtime's session; past the budget it is
    /// marked failed and journaled so. Sessions are not restarted: a failed session actor ends
    /// that agent's session, and its calls get an error. Nothing here returns an error, so a
    /// failed restart never stops the supervisor.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RuntimeMsg>,
        event: SupervisionEvent,
        state: &mut RuntimeState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                let shared = state.shared.clone();
                match shared.bodies.find(cell.get_id()) {
                    Some(body) => {
                        state
                            .body_failed(body, myself.get_cell(), error.to_string())
                            .await
                    }
                    None => {
                        tracing::error!(actor = ?cell.get_id(), %error, "a session actor failed; its session ends")
                    }
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                tracing::debug!(actor = ?cell.get_id(), ?reason, "actor stopped");
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }
}

/// Where `~` points for a runtime when nothing says otherwise.
pub fn default_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}
