//! A load generator for the kill -9 test: appends records from several threads as fast as the
//! journal takes them and prints `acked SESSION SEQ` for each acknowledgement, so the parent
//! knows exactly which records it was promised before it kills this process.
//!
//! Usage: journal-load DIR THREADS [written]
//!
//! With `written`, odd-numbered threads append records that are acknowledged once written to
//! the journal's tail (not flushed), as the records of actions that change nothing are.

use std::io::Write;
use std::sync::Arc;

use aido_journal::{CommitMode, Event, Journal, Limits, SessionId};

/// A record of some 20 kB of short strings (they stay inline, so the record is large).
fn large(n: u64) -> Event {
    let paths: Vec<String> = (0..200)
        .map(|k| format!("~/{n}/{k}/{}", "p".repeat(80)))
        .collect();
    match aido_actions::Action::from_tool_call("stat_files", serde_json::json!({ "paths": paths }))
    {
        Ok(action) => Event::ActionProposed {
            action,
            verdict: aido_actions::Verdict::Allow,
            parent: None,
        },
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(threads)) = (args.get(1), args.get(2).and_then(|t| t.parse::<u8>().ok()))
    else {
        eprintln!("usage: journal-load DIR THREADS");
        std::process::exit(2);
    };
    let journal = match Journal::open(
        std::path::Path::new(dir),
        Limits::default(),
        CommitMode::Group,
    ) {
        Ok(j) => Arc::new(j),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let written = args.get(3).is_some_and(|a| a == "written");
    let stdout = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let journal = journal.clone();
            let stdout = stdout.clone();
            std::thread::spawn(move || {
                let session = SessionId::from_bytes([t + 1; 16]);
                let mut n: u64 = 0;
                loop {
                    n += 1;
                    // Every seventh record is larger than a chunk (its bytes go to the blob
                    // store), every fifth carries a blob-sized string.
                    let event = if n.is_multiple_of(7) {
                        large(n)
                    } else if n.is_multiple_of(5) {
                        Event::SessionEnded {
                            reason: format!("{n}:{}", "z".repeat(3000)),
                        }
                    } else {
                        Event::SessionEnded {
                            reason: format!("{n}"),
                        }
                    };
                    let appended = if written && t % 2 == 1 {
                        journal.append_written_blocking(session, n, event)
                    } else {
                        journal.append_blocking(session, n, event)
                    };
                    match appended {
                        Ok(a) => {
                            if let Ok(mut out) = stdout.lock() {
                                let _ = writeln!(out, "acked {session} {}", a.seq);
                                let _ = out.flush();
                            }
                        }
                        Err(e) => {
                            eprintln!("append failed: {e}");
                            std::process::exit(1);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}
