//! memory's integration tests, one binary: each file below is a module (nextest still runs
//! every test in a process of its own). One binary links the crate's dependencies once, not
//! once per file, which keeps the build's disk and link time small.
//!
//! tests/processes.rs is not here: it is a `harness = false` binary that starts itself as
//! its own worker processes (see its docs and Cargo.toml).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod store;
