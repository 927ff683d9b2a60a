//! Each section's builder: what the harness measured, turned into records (crate::record) —
//! rows (a value with its unit, a peer's, a ratio), the facts its prose names and its detail
//! tables. The goals are in bench/targets.toml and the prose in bench/report.md.j2; nothing
//! here writes markdown.

use std::time::Duration;

use crate::estimates::Estimate;
use crate::machine::Machine;
use crate::stdio::{Measured, Outcome as StdioOutcome, Plan, StdioRun};

/// The real-work section.
pub(crate) mod realwork;
/// The results file's types.
pub mod schema;
/// The snapshot and rewind sections.
mod snapshots;
/// The VM section.
mod vm;

use crate::record::Record;
pub use crate::render::{format_bytes, format_duration, format_ns, thousands};
use schema::{Fact, Outcome, Peer, Row, Section, Table, Unit, Value};
pub use snapshots::SnapshotSection;
pub use vm::VmSection;

/// Criterion ids the report reads: the full evaluation, path resolution included.
pub const POLICY_ID: &str = "policy_evaluate_write_file_10_deny_globs";
/// The same evaluation with a resolver that makes no system call: the gates and globs alone.
pub const GATES_ID: &str = "policy_gates_write_file_10_deny_globs";
/// See [`POLICY_ID`].
pub const SIMULATE_ID: &str = "simulate_pipeline_20_leaves";
/// See [`POLICY_ID`].
pub const GROUP_COMMIT_ID: &str = "journal_append_8_writers/group_commit";
/// See [`POLICY_ID`].
pub const PER_RECORD_ID: &str = "journal_append_8_writers/flush_per_record";
/// See [`POLICY_ID`]: one `symlink_metadata` call, the price of a system call of the full
/// evaluation.
pub const METADATA_ID: &str = "metadata_call";

/// Metadata calls one full evaluation in the policy bench makes: its `write_file` of
/// `src/main.rs`, from a session in `~/project`, is resolved from the nearest anchor (`~`, the
/// write root and the policy's workdir) with one `openat2` of the whole path with
/// `RESOLVE_NO_SYMLINKS`: `project/src/main.rs` is missing (the file is about to be written),
/// and `ENOENT` with no symlink met says the path is its own resolution. (Before, one probe per
/// component below the anchor: three calls.)
pub const METADATA_CALLS_PER_EVALUATION: u32 = 1;

/// Everything one run measured.
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// Criterion: policy evaluate, path resolution included.
    pub policy: Option<Estimate>,
    /// Criterion: the same evaluation without system calls.
    pub gates: Option<Estimate>,
    /// Criterion: simulate.
    pub simulate: Option<Estimate>,
    /// Criterion: journal appends with group commit.
    pub group_commit: Option<Estimate>,
    /// Criterion: journal appends flushing every record.
    pub per_record: Option<Estimate>,
    /// Criterion: one metadata call.
    pub metadata: Option<Estimate>,
    /// The stdio comparison: in the default temp dir, then on tmpfs.
    pub stdio: Vec<StdioRun>,
    /// How the stdio comparison ran.
    pub plan: Plan,
    /// The peer package and version.
    pub peer: String,
    /// Snapshot create and restore, and rewind.
    pub snapshots: SnapshotSection,
    /// Boot, snapshot revert, pool acquire, memory and find_text of whole machines.
    pub vm: VmSection,
    /// search_code against rg, search_and_read against the calls it saves.
    pub search: crate::search::SearchSection,
    /// recall against server-memory's search_nodes.
    pub memory: crate::memory::MemorySection,
    /// fetch_url against mcp-server-fetch.
    pub fetch: crate::fetch::FetchSection,
    /// A Rhai function's per-host-call overhead.
    pub script: crate::script::ScriptSection,
    /// `aido serve` over HTTP beside stdio, sessions held, telemetry on vs off.
    pub serve: crate::serve::ServeSection,
    /// Screenshots and keypress-to-pixels per desktop backend.
    pub desktop: crate::desktop::DesktopSection,
    /// Artifact serving latency, and create + serve over MCP.
    pub artifact: crate::artifact::ArtifactSection,
    /// Confined commands beside bare spawns, srt and codex; a flood; changes per file.
    pub process: crate::process::ProcessSection,
    /// Memory over many mixed calls, on stdio and over HTTP.
    pub soak: crate::soak::SoakSection,
    /// Real work through aido beside bare: venv, wheels, a no-op rebuild, 20,000 files, 2 GiB.
    pub realwork: crate::realwork::RealworkSection,
}

/// A row of `section`, its target from the table, judged.
pub(crate) fn row(
    section: &str,
    id: impl Into<String>,
    what: impl Into<String>,
    outcome: Outcome,
) -> Row {
    let id = id.into();
    Row {
        id,
        section: section.into(),
        what: what.into(),
        outcome,
        peer: None,
        ratio: None,
    }
}

