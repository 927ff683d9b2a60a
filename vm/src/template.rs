//! Templates: a machine booted once from its image, brought to its prompt, prepared, and saved
//! (RAM and devices to a state file, its disk overlay frozen read-only beside it). A machine
//! started from a template is a new QEMU on its own copy-on-write overlay of that disk, restored
//! from the state file: it runs in well under a second where a boot takes seconds, and it holds
//! only the pages the guest uses (the template's kernel zeroes what it frees, and zero pages are
//! neither saved nor resident). Each one takes a fresh identity (hostname, an identity file, new
//! entropy mixed into its RNG), because machines restored from one state otherwise share all of
//! that. `vm_start` and the warm pool both start machines this way.
//!
//! A template lives in a directory named by a hash of everything it was made from (the image's
//! files with their sizes and mtimes, memory, command line, accelerator), so a rebuilt image or
//! another memory size gets its own template and a template is never changed in place. It is
//! made in a scratch directory and renamed into place whole, so two aido processes making the
//! same template at once both succeed and one of them wins. Each process using a template holds
//! a shared lock on its `template.lock`; making a template removes the older templates of the
//! same image slot (same files, memory and command line, an older build) that no process holds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::VmError;
use crate::machine::{Machine, MachineSpec};

/// The template's format: a template made by another version is made again.
const TEMPLATE_VERSION: u64 = 4;
/// Longest a machine may take to take its new identity after it runs.
const IDENTITY_TIMEOUT_S: u64 = 30;
/// Said to the template's serial shell before its state is saved, so every machine started from
/// it has it: no echo (an identity line is not sent back character by character), and `i ID
/// SEED`, which takes an identity with shell builtins only (the kernel's hostname, an identity
/// file, entropy mixed into the RNG) and says so.
/// Before that it waits until the console's shell (on tty1) runs and has had a second to print
/// its prompt, so a graphical screen, which cannot be read exactly, is saved at its prompt too.
/// It also drops the page cache: with the template booted `init_on_free=1`, every page the
/// guest frees is zero, and zero pages are neither saved nor resident in a restored machine.
const TEMPLATE_PREP: &str = "stty -echo; t() { for p in /proc/[0-9]*; do [ \"$(readlink $p/fd/0 2>/dev/null)\" = /dev/tty1 ] && return 0; done; return 1; }; until t; do sleep 0.1; done; sleep 1; echo 3 > /proc/sys/vm/drop_caches; i() { echo $1 > /proc/sys/kernel/hostname; echo $1 > /etc/aido-identity; echo $2 > /dev/urandom; echo AIDO-IDENTITY-$1; }; echo AIDO-TEMPLATE-\"\"READY";

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VmError + 'a {
    move |e| VmError::io(op, path, e)
}

/// A saved, prepared machine to start others from.
#[derive(Clone, Debug)]
pub struct Template {
    /// The spec machines are restored with: the base's, on the template's frozen disk.
    spec: MachineSpec,
    state: PathBuf,
    dir: PathBuf,
    made: bool,
    /// The shared lock that tells other processes this template is in use.
    _lock: std::sync::Arc<std::fs::File>,
}

