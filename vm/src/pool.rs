//! A warm pool of clones of a [`Template`]. Each clone is restored from the template's state and
//! left paused, so acquiring one is a `cont`; on acquire it takes a fresh identity.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::VmError;
use crate::machine::{Machine, MachineSpec};
use crate::template::{Template, hex, take_identity};

/// Most clones one pool keeps warm.
pub const POOL_SIZE_MAX: usize = 8;

/// What the pool holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// Paused clones ready to hand out.
    pub warm: usize,
    /// How many it keeps warm.
    pub size: usize,
    /// Clones handed out so far.
    pub acquired: u64,
    /// The template's directory.
    pub template: String,
}

/// Warm clones of one template.
pub struct Pool {
    template: Template,
    warm: VecDeque<Machine>,
    size: usize,
    acquired: u64,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VmError + 'a {
    move |e| VmError::io(op, path, e)
}

impl Pool {
    /// Open a pool of clones of `base`'s template under `templates` (made on first use), and
    /// warm `size` clones.
    pub async fn open(base: &MachineSpec, templates: &Path, size: usize) -> Result<Self, VmError> {
        let mut pool = Self {
            template: Template::ensure(base, templates).await?,
            warm: VecDeque::new(),
            size: size.min(POOL_SIZE_MAX),
            acquired: 0,
        };
        pool.refill().await?;
        Ok(pool)
    }

    /// Warm clones until the pool holds its size.
    pub async fn refill(&mut self) -> Result<(), VmError> {
        while self.warm.len() < self.size {
            let clone = self.template.warm().await?;
            self.warm.push_back(clone);
        }
        Ok(())
    }

    /// A running clone with a fresh identity, and how long it took until the clone ran (the
    /// `cont`; the identity is applied right after, before this returns). `entropy` seeds it
    /// (the caller's randomness facade provides it).
    pub async fn acquire(&mut self, entropy: &[u8; 32]) -> Result<(Machine, Duration), VmError> {
        let started = Instant::now();
        let clone = match self.warm.pop_front() {
            Some(c) => c,
            None => self.template.warm().await?,
        };
        clone.resume().await?;
        self.acquired += 1;
        let took = started.elapsed();
        let seed = hex(entropy);
        let id = format!("aido-clone-{}-{}", self.acquired, &seed[..8]);
        // Hand the clone out only once the guest has taken its identity.
        take_identity(&clone, &id, &seed).await?;
        Ok((clone, took))
    }

    /// Give a clone back: it is destroyed (a used clone is never handed out again).
    pub async fn release(&mut self, clone: Machine) {
        clone.shutdown().await;
    }

    /// What the pool holds.
    pub fn status(&self) -> PoolStatus {
        PoolStatus {
            warm: self.warm.len(),
            size: self.size,
            acquired: self.acquired,
            template: self.template.dir().display().to_string(),
        }
    }

    /// Stop every warm clone.
    pub async fn shutdown(&mut self) {
        while let Some(clone) = self.warm.pop_front() {
            clone.shutdown().await;
        }
    }
}

/// Clone a running machine: pause it, save its state and a copy of its disk overlay, run it
/// again, and start the copy from that state (paused; [`Machine::resume`] runs it). The files
/// go in `dir`.
pub async fn clone_machine(
    source: &Machine,
    spec: &MachineSpec,
    dir: &Path,
) -> Result<Machine, VmError> {
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let state = dir.join("clone.state");
    let disk = dir.join("clone-base.qcow2");
    let saved = source.save_state(&state).await;
    let copied = saved.and_then(|_| source.copy_disk(&disk));
    // The source runs on whatever happened.
    source.resume().await?;
    copied?;
    let mut clone_spec = spec.clone();
    clone_spec.disk = Some(disk);
    Machine::restore(&clone_spec, &state).await
}
