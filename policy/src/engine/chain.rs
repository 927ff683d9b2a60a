//! The chain: the gates in their order, one function each, and the walk over them.
//!
//! [`CHAIN`] is the order, written once. Each gate reads one action ([`GateInput`]) and says
//! nothing (the next gate judges), asks for a confirmation (the first one asked stands, and a
//! later gate may still refuse), or decides: a refusal, or always_allow's allow. Refusal
//! reasons are formatted only when a gate refuses, so an action that passes formats nothing.

use aido_actions::verdict::{DenyCode, Gate};
use aido_actions::{Action, Body, SideEffectClass, Verdict};

use super::{PathCheck, PolicyEngine, SessionContext};
use crate::config::Mode;
use crate::resolve::PathResolver;

/// What a gate says about one action: `None`, nothing (the next gate judges);
/// `Some(Confirm)`, ask, and go on; `Some(Deny)` or `Some(Allow)`, decided.
type Judge = fn(&mut GateInput<'_>) -> Option<Verdict>;

/// One gate of the chain: the name docs/ARCHITECTURE.md ("Policy chain") gives it and the
/// function that judges.
struct ChainGate {
    /// The gate's name in the docs. A refusal names the [`Gate`] of its code, which for a
    /// gate that also judges a grant's narrowing (paths, net, ssh) is `capabilities`.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the test holding the docs to the table reads it")
    )]
    name: &'static str,
    judge: Judge,
}

/// A row of [`CHAIN`].
const fn gate(name: &'static str, judge: Judge) -> ChainGate {
    ChainGate { name, judge }
}

/// The policy chain, in its order: a single pass, the first decision ends it.
const CHAIN: [ChainGate; 11] = [
    gate("built", built),
    gate("grant_refused", grant_refused),
    gate("always_allow", always_allow),
    gate("bodies", bodies),
    gate("mode", mode),
    gate("action_enabled", action_enabled),
    gate("pipeline_preflight", pipeline_preflight),
    gate("path_walls", path_walls),
    gate("net_allowlist", net_allowlist),
    gate("remote_allowlist", remote_allowlist),
    gate("capabilities", capabilities),
];

/// What every gate reads about one action of a tree, and where the paths it admits go.
struct GateInput<'a> {
    engine: &'a PolicyEngine,
    action: &'a Action,
    ctx: &'a SessionContext,
    resolver: &'a dyn PathResolver,
    /// Where the action is in the tree: empty for the root, `steps.2.then` for a leaf.
    at: &'a str,
    primitive: &'static str,
    class: SideEffectClass,
    body: Body,
    /// The paths admitted so far, collected only when the caller hands them to a body.
    admitted: &'a mut Option<Vec<PathCheck>>,
}

impl GateInput<'_> {
    /// Where a verdict came from, for a leaf of a composite.
    fn leaf(&self) -> Option<String> {
        (!self.at.is_empty()).then(|| self.at.to_owned())
    }

    /// A refusal, under the gate its code belongs to.
    fn deny(&self, code: DenyCode, reason: String) -> Option<Verdict> {
        Some(Verdict::Deny {
            gate: code.gate(),
            code,
            reason,
            leaf: self.leaf(),
        })
    }

    /// A confirmation asked by `gate`.
    fn confirm(&self, gate: Gate, reason: String) -> Option<Verdict> {
        Some(Verdict::Confirm {
            gate,
            reason,
            leaf: self.leaf(),
        })
    }

    /// The session's grant, when it has one.
    fn grant(&self) -> Option<&crate::grant::GrantScope> {
        self.ctx.capabilities.as_deref()
    }
}

impl PolicyEngine {
    /// Walk [`CHAIN`] over one action of a tree (`at` says where; composites recurse through
    /// pipeline_preflight), pushing every admitted path to `admitted` when it is `Some`.
    pub(super) fn judge(
        &self,
        action: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
        at: &str,
        admitted: &mut Option<Vec<PathCheck>>,
    ) -> Verdict {
        let mut input = GateInput {
            engine: self,
            action,
            ctx,
            resolver,
            at,
            primitive: action.primitive(),
            class: self.class_of(action),
            body: action.body(),
            admitted,
        };
        // The first confirmation asked stands; a later refusal still wins over it. The compiler
        // unrolls this walk over a constant table and, the gates being `#[inline]`, inlines
        // each gate: the table costs what the chain written out in one function did.
        let mut confirm = None;
        for gate in &CHAIN {
            match (gate.judge)(&mut input) {
                None => {}
                Some(asked @ Verdict::Confirm { .. }) => {
                    confirm.get_or_insert(asked);
                }
                Some(decided) => return decided,
            }
        }
        confirm.unwrap_or(Verdict::Allow)
    }
}

