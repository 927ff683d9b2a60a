//! One code table: every stable code any part of aido can give, collected from the error
//! enums' `CODES` (each written by `aido_actions::coded!` from the same table as its
//! `code()`, or pinned beside it), and the reference's list (docs/REFERENCE.md) checked
//! against it both ways: a code the reference does not list, or a code it lists that nothing
//! gives, fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

fn every_code() -> BTreeSet<&'static str> {
    let groups: Vec<&[&'static str]> = vec![
        aido_actions::ParseError::CODES,
        aido_policy::ConfigError::CODES,
        aido_actors::RuntimeError::CODES,
        aido_actors::RewindError::CODES,
        aido_actors::StartError::CODES,
        aido_actors::fs::FsError::CODES,
        aido_actors::ToolError::CODES,
        aido_actors::vm::VmBodyError::CODES,
        aido_actors::process::ProcessError::CODES,
        aido_actors::process::HandleError::CODES,
        aido_actors::process::RemoteError::CODES,
        aido_remote::ssh::SshError::CODES,
        aido_remote::podman::PodmanError::CODES,
        aido_actors::process::EventsError::CODES,
        aido_sandbox::SpawnError::CODES,
        aido_sandbox::ProxyError::CODES,
        aido_snapshots::SnapshotError::CODES,
        aido_vm::VmError::CODES,
        aido_journal::AppendError::CODES,
        aido_journal::ReadError::CODES,
        aido_journal::OpenError::CODES,
        aido_journal::retention::RetentionError::CODES,
        aido_journal::retention::Kept::CODES,
        aido_memory::StoreError::CODES,
        aido_memory::InputError::CODES,
        aido_memory::OpenError::CODES,
        aido_memory::RememberError::CODES,
        aido_memory::RecallError::CODES,
        aido_memory::ForgetError::CODES,
        aido_memory::ListError::CODES,
        aido_actors::search::SearchBodyError::CODES,
        aido_search::SearchError::CODES,
        aido_search::ReadError::CODES,
        aido_actors::human::HumanError::CODES,
        aido_desktop::DesktopError::CODES,
        aido_actors::desktop::DesktopBodyError::CODES,
        aido_actors::ComputerError::CODES,
        aido_serve::HttpError::CODES,
        aido_serve::StartError::CODES,
        aido_serve::token::TokenError::CODES,
        aido_actors::net::NetBodyError::CODES,
        aido_grants::CODES,
        aido_actors::script::ScriptError::CODES,
        aido_artifacts::ArtifactError::CODES,
        aido_actors::artifact::ArtifactBodyError::CODES,
        aido_telemetry::StartError::CODES,
        aido_watch::WatchError::CODES,
        aido_agent::AgentError::CODES,
        aido_agent::error::ReplyError::CODES,
    ];
    let mut all: BTreeSet<&'static str> = groups.into_iter().flatten().copied().collect();
    all.extend(aido_actions::DenyCode::ALL.iter().map(|c| c.code()));
    all.extend(aido_mcp::codes());
    all
}

/// The backticked codes of the reference's "Error codes" section.
fn reference_codes() -> BTreeSet<String> {
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/REFERENCE.md"))
            .expect("docs/REFERENCE.md");
    let section = reference
        .split("\n## Error codes")
        .nth(1)
        .expect("docs/REFERENCE.md has an Error codes section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_reference_lists_exactly_the_codes_aido_gives() {
    let codes = every_code();
    let listed = reference_codes();
    let unlisted: Vec<_> = codes.iter().filter(|c| !listed.contains(**c)).collect();
    let stale: Vec<_> = listed
        .iter()
        .filter(|c| !codes.contains(c.as_str()))
        .collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "docs/REFERENCE.md's Error codes section: missing {unlisted:?}; lists codes nothing gives: {stale:?}"
    );
}

#[test]
fn every_enum_lists_each_code_once() {
    for (name, codes) in [
        ("RuntimeError", aido_actors::RuntimeError::CODES),
        ("RewindError", aido_actors::RewindError::CODES),
        ("FsError", aido_actors::fs::FsError::CODES),
        ("ToolError", aido_actors::ToolError::CODES),
        ("VmBodyError", aido_actors::vm::VmBodyError::CODES),
        ("ProcessError", aido_actors::process::ProcessError::CODES),
        ("HandleError", aido_actors::process::HandleError::CODES),
        ("RemoteError", aido_actors::process::RemoteError::CODES),
        ("SshError", aido_remote::ssh::SshError::CODES),
        ("PodmanError", aido_remote::podman::PodmanError::CODES),
        ("EventsError", aido_actors::process::EventsError::CODES),
        ("SpawnError", aido_sandbox::SpawnError::CODES),
        ("ProxyError", aido_sandbox::ProxyError::CODES),
        ("SnapshotError", aido_snapshots::SnapshotError::CODES),
        ("VmError", aido_vm::VmError::CODES),
        ("AppendError", aido_journal::AppendError::CODES),
        ("ReadError", aido_journal::ReadError::CODES),
        ("OpenError", aido_journal::OpenError::CODES),
        (
            "RetentionError",
            aido_journal::retention::RetentionError::CODES,
        ),
        ("retention Kept", aido_journal::retention::Kept::CODES),
        ("memory StoreError", aido_memory::StoreError::CODES),
        ("memory InputError", aido_memory::InputError::CODES),
        ("memory OpenError", aido_memory::OpenError::CODES),
        ("memory RememberError", aido_memory::RememberError::CODES),
        ("memory RecallError", aido_memory::RecallError::CODES),
        ("memory ForgetError", aido_memory::ForgetError::CODES),
        (
            "SearchBodyError",
            aido_actors::search::SearchBodyError::CODES,
        ),
        ("SearchError", aido_search::SearchError::CODES),
        ("search ReadError", aido_search::ReadError::CODES),
        ("HumanError", aido_actors::human::HumanError::CODES),
        ("DesktopError", aido_desktop::DesktopError::CODES),
        (
            "DesktopBodyError",
            aido_actors::desktop::DesktopBodyError::CODES,
        ),
        ("ComputerError", aido_actors::ComputerError::CODES),
    ] {
        let unique: BTreeSet<_> = codes.iter().collect();
        assert_eq!(unique.len(), codes.len(), "{name} lists a code twice");
    }
}
