//! Composite functions: one host call of a Rhai function (a call with N host calls less one
//! with none, over N) beside one `file_info` called directly over MCP.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::harness::Server;
use crate::record::{Record, Section, median, ns};

/// Host calls in the measured function.
pub const HOST_CALLS: usize = 100;

/// The judged row, said not run when the section does not run.
pub const ROWS: [(&str, &str); 1] = [(
    "script_host_call_vs_direct_call",
    "one host call `run(\"file_info\", ...)` inside a `call_function` (a child action: judged, journaled twice, run) / one `file_info` called over MCP, time per call",
)];

/// Runs the section: `repeats` rounds, each timing the empty function, the function with
/// [`HOST_CALLS`] host calls, and [`HOST_CALLS`] direct calls; one host call's time (the
/// function's with N host calls less its time with none, over N) beside one direct call's.
pub async fn run(aido: &Path, temp: &Path, repeats: usize) -> Result<Vec<Record>> {
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
    let mut s = Section::new("script");
    let [(row, what)] = ROWS;
    s.versus(row, what, &per_host_call, "`file_info` over MCP", &direct);
    s.numbers(&[
        ("host_calls", HOST_CALLS as f64),
        ("rounds", per_host_call.len() as f64),
        ("empty_ns", median(&ns(&empty))),
    ]);
    Ok(s.finish())
}
