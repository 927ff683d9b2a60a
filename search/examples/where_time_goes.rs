//! Times `search_code` and `rg` on one tree, case by case, to see where the time goes:
//! `cargo run --release -p aido-search --example where_time_goes -- TREE [ROUNDS] [CASE]`.
//!
//! Wall time on a shared machine is noisy, so it prints the best of the rounds and the CPU
//! time (user + system, from /proc: this process's threads, and rg as a waited-for child).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // a tool that fails loudly

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use aido_search::{AllowAll, Limits, OutputMode, SearchRequest, search_code};

/// (own, children's) CPU seconds so far, from /proc/self/stat.
fn cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<f64> = stat
        .rsplit_once(") ")
        .expect("stat")
        .1
        .split(' ')
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime, cstime are fields 14-17; in clock ticks of 1/100 s.
    (
        (fields[11] + fields[12]) / 100.0,
        (fields[13] + fields[14]) / 100.0,
    )
}

fn main() {
    let tree = std::env::args().nth(1).expect("a tree");
    let rounds: usize = std::env::args()
        .nth(2)
        .map_or(5, |rounds| rounds.parse().expect("rounds"));
    let root = Path::new(&tree);
    let limits = Limits {
        hits_max: u64::MAX / 2,
        matched_files_max: u64::MAX / 2,
        files_max: u64::MAX / 2,
        result_bytes_max: u64::MAX,
        ..Limits::default()
    };
    let cases: &[(&str, &[&str], OutputMode, &str)] = &[
        (
            "no match (walk + read + scan)",
            &["zzqqxx_never"],
            OutputMode::FilesWithMatches,
            "-l",
        ),
        (
            "content, one pattern",
            &[r"fn \w+\("],
            OutputMode::Content,
            "-n",
        ),
        (
            "content, two patterns",
            &[r"fn \w+\(", "impl<"],
            OutputMode::Content,
            "-n",
        ),
        (
            "count, two patterns",
            &[r"fn \w+\(", "impl<"],
            OutputMode::Count,
            "-c",
        ),
    ];
    let only = std::env::args().nth(3);
    for (name, patterns, mode, flag) in cases {
        if only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
        {
            continue;
        }
        let (mut best_ours, mut best_theirs) = (f64::MAX, f64::MAX);
        let (mut cpu_ours, mut cpu_theirs) = (0.0, 0.0);
        for _ in 0..rounds {
            let mut request = SearchRequest::new(root, patterns);
            request.mode = *mode;
            let (own, _) = cpu();
            let started = Instant::now();
            let result = search_code(&request, &limits, &AllowAll).expect("searches");
            best_ours = best_ours.min(started.elapsed().as_secs_f64());
            cpu_ours += cpu().0 - own;
            drop(result);
            let (_, children) = cpu();
            let started = Instant::now();
            let mut command = Command::new("rg");
            command.args([
                "--no-config",
                "--no-require-git",
                "--no-ignore-global",
                "--no-messages",
                flag,
            ]);
            for pattern in *patterns {
                command.args(["-e", pattern]);
            }
            let output = command
                .arg(root)
                .current_dir(root)
                .stdout(Stdio::piped())
                .output()
                .expect("rg");
            best_theirs = best_theirs.min(started.elapsed().as_secs_f64());
            cpu_theirs += cpu().1 - children;
            drop(output);
        }
        let rounds = rounds as f64;
        println!(
            "{name:<32} best wall: aido {:>5.0} ms, rg {:>5.0} ms, speed {:.2}x rg | cpu per run: aido {:>5.0} ms, rg {:>5.0} ms, {:.2}x",
            best_ours * 1e3,
            best_theirs * 1e3,
            best_theirs / best_ours,
            cpu_ours / rounds * 1e3,
            cpu_theirs / rounds * 1e3,
            cpu_theirs / cpu_ours,
        );
    }
}
