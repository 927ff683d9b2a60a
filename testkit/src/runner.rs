//! A test binary's own runner (`harness = false`), for tests that must own `main` (to host
//! aido's sandbox child first): it speaks the part of libtest's protocol cargo-nextest and
//! `cargo test` use, `--list` (and `--list --ignored`) names the tests, then each runs by name
//! (`--exact`) or by filter, on a multi-threaded runtime of its own.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// One async test: its future, made afresh for its run.
pub type AsyncTest = fn() -> Pin<Box<dyn Future<Output = ()>>>;

/// Run the `tests` the command line asks for (every one without a filter).
pub fn run(tests: &[(&str, AsyncTest)]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--list") {
        if !args.iter().any(|arg| arg == "--ignored") {
            for (name, _) in tests {
                println!("{name}: test");
            }
        }
        return;
    }
    let exact = args.iter().any(|arg| arg == "--exact");
    let filters: Vec<&String> = args.iter().filter(|arg| !arg.starts_with("--")).collect();
    let chosen: Vec<&(&str, AsyncTest)> = tests
        .iter()
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        *name == f.as_str()
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    println!("running {} tests", chosen.len());
    for (name, test) in chosen {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let started = Instant::now();
        runtime.block_on(test());
        println!("test {name} ... ok ({} ms)", started.elapsed().as_millis());
    }
}
