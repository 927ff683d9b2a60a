#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aido_actions::changes::{Entry, Node, encode_part};
use aido_actions::{Before, Effect, Outcome};

use super::*;
use crate::blobs::hash_hex;
use crate::{CommitMode, Event, Journal, Limits};

const DAY: u64 = 86_400_000;
const NOW: u64 = 1000 * DAY;

struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("aido");
        std::fs::create_dir_all(home.join("journal")).unwrap();
        Self { _dir: dir, home }
    }
    fn paths(&self) -> Paths {
        Paths::of(&self.home)
    }
    fn main(&self) -> PathBuf {
        self.home.join("journal").join("main")
    }
    /// The main shard, once the run that held it has let go (sled releases a closed
    /// database's lock a moment after the handle is gone).
    fn open(&self) -> Journal {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match Journal::open(&self.main(), Limits::default(), CommitMode::Group) {
                Err(crate::OpenError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => return other.unwrap(),
            }
        }
    }
}

fn sid(n: u8) -> SessionId {
    SessionId::from_bytes([n; 16])
}

fn options(rules: Rules) -> Options {
    Options {
        rules,
        now_ms: NOW,
        dry_run: false,
        compact: true,
        trigger: "test".into(),
        session: sid(0xee),
        runtime: "test".into(),
    }
}

fn before(ms: u64) -> Rules {
    Rules {
        before_ms: Some(ms),
        ..Rules::default()
    }
}

fn started() -> Event {
    Event::SessionStarted {
        client: Some("t".into()),
        cwd: "/w".into(),
        runtime: "t".into(),
        grant: None,
    }
}

fn ended() -> Event {
    Event::SessionEnded {
        reason: "done".into(),
    }
}

fn completed(proposal: u64, effects: Vec<Effect>) -> Event {
    Event::ActionCompleted {
        proposal,
        outcome: Outcome {
            text: "ok".into(),
            output: serde_json::json!({}),
            effects,
            images: Vec::new(),
            inputs: Vec::new(),
        },
        duration_ms: 1,
    }
}

fn written(path: &str, blob: &str, kept: Option<&str>) -> Effect {
    Effect::FileWritten {
        path: path.into(),
        blob: blob.into(),
        before: match kept {
            Some(h) => Before::Kept(h.into()),
            None => Before::Absent,
        },
        mtime_ns: None,
        before_mtime_ns: None,
    }
}

/// Keep `bytes` in the journal's blob store (small ones in sled, large ones as objects).
fn keep(j: &Journal, bytes: &[u8]) -> String {
    let mut file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    std::io::Seek::rewind(&mut file).unwrap();
    j.blob_store().put_file(&file, 1 << 40).unwrap().hash
}

fn contents(tag: &str, len: usize) -> Vec<u8> {
    let mut out = tag.as_bytes().to_vec();
    out.extend((0..len).map(|i| (i % 251) as u8));
    out
}

