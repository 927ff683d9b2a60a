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
    /// True when what it changes cannot be rewound (the host desktop: keystrokes, clicks and
    /// notifications are gone once sent); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub irreversible: bool,
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
        let mut found = Vec::new();
        branch_leaves(action, String::new(), false, &mut found);
        let leaves = found
            .into_iter()
            .map(|leaf| {
                let a = leaf.action;
                let own = if leaf.is_condition {
                    // The condition of an `if` is judged as reads, without its branches.
                    self.paths_verdict(a, ctx, resolver)
                } else {
                    self.evaluate(a, ctx, resolver)
                };
                let conditional = leaf.conditional;
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
                    leaf: leaf.label,
                    reads,
                    writes,
                    deletes,
                    irreversible: a.irreversible(),
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

/// One leaf of a tree, as [`Action::leaves`] labels it, with where it sits.
struct BranchLeaf<'a> {
    label: String,
    action: &'a Action,
    /// The own reads of a composite (an `if`'s condition), not a leaf action.
    is_condition: bool,
    /// Runs only on one branch: under an `if`, or as a `try`'s fallback.
    conditional: bool,
}

/// Every leaf of `action`, depth first, in the order and with the labels of
/// [`Action::leaves`]; which leaves are conditional comes from the tree's shape, not from
/// their labels.
fn branch_leaves<'a>(
    action: &'a Action,
    at: String,
    conditional: bool,
    out: &mut Vec<BranchLeaf<'a>>,
) {
    let children = action.children();
    if children.is_empty() && action.class() != SideEffectClass::Composite {
        out.push(BranchLeaf {
            label: at,
            action,
            is_condition: false,
            conditional,
        });
        return;
    }
    if !action.touches().is_empty() {
        out.push(BranchLeaf {
            label: join(&at, "condition"),
            action,
            is_condition: true,
            conditional,
        });
    }
    for (label, child) in children {
        // Only `if` and `try` choose at run time which children run; every other composite
        // runs all of its children (or stops at a failure, which the policy cannot know).
        let branch = match action {
            Action::If(_) => true,
            Action::Try(t) => t
                .fallback
                .as_deref()
                .is_some_and(|fallback| std::ptr::eq(fallback, child)),
            _ => false,
        };
        branch_leaves(child, join(&at, &label), conditional || branch, out);
    }
}

/// `at.label`, or `label` at the root.
fn join(at: &str, label: &str) -> String {
    if at.is_empty() {
        label.to_owned()
    } else {
        format!("{at}.{label}")
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

    /// Which leaves are conditional follows the tree, at any depth, and the leaves are the
    /// same, in the same order, as `Action::leaves` gives.
    #[test]
    fn conditional_leaves_follow_the_tree() {
        let tree = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "a", "content": ""},
                {"type": "if", "condition": {"kind": "file_exists", "path": "c"},
                 "then": {"type": "try", "action": {"type": "read_file", "path": "a"},
                          "fallback": {"type": "write_file", "path": "b", "content": ""}},
                 "else": {"type": "read_file", "path": "b"}},
                {"type": "try", "action": {"type": "read_file", "path": "a"},
                 "fallback": {"type": "read_file", "path": "b"}},
                {"type": "safe_change", "steps": [{"type": "write_file", "path": "a", "content": ""}],
                 "validate": [{"type": "validate", "path": "a", "format": "json"}]},
            ]}),
        )
        .unwrap();
        let mut found = Vec::new();
        branch_leaves(&tree, String::new(), false, &mut found);
        let expected = tree.leaves();
        assert_eq!(found.len(), expected.len());
        for (leaf, (label, action)) in found.iter().zip(&expected) {
            assert_eq!(&leaf.label, label);
            assert!(std::ptr::eq(leaf.action, *action), "{label}");
        }
        let shape: Vec<_> = found
            .iter()
            .map(|l| (l.label.as_str(), l.is_condition, l.conditional))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("steps[0]", false, false),
                ("steps[1].condition", true, false),
                ("steps[1].then.action", false, true),
                ("steps[1].then.fallback", false, true),
                ("steps[1].else", false, true),
                ("steps[2].action", false, false),
                ("steps[2].fallback", false, true),
                ("steps[3].steps[0]", false, false),
                ("steps[3].validate[0]", false, false),
            ]
        );
    }
}