impl Template {
    /// The template of `base` under `root`, made now (a boot, a few seconds under TCG) if there
    /// is none yet. Only for machines aido runs itself: a libvirt host is refused.
    pub async fn ensure(base: &MachineSpec, root: &Path) -> Result<Self, VmError> {
        if let Some(uri) = &base.host {
            return Err(VmError::Unsupported {
                what: "starting from a template",
                uri: uri.clone(),
            });
        }
        let dir = root.join(key(base, true)?);
        let slot = key(base, false)?;
        let made = if dir.join("template.json").exists() {
            false
        } else {
            std::fs::create_dir_all(root).map_err(io("create", root))?;
            let scratch = tempfile::Builder::new()
                .prefix(".making-")
                .tempdir_in(root)
                .map_err(io("create", root))?;
            make(base, scratch.path(), &slot).await?;
            match std::fs::rename(scratch.path(), &dir) {
                Ok(()) => {
                    // It is the template now: the scratch guard must not remove it.
                    let _ = scratch.keep();
                    true
                }
                // Another process made the same template meanwhile; ours goes with the guard.
                Err(_) if dir.join("template.json").exists() => false,
                Err(e) => return Err(VmError::io("rename", &dir, e)),
            }
        };
        let lock = in_use(&dir)?;
        if made {
            prune(root, &dir, &slot);
        }
        let mut spec = base.clone();
        spec.disk = Some(dir.join("template.qcow2"));
        Ok(Self {
            spec,
            state: dir.join("template.state"),
            dir,
            made,
            _lock: std::sync::Arc::new(lock),
        })
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether [`Template::ensure`] made it (booted a machine) rather than finding it.
    pub fn made(&self) -> bool {
        self.made
    }

    /// A running machine restored from the template that has taken the identity `id` (its
    /// hostname; letters, digits, `-` and `_`) and the entropy `entropy`.
    pub async fn start(&self, id: &str, entropy: &[u8; 32]) -> Result<Machine, VmError> {
        let machine = self.running().await?;
        take_identity(&machine, id, &hex(entropy)).await?;
        Ok(machine)
    }

    /// A machine restored from the template and paused again after taking a placeholder
    /// identity once: a restored QEMU has translated none of the guest's code yet (under TCG),
    /// so this first run pays for translating the path a real identity takes, before it is
    /// needed; [`take_identity`] gives it its real one once it runs again.
    pub async fn warm(&self) -> Result<Machine, VmError> {
        let machine = self.running().await?;
        take_identity(&machine, "aido-warming", "0").await?;
        machine.pause().await?;
        Ok(machine)
    }

    /// A new QEMU restored from the template's state, running.
    async fn running(&self) -> Result<Machine, VmError> {
        let machine = Machine::restore(&self.spec, &self.state).await?;
        machine.resume().await?;
        Ok(machine)
    }
}

/// Entropy as the hex a guest's shell takes.
pub(crate) fn hex(entropy: &[u8; 32]) -> String {
    entropy.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a template is made from, hashed: the name of its directory. Without `versions`, the
/// files' sizes and mtimes are left out: the image's slot, shared by every build of it.
fn key(base: &MachineSpec, versions: bool) -> Result<String, VmError> {
    let mut files = Vec::new();
    for path in [Some(&base.kernel), Some(&base.initrd), base.disk.as_ref()]
        .into_iter()
        .flatten()
    {
        if !versions {
            files.push(serde_json::json!([path]));
            continue;
        }
        let meta = std::fs::metadata(path).map_err(io("stat", path))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        files.push(serde_json::json!([path, meta.len(), mtime.to_string()]));
    }
    let what = serde_json::json!({
        "version": TEMPLATE_VERSION,
        "files": files,
        "memory_mb": base.memory_mb,
        "append": base.append,
        "ready_marker": base.ready_marker,
        "accel": base.accel.name(),
        "tcg_tb_mb": base.tcg_tb_mb,
    });
    let hash = blake3::hash(what.to_string().as_bytes()).to_hex();
    Ok(format!(
        "{}-{}mb-{}",
        base.accel.name(),
        base.memory_mb,
        &hash[..16]
    ))
}

/// Boot `base`, bring it to its prompt, prepare its serial shell, and save it into `dir`.
async fn make(base: &MachineSpec, dir: &Path, slot: &str) -> Result<(), VmError> {
    let disk = dir.join("template.qcow2");
    let state = dir.join("template.state");
    // The template zeroes what its kernel frees (boot scratch, init memory, caches), so machines
    // restored from its state hold only the pages in use.
    let mut template = base.clone();
    template.append.push_str(" init_on_free=1");
    let machine = Machine::boot(&template).await?;
    let saved = async {
        // The serial shell is up once it has printed its prompt (the guest says it is ready
        // before its shells start, and what is sent before a shell reads is lost).
        wait_serial(&machine, "template", "AIDO-PROMPT# ", base.boot_timeout_ms).await?;
        machine.serial_write(TEMPLATE_PREP).await?;
        wait_serial(
            &machine,
            "template",
            "AIDO-TEMPLATE-READY",
            base.boot_timeout_ms,
        )
        .await?;
        // A text screen is read exactly: save it at its prompt, not before.
        if machine.in_text_mode().await? {
            machine.wait_for_text("# ", base.boot_timeout_ms).await?;
        }
        machine.save_state(&state).await?;
        // The disk as it was at the save, now frozen.
        machine.copy_disk(&disk)?;
        Ok::<_, VmError>(())
    }
    .await;
    machine.shutdown().await;
    saved?;
    let mut perms = std::fs::metadata(&disk)
        .map_err(io("stat", &disk))?
        .permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&disk, perms).map_err(io("chmod", &disk))?;
    let lock = dir.join("template.lock");
    std::fs::write(&lock, b"").map_err(io("write", &lock))?;
    let done = dir.join("template.json");
    std::fs::write(
        &done,
        serde_json::json!({"version": TEMPLATE_VERSION, "slot": slot, "base": base.disk,
                           "kernel": base.kernel, "memory_mb": base.memory_mb, "append": base.append})
        .to_string(),
    )
    .map_err(io("write", &done))
}

/// Take the shared lock that says this process uses the template in `dir`.
fn in_use(dir: &Path) -> Result<std::fs::File, VmError> {
    let path = dir.join("template.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io("open", &path))?;
    file.try_lock_shared().map_err(|e| {
        VmError::io(
            "lock",
            &path,
            std::io::Error::other(format!("the template is being removed: {e}")),
        )
    })?;
    Ok(file)
}

/// Remove the templates under `root` of image slot `slot` other than `keep` (older builds of
/// the same image) that no process holds. Best effort: what cannot be removed stays.
fn prune(root: &Path, keep: &Path, slot: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if dir == keep || hidden {
            continue;
        }
        let same_slot = std::fs::read_to_string(dir.join("template.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|t| t["slot"] == slot);
        if !same_slot {
            continue;
        }
        let Ok(lock) = std::fs::File::open(dir.join("template.lock")) else {
            continue;
        };
        // Held by no process: nothing runs from it or will.
        if lock.try_lock().is_ok() {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!("removed the older template {}", dir.display()),
                Err(e) => tracing::warn!("cannot remove the older template {}: {e}", dir.display()),
            }
        }
    }
}

/// Have a running machine restored from a template take identity `id` and entropy `seed` (hex)
/// through `i` (see [`TEMPLATE_PREP`]) and wait until it says so.
pub(crate) async fn take_identity(machine: &Machine, id: &str, seed: &str) -> Result<(), VmError> {
    machine.serial_write(&format!("i {id} {seed}")).await?;
    wait_serial(
        machine,
        "identity",
        &format!("AIDO-IDENTITY-{id}"),
        IDENTITY_TIMEOUT_S * 1000,
    )
    .await
}

/// Wait until the guest prints `marker` on its serial port.
async fn wait_serial(
    machine: &Machine,
    step: &'static str,
    marker: &str,
    timeout_ms: u64,
) -> Result<(), VmError> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    while !machine.serial().contains(marker) {
        if Instant::now() > deadline {
            return Err(VmError::Qmp {
                command: step,
                message: format!("the guest did not print {marker} on its serial port"),
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A template is named by what it is made from: the same inputs, the same name; another
    /// memory size, command line or a rebuilt file, another template.
    #[test]
    fn the_key_follows_what_the_template_is_made_from() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["vmlinuz", "initrd.img", "disk.qcow2"] {
            std::fs::write(dir.path().join(f), f).unwrap();
        }
        let spec = MachineSpec::text_console(dir.path());
        let k = key(&spec, true).unwrap();
        assert_eq!(k, key(&spec, true).unwrap());
        assert!(
            k.starts_with(&format!("{}-128mb-", spec.accel.name())),
            "{k}"
        );

        let mut bigger = spec.clone();
        bigger.memory_mb = 256;
        assert_ne!(key(&bigger, true).unwrap(), k);
        let mut other = spec.clone();
        other.append.push_str(" loglevel=7");
        assert_ne!(key(&other, true).unwrap(), k);

        // A rebuilt image (new contents, new mtime) is another template.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("initrd.img"), "rebuilt").unwrap();
        assert_ne!(key(&spec, true).unwrap(), k);

        // The slot is the same for every build of the image.
        let slot = key(&spec, false).unwrap();
        assert_ne!(slot, k);
        std::fs::write(dir.path().join("initrd.img"), "rebuilt again").unwrap();
        assert_eq!(key(&spec, false).unwrap(), slot);

        std::fs::remove_file(dir.path().join("vmlinuz")).unwrap();
        assert_eq!(key(&spec, true).unwrap_err().code(), "vm_io_failed");
    }

    /// Making a template removes older builds of the same slot that no process holds, and
    /// nothing else: not one in use, not another slot, not a template being made.
    #[test]
    fn older_templates_of_the_slot_that_nobody_holds_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let template = |name: &str, slot: &str| {
            let dir = root.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("template.json"),
                serde_json::json!({"version": TEMPLATE_VERSION, "slot": slot}).to_string(),
            )
            .unwrap();
            std::fs::write(dir.join("template.lock"), b"").unwrap();
            std::fs::write(dir.join("template.state"), b"state").unwrap();
            dir
        };
        let old = template("old", "s");
        let held = template("held", "s");
        let other = template("other", "t");
        let making = template(".making-1", "s");
        let keep = template("new", "s");
        let holder = in_use(&held).unwrap();
        prune(root.path(), &keep, "s");
        assert!(!old.exists(), "an older build nobody holds goes");
        for dir in [&held, &other, &making, &keep] {
            assert!(
                dir.join("template.state").exists(),
                "{} stays",
                dir.display()
            );
        }
        // Once nobody holds it, it goes the next time.
        drop(holder);
        prune(root.path(), &keep, "s");
        assert!(!held.exists());
        // A template being removed cannot be taken.
        let lock = std::fs::File::open(keep.join("template.lock")).unwrap();
        lock.try_lock().unwrap();
        assert_eq!(in_use(&keep).unwrap_err().code(), "vm_io_failed");
    }
}
