use serde::{Deserialize, Serialize};

/// One step of the policy chain, in the order the chain runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// Meta primitives the config always allows.
    AlwaysAllow,
    /// Desktop and VM-screen actions are off unless enabled.
    DesktopGate,
    /// readonly / confirm / normal.
    Mode,
    /// The per-primitive enable map.
    ActionEnabled,
    /// Composites are judged by all their leaves before anything runs.
    PipelinePreflight,
    /// Allowed read and write roots.
    PathWalls,
    /// Deny globs; they win over every allow.
    DenyPatterns,
    /// The session's grants.
    Capabilities,
    /// A human answered a confirmation.
    Human,
}

impl Gate {
    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::AlwaysAllow => "always_allow",
            Self::DesktopGate => "desktop_gate",
            Self::Mode => "mode",
            Self::ActionEnabled => "action_enabled",
            Self::PipelinePreflight => "pipeline_preflight",
            Self::PathWalls => "path_walls",
            Self::DenyPatterns => "deny_patterns",
            Self::Capabilities => "capabilities",
            Self::Human => "human",
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The policy chain's answer for one action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Do not run it.
    Deny {
        /// The gate that refused.
        gate: Gate,
        /// A stable code, e.g. `path_outside_walls`.
        code: String,
        /// Why, for people and agents.
        reason: String,
        /// For composites: which leaf was refused, e.g. `steps[2]`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leaf: Option<String>,
    },
    /// Ask a human first.
    Confirm {
        /// The gate that asked.
        gate: Gate,
        /// What the human is asked to approve.
        reason: String,
        /// For composites: which leaf asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leaf: Option<String>,
    },
}

impl Verdict {
    /// A denial without a leaf.
    pub fn deny(gate: Gate, code: &str, reason: impl Into<String>) -> Self {
        Self::Deny {
            gate,
            code: code.to_owned(),
            reason: reason.into(),
            leaf: None,
        }
    }

    /// A confirmation without a leaf.
    pub fn confirm(gate: Gate, reason: impl Into<String>) -> Self {
        Self::Confirm {
            gate,
            reason: reason.into(),
            leaf: None,
        }
    }

    /// True for Allow.
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow)
    }

    /// True for Deny.
    pub fn is_deny(&self) -> bool {
        matches!(self, Self::Deny { .. })
    }

    /// The short name: allow, deny or confirm.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny { .. } => "deny",
            Self::Confirm { .. } => "confirm",
        }
    }
}