/// `row` beside its peer, with the ratio of the two, judged again.
fn beside(mut row: Row, peer: Peer, ratio: Option<f64>) -> Row {
    row.peer = Some(peer);
    row.ratio = ratio;
    row
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// Samples in the order taken: median, min, max, how many, and the samples themselves.
pub(crate) fn samples(values: &[Duration]) -> Value {
    Value {
        unit: Unit::Ns,
        median: ns(crate::snapshots::median(values)),
        min: values.iter().min().map(|d| ns(*d)),
        max: values.iter().max().map(|d| ns(*d)),
        n: Some(values.len() as u64),
        samples: values.iter().map(|d| ns(*d)).collect(),
        ..Value::default()
    }
}

/// One timed value.
pub(crate) fn once(d: Duration) -> Value {
    Value {
        unit: Unit::Ns,
        median: ns(d),
        ..Value::default()
    }
}

/// A part that may have failed, measured by `f` when it did not.
pub(crate) fn part<T>(outcome: &Result<T, String>, f: impl FnOnce(&T) -> Value) -> Outcome {
    match outcome {
        Ok(t) => Outcome::Measured(f(t)),
        Err(e) => Outcome::Failed(e.clone()),
    }
}

fn criterion(estimate: &Option<Estimate>) -> Outcome {
    match estimate {
        Some(e) => Outcome::Measured(Value {
            unit: Unit::Ns,
            median: e.median_ns,
            ci95: Some([e.low_ns, e.high_ns]),
            ..Value::default()
        }),
        None => Outcome::NotRun("criterion has no estimate (run the bench first)".into()),
    }
}

/// The run when the section was measured; otherwise each of `ids` (id, what) pushed as not
/// run (or failed), and `None`.
fn ran<'a, T>(
    measured: &'a crate::harness::Run<T>,
    section: &str,
    ids: &[(&str, &str)],
    rows: &mut Vec<Row>,
) -> Option<&'a T> {
    use crate::harness::Run;
    let outcome = match measured {
        Run::Ran(run) => return Some(run),
        Run::Skipped(why) => Outcome::NotRun(why.clone()),
        Run::Failed(why) => Outcome::Failed(why.clone()),
    };
    for (id, what) in ids {
        rows.push(row(section, *id, *what, outcome.clone()));
    }
    None
}

/// aido's samples beside a peer's, with the ratio of their medians.
fn versus(
    section: &str,
    id: &str,
    what: &str,
    aido: &[Duration],
    peer: &str,
    theirs: &[Duration],
) -> Row {
    let (ours, theirs) = (samples(aido), samples(theirs));
    let ratio = (theirs.median > 0.0).then(|| ours.median / theirs.median);
    let peer = Peer {
        name: peer.into(),
        value: theirs,
    };
    beside(row(section, id, what, Outcome::Measured(ours)), peer, ratio)
}

/// A detail table from string literals and rows of cells.
pub(crate) fn table(columns: &[&str], cells: Vec<Vec<String>>) -> Table {
    Table {
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        cells,
    }
}

/// A section's builder, with extra parameters for its notes.
pub(crate) type Build<S> = fn(&S, &mut Vec<Row>, &[(&str, Fact)]) -> Section;

/// The records of a section measured on its own; with `when` (commit, date), saying when (its
/// notes have the sentence with `{alone_commit}` and `{alone_date}`).
pub fn alone<S>(measured: &S, build: Build<S>, when: Option<(&str, &str)>) -> Vec<Record> {
    let extra = when.map(|(commit, date)| {
        [
            ("alone_commit", format!("`{commit}`").into()),
            ("alone_date", date.to_owned().into()),
        ]
    });
    let mut rows = Vec::new();
    let section = build(measured, &mut rows, extra.as_ref().map_or(&[], |e| e));
    records(section, &rows)
}

/// A section's records: its facts and tables, then its rows.
fn records(section: Section, rows: &[Row]) -> Vec<Record> {
    let mut out = section.records;
    out.extend(
        rows.iter()
            .filter(|r| r.section == section.id)
            .flat_map(Row::records),
    );
    out
}

