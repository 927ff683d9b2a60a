use aido_actions::{AccessKind, Action, SideEffectClass, Verdict};
use serde::Serialize;

use crate::engine::{PolicyEngine, SessionContext};
use crate::resolve::PathResolver;

/// What simulate says about one leaf of an action tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeafProjection {
    /// Where the leaf sits (`steps[2]`, `then`, ...); empty for a lone action.
    pub leaf: String,
    /// Its primitive.
    pub primitive: &'static str,
    /// Its class.
    pub class: SideEffectClass,
    /// The leaf's own verdict.
    pub verdict: Verdict,
    /// True when running the tree now would run this leaf without asking anyone, as far as the
    /// policy can tell (a leaf under `if` or a `try` fallback runs only on its branch).
    pub would_execute: bool,
    /// True when the leaf runs only on one branch of an `if` or as a `try` fallback.
    pub conditional: bool,
    /// Paths it would read (resolved where possible).
    pub reads: Vec<String>,
    /// Paths it would create or replace.
    pub writes: Vec<String>,
    /// Paths it would remove.
    pub deletes: Vec<String>,
}

/// simulate's answer for a whole tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Simulation {
    /// The verdict on the whole tree, as `tools/call` would get it.
    pub verdict: Verdict,
    /// True when the tree would run now without a human.
    pub would_execute: bool,
    /// Every leaf, depth first.
    pub leaves: Vec<LeafProjection>,
}

impl PolicyEngine {
    /// Judge a tree and project each leaf's side effects, touching nothing.
    pub fn simulate(
        &self,
        action: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Simulation {
        let verdict = self.evaluate(action, ctx, resolver);
        let tree_runs = verdict.is_allow();
        let leaves = action
            .leaves()
            .into_iter()
            .map(|(leaf, a)| {
                let own = if leaf.ends_with("condition") {
                    // The condition of an `if` is judged as reads, without its branches.
                    self.paths_verdict(a, ctx, resolver)
                } else {
                    self.evaluate(a, ctx, resolver)
                };
                let conditional =
                    leaf.contains("then") || leaf.contains("else") || leaf.contains("fallback");
                let (mut reads, mut writes, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
                for access in a.touches() {
                    let shown = self
                        .check_path(&access.path, access.kind, ctx, resolver)
                        .map(|c| c.resolved.display().to_string())
                        .unwrap_or(access.path);
                    match access.kind {
                        AccessKind::Read => reads.push(shown),
                        AccessKind::Write => writes.push(shown),
                        AccessKind::Delete => deletes.push(shown),
                    }
                }
                LeafProjection {
                    would_execute: tree_runs && own.is_allow() && !conditional,
                    primitive: a.primitive(),
                    class: a.class(),
                    verdict: own,
                    conditional,
                    leaf,
                    reads,
                    writes,
                    deletes,
                }
            })
            .collect();
        Simulation {
            would_execute: tree_runs,
            verdict,
            leaves,
        }
    }

    fn paths_verdict(
        &self,
        a: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Verdict {
        for access in a.touches() {
            if let Err(refusal) = self.check_path(&access.path, access.kind, ctx, resolver) {
                return Verdict::deny(refusal.code(), refusal.to_string());
            }
        }
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Environment, FsResolver};
    use serde_json::json;

    #[test]
    fn projects_each_leaf_and_mutates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let env = Environment {
            home: home.clone(),
            aido_home: home.join(".aido"),
        };
        let engine = PolicyEngine::new(&Config::default(), &env, &FsResolver).unwrap();
        let ctx = SessionContext::new(home.clone());
        let tree = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "a.txt", "content": "x"},
                {"type": "move_to_trash", "path": "b.txt"},
                {"type": "if", "condition": {"kind": "file_exists", "path": "a.txt"},
                 "then": {"type": "read_file", "path": "a.txt"}},
            ]}),
        )
        .unwrap();
        let sim = engine.simulate(&tree, &ctx, &FsResolver);
        assert!(sim.would_execute);
        assert_eq!(sim.leaves.len(), 4);
        assert_eq!(
            sim.leaves[0].writes,
            vec![home.join("a.txt").display().to_string()]
        );
        assert_eq!(
            sim.leaves[1].deletes,
            vec![home.join("b.txt").display().to_string()]
        );
        assert_eq!(sim.leaves[2].leaf, "steps[2].condition");
        assert_eq!(
            sim.leaves[2].reads,
            vec![home.join("a.txt").display().to_string()]
        );
        assert!(sim.leaves[3].conditional && !sim.leaves[3].would_execute);
        assert!(!home.join("a.txt").exists(), "simulate wrote nothing");

        let denied = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "a.txt", "content": "x"},
                {"type": "read_file", "path": "/etc/passwd"},
            ]}),
        )
        .unwrap();
        let sim = engine.simulate(&denied, &ctx, &FsResolver);
        assert!(!sim.would_execute);
        assert!(sim.verdict.is_deny());
        assert!(sim.leaves[0].verdict.is_allow() && !sim.leaves[0].would_execute);
        assert!(sim.leaves[1].verdict.is_deny());
    }
}
