//! `Accessibility.getFullAXTree`'s nodes as a flat, compact tree with element references.
//!
//! A reference is `e` and the node's backend DOM node id: Chromium keeps that id for the
//! element's lifetime, so the same element has the same reference in every snapshot, and
//! click/fill resolve it without remembering the snapshot.

use std::collections::HashMap;

use serde_json::Value;

use crate::answer::Node;

/// Roles that add nothing on their own: left out, their children kept (one level up).
const ROLES_SKIPPED: &[&str] = &["none", "generic", "InlineTextBox", "LineBreak"];

/// Boolean properties reported as states when true.
const STATES: &[&str] = &[
    "focused",
    "disabled",
    "required",
    "readonly",
    "expanded",
    "selected",
    "modal",
    "multiselectable",
    "invalid",
];

/// The reference for a backend DOM node id.
pub(crate) fn reference(backend_id: i64) -> String {
    format!("e{backend_id}")
}

/// The backend DOM node id a reference names, if it is one.
pub(crate) fn backend_id(reference: &str) -> Option<i64> {
    let digits = reference.strip_prefix('e')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Flatten the tree (document order, depth-first) keeping at most `nodes_max` nodes; the
/// bool says whether some were left out.
pub(crate) fn flatten(ax_nodes: &[Value], nodes_max: usize) -> (Vec<Node>, bool) {
    let by_id: HashMap<&str, &Value> = ax_nodes
        .iter()
        .filter_map(|n| Some((n.get("nodeId")?.as_str()?, n)))
        .collect();
    let root = ax_nodes.iter().find(|n| n.get("parentId").is_none());
    let mut out = Vec::new();
    let mut truncated = false;
    // An explicit stack, not recursion: a hostile page can nest deeply.
    let mut stack: Vec<(&Value, u32)> = root.into_iter().map(|r| (r, 0)).collect();
    let mut visited = 0usize;
    while let Some((node, depth)) = stack.pop() {
        visited += 1;
        if visited > ax_nodes.len() {
            break; // a cycle in the tree: never loop forever
        }
        let shown = shown(node);
        if shown {
            if out.len() == nodes_max {
                truncated = true;
                break;
            }
            out.push(convert(node, depth));
        }
        let child_depth = if shown { depth + 1 } else { depth };
        let children = node
            .get("childIds")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for child in children.iter().rev() {
            if let Some(child) = child.as_str().and_then(|id| by_id.get(id)) {
                stack.push((child, child_depth));
            }
        }
    }
    (out, truncated)
}

fn shown(node: &Value) -> bool {
    if node
        .get("ignored")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return false;
    }
    let role = role(node);
    if ROLES_SKIPPED.contains(&role) {
        return false;
    }
    // Text the parent already names (a link's or a button's own text) is noise.
    !(role == "StaticText" && text_of(node, "name").is_empty())
}

fn role(node: &Value) -> &str {
    node.pointer("/role/value")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn text_of(node: &Value, field: &str) -> String {
    match node.get(field).and_then(|v| v.get("value")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn convert(node: &Value, depth: u32) -> Node {
    let value = text_of(node, "value");
    Node {
        reference: node
            .get("backendDOMNodeId")
            .and_then(Value::as_i64)
            .map(reference),
        role: role(node).to_owned(),
        name: text_of(node, "name"),
        value: (!value.is_empty()).then_some(value),
        depth,
        states: states(node),
    }
}

fn states(node: &Value) -> Vec<String> {
    let mut states = Vec::new();
    for property in node
        .get("properties")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let name = property.get("name").and_then(Value::as_str).unwrap_or("");
        let value = property.pointer("/value/value");
        match (name, value) {
            ("checked" | "pressed", Some(Value::String(v))) if v == "true" || v == "mixed" => {
                states.push(if v == "mixed" {
                    format!("{name}:mixed")
                } else {
                    name.to_owned()
                });
            }
            (name, Some(Value::Bool(true))) if STATES.contains(&name) => {
                states.push(name.to_owned())
            }
            _ => {}
        }
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_round_trip() {
        assert_eq!(backend_id(&reference(12)), Some(12));
        for bad in ["", "e", "12", "e1x", "f12", "e-1"] {
            assert_eq!(backend_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn tree_flattens_skipping_generic_and_ignored() {
        let nodes = vec![
            json!({"nodeId": "1", "role": {"value": "RootWebArea"}, "name": {"value": "Login"}, "childIds": ["2", "5"], "backendDOMNodeId": 1}),
            json!({"nodeId": "2", "parentId": "1", "role": {"value": "generic"}, "childIds": ["3", "4"]}),
            json!({"nodeId": "3", "parentId": "2", "role": {"value": "textbox"}, "name": {"value": "User"}, "value": {"value": "alice"}, "backendDOMNodeId": 9,
                   "properties": [{"name": "focused", "value": {"value": true}}, {"name": "required", "value": {"value": false}}]}),
            json!({"nodeId": "4", "parentId": "2", "ignored": true, "role": {"value": "none"}}),
            json!({"nodeId": "5", "parentId": "1", "role": {"value": "checkbox"}, "name": {"value": "Remember"}, "backendDOMNodeId": 11,
                   "properties": [{"name": "checked", "value": {"value": "true"}}]}),
        ];
        let (flat, truncated) = flatten(&nodes, 10);
        assert!(!truncated);
        let seen: Vec<_> = flat
            .iter()
            .map(|n| (n.role.as_str(), n.depth, n.reference.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("RootWebArea", 0, Some("e1")),
                ("textbox", 1, Some("e9")),
                ("checkbox", 1, Some("e11"))
            ]
        );
        assert_eq!(flat[1].value.as_deref(), Some("alice"));
        assert_eq!(flat[1].states, ["focused"]);
        assert_eq!(flat[2].states, ["checked"]);
        let (flat, truncated) = flatten(&nodes, 2);
        assert!(truncated);
        assert_eq!(flat.len(), 2);
    }
}