/// The soak section: per transport, the largest resident memory after warm-up and its growth
/// over the last three quarters of the calls, judged against the bound; a table of the marks.
#[allow(clippy::too_many_lines)]
pub(crate) fn soak_section(
    soak: &crate::soak::SoakSection,
    rows: &mut Vec<Row>,
    extra: &[(&str, Fact)],
) -> Section {
    const S: &str = "soak";
    let ids = [
        ("stdio", "soak_stdio_rss_max", "soak_stdio_rss_growth"),
        ("HTTP", "soak_http_rss_max", "soak_http_rss_growth"),
    ];
    let Some(run) = ran(
        soak,
        S,
        &ids.iter()
            .flat_map(|(_, max, growth)| {
                [
                    (*max, "see the soak section"),
                    (*growth, "see the soak section"),
                ]
            })
            .collect::<Vec<_>>(),
        rows,
    ) else {
        return section(S, extra, Vec::new());
    };
    let [warm, quarter, half, all] = run.marks();
    let bytes = |b: u64| Value {
        unit: Unit::Bytes,
        median: b as f64,
        ..Value::default()
    };
    let thousands = |n: usize| thousands(n as f64);
    let server = |transport: &str| match transport {
        "stdio" => "`aido mcp` on stdio",
        _ => "`aido serve` over HTTP",
    };
    let mut cells = Vec::new();
    for (transport, max_id, growth_id) in ids {
        let Some(side) = run.sides.iter().find(|s| s.transport == transport) else {
            for id in [max_id, growth_id] {
                let outcome = Outcome::Failed(format!("no {transport} run"));
                rows.push(row(S, id, "see the soak section", outcome));
            }
            continue;
        };
        let after: Vec<f64> = side
            .samples
            .iter()
            .filter(|(n, _)| *n >= warm)
            .map(|(_, rss)| *rss as f64)
            .collect();
        rows.push(row(
            S,
            max_id,
            format!(
                "{}: the largest resident memory (VmRSS) sampled from call {} to call {} of {} mixed calls",
                server(transport),
                thousands(warm),
                thousands(all),
                thousands(all)
            ),
            Outcome::Measured(Value {
                max: Some(side.max_from(warm) as f64),
                min: after.iter().copied().reduce(f64::min),
                n: Some(after.len() as u64),
                samples: after,
                ..bytes(side.max_from(warm))
            }),
        ));
        rows.push(row(
            S,
            growth_id,
            format!(
                "{}: resident memory at call {} less at call {}",
                server(transport),
                thousands(all),
                thousands(quarter)
            ),
            Outcome::Measured(bytes(side.at(all).saturating_sub(side.at(quarter)))),
        ));
        let mb = |b: u64| format!("{:.1}", b as f64 / 1e6);
        cells.push(vec![
            transport.to_owned(),
            mb(side.at(0)),
            mb(side.at(warm)),
            mb(side.at(quarter)),
            mb(side.at(half)),
            mb(side.at(all)),
            mb(side.peak),
            format!("{:.0}", all as f64 / side.took.as_secs_f64().max(1e-9)),
            format!("{:.0}", side.disk_bytes as f64 / 1e6),
        ]);
    }
    let columns = [
        "transport".to_owned(),
        "RSS at start (MB)".to_owned(),
        format!("after {} calls", thousands(warm)),
        thousands(quarter).to_string(),
        thousands(half).to_string(),
        thousands(all).to_string(),
        "peak, VmHWM (MB)".to_owned(),
        "calls/s".to_owned(),
        "journal and audit on disk (MB)".to_owned(),
    ];
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let bound = crate::render::limit("soak_stdio_rss_max").unwrap_or_default();
    let growth = crate::render::limit("soak_stdio_rss_growth").unwrap_or_default();
    section(
        S,
        &[
            ("calls", all.into()),
            ("every", run.options.large_every.into()),
            ("large_bytes", run.options.large_bytes.into()),
            ("sample_every", crate::soak::SAMPLE_EVERY.into()),
            ("warm", warm.into()),
            ("quarter", quarter.into()),
            ("bound", bound.into()),
            ("growth", growth.into()),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect::<Vec<(&str, Fact)>>(),
        vec![("soak", table(&columns, cells))],
    )
}

/// A section from its facts and detail tables.
pub(crate) fn section(id: &str, params: &[(&str, Fact)], tables: Vec<(&str, Table)>) -> Section {
    let mut out = crate::record::Section::new(id);
    for (name, value) in params {
        match value.clone() {
            Fact::Text(text) => out.fact(name, text),
            Fact::Number(number) => out.number(name, number),
        }
    }
    for (name, table) in tables {
        for (k, cells) in table.cells.iter().enumerate() {
            let cells: Vec<(&str, String)> = table
                .columns
                .iter()
                .map(String::as_str)
                .zip(cells.iter().cloned())
                .collect();
            out.line(name, k + 1, &cells);
        }
    }
    Section {
        id: id.into(),
        records: out.records,
    }
}

/// The search section: search_code beside rg (time per search), and search_and_read beside
/// the calls it saves (bytes).
fn search_section(search: &crate::search::SearchSection, rows: &mut Vec<Row>) -> Section {
    use crate::search::PATTERNS;
    const S: &str = "search";
    let what = "`search_code` through aido (MCP, every file judged, journaled) / the `rg` binary, same tree and patterns";
    let Some(run) = ran(search, S, &[("search_code_vs_rg", what)], rows) else {
        return section(S, &[], Vec::new());
    };
    rows.push(versus(
        S,
        "search_code_vs_rg",
        what,
        &run.aido,
        "rg",
        &run.rg,
    ));
    let bytes = |n: usize| Value {
        unit: Unit::Bytes,
        median: n as f64,
        ..Value::default()
    };
    let mut cells = Vec::new();
    for (k, case) in run.reads.iter().enumerate() {
        rows.push(beside(
            row(
                S,
                format!("search_and_read_bytes_{}", k + 1),
                format!(
                    "`search_and_read` `{}` (1 call) / search_code + read_file ({} calls), bytes received",
                    case.pattern, case.calls_without
                ),
                Outcome::Measured(bytes(case.bytes)),
            ),
            Peer {
                name: "search_code + read_file".into(),
                value: bytes(case.bytes_without),
            },
            (case.bytes_without > 0).then(|| case.bytes as f64 / case.bytes_without as f64),
        ));
        cells.push(vec![
            format!("`{}`", case.pattern),
            case.definitions.to_string(),
            case.callers.to_string(),
            "1".into(),
            case.bytes.to_string(),
            case.calls_without.to_string(),
            case.bytes_without.to_string(),
        ]);
    }
    let reads = table(
        &[
            "pattern",
            "definitions",
            "callers",
            "search_and_read calls",
            "its bytes",
            "calls without it",
            "their bytes",
        ],
        cells,
    );
    section(
        S,
        &[
            ("patterns", PATTERNS.len().into()),
            ("tree", run.tree.clone().into()),
            ("files", run.files.into()),
            ("hits", run.hits.into()),
            ("repeats", run.aido.len().into()),
            ("read_tree", run.read_tree.clone().into()),
        ],
        vec![("reads", reads)],
    )
}

/// The memory section: aido's recall beside server-memory's search_nodes (time per query),
/// and what each found.
fn memory_section(memory: &crate::memory::MemorySection, rows: &mut Vec<Row>) -> Section {
    const S: &str = "memory";
    let what = "`recall` through aido (MCP, journaled, SQLite FTS5) / `search_nodes` of `@modelcontextprotocol/server-memory`, same memories and queries, time per query";
    let Some(run) = ran(memory, S, &[("memory_recall_vs_server_memory", what)], rows) else {
        return section(S, &[], Vec::new());
    };
    rows.push(versus(
        S,
        "memory_recall_vs_server_memory",
        what,
        &run.aido,
        &run.peer,
        &run.peer_times,
    ));
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    let cells = run
        .queries
        .iter()
        .map(|q| {
            vec![
                format!("`{}`", q.query),
                q.aido_results.to_string(),
                yes(q.aido_found),
                q.peer_results.to_string(),
                yes(q.peer_found),
            ]
        })
        .collect();
    let found = table(
        &[
            "query",
            "aido results (at most 10)",
            "aido found its memory",
            "server-memory results",
            "server-memory found it",
        ],
        cells,
    );
    let count = |f: fn(&crate::memory::Found) -> bool| run.queries.iter().filter(|q| f(q)).count();
    section(
        S,
        &[
            ("memories", run.memories.into()),
            ("queries", run.queries.len().into()),
            ("calls", run.aido.len().into()),
            ("peer", run.peer.clone().into()),
            ("aido_found", count(|q| q.aido_found).into()),
            ("peer_found", count(|q| q.peer_found).into()),
        ],
        vec![("found", found)],
    )
}

/// The fetch section: fetch_url beside mcp-server-fetch's fetch (time per fetch), and the
/// bytes each hands the agent per page.
pub(crate) fn fetch_section(fetch: &crate::fetch::FetchSection, rows: &mut Vec<Row>) -> Section {
    const S: &str = "fetch";
    let what = "`fetch_url` through aido (MCP, policy and address judged, journaled, htmd) / `fetch` of `mcp-server-fetch`, same local pages, first 5,000 characters as markdown, time per fetch";
    let Some(run) = ran(fetch, S, &[("fetch_url_vs_mcp_server_fetch", what)], rows) else {
        return section(S, &[], Vec::new());
    };
    rows.push(versus(
        S,
        "fetch_url_vs_mcp_server_fetch",
        what,
        &run.aido,
        &run.peer,
        &run.peer_times,
    ));
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1000.0);
    let cells = run
        .pages
        .iter()
        .map(|p| {
            vec![
                format!("`{}`", p.name),
                p.html_bytes.to_string(),
                ms(p.aido_median),
                ms(p.peer_median),
                p.aido_bytes.to_string(),
                p.peer_bytes.to_string(),
            ]
        })
        .collect();
    let pages = table(
        &[
            "page",
            "HTML bytes",
            "aido median (ms)",
            "mcp-server-fetch median (ms)",
            "bytes to the agent, aido",
            "bytes to the agent, mcp-server-fetch",
        ],
        cells,
    );
    section(
        S,
        &[
            ("peer", run.peer.clone().into()),
            ("calls", run.aido.len().into()),
            ("pages", run.pages.len().into()),
        ],
        vec![("pages", pages)],
    )
}

