use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};
use crate::fs::HashAlgorithm;

/// A question about the filesystem, answered without changing it. Used by `if` and `assert`;
/// every path it names is a read that the policy judges.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// The path exists (following symlinks inside the walls).
    FileExists {
        /// The path to test.
        path: String,
    },
    /// The file's text contains `text`.
    FileContains {
        /// The file to search.
        path: String,
        /// The exact text to look for.
        text: String,
    },
    /// The file's hash equals `digest` (lowercase hex).
    ChecksumEquals {
        /// The file to hash.
        path: String,
        /// The hash function.
        #[serde(default)]
        algorithm: HashAlgorithm,
        /// The expected digest, lowercase hex.
        digest: String,
    },
    /// The inner condition is false.
    Not {
        /// The condition to negate.
        condition: Box<Condition>,
    },
    /// Every inner condition is true (true when empty).
    All {
        /// The conditions.
        conditions: Vec<Condition>,
    },
    /// At least one inner condition is true (false when empty).
    Any {
        /// The conditions.
        conditions: Vec<Condition>,
    },
}

impl Condition {
    /// How deeply conditions may nest; deeper ones are refused when parsed by the executor.
    pub const DEPTH_MAX: usize = 32;
}

impl Touches for Condition {
    fn touches(&self, out: &mut Vec<Access>) {
        match self {
            Self::FileExists { path }
            | Self::FileContains { path, .. }
            | Self::ChecksumEquals { path, .. } => out.push(Access::read(path)),
            Self::Not { condition } => condition.touches(out),
            Self::All { conditions } | Self::Any { conditions } => {
                conditions.iter().for_each(|c| c.touches(out))
            }
        }
    }
}
