//! One code table: every stable code any part of aido can give, as `aido codes` lists them
//! from the registry every `coded!` enum writes its `CODES` into (no hand list), and the
//! reference's list (docs/REFERENCE.md) checked against it both ways: a code the reference
//! does not list, or a code it lists that nothing gives, fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use crate::common;

/// Every code the `aido` binary can give, as `aido codes` lists them: every enum `coded!`
/// declares registers its table, in whichever crate it lives (the binary links them all), and
/// the policy's denials.
fn listed_by_aido() -> Vec<(String, String)> {
    let out = common::home().cmd(&["codes"]);
    assert!(out.status.success(), "aido codes: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (code, from) = line.split_once('\t').unwrap();
            (code.to_owned(), from.to_owned())
        })
        .collect()
}

fn every_code() -> BTreeSet<String> {
    listed_by_aido().into_iter().map(|(code, _)| code).collect()
}

#[test]
fn every_crate_s_coded_enums_are_registered() {
    let names: BTreeSet<String> = listed_by_aido().into_iter().map(|(_, from)| from).collect();
    // One enum from each layer, as a check that registration reaches across crates: the
    // bottom (no aido crate but the codes), the bodies, the runtime, the surfaces.
    for name in [
        "aido_vm::error::VmError",
        "aido_memory::error::StoreError",
        "aido_sandbox::error::SpawnError",
        "aido_grants::GrantError",
        "aido_walk::error::RuntimeError",
        "aido_body_net::NetBodyError",
        "aido_script::error::ScriptError",
        "aido_context::events::error::EventsError",
        "aido_context::error::StartError",
        "aido_mcp::server::CallError",
        "aido_serve::token::TokenError",
        "aido_telemetry::StartError",
        "aido_watch::error::WatchError",
        "aido_agent::error::AgentError",
    ] {
        assert!(names.contains(name), "{name} is not registered: {names:?}");
    }
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
    let unlisted: Vec<_> = codes.iter().filter(|c| !listed.contains(*c)).collect();
    let stale: Vec<_> = listed.iter().filter(|c| !codes.contains(*c)).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "docs/REFERENCE.md's Error codes section: missing {unlisted:?}; lists codes nothing gives: {stale:?}"
    );
}

#[test]
fn every_enum_lists_each_code_once() {
    for table in aido_actions::codes::tables() {
        let unique: BTreeSet<_> = table.codes.iter().collect();
        assert_eq!(
            unique.len(),
            table.codes.len(),
            "{} lists a code twice",
            table.name
        );
    }
}
