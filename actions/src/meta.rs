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
