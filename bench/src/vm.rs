//! Whole machines (the `aido-vm` crate) on this machine, in one run: boot to a shell prompt,
//! a start from the image's template (what `vm_start` does), snapshot revert (HMP `savevm` once, then `loadvm`; and the migration-file path: a new QEMU
//! restored from a saved state, then `cont`), pool acquire, QEMU's resident memory per body,
//! and `find_text` on a text-mode screen (the VGA buffer) and on a framebuffer (OCR).
//!
//! The guests are built by `vm/guest/build-image` into a temp dir (both variants), every QEMU
//! is stopped on the way out (`shutdown`; `Machine`'s Drop kills it on error paths), and the
//! section checks that none of its QEMU processes is left.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aido_vm::{Accel, Machine, MachineSpec, Ocr, Pool, Template};
use anyhow::{Context, Result, bail, ensure};

use crate::harness::median;
use crate::record::{Record, Section, Unit};
use crate::render::{format_bytes, format_duration};
use crate::stop;

/// How long a guest has to show its prompt or a line it was asked to print.
const TEXT_TIMEOUT_MS: u64 = 60_000;
/// An idle body is left alone this long before its memory is read.
const SETTLE: Duration = Duration::from_secs(2);
/// The snapshot name `savevm` takes.
pub const SNAPSHOT: &str = "aido-bench";
/// The line searched on the framebuffer screen (the OCR test's line).
const FB_NEEDLE: &str = "dogs near the river";

/// How the section runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// `vm/guest/build-image`.
    pub build_image: PathBuf,
    /// Boots timed (the last one is kept for the text-mode parts).
    pub boots: usize,
    /// `loadvm` reverts, and migration-file restores, timed.
    pub reverts: usize,
    /// Pool acquisitions timed.
    pub acquisitions: usize,
    /// `find_text` calls timed per screen.
    pub finds: usize,
    /// Clones the pool keeps warm.
    pub pool_size: usize,
}

/// A measurement, or why there is none.
pub type Outcome<T> = std::result::Result<T, String>;

/// Boot to prompt, text console.
#[derive(Clone, Debug, PartialEq)]
pub struct Boot {
    /// The accelerator.
    pub accel: String,
    /// `Machine::booted_in`: QEMU's exec until the guest's ready line on its serial port.
    pub ready: Vec<Duration>,
    /// From the `Machine::boot` call until `# ` is on the VGA text screen.
    pub prompt: Vec<Duration>,
}

/// `savevm` once, `loadvm` after each change.
#[derive(Clone, Debug, PartialEq)]
pub struct Loadvm {
    /// The accelerator.
    pub accel: String,
    /// The one `savevm`.
    pub save: Duration,
    /// Each `loadvm`.
    pub load: Vec<Duration>,
}

/// The migration-file path: the state saved once, a new QEMU restored from it each time.
#[derive(Clone, Debug, PartialEq)]
pub struct Migration {
    /// The accelerator.
    pub accel: String,
    /// `Machine::save_state`.
    pub save: Duration,
    /// The state file's size.
    pub state_bytes: u64,
    /// `Machine::restore`: a new QEMU, its QMP socket, `migrate-incoming` until completed.
    pub restore: Vec<Duration>,
    /// `Machine::resume` (`cont`) after it.
    pub resume: Vec<Duration>,
    /// Both.
    pub total: Vec<Duration>,
}

/// Acquisitions from a warm pool.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolRun {
    /// The accelerator.
    pub accel: String,
    /// Clones kept warm.
    pub size: usize,
    /// `Pool::open`, first time: the template's boot, prompt and save, and the warm clones.
    pub open: Duration,
    /// The Duration `Pool::acquire` returns: until the clone runs (a warm clone popped and
    /// `cont`).
    pub handout: Vec<Duration>,
    /// The whole `Pool::acquire` call (that, then the identity line written to the serial
    /// console and waited for).
    pub wall: Vec<Duration>,
    /// `Pool::refill` after releasing the clone (one restore).
    pub refill: Vec<Duration>,
}

/// `vm_start`'s path: the image's template made once (a boot, the prompt, the save), then
/// machines started from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    /// The accelerator.
    pub accel: String,
    /// `Template::ensure` the first time: it boots and saves the template.
    pub make: Duration,
    /// Each `Template::start`: a new QEMU restored from the state, `cont`, and the new identity
    /// written to the guest's serial shell and printed back.
    pub start: Vec<Duration>,
}

/// The framebuffer guest's boot.
#[derive(Clone, Debug, PartialEq)]
pub struct FbBoot {
    /// The accelerator.
    pub accel: String,
    /// `Machine::booted_in`.
    pub ready: Duration,
    /// From the `Machine::boot` call until OCR reads the shell's banner (`BusyBox`).
    pub banner: Duration,
}

/// Which body's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// The text-console guest as `vm_start` gives it: restored from the image's template,
    /// idle at its prompt.
    StartedText,
    /// A clone acquired from the pool (restored from the template's state), running.
    PoolClone,
    /// The framebuffer guest as `vm_start` gives it, idle at its prompt.
    StartedFramebuffer,
    /// The text-console guest, cold-booted (`vm_start {"cold_boot": true}`, and the boot that
    /// makes a template) and idle at its prompt.
    TextIdle,
    /// The framebuffer guest, cold-booted, idle at its prompt.
    Framebuffer,
}

impl Body {
    /// The name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Self::StartedText => {
                "text-console guest as `vm_start` gives it (restored from the image's template), idle at its prompt"
            }
            Self::PoolClone => "pool clone (restored from the template's state), running",
            Self::StartedFramebuffer => {
                "framebuffer guest (1280x800) as `vm_start` gives it (restored from its template), idle at its prompt"
            }
            Self::TextIdle => {
                "text-console guest, cold-booted (`cold_boot: true`; how a template is made), idle at its prompt"
            }
            Self::Framebuffer => "framebuffer guest (1280x800), cold-booted, idle at its prompt",
        }
    }

    /// The target's id, as printed by `aido-bench`.
    pub fn id(self) -> &'static str {
        match self {
            Self::StartedText => "vm_rss_vm_start_text",
            Self::PoolClone => "vm_rss_pool_clone",
            Self::StartedFramebuffer => "vm_rss_vm_start_framebuffer",
            Self::TextIdle => "vm_rss_cold_boot_text",
            Self::Framebuffer => "vm_rss_cold_boot_framebuffer",
        }
    }
}

/// One QEMU's memory, from /proc/PID/status and /proc/PID/smaps.
#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    /// The accelerator.
    pub accel: String,
    /// Guest memory, MiB.
    pub guest_mb: u32,
    /// VmRSS, bytes.
    pub rss: u64,
    /// VmHWM (peak RSS), bytes.
    pub hwm: u64,
    /// RssFile (the mapped QEMU binary and libraries), bytes.
    pub file: u64,
    /// Resident bytes of the guest's RAM (the anonymous mapping of exactly the guest's memory
    /// size), when there is one such mapping.
    pub guest_ram: Option<u64>,
    /// Under TCG: resident bytes of the translation buffer (QEMU's anonymous executable
    /// mappings; aido sizes the buffer with `MachineSpec::tcg_tb_mb`, QEMU's default is
    /// 1 GiB).
    pub code_buffer: Option<u64>,
    /// Anonymous memory in transparent huge pages (AnonHugePages over all mappings), bytes.
    pub huge: u64,
}

