//! An acknowledged record survives `kill -9` of the writing process, and tampering with any
//! stored byte is found by verify at the right seq.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use aido_journal::{CommitMode, Event, Journal, Limits, SessionId};

#[test]
fn acknowledged_records_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal");
    // Rounds 3 to 5: half the threads' records are acknowledged once written to the tail
    // (not flushed); they must survive kill -9 all the same.
    for round in 0..6 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_journal-load"))
            .arg(&path)
            .arg("4")
            .args(if round >= 3 {
                &["written"][..]
            } else {
                &[][..]
            })
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut acked: HashMap<String, u64> = HashMap::new();
        let mut lines = BufReader::new(stdout).lines();
        // Kill it mid-load, at a different point each round.
        let kill_after = 300 + (round % 3) * 577;
        for _ in 0..kill_after {
            let line = lines.next().expect("the child keeps acking").unwrap();
            let mut parts = line.split_whitespace().skip(1);
            let (session, seq) = (
                parts.next().unwrap().to_owned(),
                parts.next().unwrap().parse::<u64>().unwrap(),
            );
            let e = acked.entry(session).or_default();
            *e = (*e).max(seq);
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        drop(lines);

        let journal = Journal::open(&path, Limits::default(), CommitMode::Group).unwrap();
        assert_eq!(
            acked.len(),
            4,
            "every writer thread was acknowledged at least once"
        );
        for (session, max_acked) in &acked {
            let id = SessionId::parse(session).unwrap();
            let report = journal.verify(id).unwrap();
            assert_eq!(
                report.broken, None,
                "round {round}: the chain of {session} is whole"
            );
            assert!(
                report.records >= *max_acked,
                "round {round}: {session} acked up to {max_acked} but holds {}",
                report.records
            );
            // The records read back whole, blobs included.
            let records = journal.all_records(id).unwrap();
            assert_eq!(records.len() as u64, report.records);
            assert!(
                records
                    .iter()
                    .enumerate()
                    .all(|(i, r)| r.seq == i as u64 + 1)
            );
            if let Some(r) = records.get(6) {
                match &r.event {
                    Event::ActionProposed { action, .. } => {
                        assert_eq!(action.primitive(), "stat_files")
                    }
                    other => panic!("{other:?}"),
                }
            }
            if let Some(r) = records.get(4) {
                match &r.event {
                    Event::SessionEnded { reason } => assert_eq!(
                        reason.len(),
                        "5:".len() + 3000 + (r.seq.to_string().len() - 1)
                    ),
                    other => panic!("{other:?}"),
                }
            }
        }
        eprintln!(
            "round {round}: killed after {kill_after} acks; all acknowledged records present"
        );
    }
}

