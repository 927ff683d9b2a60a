use serde::{Deserialize, Serialize};

/// The side-effect class of a primitive. Every primitive has exactly one; the policy's mode gate
/// and the MCP tool hints are derived from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffectClass {
    /// Reads the world, changes nothing.
    ReadOnly,
    /// Creates or changes files; aido keeps the previous contents, so it can be undone.
    FsWrite,
    /// Starts a process.
    ProcessSpawn,
    /// Talks to the network.
    Network,
    /// Drives a desktop or a VM screen.
    Desktop,
    /// Removes or overwrites state in a way the agent cannot take back by itself.
    Destructive,
    /// Runs other actions; judged by its leaves.
    Composite,
    /// Asks aido about itself (its journal, its policy); touches no body.
    Meta,
}

impl SideEffectClass {
    /// All classes, in declaration order.
    pub const ALL: [SideEffectClass; 8] = [
        Self::ReadOnly,
        Self::FsWrite,
        Self::ProcessSpawn,
        Self::Network,
        Self::Desktop,
        Self::Destructive,
        Self::Composite,
        Self::Meta,
    ];

    /// The snake_case name used in config files, the journal and MCP.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::FsWrite => "fs_write",
            Self::ProcessSpawn => "process_spawn",
            Self::Network => "network",
            Self::Desktop => "desktop",
            Self::Destructive => "destructive",
            Self::Composite => "composite",
            Self::Meta => "meta",
        }
    }

    /// True when an action of this class can change the world by itself.
    pub fn mutates(self) -> bool {
        !matches!(self, Self::ReadOnly | Self::Meta | Self::Composite)
    }

    /// MCP `readOnlyHint`.
    pub fn read_only_hint(self) -> bool {
        matches!(self, Self::ReadOnly | Self::Meta)
    }

    /// MCP `destructiveHint`: only meaningful when not read-only. File writes are journaled with
    /// their previous contents and so are not destructive; composites may contain anything.
    pub fn destructive_hint(self) -> bool {
        matches!(
            self,
            Self::Destructive
                | Self::Composite
                | Self::ProcessSpawn
                | Self::Network
                | Self::Desktop
        )
    }

    /// MCP `idempotentHint`: calling twice with the same arguments has no further effect.
    pub fn idempotent_hint(self) -> bool {
        matches!(self, Self::ReadOnly | Self::Meta)
    }

    /// MCP `openWorldHint`: the action reaches beyond aido's bodies.
    pub fn open_world_hint(self) -> bool {
        matches!(self, Self::Network)
    }
}

impl std::fmt::Display for SideEffectClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
