//! The body table: one [`Slot`] per body this build holds. The protocol every body speaks
//! (tickets, replies, the one actor, restarts within a budget, the crash each call is
//! answered with) is `aido-call`'s; a new body is a [`aido_call::Body`], a field here, an
//! entry in [`Bodies::all`], and a group of the `actions!` table it matches without a
//! wildcard.

pub use aido_call::{RESTART_WINDOW_MS, RESTARTS_MAX};
use aido_call::{Slot, Supervised};
use ractor::ActorId;

use std::sync::Arc;

use aido_journal::Journal;
use aido_policy::{Config, Environment, PolicyEngine};

use crate::clock::Clock;
use crate::faults::Faults;
#[cfg(feature = "prim-browser")]
use aido_body_browser::{BrowserBody, BrowserBodyArgs};
#[cfg(feature = "prim-desktop")]
use aido_body_desktop::{DesktopBody, DesktopBodyArgs};
use aido_body_fs::{FsBody, FsBodyArgs};
#[cfg(feature = "prim-gateway")]
use aido_body_gateway::{GatewayBody, GatewayBodyArgs};
#[cfg(feature = "prim-memory")]
use aido_body_memory::{MemoryBody, MemoryBodyArgs};
#[cfg(feature = "prim-net")]
use aido_body_net::{NetBody, NetBodyArgs};
#[cfg(feature = "prim-process")]
use aido_body_process::{ProcessBody, ProcessBodyArgs, SessionTmps};
#[cfg(feature = "prim-search")]
use aido_body_search::{SearchBody, SearchBodyArgs};
#[cfg(feature = "prim-vm")]
use aido_body_vm::{VmBody, VmBodyArgs};

/// The memory store's file in AIDO_HOME (shared by every aido process of that home).
pub const MEMORY_FILE: &str = "memory.sqlite";

/// The browser body's private profiles in AIDO_HOME (one directory per open session).
pub const BROWSER_DIR: &str = "browser";

/// The background commands' registry in AIDO_HOME (one file per live handle, and the lost).
pub const HANDLES_DIR: &str = "handles";

/// What the body table is built from: the runtime's options and what it made of them.
pub struct From<'a> {
    /// The effective config.
    pub config: &'a Config,
    /// Home and AIDO_HOME.
    pub env: &'a Environment,
    /// The journal (its blob store and place).
    pub journal: &'a Journal,
    /// The compiled policy.
    pub policy: &'a Arc<PolicyEngine>,
    /// Time and ids.
    pub clock: &'a Arc<dyn Clock>,
    /// Fault injection.
    pub faults: &'a Arc<Faults>,
}

/// A body table, and what the runtime keeps beside it.
pub struct Built {
    /// The table.
    pub bodies: Bodies,
    /// Each session's shared `/tmp` (the process body's).
    #[cfg(feature = "prim-process")]
    pub tmps: Arc<SessionTmps>,
}

/// The table of bodies.
pub struct Bodies {
    /// The filesystem body.
    pub fs: Slot<FsBody>,
    /// The VM body.
    #[cfg(feature = "prim-vm")]
    pub vm: Slot<VmBody>,
    /// The memory body.
    #[cfg(feature = "prim-memory")]
    pub memory: Slot<MemoryBody>,
    /// The process body.
    #[cfg(feature = "prim-process")]
    pub process: Slot<ProcessBody>,
    /// The search body.
    #[cfg(feature = "prim-search")]
    pub search: Slot<SearchBody>,
    /// The net body.
    #[cfg(feature = "prim-net")]
    pub net: Slot<NetBody>,
    /// The desktop body.
    #[cfg(feature = "prim-desktop")]
    pub desktop: Slot<DesktopBody>,
    /// The browser body.
    #[cfg(feature = "prim-browser")]
    pub browser: Slot<BrowserBody>,
    /// The gateway body (the downstream MCP servers).
    #[cfg(feature = "prim-gateway")]
    pub gateway: Slot<GatewayBody>,
    /// The downstream tools last listed.
    #[cfg(feature = "prim-gateway")]
    pub downstream_tools: aido_body_gateway::Registry,
}

