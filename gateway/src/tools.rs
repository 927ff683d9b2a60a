//! A downstream's tools as the gateway exposes them: namespaced (`<server>__<tool>`, within
//! the clients' name limit), with their annotations and a class a policy can start from.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::config::TOOL_NAME_LEN_MAX;
use crate::error::DownstreamError;

/// Tools kept from one downstream's list; a longer list is refused (`downstream_too_many_tools`).
pub const TOOLS_MAX: usize = 1024;
/// Hex digits of the hash that ends a shortened name.
pub const HASH_HEX_LEN: usize = 8;
/// What separates the server from the tool in a namespaced name.
pub const SEPARATOR: &str = "__";

/// What a tool does, judged from its annotations (MCP's hints, with the protocol's defaults
/// for missing ones: not read-only, destructive, open-world). A policy may override it per
/// tool: the hints are the server's word, not a proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// Reads only, inside its own world (`readOnlyHint: true`, `openWorldHint: false`).
    Read,
    /// Changes things, additively (`destructiveHint: false`), inside its own world.
    Write,
    /// May delete or overwrite (`destructiveHint: true`, the default).
    Destructive,
    /// Reaches beyond its own world (the web, other people): `openWorldHint: true`, the
    /// default, on a tool that is read-only or not destructive.
    OpenWorld,
}

/// The class of a tool with these annotations (none: the protocol's defaults).
pub fn classify(annotations: Option<&rmcp::model::ToolAnnotations>) -> ToolClass {
    let hint = |get: fn(&rmcp::model::ToolAnnotations) -> Option<bool>, default: bool| {
        annotations.and_then(get).unwrap_or(default)
    };
    let read_only = hint(|a| a.read_only_hint, false);
    let destructive = hint(|a| a.destructive_hint, true);
    let open_world = hint(|a| a.open_world_hint, true);
    match (read_only, destructive, open_world) {
        (true, _, false) => ToolClass::Read,
        (true, _, true) => ToolClass::OpenWorld,
        (false, true, _) => ToolClass::Destructive,
        (false, false, true) => ToolClass::OpenWorld,
        (false, false, false) => ToolClass::Write,
    }
}

/// One tool of a downstream as the gateway exposes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DownstreamTool {
    /// The namespaced name (`<server>__<tool>`, or shortened with a hash): unique across the
    /// gateway, at most [`TOOL_NAME_LEN_MAX`] characters, `[A-Za-z0-9_-]` only.
    pub name: String,
    /// The downstream.
    pub server: String,
    /// The toolset it is put in.
    pub toolset: String,
    /// The class from its annotations.
    pub class: ToolClass,
    /// The tool as the downstream listed it: its own name, title, description, input and
    /// output schemas, annotations.
    pub tool: rmcp::model::Tool,
}

impl DownstreamTool {
    /// The downstream's own name of the tool.
    pub fn original(&self) -> &str {
        &self.tool.name
    }

    /// Its annotations, as the downstream gave them.
    pub fn annotations(&self) -> Option<&rmcp::model::ToolAnnotations> {
        self.tool.annotations.as_ref()
    }

    /// The tool as aido lists it to its own clients: the downstream's, under the namespaced
    /// name.
    pub fn exposed(&self) -> rmcp::model::Tool {
        let mut tool = self.tool.clone();
        tool.name = self.name.clone().into();
        tool
    }
}

/// The downstream a namespaced tool name belongs to: the text before its first `__` (server
/// names never hold `__`), or `None` for a name that is not namespaced.
pub fn server_of(name: &str) -> Option<&str> {
    name.split_once(SEPARATOR)
        .map(|(server, _)| server)
        .filter(|server| !server.is_empty())
}

/// The tools of `server` exposed under namespaced names, in the downstream's order.
pub(crate) fn namespace(
    server: &str,
    toolset: &str,
    tools: Vec<rmcp::model::Tool>,
) -> Result<Vec<DownstreamTool>, DownstreamError> {
    if tools.len() > TOOLS_MAX {
        return Err(DownstreamError::TooManyTools {
            server: server.to_owned(),
            max: TOOLS_MAX,
        });
    }
    let originals: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    let names = names(server, &originals)?;
    Ok(tools
        .into_iter()
        .zip(names)
        .map(|(tool, name)| DownstreamTool {
            name,
            server: server.to_owned(),
            toolset: toolset.to_owned(),
            class: classify(tool.annotations.as_ref()),
            tool,
        })
        .collect())
}

