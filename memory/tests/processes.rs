//! Two real OS processes write thousands of memories into one store at once; afterwards
//! every write is there, once, with its content, under the id its writer was given.
//!
//! This binary is its own worker: run plainly it is the test, which starts itself twice
//! with `AIDO_MEMORY_WORKER` set; run with that variable it is a worker.

// A test without libtest's harness: clippy cannot see that `main` is a test, and a failed
// unwrap here is a failed test (exit code 101), as in any other.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use aido_memory::{
    ForgetRequest, Limits, ListRequest, MemoryId, MemoryStore, Provenance, RecallRequest,
    RememberRequest, Scope,
};

const WORKER: &str = "AIDO_MEMORY_WORKER";
const DATABASE: &str = "AIDO_MEMORY_DATABASE";
const WORKERS: usize = 2;
const WRITES_PER_WORKER: u64 = 2_500;
const NOW_MS: u64 = 1_764_590_400_000;

/// Each worker forgets its own memory of seq `s` (`s % 10 == 5`) right after writing
/// `s + 4`, so deletes race with the other process's inserts too.
fn forgotten(seq: u64) -> bool {
    seq % 10 == 5
}

fn text(worker: usize, index: u64) -> String {
    format!("worker {worker} wrote memory {index}; marker w{worker}x{index}")
}

fn scope(index: u64) -> Scope {
    match index % 3 {
        0 => Scope::Global,
        1 => Scope::Project {
            key: "shared".into(),
        },
        _ => Scope::Session {
            id: "shared-session".into(),
        },
    }
}

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or(0)
}