/// One mapping of /proc/PID/smaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    size_kb: u64,
    rss_kb: u64,
    huge_kb: u64,
    anonymous: bool,
    executable: bool,
}

/// The mappings of a /proc/PID/smaps text.
fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        if !first.ends_with(':') && first.contains('-') {
            // "start-end perms offset dev inode [path]"
            let executable = words.next().is_some_and(|perms| perms.contains('x'));
            out.push(Mapping {
                size_kb: 0,
                rss_kb: 0,
                huge_kb: 0,
                executable,
                anonymous: words.nth(3).is_none(),
            });
        } else if let Some(m) = out.last_mut() {
            if let Some(kb) = status_kb(line, "Size") {
                m.size_kb = kb;
            } else if let Some(kb) = status_kb(line, "Rss") {
                m.rss_kb = kb;
            } else if let Some(kb) = status_kb(line, "AnonHugePages") {
                m.huge_kb = kb;
            }
        }
    }
    out
}

/// (guest RAM, translation buffer) resident KiB, from the mappings.
fn breakdown(maps: &[Mapping], guest_mb: u32, tcg: bool) -> (Option<u64>, Option<u64>) {
    let guest_kb = u64::from(guest_mb) * 1024;
    let ram: Vec<&Mapping> = maps
        .iter()
        .filter(|m| m.anonymous && m.size_kb == guest_kb)
        .collect();
    let ram = match ram.as_slice() {
        [one] => Some(one.rss_kb),
        _ => None,
    };
    // The translation buffer is the only anonymous memory QEMU maps executable.
    let code = tcg
        .then(|| {
            let exec: Vec<&Mapping> = maps
                .iter()
                .filter(|m| m.anonymous && m.executable && m.size_kb != guest_kb)
                .collect();
            (!exec.is_empty()).then(|| exec.iter().map(|m| m.rss_kb).sum())
        })
        .flatten();
    (ram, code)
}

/// One body's memory row.
#[derive(Clone, Debug, PartialEq)]
pub struct Rss {
    /// Which.
    pub body: Body,
    /// What was read.
    pub outcome: Outcome<Memory>,
}

/// Which screen `find_text` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    /// VGA text mode: the text buffer, exactly.
    Text,
    /// A 1280x800 framebuffer: OCR.
    Framebuffer,
}

impl Screen {
    /// The name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Self::Text => "text-mode screen (VGA text buffer, exact)",
            Self::Framebuffer => "framebuffer screen (tesseract OCR, fuzzy)",
        }
    }
}

/// `find_text` on one screen, and its parts.
#[derive(Clone, Debug, PartialEq)]
pub struct FindTimes {
    /// The accelerator.
    pub accel: String,
    /// The needle.
    pub needle: String,
    /// The screen in pixels.
    pub size: (u32, u32),
    /// What read it (`vga_text`, `ocr`).
    pub source: String,
    /// Matches the first call returned, and the best one's similarity.
    pub matches: usize,
    /// See [`FindTimes::matches`].
    pub similarity: f64,
    /// The first call (not in [`FindTimes::times`]).
    pub first: Duration,
    /// Each timed call after it.
    pub times: Vec<Duration>,
    /// `screenshot_png` alone (QEMU's screendump).
    pub screenshot: Vec<Duration>,
    /// The reader alone: `text_screen` (text mode) or `Ocr::words` on one screenshot.
    pub read: Vec<Duration>,
    /// Words OCR read on the screen (framebuffer only).
    pub words: Option<usize>,
}

/// `find_text` on one screen.
#[derive(Clone, Debug, PartialEq)]
pub struct Find {
    /// Which.
    pub screen: Screen,
    /// What was measured.
    pub outcome: Outcome<FindTimes>,
}

/// Everything the section measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Results {
    /// The accelerator the machines were started with.
    pub accel: String,
    /// Why that one.
    pub accel_why: String,
    /// `qemu-system-x86_64 --version`, first line.
    pub qemu: String,
    /// The guest's kernel package and busybox version (the image manifest).
    pub guest: String,
    /// Guest memory, MiB.
    pub guest_mb: u32,
    /// The host's transparent huge page mode (`always`, `madvise`, `never`).
    pub thp: String,
    /// `OMP_THREAD_LIMIT` as the OCR helper had it (tesseract reads it at start; the helper
    /// gets this process's value, or 1).
    pub omp_thread_limit: Option<String>,
    /// The image builds: text console, framebuffer.
    pub builds: Vec<(String, Duration)>,
    /// The counts asked for.
    pub options: Counts,
    /// Boot to prompt.
    pub boot: Outcome<Boot>,
    /// Starts from the image's template (`vm_start`).
    pub start: Outcome<Start>,
    /// `savevm` / `loadvm`.
    pub loadvm: Outcome<Loadvm>,
    /// The migration-file restore.
    pub migration: Outcome<Migration>,
    /// The pool.
    pub pool: Outcome<PoolRun>,
    /// The framebuffer guest's boot.
    pub fb_boot: Outcome<FbBoot>,
    /// One per body.
    pub rss: Vec<Rss>,
    /// One per screen.
    pub find: Vec<Find>,
    /// QEMU processes of this run still alive at the end (killed then), by pid.
    pub leftover: Vec<u32>,
    /// The whole section.
    pub took: Duration,
}

/// The counts a run was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// See [`Options::boots`].
    pub boots: usize,
    /// See [`Options::reverts`].
    pub reverts: usize,
    /// See [`Options::acquisitions`].
    pub acquisitions: usize,
    /// See [`Options::finds`].
    pub finds: usize,
    /// See [`Options::pool_size`].
    pub pool_size: usize,
}

