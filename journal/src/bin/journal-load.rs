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
                    // Every fifth record carries a blob-sized string.
                    let reason = if n.is_multiple_of(5) {
                        format!("{n}:{}", "z".repeat(3000))
                    } else {
                        format!("{n}")
                    };
                    let event = Event::SessionEnded { reason };
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
