//! Calls of other MCP servers' tools through aido's gateway (`[[downstream]]`): each is an
//! aido action, judged by the policy (the tool's class from the server's annotations or the
//! policy's override, the entry's denied tools), journaled with its arguments and its whole
//! result, which playback renders again without the server. What a downstream did cannot be
//! rewound: a call that can change anything is irreversible (simulate says so).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Call a downstream server's tool by its namespaced name (`git__git_status`, as the tool
/// list names it) with its own arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownstreamCall {
    /// The namespaced tool: `<server>__<tool>`.
    #[schemars(length(min = 4, max = 64))]
    pub tool: String,
    /// The tool's arguments, as its own input schema says.
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

impl DownstreamCall {
    /// The downstream server the tool belongs to (the text before the first `__`).
    pub fn server(&self) -> &str {
        self.tool.split_once("__").map_or("", |(server, _)| server)
    }
}

impl Touches for DownstreamCall {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
