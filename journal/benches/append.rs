//! Journal appends per second: group commit against flush-per-record, with 8 writers at once
//! (an agent's session actor, its body results and other sessions all append concurrently).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aido_journal::{CommitMode, Event, Journal, Limits, SessionId};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const WRITERS: u8 = 8;
const RECORDS_PER_WRITER: u64 = 50;

fn run(journal: &Arc<Journal>, round: u64) {
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let journal = journal.clone();
            std::thread::spawn(move || {
                let mut id = [w; 16];
                id[..8].copy_from_slice(&round.to_be_bytes());
                let session = SessionId::from_bytes(id);
                for n in 0..RECORDS_PER_WRITER {
                    let event = Event::SessionEnded {
                        reason: format!("record {n}"),
                    };
                    if let Err(e) = journal.append_blocking(session, n, event) {
                        panic!("append: {e}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        if t.join().is_err() {
            panic!("writer thread panicked");
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal_append_8_writers");
    group.throughput(Throughput::Elements(
        u64::from(WRITERS) * RECORDS_PER_WRITER,
    ));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for (name, mode) in [
        ("group_commit", CommitMode::Group),
        ("flush_per_record", CommitMode::PerRecord),
    ] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let journal = Arc::new(
            Journal::open(dir.path(), Limits::default(), mode).unwrap_or_else(|e| panic!("{e}")),
        );
        let mut round = 0;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    round += 1;
                    run(&journal, round);
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
