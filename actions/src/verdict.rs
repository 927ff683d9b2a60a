use serde::{Deserialize, Serialize};

/// One step of the policy chain, in the order the chain runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// Meta primitives the config always allows.
    AlwaysAllow,
    /// Whether the body an action needs is on and built: host desktop actions are off unless
    /// `desktop.enabled`, machine actions unless `vm.enabled`, memory and artifact actions
    /// unless theirs; host processes hidden unless `processes.host_visible`; a family this
    /// build was compiled without is `primitive_not_built`. (Journals before 2026-12-02 call
    /// this gate `desktop_gate`.)
    Bodies,
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
    /// A network target's host and port on `[net] allow`; an address literal judged by range.
    NetAllowlist,
    /// An ssh_exec host on `[[ssh.hosts]]`; a container image on `[containers] images`.
    RemoteAllowlist,
    /// A human answered a confirmation.
    Human,
}

impl Gate {
    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::AlwaysAllow => "always_allow",
            Self::Bodies => "bodies",
            Self::Mode => "mode",
            Self::ActionEnabled => "action_enabled",
            Self::PipelinePreflight => "pipeline_preflight",
            Self::PathWalls => "path_walls",
            Self::DenyPatterns => "deny_patterns",
            Self::Capabilities => "capabilities",
            Self::NetAllowlist => "net_allowlist",
            Self::RemoteAllowlist => "remote_allowlist",
            Self::Human => "human",
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Declares every denial code once: the variant, its code (which is also its serde form, so a
/// journal holds exactly the strings it always held) and the one gate that produces it.
macro_rules! deny_codes {
    ($( $(#[doc = $doc:literal])* $variant:ident = $code:literal, $gate:ident; )*) => {
        /// Why the policy refused an action: one stable code per reason. Serialized as the code
        /// (`"path_outside_walls"`); codes are never renamed or reused.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum DenyCode {
            $( $(#[doc = $doc])* #[serde(rename = $code)] $variant, )*
        }

        impl DenyCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [DenyCode] = &[ $( Self::$variant ),* ];

            /// The stable code, e.g. `path_outside_walls`.
            pub fn code(self) -> &'static str {
                match self { $( Self::$variant => $code, )* }
            }

            /// The gate that refuses with this code.
            pub fn gate(self) -> Gate {
                match self { $( Self::$variant => Gate::$gate, )* }
            }
        }
    };
}

deny_codes! {
    /// A host desktop action (desktop class, not run by a machine) while `desktop.enabled` is
    /// false. No primitive drives the host desktop yet; the code is kept for the one that will.
    DesktopDisabled = "desktop_disabled", Bodies;
    /// A machine action while `vm.enabled` is false.
    VmDisabled = "vm_disabled", Bodies;
    /// An action that changes the world while the mode is readonly.
    ModeReadonly = "mode_readonly", Mode;
    /// A primitive switched off in `actions.enabled`.
    ActionDisabled = "action_disabled", ActionEnabled;
    /// A path that is empty, holds a NUL byte, names `~user` or is not absolute.
    PathInvalid = "path_invalid", PathWalls;
    /// A path whose symlinks cannot be followed (a loop, `..` after a missing component, an
    /// unreadable component).
    PathUnresolvable = "path_unresolvable", PathWalls;
    /// A path that resolves outside every root allowed for its kind of access.
    PathOutsideWalls = "path_outside_walls", PathWalls;
    /// A path inside `AIDO_HOME`, which holds the journal and the config.
    PathInAidoHome = "path_in_aido_home", PathWalls;
    /// The removal of a wall root itself.
    PathIsWallRoot = "path_is_wall_root", PathWalls;
    /// A path (as written or resolved) that matches a deny glob.
    PathDeniedByPattern = "path_denied_by_pattern", DenyPatterns;
    /// A write, creation or removal of a path that matches a `paths.protect` glob (shell
    /// start-up files, git hooks and config by default): readable, never written.
    PathProtected = "path_protected", DenyPatterns;
    /// A primitive this session was not granted.
    CapabilityMissing = "capability_missing", Capabilities;
    /// A path outside the roots this session's grant names for that kind of access.
    GrantPathOutside = "grant_path_outside", Capabilities;
    /// A network target outside the hosts this session's grant names.
    GrantHostOutside = "grant_host_outside", Capabilities;
    /// The session's grant (or one it was narrowed from) has expired.
    GrantExpired = "grant_expired", Capabilities;
    /// The session's grant (or one it was narrowed from) has no uses left.
    GrantExhausted = "grant_exhausted", Capabilities;
    /// The session's grant (or one it was narrowed from) was revoked.
    GrantRevoked = "grant_revoked", Capabilities;
    /// The session's grant allows no more uses in its rate window now.
    GrantRateLimited = "grant_rate_limited", Capabilities;
    /// A memory action (remember, recall, forget, list_memory) while `memory.enabled` is
    /// false.
    MemoryDisabled = "memory_disabled", Bodies;
    /// `list_processes` with `host` while `[processes] host_visible` is false.
    HostProcessesHidden = "host_processes_hidden", Bodies;
    /// A primitive of a family this build of aido was compiled without (its `prim-*` cargo
    /// feature is off): it is not listed, and every call is refused before anything runs.
    PrimitiveNotBuilt = "primitive_not_built", Bodies;
    /// A network target whose host and port are not on `[net] allow` (the default allows
    /// none).
    NetDenied = "net_denied", NetAllowlist;
    /// A network target that is an address in a refused range (loopback, private,
    /// link-local, CGNAT, metadata, reserved) that the policy does not name.
    NetAddressRefused = "net_address_refused", NetAllowlist;
    /// A network target that is not an http(s) URL or a host.
    NetUrlInvalid = "net_url_invalid", NetAllowlist;
    /// A URL whose scheme is not http or https.
    NetSchemeRefused = "net_scheme_refused", NetAllowlist;
    /// An artifact action while `artifacts.enabled` is false.
    ArtifactsDisabled = "artifacts_disabled", Bodies;
    /// A browser action while `browser.enabled` is false.
    BrowserDisabled = "browser_disabled", Bodies;
    /// browser_evaluate while `browser.allow_script` is false.
    BrowserScriptDisabled = "browser_script_disabled", Bodies;
    /// A downstream tool its `[[downstream]]` entry refuses (`deny_tools`).
    DownstreamToolDenied = "downstream_tool_denied", Bodies;
    /// An ssh_exec host that no `[[ssh.hosts]]` entry names (the default names none).
    SshHostNotAllowed = "ssh_host_not_allowed", RemoteAllowlist;
    /// A container image that `[containers] images` does not list (the default lists none).
    ContainerImageNotAllowed = "container_image_not_allowed", RemoteAllowlist;
}

impl DenyCode {
    /// The code's variant, from its stable string.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|known| known.code() == code)
    }

    /// The configuration that decides this refusal, for the person or agent who wants it
    /// otherwise: a config key (`[net] allow`), the session's grant, or `none:` and what
    /// would have to change instead when no setting allows it.
    pub fn setting(self) -> &'static str {
        match self {
            Self::DesktopDisabled => "[desktop] enabled",
            Self::VmDisabled => "[vm] enabled",
            Self::ModeReadonly => "mode",
            Self::ActionDisabled => "[actions] enabled",
            Self::PathInvalid => {
                "none: give an absolute path, ~/PATH, or one relative to the session's workdir"
            }
            Self::PathUnresolvable => "none: the path's links must resolve",
            Self::PathOutsideWalls => "[paths] write (for writes) or [paths] read (for reads)",
            Self::PathInAidoHome => {
                "none: AIDO_HOME (the journal, the config) is never an action's"
            }
            Self::PathIsWallRoot => "none: a root of [paths] write is never removed itself",
            Self::PathDeniedByPattern => "[paths] deny",
            Self::PathProtected => "[paths] protect",
            Self::CapabilityMissing
            | Self::GrantPathOutside
            | Self::GrantHostOutside
            | Self::GrantExpired
            | Self::GrantExhausted
            | Self::GrantRevoked
            | Self::GrantRateLimited => "the session's capability grant (aido grant mint)",
            Self::MemoryDisabled => "[memory] enabled",
            Self::HostProcessesHidden => "[processes] host_visible",
            Self::PrimitiveNotBuilt => "none: a build of aido with the primitive's prim-* feature",
            Self::NetDenied => "[net] allow",
            Self::NetAddressRefused => "[net] allow_ranges",
            Self::NetUrlInvalid => "none: give an http(s) URL or a host",
            Self::NetSchemeRefused => "none: only http and https URLs are fetched",
            Self::ArtifactsDisabled => "[artifacts] enabled",
            Self::BrowserDisabled => "[browser] enabled",
            Self::BrowserScriptDisabled => "[browser] allow_script",
            // Each entry's deny_tools.
            Self::DownstreamToolDenied => "downstream",
            Self::SshHostNotAllowed => "[[ssh.hosts]]",
            Self::ContainerImageNotAllowed => "[containers] images",
        }
    }
}

impl std::fmt::Display for DenyCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
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
        /// The stable code, e.g. `path_outside_walls`; it names the gate too.
        code: DenyCode,
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
    /// A denial without a leaf, by the gate that owns `code`.
    pub fn deny(code: DenyCode, reason: impl Into<String>) -> Self {
        Self::Deny {
            gate: code.gate(),
            code,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every denial code, its string and its gate, pinned: renaming a code, reusing one, or
    /// adding a variant without listing it here fails.
    #[test]
    #[allow(clippy::too_many_lines)]
    fn deny_code_table() {
        let table: &[(DenyCode, &str, Gate)] = &[
            (DenyCode::DesktopDisabled, "desktop_disabled", Gate::Bodies),
            (DenyCode::VmDisabled, "vm_disabled", Gate::Bodies),
            (DenyCode::ModeReadonly, "mode_readonly", Gate::Mode),
            (
                DenyCode::ActionDisabled,
                "action_disabled",
                Gate::ActionEnabled,
            ),
            (DenyCode::PathInvalid, "path_invalid", Gate::PathWalls),
            (
                DenyCode::PathUnresolvable,
                "path_unresolvable",
                Gate::PathWalls,
            ),
            (
                DenyCode::PathOutsideWalls,
                "path_outside_walls",
                Gate::PathWalls,
            ),
            (
                DenyCode::PathInAidoHome,
                "path_in_aido_home",
                Gate::PathWalls,
            ),
            (
                DenyCode::PathIsWallRoot,
                "path_is_wall_root",
                Gate::PathWalls,
            ),
            (
                DenyCode::PathDeniedByPattern,
                "path_denied_by_pattern",
                Gate::DenyPatterns,
            ),
            (
                DenyCode::PathProtected,
                "path_protected",
                Gate::DenyPatterns,
            ),
            (
                DenyCode::CapabilityMissing,
                "capability_missing",
                Gate::Capabilities,
            ),
            (
                DenyCode::GrantPathOutside,
                "grant_path_outside",
                Gate::Capabilities,
            ),
            (
                DenyCode::GrantHostOutside,
                "grant_host_outside",
                Gate::Capabilities,
            ),
            (DenyCode::GrantExpired, "grant_expired", Gate::Capabilities),
            (
                DenyCode::GrantExhausted,
                "grant_exhausted",
                Gate::Capabilities,
            ),
            (DenyCode::GrantRevoked, "grant_revoked", Gate::Capabilities),
            (
                DenyCode::GrantRateLimited,
                "grant_rate_limited",
                Gate::Capabilities,
            ),
            (DenyCode::MemoryDisabled, "memory_disabled", Gate::Bodies),
            (
                DenyCode::HostProcessesHidden,
                "host_processes_hidden",
                Gate::Bodies,
            ),
            (
                DenyCode::PrimitiveNotBuilt,
                "primitive_not_built",
                Gate::Bodies,
            ),
            (DenyCode::NetDenied, "net_denied", Gate::NetAllowlist),
            (
                DenyCode::NetAddressRefused,
                "net_address_refused",
                Gate::NetAllowlist,
            ),
            (
                DenyCode::NetUrlInvalid,
                "net_url_invalid",
                Gate::NetAllowlist,
            ),
            (
                DenyCode::NetSchemeRefused,
                "net_scheme_refused",
                Gate::NetAllowlist,
            ),
            (
                DenyCode::ArtifactsDisabled,
                "artifacts_disabled",
                Gate::Bodies,
            ),
            (DenyCode::BrowserDisabled, "browser_disabled", Gate::Bodies),
            (
                DenyCode::BrowserScriptDisabled,
                "browser_script_disabled",
                Gate::Bodies,
            ),
            (
                DenyCode::DownstreamToolDenied,
                "downstream_tool_denied",
                Gate::Bodies,
            ),
            (
                DenyCode::SshHostNotAllowed,
                "ssh_host_not_allowed",
                Gate::RemoteAllowlist,
            ),
            (
                DenyCode::ContainerImageNotAllowed,
                "container_image_not_allowed",
                Gate::RemoteAllowlist,
            ),
        ];
        assert_eq!(
            table.iter().map(|(c, _, _)| *c).collect::<Vec<_>>(),
            DenyCode::ALL,
            "the table lists every variant, in declaration order"
        );
        let mut seen = std::collections::BTreeSet::new();
        for (variant, code, gate) in table {
            assert!(seen.insert(*code), "{code} is used twice");
            assert_eq!(variant.code(), *code);
            assert_eq!(variant.to_string(), *code);
            assert_eq!(variant.gate(), *gate, "{code}");
            // The journal's form is the bare code, both ways.
            assert_eq!(serde_json::to_value(variant).unwrap(), json!(code));
            assert_eq!(
                serde_json::from_value::<DenyCode>(json!(code)).unwrap(),
                *variant
            );
        }
    }

    /// A denial as journals have always stored it decodes, and encodes back to the same JSON.
    #[test]
    fn journaled_denials_keep_their_format() {
        let old = json!({
            "verdict": "deny",
            "gate": "path_walls",
            "code": "path_outside_walls",
            "reason": "/etc/passwd resolves to /etc/passwd, outside the allowed read roots",
            "leaf": "steps[1]",
        });
        let verdict: Verdict = serde_json::from_value(old.clone()).unwrap();
        match &verdict {
            Verdict::Deny {
                gate, code, leaf, ..
            } => {
                assert_eq!(*gate, Gate::PathWalls);
                assert_eq!(*code, DenyCode::PathOutsideWalls);
                assert_eq!(leaf.as_deref(), Some("steps[1]"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(serde_json::to_value(&verdict).unwrap(), old);
        let unknown =
            json!({"verdict": "deny", "gate": "mode", "code": "no_such_code", "reason": ""});
        assert!(serde_json::from_value::<Verdict>(unknown).is_err());
    }

    /// docs/REFERENCE.md's list of error codes names every denial code.
    #[test]
    fn the_reference_lists_every_deny_code() {
        let reference = include_str!("../../docs/REFERENCE.md");
        for code in DenyCode::ALL {
            assert!(
                reference.contains(&format!("`{code}`")),
                "docs/REFERENCE.md lacks `{code}`"
            );
        }
    }
}
