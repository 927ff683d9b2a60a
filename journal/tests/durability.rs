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
    for round in 0..3 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_journal-load"))
            .arg(&path)
            .arg("4")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut acked: HashMap<String, u64> = HashMap::new();
        let mut lines = BufReader::new(stdout).lines();
        // Kill it mid-load, at a different point each round.
        let kill_after = 300 + round * 577;
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
