//! cli's integration tests, one binary: each file below is a module (nextest still runs
//! every test in a process of its own). One binary links the crate's dependencies once, not
//! once per file, which keeps the build's disk and link time small.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod agent;
mod cli;
mod codes;
mod common;
mod docs;
mod layers;
mod process;
mod retention;
mod rewind;
mod simulation;
mod vm;