/// Open what was just closed in this process. sled 0.34 releases its file lock from a
/// background thread after `Drop` returns (spacejam/sled#1289), so an immediate reopen in the
/// same process can briefly see the lock held; wait for it, up to 5 s.
fn when_free<T, E: std::fmt::Debug>(mut open: impl FnMut() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match open() {
            Ok(t) => return t,
            // Journal: `Locked { .. }`; sled: an io error of kind `WouldBlock` from flock.
            Err(e)
                if std::time::Instant::now() < deadline
                    && ["Locked", "WouldBlock"]
                        .iter()
                        .any(|m| format!("{e:?}").contains(m)) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn verify_names_the_first_altered_record() {
    let dir = tempfile::tempdir().unwrap();
    let session = SessionId::from_bytes([9; 16]);
    {
        let journal = when_free(|| Journal::open(dir.path(), Limits::default(), CommitMode::Group));
        for n in 1..=10 {
            journal
                .append_blocking(
                    session,
                    n,
                    Event::SessionEnded {
                        reason: format!("r{n}"),
                    },
                )
                .unwrap();
        }
        assert_eq!(journal.verify(session).unwrap().broken, None);
    }
    // Alter one byte of seq 6 on disk, as an attacker with the files would.
    {
        let db = when_free(|| sled::open(dir.path()));
        let records = db.open_tree("records").unwrap();
        let mut key = session.as_bytes().to_vec();
        key.extend_from_slice(&6u64.to_be_bytes());
        let mut value = records.get(&key).unwrap().unwrap().to_vec();
        let at = value.windows(2).position(|w| w == b"r6").unwrap();
        value[at + 1] = b'7';
        records.insert(&key, value).unwrap();
        db.flush().unwrap();
    }
    let journal = when_free(|| Journal::open(dir.path(), Limits::default(), CommitMode::Group));
    let report = journal.verify(session).unwrap();
    let broken = report.broken.expect("the alteration is found");
    assert_eq!(broken.seq, 6);
    assert_eq!(report.records, 5);

    // Re-hashing the altered record does not help: seq 7 no longer chains to it.
    {
        drop(journal);
        let db = when_free(|| sled::open(dir.path()));
        let records = db.open_tree("records").unwrap();
        let mut key = session.as_bytes().to_vec();
        key.extend_from_slice(&6u64.to_be_bytes());
        let value = records.get(&key).unwrap().unwrap().to_vec();
        let bytes = &value[32..];
        let mut rehashed = blake3::hash(bytes).as_bytes().to_vec();
        rehashed.extend_from_slice(bytes);
        records.insert(&key, rehashed).unwrap();
        db.flush().unwrap();
    }
    let journal = when_free(|| Journal::open(dir.path(), Limits::default(), CommitMode::Group));
    assert_eq!(journal.verify(session).unwrap().broken.unwrap().seq, 7);
}

/// A session's newest record damaged on disk, in each way the writer's head check and the
/// readers must catch: the append to it is refused with `journal_head_corrupt` naming the
/// session and seq (never a silent seq 1 or a chain from garbage), nothing is written, reads
/// fail with a coded error, verify names the seq, and other sessions append on.
#[test]
#[allow(clippy::too_many_lines)]
fn a_corrupt_head_refuses_its_session_and_nothing_else() {
    type Damage = fn(&mut Vec<u8>);
    fn rehash(value: &mut Vec<u8>, edit: impl Fn(String) -> String) {
        let text = edit(String::from_utf8(value[32..].to_vec()).unwrap());
        let mut out = blake3::hash(text.as_bytes()).as_bytes().to_vec();
        out.extend_from_slice(text.as_bytes());
        *value = out;
    }
    // (what is done to seq 3's value, the code a read of the session gives)
    let cases: [(Damage, &str); 5] = [
        (
            |v| {
                let at = v.len() - 3;
                v[at] ^= 1;
            },
            "journal_record_corrupt",
        ),
        (|v| v.truncate(20), "journal_record_corrupt"),
        (
            |v| rehash(v, |t| t.replace("\"seq\":3", "\"seq\":4")),
            "journal_record_corrupt",
        ),
        (
            |v| rehash(v, |t| t.replace("\"session\":\"1", "\"session\":\"2")),
            "journal_record_corrupt",
        ),
        (
            |v| {
                rehash(v, |t| {
                    t.replace(
                        &format!("\"v\":{}", aido_journal::FORMAT_VERSION),
                        "\"v\":99",
                    )
                })
            },
            "journal_format_unsupported",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let session = |n: usize| SessionId::from_bytes([0x10 + n as u8; 16]);
    let ended = |reason: &str| Event::SessionEnded {
        reason: reason.to_owned(),
    };
    {
        let journal = when_free(|| Journal::open(dir.path(), Limits::default(), CommitMode::Group));
        for n in 0..=cases.len() {
            for t in 1..=3 {
                journal
                    .append_blocking(session(n), t, ended("fine"))
                    .unwrap();
            }
        }
    }
    // A fresh journal, whose writer has not yet read any head.
    let journal = when_free(|| Journal::open(dir.path(), Limits::default(), CommitMode::Group));
    let tree = journal.raw_records_tree();
    for (n, (damage, _)) in cases.iter().enumerate() {
        let mut key = session(n).as_bytes().to_vec();
        key.extend_from_slice(&3u64.to_be_bytes());
        let mut value = tree.get(&key).unwrap().unwrap().to_vec();
        damage(&mut value);
        tree.insert(&key, value).unwrap();
    }
    for (n, (_, read_code)) in cases.iter().enumerate() {
        let id = session(n);
        for _ in 0..2 {
            match journal.append_blocking(id, 4, ended("next")) {
                Err(aido_journal::AppendError::HeadCorrupt {
                    session: named,
                    seq,
                    ..
                }) => {
                    assert_eq!(named, id.to_string(), "case {n}");
                    assert_eq!(seq, 3, "case {n}");
                }
                other => panic!("case {n}: {other:?}"),
            }
        }
        assert_eq!(
            journal.head_seq(id).unwrap(),
            3,
            "case {n}: nothing written"
        );
        assert_eq!(
            journal.all_records(id).unwrap_err().code(),
            *read_code,
            "case {n}"
        );
        let report = journal.verify(id).unwrap();
        assert_eq!(report.broken.map(|b| b.seq), Some(3), "case {n}");
        assert_eq!(report.records, 2, "case {n}");
    }
    // A key under the session that is not a record key is a corrupt head too.
    let odd = session(cases.len() + 1);
    journal.append_blocking(odd, 1, ended("fine")).unwrap();
    let fresh = session(cases.len() + 2);
    let mut key = fresh.as_bytes().to_vec();
    key.extend_from_slice(&[0xff; 3]);
    tree.insert(key, &b"junk"[..]).unwrap();
    let refused = journal.append_blocking(fresh, 1, ended("x")).unwrap_err();
    assert_eq!(refused.code(), "journal_head_corrupt");
    // The undamaged session goes on from its head.
    let whole = session(cases.len());
    assert_eq!(
        journal
            .append_blocking(whole, 4, ended("next"))
            .unwrap()
            .seq,
        4
    );
    assert_eq!(journal.verify(whole).unwrap().broken, None);
}