/// A family this build was compiled without: nothing can run it, whatever the config allows
/// (checked before always_allow, which holds meta primitives of such families).
#[inline]
fn built(input: &mut GateInput<'_>) -> Option<Verdict> {
    let (_, feature) = input
        .engine
        .unbuilt
        .iter()
        .find(|(b, _)| *b == input.body)?;
    input.deny(
        DenyCode::PrimitiveNotBuilt,
        format!(
            "{} is not built into this aido (cargo feature {feature})",
            input.primitive
        ),
    )
}

/// capabilities, first part: a grant its store refused refuses everything, meta primitives
/// included.
#[inline]
fn grant_refused(input: &mut GateInput<'_>) -> Option<Verdict> {
    let (code, reason) = input.ctx.grant_refused.as_ref()?;
    input.deny(*code, reason.clone())
}

/// Meta primitives listed in `actions.always_allow` skip every later gate (the config refuses
/// anything but meta primitives in this list).
#[inline]
fn always_allow(input: &mut GateInput<'_>) -> Option<Verdict> {
    let listed = input
        .engine
        .always_allow
        .iter()
        .any(|name| name == input.primitive);
    listed.then_some(Verdict::Allow)
}

/// Machines are contained and have their own switch; the host desktop is off unless enabled,
/// and so are the memory and artifact stores and the host's process list. Which actions drive
/// a machine is the action table's answer.
#[inline]
fn bodies(input: &mut GateInput<'_>) -> Option<Verdict> {
    let config = &input.engine.config;
    let (primitive, body) = (input.primitive, input.body);
    if body == Body::Machine {
        if !config.vm.enabled {
            return input.deny(
                DenyCode::VmDisabled,
                format!("{primitive} drives a machine and vm.enabled is false"),
            );
        }
    } else if body == Body::Memory && !config.memory.enabled {
        return input.deny(
            DenyCode::MemoryDisabled,
            format!("{primitive} uses the memory store and memory.enabled is false"),
        );
    } else if body == Body::Artifact && !config.artifacts.enabled {
        return input.deny(
            DenyCode::ArtifactsDisabled,
            format!("{primitive} uses the artifact store and artifacts.enabled is false"),
        );
    } else if body == Body::Browser && !config.browser.enabled {
        return input.deny(
            DenyCode::BrowserDisabled,
            format!("{primitive} drives the browser and browser.enabled is false"),
        );
    } else if runs_page_script(input.action) && !config.browser.allow_script {
        return input.deny(
            DenyCode::BrowserScriptDisabled,
            format!("{primitive} runs the agent's JavaScript in the page and browser.allow_script is false"),
        );
    } else if let Action::DownstreamCall(call) = input.action
        && input.engine.downstream_denied(call)
    {
        return input.deny(
            DenyCode::DownstreamToolDenied,
            format!(
                "{} is refused by the deny_tools of [[downstream]] {:?}",
                call.tool,
                call.server()
            ),
        );
    } else if let Action::ListProcesses(list) = input.action
        && list.host
        && !config.processes.host_visible
    {
        return input.deny(
            DenyCode::HostProcessesHidden,
            "list_processes with host lists the host's processes and [processes] host_visible is false".into(),
        );
    } else if (input.class == SideEffectClass::Desktop || body == Body::Desktop)
        && !config.desktop.enabled
    {
        return input.deny(
            DenyCode::DesktopDisabled,
            format!("{primitive} drives a screen and desktop.enabled is false"),
        );
    }
    None
}

/// readonly refuses what mutates; confirm asks before it.
#[inline]
fn mode(input: &mut GateInput<'_>) -> Option<Verdict> {
    let (primitive, class) = (input.primitive, input.class);
    match input.engine.config.mode {
        Mode::Readonly if class.mutates() => input.deny(
            DenyCode::ModeReadonly,
            format!("{primitive} is {class} and the policy mode is readonly"),
        ),
        Mode::Confirm if class.mutates() => input.confirm(
            Gate::Mode,
            format!("{primitive} is {class} and the policy mode is confirm"),
        ),
        _ => None,
    }
}

