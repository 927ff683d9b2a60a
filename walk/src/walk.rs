//! The composite walk. Pipelines, `try`, `if`, `assert` and `safe_change` are walked here, the
//! same way whether the world is live (bodies change files and machines, and each leaf
//! records what it read) or recorded (playback hands each leaf the inputs the journal holds).
//! The walker decides the order of leaves, what a failure leaves behind and how a composite's
//! result is built from its children's, so playback cannot drift from execution: there is one
//! copy of that logic.

use std::future::Future;
use std::pin::Pin;

use aido_actions::Failure;
use aido_actions::{
    Action, ArtifactAction, BrowserAction, Condition, DesktopAction, FsAction, GatewayAction,
    HumanAction, Input, MemoryAction, NetAction, Outcome, ProcessAction, Routed, RuntimeAction,
    ScriptAction, SearchAction, SideEffectClass, TreeAction, VmAction,
};

use crate::render;

/// What a leaf or a subtree returns: the outcome, and the bytes of every blob its effects and
/// inputs name, for the journal to keep (each with its blake3, computed once where the bytes
/// were). Played back, `blobs` is empty: the journal already holds them.
#[derive(Clone, Debug, Default)]
pub struct Executed {
    /// What the agent sees and the journal records.
    pub outcome: Outcome,
    /// Contents named by the effects and inputs (new and previous file contents, what was
    /// read), each with its blake3 (hex).
    pub blobs: Vec<(String, Vec<u8>)>,
}

impl Executed {
    /// A result with no blobs.
    pub fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            blobs: Vec::new(),
        }
    }

    /// Add what `from` changed, read and kept.
    pub fn absorb(&mut self, from: Executed) {
        self.outcome.effects.extend(from.outcome.effects);
        self.outcome.inputs.extend(from.outcome.inputs);
        self.blobs.extend(from.blobs);
    }
}

/// A failed subtree and what it changed (and read) before failing.
#[derive(Debug)]
pub struct Failed {
    /// Why.
    pub failure: Failure,
    /// What it did before failing.
    pub partial: Executed,
}

impl From<Failure> for Failed {
    fn from(failure: Failure) -> Self {
        Self {
            failure,
            partial: Executed::default(),
        }
    }
}

impl Failed {
    /// A leaf's failure. It is observed, so it is recorded as the leaf's only input: what the
    /// leaf saw before failing is dropped, and playback finds the failure where the leaf would
    /// have recorded its first input.
    pub fn leaf(failure: Failure) -> Self {
        let mut partial = Executed::default();
        partial.outcome.inputs.push(Input::Failed {
            failure: failure.clone(),
        });
        Self { failure, partial }
    }
}

/// A leaf's answer: its result or its failure, or (`Err`) the world cannot answer at all and
/// the walk stops (playback: an input the record does not hold; live: never).
pub type Answer<T, Stop> = Result<Result<T, Failure>, Stop>;

/// A subtree's answer.
pub type Walked<Stop> = Result<Result<Executed, Failed>, Stop>;

/// Where the leaves run: the live bodies, or the inputs a journal recorded. Every method is
/// one question the walk asks at a leaf; the walk itself is [`walk`].
pub trait World: Send {
    /// Why a walk stops without an answer (playback: an input is missing or damaged).
    type Stop: Send;

    /// Checked before each node runs: the failure it ends with before doing anything
    /// (live: the agent cancelled the call; playback: the record says the node failed or was
    /// cancelled there). `leaf` tells a leaf (whose failure is its one recorded input) from a
    /// composite.
    fn interrupted(&mut self, action: &Action, leaf: bool) -> Option<Failed>;

    /// A pipeline reached step `done` of `total`.
    fn progress(&mut self, _done: u64, _total: u64, _what: String) {}

