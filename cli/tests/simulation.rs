//! A seeded simulation of whole sessions (TigerBeetle's VOPR in spirit): random filesystem
//! actions, snapshots, restores and rewinds through the real `aido mcp`, with seeded body
//! delays, panics and tight timeouts (`AIDO_FAULTS`, `action_timeout_ms`), and kill -9 of the
//! process between calls and in the middle of restores and rewinds. After every step the
//! files derived from the journal alone (every session's recorded effects, rewinds and
//! restores, as `aido replay` derives them) must equal the files on disk, and every chain
//! must verify.
//!
//! Every choice comes from the seed, so a failing seed is reproduced by its number:
//!
//! ```text
//! AIDO_SIM_SEED=17 cargo test -p aido --test simulation -- --nocapture     # one seed
//! AIDO_SIM_SEEDS=200 AIDO_SIM_STEPS=60 cargo test -p aido --test simulation  # a long run
//! ```
//!
//! CI runs the fixed seeds 1 to `CI_SEEDS` and the `REGRESSION_SEEDS`. Writes are killed too,
//! with a seeded pause after each filesystem action's work (`after_work_ms`) so a kill can land
//! between a write's rename and its outcome record. Not simulated yet (see issue 8's note): the
//! trash after a session's first snapshot. A kill lands at a seeded delay after a call is sent,
//! so where exactly it lands can vary from run to run. Commands are drawn too (files written
//! and removed, a 40-file loop, `rm -r`, links, `touch -d`), killed now and then while they run
//! or while their change sets are applied.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{Home, Mcp, home};
use serde_json::{Value, json};

const CI_SEEDS: u64 = 6;
/// Seeds that once found a bug, run in CI too: 11 undid a rewind whose state lay on the branch
/// it abandoned (now refused with `rewind_undo_of_rewind`).
const REGRESSION_SEEDS: &[u64] = &[11];
const STEPS_DEFAULT: u64 = 30;

/// splitmix64: every choice of a run is a function of its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len() as u64) as usize)
        }
    }
}

/// The files under `root` (relative path -> bytes).
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The workspace's files as the journal alone says they are. The model starts from the files
/// before the first session and applies every session's recorded effects in order (sessions
/// follow one another here): writes, moves (the trash included, by path), rewinds and restores
/// (the model as it was just after the record they go back to, within their session).
/// `aido_replay::derive` checks each session's blobs and chain on the way.
fn derived(h: &Home, ws: &Path, before: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    use aido_actions::Effect;
    use aido_journal::Event;
    let journals = aido_journal::dir::open_readers(&h.aido_home.join("journal")).unwrap();
    let mut model: BTreeMap<String, Vec<u8>> = before
        .iter()
        .map(|(k, v)| (ws.join(k).display().to_string(), v.clone()))
        .collect();
    for s in aido_journal::dir::sessions(&journals).unwrap() {
        if s.client.as_deref() == Some("aido-runtime") {
            continue;
        }
        let (journal, id) = aido_journal::dir::find(&journals, &s.id.to_string()).unwrap();
        assert_eq!(
            journal.verify(id).unwrap().broken,
            None,
            "session {id} verifies"
        );
        let records = journal.all_records(id).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let d = aido_replay::derive::derive(journal, &records, scratch.path()).unwrap();
        assert!(d.intact(), "session {id}: {:?}", d.findings);
        // The model after each record of this session, to go back to.
        let mut states: Vec<(u64, BTreeMap<String, Vec<u8>>)> = vec![(0, model.clone())];
        let at = |states: &Vec<(u64, BTreeMap<String, Vec<u8>>)>, seq: u64| {
            states
                .iter()
                .rev()
                .find(|(s, _)| *s <= seq)
                .map(|(_, m)| m.clone())
                .unwrap_or_default()
        };
        for r in &records {
            let effects = match &r.event {
                Event::ActionCompleted { outcome, .. } => outcome.effects.clone(),
                Event::ActionFailed { effects, .. } => effects.clone(),
                _ => Vec::new(),
            };
            for e in effects {
                match e {
                    Effect::FileWritten { path, blob, .. } => {
                        model.insert(path, journal.blob(&blob).unwrap().expect("a written blob"));
                    }
                    Effect::Moved { from, to } => {
                        if let Some(bytes) = model.remove(&from) {
                            model.insert(to.clone(), bytes);
                        }
                        // A directory moved: everything under it moves too.
                        let prefix = format!("{from}/");
                        let under: Vec<String> = model
                            .keys()
                            .filter(|k| k.starts_with(&prefix))
                            .cloned()
                            .collect();
                        for k in under {
                            let bytes = model.remove(&k).unwrap_or_default();
                            model.insert(format!("{to}/{}", &k[prefix.len()..]), bytes);
                        }
                    }
                    Effect::FileRemoved { path, .. } => {
                        model.remove(&path);
                    }
                    Effect::DirCreated { .. }
                    | Effect::DirRemoved { .. }
                    | Effect::ModeChanged { .. } => {}
                    Effect::LinkRemoved { path, .. } | Effect::LinkCreated { path, .. } => {
                        model.remove(&path);
                    }
                    Effect::SnapshotRestored { taken_at, .. } => model = at(&states, taken_at),
                    Effect::RewoundTo { seq } => model = at(&states, seq),
                    // A command's change set: each entry's `after`, in order.
                    Effect::Changes { parts, .. } => {
                        let store = journal.blob_store();
                        store
                            .visit_change_set(&parts, |entry| {
                                match entry.after.blob() {
                                    Some(blob) => {
                                        let bytes =
                                            store.get(blob).unwrap().expect("a new file's blob");
                                        model.insert(entry.path.clone(), bytes);
                                    }
                                    None => {
                                        model.remove(&entry.path);
                                    }
                                }
                                true
                            })
                            .unwrap();
                    }
                }
            }
            states.push((r.seq, model.clone()));
        }
    }
    let ws_prefix = format!("{}/", ws.display());
    model
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix(&ws_prefix).map(|rel| (rel.to_owned(), v)))
        .collect()
}