/// `actions.enabled` switches a primitive off; `actions.confirm` asks before it.
#[inline]
fn action_enabled(input: &mut GateInput<'_>) -> Option<Verdict> {
    let primitive = input.primitive;
    if input.engine.config.actions.enabled.get(primitive) == Some(&false) {
        return input.deny(
            DenyCode::ActionDisabled,
            format!("{primitive} is disabled in actions.enabled"),
        );
    }
    if input.engine.confirm.iter().any(|name| name == primitive) {
        return input.confirm(
            Gate::ActionEnabled,
            format!("{primitive} is listed in actions.confirm"),
        );
    }
    None
}

/// A composite is judged by every leaf it could run, through the whole chain; the first
/// denied leaf refuses the whole tree, and the first leaf's confirmation is the tree's.
#[inline]
fn pipeline_preflight(input: &mut GateInput<'_>) -> Option<Verdict> {
    let mut confirm = None;
    for (label, child) in input.action.children() {
        let child_at = if input.at.is_empty() {
            label
        } else {
            format!("{}.{label}", input.at)
        };
        let engine = input.engine;
        match engine.judge(child, input.ctx, input.resolver, &child_at, input.admitted) {
            Verdict::Allow => {}
            denied @ Verdict::Deny { .. } => return Some(denied),
            asked @ Verdict::Confirm { .. } => {
                confirm.get_or_insert(asked);
            }
        }
    }
    confirm
}

/// path_walls, then deny_patterns, for each path this action touches itself (composites are
/// judged by their leaves); then the session's grant, on the path as resolved.
#[inline]
fn path_walls(input: &mut GateInput<'_>) -> Option<Verdict> {
    for access in input.engine.touches_of(input.action, input.class) {
        let check = match input
            .engine
            .check(&access.path, access.kind, input.ctx, input.resolver)
        {
            Ok(check) => check,
            Err(refusal) => return input.deny(refusal.code(), refusal.to_string()),
        };
        if input
            .grant()
            .is_some_and(|grant| !grant.allows_path(&check.resolved, access.kind))
        {
            return input.deny(
                DenyCode::GrantPathOutside,
                format!(
                    "{} resolves to {}, outside the roots this session was granted for {}",
                    access.path,
                    check.resolved.display(),
                    if access.kind.needs_write() {
                        "writing"
                    } else {
                        "reading"
                    },
                ),
            );
        }
        if let Some(admitted) = input.admitted {
            admitted.push(PathCheck {
                given: access.path,
                lexical: check.lexical,
                resolved: check.resolved,
                root: check.root.to_owned(),
                kind: access.kind,
            });
        }
    }
    None
}

/// A network target's host and port, and an address literal's range; for an artifact's page,
/// every origin it may connect to. Under a grant, each within the grant's hosts.
#[inline]
fn net_allowlist(input: &mut GateInput<'_>) -> Option<Verdict> {
    if let Some(refused) = net_target(input) {
        return Some(refused);
    }
    connect_origins(input)
}

/// The target a network action names (`None` for any other action).
fn net_target(input: &GateInput<'_>) -> Option<Verdict> {
    let engine = input.engine;
    if let Action::DownstreamCall(call) = input.action {
        return downstream_urls(input, call);
    }
    match crate::net::judge(&engine.net, &engine.config, input.action)? {
        Err(refusal) => input.deny(crate::net::deny_code(&refusal), refusal.to_string()),
        Ok(admitted)
            if input
                .grant()
                .is_some_and(|grant| !grant.allows_target(&admitted.target)) =>
        {
            input.deny(
                DenyCode::GrantHostOutside,
                format!(
                    "{} reaches {}:{}, which this session was not granted",
                    input.primitive, admitted.target.host, admitted.target.port
                ),
            )
        }
        Ok(_) => None,
    }
}

/// The URLs a downstream call's arguments hold (its entry's `url_arguments`), each judged as
/// fetch_url's URL is.
fn downstream_urls(
    input: &GateInput<'_>,
    call: &aido_actions::downstream::DownstreamCall,
) -> Option<Verdict> {
    let engine = input.engine;
    for url in engine.downstream_urls(call) {
        match aido_net::Target::from_url(&url).and_then(|(_, target)| engine.net.admit(&target)) {
            Err(refusal) => {
                return input.deny(
                    crate::net::deny_code(&refusal),
                    format!("{}'s argument {url:?}: {refusal}", call.tool),
                );
            }
            Ok(admitted)
                if input
                    .grant()
                    .is_some_and(|grant| !grant.allows_target(&admitted.target)) =>
            {
                return input.deny(
                    DenyCode::GrantHostOutside,
                    format!("{}'s argument {url:?} was not granted", call.tool),
                );
            }
            Ok(_) => {}
        }
    }
    None
}