/// The faster revert path, by median: (its name, its median).
pub fn faster_revert(
    loadvm: &Outcome<Loadvm>,
    migration: &Outcome<Migration>,
) -> Option<(&'static str, Duration)> {
    let a = loadvm.as_ref().ok().map(|l| ("`loadvm`", median(&l.load)));
    let b = migration
        .as_ref()
        .ok()
        .map(|m| ("the migration-file restore", median(&m.total)));
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.1 < a.1 { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn outcome<T>(r: Result<T>) -> Outcome<T> {
    r.map_err(|e| format!("{e:#}"))
}

/// A run that also read a body's memory, as two outcomes (a failed run fails both).
fn with_memory<T>(r: Result<(T, Outcome<Memory>)>) -> (Outcome<T>, Outcome<Memory>) {
    match r {
        Ok((run, memory)) => (Ok(run), memory),
        Err(e) => {
            let why = format!("{e:#}");
            (Err(why.clone()), Err(why))
        }
    }
}

/// Runs the section on a multi-threaded runtime of its own (2 workers, as the VM tests do).
pub fn run_blocking(temp: &Path, options: &Options) -> Result<Results> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the VM section's runtime")?;
    runtime.block_on(run(temp, options))
}

/// Builds the guests in a temp dir under `temp`, measures, stops every QEMU.
#[allow(clippy::too_many_lines)]
pub async fn run(temp: &Path, options: &Options) -> Result<Results> {
    let started = Instant::now();
    let root = tempfile::Builder::new()
        .prefix("aido-bench-vm-")
        .tempdir_in(temp)
        .with_context(|| format!("creating a temp dir in {}", temp.display()))?;
    let text_dir = root.path().join("guest-text");
    let fb_dir = root.path().join("guest-fb");
    let mut builds = Vec::new();
    for (label, dir, framebuffer) in [
        ("text console", &text_dir, false),
        ("framebuffer", &fb_dir, true),
    ] {
        eprintln!("aido-bench: building the {label} guest image");
        builds.push((
            label.to_owned(),
            build_image(&options.build_image, dir, framebuffer).await?,
        ));
        stop::check()?;
    }
    let ocr = outcome(Ocr::start().context("starting tesseract"));
    let mut spec = MachineSpec::text_console(&text_dir);
    let mut accel_why = accel_reason(spec.accel, Path::new("/dev/kvm").exists(), &kvm_modules());

    // The text-console guest: boots, its memory, find_text, the migration file, savevm.
    eprintln!(
        "aido-bench: booting the text-console guest {} times ({})",
        options.boots.max(1),
        spec.accel.name()
    );
    let booted = boots(&mut spec, options.boots.max(1), &mut accel_why).await;
    stop::check()?;
    let work = root.path().join("work");
    std::fs::create_dir_all(&work)?;
    let (boot, mut rss, text_find, migration, loadvm) = match booted {
        Ok((boot, machine)) => {
            let memory = outcome(memory(&machine, spec.memory_mb).await);
            stop::check()?;
            let text_find = match &ocr {
                Ok(ocr) => outcome(find_text_mode(&machine, ocr, options.finds.max(1)).await),
                Err(e) => Err(format!("no OCR engine, so no `find_text`: {e}")),
            };
            stop::check()?;
            eprintln!("aido-bench: migration-file restores");
            let migration =
                outcome(migration(&machine, &spec, options.reverts.max(1), &work).await);
            stop::check()?;
            eprintln!("aido-bench: savevm / loadvm");
            let loadvm = outcome(loadvm(&machine, options.reverts.max(1)).await);
            machine.shutdown().await;
            stop::check()?;
            (
                Ok(boot),
                vec![Rss {
                    body: Body::TextIdle,
                    outcome: memory,
                }],
                text_find,
                migration,
                loadvm,
            )
        }
        Err(e) => {
            let why = format!("the text-console guest did not boot: {e:#}");
            (
                Err(why.clone()),
                vec![Rss {
                    body: Body::TextIdle,
                    outcome: Err(why.clone()),
                }],
                Err(why.clone()),
                Err(why.clone()),
                Err(why),
            )
        }
    };

    eprintln!(
        "aido-bench: starts from the template ({} of them, as vm_start does)",
        options.boots.max(1)
    );
    let templates = root.path().join("templates");
    let (start, started_memory) =
        with_memory(starts(&spec, &templates, options.boots.max(1)).await);
    rss.insert(
        0,
        Rss {
            body: Body::StartedText,
            outcome: started_memory,
        },
    );
    stop::check()?;

    eprintln!(
        "aido-bench: pool of {} ({} acquisitions)",
        options.pool_size,
        options.acquisitions.max(1)
    );
    let (pool, clone_memory) = with_memory(
        pool_run(
            &spec,
            &root.path().join("pool"),
            options.pool_size.max(1),
            options.acquisitions.max(1),
        )
        .await,
    );
    rss.insert(
        1,
        Rss {
            body: Body::PoolClone,
            outcome: clone_memory,
        },
    );
    stop::check()?;

    eprintln!("aido-bench: the framebuffer guest");
    let mut fb_spec = MachineSpec::framebuffer(&fb_dir);
    fb_spec.accel = spec.accel;
    let (fb_boot, fb_memory, fb_find) =
        framebuffer(&fb_spec, ocr.as_ref(), options.finds.max(1)).await;
    rss.push(Rss {
        body: Body::Framebuffer,
        outcome: fb_memory,
    });
    stop::check()?;
    eprintln!("aido-bench: the framebuffer guest from its template");
    rss.insert(
        2,
        Rss {
            body: Body::StartedFramebuffer,
            outcome: outcome(fb_started_memory(&fb_spec, &templates).await),
        },
    );
    drop(ocr);

    let leftover = reap_leftovers().await;
    let guest = manifest(&text_dir);
    drop(root);
    stop::check()?;
    Ok(Results {
        accel: spec.accel.name().to_owned(),
        accel_why,
        qemu: first_line("qemu-system-x86_64", &["--version"]),
        guest,
        guest_mb: spec.memory_mb,
        thp: std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .ok()
            .and_then(|t| selected(&t))
            .unwrap_or_else(|| "unknown".into()),
        omp_thread_limit: Some(std::env::var("OMP_THREAD_LIMIT").unwrap_or_else(|_| "1".into())),
        builds,
        options: Counts {
            boots: options.boots.max(1),
            reverts: options.reverts.max(1),
            acquisitions: options.acquisitions.max(1),
            finds: options.finds.max(1),
            pool_size: options.pool_size.max(1),
        },
        boot,
        start,
        loadvm,
        migration,
        pool,
        fb_boot,
        rss,
        find: vec![
            Find {
                screen: Screen::Text,
                outcome: text_find,
            },
            Find {
                screen: Screen::Framebuffer,
                outcome: fb_find,
            },
        ],
        leftover,
        took: started.elapsed(),
    })
}

async fn build_image(script: &Path, out: &Path, framebuffer: bool) -> Result<Duration> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(script);
    command.arg(out).kill_on_drop(true);
    if framebuffer {
        command.arg("--framebuffer");
    }
    let output = command
        .output()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        bail!(
            "{} {} failed: {}",
            script.display(),
            out.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        );
    }
    Ok(started.elapsed())
}

/// Boot and wait for the prompt on the VGA console; the time from the call.
async fn boot_to_prompt(spec: &MachineSpec) -> Result<(Machine, Duration)> {
    let started = Instant::now();
    let machine = Machine::boot(spec).await.context("boot")?;
    machine
        .wait_for_text("# ", TEXT_TIMEOUT_MS)
        .await
        .context("waiting for the prompt on the VGA console")?;
    Ok((machine, started.elapsed()))
}

/// `n` boots, one at a time; the last machine is kept. A failed first KVM boot falls back to
/// TCG, as aido does.
async fn boots(
    spec: &mut MachineSpec,
    n: usize,
    accel_why: &mut String,
) -> Result<(Boot, Machine)> {
    let mut ready = Vec::with_capacity(n);
    let mut prompt = Vec::with_capacity(n);
    let mut kept = None;
    for i in 0..n {
        stop::check()?;
        let (machine, took) = match boot_to_prompt(spec).await {
            Ok(booted) => booted,
            Err(e) if i == 0 && spec.accel == Accel::Kvm => {
                accel_why.push_str(&format!(
                    "; the first KVM boot failed ({e:#}), so every machine ran on TCG"
                ));
                spec.accel = Accel::Tcg;
                boot_to_prompt(spec).await?
            }
            Err(e) => return Err(e),
        };
        eprintln!(
            "aido-bench:   boot {}: ready in {:?}, prompt in {:?}",
            i + 1,
            machine.booted_in(),
            took
        );
        ready.push(machine.booted_in());
        prompt.push(took);
        if i + 1 < n {
            machine.shutdown().await;
        } else {
            kept = Some(machine);
        }
    }
    let machine = kept.context("no boot")?;
    Ok((
        Boot {
            accel: machine.accel().name().to_owned(),
            ready,
            prompt,
        },
        machine,
    ))
}