/// Every blob a session's records name (effects, parts and their entries), read back.
fn named(j: &Journal, s: SessionId) -> Vec<String> {
    let mut out = Vec::new();
    for r in j.all_records(s).unwrap() {
        if let Event::ActionCompleted { outcome, .. } = &r.event {
            for e in &outcome.effects {
                match e {
                    Effect::FileWritten { blob, before, .. } => {
                        out.push(blob.clone());
                        out.extend(before.kept().map(str::to_owned));
                    }
                    Effect::Changes { parts, .. } => {
                        out.extend(parts.iter().cloned());
                        j.blob_store()
                            .visit_change_set(parts, |entry| {
                                out.extend(entry.before.blob().map(str::to_owned));
                                out.extend(entry.after.blob().map(str::to_owned));
                                true
                            })
                            .unwrap();
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn readable(j: &Journal, hash: &str) -> bool {
    j.blob(hash)
        .unwrap()
        .is_some_and(|bytes| hash_hex(&bytes) == hash)
}

/// Two sessions sharing contents (small, chunked, an object, a change set's entry): removing
/// the older leaves every content the other names readable and its chain whole, takes what
/// only the older named, and the bytes on disk shrink.
#[test]
#[allow(clippy::too_many_lines)]
fn two_sessions_sharing_contents_prune_one_and_the_other_keeps_all_it_names() {
    let h = Home::new();
    let (a, b) = (sid(1), sid(2));
    let alone_a;
    {
        let j = h.open();
        let shared_small = keep(&j, &contents("shared", 3500));
        let shared_chunked = hash_hex(&contents("chunked", 3 << 20));
        // As an earlier aido stored it: chunks and a chunk list in sled.
        j.blob_store()
            .put_chunked(&shared_chunked, &contents("chunked", 3 << 20))
            .unwrap();
        let shared_object = keep(&j, &contents("object", 200 << 10));
        let a_small = keep(&j, &contents("a only", 3000));
        let a_object = keep(&j, &contents("a object", 900 << 10));
        let a_before = keep(&j, &contents("a before", 2000));
        alone_a = vec![a_small.clone(), a_object.clone(), a_before.clone()];
        let b_entry = keep(&j, &contents("b entry", 100 << 10));
        let part = encode_part(&[
            Entry {
                path: "/w/x".into(),
                before: Node::Absent,
                after: Node::File {
                    blob: b_entry.clone(),
                    bytes: 1,
                    mode: 0o644,
                    mtime_ns: 0,
                },
            },
            Entry {
                path: "/w/y".into(),
                before: Node::File {
                    blob: shared_object.clone(),
                    bytes: 1,
                    mode: 0o644,
                    mtime_ns: 0,
                },
                after: Node::Absent,
            },
        ]);
        let part_hash = hash_hex(&part);
        j.blob_store().put(&part_hash, &part).unwrap();
        j.append_blocking(a, DAY, started()).unwrap();
        j.append_blocking(
            a,
            DAY,
            completed(
                1,
                vec![
                    written("/w/s", &shared_small, None),
                    written("/w/c", &shared_chunked, None),
                    written("/w/o", &shared_object, None),
                    written("/w/a", &a_small, Some(&a_before)),
                    written("/w/ao", &a_object, None),
                ],
            ),
        )
        .unwrap();
        j.append_blocking(a, DAY, ended()).unwrap();
        j.append_blocking(b, 500 * DAY, started()).unwrap();
        j.append_blocking(
            b,
            500 * DAY,
            completed(
                1,
                vec![
                    written("/w/s", &shared_small, None),
                    written("/w/c", &shared_chunked, None),
                    Effect::Changes {
                        parts: vec![part_hash],
                        entries: 2,
                        bytes: 1,
                    },
                ],
            ),
        )
        .unwrap();
        j.append_blocking(b, 500 * DAY, ended()).unwrap();
        for hash in &alone_a {
            assert!(readable(&j, hash));
        }
    }
    let objects_before = disk_bytes(&h.home.join("journal/main.objects"));
    let report = collect(&h.paths(), None, &options(before(100 * DAY)), &NoSnapshots).unwrap();
    assert_eq!(report.summary.sessions_removed, 1);
    assert_eq!(report.sessions[0].session, a);
    assert_eq!(report.summary.objects_removed, 1, "a's object only");
    assert!(report.summary.blobs_removed >= 2, "{:?}", report.summary);
    assert!(report.journaled_in.is_some());
    let objects_after = disk_bytes(&h.home.join("journal/main.objects"));
    assert!(
        objects_after + (800 << 10) < objects_before,
        "{objects_before} -> {objects_after}"
    );
    let j = h.open();
    let ids: Vec<_> = j.sessions().unwrap().iter().map(|s| s.id).collect();
    assert!(!ids.contains(&a) && ids.contains(&b), "{ids:?}");
    assert!(j.all_records(a).unwrap().is_empty());
    assert_eq!(j.verify(b).unwrap().broken, None);
    let names = named(&j, b);
    assert_eq!(names.len(), 5, "{names:?}");
    for hash in &names {
        assert!(readable(&j, hash), "b's {hash} survives");
    }
    for hash in &alone_a {
        assert!(!readable(&j, hash), "a's own {hash} went");
    }
    // The run is journaled.
    let run = report.journaled_in.unwrap();
    let records = j.all_records(run).unwrap();
    assert!(matches!(
        &records[1].event,
        Event::Collected { summary, .. } if summary.sessions_removed == 1 && summary.removed == vec![a]
    ));
}

/// Appends a session of `n` actions (proposal, outcome) at times `t0 + seq`.
fn actions(j: &Journal, s: SessionId, n: u64, t0: u64) {
    j.append_blocking(s, t0, started()).unwrap();
    for k in 0..n {
        let proposal = 2 + 2 * k;
        j.append_blocking(s, t0 + proposal, ended()).unwrap();
        let blob = keep(j, &contents(&format!("{s} {k}"), 2000));
        j.append_blocking(
            s,
            t0 + proposal + 1,
            completed(proposal, vec![written("/w/f", &blob, None)]),
        )
        .unwrap();
    }
}

fn tamper(j: &Journal, s: SessionId, seq: u64, edit: impl Fn(String) -> String) {
    let tree = j.raw_records_tree();
    let key = crate::stored::key(s, seq);
    let value = tree.get(key).unwrap().unwrap();
    let text = edit(String::from_utf8(value[32..].to_vec()).unwrap());
    let mut out = blake3::hash(text.as_bytes()).as_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    tree.insert(key, out).unwrap();
}

/// An age cut removes a long session's older records at an action boundary, appends a
/// `pruned` record naming the last one's hash, and verify checks the chain from there; a
/// tampered cut (its bytes, or its hash re-signed) fails verify.
#[test]
fn an_age_cut_keeps_the_chain_verifiable_and_a_tampered_cut_fails() {
    let h = Home::new();
    let s = sid(3);
    let t0 = 10 * DAY;
    let through_hash;
    {
        let j = h.open();
        actions(&j, s, 6, t0);
        j.append_blocking(s, t0 + 100, ended()).unwrap();
        // Seq 6 (a proposal, t0 + 6) is the last record before the cut-off; its outcome is 7.
        through_hash = j.all_records(s).unwrap()[4].hash.clone();
    }
    let report = collect(&h.paths(), None, &options(before(t0 + 7)), &NoSnapshots).unwrap();
    assert_eq!(report.summary.sessions_cut, 1, "{report:?}");
    assert_eq!(
        report.sessions[0].through_seq,
        Some(5),
        "never inside an action"
    );
    assert_eq!(report.sessions[0].records, 5);
    let j = h.open();
    let records = j.all_records(s).unwrap();
    assert_eq!(records[0].seq, 6);
    let pruned = records.last().unwrap();
    assert_eq!(pruned.seq, 15);
    assert!(matches!(
        &pruned.event,
        Event::Pruned { through_seq: 5, hash, .. } if *hash == through_hash
    ));
    let report = j.verify(s).unwrap();
    assert_eq!(report.broken, None);
    assert_eq!(report.pruned_through, Some(5));
    assert_eq!(report.records, 10);
    assert_eq!(records[0].prev, through_hash);

    // Its bytes altered: broken at the cut.
    let tree = j.raw_records_tree();
    let key = crate::stored::key(s, 15);
    let original = tree.get(key).unwrap().unwrap();
    let mut flipped = original.to_vec();
    let at = flipped.len() - 5;
    flipped[at] ^= 1;
    tree.insert(key, flipped).unwrap();
    assert_eq!(j.verify(s).unwrap().broken.map(|b| b.seq), Some(15));
    // Re-signed with another hash: the first record kept no longer chains to it.
    tree.insert(key, original).unwrap();
    tamper(&j, s, 15, |t| t.replace(&through_hash, &"0".repeat(64)));
    let broken = j.verify(s).unwrap().broken.unwrap();
    assert_eq!(broken.seq, 6);
    assert!(broken.reason.contains("cut"), "{}", broken.reason);
    // Removed outright: the chain has no start.
    tree.remove(key).unwrap();
    assert_eq!(j.verify(s).unwrap().broken.map(|b| b.seq), Some(1));
}

/// A cut recorded but cut short (records at or before it still stored) verifies, and the next
/// run finishes it whatever its rules.
#[test]
fn an_interrupted_cut_verifies_and_the_next_run_finishes_it() {
    let h = Home::new();
    let s = sid(4);
    {
        let j = h.open();
        actions(&j, s, 3, DAY);
        let third = j.all_records(s).unwrap()[2].hash.clone();
        j.append_blocking(
            s,
            DAY + 50,
            Event::Pruned {
                through_seq: 3,
                hash: third.clone(),
                rewinds: 0,
                reason: "older_than".into(),
            },
        )
        .unwrap();
        assert_eq!(j.verify(s).unwrap().broken, None, "nothing removed yet");
        j.raw_records_tree()
            .remove(crate::stored::key(s, 1))
            .unwrap();
        let report = j.verify(s).unwrap();
        assert_eq!((report.broken, report.pruned_through), (None, Some(3)));
        // A cut that names another hash than the record it ends at does not check out.
        tamper(&j, s, 8, |t| t.replace(&third, &"1".repeat(64)));
        assert!(j.verify(s).unwrap().broken.is_some());
        tamper(&j, s, 8, |t| t.replace(&"1".repeat(64), &third));
    }
    let rules = Rules {
        keep_sessions: Some(10),
        ..Rules::default()
    };
    let report = collect(&h.paths(), None, &options(rules), &NoSnapshots).unwrap();
    assert_eq!(report.sessions[0].rule, "unfinished");
    let j = h.open();
    assert_eq!(j.all_records(s).unwrap()[0].seq, 4);
    assert_eq!(j.verify(s).unwrap().broken, None);
}

/// A session that has not ended and was active within the day, and a session with a damaged
/// record, are left (with their codes); nothing is swept from the damaged one's shard.
#[test]
fn live_and_damaged_sessions_are_kept_and_a_damaged_shard_is_not_swept() {
    let h = Home::new();
    let (live, damaged) = (sid(5), sid(6));
    let orphan;
    {
        let j = h.open();
        j.append_blocking(live, NOW - 1000, started()).unwrap();
        actions(&j, damaged, 2, DAY);
        j.append_blocking(damaged, DAY + 10, ended()).unwrap();
        orphan = keep(&j, &contents("nobody names me", 4000));
        tamper(&j, damaged, 3, |t| t.replace("\"ok\"", "\"OK\""));
        let value = j
            .raw_records_tree()
            .get(crate::stored::key(damaged, 3))
            .unwrap()
            .unwrap();
        let mut bad = value.to_vec();
        bad[0] ^= 1;
        j.raw_records_tree()
            .insert(crate::stored::key(damaged, 3), bad)
            .unwrap();
    }
    let rules = Rules {
        older_than_ms: Some(0),
        ..Rules::default()
    };
    let report = collect(&h.paths(), None, &options(rules), &NoSnapshots).unwrap();
    assert_eq!(report.summary.records_removed, 0);
    let codes: HashMap<String, String> = report
        .summary
        .skipped
        .iter()
        .map(|s| (s.what.clone(), s.code.clone()))
        .collect();
    assert_eq!(codes[&live.to_string()], "retention_session_live");
    assert_eq!(codes[&damaged.to_string()], "retention_record_damaged");
    let j = h.open();
    assert!(readable(&j, &orphan), "a shard with damage is not swept");
    assert_eq!(j.head_seq(live).unwrap(), 1);
}

/// A shard another aido holds is read from a copy and left whole; the run says so.
#[test]
fn a_shard_held_by_a_running_aido_is_left_and_reported() {
    let h = Home::new();
    let s = sid(7);
    let held = h.open();
    actions(&held, s, 2, DAY);
    held.append_blocking(s, DAY + 10, ended()).unwrap();
    let orphan = keep(&held, &contents("orphan", 3000));
    let report = collect(&h.paths(), None, &options(before(100 * DAY)), &NoSnapshots).unwrap();
    assert_eq!(report.summary.sessions_removed, 0);
    assert_eq!(report.summary.skipped[0].code, "retention_shard_held");
    assert_eq!(held.head_seq(s).unwrap(), 6);
    assert!(readable(&held, &orphan));
    assert!(report.journaled_in.is_none(), "nothing was removed");
}

/// The running aido's own journal: what it stored since it pinned is kept though no record
/// names it yet; what an earlier process left unnamed goes.
#[test]
fn the_own_journal_keeps_what_it_stored_since_the_pin() {
    let h = Home::new();
    let j = h.open();
    let left_behind = keep(&j, &contents("an earlier process", 3000));
    let left_object = keep(&j, &contents("an earlier object", 100 << 10));
    let guard = j.pin_blobs();
    let in_flight = keep(&j, &contents("a body's before-image", 3000));
    let in_flight_object = keep(&j, &contents("a large before-image", 100 << 10));
    let old = sid(8);
    actions(&j, old, 1, DAY);
    j.append_blocking(old, DAY + 10, ended()).unwrap();
    let report = collect(
        &h.paths(),
        Some((&j, &guard)),
        &options(before(100 * DAY)),
        &NoSnapshots,
    )
    .unwrap();
    assert_eq!(report.summary.sessions_removed, 1);
    assert!(
        report.compacted.is_empty(),
        "a live journal is not compacted"
    );
    assert!(readable(&j, &in_flight) && readable(&j, &in_flight_object));
    assert!(!readable(&j, &left_behind) && !readable(&j, &left_object));
    let run = report.journaled_in.unwrap();
    assert_eq!(j.verify(run).unwrap().broken, None);
    drop(guard);
}

/// sled keeps the space of removed keys for a while; compaction gives it back, and what
/// remains reads and verifies as before.
#[test]
fn compaction_gives_sled_space_back() {
    let h = Home::new();
    let (old, new) = (sid(9), sid(10));
    {
        let j = h.open();
        j.append_blocking(old, DAY, started()).unwrap();
        // Ten sled blobs a record (objects are files, and give their space back themselves).
        for k in 0..400 {
            let effects = (0..10)
                .map(|b| {
                    let blob = keep(&j, &contents(&format!("old {k} {b}"), 3_000));
                    written("/w/f", &blob, None)
                })
                .collect();
            j.append_blocking(old, DAY, completed(1, effects)).unwrap();
        }
        j.append_blocking(old, DAY, ended()).unwrap();
        actions(&j, new, 3, 900 * DAY);
        j.append_blocking(new, 900 * DAY + 10, ended()).unwrap();
    }
    let before_bytes = disk_bytes(&h.main());
    let mut dry = options(before(100 * DAY));
    dry.dry_run = true;
    let planned = collect(&h.paths(), None, &dry, &NoSnapshots).unwrap();
    assert_eq!(planned.summary.sessions_removed, 1);
    assert_eq!(planned.summary.records_removed, 402);
    assert!(planned.summary.blobs_removed >= 400);
    {
        let j = h.open();
        assert_eq!(
            j.all_records(old).unwrap().len(),
            402,
            "a dry run changes nothing"
        );
    }
    let report = collect(&h.paths(), None, &options(before(100 * DAY)), &NoSnapshots).unwrap();
    assert_eq!(report.summary.blobs_removed, planned.summary.blobs_removed);
    let after_bytes = disk_bytes(&h.main());
    assert_eq!(report.compacted.len(), 1);
    assert!(
        after_bytes * 4 < before_bytes,
        "{before_bytes} -> {after_bytes} bytes"
    );
    assert!(!h.home.join("journal/main.compact").exists());
    let j = h.open();
    assert_eq!(j.verify(new).unwrap().broken, None);
    for hash in named(&j, new) {
        assert!(readable(&j, &hash));
    }
}

/// `keep_sessions` keeps the newest; `max_bytes` removes the oldest until what they alone
/// hold brings the total under.
#[test]
fn keep_sessions_and_max_bytes_remove_the_oldest_first() {
    let h = Home::new();
    {
        let j = h.open();
        for n in 0..4u8 {
            let s = sid(20 + n);
            j.append_blocking(s, DAY * (1 + u64::from(n)), started())
                .unwrap();
            let blob = keep(&j, &contents(&format!("big {n}"), 300 << 10));
            j.append_blocking(
                s,
                DAY * (1 + u64::from(n)),
                completed(1, vec![written("/w/f", &blob, None)]),
            )
            .unwrap();
            j.append_blocking(s, DAY * (1 + u64::from(n)), ended())
                .unwrap();
        }
    }
    let mut dry = options(Rules {
        keep_sessions: Some(3),
        ..Rules::default()
    });
    dry.dry_run = true;
    let report = collect(&h.paths(), None, &dry, &NoSnapshots).unwrap();
    let planned: Vec<_> = report.sessions.iter().map(|p| p.session).collect();
    assert_eq!(planned, vec![sid(20)]);
    let usage = usage(&h.paths(), NOW, &NoSnapshots).unwrap();
    let total = usage.journal_bytes + usage.kinds.audit;
    // Over by more than one session's object and less than two.
    let max = total - (450 << 10);
    let mut dry = options(Rules {
        max_bytes: Some(max),
        ..Rules::default()
    });
    dry.dry_run = true;
    let report = collect(&h.paths(), None, &dry, &NoSnapshots).unwrap();
    let planned: Vec<_> = report.sessions.iter().map(|p| p.session).collect();
    assert_eq!(planned, vec![sid(20), sid(21)], "{report:?}");
    assert!(report.sessions.iter().all(|p| p.rule == "max_bytes"));
}

/// `du`'s numbers add up: the sessions' record bytes are the records' total; every stored
/// content is alone, shared or unreferenced exactly once; the kinds are what is on disk.
#[test]
fn usage_adds_up_to_what_is_stored() {
    let h = Home::new();
    let (a, b) = (sid(30), sid(31));
    let (shared, alone, orphan);
    {
        let j = h.open();
        shared = keep(&j, &contents("shared", 150 << 10));
        alone = keep(&j, &contents("alone", 3000));
        orphan = keep(&j, &contents("orphan", 3500));
        j.append_blocking(a, DAY, started()).unwrap();
        j.append_blocking(
            a,
            DAY,
            completed(
                1,
                vec![
                    written("/w/s", &shared, None),
                    written("/w/a", &alone, None),
                ],
            ),
        )
        .unwrap();
        j.append_blocking(b, DAY, started()).unwrap();
        j.append_blocking(b, DAY, completed(1, vec![written("/w/s", &shared, None)]))
            .unwrap();
        j.append_blocking(b, DAY, ended()).unwrap();
    }
    let usage = usage(&h.paths(), NOW, &NoSnapshots).unwrap();
    let by: HashMap<_, _> = usage.sessions.iter().map(|s| (s.id, s)).collect();
    let object = disk_bytes(
        &h.home
            .join("journal/main.objects")
            .join(&shared[..2])
            .join(&shared[2..]),
    );
    assert_eq!(by[&a].alone_bytes, 32 + 3000 + 5);
    assert_eq!(by[&a].shared_bytes, object);
    assert_eq!(by[&b].shared_bytes, object);
    assert_eq!(by[&b].alone_bytes, 0);
    assert!(!by[&a].ended && by[&b].ended);
    assert_eq!(usage.kinds.unreferenced, 32 + 3500 + 6);
    let _ = orphan;
    let records: u64 = usage.sessions.iter().map(|s| s.record_bytes).sum();
    assert_eq!(records, usage.kinds.records);
    let attributed: u64 = usage.sessions.iter().map(|s| s.alone_bytes).sum::<u64>()
        + object
        + usage.kinds.unreferenced;
    assert_eq!(attributed, usage.kinds.sled_blobs + usage.kinds.objects);
    assert_eq!(
        usage.journal_bytes,
        usage.kinds.journal_db + usage.kinds.objects + usage.kinds.journal_other
    );
    assert_eq!(usage.journal_bytes, disk_bytes(&h.home.join("journal")));
    // sled's files hold at least what it stores.
    assert!(usage.kinds.journal_db >= usage.kinds.records + usage.kinds.sled_blobs);
}

/// Snapshots named by removed `snapshot_taken` records go through the store; one that cannot
/// is reported with the store's code.
#[test]
fn snapshots_of_removed_records_go_through_the_store() {
    struct Store(std::sync::Mutex<Vec<String>>);
    impl SnapshotStore for Store {
        fn remove(&self, s: &SnapshotRef) -> Result<u64, (String, String)> {
            if s.snapshot == "stuck" {
                return Err(("snapshot_io_failed".into(), "busy".into()));
            }
            self.0.lock().unwrap().push(s.snapshot.clone());
            Ok(4096)
        }
        fn usage(&self, _: &[SnapshotRef]) -> HashMap<String, u64> {
            HashMap::new()
        }
    }
    let h = Home::new();
    let s = sid(40);
    {
        let j = h.open();
        j.append_blocking(s, DAY, started()).unwrap();
        for id in ["s1", "stuck"] {
            j.append_blocking(
                s,
                DAY,
                Event::SnapshotTaken {
                    snapshot: id.into(),
                    backend: "copy".into(),
                    workspace: "/w".into(),
                    proposal: 1,
                    machines: Vec::new(),
                },
            )
            .unwrap();
        }
        j.append_blocking(s, DAY, ended()).unwrap();
    }
    let store = Store(Default::default());
    let report = collect(&h.paths(), None, &options(before(100 * DAY)), &store).unwrap();
    assert_eq!(*store.0.lock().unwrap(), vec!["s1".to_owned()]);
    assert_eq!(report.summary.snapshots_removed, 1);
    assert_eq!(report.snapshot_bytes_freed, 4096);
    assert!(report.summary.skipped.iter().any(|k| k.code == "retention_snapshot_kept"
        && k.detail.contains("snapshot_io_failed")));
}

#[test]
fn no_rule_is_a_coded_refusal() {
    let h = Home::new();
    let err = collect(&h.paths(), None, &options(Rules::default()), &NoSnapshots).unwrap_err();
    assert_eq!(err.code(), "retention_argument_invalid");
}

/// Every retention code, pinned.
#[test]
fn retention_code_tables() {
    assert_eq!(
        RetentionError::CODES,
        &[
            "retention_argument_invalid",
            "retention_io_failed",
            "retention_marks_max"
        ]
    );
    assert_eq!(
        Kept::CODES,
        &[
            "retention_shard_held",
            "retention_session_live",
            "retention_record_damaged",
            "retention_reference_unreadable",
            "retention_pins_overflow",
            "retention_audit_in_use",
            "retention_audit_unreadable",
            "retention_snapshot_kept",
            "retention_compaction_skipped",
        ]
    );
    let io = RetentionError::io("read", Path::new("/x"), std::io::Error::other("x"));
    assert_eq!(io.code(), "retention_io_failed");
    let open = RetentionError::from(crate::OpenError::Locked { path: "/x".into() });
    assert_eq!(open.code(), "journal_locked");
}

/// Contents a crashed process staged and named only in its recovery marker (a change set
/// whose record never came: the next start finishes it from the marker) survive a sweep;
/// contents nothing names do not.
#[test]
fn contents_a_recovery_marker_names_survive_the_sweep() {
    let h = Home::new();
    let (entry, intent, orphan, part_hash);
    {
        let j = h.open();
        entry = keep(&j, &contents("staged file", 90_000));
        intent = keep(&j, &contents("a write's kept contents", 3000));
        orphan = keep(&j, &contents("nobody", 3000));
        let part = encode_part(&[Entry {
            path: "/w/new".into(),
            before: Node::Absent,
            after: Node::File {
                blob: entry.clone(),
                bytes: 1,
                mode: 0o644,
                mtime_ns: 0,
            },
        }]);
        part_hash = hash_hex(&part);
        j.blob_store().put(&part_hash, &part).unwrap();
        let old = sid(50);
        actions(&j, old, 1, DAY);
        j.append_blocking(old, DAY + 10, ended()).unwrap();
    }
    let recovery = crate::dir::recovery_dir(&h.main());
    std::fs::create_dir_all(recovery.join(format!("w-{}-3", sid(51)))).unwrap();
    std::fs::write(
        recovery.join(format!("{}-3.json", sid(51))),
        serde_json::json!({"session": sid(51), "proposal": 3,
            "steps": [{"step": "changes", "parts": [part_hash], "forward": true}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        recovery.join(format!("w-{}-3/0.json", sid(51))),
        format!("not json, but it names {intent} all the same"),
    )
    .unwrap();
    let report = collect(&h.paths(), None, &options(before(100 * DAY)), &NoSnapshots).unwrap();
    assert_eq!(report.summary.sessions_removed, 1);
    let j = h.open();
    for hash in [&entry, &intent, &part_hash] {
        assert!(readable(&j, hash), "{hash} a marker names survives");
    }
    assert!(!readable(&j, &orphan));
}

/// A record too large to stay in sled is an object under its own hash: retention keeps it
/// while its record stays (its chain verifies after the sweep), takes it with its session, and
/// `du` counts it as the session's own.
#[test]
fn a_large_record_kept_as_an_object_stays_with_its_record_and_goes_with_it() {
    let h = Home::new();
    let (old, new) = (sid(40), sid(41));
    let large = |tag: &str| {
        let paths: Vec<String> = (0..300)
            .map(|k| format!("~/{tag}/{k}/{}", "p".repeat(90)))
            .collect();
        let action =
            aido_actions::Action::from_tool_call("stat_files", serde_json::json!({"paths": paths}))
                .unwrap();
        Event::ActionProposed {
            action,
            verdict: aido_actions::Verdict::Allow,
            parent: None,
        }
    };
    let (old_hash, new_hash);
    {
        let j = h.open();
        j.append_blocking(old, DAY, started()).unwrap();
        old_hash = j.append_blocking(old, DAY, large("old")).unwrap().hash;
        j.append_blocking(old, DAY, ended()).unwrap();
        j.append_blocking(new, 900 * DAY, started()).unwrap();
        new_hash = j
            .append_blocking(new, 900 * DAY, large("new"))
            .unwrap()
            .hash;
        j.append_blocking(new, 900 * DAY, ended()).unwrap();
        for hash in [&old_hash, &new_hash] {
            assert!(j.blob_store().objects().contains(hash), "kept as an object");
        }
    }
    let usage = usage(&h.paths(), NOW, &NoSnapshots).unwrap();
    let by: HashMap<_, _> = usage.sessions.iter().map(|s| (s.id, s)).collect();
    let object = disk_bytes(
        &h.home
            .join("journal/main.objects")
            .join(&new_hash[..2])
            .join(&new_hash[2..]),
    );
    assert!(object > 0);
    assert!(
        by[&new].alone_bytes >= object,
        "du counts the record's object"
    );
    assert_eq!(usage.kinds.unreferenced, 0, "no record's object is unnamed");
    let report = collect(&h.paths(), None, &options(before(100 * DAY)), &NoSnapshots).unwrap();
    assert_eq!(report.summary.sessions_removed, 1);
    let j = h.open();
    assert!(
        !j.blob_store().objects().contains(&old_hash),
        "swept with it"
    );
    assert!(j.blob_store().objects().contains(&new_hash), "kept with it");
    assert_eq!(j.verify(new).unwrap().broken, None);
    assert_eq!(j.all_records(new).unwrap()[1].event, large("new"));
}
