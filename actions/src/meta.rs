use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// List this session's recent actions from the journal: seq, primitive, verdict and outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionHistory {
    /// Most actions to return, newest last (default 20, at most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only actions proposed before this seq (for paging backwards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_seq: Option<u64>,
}

impl SessionHistory {
    /// Default page size.
    pub const LIMIT_DEFAULT: u32 = 20;
    /// Largest page.
    pub const LIMIT_MAX: u32 = 500;
}

impl Touches for SessionHistory {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// At most `count` uses in any window of `per_s` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRate {
    /// Uses per window (at least 1).
    pub count: u64,
    /// The window's length in seconds (at least 1).
    pub per_s: u64,
}

/// Mint a capability grant narrower than this session's own. Each field left out is the
/// session's own (for an unrestricted session: not narrowed). The token is in the result
/// once and never journaled; start a narrowed session with `AIDO_GRANT=TOKEN aido mcp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantMint {
    /// Primitive names (`read_file`) or class names (`read_only`) the grant allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub primitives: Option<Vec<String>>,
    /// Roots the grant may read under (inside the walls; relative to the working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub read: Option<Vec<String>>,
    /// Roots the grant may write, create and delete under (readable too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub write: Option<Vec<String>>,
    /// Network targets: `host`, `host:port`, `*.suffix`, `*.suffix:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub hosts: Option<Vec<String>>,
    /// Seconds until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub expires_in_s: Option<u64>,
    /// How many actions may run under it (each top-level call is one use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_max: Option<u64>,
    /// A rate limit on its uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<GrantRate>,
}

impl GrantMint {
    /// Most entries in each list.
    pub const ENTRIES_MAX: usize = 128;
}

impl Touches for GrantMint {
    fn touches(&self, out: &mut Vec<Access>) {
        // The roots are judged by the walls (and the session's own grant) like any path.
        out.extend(self.read.iter().flatten().map(|p| Access::read(p)));
        out.extend(self.write.iter().flatten().map(|p| Access::write(p)));
    }
}

/// Revoke a grant (this session's own, one it minted, or one narrowed from those) and every
/// grant narrowed from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRevoke {
    /// The grant's id (from grant_mint or grant_list), not its token.
    #[schemars(length(min = 1, max = 64))]
    pub id: String,
}

impl Touches for GrantRevoke {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// The grants this session minted and those narrowed from them (or, under a grant, those
/// narrowed from the session's own), with their uses; never their tokens.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantList {
    /// Every grant of this AIDO_HOME, whoever minted it (what `aido grant list` shows). Only
    /// for a session under no grant (one that may revoke any grant); under a grant it is
    /// ignored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

impl Touches for GrantList {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