/// The machine's QEMU memory after it has been left alone for [`SETTLE`].
async fn memory(machine: &Machine, guest_mb: u32) -> Result<Memory> {
    tokio::time::sleep(SETTLE).await;
    let pid = machine.pid().context("QEMU has no pid (it exited)")?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    ensure!(
        comm.starts_with("qemu-system"),
        "pid {pid} is {:?}, not QEMU",
        comm.trim()
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let get = |key: &str| status_kb(&status, key).map(|kb| kb * 1024);
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let maps = mappings(&smaps);
    let (guest_ram, code_buffer) = breakdown(&maps, guest_mb, machine.accel() == Accel::Tcg);
    Ok(Memory {
        accel: machine.accel().name().to_owned(),
        guest_mb,
        rss: get("VmRSS").context("no VmRSS in /proc/PID/status")?,
        hwm: get("VmHWM").unwrap_or(0),
        file: get("RssFile").unwrap_or(0),
        guest_ram: guest_ram.map(|kb| kb * 1024),
        code_buffer: code_buffer.map(|kb| kb * 1024),
        huge: maps.iter().map(|m| m.huge_kb * 1024).sum(),
    })
}

/// A `Key:   123 kB` value of /proc/PID/status, in kB.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().trim_end_matches("kB").trim().parse().ok())?
    })
}

/// Width and height from a PNG's IHDR.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    let w = png.get(16..20)?.try_into().ok()?;
    let h = png.get(20..24)?.try_into().ok()?;
    Some((u32::from_be_bytes(w), u32::from_be_bytes(h)))
}

async fn timed<T, F: std::future::Future<Output = Result<T>>>(f: F) -> Result<(T, Duration)> {
    let started = Instant::now();
    let value = f.await?;
    Ok((value, started.elapsed()))
}

/// `find_text` on the text-mode screen, with its two parts timed alone.
async fn find_text_mode(machine: &Machine, ocr: &Ocr, n: usize) -> Result<FindTimes> {
    let needle = "aido-bench-42";
    machine
        .type_text("clear; echo aido-bench-$((6*7))\n")
        .await?;
    machine.wait_for_text(needle, TEXT_TIMEOUT_MS).await?;
    let (found, first) = timed(async { Ok(machine.find_text(needle, ocr).await?) }).await?;
    let best = found.first().context("find_text did not find the line")?;
    let (matches, similarity, source) = (found.len(), best.similarity, best.source.to_owned());
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let (found, took) = timed(async { Ok(machine.find_text(needle, ocr).await?) }).await?;
        ensure!(!found.is_empty(), "find_text lost the line");
        times.push(took);
    }
    let mut screenshot = Vec::with_capacity(n);
    let mut size = (0, 0);
    for _ in 0..n {
        let (png, took) = timed(async { Ok(machine.screenshot_png().await?) }).await?;
        size = png_size(&png).unwrap_or_default();
        screenshot.push(took);
    }
    let mut read = Vec::with_capacity(n);
    for _ in 0..n {
        let (screen, took) = timed(async { Ok(machine.text_screen().await?) }).await?;
        ensure!(
            !screen.find(needle).is_empty(),
            "the VGA buffer lost the line"
        );
        read.push(took);
    }
    Ok(FindTimes {
        accel: machine.accel().name().to_owned(),
        needle: needle.to_owned(),
        size,
        source,
        matches,
        similarity,
        first,
        times,
        screenshot,
        read,
        words: None,
    })
}

/// Save the running machine's state once, then restore a new QEMU from it `n` times. The
/// source stays paused while the clones run (one QEMU at a time) and runs again afterwards.
async fn migration(
    machine: &Machine,
    spec: &MachineSpec,
    n: usize,
    work: &Path,
) -> Result<Migration> {
    machine.type_text("clear; echo at-save-$((1+1))\n").await?;
    machine.wait_for_text("at-save-2", TEXT_TIMEOUT_MS).await?;
    let state = work.join("machine.state");
    let base = work.join("machine-disk.qcow2");
    let measured = async {
        let ((), save) = timed(async { Ok(machine.save_state(&state).await?) }).await?;
        // The disk as it was at the save (the machine is paused): the clones' base.
        machine.copy_disk(&base)?;
        let state_bytes = std::fs::metadata(&state)?.len();
        let mut clone_spec = spec.clone();
        clone_spec.disk = Some(base.clone());
        let mut restore = Vec::with_capacity(n);
        let mut resume = Vec::with_capacity(n);
        let mut total = Vec::with_capacity(n);
        for i in 0..n {
            stop::check()?;
            let started = Instant::now();
            let clone = Machine::restore(&clone_spec, &state)
                .await
                .context("Machine::restore")?;
            let restored = started.elapsed();
            clone.resume().await?;
            total.push(started.elapsed());
            resume.push(started.elapsed() - restored);
            restore.push(restored);
            let screen = clone.text_screen().await?.text();
            ensure!(
                screen.contains("at-save-2"),
                "the restored clone does not show the saved screen:\n{screen}"
            );
            if i == 0 {
                clone.type_text("echo alive-$((2*4))\n").await?;
                clone
                    .wait_for_text("alive-8", TEXT_TIMEOUT_MS)
                    .await
                    .context("the restored clone does not run")?;
            }
            clone.shutdown().await;
        }
        Ok::<_, anyhow::Error>(Migration {
            accel: machine.accel().name().to_owned(),
            save,
            state_bytes,
            restore,
            resume,
            total,
        })
    }
    .await;
    // The source runs again whatever happened.
    let resumed = machine.resume().await;
    let _ = std::fs::remove_file(&state);
    let _ = std::fs::remove_file(&base);
    let measured = measured?;
    resumed?;
    Ok(measured)
}

/// `savevm` once; then `n` times: change the screen, time `loadvm`, check the screen is back.
async fn loadvm(machine: &Machine, n: usize) -> Result<Loadvm> {
    machine
        .type_text("clear; echo at-snapshot-$((2+3))\n")
        .await?;
    machine
        .wait_for_text("at-snapshot-5", TEXT_TIMEOUT_MS)
        .await?;
    let ((), save) = timed(async { Ok(machine.snapshot_save(SNAPSHOT).await?) }).await?;
    let mut load = Vec::with_capacity(n);
    for i in 0..n {
        stop::check()?;
        machine
            .type_text(&format!("clear; echo changed-$(({i}+100))\n"))
            .await?;
        machine
            .wait_for_text(&format!("changed-{}", i + 100), TEXT_TIMEOUT_MS)
            .await?;
        let ((), took) = timed(async { Ok(machine.snapshot_load(SNAPSHOT).await?) }).await?;
        load.push(took);
        let screen = machine.text_screen().await?.text();
        ensure!(
            screen.contains("at-snapshot-5") && !screen.contains("changed-"),
            "loadvm did not bring the saved screen back:\n{screen}"
        );
    }
    Ok(Loadvm {
        accel: machine.accel().name().to_owned(),
        save,
        load,
    })
}