fn seq(result: &Value) -> Option<u64> {
    result["result"]["_meta"]["aido/seq"].as_u64()
}

struct Sim {
    h: Home,
    ws: PathBuf,
    before: BTreeMap<String, Vec<u8>>,
    rng: Rng,
    env: Vec<(String, String)>,
    mcp: Option<Mcp>,
    /// This session's action seqs (rewind targets) and snapshots (restore targets).
    seqs: Vec<u64>,
    snapshots: Vec<String>,
    /// Files this run created (the only ones it trashes).
    created: Vec<String>,
    trashed: Vec<String>,
    log: Vec<String>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let h = home();
        let timeout = if rng.below(3) == 0 { 40 } else { 120_000 };
        let ws = h.workspace(
            "ws",
            &format!("[snapshots]\nbackend = \"copy\"\n[limits]\naction_timeout_ms = {timeout}\n"),
        );
        for i in 0..4 {
            std::fs::write(ws.join(format!("pre{i}.txt")), format!("before {i}\n")).unwrap();
        }
        std::fs::create_dir_all(ws.join("a")).unwrap();
        std::fs::write(ws.join("a/kept.txt"), "the user's\n").unwrap();
        let before = files(&ws);
        let delay = [0, 0, 20, 60][rng.below(4) as usize];
        let panic = [0, 0, 15, 40][rng.below(4) as usize];
        // A pause after each filesystem action's work, before its answer, widens the window a
        // kill can land in between a write's rename and its outcome record.
        let after_work = [0, 0, 5, 20][rng.below(4) as usize];
        let faults = format!(
            "seed={seed},delay_max_ms={delay},panic_per_mille={panic},after_work_ms={after_work}"
        );
        let log = vec![format!(
            "seed {seed}: action_timeout_ms {timeout}, AIDO_FAULTS {faults}"
        )];
        Self {
            h,
            ws,
            before,
            rng,
            env: vec![("AIDO_FAULTS".into(), faults)],
            mcp: None,
            seqs: Vec::new(),
            snapshots: Vec::new(),
            created: Vec::new(),
            trashed: Vec::new(),
            log,
        }
    }

    fn mcp(&mut self) -> &mut Mcp {
        if self.mcp.is_none() {
            let env: Vec<(&str, &str)> = self
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            self.mcp = Some(Mcp::start_with(&self.h, "sim", &env));
            // A new session: rewinds and restores stay within it.
            self.seqs.clear();
            self.snapshots.clear();
        }
        self.mcp.as_mut().unwrap()
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.mcp().call(tool, args.clone());
        let code = r["result"]["structuredContent"]["code"]
            .as_str()
            .unwrap_or("ok");
        let shown: String = args.to_string().chars().take(160).collect();
        self.log
            .push(format!("#{:?} {tool} {shown} -> {code}", seq(&r)));
        if let Some(s) = seq(&r) {
            self.seqs.push(s);
        }
        r
    }

    fn kill(&mut self) {
        if let Some(mut m) = self.mcp.take() {
            m.child.kill().unwrap();
            m.child.wait().unwrap();
        }
        self.log.push("kill -9".into());
    }

    /// Send a call and kill aido a seeded moment later, without waiting for the answer.
    fn call_and_kill(&mut self, tool: &str, args: Value) {
        let wait = self.rng.below(40);
        let m = self.mcp();
        m.send(
            json!({"jsonrpc": "2.0", "id": 9_000_000, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}}),
        );
        std::thread::sleep(std::time::Duration::from_millis(wait));
        self.log
            .push(format!("{tool} {args}, killed after {wait} ms"));
        self.kill();
    }

    #[allow(clippy::too_many_lines)]
    fn step(&mut self) {
        let file = |rng: &mut Rng| match rng.below(8) {
            0..=3 => format!("a/f{}.txt", rng.below(4)),
            4 | 5 => format!("pre{}.txt", rng.below(4)),
            _ => format!("b/g{}.txt", rng.below(3)),
        };
        match self.rng.below(100) {
            0..=29 => {
                let path = file(&mut self.rng);
                let content = format!(
                    "v{} {}\n",
                    self.rng.below(1000),
                    "x".repeat(self.rng.below(3000) as usize)
                );
                let args = json!({"path": path, "content": content, "create_parents": true});
                // Now and then aido is killed while the write runs: before it, between its
                // rename and its outcome record, or after.
                if self.rng.below(6) == 0 {
                    self.call_and_kill("write_file", args);
                    if !path.starts_with("pre") {
                        self.created.push(path);
                    }
                } else {
                    let r = self.call("write_file", args);
                    if r["result"]["isError"] == false && !path.starts_with("pre") {
                        self.created.push(path);
                    }
                }
            }
            30..=36 => {
                let path = format!("n{}/deep{}/f.txt", self.rng.below(3), self.rng.below(2));
                let r = self.call(
                    "write_file",
                    json!({"path": path, "content": "deep\n", "create_parents": true}),
                );
                if r["result"]["isError"] == false {
                    self.created.push(path);
                }
            }
            37..=43 => {
                let path = file(&mut self.rng);
                self.call("edit_file", json!({"path": path, "old_string": "v", "new_string": "w", "replace_all": true}));
            }
            // The trash is outside the workspace: snapshot-based rewinds and restores leave it
            // as it is, so the journal cannot name what a later restore_from_trash brings back
            // (a known gap, see issue 8's note). The trash is used before a session's first
            // snapshot only.
            44..=47 if self.snapshots.is_empty() => {
                if let Some(path) = self.rng.pick(&self.created).cloned() {
                    let r = self.call("move_to_trash", json!({"path": path}));
                    if r["result"]["isError"] == false {
                        self.trashed.push(path);
                    }
                }
            }
            48..=50 if self.snapshots.is_empty() => {
                if let Some(path) = self.rng.pick(&self.trashed).cloned() {
                    self.call("restore_from_trash", json!({"path": path}));
                }
            }
            51..=58 => {
                let r = self.call("create_snapshot", json!({}));
                if let Some(id) = r["result"]["structuredContent"]["snapshot"].as_str() {
                    self.snapshots.push(id.to_owned());
                }
            }
            59..=63 => {
                if let Some(id) = self.rng.pick(&self.snapshots).cloned() {
                    if self.rng.below(3) == 0 {
                        self.call_and_kill("restore_snapshot", json!({"snapshot": id}));
                    } else {
                        self.call("restore_snapshot", json!({"snapshot": id}));
                    }
                }
            }
            64..=77 => {
                if let Some(&target) = self.rng.pick(&self.seqs) {
                    let args = if self.rng.below(2) == 0 {
                        json!({"to_seq": target})
                    } else {
                        json!({"before_seq": target})
                    };
                    if self.rng.below(4) == 0 {
                        self.call_and_kill("rewind", args);
                    } else {
                        self.call("rewind", args);
                    }
                }
            }
            78..=84 => {
                let (p, q) = (file(&mut self.rng), file(&mut self.rng));
                self.call("pipeline", json!({"steps": [
                    {"type": "write_file", "path": p, "content": "piped\n", "create_parents": true},
                    {"type": "write_file", "path": q, "content": "piped too\n", "create_parents": true}]}));
            }
            85..=86 => {
                let path = file(&mut self.rng);
                self.call("read_file", json!({"path": path}));
            }
            // Commands: their change sets are journaled whole and applied; now and then aido
            // is killed while one runs or while its changes are applied.
            87..=89 => {
                let (a, b) = (self.rng.below(4), self.rng.below(1000));
                let script = match self.rng.below(5) {
                    0 => format!("mkdir -p a b && printf 'cmd {b}\\n' > a/f{a}.txt"),
                    1 => format!("rm -f a/f{a}.txt pre{a}.txt"),
                    2 => format!(
                        "mkdir -p c{} && for i in $(seq 40); do echo {b} $i > c{}/x$i; done",
                        a % 2,
                        a % 2
                    ),
                    3 => "rm -rf c0 c1 n0 b".to_owned(),
                    _ => format!(
                        "mkdir -p b && ln -sfn ../pre0.txt b/link{a} && touch -d @{} a/f0.txt 2>/dev/null; true",
                        1_000_000_000 + b
                    ),
                };
                let args = json!({"shell": script, "timeout_ms": 60000});
                if self.rng.below(5) == 0 {
                    self.call_and_kill("run_command", args);
                } else {
                    self.call("run_command", args);
                }
            }
            90..=94 => {
                let path = file(&mut self.rng);
                self.call("safe_change", json!({"steps": [{"type": "write_file", "path": path, "content": "safe\n", "create_parents": true}],
                    "validate": [{"type": "assert", "condition": {"kind": "file_exists", "path": "nowhere"}}]}));
            }
            _ => self.kill(),
        }
    }

    fn check(&mut self, step: u64) {
        // Reading a journal a live aido holds copies it; a killed one is read as it is.
        let derived = derived(&self.h, &self.ws, &self.before);
        let disk = files(&self.ws);
        if derived != disk {
            let keys: std::collections::BTreeSet<&String> =
                derived.keys().chain(disk.keys()).collect();
            let diff: Vec<String> = keys
                .into_iter()
                .filter(|k| derived.get(*k) != disk.get(*k))
                .map(|k| {
                    let show = |v: Option<&Vec<u8>>| {
                        v.map(|b| String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned())
                    };
                    format!(
                        "{k}: journal {:?}, disk {:?}",
                        show(derived.get(k)),
                        show(disk.get(k))
                    )
                })
                .collect();
            panic!(
                "after step {step} the journal and the disk disagree:\n{}\n--- the run ---\n{}",
                diff.join("\n"),
                self.log.join("\n")
            );
        }
    }
}

fn run(seed: u64, steps: u64) {
    let mut sim = Sim::new(seed);
    for step in 1..=steps {
        sim.step();
        if sim.mcp.is_none() {
            // Killed: the next start recovers what a crash interrupted before it serves.
            sim.mcp();
        }
        sim.check(step);
    }
    if let Some(m) = sim.mcp.take() {
        m.close();
    }
    sim.check(steps + 1);
    eprintln!(
        "seed {seed}: {steps} steps, the journal and the disk agree throughout ({} calls)",
        sim.log.len() - 1
    );
}

#[test]
fn seeded_sessions_keep_the_journal_and_the_disk_in_agreement() {
    let steps = std::env::var("AIDO_SIM_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(STEPS_DEFAULT);
    if let Some(seed) = std::env::var("AIDO_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return run(seed, steps);
    }
    let seeds = std::env::var("AIDO_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CI_SEEDS);
    for seed in (1..=seeds).chain(REGRESSION_SEEDS.iter().copied().filter(|s| *s > seeds)) {
        run(
            seed,
            if REGRESSION_SEEDS.contains(&seed) {
                steps.max(50)
            } else {
                steps
            },
        );
    }
}