/// The namespaced names of `originals`: plain (`<server>__<tool>`) when that fits and is
/// unambiguous, else shortened with a hash of the original; unique, or an error.
pub(crate) fn names(server: &str, originals: &[&str]) -> Result<Vec<String>, DownstreamError> {
    let mut names: Vec<String> = originals
        .iter()
        .map(|original| plain(server, original).unwrap_or_else(|| hashed(server, original)))
        .collect();
    // A plain name that another tool's shortened name happens to equal gets shortened too:
    // two shortened names differ unless their hashes collide.
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<String> = names
        .iter()
        .filter(|name| !seen.insert(name.as_str()))
        .cloned()
        .collect();
    for (name, original) in names.iter_mut().zip(originals) {
        if duplicates.contains(name) {
            *name = hashed(server, original);
        }
    }
    let mut seen = std::collections::BTreeMap::new();
    for (name, original) in names.iter().zip(originals) {
        if let Some(first) = seen.insert(name.as_str(), *original) {
            return Err(DownstreamError::NamesCollide {
                server: server.to_owned(),
                first: first.to_owned(),
                second: (*original).to_owned(),
            });
        }
    }
    Ok(names)
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `<server>__<tool>` when it fits and the tool's name has only allowed characters.
fn plain(server: &str, original: &str) -> Option<String> {
    let name = format!("{server}{SEPARATOR}{original}");
    (!original.is_empty() && original.chars().all(allowed) && name.len() <= TOOL_NAME_LEN_MAX)
        .then_some(name)
}

/// `<server>__<tool, cut and cleaned>_<hash>`: deterministic, within the limit.
fn hashed(server: &str, original: &str) -> String {
    let hash = blake3::hash(original.as_bytes()).to_hex();
    let room = TOOL_NAME_LEN_MAX - server.len() - SEPARATOR.len() - 1 - HASH_HEX_LEN;
    let cleaned: String = original
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .take(room)
        .collect();
    format!(
        "{server}{SEPARATOR}{cleaned}_{}",
        &hash.as_str()[..HASH_HEX_LEN]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CLIENT_PREFIX, CLIENT_TOOL_NAME_LEN_MAX, NAME_LEN_MAX};

    fn annotations(
        read_only: Option<bool>,
        destructive: Option<bool>,
        open_world: Option<bool>,
    ) -> rmcp::model::ToolAnnotations {
        let mut annotations = rmcp::model::ToolAnnotations::default();
        annotations.read_only_hint = read_only;
        annotations.destructive_hint = destructive;
        annotations.open_world_hint = open_world;
        annotations
    }

    #[test]
    fn classes_follow_the_hints_and_the_protocols_defaults() {
        let cases = [
            (None, ToolClass::Destructive),
            (Some(annotations(None, None, None)), ToolClass::Destructive),
            (
                Some(annotations(Some(true), None, Some(false))),
                ToolClass::Read,
            ),
            (
                Some(annotations(Some(true), None, None)),
                ToolClass::OpenWorld,
            ),
            (
                Some(annotations(Some(false), Some(false), Some(false))),
                ToolClass::Write,
            ),
            (
                Some(annotations(Some(false), Some(false), None)),
                ToolClass::OpenWorld,
            ),
            (
                Some(annotations(Some(false), Some(true), Some(false))),
                ToolClass::Destructive,
            ),
        ];
        for (annotations, class) in cases {
            assert_eq!(classify(annotations.as_ref()), class, "{annotations:?}");
        }
    }

    #[test]
    fn the_server_is_before_the_first_separator() {
        assert_eq!(server_of("git__git_status"), Some("git"));
        assert_eq!(server_of("a-b__c__d"), Some("a-b"));
        assert_eq!(server_of("plain"), None);
        assert_eq!(server_of("__x"), None);
    }

    #[test]
    fn short_names_are_plain() {
        let names = names("git", &["git_status", "git-log"]).unwrap();
        assert_eq!(names, vec!["git__git_status", "git__git-log"]);
    }

    #[test]
    fn long_or_odd_names_are_shortened_deterministically_within_the_limit() {
        let server = "a".repeat(NAME_LEN_MAX);
        let long = "x".repeat(80);
        let odd = "read.file/v2";
        let first = names(&server, &[&long, odd, "ok"]).unwrap();
        let again = names(&server, &[&long, odd, "ok"]).unwrap();
        assert_eq!(first, again);
        for name in &first {
            assert!(name.len() <= TOOL_NAME_LEN_MAX, "{name}");
            assert!(
                CLIENT_PREFIX.len() + name.len() <= CLIENT_TOOL_NAME_LEN_MAX,
                "{name}"
            );
            assert!(name.chars().all(allowed), "{name}");
            assert!(name.starts_with(&format!("{server}__")), "{name}");
        }
        assert!(first[1].starts_with(&format!("{server}__read_file_v2_")));
        assert_eq!(first[2], format!("{server}__ok"));
    }

    #[test]
    fn names_that_clean_to_the_same_text_stay_apart() {
        let names = names("s", &["a.b", "a/b", "a_b"]).unwrap();
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), 3, "{names:?}");
        assert_eq!(names[2], "s__a_b");
    }

    #[test]
    fn a_plain_name_equal_to_a_shortened_one_is_shortened_too() {
        let shortened = hashed("s", "a.b");
        let tool = shortened.trim_start_matches("s__").to_owned();
        let names = names("s", &["a.b", &tool]).unwrap();
        assert_ne!(names[0], names[1]);
    }

    #[test]
    fn too_many_tools_are_refused() {
        let tools: Vec<rmcp::model::Tool> = (0..=TOOLS_MAX)
            .map(|i| {
                rmcp::model::Tool::new(format!("t{i}"), "", std::sync::Arc::new(Default::default()))
            })
            .collect();
        let error = namespace("s", "s", tools).unwrap_err();
        assert_eq!(error.code(), "downstream_too_many_tools");
    }
}