impl Bodies {
    /// One slot per body this build holds, each with its arguments (the bodies start when
    /// the supervisor starts them).
    pub fn build(from: &From<'_>) -> Built {
        let (policy, aido_home) = (from.policy, &from.env.aido_home);
        let fs = FsBodyArgs {
            policy: policy.clone(),
            limits: from.config.limits.clone(),
            clock: from.clock.clone(),
            trash: aido_body_fs::actor::home_trash(&from.env.home),
            faults: from.faults.clone(),
            aido_home: aido_home.clone(),
            blobs: from.journal.blob_store(),
            journal_dir: from.journal.path().to_owned(),
        };
        #[cfg(feature = "prim-process")]
        let (process, tmps) = process_args(from);
        #[cfg(feature = "prim-gateway")]
        let downstream_tools = aido_body_gateway::Registry::default();
        let bodies = Bodies {
            fs: Slot::new(fs, Some(from.faults.clone())),
            #[cfg(feature = "prim-vm")]
            vm: Slot::new(
                VmBodyArgs {
                    clock: from.clock.clone(),
                    images: aido_home.join("vm").join("images"),
                    limits: from.config.vm.clone(),
                    computer: from.config.computer.clone(),
                },
                None,
            ),
            #[cfg(feature = "prim-memory")]
            memory: Slot::new(
                MemoryBodyArgs {
                    path: aido_home.join(MEMORY_FILE),
                    limits: Default::default(),
                },
                None,
            ),
            #[cfg(feature = "prim-process")]
            process: Slot::new(process, None),
            #[cfg(feature = "prim-search")]
            search: Slot::new(
                SearchBodyArgs {
                    policy: policy.clone(),
                    aido_home: std::fs::canonicalize(aido_home)
                        .unwrap_or_else(|_| aido_home.clone()),
                },
                None,
            ),
            #[cfg(feature = "prim-net")]
            net: Slot::new(
                NetBodyArgs {
                    policy: policy.clone(),
                },
                None,
            ),
            #[cfg(feature = "prim-desktop")]
            desktop: Slot::new(
                DesktopBodyArgs {
                    policy: policy.clone(),
                    // The bus socket lives in the runtime dir, and a unix socket path has at
                    // most 107 bytes: the system's temp dir keeps it short wherever
                    // AIDO_HOME is.
                    runtime_parent: std::env::temp_dir(),
                },
                None,
            ),
            #[cfg(feature = "prim-browser")]
            browser: Slot::new(
                BrowserBodyArgs {
                    policy: policy.clone(),
                    profiles: aido_home.join(BROWSER_DIR),
                },
                None,
            ),
            #[cfg(feature = "prim-gateway")]
            gateway: Slot::new(
                GatewayBodyArgs {
                    policy: policy.clone(),
                    // Without the executable to re-run, every stdio server's start is refused
                    // (downstream_sandbox_failed): they never run unconfined.
                    sandbox: aido_sandbox::Sandbox::new(
                        aido_sandbox::host_exe()
                            .map(|(exe, _)| exe)
                            .unwrap_or_default(),
                    ),
                    registry: downstream_tools.clone(),
                },
                None,
            ),
            #[cfg(feature = "prim-gateway")]
            downstream_tools,
        };
        Built {
            bodies,
            #[cfg(feature = "prim-process")]
            tmps,
        }
    }

    /// Every body, for supervision.
    pub fn all(&self) -> Vec<&dyn Supervised> {
        vec![
            &self.fs,
            #[cfg(feature = "prim-vm")]
            &self.vm,
            #[cfg(feature = "prim-memory")]
            &self.memory,
            #[cfg(feature = "prim-process")]
            &self.process,
            #[cfg(feature = "prim-search")]
            &self.search,
            #[cfg(feature = "prim-net")]
            &self.net,
            #[cfg(feature = "prim-desktop")]
            &self.desktop,
            #[cfg(feature = "prim-browser")]
            &self.browser,
            #[cfg(feature = "prim-gateway")]
            &self.gateway,
        ]
    }

    /// The body whose actor is `id`.
    pub fn find(&self, id: ActorId) -> Option<&dyn Supervised> {
        self.all().into_iter().find(|b| b.is(id))
    }
}

/// The process body's arguments: its layers, deny-glob index, handle table and the sessions'
/// shared `/tmp`s (which the runtime keeps too, to let each go with its session).
#[cfg(feature = "prim-process")]
fn process_args(from: &From<'_>) -> (ProcessBodyArgs, Arc<SessionTmps>) {
    let aido_home = &from.env.aido_home;
    let layers = aido_body_process::layers_base(aido_home, from.policy.write_roots());
    let tmps = Arc::new(SessionTmps::new(&layers));
    let args = ProcessBodyArgs {
        policy: from.policy.clone(),
        hidden: vec![aido_home.clone(), from.journal.path().to_owned()],
        globs: Arc::new(aido_sandbox::GlobIndex::persisted(
            aido_home.join(aido_body_process::DENY_GLOBS_FILE),
        )),
        layers,
        handles: Arc::new(aido_body_process::HandleTable::new(
            aido_home.join(HANDLES_DIR),
        )),
        tmps: Arc::clone(&tmps),
        faults: from.faults.clone(),
    };
    (args, tmps)
}
