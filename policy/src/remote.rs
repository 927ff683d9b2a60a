//! The remote_allowlist gate: an ssh_exec host must be named by `[ssh] hosts`, and every image
//! run_in_sandbox or run_container_group would run must be listed in `[containers] images`
//! (exactly). Both lists are empty by default, so both primitives are refused until a policy
//! names what they may reach.

use aido_actions::{Action, DenyCode};

use crate::config::{Config, SshHost};

/// The `[ssh] hosts` entry the agent's name stands for.
pub fn ssh_host<'a>(config: &'a Config, name: &str) -> Option<&'a SshHost> {
    config.ssh.hosts.iter().find(|host| host.called() == name)
}

/// The gate's refusal of `action`, if any (None for every other primitive).
pub(crate) fn judge(config: &Config, action: &Action) -> Option<(DenyCode, String)> {
    let image_refused = |image: &str| {
        (!config
            .containers
            .images
            .iter()
            .any(|allowed| allowed == image))
        .then(|| {
            (
                DenyCode::ContainerImageNotAllowed,
                format!("the image {image} is not listed in [containers] images"),
            )
        })
    };
    match action {
        Action::SshExec(ssh) if ssh_host(config, &ssh.host).is_none() => Some((
            DenyCode::SshHostNotAllowed,
            format!("no [ssh] hosts entry is named {}", ssh.host),
        )),
        Action::RunInSandbox(container) => image_refused(&container.image),
        Action::RunContainerGroup(group) => group
            .containers
            .iter()
            .find_map(|container| image_refused(&container.image)),
        _ => None,
    }
}
