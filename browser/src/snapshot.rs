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

/// The backend DOM node id a reference names, if it is one: `e12`, or `ref_12` as the
/// browser toolset's `read_page` and `find` write it.
pub(crate) fn backend_id(reference: &str) -> Option<i64> {
    let digits = reference
        .strip_prefix("ref_")
        .or_else(|| reference.strip_prefix('e'))?;
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

/// Words that say nothing about which element is meant.
const FILLER: &[&str] = &[
    "the", "a", "an", "to", "of", "for", "on", "in", "with", "and", "or", "that", "this", "my",
];

/// Roles a person acts on (lowercase).
const ACTIONABLE: &[&str] = &[
    "button",
    "link",
    "textbox",
    "searchbox",
    "checkbox",
    "radio",
    "combobox",
    "listbox",
    "option",
    "menuitem",
    "tab",
    "slider",
    "spinbutton",
    "switch",
];

/// What a person calls an element, as the roles that answer to it.
const ROLE_WORDS: &[(&str, &[&str])] = &[
    ("button", &["button"]),
    ("link", &["link"]),
    ("field", &["textbox", "searchbox", "combobox", "spinbutton"]),
    ("box", &["textbox", "searchbox", "combobox", "checkbox"]),
    ("input", &["textbox", "searchbox", "combobox", "spinbutton"]),
    (
        "bar",
        &[
            "searchbox",
            "textbox",
            "combobox",
            "progressbar",
            "scrollbar",
        ],
    ),
    ("text", &["textbox", "StaticText", "paragraph"]),
    ("search", &["searchbox"]),
    ("checkbox", &["checkbox"]),
    ("check", &["checkbox"]),
    ("radio", &["radio"]),
    ("dropdown", &["combobox", "listbox", "menu"]),
    ("select", &["combobox", "listbox"]),
    ("menu", &["menu", "menubar", "menuitem", "combobox"]),
    ("option", &["option", "menuitem"]),
    ("heading", &["heading"]),
    ("title", &["heading"]),
    ("image", &["image", "img"]),
    ("icon", &["image", "img"]),
    ("picture", &["image", "img"]),
    ("tab", &["tab"]),
    ("slider", &["slider"]),
    ("table", &["table", "grid"]),
    ("row", &["row"]),
    ("cell", &["cell", "gridcell"]),
    ("list", &["list", "listbox"]),
    ("item", &["listitem", "menuitem", "option"]),
    ("form", &["form"]),
    ("dialog", &["dialog", "alertdialog"]),
];

/// The elements a description names (`search bar`, `add to cart button`), best first, at most
/// `max`: each word of the description found in an element's name or value counts twice, a
/// word that names its role once. A word match, not a model: what is written on or for the
/// element is what it is found by.
pub(crate) fn find(nodes: &[Node], query: &str, max: usize) -> Vec<Node> {
    let words: Vec<String> = query
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !FILLER.contains(w))
        .map(str::to_owned)
        .collect();
    let mut scored: Vec<(usize, usize, &Node)> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.reference.is_some())
        .filter_map(|(order, node)| {
            let said = format!(
                "{} {}",
                node.name.to_lowercase(),
                node.value.as_deref().unwrap_or_default().to_lowercase()
            );
            let role = node.role.to_lowercase();
            let mut named = 0;
            let mut typed = 0;
            for word in &words {
                if said.contains(word.as_str()) {
                    named += 1;
                }
                let roles = ROLE_WORDS
                    .iter()
                    .find(|(w, _)| w == word)
                    .map(|(_, roles)| *roles)
                    .unwrap_or_default();
                if role == *word || roles.iter().any(|r| r.eq_ignore_ascii_case(&role)) {
                    typed += 1;
                }
            }
            // What a person can act on before what only names it (a field before its label).
            let acts = usize::from(named > 0 && ACTIONABLE.contains(&role.as_str()));
            let score = named * 2 + typed + acts;
            // A role word alone names every element of that role: only with a name match,
            // unless the description is nothing but role words.
            let only_roles = words.iter().all(|w| ROLE_WORDS.iter().any(|(r, _)| r == w));
            (score > 0 && (named > 0 || only_roles)).then_some((score, order, node))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored
        .into_iter()
        .take(max)
        .map(|(_, _, node)| Node {
            depth: 0,
            ..node.clone()
        })
        .collect()
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

    fn node(role: &str, name: &str, reference: i64) -> Node {
        Node {
            reference: Some(super::reference(reference)),
            role: role.to_owned(),
            name: name.to_owned(),
            value: None,
            depth: 1,
            states: Vec::new(),
        }
    }

    #[test]
    fn find_ranks_named_elements_and_their_roles() {
        let nodes = vec![
            node("heading", "Search results", 1),
            node("searchbox", "Search docs", 2),
            node("button", "Add to cart", 3),
            node("link", "Cart", 4),
            node("button", "Search", 5),
        ];
        let found = find(&nodes, "search bar", 20);
        assert_eq!(found[0].reference.as_deref(), Some("e2"), "{found:?}");
        let found = find(&nodes, "add to cart button", 20);
        assert_eq!(found[0].reference.as_deref(), Some("e3"), "{found:?}");
        assert_eq!(found.len(), 2, "the cart link matches too: {found:?}");
        assert!(find(&nodes, "checkout", 20).is_empty());
        let buttons = find(&nodes, "button", 20);
        assert_eq!(buttons.len(), 2);
        assert_eq!(find(&nodes, "search", 1).len(), 1);
    }

    #[test]
    fn references_round_trip() {
        assert_eq!(backend_id(&reference(12)), Some(12));
        assert_eq!(backend_id("ref_7"), Some(7));
        for bad in ["", "e", "12", "e1x", "f12", "e-1", "ref_", "ref_x", "ref7"] {
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
