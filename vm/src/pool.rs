//! A warm pool of clones. A template machine boots once from the golden image, reaches its
//! prompt, and is saved (RAM and devices to a state file; its disk overlay kept read-only).
//! Each clone is a new QEMU on its own copy-on-write overlay of that disk, restored from the
//! state file and left paused, so acquiring one is a `cont`. On acquire a clone gets a fresh
//! identity (hostname, an identity file, new entropy mixed into its RNG) because clones
//! restored from one image otherwise share all of that.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::VmError;
use crate::machine::{Machine, MachineSpec};

/// Most clones one pool keeps warm.
pub const POOL_SIZE_MAX: usize = 8;
/// Longest a clone may take to take its new identity after it runs again.
const IDENTITY_TIMEOUT_S: u64 = 30;
/// The template's format: a template made by another version is made again.
const TEMPLATE_VERSION: u64 = 3;
/// Said to the template's serial shell before its state is saved, so every clone has it: no
/// echo (a clone's identity line is not sent back character by character), and `i ID SEED`,
/// which takes an identity with shell builtins only (the kernel's hostname, an identity file,
/// entropy mixed into the RNG) and says so.
/// It also drops the page cache: with the template booted `init_on_free=1`, every page the
/// guest frees is zero, and zero pages are neither saved nor resident in a clone.
const TEMPLATE_PREP: &str = "stty -echo; echo 3 > /proc/sys/vm/drop_caches; i() { echo $1 > /proc/sys/kernel/hostname; echo $1 > /etc/aido-identity; echo $2 > /dev/urandom; echo AIDO-IDENTITY-$1; }; echo AIDO-TEMPLATE-\"\"READY";

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

/// A clone restored from the template's state and paused again after taking a placeholder
/// identity once: a restored QEMU has translated none of the guest's code yet (under TCG), so
/// this first run pays for translating the path the real identity takes, before acquire.
async fn warmed(spec: &MachineSpec, state: &Path) -> Result<Machine, VmError> {
    let clone = Machine::restore(spec, state).await?;
    clone.resume().await?;
    take_identity(&clone, "aido-warming", "0").await?;
    clone.pause().await?;
    Ok(clone)
}

/// Have a clone take identity `id` and entropy `seed` through `i` (see [`TEMPLATE_PREP`]) and
/// wait until it says so.
async fn take_identity(clone: &Machine, id: &str, seed: &str) -> Result<(), VmError> {
    clone.serial_write(&format!("i {id} {seed}")).await?;
    wait_serial(
        clone,
        &format!("AIDO-IDENTITY-{id}"),
        IDENTITY_TIMEOUT_S * 1000,
    )
    .await
}

/// Wait until the guest prints `marker` on its serial port.
async fn wait_serial(machine: &Machine, marker: &str, timeout_ms: u64) -> Result<(), VmError> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    while !machine.serial().contains(marker) {
        if Instant::now() > deadline {
            return Err(VmError::Qmp {
                command: "identity",
                message: format!("the guest did not print {marker} on its serial port"),
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// Warm clones of one template.
pub struct Pool {
    spec: MachineSpec,
    state: PathBuf,
    dir: PathBuf,
    warm: VecDeque<Machine>,
    size: usize,
    acquired: u64,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VmError + 'a {
    move |e| VmError::io(op, path, e)
}

impl Pool {
    /// Open (making the template on first use) a pool in `dir` for `base`, and warm `size`
    /// clones.
    pub async fn open(base: &MachineSpec, dir: &Path, size: usize) -> Result<Self, VmError> {
        let size = size.min(POOL_SIZE_MAX);
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let disk = dir.join("template.qcow2");
        let state = dir.join("template.state");
        let done = dir.join("template.json");
        let current = std::fs::read_to_string(&done)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|t| t["version"] == TEMPLATE_VERSION);
        if !current {
            for old in [&done, &state, &disk] {
                match std::fs::remove_file(old) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(VmError::io("remove", old, e)),
                }
            }
            // The template zeroes what its kernel frees (boot scratch, init memory, caches), so
            // clones restored from its state hold only the pages in use.
            let mut template = base.clone();
            template.append.push_str(" init_on_free=1");
            let machine = Machine::boot(&template).await?;
            machine.wait_for_text("# ", base.boot_timeout_ms).await?;
            machine.serial_write(TEMPLATE_PREP).await?;
            wait_serial(&machine, "AIDO-TEMPLATE-READY", base.boot_timeout_ms).await?;
            machine.save_state(&state).await?;
            // The disk as it was at the save: the machine's overlay, now frozen.
            let overlay = machine.dir().join("overlay.qcow2");
            std::fs::copy(&overlay, &disk).map_err(io("copy", &overlay))?;
            machine.shutdown().await;
            let mut perms = std::fs::metadata(&disk)
                .map_err(io("stat", &disk))?
                .permissions();
            perms.set_readonly(true);
            std::fs::set_permissions(&disk, perms).map_err(io("chmod", &disk))?;
            std::fs::write(
                &done,
                serde_json::json!({"version": TEMPLATE_VERSION, "base": base.disk, "kernel": base.kernel})
                    .to_string(),
            )
            .map_err(io("write", &done))?;
        }
        let mut spec = base.clone();
        spec.disk = Some(disk);
        let mut pool = Self {
            spec,
            state,
            dir: dir.to_owned(),
            warm: VecDeque::new(),
            size,
            acquired: 0,
        };
        pool.refill().await?;
        Ok(pool)
    }

    /// Warm clones until the pool holds its size.
    pub async fn refill(&mut self) -> Result<(), VmError> {
        while self.warm.len() < self.size {
            let clone = warmed(&self.spec, &self.state).await?;
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
            None => warmed(&self.spec, &self.state).await?,
        };
        clone.resume().await?;
        self.acquired += 1;
        let took = started.elapsed();
        let seed: String = entropy.iter().map(|b| format!("{b:02x}")).collect();
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
            template: self.dir.display().to_string(),
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
    let copied = saved.and_then(|_| {
        let overlay = source.dir().join("overlay.qcow2");
        std::fs::copy(&overlay, &disk)
            .map(|_| ())
            .map_err(|e| VmError::io("copy", &overlay, e))
    });
    // The source runs on whatever happened.
    source.resume().await?;
    copied?;
    let mut clone_spec = spec.clone();
    clone_spec.disk = Some(disk);
    Machine::restore(&clone_spec, &state).await
}
