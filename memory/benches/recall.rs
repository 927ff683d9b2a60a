//! Recall latency over 10,000 memories, and remember latency with fsync.
//!
//! The 10,000 memories are made from a fixed pseudo-random sequence (no clock, no rand), so
//! every run searches the same corpus. They live on tmpfs (`/dev/shm`) when there is one,
//! since recall reads from the page cache anyway and seeding 10,000 fsynced commits on disk
//! would take longer than the benchmark; the remember benchmark runs on the real disk
//! because its cost is the fsync. Each benchmark's name says where it ran.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

use std::hint::black_box;
use std::path::PathBuf;

use aido_memory::{
    Limits, ListRequest, MemoryStore, Provenance, RecallRequest, RememberRequest, Scope, Terms,
};
use criterion::{Criterion, criterion_group, criterion_main};

const MEMORIES: u64 = 10_000;
const NOW_MS: u64 = 1_764_590_400_000;

/// A 64-bit LCG (Knuth's MMIX constants): the same sequence on every run.
struct Sequence(u64);

impl Sequence {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// Skewed towards small numbers, so some words are common and most are rare, as in text.
    fn skewed(&mut self, below: u64) -> u64 {
        let a = self.next() % below;
        let b = self.next() % below;
        a.min(b)
    }
}

/// 2,000 pronounceable words from syllables.
fn vocabulary() -> Vec<String> {
    let syllables = [
        "ka", "ri", "to", "mu", "sel", "van", "dor", "pli", "nex", "zu", "gra", "fo", "lin", "qua",
        "bes",
    ];
    let mut words = Vec::new();
    for a in syllables {
        for b in syllables {
            for c in syllables {
                words.push(format!("{a}{b}{c}"));
                if words.len() == 2_000 {
                    return words;
                }
            }
        }
    }
    words
}

fn directory(tmpfs: bool) -> (tempfile::TempDir, &'static str) {
    let shm = PathBuf::from("/dev/shm");
    if tmpfs && shm.is_dir() {
        (tempfile::tempdir_in(shm).unwrap(), "tmpfs")
    } else {
        (tempfile::tempdir().unwrap(), "disk")
    }
}

fn seeded(words: &[String]) -> (tempfile::TempDir, &'static str, MemoryStore) {
    let (dir, medium) = directory(true);
    let mut store = MemoryStore::open(dir.path().join("memory.sqlite"), Limits::default()).unwrap();
    let mut sequence = Sequence(42);
    for index in 0..MEMORIES {
        let length = 10 + sequence.next() % 30;
        let text: Vec<&str> = (0..length)
            .map(|_| words[sequence.skewed(words.len() as u64) as usize].as_str())
            .collect();
        let scope = match index % 4 {
            0 => Scope::Global,
            1 | 2 => Scope::Project {
                key: format!("project{}", index % 10),
            },
            _ => Scope::Session {
                id: format!("session{}", index % 50),
            },
        };
        let request = RememberRequest {
            text: text.join(" "),
            scope,
            tags: vec![format!("tag{}", index % 20)],
            expiry: None,
            provenance: Provenance {
                session: "bench".into(),
                seq: index,
                untrusted: index % 5 == 0,
            },
        };
        store.remember(&request, NOW_MS + index).unwrap();
    }
    (dir, medium, store)
}

fn recall(c: &mut Criterion) {
    let words = vocabulary();
    let (_dir, medium, mut store) = seeded(&words);
    let mut sequence = Sequence(7);
    // 64 queries of three words each, drawn like the texts, cycled through.
    let queries: Vec<String> = (0..64)
        .map(|_| {
            (0..3)
                .map(|_| words[sequence.skewed(words.len() as u64) as usize].clone())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let now = NOW_MS + MEMORIES;

    let mut group = c.benchmark_group(format!("recall_10k_{medium}"));
    let mut turn = 0;
    group.bench_function("any_3_words_limit_10", |b| {
        b.iter(|| {
            turn = (turn + 1) % queries.len();
            let recall = store
                .recall(&RecallRequest::new(queries[turn].as_str()), now)
                .unwrap();
            black_box(recall.results.len())
        })
    });
    group.bench_function("all_3_words_limit_10", |b| {
        b.iter(|| {
            turn = (turn + 1) % queries.len();
            let mut request = RecallRequest::new(queries[turn].as_str());
            request.terms = Terms::All;
            black_box(store.recall(&request, now).unwrap().results.len())
        })
    });
    group.bench_function("any_3_words_project_and_tag", |b| {
        b.iter(|| {
            turn = (turn + 1) % queries.len();
            let mut request = RecallRequest::new(queries[turn].as_str());
            request.scopes = vec![
                Scope::Global,
                Scope::Project {
                    key: "project1".into(),
                },
            ];
            request.tags = vec!["tag1".into()];
            black_box(store.recall(&request, now).unwrap().results.len())
        })
    });
    group.bench_function("list_page_50", |b| {
        b.iter(|| {
            black_box(
                store
                    .list_memory(&ListRequest::default(), now)
                    .unwrap()
                    .memories
                    .len(),
            )
        })
    });
    group.finish();
}

fn remember(c: &mut Criterion) {
    let (dir, medium) = directory(false);
    let mut store = MemoryStore::open(dir.path().join("memory.sqlite"), Limits::default()).unwrap();
    let mut seq = 0;
    c.bench_function(&format!("remember_fsync_{medium}"), |b| {
        b.iter(|| {
            seq += 1;
            let request = RememberRequest {
                text: format!("benchmark memory {seq} about the build cache and the linker"),
                scope: Scope::Global,
                tags: vec!["bench".into()],
                expiry: None,
                provenance: Provenance {
                    session: "bench".into(),
                    seq,
                    untrusted: false,
                },
            };
            black_box(store.remember(&request, NOW_MS + seq).unwrap())
        })
    });
}

criterion_group!(benches, recall, remember);
criterion_main!(benches);
