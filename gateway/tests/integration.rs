//! The gateway against real MCP servers: `@modelcontextprotocol/server-everything` (npm) and
//! `mcp-server-git` (PyPI), each started inside aido's real sandbox. This test binary is its
//! own sandbox child (its `main` calls `aido_sandbox::run_child_if_requested` first, as
//! aido's does), hence `harness = false`: a small runner that answers `--list` and `--exact`
//! as libtest does, so `cargo test` and `cargo nextest` both run each test on its own.
//!
//! The servers come from the directory named by `AIDO_TEST_DOWNSTREAMS` (`scripts/test`
//! prepares `tests/.downstreams`: `node_modules` with server-everything, `venv` with
//! mcp-server-git); without it a test goes through `aido_testkit::lacking` (it fails in CI).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
#![allow(clippy::print_stdout, clippy::print_stderr)] // the runner reports like libtest

mod support;

mod everything;
mod git;
mod refused;

use aido_testkit::runner::AsyncTest as Test;

const TESTS: &[(&str, Test)] = &[
    (
        "everything_lists_its_tools_namespaced_with_their_annotations",
        || Box::pin(everything::lists_tools()),
    ),
    (
        "everything_echo_and_get_sum_answer_with_their_results",
        || Box::pin(everything::echo_and_sum()),
    ),
    ("everything_errors_keep_their_own_messages", || {
        Box::pin(everything::errors())
    }),
    ("everything_progress_is_forwarded_to_the_upstream", || {
        Box::pin(everything::progress())
    }),
    ("everything_elicitation_is_answered_by_the_upstream", || {
        Box::pin(everything::elicitation())
    }),
    (
        "everything_a_crash_answers_the_call_restarts_then_spends_the_budget",
        || Box::pin(everything::crash_and_restart()),
    ),
    (
        "everything_the_tools_entry_filters_the_list_and_a_drop_ends_the_server",
        || Box::pin(everything::filtered()),
    ),
    (
        "everything_with_network_hosts_runs_behind_its_own_egress_proxy",
        || Box::pin(everything::behind_its_proxy()),
    ),
    (
        "everything_calls_run_side_by_side_each_with_its_own_progress",
        || Box::pin(everything::concurrent()),
    ),
    (
        "everything_stop_ends_the_calls_in_flight_and_is_not_a_crash",
        || Box::pin(everything::stopped()),
    ),
    (
        "a_gateway_routes_by_namespaced_name_and_reports_what_did_not_start",
        || Box::pin(everything::routed()),
    ),
    (
        "everything_over_streamable_http_with_a_bearer_token_and_a_reconnect",
        || Box::pin(everything::http()),
    ),
    (
        "git_status_and_commit_work_inside_the_walls_and_a_repo_outside_fails",
        || Box::pin(git::status_inside_and_outside()),
    ),
    ("a_command_that_does_not_exist_is_a_coded_error", || {
        Box::pin(refused::missing_command())
    }),
    ("a_sandbox_that_cannot_be_built_is_a_coded_error", || {
        Box::pin(refused::no_sandbox())
    }),
];

fn main() {
    aido_sandbox::run_child_if_requested();
    aido_testkit::runner::run(TESTS);
}