/// The clone's `AIDO-IDENTITY-...` line on its serial log.
async fn identity(clone: &Machine) -> Result<String> {
    let deadline = Instant::now() + Duration::from_millis(TEXT_TIMEOUT_MS);
    loop {
        let log = clone.serial();
        if let Some(line) = log
            .lines()
            // Not the placeholder a warm clone took before it was handed out.
            .find(|l| l.contains("AIDO-IDENTITY-aido-clone-"))
        {
            return Ok(line.trim().to_owned());
        }
        ensure!(
            Instant::now() < deadline,
            "the clone never printed its identity"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Open a pool (its template made on first use), then `n` times: acquire, check the clone's
/// identity, release it, refill. The first clone's memory is read too.
async fn pool_run(
    spec: &MachineSpec,
    dir: &Path,
    size: usize,
    n: usize,
) -> Result<(PoolRun, Outcome<Memory>)> {
    let (mut pool, open) = timed(async { Ok(Pool::open(spec, dir, size).await?) }).await?;
    let measured = async {
        let mut handout = Vec::with_capacity(n);
        let mut wall = Vec::with_capacity(n);
        let mut refill = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        let mut clone_memory = Err("no clone acquired".to_owned());
        let mut accel = spec.accel.name().to_owned();
        for i in 0..n {
            stop::check()?;
            let entropy = [(i + 1) as u8; 32];
            let started = Instant::now();
            let (clone, took) = pool.acquire(&entropy).await.context("Pool::acquire")?;
            wall.push(started.elapsed());
            handout.push(took);
            accel = clone.accel().name().to_owned();
            let checked = identity(&clone).await;
            if i == 0 && checked.is_ok() {
                clone_memory = outcome(memory(&clone, spec.memory_mb).await);
            }
            pool.release(clone).await;
            ids.push(checked?);
            let ((), took) = timed(async { Ok(pool.refill().await?) }).await?;
            refill.push(took);
        }
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        ensure!(
            distinct.len() == ids.len(),
            "clones shared an identity: {ids:?}"
        );
        Ok::<_, anyhow::Error>((
            PoolRun {
                accel,
                size,
                open,
                handout,
                wall,
                refill,
            },
            clone_memory,
        ))
    }
    .await;
    pool.shutdown().await;
    measured
}

/// Make the template of `spec` under `templates`, then start `n` machines from it one at a time
/// (each checked: at its prompt, with its own hostname). The first one's memory is read.
async fn starts(
    spec: &MachineSpec,
    templates: &Path,
    n: usize,
) -> Result<(Start, Outcome<Memory>)> {
    let (template, make) = timed(async { Ok(Template::ensure(spec, templates).await?) }).await?;
    ensure!(template.made(), "the template was not made by this run");
    let mut start = Vec::with_capacity(n);
    let mut memory_of_first = Err("no machine started".to_owned());
    let mut accel = spec.accel.name().to_owned();
    for i in 0..n {
        stop::check()?;
        let name = format!("bench-{i}");
        let (machine, took) = timed(async {
            template
                .start(&name, &[(i + 1) as u8; 32])
                .await
                .context("Template::start")
        })
        .await?;
        start.push(took);
        accel = machine.accel().name().to_owned();
        let checked = async {
            ensure!(
                !machine.text_screen().await?.find("# ").is_empty(),
                "the started machine is not at its prompt"
            );
            machine.type_text("echo host-$(hostname)\n").await?;
            machine
                .wait_for_text(&format!("host-{name}"), TEXT_TIMEOUT_MS)
                .await
                .context("the started machine does not have its hostname")?;
            Ok(())
        }
        .await;
        if i == 0 && checked.is_ok() {
            memory_of_first = outcome(memory(&machine, spec.memory_mb).await);
        }
        machine.shutdown().await;
        checked?;
    }
    Ok((Start { accel, make, start }, memory_of_first))
}

/// A framebuffer machine started from its template (made now), its memory at its prompt.
async fn fb_started_memory(spec: &MachineSpec, templates: &Path) -> Result<Memory> {
    let template = Template::ensure(spec, templates).await?;
    let machine = template.start("bench-fb", &[9; 32]).await?;
    let measured = memory(&machine, spec.memory_mb).await;
    machine.shutdown().await;
    measured
}

/// The framebuffer guest: its boot, its memory, `find_text` by OCR.
async fn framebuffer(
    spec: &MachineSpec,
    ocr: std::result::Result<&Ocr, &String>,
    n: usize,
) -> (Outcome<FbBoot>, Outcome<Memory>, Outcome<FindTimes>) {
    let started = Instant::now();
    let machine = match Machine::boot(spec).await {
        Ok(m) => m,
        Err(e) => {
            let why = format!("the framebuffer guest did not boot: {e}");
            return (Err(why.clone()), Err(why.clone()), Err(why));
        }
    };
    let ready = machine.booted_in();
    let (boot, find) = match ocr {
        Ok(ocr) => match machine
            .wait_for_screen_text("BusyBox", ocr, TEXT_TIMEOUT_MS)
            .await
        {
            Ok(_) => {
                let boot = Ok(FbBoot {
                    accel: machine.accel().name().to_owned(),
                    ready,
                    banner: started.elapsed(),
                });
                (boot, None)
            }
            Err(e) => {
                let why = format!("OCR never read the shell's banner: {e}");
                (Err(why.clone()), Some(Err(why)))
            }
        },
        Err(e) => (
            Err(format!("no OCR engine to read the banner: {e}")),
            Some(Err(format!("no OCR engine: {e}"))),
        ),
    };
    let memory = outcome(memory(&machine, spec.memory_mb).await);
    let find = match (find, ocr) {
        (Some(done), _) => done,
        (None, Ok(_)) if stop::requested() => Err("interrupted".to_owned()),
        (None, Ok(ocr)) => outcome(find_framebuffer(&machine, ocr, n).await),
        (None, Err(e)) => Err(format!("no OCR engine: {e}")),
    };
    machine.shutdown().await;
    (boot, memory, find)
}

/// `find_text` on the framebuffer screen, with the screendump and the OCR timed alone.
async fn find_framebuffer(machine: &Machine, ocr: &Ocr, n: usize) -> Result<FindTimes> {
    machine.type_text("clear\n").await?;
    for line in [
        "Quick brown fox 0123",
        "jumps over 4567 lazy",
        "dogs near the river",
    ] {
        machine.type_text(&format!("echo '{line}'\n")).await?;
    }
    machine
        .wait_for_screen_text(FB_NEEDLE, ocr, TEXT_TIMEOUT_MS)
        .await?;
    let (found, first) = timed(async { Ok(machine.find_text(FB_NEEDLE, ocr).await?) }).await?;
    let best = found.first().context("find_text did not find the line")?;
    let (matches, similarity, source) = (found.len(), best.similarity, best.source.to_owned());
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let (found, took) = timed(async { Ok(machine.find_text(FB_NEEDLE, ocr).await?) }).await?;
        ensure!(!found.is_empty(), "find_text lost the line");
        times.push(took);
    }
    let mut screenshot = Vec::with_capacity(n);
    let mut png = Vec::new();
    for _ in 0..n {
        let (shot, took) = timed(async { Ok(machine.screenshot_png().await?) }).await?;
        png = shot;
        screenshot.push(took);
    }
    let size = png_size(&png).unwrap_or_default();
    let mut read = Vec::with_capacity(n);
    let mut words = 0;
    for _ in 0..n {
        let engine = ocr.clone();
        let shot = png.clone();
        let (read_words, took) = timed(async move {
            tokio::task::spawn_blocking(move || engine.words(&shot))
                .await
                .context("the OCR task")?
                .map_err(anyhow::Error::from)
        })
        .await?;
        words = read_words.len();
        read.push(took);
    }
    Ok(FindTimes {
        accel: machine.accel().name().to_owned(),
        needle: FB_NEEDLE.to_owned(),
        size,
        source,
        matches,
        similarity,
        first,
        times,
        screenshot,
        read,
        words: Some(words),
    })
}

/// Why the machines run on `accel` here.
fn accel_reason(accel: Accel, dev_kvm: bool, modules: &[String]) -> String {
    let loaded = if modules.is_empty() {
        "none".to_owned()
    } else {
        modules.join(", ")
    };
    match accel {
        Accel::Kvm => format!(
            "KVM: a hardware KVM module is loaded (KVM modules: {loaded}) and /dev/kvm opens"
        ),
        Accel::Tcg => format!(
            "TCG (QEMU's software emulation): aido uses KVM only with `kvm_intel` or `kvm_amd` \
             loaded; here /dev/kvm {} and the KVM modules loaded are: {loaded}",
            if dev_kvm { "exists" } else { "is missing" }
        ),
    }
}

/// The kernel modules named `kvm*` that are loaded.
fn kvm_modules() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/module")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|n| n.starts_with("kvm"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn first_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".into())
}