/// The script section: one host call of a Rhai function (the function's time with N host
/// calls less its time with none, over N), beside one direct call of the same primitive.
pub(crate) fn script_section(
    script: &crate::script::ScriptSection,
    rows: &mut Vec<Row>,
) -> Section {
    const S: &str = "script";
    let what = "one host call `run(\"file_info\", ...)` inside a `call_function` (a child action: judged, journaled twice, run) / one `file_info` called over MCP, time per call";
    let Some(run) = ran(
        script,
        S,
        &[("script_host_call_vs_direct_call", what)],
        rows,
    ) else {
        return section(S, &[], Vec::new());
    };
    rows.push(versus(
        S,
        "script_host_call_vs_direct_call",
        what,
        &run.per_host_call,
        "`file_info` over MCP",
        &run.direct,
    ));
    section(
        S,
        &[
            ("host_calls", run.host_calls.into()),
            ("rounds", run.per_host_call.len().into()),
            ("empty_ns", ns(crate::snapshots::median(&run.empty)).into()),
        ],
        Vec::new(),
    )
}

/// The serve section: read_file over HTTP beside stdio (p50 and p99, round trips per second),
/// MCP sessions held with the server's memory, and telemetry's price per action; `extra`
/// parameters for its notes.
#[allow(clippy::too_many_lines)]
pub(crate) fn serve_section(
    serve: &crate::serve::ServeSection,
    rows: &mut Vec<Row>,
    extra: &[(&str, Fact)],
) -> Section {
    const S: &str = "serve";
    let ids = [
        "serve_http_read_file_vs_stdio",
        "serve_http_read_file_p99",
        "serve_http_round_trips_per_second",
        "serve_sessions_held_memory",
        "serve_telemetry_on_vs_off",
    ];
    let Some(run) = ran(serve, S, &ids.map(|id| (id, "see the serve section")), rows) else {
        return section(S, extra, Vec::new());
    };
    rows.push(versus(
        S,
        ids[0],
        "read_file round trip over streamable HTTP (`aido serve`, one session, rmcp client), median",
        &run.http,
        "the same over aido's stdio (`aido mcp`)",
        &run.stdio,
    ));
    let p99 = |d: &[Duration]| once(crate::harness::percentile(d, 99.0));
    rows.push(beside(
        row(
            S,
            ids[1],
            "read_file round trip over HTTP, p99",
            Outcome::Measured(p99(&run.http)),
        ),
        Peer {
            name: "stdio, p99".into(),
            value: p99(&run.stdio),
        },
        None,
    ));
    let per_second = |d: &[Duration]| {
        let busy: Duration = d.iter().sum();
        Value {
            unit: Unit::PerSecond,
            median: if busy.is_zero() {
                0.0
            } else {
                d.len() as f64 / busy.as_secs_f64()
            },
            n: Some(d.len() as u64),
            ..Value::default()
        }
    };
    rows.push(beside(
        row(
            S,
            ids[2],
            "read_file round trips per second over HTTP, one client in sequence",
            Outcome::Measured(per_second(&run.http)),
        ),
        Peer {
            name: "stdio".into(),
            value: per_second(&run.stdio),
        },
        None,
    ));
    let grown = run.rss_held.saturating_sub(run.rss_before);
    rows.push(row(
        S,
        ids[3],
        format!(
            "resident memory of `aido serve` holding {} initialized MCP sessions (grown from {:.1} MB)",
            run.held,
            run.rss_before as f64 / 1e6
        ),
        Outcome::Measured(Value {
            unit: Unit::Bytes,
            median: run.rss_held as f64,
            ..Value::default()
        }),
    ));
    match &run.telemetry {
        Ok(t) => {
            let on = samples(&t.on);
            let off = samples(&t.off);
            let ratio = (off.median > 0.0).then(|| on.median / off.median);
            rows.push(beside(
                row(
                    S,
                    ids[4],
                    "read_file in process with telemetry on (spans, metrics and log records to a real OTLP receiver, Prometheus registry), median",
                    Outcome::Measured(on),
                ),
                Peer {
                    name: "telemetry off".into(),
                    value: off,
                },
                ratio,
            ));
        }
        Err(why) => rows.push(row(
            S,
            ids[4],
            "read_file with telemetry on vs off",
            Outcome::Failed(why.clone()),
        )),
    }
    let (dropped, tel_calls): (Fact, Fact) = match &run.telemetry {
        Ok(t) => (t.dropped.into(), t.on.len().into()),
        Err(_) => ("-".to_owned().into(), 0_usize.into()),
    };
    section(
        S,
        &[
            ("calls", run.http.len().into()),
            ("rounds", run.rounds.into()),
            ("held", run.held.into()),
            (
                "per_session_bytes",
                (grown as f64 / run.held.max(1) as f64).into(),
            ),
            (
                "held_p50_ns",
                ns(crate::harness::percentile(&run.while_held, 50.0)).into(),
            ),
            ("telemetry_calls", tel_calls),
            ("dropped", dropped),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect::<Vec<(&str, Fact)>>(),
        Vec::new(),
    )
}

/// The artifact section: GETs of a served page (p50, p99) and artifact_create +
/// artifact_serve over MCP.
pub(crate) fn artifact_section(
    artifact: &crate::artifact::ArtifactSection,
    rows: &mut Vec<Row>,
) -> Section {
    const S: &str = "artifact";
    let get_what = "a GET of a served artifact page on 127.0.0.1 (keep-alive; Host check, route, manifest, file read and blake3 check, headers), time per GET";
    let trip_what = "`artifact_create` (2 files) then `artifact_serve` over MCP (stdio), the agent's round trip from files to a URL";
    let Some(run) = ran(
        artifact,
        S,
        &[
            ("artifact_get", get_what),
            ("artifact_create_serve", trip_what),
        ],
        rows,
    ) else {
        return section(S, &[], Vec::new());
    };
    let latency = |values: &[Duration]| Value {
        unit: Unit::Ns,
        median: ns(crate::harness::percentile(values, 50.0)),
        p99: Some(ns(crate::harness::percentile(values, 99.0))),
        max: values.iter().max().map(|d| ns(*d)),
        n: Some(values.len() as u64),
        ..Value::default()
    };
    rows.push(row(
        S,
        "artifact_get",
        get_what,
        Outcome::Measured(latency(&run.gets)),
    ));
    rows.push(row(
        S,
        "artifact_create_serve",
        trip_what,
        Outcome::Measured(latency(&run.round_trips)),
    ));
    section(
        S,
        &[
            ("gets", run.gets.len().into()),
            ("round_trips", run.round_trips.len().into()),
            ("page_bytes", run.page_bytes.into()),
        ],
        Vec::new(),
    )
}

/// The process section: `aido exec -- true` beside srt and codex (and a bare spawn),
/// `run_command` of `true` over MCP, a 1 GB flood's memory, and the cost per changed file;
/// `extra` parameters for its notes.
#[allow(clippy::too_many_lines)]
pub(crate) fn process_section(
    process: &crate::process::ProcessSection,
    rows: &mut Vec<Row>,
    extra: &[(&str, Fact)],
) -> Section {
    use crate::process::{FILES, FLOOD_BYTES};
    const S: &str = "process";
    let ids = [
        "process_exec_vs_srt",
        "process_exec_vs_codex",
        "process_run_command_true",
        "process_flood_memory",
        "process_changes_per_file",
        "process_dev_server_round_trip",
    ];
    let Some(run) = ran(
        process,
        S,
        &ids.map(|id| (id, "see the process section")),
        rows,
    ) else {
        return section(S, extra, Vec::new());
    };
    let side = |name: &str| run.sides.iter().find(|s| s.name == name);
    let exec_what = |peer: &str| {
        format!(
            "`aido exec -- true` (a whole aido process: policy, a journal session, the sandbox, the journaled result) / `{peer}` on the same command, wall time per spawn"
        )
    };
    let exec = side("aido exec").map(|s| s.times.clone());
    for (id, peer_name) in [(ids[0], "srt"), (ids[1], "codex sandbox")] {
        let what = exec_what(&side(peer_name).map_or(peer_name.to_owned(), |s| s.command.clone()));
        let outcome = match (&exec, side(peer_name).map(|s| &s.times)) {
            (Some(Ok(ours)), Some(Ok(theirs))) => {
                rows.push(versus(S, id, &what, ours, peer_name, theirs));
                continue;
            }
            (Some(Err(e)), _) => Outcome::Failed(format!("aido exec: {e}")),
            (_, Some(Err(e))) => Outcome::NotRun(format!("{peer_name} does not run here: {e}")),
            _ => Outcome::Failed("a side is missing".into()),
        };
        rows.push(row(S, id, what, outcome));
    }
    let p50 = |values: &[Duration]| Value {
        unit: Unit::Ns,
        median: ns(crate::harness::percentile(values, 50.0)),
        p99: Some(ns(crate::harness::percentile(values, 99.0))),
        max: values.iter().max().map(|d| ns(*d)),
        n: Some(values.len() as u64),
        ..Value::default()
    };
    rows.push(row(
        S,
        ids[2],
        "`run_command` of `true` over MCP (stdio), end to end: judged, journaled, confined in the sandbox, its overlay layer read, the result journaled",
        Outcome::Measured(p50(&run.run_command)),
    ));
    let grown = run.flood_rss_peak.saturating_sub(run.flood_rss_before);
    rows.push(row(
        S,
        ids[3],
        format!(
            "aido's peak resident memory (VmHWM) after `run_command` of a {} MB output flood, less its resident memory before",
            FLOOD_BYTES / 1_000_000
        ),
        Outcome::Measured(Value {
            unit: Unit::Bytes,
            median: grown as f64,
            ..Value::default()
        }),
    ));
    rows.push(row(
        S,
        ids[4],
        format!(
            "journaling a command's file changes, per file changed: (median of a command writing {FILES} new files - median of one writing 1) / {}",
            FILES - 1
        ),
        Outcome::Measured(once(run.per_file())),
    ));
    let dev_what = format!(
        "the dev-server workflow: `run_command` of a Python client fetching a page from a background `python3 -m http.server` on the session's loopback / the same client run bare against one on the host, {} round trips each, alternately",
        run.dev_server.len()
    );
    let dev = if run.dev_server.is_empty() || run.dev_server_bare.is_empty() {
        row(
            S,
            ids[5],
            dev_what,
            Outcome::NotRun("this results file has no dev-server figures yet".into()),
        )
    } else {
        let (ours, bare) = (&run.dev_server, &run.dev_server_bare);
        versus(S, ids[5], &dev_what, ours, "bare", bare)
    };
    rows.push(dev);
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
    let cells = run
        .sides
        .iter()
        .map(|s| match &s.times {
            Ok(times) => vec![
                s.name.clone(),
                format!("`{}`", s.command),
                ms(crate::snapshots::median(times)),
                ms(crate::harness::percentile(times, 99.0)),
                times.len().to_string(),
            ],
            Err(e) => vec![
                s.name.clone(),
                format!("`{}`", s.command),
                format!("did not run: {e}"),
                "-".into(),
                "0".into(),
            ],
        })
        .collect();
    section(
        S,
        &[
            ("calls", run.run_command.len().into()),
            ("spawn_rounds", crate::process::SPAWN_ROUNDS.into()),
            ("flood_mb", (FLOOD_BYTES / 1_000_000).into()),
            ("flood_ns", ns(run.flood_time).into()),
            ("flood_counted", run.flood_counted.into()),
            ("rss_before", run.flood_rss_before.into()),
            ("rss_peak", run.flood_rss_peak.into()),
            ("files", FILES.into()),
            ("home_dirs", crate::process::HOME_DIRS.into()),
            (
                "one_file_ns",
                ns(crate::snapshots::median(&run.one_file)).into(),
            ),
            (
                "many_files_ns",
                ns(crate::snapshots::median(&run.many_files)).into(),
            ),
            ("repeats", run.one_file.len().into()),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect::<Vec<(&str, Fact)>>(),
        vec![(
            "spawns",
            table(&["side", "command", "p50 ms", "p99 ms", "spawns"], cells),
        )],
    )
}

/// The desktop section: per backend, a screenshot beside grim / import, and a keypress to
/// pixels beside wtype / xdotool.
#[allow(clippy::too_many_lines)]
pub(crate) fn desktop_section(
    desktop: &crate::desktop::DesktopSection,
    rows: &mut Vec<Row>,
) -> Section {
    use crate::desktop::{DesktopSection, KEYS, SHOTS};
    const S: &str = "desktop";
    let ids = |backend: &str| {
        (
            format!("desktop_screenshot_{backend}"),
            format!("desktop_keypress_to_pixels_{backend}"),
        )
    };
    let shot_what = |backend: &str| {
        format!(
            "desktop screenshot ({backend} backend: capture, blackout, PNG) / the command-line tool on the same screen, time per screenshot"
        )
    };
    let key_what = |backend: &str| {
        format!(
            "desktop keypress to pixels ({backend} backend: type_text of one character until the terminal's pixels change) / the same character from the command-line tool, time per keypress"
        )
    };
    let lanes = match desktop {
        DesktopSection::Ran(lanes) => lanes,
        DesktopSection::Skipped(why) => {
            for backend in ["wlr", "x11"] {
                let (shot, key) = ids(backend);
                rows.push(row(
                    S,
                    shot,
                    shot_what(backend),
                    Outcome::NotRun(why.clone()),
                ));
                rows.push(row(S, key, key_what(backend), Outcome::NotRun(why.clone())));
            }
            return section(
                S,
                &[
                    ("lanes", "Not run.".to_owned().into()),
                    ("shots", SHOTS.into()),
                    ("keys", KEYS.into()),
                ],
                vec![("lanes", table(&["lane", "server"], Vec::new()))],
            );
        }
    };
    let mut cells = Vec::new();
    let with_peer = |id: String,
                     what: String,
                     ours: &[Duration],
                     peer: &Result<(String, Vec<Duration>), String>|
     -> Row {
        let ours = samples(ours);
        match peer {
            Ok((name, times)) => {
                let theirs = samples(times);
                let ratio = (theirs.median > 0.0).then(|| ours.median / theirs.median);
                beside(
                    row(S, id, what, Outcome::Measured(ours)),
                    Peer {
                        name: name.clone(),
                        value: theirs,
                    },
                    ratio,
                )
            }
            Err(_) => row(S, id, what, Outcome::Measured(ours)),
        }
    };
    for (backend, lane) in lanes {
        let (shot_id, key_id) = ids(backend);
        match lane {
            Ok(l) => {
                rows.push(with_peer(
                    shot_id,
                    shot_what(backend),
                    &l.shot,
                    &l.peer_shot,
                ));
                rows.push(with_peer(key_id, key_what(backend), &l.key, &l.peer_key));
                let why = |p: &Result<(String, Vec<Duration>), String>| match p {
                    Ok((name, _)) => name.clone(),
                    Err(e) => e.clone(),
                };
                cells.push(vec![
                    format!("`{backend}`"),
                    l.server.clone(),
                    format!("{}x{}", l.screen[0], l.screen[1]),
                    why(&l.peer_shot),
                    why(&l.peer_key),
                ]);
            }
            Err(e) => {
                let outcome = if e.starts_with("not run") {
                    Outcome::NotRun(e.clone())
                } else {
                    Outcome::Failed(e.clone())
                };
                rows.push(row(S, shot_id, shot_what(backend), outcome.clone()));
                rows.push(row(S, key_id, key_what(backend), outcome));
                cells.push(vec![
                    format!("`{backend}`"),
                    e.clone(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
            }
        }
    }
    section(
        S,
        &[
            (
                "lanes",
                format!(
                    "{} lane(s) ran.",
                    lanes.iter().filter(|(_, l)| l.is_ok()).count()
                )
                .into(),
            ),
            ("shots", SHOTS.into()),
            ("keys", KEYS.into()),
        ],
        vec![(
            "lanes",
            table(
                &[
                    "backend",
                    "server",
                    "screen",
                    "screenshot peer",
                    "keypress peer",
                ],
                cells,
            ),
        )],
    )
}

impl Report {
    /// Every record of the run, in report order.
    pub fn records(&self) -> Vec<Record> {
        let m = &self.machine;
        let mut rows = Vec::new();
        let mut sections = vec![
            self.policy(&mut rows),
            self.journal(&mut rows),
            self.stdio(&mut rows),
        ];
        sections.extend(snapshots::sections(&self.snapshots, &mut rows));
        sections.push(vm::section(&self.vm, &mut rows));
        sections.push(search_section(&self.search, &mut rows));
        sections.push(memory_section(&self.memory, &mut rows));
        sections.push(fetch_section(&self.fetch, &mut rows));
        sections.push(script_section(&self.script, &mut rows));
        sections.push(serve_section(&self.serve, &mut rows, &[]));
        sections.push(desktop_section(&self.desktop, &mut rows));
        sections.push(artifact_section(&self.artifact, &mut rows));
        sections.push(process_section(&self.process, &mut rows, &[]));
        sections.push(soak_section(&self.soak, &mut rows, &[]));
        sections.push(realwork::section(&self.realwork, &mut rows, &[]));
        let mut run = crate::record::Section::new("run");
        run.fact(
            "source",
            format!("measured by aido-bench at commit {}", m.commit),
        );
        run.fact("date", m.date.clone());
        let mut machine = crate::record::Section::new("machine");
        for (fact, value) in [
            ("CPUs (nproc)", m.cpus.to_string()),
            ("CPU model", m.cpu_model.clone()),
            ("memory", m.memory.clone()),
            ("kernel", m.kernel.clone()),
            ("file system under the temp dir", m.temp_fs.clone()),
            ("rustc", m.rustc.clone()),
            ("node (for the peer)", m.node.clone()),
            ("git commit", format!("`{}`", m.commit)),
            ("date", m.date.clone()),
        ] {
            machine.fact(fact, value);
        }
        let mut out = run.records;
        out.extend(machine.records);
        for section in sections {
            out.extend(records(section, &rows));
        }
        out
    }

    fn policy(&self, rows: &mut Vec<Row>) -> Section {
        const S: &str = "policy";
        let n = METADATA_CALLS_PER_EVALUATION;
        rows.extend([
            row(
                S,
                POLICY_ID,
                "policy: evaluate a write_file, 10 deny globs (full: gates, globs and real path \
                 resolution)",
                criterion(&self.policy),
            ),
            row(
                S,
                GATES_ID,
                "policy: evaluate a write_file, 10 deny globs (gates and globs alone, no system \
                 calls)",
                criterion(&self.gates),
            ),
            row(
                S,
                SIMULATE_ID,
                "policy: simulate a 20-leaf pipeline",
                criterion(&self.simulate),
            ),
            row(
                S,
                METADATA_ID,
                format!(
                    "one `std::fs::symlink_metadata` call on a file in the temp dir ({})",
                    self.machine.temp_fs
                ),
                criterion(&self.metadata),
            ),
        ]);
        let mut tables = Vec::new();
        if let (Some(full), Some(gates), Some(m)) = (&self.policy, &self.gates, &self.metadata) {
            let calls = f64::from(n) * m.median_ns;
            let cells = [
                (
                    format!("gates and 10 deny globs (`{GATES_ID}`, median)"),
                    gates.median_ns,
                ),
                (
                    format!(
                        "{n} system call{} × {} (each priced as one metadata call)",
                        if n == 1 { "" } else { "s" },
                        format_ns(m.median_ns)
                    ),
                    calls,
                ),
                ("sum".into(), gates.median_ns + calls),
                (
                    format!("measured full evaluation (`{POLICY_ID}`, median)"),
                    full.median_ns,
                ),
            ];
            let cells = cells.map(|(part, ns)| vec![part, format_ns(ns)]).into();
            tables.push((
                "parts",
                table(&["part of the full evaluation", "time"], cells),
            ));
        }
        section(S, &[("calls", Fact::from(n))], tables)
    }

    fn journal(&self, rows: &mut Vec<Row>) -> Section {
        const S: &str = "journal";
        let per_second = |e: &Option<Estimate>| {
            e.as_ref().and_then(Estimate::per_second).map(|v| Value {
                unit: Unit::PerSecond,
                median: v,
                ..Value::default()
            })
        };
        rows.push(row(
            S,
            GROUP_COMMIT_ID,
            "group commit, 400 records an iteration, time per iteration",
            criterion(&self.group_commit),
        ));
        rows.push(row(
            S,
            PER_RECORD_ID,
            "flush-per-record, 400 records an iteration, time per iteration",
            criterion(&self.per_record),
        ));
        let what =
            "journal: group commit over flush-per-record, 8 writers, records/s at the median";
        rows.push(
            match (per_second(&self.group_commit), per_second(&self.per_record)) {
                (Some(group), Some(single)) => {
                    let ratio = (single.median > 0.0).then(|| group.median / single.median);
                    beside(
                        row(
                            S,
                            "journal_append_8_writers",
                            what,
                            Outcome::Measured(group),
                        ),
                        Peer {
                            name: "flush-per-record".into(),
                            value: single,
                        },
                        ratio,
                    )
                }
                _ => row(
                    S,
                    "journal_append_8_writers",
                    what,
                    Outcome::NotRun("a journal bench has no estimate".into()),
                ),
            },
        );
        section(S, &[], Vec::new())
    }

    fn stdio(&self, rows: &mut Vec<Row>) -> Section {
        const S: &str = "stdio";
        let p = self.plan;
        let (files, file_bytes) = self
            .stdio
            .iter()
            .find_map(|run| match run.outcome {
                StdioOutcome::Ran {
                    files, file_bytes, ..
                } => Some((files, file_bytes)),
                StdioOutcome::Skipped(_) => None,
            })
            .unwrap_or_default();
        let mut journal = Vec::new();
        for (k, run) in self.stdio.iter().enumerate() {
            // The first run is in the default temp dir, the second on tmpfs.
            let id = if k == 0 {
                "stdio_temp".to_owned()
            } else if k == 1 {
                "stdio_tmpfs".to_owned()
            } else {
                format!("stdio_{}", k + 1)
            };
            let place = format!(
                "files and journal in {} (`{}`, {})",
                run.place.label,
                run.place.dir.display(),
                run.place.fs
            );
            let what = format!(
                "stdio `read_file` round trips, {place}: aido / {}",
                self.peer
            );
            let latency = |m: &Measured| {
                let max = m.latencies.iter().max().copied().unwrap_or_default();
                Outcome::Measured(Value {
                    unit: Unit::Ns,
                    median: ns(m.percentile(50.0)),
                    p99: Some(ns(m.percentile(99.0))),
                    max: Some(ns(max)),
                    n: Some(m.latencies.len() as u64),
                    ..Value::default()
                })
            };
            let rate = |m: &Measured| Value {
                unit: Unit::PerSecond,
                median: m.per_second(),
                ..Value::default()
            };
            match (&run.outcome, run.pair()) {
                (StdioOutcome::Ran { journal: check, .. }, Some((aido, peer))) => {
                    rows.push(beside(
                        row(S, &id, what, Outcome::Measured(rate(aido))),
                        Peer {
                            name: format!("{} (`{}`)", peer.name, peer.tool),
                            value: rate(peer),
                        },
                        run.ratio(),
                    ));
                    for (who, m) in [("aido", aido), ("peer", peer)] {
                        rows.push(row(
                            S,
                            format!("{id}_{who}_latency"),
                            format!("{} `{}` round trip, {place}", m.name, m.tool),
                            latency(m),
                        ));
                    }
                    journal.push(vec![
                        (k + 1).to_string(),
                        place.clone(),
                        check.records.to_string(),
                        check.sessions.to_string(),
                        check.verified.to_string(),
                    ]);
                }
                (StdioOutcome::Skipped(why), _) => {
                    rows.push(row(S, &id, what, Outcome::NotRun(why.clone())));
                }
                (StdioOutcome::Ran { .. }, None) => {
                    rows.push(row(
                        S,
                        &id,
                        what,
                        Outcome::Failed("the run measured no pair of servers".into()),
                    ));
                }
            }
        }
        let params: [(&str, Fact); 6] = [
            ("peer", self.peer.clone().into()),
            ("files", files.into()),
            ("file_bytes", file_bytes.into()),
            ("warmup", p.warmup.into()),
            ("calls", p.calls.into()),
            ("rounds", p.rounds.into()),
        ];
        let columns = ["run", "place", "records", "sessions", "verified"];
        section(S, &params, vec![("journal", table(&columns, journal))])
    }
}