/// Writes `WRITES_PER_WORKER` memories, each in its own transaction, with a recall now and
/// then so readers and writers mix; prints `start`, one `id <seq> <id>` line per write and
/// `end`.
fn worker(index: usize, database: &Path) -> ExitCode {
    let mut store = match MemoryStore::open(database, Limits::default()) {
        Ok(store) => store,
        Err(refused) => {
            eprintln!("worker {index}: open: {} {refused}", refused.code());
            return ExitCode::FAILURE;
        }
    };
    // Both workers start writing together: each says it is ready, then waits for the
    // parent's go (spawning a process can take seconds on a loaded machine, long enough for
    // one worker to finish before the other begins).
    let dir = database.parent().unwrap_or(Path::new("."));
    if std::fs::write(dir.join(format!("ready-{index}")), b"").is_err() {
        eprintln!("worker {index}: cannot say it is ready");
        return ExitCode::FAILURE;
    }
    let waited = Instant::now();
    while !dir.join("go").exists() {
        if waited.elapsed().as_secs() > 120 {
            eprintln!("worker {index}: no go from the parent");
            return ExitCode::FAILURE;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    println!("start {}", wall_ms());
    let mut ids: BTreeMap<u64, MemoryId> = BTreeMap::new();
    for seq in 0..WRITES_PER_WORKER {
        let request = RememberRequest {
            text: text(index, seq),
            scope: scope(seq),
            tags: vec![format!("worker{index}"), format!("mod{}", seq % 7)],
            expiry: None,
            provenance: Provenance {
                session: format!("worker-{index}"),
                seq,
                untrusted: seq % 2 == 0,
            },
        };
        match store.remember(&request, NOW_MS + seq) {
            Ok(remembered) => {
                println!("id {seq} {}", remembered.id);
                ids.insert(seq, remembered.id);
            }
            Err(refused) => {
                eprintln!(
                    "worker {index}: remember {seq}: {} {refused}",
                    refused.code()
                );
                return ExitCode::FAILURE;
            }
        }
        let earlier = seq.checked_sub(4).filter(|earlier| forgotten(*earlier));
        if let Some(&id) = earlier.and_then(|earlier| ids.get(&earlier))
            && let Err(refused) = store.forget(&ForgetRequest::Id(id), NOW_MS + seq)
        {
            eprintln!("worker {index}: forget {id}: {} {refused}", refused.code());
            return ExitCode::FAILURE;
        }
        // A pause now and then lets the other writer's busy handler get the lock: SQLite
        // does not queue waiters, so back-to-back commits can starve it for the whole run,
        // and the test would prove nothing about two writers at once.
        if seq % 50 == 49 {
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        if seq % 100 == 99 {
            let query = RecallRequest::new(format!("marker w{index}x{seq}"));
            if let Err(refused) = store.recall(&query, NOW_MS + seq) {
                eprintln!("worker {index}: recall {seq}: {} {refused}", refused.code());
                return ExitCode::FAILURE;
            }
        }
    }
    println!("end {}", wall_ms());
    ExitCode::SUCCESS
}

struct Report {
    start_ms: u128,
    end_ms: u128,
    ids: BTreeMap<u64, u64>,
}

fn parse(stdout: &str) -> Report {
    let mut report = Report {
        start_ms: 0,
        end_ms: 0,
        ids: BTreeMap::new(),
    };
    for line in stdout.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["start", ms] => report.start_ms = ms.parse().unwrap(),
            ["end", ms] => report.end_ms = ms.parse().unwrap(),
            ["id", seq, id] => {
                let previous = report.ids.insert(seq.parse().unwrap(), id.parse().unwrap());
                assert!(previous.is_none(), "seq {seq} reported twice");
            }
            _ => panic!("unexpected worker line {line:?}"),
        }
    }
    report
}

#[allow(clippy::too_many_lines)]
fn test() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("memory.sqlite");
    let started = Instant::now();
    let children: Vec<_> = (0..WORKERS)
        .map(|index| {
            Command::new(std::env::current_exe().unwrap())
                .env(WORKER, index.to_string())
                .env(DATABASE, &database)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let waited = Instant::now();
    while !(0..WORKERS).all(|index| dir.path().join(format!("ready-{index}")).exists()) {
        assert!(
            waited.elapsed().as_secs() < 120,
            "the workers never got ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let reports: Vec<Report> = children
        .into_iter()
        .enumerate()
        .map(|(index, child)| {
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "worker {index} failed: {stderr}");
            parse(&String::from_utf8(output.stdout).unwrap())
        })
        .collect();
    let elapsed = started.elapsed();

    // The two processes really ran at the same time: their write windows overlap.
    let overlap_ms = reports.iter().map(|r| r.end_ms).min().unwrap() as i128
        - reports.iter().map(|r| r.start_ms).max().unwrap() as i128;
    assert!(
        overlap_ms > 0,
        "the workers did not overlap ({overlap_ms} ms)"
    );

    let mut store = MemoryStore::open(&database, Limits::default()).unwrap();
    let mut stored = Vec::new();
    let mut cursor = None;
    loop {
        let request = ListRequest {
            limit: Some(500),
            cursor,
            ..ListRequest::default()
        };
        let page = store
            .list_memory(&request, NOW_MS + WRITES_PER_WORKER)
            .unwrap();
        stored.extend(page.memories);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let written = WORKERS as u64 * WRITES_PER_WORKER;
    let expected = written
        - (0..WRITES_PER_WORKER).filter(|seq| forgotten(*seq)).count() as u64 * WORKERS as u64;
    assert_eq!(
        stored.len() as u64,
        expected,
        "memories lost, duplicated or not forgotten"
    );

    let mut seen = BTreeSet::new();
    for memory in &stored {
        let index: usize = memory
            .provenance
            .session
            .trim_start_matches("worker-")
            .parse()
            .unwrap();
        let seq = memory.provenance.seq;
        assert!(!forgotten(seq), "worker {index} seq {seq} was forgotten");
        assert!(
            seen.insert((index, seq)),
            "worker {index} seq {seq} stored twice"
        );
        assert_eq!(memory.text, text(index, seq));
        assert_eq!(memory.scope, scope(seq));
        assert_eq!(memory.provenance.untrusted, seq % 2 == 0);
        let mut tags = vec![format!("mod{}", seq % 7), format!("worker{index}")];
        tags.sort();
        assert_eq!(memory.tags, tags);
        assert_eq!(
            reports[index].ids.get(&seq),
            Some(&memory.id.0),
            "worker {index} seq {seq}: a different id than its writer was given"
        );
    }

    // Their writes interleaved in the store, not one batch after the other. SQLite's busy
    // handler sleeps while the other process commits, so writers take turns in bursts
    // (tens of switches per run, not thousands); three switches is A, B, A, B.
    let mut by_id: Vec<_> = stored
        .iter()
        .map(|m| (m.id, m.provenance.session.clone()))
        .collect();
    by_id.sort();
    let switches = by_id
        .windows(2)
        .filter(|pair| pair[0].1 != pair[1].1)
        .count();
    assert!(switches >= 3, "only {switches} switches between writers");

    // The full-text index holds every write too.
    for (index, seq) in [(0, 0), (1, WRITES_PER_WORKER - 1), (0, 1234), (1, 777)] {
        let recall = store
            .recall(
                &RecallRequest::new(format!("w{index}x{seq}")),
                NOW_MS + WRITES_PER_WORKER,
            )
            .unwrap();
        assert_eq!(recall.results.len(), 1, "marker w{index}x{seq}");
        assert_eq!(recall.results[0].memory.text, text(index, seq));
    }
    let gone = store
        .recall(&RecallRequest::new("w0x1235"), NOW_MS + WRITES_PER_WORKER)
        .unwrap();
    assert!(
        gone.results.is_empty(),
        "a forgotten memory is still indexed"
    );
    println!(
        "two_processes_lose_nothing: {WORKERS} processes x {WRITES_PER_WORKER} writes (and a forget \
         every 10) in {elapsed:?}, overlapping {overlap_ms} ms, {switches} writer switches, \
         {expected} of {written} present, exactly the unforgotten ... ok"
    );
}

fn main() -> ExitCode {
    match std::env::var(WORKER) {
        Ok(index) => {
            let Ok(index) = index.parse() else {
                return ExitCode::FAILURE;
            };
            let Some(database) = std::env::var_os(DATABASE) else {
                return ExitCode::FAILURE;
            };
            worker(index, Path::new(&database))
        }
        Err(_) => {
            // The libtest protocol cargo-nextest speaks: `--list` (and `--list --ignored`)
            // names the tests, then each runs by name.
            let args: Vec<String> = std::env::args().skip(1).collect();
            if args.iter().any(|a| a == "--list") {
                if !args.iter().any(|a| a == "--ignored") {
                    println!("two_processes_lose_nothing: test");
                }
                return ExitCode::SUCCESS;
            }
            let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
            if !filters.is_empty()
                && !filters
                    .iter()
                    .any(|f| "two_processes_lose_nothing".contains(f.as_str()))
            {
                return ExitCode::SUCCESS;
            }
            test();
            ExitCode::SUCCESS
        }
    }
}