/// "`linux-image-…`, busybox v…" from the image's manifest.json.
fn manifest(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    format!(
        "Debian kernel `{}`, busybox {}",
        json["kernel_package"].as_str().unwrap_or("unknown"),
        json["busybox"].as_str().unwrap_or("unknown")
    )
}

/// The bracketed choice of a sysfs setting like `always [madvise] never`.
fn selected(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_owned())
}

/// The parent pid from /proc/PID/stat, and whether it is a zombie.
fn stat_parent(stat: &str) -> Option<(u32, bool)> {
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state == "Z"))
}

/// Live QEMU processes this process started.
fn qemu_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            cmd.contains("qemu-system-x86_64")
                && stat_parent(&stat).is_some_and(|(ppid, zombie)| ppid == me && !zombie)
        })
        .collect()
}

/// Waits a few seconds for this run's QEMU processes to be gone, kills (by pid) any that is
/// not, and returns those.
async fn reap_leftovers() -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = qemu_children();
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = qemu_children();
    }
    for pid in &left {
        eprintln!("aido-bench: QEMU {pid} was still running; killing it");
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    left
}

/// The VM section's state in one run.
pub type VmSection = crate::harness::Run<Box<Results>>;

/// The bodies whose memory is judged, in report order.
const BODIES: [Body; 5] = [
    Body::StartedText,
    Body::PoolClone,
    Body::StartedFramebuffer,
    Body::TextIdle,
    Body::Framebuffer,
];

/// A VM row's figure.
enum Fig<'a> {
    Times(&'a [Duration]),
    Once(Duration),
    Bytes(u64),
}

/// A row of a part that may have failed, its description naming its accelerator.
fn row(s: &mut Section, id: &str, what: String, accel: &str, fig: Result<Fig<'_>, &String>) {
    let what = format!("{what} ({accel})");
    let record = match fig {
        Ok(Fig::Times(times)) => s.times(id, None, times),
        Ok(Fig::Once(time)) => s.once(id, None, time),
        Ok(Fig::Bytes(bytes)) => s.value(id, None, Unit::Bytes, bytes as f64),
        Err(why) => return s.failed(id, what, why),
    };
    record.what(what);
}

/// The section's records: boot, snapshot revert, pool acquire, QEMU memory per body and
/// `find_text`, each row naming its accelerator.
pub fn records(section: &VmSection) -> Vec<Record> {
    let mut s = Section::new("vm");
    let r = match section {
        VmSection::Ran(r) => r,
        VmSection::Skipped(why) | VmSection::Failed(why) => {
            let why = match section {
                VmSection::Failed(_) => format!("the section failed before measuring: {why}"),
                _ => why.clone(),
            };
            // The judged rows still stand in the summary, saying why they have no value.
            s.not_run("vm_snapshot_revert", "VM snapshot revert", &why);
            let pool = "VM pool acquire";
            s.not_run(
                "vm_pool_acquire_until_running",
                format!("{pool}, until the clone runs"),
                &why,
            );
            s.not_run(
                "vm_pool_acquire_call",
                format!("{pool}, the whole call"),
                &why,
            );
            for b in BODIES {
                let what = format!("QEMU RSS (VmRSS) per body: {}", b.label());
                s.not_run(b.id(), what, &why);
            }
            s.fact("not_run", why);
            return s.finish();
        }
    };
    boot_rows(r, &mut s);
    pool_rows(r, &mut s);
    let memory = memory_rows(r, &mut s);
    find_rows(r, &mut s);
    facts(r, &mut s);
    let columns = [
        "body",
        "accelerator",
        "guest memory",
        "VmRSS",
        "guest RAM resident",
        "TCG translation buffer resident",
        "the rest",
        "of which RssFile",
        "in transparent huge pages",
        "VmHWM (peak)",
    ];
    s.table("memory", &columns, memory);
    s.finish()
}

