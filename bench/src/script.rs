//! Composite functions: what one host call of a Rhai function costs beyond the primitive it
//! runs.
//!
//! aido runs a function that makes N host calls (`run("file_info", #{path})` in a loop) and
//! the same function with none; the difference, divided by N, is the time one host call adds
//! to a call_function (the script thread hands the child to the session, which judges,
//! journals, runs and journals it, and hands its output back). Beside it: one `file_info`
//! called directly over MCP, the same child's whole round trip from the agent.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::harness::Server;
use crate::record::{Record, Section, median, ns};

/// Host calls in the measured function.
pub const HOST_CALLS: usize = 100;

/// How the section ran, or why it did not.
pub type ScriptSection = crate::harness::Run<ScriptRun>;

/// What the section measured.
pub struct ScriptRun {
    /// Host calls per measured call.
    pub host_calls: usize,
    /// Per host call: (call with N host calls - call with none) / N, one per repeat.
    pub per_host_call: Vec<Duration>,
    /// A call of the function with no host call, one per repeat.
    pub empty: Vec<Duration>,
    /// One file_info over MCP, one per repeat (the median of HOST_CALLS calls).
    pub direct: Vec<Duration>,
}

/// Runs the section: `repeats` rounds, each timing the empty function, the function with
/// [`HOST_CALLS`] host calls, and [`HOST_CALLS`] direct calls.
pub async fn run(aido: &Path, temp: &Path, repeats: usize) -> ScriptSection {
    measure(aido, temp, repeats).await.into()
}

async fn measure(aido: &Path, temp: &Path, repeats: usize) -> Result<ScriptRun> {
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let (ours, home) = Server::aido(aido, work.path(), &["call_function"]).await?;
    let file = home.join("f.txt");
    std::fs::write(&file, "one line\n")?;
    let path = file.to_string_lossy().into_owned();
    let source =
        "let n = 0; for i in 0..args.n { run(\"file_info\", #{path: args.path}); n += 1; } n";
    ours.json(
        "define_function",
        json!({"name": "bench_host_calls", "source": source}),
    )
    .await?;
    let function = |n: usize| json!({"name": "bench_host_calls", "args": {"n": n, "path": path}});
    // Warm up: the engine's packages, the journal, the page cache.
    for _ in 0..3 {
        ours.json("call_function", function(HOST_CALLS)).await?;
    }
    let (mut per_host_call, mut empty, mut direct) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        ours.json("call_function", function(0)).await?;
        let none = start.elapsed();
        let start = Instant::now();
        let out = ours.json("call_function", function(HOST_CALLS)).await?;
        let full = start.elapsed();
        if out["result"] != json!(HOST_CALLS) {
            bail!(
                "the function made {} host calls, not {HOST_CALLS}",
                out["result"]
            );
        }
        per_host_call.push(full.saturating_sub(none) / HOST_CALLS as u32);
        empty.push(none);
        let mut one = Vec::with_capacity(HOST_CALLS);
        for _ in 0..HOST_CALLS {
            let start = Instant::now();
            ours.json("file_info", json!({"path": path})).await?;
            one.push(start.elapsed());
        }
        direct.push(crate::harness::median(&one));
    }
    ours.stop().await?;
    Ok(ScriptRun {
        host_calls: HOST_CALLS,
        per_host_call,
        empty,
        direct,
    })
}

/// The section's records: one host call of a Rhai function (its time with N host calls less
/// its time with none, over N) beside one direct call of the same primitive.
pub fn records(script: &ScriptSection) -> Vec<Record> {
    let mut s = Section::new("script");
    let row = "script_host_call_vs_direct_call";
    let what = "one host call `run(\"file_info\", ...)` inside a `call_function` (a child action: judged, journaled twice, run) / one `file_info` called over MCP, time per call";
    if let Some(run) = s.ran(script, &[(row, what)]) {
        s.versus(
            row,
            what,
            &run.per_host_call,
            "`file_info` over MCP",
            &run.direct,
        );
        s.numbers(&[
            ("host_calls", run.host_calls as f64),
            ("rounds", run.per_host_call.len() as f64),
            ("empty_ns", median(&ns(&run.empty))),
        ]);
    }
    s.finish()
}
