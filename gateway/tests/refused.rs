//! Downstreams that cannot start: each is a coded error, and nothing runs unconfined.

use aido_gateway::{Downstream, DownstreamConfig};

use crate::support::{Fixture, sandbox};

pub async fn missing_command() {
    let fixture = Fixture::new();
    let mut config = DownstreamConfig::stdio("ghost", "aido-no-such-mcp-server", ["--stdio"]);
    config.writable = vec![fixture.work.clone()];
    let error = Downstream::start(config, sandbox(), None)
        .await
        .err()
        .expect("a missing command cannot start");
    assert_eq!(error.code(), "downstream_command_missing", "{error}");
    assert_eq!(error.server(), Some("ghost"));
}

pub async fn no_sandbox() {
    let fixture = Fixture::new();
    // The sandbox's own executable is missing: it cannot be built.
    let config = DownstreamConfig::stdio("ghost", "sh", ["-c", "cat"]);
    let error = Downstream::start(config, aido_sandbox::Sandbox::new("/no/such/aido"), None)
        .await
        .err()
        .expect("no sandbox, no start");
    assert_eq!(error.code(), "downstream_sandbox_failed", "{error}");
    // A writable root that does not exist: the sandbox refuses the profile.
    let mut config = DownstreamConfig::stdio("ghost", "sh", ["-c", "cat"]);
    config.writable = vec![fixture.work.join("missing")];
    let error = Downstream::start(config, sandbox(), None)
        .await
        .err()
        .expect("a profile the sandbox refuses, no start");
    assert_eq!(error.code(), "downstream_sandbox_failed", "{error}");
    // An invalid entry never reaches the sandbox.
    let config = DownstreamConfig::stdio("Bad Name", "sh", ["-c", "cat"]);
    let error = Downstream::start(config, sandbox(), None)
        .await
        .err()
        .expect("an invalid entry");
    assert_eq!(error.code(), "downstream_name_invalid", "{error}");
}
