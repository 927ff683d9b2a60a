//! sandbox's integration tests, one binary: each file below is a module (nextest still runs
//! every test in a process of its own). One binary links the crate's dependencies once, not
//! once per file, which keeps the build's disk and link time small.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod attacks;
mod background;
mod common;
mod egress;
mod flood;
mod standby;
mod tmp;
mod unconfined;
mod workloads;