/// The rows of the boots, the starts from a template and the reverts.
fn boot_rows(r: &Results, s: &mut Section) {
    let a = &r.accel;
    let mb = r.guest_mb;
    let boot = r.boot.as_ref().map_or(a, |b| &b.accel);
    let fb = r.fb_boot.as_ref().map_or(a, |b| &b.accel);
    let start = r.start.as_ref().map_or(a, |t| &t.accel);
    let faster = faster_revert(&r.loadvm, &r.migration);
    let revert = r
        .loadvm
        .as_ref()
        .map(|l| &l.accel)
        .or_else(|_| r.migration.as_ref().map(|m| &m.accel))
        .unwrap_or(a);
    let both = match (&r.loadvm, &r.migration) {
        (Err(a), Err(b)) => format!("{a}; {b}"),
        _ => "no revert path measured".into(),
    };
    let load = r.loadvm.as_ref().map_or(a, |l| &l.accel);
    let (boot_, fb_, start_) = (r.boot.as_ref(), r.fb_boot.as_ref(), r.start.as_ref());
    let load_ = r.loadvm.as_ref();
    let rows = [
        (
            "vm_boot_text",
            format!(
                "VM boot to a shell prompt: `Machine::boot` call to `# ` on the VGA console, \
                 text console, {mb} MiB guest"
            ),
            boot,
            boot_.map(|b| Fig::Times(&b.prompt)),
        ),
        (
            "vm_boot_text_ready",
            "VM boot, QEMU's exec to the guest's `AIDO-GUEST-READY` on its serial port \
             (`Machine::booted_in`), text console"
                .into(),
            boot,
            boot_.map(|b| Fig::Times(&b.ready)),
        ),
        (
            "vm_boot_framebuffer",
            "VM boot to prompt, framebuffer guest: `Machine::boot` call to the shell's banner \
             `BusyBox` read by OCR (one boot)"
                .into(),
            fb,
            fb_.map(|b| Fig::Once(b.banner)),
        ),
        (
            "vm_boot_framebuffer_ready",
            "VM boot, framebuffer guest, QEMU's exec to the ready line (one boot)".into(),
            fb,
            fb_.map(|b| Fig::Once(b.ready)),
        ),
        (
            "vm_start",
            format!(
                "VM start from the image's template (`vm_start`: `Template::start`, a new QEMU \
                 restored from the saved state, `cont`, until the guest has printed its new \
                 identity), text console, {mb} MiB guest"
            ),
            start,
            start_.map(|t| Fig::Times(&t.start)),
        ),
        (
            "vm_start_template",
            "VM template made once: a boot, the prompt, the save".into(),
            start,
            start_.map(|t| Fig::Once(t.make)),
        ),
        (
            "vm_snapshot_revert",
            format!(
                "VM snapshot revert, the faster of `loadvm` and a migration-file restore{}",
                faster.map_or(String::new(), |(which, _)| format!(": {which}"))
            ),
            revert,
            faster.map(|(_, t)| Fig::Once(t)).ok_or(&both),
        ),
        (
            "vm_savevm",
            format!("VM `savevm {SNAPSHOT}` once (RAM and device state into the disk overlay)"),
            load,
            load_.map(|l| Fig::Once(l.save)),
        ),
        (
            "vm_loadvm",
            "VM snapshot revert: `loadvm` (HMP) of a snapshot `savevm` took once, after \
             changing the screen"
                .into(),
            load,
            load_.map(|l| Fig::Times(&l.load)),
        ),
    ];
    for (id, what, accel, fig) in rows {
        row(s, id, what, accel, fig);
    }
}

/// The rows of the migration-file path and of the pool.
fn pool_rows(r: &Results, s: &mut Section) {
    let a = &r.accel;
    let mig = r.migration.as_ref().map_or(a, |m| &m.accel);
    let state = r.migration.as_ref().map_or(String::new(), |m| {
        format!(" of {}", format_bytes(m.state_bytes))
    });
    let pool = r.pool.as_ref().map_or(a, |p| &p.accel);
    let n = r.options.pool_size;
    let acquire = "VM pool acquire";
    let (mig_, pool_) = (r.migration.as_ref(), r.pool.as_ref());
    let rows = [
        (
            "vm_migration_save",
            format!(
                "VM `Machine::save_state` once (the machine paused, its state written to a \
                 file{state})"
            ),
            mig,
            mig_.map(|m| Fig::Once(m.save)),
        ),
        (
            "vm_migration_restore",
            "VM snapshot revert: migration-file restore (`Machine::restore`: a new QEMU loads \
             the saved state; then `resume`), total"
                .into(),
            mig,
            mig_.map(|m| Fig::Times(&m.total)),
        ),
        (
            "vm_migration_restore_only",
            "VM migration-file restore, `Machine::restore` alone (new QEMU, QMP, incoming \
             migration)"
                .into(),
            mig,
            mig_.map(|m| Fig::Times(&m.restore)),
        ),
        (
            "vm_migration_resume",
            "VM migration-file restore, `resume` alone".into(),
            mig,
            mig_.map(|m| Fig::Times(&m.resume)),
        ),
        (
            "vm_pool_open",
            format!(
                "VM `Pool::open` with {n} warm clones, the first time (the template's boot to \
                 its prompt, its state saved, each clone restored paused)"
            ),
            pool,
            pool_.map(|p| Fig::Once(p.open)),
        ),
        (
            "vm_pool_acquire_until_running",
            format!(
                "{acquire}, until the clone runs (the Duration `Pool::acquire` returns: a \
                 paused clone popped, `cont`), pool of {n}"
            ),
            pool,
            pool_.map(|p| Fig::Times(&p.handout)),
        ),
        (
            "vm_pool_acquire_call",
            format!(
                "{acquire}, the whole `Pool::acquire` call (the clone runs, its identity line \
                 is written to its serial console, the call returns once the guest has printed \
                 it), pool of {n}"
            ),
            pool,
            pool_.map(|p| Fig::Times(&p.wall)),
        ),
        (
            "vm_pool_refill",
            "VM `Pool::refill` after each acquisition (one clone restored)".into(),
            pool,
            pool_.map(|p| Fig::Times(&p.refill)),
        ),
    ];
    for (id, what, accel, fig) in rows {
        row(s, id, what, accel, fig);
    }
}

/// The rows of QEMU's memory per body; the memory table's lines.
fn memory_rows(r: &Results, s: &mut Section) -> Vec<Vec<String>> {
    let (a, mb) = (&r.accel, r.guest_mb);
    let mut memory = Vec::new();
    for x in &r.rss {
        let accel = x.outcome.as_ref().map_or(a, |m| &m.accel);
        let what = format!(
            "QEMU RSS (VmRSS) per body: {}, {mb} MiB guest",
            x.body.label()
        );
        row(
            s,
            x.body.id(),
            what,
            accel,
            x.outcome.as_ref().map(|m| Fig::Bytes(m.rss)),
        );
        let mut line = vec![
            x.body.label().to_owned(),
            accel.clone(),
            format!("{mb} MiB"),
        ];
        match &x.outcome {
            Ok(m) => {
                let rest = m
                    .rss
                    .saturating_sub(m.guest_ram.unwrap_or(0) + m.code_buffer.unwrap_or(0));
                let mb = |v: Option<u64>| v.map_or("—".to_owned(), |b| format_mb(b as f64));
                line.extend([
                    format!("{} ({})", format_mb(m.rss as f64), format_bytes(m.rss)),
                    mb(m.guest_ram),
                    mb(m.code_buffer),
                    mb(Some(rest)),
                    mb(Some(m.file)),
                    mb(Some(m.huge)),
                    mb(Some(m.hwm)),
                ]);
            }
            Err(e) => {
                line.push(format!("failed: {e}"));
                line.resize(10, String::new());
            }
        }
        memory.push(line);
    }
    memory
}

/// The rows of `find_text` and its parts, per screen.
fn find_rows(r: &Results, s: &mut Section) {
    let a = &r.accel;
    for f in &r.find {
        let id = match f.screen {
            Screen::Text => "vm_find_text_text",
            Screen::Framebuffer => "vm_find_text_framebuffer",
        };
        let accel = f.outcome.as_ref().map_or(a, |t| &t.accel);
        let how = f.outcome.as_ref().map_or(String::new(), |t| {
            format!(
                ", {}x{}, needle `{}`, read by {}{}, {} match(es), best similarity {:.2}",
                t.size.0,
                t.size.1,
                t.needle,
                t.source,
                t.words
                    .map_or(String::new(), |w| format!(" ({w} words on the screen)")),
                t.matches,
                t.similarity
            )
        });
        let screen = f.screen.label();
        let o = f.outcome.as_ref();
        row(
            s,
            id,
            format!("VM `find_text` on a {screen}{how}"),
            accel,
            o.map(|t| Fig::Times(&t.times)),
        );
        let what = format!("VM `find_text` on a {screen}, the first call (not in the median)");
        row(
            s,
            &format!("{id}_first"),
            what,
            accel,
            o.map(|t| Fig::Once(t.first)),
        );
        let what = format!("VM the PNG screenshot an agent gets (vm_screenshot) alone, {screen}");
        row(
            s,
            &format!("{id}_screenshot"),
            what,
            accel,
            o.map(|t| Fig::Times(&t.screenshot)),
        );
        let what = format!("VM the reader alone, {screen}");
        row(
            s,
            &format!("{id}_reader"),
            what,
            accel,
            o.map(|t| Fig::Times(&t.read)),
        );
    }
}

