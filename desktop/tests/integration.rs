//! desktop's integration tests, one binary: each file below is a module (nextest still runs
//! every test in a process of its own). One binary links the crate's dependencies once, not
//! once per file, which keeps the build's disk and link time small.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod wlr;
mod x11;
