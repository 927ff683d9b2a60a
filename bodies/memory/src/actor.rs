use std::path::PathBuf;

use aido_actions::memory::{self as args, ScopeKind};
use aido_actions::{Failure, MemoryAction};
use aido_call::{Body, Calls, Reply};
use aido_memory::{
    Expiry, ForgetFilter, ForgetRequest, ListRequest, MemoryId, MemoryStore, Provenance,
    RecallRequest, RememberRequest, Scope, Terms,
};
use serde_json::{Value, json};

use aido_walk::error::RuntimeError;

/// What it is built from; kept by the supervisor to build a fresh body after a crash.
#[derive(Clone, Debug)]
pub struct MemoryBodyArgs {
    /// The store's file (`AIDO_HOME/memory.sqlite`).
    pub path: PathBuf,
    /// The store's bounds.
    pub limits: aido_memory::Limits,
}

/// The memory body: the store, once opened (taken out while a call works on it). A serial
/// body: one call at a time, its work off the async workers.
pub struct MemoryBody {
    args: MemoryBodyArgs,
    store: Option<MemoryStore>,
}

/// Who is calling: the keys of this session's scopes, and the provenance of what it
/// remembers.
#[derive(Clone, Debug)]
pub struct MemoryCall {
    /// The session id (the `session` scope's key and the provenance's session).
    pub session: String,
    /// The seq of the proposal being run (the provenance's seq).
    pub proposal: u64,
    /// The project key (a hash of the session's project root).
    pub project: String,
}

/// Messages to the memory body.
pub enum MemoryMsg {
    /// Run one memory primitive.
    Run {
        /// The action.
        action: Box<MemoryAction>,
        /// Who calls.
        call: MemoryCall,
        /// The runtime's clock, read (and recorded) by the caller.
        now_ms: u64,
        /// The store's answer, as JSON (what the journal records and the result renders).
        reply: Reply<Value>,
    },
}

/// A coded error of the store as the agent sees it.
fn coded(code: &str, message: String) -> Failure {
    Failure::new(code, message)
}

macro_rules! store_try {
    ($e:expr) => {
        $e.map_err(|e| coded(e.code(), e.to_string()))?
    };
}

impl MemoryCall {
    fn scope(&self, kind: ScopeKind) -> Scope {
        match kind {
            ScopeKind::Global => Scope::Global,
            ScopeKind::Project => Scope::Project {
                key: self.project.clone(),
            },
            ScopeKind::Session => Scope::Session {
                id: self.session.clone(),
            },
        }
    }

    /// The scopes named, or every scope this session may see when none is.
    fn visible(&self, kinds: &[ScopeKind]) -> Vec<Scope> {
        let kinds = if kinds.is_empty() {
            &[ScopeKind::Global, ScopeKind::Project, ScopeKind::Session][..]
        } else {
            kinds
        };
        let mut scopes: Vec<Scope> = kinds.iter().map(|k| self.scope(*k)).collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|e| {
        Failure::from(RuntimeError::Internal {
            why: format!("the memory store's answer is not JSON: {e}"),
        })
    })
}

/// Run one primitive on the store; the answer is what the result is rendered from.
fn run(
    store: &mut MemoryStore,
    action: &MemoryAction,
    call: &MemoryCall,
    now_ms: u64,
) -> Result<Value, Failure> {
    match action {
        MemoryAction::Remember(a) => {
            let scope = call.scope(a.scope);
            let provenance = Provenance {
                session: call.session.clone(),
                seq: call.proposal,
                // Nothing tells the body yet whether the text came from a fetched page or a
                // command's output (aido has no such primitives yet); when it does, the
                // taint travels here.
                untrusted: false,
            };
            let request = RememberRequest {
                text: a.text.clone(),
                scope: scope.clone(),
                tags: a.tags.clone(),
                expiry: a.expiry.map(|e| match e {
                    args::Expiry::AtMs(at) => Expiry::AtMs(at),
                    args::Expiry::AfterMs(after) => Expiry::AfterMs(after),
                }),
                provenance: provenance.clone(),
            };
            let done = store_try!(store.remember(&request, now_ms));
            Ok(json!({
                "id": done.id,
                "created_ms": done.created_ms,
                "expires_ms": done.expires_ms,
                "scope": to_json(&scope)?,
                "provenance": to_json(&provenance)?,
            }))
        }
        MemoryAction::Recall(a) => {
            let request = RecallRequest {
                query: a.query.clone(),
                scopes: call.visible(&a.scopes),
                tags: a.tags.clone(),
                terms: match a.terms {
                    args::Terms::Any => Terms::Any,
                    args::Terms::All => Terms::All,
                },
                limit: a.limit,
                budget_chars: a.budget_chars,
                cursor: a.cursor.clone(),
            };
            to_json(&store_try!(store.recall(&request, now_ms)))
        }
        MemoryAction::ListMemory(a) => {
            let request = ListRequest {
                scopes: call.visible(&a.scopes),
                tags: a.tags.clone(),
                limit: a.limit,
                budget_chars: a.budget_chars,
                cursor: a.cursor.clone(),
            };
            to_json(&store_try!(store.list_memory(&request, now_ms)))
        }
        MemoryAction::Forget(a) => {
            let request = match (a.id, a.has_filter()) {
                (Some(_), true) => {
                    return Err(RuntimeError::InvalidArguments {
                        why: "give id or a filter (scopes, tags, session, seq_min), not both"
                            .into(),
                    }
                    .into());
                }
                (Some(id), false) => ForgetRequest::Id(MemoryId(id)),
                // No filter at all: the store refuses it (memory_forget_filter_empty); a
                // filter is held to the scopes this session may see.
                (None, false) => ForgetRequest::Filter(ForgetFilter::default()),
                (None, true) => ForgetRequest::Filter(ForgetFilter {
                    scopes: call.visible(&a.scopes),
                    tags: a.tags.clone(),
                    session: a.session.clone(),
                    seq_min: a.seq_min,
                }),
            };
            to_json(&store_try!(store.forget(&request, now_ms)))
        }
    }
}

/// Open the store, creating AIDO_HOME if it is not there yet.
fn open(args: &MemoryBodyArgs) -> Result<MemoryStore, Failure> {
    if let Some(dir) = args.path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            coded(
                "memory_store_unopenable",
                format!("cannot create {}: {e}", dir.display()),
            )
        })?;
    }
    MemoryStore::open(&args.path, args.limits.clone()).map_err(|e| coded(e.code(), e.to_string()))
}

impl Body for MemoryBody {
    const NAME: &'static str = "memory";
    type Args = MemoryBodyArgs;
    type Msg = MemoryMsg;

    async fn build(args: MemoryBodyArgs) -> Result<Self, String> {
        Ok(Self { args, store: None })
    }

    async fn handle(&mut self, msg: MemoryMsg, _calls: &Calls) {
        let MemoryMsg::Run {
            action,
            call,
            now_ms,
            reply,
        } = msg;
        // Remember and forget commit first, so their caller waits for the answer.
        let Some(reply) = reply.take(action.class().mutates()) else {
            return;
        };
        let store = self.store.take();
        let args = self.args.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let mut store = match store {
                Some(store) => store,
                None => match open(&args) {
                    Ok(store) => store,
                    Err(failure) => return (None, Err(failure)),
                },
            };
            let answer = run(&mut store, &action, &call, now_ms);
            (Some(store), answer)
        })
        .await;
        match joined {
            Ok((store, answer)) => {
                self.store = store;
                reply.send(answer);
            }
            Err(e) => reply.crash(e),
        }
    }
}