    /// Run a filesystem primitive.
    fn filesystem(
        &mut self,
        action: FsAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a machine primitive.
    fn machine(
        &mut self,
        action: VmAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a memory primitive (remember, recall, forget, list_memory). Its result is
    /// [`crate::memory::render`] of the store's answer, which is recorded with the clock.
    fn memory(
        &mut self,
        action: MemoryAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a search primitive (search_code, search_and_read). Its result is
    /// [`crate::search::render`] of what the search found, which is recorded.
    fn search(
        &mut self,
        action: SearchAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a network primitive (http_request, fetch_url, port_check, dns_lookup). Its result
    /// is [`crate::net::render`] of the recorded exchange.
    fn net(
        &mut self,
        action: NetAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a desktop primitive (screenshot, click, type_text, ...). Its result is
    /// [`crate::desktop::render`] of the desktop body's answer, which is recorded.
    fn desktop(
        &mut self,
        action: DesktopAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a browser primitive (browser_navigate, browser_click, browser_snapshot, ...). Its
    /// result is [`crate::browser::render`] of the browser body's answer, which is recorded.
    fn browser(
        &mut self,
        action: BrowserAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Call a downstream MCP server's tool (downstream_call). Its result is
    /// [`crate::downstream::render`] of the server's answer, which is recorded.
    fn gateway(
        &mut self,
        action: GatewayAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Ask a human (ask_human, confirm, ask_multiple_choice, check_answer). Its result is
    /// [`crate::human::render`] of the recorded answer.
    fn human(
        &mut self,
        action: HumanAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a composite function's primitive (define, call, list, delete). A call's host calls
    /// are child actions journaled on their own; its result is [`crate::script::render`] of
    /// the recorded answer.
    fn script(
        &mut self,
        action: ScriptAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run an artifact primitive (create, list, serve, save, stop, destroy). Its result is
    /// [`crate::artifact::render`] of the artifact body's recorded answer.
    fn artifact(
        &mut self,
        action: ArtifactAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a process primitive (a confined command).
    fn process(
        &mut self,
        action: ProcessAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Run a primitive of the runtime itself (policy answers, history, snapshots, rewinds,
    /// random bytes).
    fn runtime(
        &mut self,
        action: RuntimeAction,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;

    /// Answer an `if` or `assert` condition; what its leaves read comes back as inputs.
    fn condition(
        &mut self,
        condition: &Condition,
    ) -> impl Future<Output = Answer<(bool, Executed), Self::Stop>> + Send;

    /// Take a snapshot for `safe_change`: its result (with its inputs) and its id.
    fn take_snapshot(
        &mut self,
        label: &str,
    ) -> impl Future<Output = Answer<(Executed, String), Self::Stop>> + Send;

    /// Restore the snapshot `safe_change` took, after a step or check failed.
    fn restore_snapshot(
        &mut self,
        snapshot: &str,
    ) -> impl Future<Output = Answer<Executed, Self::Stop>> + Send;
}

/// A subtree being walked.
pub type Walk<'a, Stop> = Pin<Box<dyn Future<Output = Walked<Stop>> + Send + 'a>>;

/// Walk `action` (found at `at` in its tree: `""` for the root, then `steps[0].then`, ...) in
/// `world`. Every action goes to exactly one place: the table in `aido_actions` says which
/// body runs a leaf, and composites are walked here.
pub fn walk<'a, W: World>(world: &'a mut W, action: &'a Action, at: String) -> Walk<'a, W::Stop> {
    Box::pin(async move {
        let leaf = action.class() != SideEffectClass::Composite;
        if let Some(failed) = world.interrupted(action, leaf) {
            return Ok(Err(failed));
        }
        Ok(match action.clone().route() {
            Routed::Filesystem(a) => world.filesystem(a).await?.map_err(Failed::leaf),
            Routed::Machine(a) => world.machine(a).await?.map_err(Failed::leaf),
            Routed::Memory(a) => world.memory(a).await?.map_err(Failed::leaf),
            Routed::Process(a) => world.process(a).await?.map_err(Failed::leaf),
            Routed::Search(a) => world.search(a).await?.map_err(Failed::leaf),
            Routed::Desktop(a) => world.desktop(a).await?.map_err(Failed::leaf),
            Routed::Browser(a) => world.browser(a).await?.map_err(Failed::leaf),
            Routed::Gateway(a) => world.gateway(a).await?.map_err(Failed::leaf),
            Routed::Human(a) => world.human(a).await?.map_err(Failed::leaf),
            Routed::Net(a) => world.net(a).await?.map_err(Failed::leaf),
            Routed::Script(a) => world.script(a).await?.map_err(Failed::leaf),
            Routed::Artifact(a) => world.artifact(a).await?.map_err(Failed::leaf),
            Routed::Runtime(a) => world.runtime(a).await?.map_err(Failed::leaf),
            Routed::Tree(t) => match tree(world, &t, at).await? {
                Err(failed) if leaf => Err(Failed::leaf(failed.failure)),
                other => other,
            },
        })
    })
}

/// Return a subtree's failure from the walk.
macro_rules! fail {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(failed) => return Ok(Err(failed)),
        }
    };
}

async fn tree<W: World>(world: &mut W, action: &TreeAction, at: String) -> Walked<W::Stop> {
    Ok(Ok(match action {
        TreeAction::Pipeline(p) => return pipeline(world, &p.steps, &at).await,
        TreeAction::Try(t) => {
            let first = walk(world, &t.action, join(&at, "action")).await?;
            match (first, &t.fallback) {
                (Ok(done), _) => outcome(done, render::try_succeeded),
                (Err(failed), Some(fallback)) => {
                    let mut done = failed.partial;
                    let output = match walk(world, fallback, join(&at, "fallback")).await? {
                        Ok(f) => {
                            let o = f.outcome.output.clone();
                            done.absorb(f);
                            o
                        }
                        Err(f2) => {
                            done.absorb(f2.partial);
                            return Ok(Err(Failed {
                                failure: f2.failure,
                                partial: done,
                            }));
                        }
                    };
                    render::try_failed(&mut done.outcome, &failed.failure, Some(output));
                    done
                }
                (Err(failed), None) => {
                    let mut done = failed.partial;
                    render::try_failed(&mut done.outcome, &failed.failure, None);
                    done
                }
            }
        }
        TreeAction::If(i) => {
            let (holds, mut seen) =
                fail!(world.condition(&i.condition).await?.map_err(Failed::leaf));
            let branch = if holds {
                Some((i.then.as_ref(), "then"))
            } else {
                i.otherwise.as_deref().map(|e| (e, "else"))
            };
            match branch {
                Some((b, label)) => {
                    let mut done = match walk(world, b, join(&at, label)).await? {
                        Ok(done) => done,
                        Err(failed) => {
                            seen.absorb(failed.partial);
                            return Ok(Err(Failed {
                                failure: failed.failure,
                                partial: seen,
                            }));
                        }
                    };
                    // The condition's inputs come first, then the branch's.
                    seen.outcome.inputs.append(&mut done.outcome.inputs);
                    seen.blobs.append(&mut done.blobs);
                    done.outcome.inputs = seen.outcome.inputs;
                    done.blobs = seen.blobs;
                    outcome(done, |o| render::if_done(holds, Some((label, o))))
                }
                None => outcome(seen, |_| render::if_done(holds, None)),
            }
        }
        TreeAction::Assert(a) => {
            let (holds, seen) = fail!(world.condition(&a.condition).await?.map_err(Failed::leaf));
            let done = fail!(
                render::assert_done(&a.condition, a.message.as_deref(), holds)
                    .map_err(Failed::from)
            );
            outcome(seen, |_| done)
        }
        TreeAction::SafeChange(c) => return safe_change(world, &c.steps, &c.validate, &at).await,
    }))
}

async fn pipeline<W: World>(world: &mut W, steps: &[Action], at: &str) -> Walked<W::Stop> {
    let total = steps.len() as u64;
    let mut done = Executed::default();
    let mut outputs = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        world.progress(
            i as u64,
            total,
            format!("step {} of {total}: {}", i + 1, step.primitive()),
        );
        let label = join(at, &format!("steps[{i}]"));
        match walk(world, step, label.clone()).await? {
            Ok(one) => {
                outputs.push(render::pipeline_step(
                    i,
                    step.primitive(),
                    &one.outcome.output,
                ));
                done.absorb(one);
            }
            Err(failed) => {
                done.absorb(failed.partial);
                let failure =
                    render::pipeline_failed(&label, i, step.primitive(), &outputs, &failed.failure);
                return Ok(Err(Failed {
                    failure,
                    partial: done,
                }));
            }
        }
    }
    world.progress(total, total, "done".into());
    render::pipeline_done(&mut done.outcome, outputs);
    Ok(Ok(done))
}

/// Snapshot, run the steps and the checks, and on any failure restore the snapshot.
async fn safe_change<W: World>(
    world: &mut W,
    steps: &[Action],
    validate: &[Action],
    at: &str,
) -> Walked<W::Stop> {
    let (mut taken, id) = fail!(
        world
            .take_snapshot("safe_change")
            .await?
            .map_err(Failed::leaf)
    );
    let all: Vec<Action> = steps.iter().chain(validate.iter()).cloned().collect();
    match pipeline(world, &all, at).await? {
        Ok(done) => {
            let output = std::mem::take(&mut taken.outcome.output);
            taken.absorb(done.clone());
            taken.outcome = Outcome {
                inputs: std::mem::take(&mut taken.outcome.inputs),
                ..render::safe_change_done(done.outcome, output, &id, all.len())
            };
            Ok(Ok(taken))
        }
        Err(failed) => {
            let mut partial = taken;
            partial.absorb(failed.partial);
            // The restore's answer (or its failure) is an input of the result.
            let failure = match world.restore_snapshot(&id).await? {
                Ok(r) => {
                    partial.outcome.effects.extend(r.outcome.effects);
                    partial.outcome.inputs.extend(r.outcome.inputs);
                    render::safe_change_failed(failed.failure, &id, Ok(()))
                }
                Err(e) => {
                    let why = e.message.clone();
                    partial.outcome.inputs.push(Input::Failed { failure: e });
                    render::safe_change_failed(failed.failure, &id, Err(&why))
                }
            };
            Ok(Err(Failed { failure, partial }))
        }
    }
}

/// Replace a result's outcome with `f` of it, keeping the inputs it recorded.
pub fn outcome(mut done: Executed, f: impl FnOnce(Outcome) -> Outcome) -> Executed {
    let inputs = std::mem::take(&mut done.outcome.inputs);
    done.outcome = f(std::mem::take(&mut done.outcome));
    done.outcome.inputs = inputs;
    done
}

/// The place of a child in its tree, as failures name it: `steps[1].then`.
pub fn join(at: &str, label: &str) -> String {
    if at.is_empty() {
        label.to_owned()
    } else {
        format!("{at}.{label}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use aido_actions::{Before, Effect};
    use serde_json::json;

    use super::*;

    /// A world whose filesystem leaves write the path they name (failing on paths starting
    /// with "bad"), and which logs every question the walk asks, in order.
    #[derive(Default)]
    struct Scripted {
        asked: Vec<String>,
        cancel_after: Option<usize>,
    }

    impl Scripted {
        fn leaf(&mut self, what: String) -> Result<Executed, Failure> {
            self.asked.push(what.clone());
            if what.contains("bad") {
                return Err(Failure::new("file_not_found", what));
            }
            let mut done = Executed::new(Outcome::from_output(json!({"did": what})));
            done.outcome.effects.push(Effect::FileWritten {
                path: what.clone(),
                blob: "b".into(),
                before: Before::Absent,
                mtime_ns: None,
                before_mtime_ns: None,
            });
            done.outcome.inputs.push(Input::Clock { unix_ms: 1 });
            Ok(done)
        }
    }

    impl World for Scripted {
        type Stop = String;

        fn interrupted(&mut self, _action: &Action, leaf: bool) -> Option<Failed> {
            let cancelled = self.cancel_after.is_some_and(|n| self.asked.len() >= n);
            cancelled.then(|| {
                self.asked.push(format!("interrupted leaf={leaf}"));
                Failed::from(Failure::new("cancelled", "cancelled"))
            })
        }

        async fn filesystem(&mut self, action: FsAction) -> Answer<Executed, String> {
            let path = serde_json::to_value(Action::from(action)).unwrap()["path"]
                .as_str()
                .unwrap()
                .to_owned();
            Ok(self.leaf(path))
        }

        async fn machine(&mut self, _action: VmAction) -> Answer<Executed, String> {
            Err("no machines here".into())
        }

        async fn process(&mut self, _action: ProcessAction) -> Answer<Executed, String> {
            Err("no processes here".into())
        }

        async fn human(&mut self, _action: HumanAction) -> Answer<Executed, String> {
            Err("nobody to ask here".into())
        }

        async fn net(&mut self, _action: NetAction) -> Answer<Executed, String> {
            Err("no network here".into())
        }

        async fn runtime(&mut self, action: RuntimeAction) -> Answer<Executed, String> {
            Ok(self.leaf(Action::from(action).primitive().into()))
        }

        async fn search(&mut self, action: SearchAction) -> Answer<Executed, String> {
            Ok(self.leaf(action.primitive().into()))
        }

        async fn memory(&mut self, action: MemoryAction) -> Answer<Executed, String> {
            Ok(self.leaf(action.primitive().into()))
        }

        async fn desktop(&mut self, _action: DesktopAction) -> Answer<Executed, String> {
            Err("no desktop here".into())
        }

        async fn browser(&mut self, _action: BrowserAction) -> Answer<Executed, String> {
            Err("no browser here".into())
        }

        async fn gateway(&mut self, _action: GatewayAction) -> Answer<Executed, String> {
            Err("no gateway here".into())
        }

        async fn script(&mut self, _action: ScriptAction) -> Answer<Executed, String> {
            Err("no scripts here".into())
        }

        async fn artifact(&mut self, _action: ArtifactAction) -> Answer<Executed, String> {
            Err("no artifacts here".into())
        }

        async fn condition(&mut self, _c: &Condition) -> Answer<(bool, Executed), String> {
            self.asked.push("condition".into());
            Ok(Ok((true, Executed::default())))
        }

        async fn take_snapshot(&mut self, label: &str) -> Answer<(Executed, String), String> {
            self.asked.push(format!("take {label}"));
            let done = Executed::new(Outcome::from_output(json!({"snapshot": "s1"})));
            Ok(Ok((done, "s1".into())))
        }

        async fn restore_snapshot(&mut self, snapshot: &str) -> Answer<Executed, String> {
            self.asked.push(format!("restore {snapshot}"));
            Ok(Ok(Executed::default()))
        }
    }

    fn run(world: &mut Scripted, action: serde_json::Value) -> Walked<String> {
        let action: Action = serde_json::from_value(action).unwrap();
        let mut walk = std::pin::pin!(walk(world, &action, String::new()));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match walk.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(walked) => walked,
            std::task::Poll::Pending => panic!("the scripted world never waits"),
        }
    }

    fn write(path: &str) -> serde_json::Value {
        json!({"type": "write_file", "path": path, "content": "x"})
    }

    #[test]
    fn a_pipeline_stops_at_its_first_failure_and_keeps_what_ran_before() {
        let mut world = Scripted::default();
        let failed = run(
            &mut world,
            json!({"type": "pipeline", "steps": [write("a"), write("bad"), write("c")]}),
        )
        .unwrap()
        .unwrap_err();
        assert_eq!(world.asked, ["a", "bad"]);
        assert_eq!(failed.failure.code, "file_not_found");
        assert_eq!(failed.failure.details.as_ref().unwrap()["leaf"], "steps[1]");
        // The step that ran is kept with its effect and input; the failed leaf's failure is
        // its one recorded input.
        assert_eq!(failed.partial.outcome.effects.len(), 1);
        assert!(matches!(
            failed.partial.outcome.inputs.as_slice(),
            [Input::Clock { .. }, Input::Failed { .. }]
        ));
    }

    #[test]
    fn a_failed_safe_change_restores_its_snapshot_and_lists_the_restore_as_an_input() {
        let mut world = Scripted::default();
        let failed = run(
            &mut world,
            json!({"type": "safe_change", "steps": [write("a")], "validate": [write("bad")]}),
        )
        .unwrap()
        .unwrap_err();
        assert_eq!(world.asked, ["take safe_change", "a", "bad", "restore s1"]);
        assert_eq!(failed.partial.outcome.effects.len(), 1);
        let ok = run(
            &mut Scripted::default(),
            json!({"type": "safe_change", "steps": [write("a")]}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.outcome.output["snapshot"], json!({"snapshot": "s1"}));
    }

    #[test]
    fn try_runs_the_fallback_and_if_asks_its_condition_first() {
        let mut world = Scripted::default();
        let done = run(
            &mut world,
            json!({"type": "try", "action": write("bad"), "fallback": {"type": "if",
                "condition": {"kind": "file_exists", "path": "a"}, "then": write("b")}}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(world.asked, ["bad", "condition", "b"]);
        assert_eq!(done.outcome.effects.len(), 1);
    }

    #[test]
    fn an_interrupted_walk_asks_nothing_more_and_a_stop_ends_it() {
        let mut world = Scripted {
            cancel_after: Some(1),
            ..Scripted::default()
        };
        let failed = run(
            &mut world,
            json!({"type": "pipeline", "steps": [write("a"), write("b")]}),
        )
        .unwrap()
        .unwrap_err();
        assert_eq!(world.asked, ["a", "interrupted leaf=true"]);
        assert_eq!(failed.failure.code, "cancelled");
        let stopped = run(
            &mut Scripted::default(),
            json!({"type": "pipeline", "steps": [write("a"), {"type": "vm_screenshot", "vm": "m"}]}),
        );
        assert_eq!(stopped.unwrap_err(), "no machines here");
    }
}