/// The facts the section's prose names.
fn facts(r: &Results, s: &mut Section) {
    let builds: Vec<String> = r
        .builds
        .iter()
        .map(|(what, took)| format!("{what} in {}", format_duration(*took)))
        .collect();
    let o = &r.options;
    s.fact("accel", r.accel.clone());
    s.fact("accel_why", r.accel_why.clone());
    s.fact("qemu", r.qemu.clone());
    s.fact("builds", builds.join(", "));
    s.fact("guest", r.guest.clone());
    s.number("guest_mb", f64::from(r.guest_mb));
    let omp = r.omp_thread_limit.as_deref();
    s.fact("omp", omp.map_or("unset".to_owned(), |v| format!("`{v}`")));
    s.number("took", r.took.as_nanos() as f64);
    s.numbers(&[
        ("boots", o.boots as f64),
        ("reverts", o.reverts as f64),
        ("acquisitions", o.acquisitions as f64),
        ("finds", o.finds as f64),
        ("pool_size", o.pool_size as f64),
    ]);
    s.fact("thp", r.thp.clone());
    if r.leftover.is_empty() {
        s.fact("none_left", "");
    } else {
        let pids: Vec<String> = r.leftover.iter().map(u32::to_string).collect();
        s.number("left", r.leftover.len() as f64);
        s.fact("left_pids", pids.join(", "));
    }
    if r.accel == "tcg" {
        s.fact("tcg", "");
    }
}

/// Bytes in decimal megabytes, as the issue states its figures.
fn format_mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_values_in_kb() {
        let status = "Name:\tqemu-system-x86\nVmHWM:\t  210000 kB\nVmRSS:\t  123456 kB\n\
                      RssAnon:\t  100000 kB\nRssFile:\t 23456 kB\n";
        assert_eq!(status_kb(status, "VmRSS"), Some(123_456));
        assert_eq!(status_kb(status, "VmHWM"), Some(210_000));
        assert_eq!(status_kb(status, "RssFile"), Some(23_456));
        assert_eq!(status_kb(status, "RssShmem"), None);
        assert_eq!(status_kb(status, "Name"), None);
    }

    #[test]
    fn smaps_split_guest_ram_from_the_translation_buffer() {
        let smaps = "\
7f2ab7e00000-7f2abfe00000 rw-p 00000000 00:00 0 \n\
Size:             131072 kB\n\
Rss:              104448 kB\n\
AnonHugePages:    102400 kB\n\
VmFlags: rd wr mr mw me ac sd\n\
7f2ac0000000-7f2afffff000 rwxp 00000000 00:00 0\n\
Size:            1048572 kB\n\
Rss:               53248 kB\n\
5573db8c5000-5573dbf3e000 r-xp 00000000 08:01 1234   /usr/bin/qemu-system-x86_64\n\
Size:               6628 kB\n\
Rss:                6108 kB\n\
5574001bb000-5574018e2000 rw-p 00000000 00:00 0   [heap]\n\
Size:              23708 kB\n\
Rss:                5416 kB\n";
        let maps = mappings(smaps);
        assert_eq!(maps.len(), 4);
        assert!(maps[0].anonymous && maps[1].anonymous);
        assert!(!maps[0].executable && maps[1].executable && maps[2].executable);
        assert!(!maps[2].anonymous && !maps[3].anonymous, "a path, [heap]");
        assert_eq!(maps.iter().map(|m| m.huge_kb).sum::<u64>(), 102_400);
        assert_eq!(breakdown(&maps, 128, true), (Some(104_448), Some(53_248)));
        assert_eq!(breakdown(&maps, 128, false), (Some(104_448), None));
        assert_eq!(breakdown(&maps, 256, true), (None, Some(53_248)));
        // aido's 16 MiB buffer beside the 16 MiB VGA RAM: only the executable one is code.
        let small = mappings(
            "7f00-7f01 rw-p 00000000 00:00 0\nSize: 16384 kB\nRss: 2048 kB\n\
             7f02-7f03 rwxp 00000000 00:00 0\nSize: 16380 kB\nRss: 16380 kB\n",
        );
        assert_eq!(breakdown(&small, 128, true), (None, Some(16_380)));
    }

    #[test]
    fn the_selected_sysfs_choice() {
        assert_eq!(
            selected("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected("always madvise never"), None);
    }

    #[test]
    fn stat_parent_survives_odd_names() {
        assert_eq!(
            stat_parent("4242 (qemu (x) y) S 17 4242 4242 0 -1"),
            Some((17, false))
        );
        assert_eq!(stat_parent("4242 (qemu) Z 17 1"), Some((17, true)));
        assert_eq!(stat_parent("garbage"), None);
    }

    #[test]
    fn png_size_reads_the_header() {
        let mut png = vec![0u8; 24];
        png[16..20].copy_from_slice(&1280u32.to_be_bytes());
        png[20..24].copy_from_slice(&800u32.to_be_bytes());
        assert_eq!(png_size(&png), Some((1280, 800)));
        assert_eq!(png_size(&png[..20]), None);
    }

    #[test]
    fn accel_reason_says_why_tcg() {
        let why = accel_reason(Accel::Tcg, true, &["kvm".into(), "kvm_pvm".into()]);
        assert!(why.starts_with("TCG"), "{why}");
        assert!(
            why.contains("/dev/kvm exists and the KVM modules loaded are: kvm, kvm_pvm"),
            "{why}"
        );
        assert!(accel_reason(Accel::Tcg, false, &[]).contains("/dev/kvm is missing"));
        assert!(accel_reason(Accel::Kvm, true, &["kvm_intel".into()]).starts_with("KVM"));
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_faster_revert_path_wins() {
        let loadvm = Ok(Loadvm {
            accel: "tcg".into(),
            save: ms(900),
            load: vec![ms(300), ms(320), ms(310)],
        });
        let migration = Ok(Migration {
            accel: "tcg".into(),
            save: ms(400),
            state_bytes: 1,
            restore: vec![ms(250); 3],
            resume: vec![ms(1); 3],
            total: vec![ms(251); 3],
        });
        assert_eq!(
            faster_revert(&loadvm, &migration),
            Some(("the migration-file restore", ms(251)))
        );
        assert_eq!(
            faster_revert(&loadvm, &Err("no".into())),
            Some(("`loadvm`", ms(310)))
        );
        assert_eq!(faster_revert(&Err("a".into()), &Err("b".into())), None);
    }
}