/// The origins an artifact's page may connect to (`artifact_serve`'s `connect`).
fn connect_origins(input: &GateInput<'_>) -> Option<Verdict> {
    let Action::ArtifactServe(serve) = input.action else {
        return None;
    };
    for origin in &serve.connect {
        match crate::net::connect_origin(&input.engine.net, origin) {
            Err(refusal) => {
                return input.deny(
                    crate::net::deny_code(&refusal),
                    format!("the page's connect origin {origin:?}: {refusal}"),
                );
            }
            Ok((_, admitted))
                if input
                    .grant()
                    .is_some_and(|grant| !grant.allows_target(&admitted.target)) =>
            {
                return input.deny(
                    DenyCode::GrantHostOutside,
                    format!("the page's connect origin {origin} was not granted"),
                );
            }
            Ok(_) => {}
        }
    }
    None
}

/// An ssh_exec host named by `[ssh] hosts` (and, under a grant, within its hosts), every
/// container image listed in `[containers] images`.
#[inline]
fn remote_allowlist(input: &mut GateInput<'_>) -> Option<Verdict> {
    let config = &input.engine.config;
    if let Some((code, reason)) = crate::remote::judge(config, input.action) {
        return input.deny(code, reason);
    }
    let (Action::SshExec(ssh), Some(grant)) = (input.action, input.grant()) else {
        return None;
    };
    let host = crate::remote::ssh_host(config, &ssh.host)?;
    let within = aido_net::Target::tcp(&host.host, host.port)
        .is_ok_and(|target| grant.allows_target(&target));
    if within {
        return None;
    }
    input.deny(
        DenyCode::GrantHostOutside,
        format!(
            "ssh_exec reaches {}:{}, which this session was not granted",
            host.host, host.port
        ),
    )
}

/// The session's grant: the primitive (composites are judged by their leaves). A command's
/// file changes are judged by the walls, not by a grant's roots: under a grant that narrows
/// paths, commands are refused rather than let reach further.
#[inline]
fn capabilities(input: &mut GateInput<'_>) -> Option<Verdict> {
    let grant = input.grant()?;
    let (primitive, class) = (input.primitive, input.class);
    if grant.narrows_paths() && input.body == Body::Process {
        return input.deny(
            DenyCode::GrantPathOutside,
            format!(
                "{primitive} is refused under a grant that narrows paths (a command's reach is the walls', not the grant's roots)"
            ),
        );
    }
    // A downstream tool is granted with downstream_call, or by its own namespaced name.
    let downstream = match input.action {
        Action::DownstreamCall(call) => grant.allows_primitive(&call.tool, class),
        _ => false,
    };
    if !downstream && !grant.allows_primitive(primitive, class) {
        return input.deny(
            DenyCode::CapabilityMissing,
            format!("this session was not granted {primitive} ({class})"),
        );
    }
    None
}

/// `browser_evaluate`, or a browser toolset turn with a `javascript_exec` member: the agent's
/// JavaScript in the page, refused whole unless `[browser] allow_script`.
fn runs_page_script(action: &Action) -> bool {
    match action {
        Action::BrowserEvaluate(_) => true,
        Action::BrowserToolset(batch) => batch
            .actions
            .iter()
            .any(|call| call.name == aido_actions::browser::BrowserMember::JavascriptExec),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain's order is the table's, and docs/ARCHITECTURE.md gives the same one.
    #[test]
    fn the_chain_runs_its_gates_in_the_documented_order() {
        let names: Vec<&str> = CHAIN.iter().map(|gate| gate.name).collect();
        assert_eq!(
            names,
            [
                "built",
                "grant_refused",
                "always_allow",
                "bodies",
                "mode",
                "action_enabled",
                "pipeline_preflight",
                "path_walls",
                "net_allowlist",
                "remote_allowlist",
                "capabilities",
            ]
        );
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ARCHITECTURE.md"),
        )
        .unwrap();
        let section = docs.split("\n## Policy chain").nth(1).unwrap();
        let section = section.split("\n## ").next().unwrap();
        // The section's numbered list: "1. `built` — ...".
        let documented: Vec<&str> = section
            .lines()
            .filter_map(|line| line.split_once(". `"))
            .filter(|(number, _)| number.parse::<usize>().is_ok())
            .filter_map(|(_, rest)| rest.split('`').next())
            .collect();
        assert_eq!(documented, names, "docs/ARCHITECTURE.md, Policy chain");
    }
}
