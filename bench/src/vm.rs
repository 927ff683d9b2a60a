//! Whole machines (the `aido-vm` crate) on this machine's accelerator: boot to a prompt, a
//! start from the image's template (`vm_start`), snapshot revert (`savevm` once then `loadvm`;
//! a new QEMU restored from a migration file), pool acquire, QEMU's memory per body, and
//! `find_text` on a text-mode screen (the VGA buffer) and a framebuffer (OCR). The guests are
//! built by `vm/guest/build-image` into a temp dir; every QEMU is stopped on the way out and
//! the section checks that none is left. Rows are recorded as measured, put in report order
//! at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aido_vm::{Accel, Machine, MachineSpec, Ocr, Pool, Template};
use anyhow::{Context, Result, bail, ensure};

use crate::harness::{Run, median, status_kb};
use crate::record::{Record, Section, Unit};
use crate::render::{format_bytes, format_duration};
use crate::stop;

/// How long a guest has to show its prompt or a line it was asked to print.
const TEXT_TIMEOUT_MS: u64 = 60_000;
/// An idle body is left alone this long before its memory is read.
const SETTLE: Duration = Duration::from_secs(2);
/// The snapshot name `savevm` takes.
const SNAPSHOT: &str = "aido-bench";
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

/// The rows in report order (they are measured in another).
const ROWS: [&str; 30] = [
    "vm_boot_text",
    "vm_boot_text_ready",
    "vm_boot_framebuffer",
    "vm_boot_framebuffer_ready",
    "vm_start",
    "vm_start_template",
    "vm_snapshot_revert",
    "vm_savevm",
    "vm_loadvm",
    "vm_migration_save",
    "vm_migration_restore",
    "vm_migration_restore_only",
    "vm_migration_resume",
    "vm_pool_open",
    "vm_pool_acquire_until_running",
    "vm_pool_acquire_call",
    "vm_pool_refill",
    "vm_rss_vm_start_text",
    "vm_rss_pool_clone",
    "vm_rss_vm_start_framebuffer",
    "vm_rss_cold_boot_text",
    "vm_rss_cold_boot_framebuffer",
    "vm_find_text_text",
    "vm_find_text_text_first",
    "vm_find_text_text_screenshot",
    "vm_find_text_text_reader",
    "vm_find_text_framebuffer",
    "vm_find_text_framebuffer_first",
    "vm_find_text_framebuffer_screenshot",
    "vm_find_text_framebuffer_reader",
];

/// The bodies whose memory is read, in report order (the memory table's lines): row, label.
const BODIES: [(&str, &str); 5] = [
    (
        "vm_rss_vm_start_text",
        "text-console guest as `vm_start` gives it (restored from the image's template), idle at its prompt",
    ),
    (
        "vm_rss_pool_clone",
        "pool clone (restored from the template's state), running",
    ),
    (
        "vm_rss_vm_start_framebuffer",
        "framebuffer guest (1280x800) as `vm_start` gives it (restored from its template), idle at its prompt",
    ),
    (
        "vm_rss_cold_boot_text",
        "text-console guest, cold-booted (`cold_boot: true`; how a template is made), idle at its prompt",
    ),
    (
        "vm_rss_cold_boot_framebuffer",
        "framebuffer guest (1280x800), cold-booted, idle at its prompt",
    ),
];
const STARTED_TEXT: usize = 0;
const POOL_CLONE: usize = 1;
const STARTED_FB: usize = 2;
const COLD_TEXT: usize = 3;
const COLD_FB: usize = 4;

/// The memory table's columns.
const MEMORY_COLUMNS: [&str; 10] = [
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

/// The screens `find_text` reads: row, label.
const TEXT_SCREEN: (&str, &str) = (
    "vm_find_text_text",
    "text-mode screen (VGA text buffer, exact)",
);
const FB_SCREEN: (&str, &str) = (
    "vm_find_text_framebuffer",
    "framebuffer screen (tesseract OCR, fuzzy)",
);

/// A part's outcome: what it measured, or why not.
type Outcome<T> = std::result::Result<T, String>;

fn outcome<T>(r: Result<T>) -> Outcome<T> {
    r.map_err(|e| format!("{e:#}"))
}

/// One QEMU's memory in bytes, from /proc/PID/status and /proc/PID/smaps.
struct Memory {
    rss: u64,
    hwm: u64,
    /// RssFile: the mapped QEMU binary and libraries.
    file: u64,
    /// The guest's RAM (the anonymous mapping of exactly its size), when there is one such.
    guest_ram: Option<u64>,
    /// Under TCG, the translation buffer (QEMU's anonymous executable mappings).
    code_buffer: Option<u64>,
    /// AnonHugePages over all mappings.
    huge: u64,
}

/// `find_text` on one screen, and its parts.
struct FindTimes {
    needle: String,
    size: (u32, u32),
    /// What read it (`vga_text`, `ocr`), the matches of the first call and the best similarity.
    source: String,
    matches: usize,
    similarity: f64,
    /// The first call (not in `times`).
    first: Duration,
    times: Vec<Duration>,
    /// `screenshot_png` alone.
    screenshot: Vec<Duration>,
    /// The reader alone: `text_screen`, or `Ocr::words` on one screenshot.
    read: Vec<Duration>,
    /// Words OCR read on the screen (framebuffer only).
    words: Option<usize>,
}

/// The migration-file path: the state saved once, a new QEMU restored from it each time.
struct Migration {
    save: Duration,
    state_bytes: u64,
    restore: Vec<Duration>,
    resume: Vec<Duration>,
    total: Vec<Duration>,
}

/// A row's figure.
enum Fig {
    Times(Vec<Duration>),
    Once(Duration),
    Bytes(u64),
}

/// The section's records as it measures them; every row's description names the accelerator.
struct Vm {
    s: Section,
    accel: String,
    mb: u32,
}

impl Vm {
    /// One part's rows (id, description), with their figures in the same order, or each failed
    /// with why.
    fn rows(&mut self, rows: &[(&str, String)], figs: Outcome<Vec<Fig>>) {
        let figs: Vec<Outcome<Fig>> = match figs {
            Ok(figs) => figs.into_iter().map(Ok).collect(),
            Err(why) => rows.iter().map(|_| Err(why.clone())).collect(),
        };
        for ((id, what), fig) in rows.iter().zip(figs) {
            let what = format!("{what} ({})", self.accel);
            let record = match fig {
                Ok(Fig::Times(times)) => self.s.times(id, None, &times),
                Ok(Fig::Once(time)) => self.s.once(id, None, time),
                Ok(Fig::Bytes(bytes)) => self.s.value(id, None, Unit::Bytes, bytes as f64),
                Err(why) => {
                    self.s.failed(id, what, &why);
                    continue;
                }
            };
            record.what(what);
        }
    }

    /// Body `k`'s memory: its row and its line of the memory table.
    fn body(&mut self, k: usize, memory: Outcome<Memory>) {
        let ((id, label), mb) = (BODIES[k], self.mb);
        let mut line = vec![label.to_owned(), self.accel.clone(), format!("{mb} MiB")];
        match &memory {
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
                line.resize(MEMORY_COLUMNS.len(), String::new());
            }
        }
        let cells: Vec<(&str, String)> = MEMORY_COLUMNS.into_iter().zip(line).collect();
        self.s.line("memory", k + 1, &cells);
        let what = format!("QEMU RSS (VmRSS) per body: {label}, {mb} MiB guest");
        self.rows(&[(id, what)], memory.map(|m| vec![Fig::Bytes(m.rss)]));
    }

    /// `find_text` on one screen: the call, the first call, the screenshot and the reader.
    fn find(&mut self, (id, screen): (&str, &str), find: Outcome<FindTimes>) {
        let how = find.as_ref().map_or(String::new(), |t| {
            let words = t
                .words
                .map_or(String::new(), |w| format!(" ({w} words on the screen)"));
            format!(
                ", {}x{}, needle `{}`, read by {}{words}, {} match(es), best similarity {:.2}",
                t.size.0, t.size.1, t.needle, t.source, t.matches, t.similarity
            )
        });
        let rows = [
            (id.to_owned(), format!("VM `find_text` on a {screen}{how}")),
            (
                format!("{id}_first"),
                format!("VM `find_text` on a {screen}, the first call (not in the median)"),
            ),
            (
                format!("{id}_screenshot"),
                format!("VM the PNG screenshot an agent gets (vm_screenshot) alone, {screen}"),
            ),
            (
                format!("{id}_reader"),
                format!("VM the reader alone, {screen}"),
            ),
        ];
        let rows: Vec<(&str, String)> = rows.iter().map(|(i, w)| (i.as_str(), w.clone())).collect();
        let figs = find.map(|t| {
            vec![
                Fig::Times(t.times),
                Fig::Once(t.first),
                Fig::Times(t.screenshot),
                Fig::Times(t.read),
            ]
        });
        self.rows(&rows, figs);
    }

    /// The `savevm`/`loadvm` rows, the migration-file rows, and the faster revert of the two.
    fn reverts(
        &mut self,
        loadvm: Outcome<(Duration, Vec<Duration>)>,
        migration: Outcome<Migration>,
    ) {
        let faster = faster_revert(
            loadvm.as_ref().ok().map(|(_, load)| median(load)),
            migration.as_ref().ok().map(|m| median(&m.total)),
        );
        let both = match (&loadvm, &migration) {
            (Err(a), Err(b)) => format!("{a}; {b}"),
            _ => "no revert path measured".into(),
        };
        let which = faster.map_or(String::new(), |(which, _)| format!(": {which}"));
        let what = format!(
            "VM snapshot revert, the faster of `loadvm` and a migration-file restore{which}"
        );
        let revert = faster.map(|(_, t)| vec![Fig::Once(t)]).ok_or(both);
        self.rows(&[("vm_snapshot_revert", what)], revert);
        let rows = [
            (
                "vm_savevm",
                format!("VM `savevm {SNAPSHOT}` once (RAM and device state into the disk overlay)"),
            ),
            (
                "vm_loadvm",
                "VM snapshot revert: `loadvm` (HMP) of a snapshot `savevm` took once, after \
                 changing the screen"
                    .into(),
            ),
        ];
        let figs = loadvm.map(|(save, load)| vec![Fig::Once(save), Fig::Times(load)]);
        self.rows(&rows, figs);
        let state = migration.as_ref().map_or(String::new(), |m| {
            format!(" of {}", format_bytes(m.state_bytes))
        });
        let rows = [
            (
                "vm_migration_save",
                format!(
                    "VM `Machine::save_state` once (the machine paused, its state written to a \
                     file{state})"
                ),
            ),
            (
                "vm_migration_restore",
                "VM snapshot revert: migration-file restore (`Machine::restore`: a new QEMU loads \
                 the saved state; then `resume`), total"
                    .into(),
            ),
            (
                "vm_migration_restore_only",
                "VM migration-file restore, `Machine::restore` alone (new QEMU, QMP, incoming \
                 migration)"
                    .into(),
            ),
            (
                "vm_migration_resume",
                "VM migration-file restore, `resume` alone".into(),
            ),
        ];
        let figs = migration.map(|m| {
            vec![
                Fig::Once(m.save),
                Fig::Times(m.total),
                Fig::Times(m.restore),
                Fig::Times(m.resume),
            ]
        });
        self.rows(&rows, figs);
    }

    /// The records in report order: facts, the memory table by line, the rows as [`ROWS`].
    fn finish(mut self) -> Vec<Record> {
        let at = |r: &Record| match ROWS.iter().position(|row| *row == r.row) {
            Some(k) => k,
            None => r
                .row
                .split_once(':')
                .and_then(|(_, n)| n.parse().ok())
                .unwrap_or(0),
        };
        self.s.records.sort_by_key(at);
        self.s.finish()
    }
}

/// The faster revert path by median, `loadvm` on a tie: (its name, its median).
fn faster_revert(
    loadvm: Option<Duration>,
    migration: Option<Duration>,
) -> Option<(&'static str, Duration)> {
    let loadvm = loadvm.map(|t| ("`loadvm`", t));
    let migration = migration.map(|t| ("the migration-file restore", t));
    [loadvm, migration]
        .into_iter()
        .flatten()
        .min_by_key(|(_, t)| *t)
}

/// Runs the section on a multi-threaded runtime of its own (2 workers, as the VM tests do).
pub fn run_blocking(temp: &Path, options: &Options) -> Result<Vec<Record>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the VM section's runtime")?;
    runtime.block_on(run(temp, options))
}

/// The section's records: when it did not run, the judged rows say why.
pub fn records(section: Run<Vec<Record>>) -> Vec<Record> {
    let why = match section {
        Run::Ran(records) => return records,
        Run::Failed(why) => format!("the section failed before measuring: {why}"),
        Run::Skipped(why) => why,
    };
    let mut s = Section::new("vm");
    s.not_run("vm_snapshot_revert", "VM snapshot revert", &why);
    let pool = "VM pool acquire";
    let until = format!("{pool}, until the clone runs");
    s.not_run("vm_pool_acquire_until_running", until, &why);
    s.not_run(
        "vm_pool_acquire_call",
        format!("{pool}, the whole call"),
        &why,
    );
    for (id, label) in BODIES {
        s.not_run(id, format!("QEMU RSS (VmRSS) per body: {label}"), &why);
    }
    s.fact("not_run", why);
    s.finish()
}

/// Builds the guests in a temp dir under `temp`, measures, stops every QEMU.
async fn run(temp: &Path, options: &Options) -> Result<Vec<Record>> {
    let started = Instant::now();
    let boots = options.boots.max(1);
    let reverts = options.reverts.max(1);
    let acquisitions = options.acquisitions.max(1);
    let finds = options.finds.max(1);
    let pool_size = options.pool_size.max(1);
    let root = tempfile::Builder::new()
        .prefix("aido-bench-vm-")
        .tempdir_in(temp)
        .with_context(|| format!("creating a temp dir in {}", temp.display()))?;
    let text_dir = root.path().join("guest-text");
    let fb_dir = root.path().join("guest-fb");
    let builds = build_images(&options.build_image, &text_dir, &fb_dir).await?;
    let ocr = outcome(Ocr::start().context("starting tesseract"));
    let mut spec = MachineSpec::text_console(&text_dir);
    let mut accel_why = accel_reason(spec.accel, Path::new("/dev/kvm").exists(), &kvm_modules());

    // The text-console guest: boots, its memory, find_text, the migration file, savevm.
    eprintln!(
        "aido-bench: booting the text-console guest {boots} times ({})",
        spec.accel.name()
    );
    let booted = boot_n(&mut spec, boots, &mut accel_why).await;
    stop::check()?;
    let mb = spec.memory_mb;
    let mut vm = Vm {
        s: Section::new("vm"),
        accel: spec.accel.name().to_owned(),
        mb,
    };
    let work = root.path().join("work");
    std::fs::create_dir_all(&work)?;
    let ocr_ref = ocr.as_ref();
    text_console(&mut vm, booted, ocr_ref, &spec, (reverts, finds), &work).await?;

    eprintln!("aido-bench: starts from the template ({boots} of them, as vm_start does)");
    let templates = root.path().join("templates");
    let rows = [
        (
            "vm_start",
            format!(
                "VM start from the image's template (`vm_start`: `Template::start`, a new QEMU \
                 restored from the saved state, `cont`, until the guest has printed its new \
                 identity), text console, {mb} MiB guest"
            ),
        ),
        (
            "vm_start_template",
            "VM template made once: a boot, the prompt, the save".into(),
        ),
    ];
    let (figs, mem) = with_memory(starts(&spec, &templates, boots).await);
    vm.rows(&rows, figs);
    vm.body(STARTED_TEXT, mem);
    stop::check()?;

    eprintln!("aido-bench: pool of {pool_size} ({acquisitions} acquisitions)");
    let pool = root.path().join("pool");
    let (figs, mem) = with_memory(pool_run(&spec, &pool, pool_size, acquisitions).await);
    vm.rows(&pool_rows(pool_size), figs);
    vm.body(POOL_CLONE, mem);
    stop::check()?;

    eprintln!("aido-bench: the framebuffer guest");
    let mut fb_spec = MachineSpec::framebuffer(&fb_dir);
    fb_spec.accel = spec.accel;
    framebuffer(&mut vm, &fb_spec, ocr.as_ref(), finds).await;
    stop::check()?;
    eprintln!("aido-bench: the framebuffer guest from its template");
    let mem = outcome(fb_started_memory(&fb_spec, &templates).await);
    vm.body(STARTED_FB, mem);
    drop(ocr);

    let leftover = reap_leftovers().await;
    let s = &mut vm.s;
    s.fact("accel", spec.accel.name());
    s.fact("accel_why", accel_why);
    let qemu = crate::machine::version("qemu-system-x86_64");
    s.fact("qemu", qemu.unwrap_or_else(|| "unknown".into()));
    s.fact("builds", builds.join(", "));
    s.fact("guest", manifest(&text_dir));
    s.number("guest_mb", f64::from(mb));
    let omp = std::env::var("OMP_THREAD_LIMIT").unwrap_or_else(|_| "1".into());
    s.fact("omp", format!("`{omp}`"));
    s.number("took", started.elapsed().as_nanos() as f64);
    s.numbers(&[
        ("boots", boots as f64),
        ("reverts", reverts as f64),
        ("acquisitions", acquisitions as f64),
        ("finds", finds as f64),
        ("pool_size", pool_size as f64),
    ]);
    host_facts(s, &leftover, spec.accel);
    drop(root);
    stop::check()?;
    Ok(vm.finish())
}

/// The text-console guest: its boots' rows, then on the last machine its memory, `find_text`,
/// the migration-file restores and `savevm`/`loadvm` (each failed, when it did not boot).
async fn text_console(
    vm: &mut Vm,
    booted: Result<(Vec<Duration>, Vec<Duration>, Machine)>,
    ocr: Result<&Ocr, &String>,
    spec: &MachineSpec,
    (reverts, finds): (usize, usize),
    work: &Path,
) -> Result<()> {
    let boot_rows = [
        (
            "vm_boot_text",
            format!(
                "VM boot to a shell prompt: `Machine::boot` call to `# ` on the VGA console, \
                 text console, {} MiB guest",
                spec.memory_mb
            ),
        ),
        (
            "vm_boot_text_ready",
            "VM boot, QEMU's exec to the guest's `AIDO-GUEST-READY` on its serial port \
             (`Machine::booted_in`), text console"
                .into(),
        ),
    ];
    let (loadvm, migration) = match booted {
        Ok((ready, prompt, machine)) => {
            vm.rows(&boot_rows, Ok(vec![Fig::Times(prompt), Fig::Times(ready)]));
            vm.body(COLD_TEXT, outcome(memory(&machine, spec.memory_mb).await));
            stop::check()?;
            let find = match ocr {
                Ok(ocr) => outcome(find_text_mode(&machine, ocr, finds).await),
                Err(e) => Err(format!("no OCR engine, so no `find_text`: {e}")),
            };
            vm.find(TEXT_SCREEN, find);
            stop::check()?;
            eprintln!("aido-bench: migration-file restores");
            let migration = outcome(migration(&machine, spec, reverts, work).await);
            stop::check()?;
            eprintln!("aido-bench: savevm / loadvm");
            let loadvm = outcome(loadvm(&machine, reverts).await);
            machine.shutdown().await;
            stop::check()?;
            (loadvm, migration)
        }
        Err(e) => {
            let why = format!("the text-console guest did not boot: {e:#}");
            vm.rows(&boot_rows, Err(why.clone()));
            vm.body(COLD_TEXT, Err(why.clone()));
            vm.find(TEXT_SCREEN, Err(why.clone()));
            (Err(why.clone()), Err(why))
        }
    };
    vm.reverts(loadvm, migration);
    Ok(())
}

/// The host's huge page mode, the QEMU processes left (none, or their pids), and whether the
/// machines ran under TCG.
fn host_facts(s: &mut Section, leftover: &[u32], accel: Accel) {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    let thp = thp.ok().and_then(|t| selected(&t));
    s.fact("thp", thp.unwrap_or_else(|| "unknown".into()));
    if leftover.is_empty() {
        s.fact("none_left", "");
    } else {
        let pids: Vec<String> = leftover.iter().map(u32::to_string).collect();
        s.number("left", leftover.len() as f64);
        s.fact("left_pids", pids.join(", "));
    }
    if accel == Accel::Tcg {
        s.fact("tcg", "");
    }
}

/// The pool's rows, a pool of `n`.
fn pool_rows(n: usize) -> [(&'static str, String); 4] {
    let acquire = "VM pool acquire";
    [
        (
            "vm_pool_open",
            format!(
                "VM `Pool::open` with {n} warm clones, the first time (the template's boot to \
                 its prompt, its state saved, each clone restored paused)"
            ),
        ),
        (
            "vm_pool_acquire_until_running",
            format!(
                "{acquire}, until the clone runs (the Duration `Pool::acquire` returns: a \
                 paused clone popped, `cont`), pool of {n}"
            ),
        ),
        (
            "vm_pool_acquire_call",
            format!(
                "{acquire}, the whole `Pool::acquire` call (the clone runs, its identity line \
                 is written to its serial console, the call returns once the guest has printed \
                 it), pool of {n}"
            ),
        ),
        (
            "vm_pool_refill",
            "VM `Pool::refill` after each acquisition (one clone restored)".into(),
        ),
    ]
}

/// A part that also read a body's memory, as two outcomes (a failed part fails both).
fn with_memory<T>(r: Result<(T, Outcome<Memory>)>) -> (Outcome<T>, Outcome<Memory>) {
    match r {
        Ok((part, memory)) => (Ok(part), memory),
        Err(e) => {
            let why = format!("{e:#}");
            (Err(why.clone()), Err(why))
        }
    }
}

/// Both guest images built by `script`: how long each took, in words.
async fn build_images(script: &Path, text_dir: &Path, fb_dir: &Path) -> Result<Vec<String>> {
    let mut builds = Vec::new();
    for (label, dir, framebuffer) in [
        ("text console", text_dir, false),
        ("framebuffer", fb_dir, true),
    ] {
        eprintln!("aido-bench: building the {label} guest image");
        let took = build_image(script, dir, framebuffer).await?;
        builds.push(format!("{label} in {}", format_duration(took)));
        stop::check()?;
    }
    Ok(builds)
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

/// `n` boots, one at a time: the ready times, the prompt times and the last machine. A failed
/// first KVM boot falls back to TCG, as aido does.
async fn boot_n(
    spec: &mut MachineSpec,
    n: usize,
    accel_why: &mut String,
) -> Result<(Vec<Duration>, Vec<Duration>, Machine)> {
    let (mut ready, mut prompt) = (Vec::with_capacity(n), Vec::with_capacity(n));
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
        let booted_in = machine.booted_in();
        eprintln!(
            "aido-bench:   boot {}: ready in {booted_in:?}, prompt in {took:?}",
            i + 1
        );
        ready.push(booted_in);
        prompt.push(took);
        if i + 1 == n {
            return Ok((ready, prompt, machine));
        }
        machine.shutdown().await;
    }
    bail!("no boot")
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
        rss: get("VmRSS").context("no VmRSS in /proc/PID/status")?,
        hwm: get("VmHWM").unwrap_or(0),
        file: get("RssFile").unwrap_or(0),
        guest_ram: guest_ram.map(|kb| kb * 1024),
        code_buffer: code_buffer.map(|kb| kb * 1024),
        huge: maps.iter().map(|m| m.huge_kb * 1024).sum(),
    })
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

/// `find_text` on the text-mode screen.
async fn find_text_mode(machine: &Machine, ocr: &Ocr, n: usize) -> Result<FindTimes> {
    let needle = "aido-bench-42";
    machine
        .type_text("clear; echo aido-bench-$((6*7))\n")
        .await?;
    machine.wait_for_text(needle, TEXT_TIMEOUT_MS).await?;
    find_times(machine, ocr, needle, n, false).await
}

/// `find_text` on the framebuffer screen.
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
    find_times(machine, ocr, FB_NEEDLE, n, true).await
}

/// `needle` (on the screen) found by one untimed-in-the-median first call and `n` timed ones;
/// then `n` PNG screenshots and `n` reads by the reader alone (the VGA text buffer, or OCR of
/// the last screenshot on a framebuffer).
async fn find_times(
    machine: &Machine,
    ocr: &Ocr,
    needle: &str,
    n: usize,
    framebuffer: bool,
) -> Result<FindTimes> {
    let (found, first) = timed(async { Ok(machine.find_text(needle, ocr).await?) }).await?;
    let best = found.first().context("find_text did not find the line")?;
    let (matches, similarity, source) = (found.len(), best.similarity, best.source.to_owned());
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let (found, took) = timed(async { Ok(machine.find_text(needle, ocr).await?) }).await?;
        ensure!(!found.is_empty(), "find_text lost the line");
        times.push(took);
    }
    let (mut screenshot, mut png) = (Vec::with_capacity(n), Vec::new());
    for _ in 0..n {
        let (shot, took) = timed(async { Ok(machine.screenshot_png().await?) }).await?;
        png = shot;
        screenshot.push(took);
    }
    let (mut read, mut words) = (Vec::with_capacity(n), None);
    for _ in 0..n {
        let (engine, shot) = (ocr.clone(), png.clone());
        let started = Instant::now();
        if framebuffer {
            let ocr = tokio::task::spawn_blocking(move || engine.words(&shot)).await;
            words = Some(ocr.context("the OCR task")??.len());
            read.push(started.elapsed());
        } else {
            let screen = machine.text_screen().await?;
            read.push(started.elapsed());
            ensure!(
                !screen.find(needle).is_empty(),
                "the VGA buffer lost the line"
            );
        }
    }
    Ok(FindTimes {
        needle: needle.to_owned(),
        size: png_size(&png).unwrap_or_default(),
        source,
        matches,
        similarity,
        first,
        times,
        screenshot,
        read,
        words,
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
        let (mut restore, mut resume, mut total) = (Vec::new(), Vec::new(), Vec::new());
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
/// The save's time and the loads'.
async fn loadvm(machine: &Machine, n: usize) -> Result<(Duration, Vec<Duration>)> {
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
    Ok((save, load))
}

/// Open a pool (its template made on first use), then `n` times: acquire, check the clone's
/// identity, release it, refill. The figures in [`pool_rows`] order; the first clone's memory.
async fn pool_run(
    spec: &MachineSpec,
    dir: &Path,
    size: usize,
    n: usize,
) -> Result<(Vec<Fig>, Outcome<Memory>)> {
    let (mut pool, open) = timed(async { Ok(Pool::open(spec, dir, size).await?) }).await?;
    let measured = async {
        let (mut handout, mut wall, mut refill) = (Vec::new(), Vec::new(), Vec::new());
        let mut ids = Vec::with_capacity(n);
        let mut clone_memory = Err("no clone acquired".to_owned());
        for i in 0..n {
            stop::check()?;
            let entropy = [(i + 1) as u8; 32];
            let started = Instant::now();
            let (clone, took) = pool.acquire(&entropy).await.context("Pool::acquire")?;
            wall.push(started.elapsed());
            handout.push(took);
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
        let figs = vec![
            Fig::Once(open),
            Fig::Times(handout),
            Fig::Times(wall),
            Fig::Times(refill),
        ];
        Ok::<_, anyhow::Error>((figs, clone_memory))
    }
    .await;
    pool.shutdown().await;
    measured
}

/// Make the template of `spec` under `templates`, then start `n` machines from it one at a time
/// (each checked: at its prompt, with its own hostname). The starts and the making; the first
/// one's memory.
async fn starts(
    spec: &MachineSpec,
    templates: &Path,
    n: usize,
) -> Result<(Vec<Fig>, Outcome<Memory>)> {
    let (template, make) = timed(async { Ok(Template::ensure(spec, templates).await?) }).await?;
    ensure!(template.made(), "the template was not made by this run");
    let mut start = Vec::with_capacity(n);
    let mut memory_of_first = Err("no machine started".to_owned());
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
    Ok((vec![Fig::Times(start), Fig::Once(make)], memory_of_first))
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
async fn framebuffer(vm: &mut Vm, spec: &MachineSpec, ocr: Result<&Ocr, &String>, n: usize) {
    let rows = [
        (
            "vm_boot_framebuffer",
            "VM boot to prompt, framebuffer guest: `Machine::boot` call to the shell's banner \
             `BusyBox` read by OCR (one boot)"
                .to_owned(),
        ),
        (
            "vm_boot_framebuffer_ready",
            "VM boot, framebuffer guest, QEMU's exec to the ready line (one boot)".into(),
        ),
    ];
    let started = Instant::now();
    let machine = match Machine::boot(spec).await {
        Ok(m) => m,
        Err(e) => {
            let why = format!("the framebuffer guest did not boot: {e}");
            vm.rows(&rows, Err(why.clone()));
            vm.body(COLD_FB, Err(why.clone()));
            return vm.find(FB_SCREEN, Err(why));
        }
    };
    let ready = machine.booted_in();
    let (boot, find) = match ocr {
        Ok(ocr) => match machine
            .wait_for_screen_text("BusyBox", ocr, TEXT_TIMEOUT_MS)
            .await
        {
            Ok(_) => (
                Ok(vec![Fig::Once(started.elapsed()), Fig::Once(ready)]),
                None,
            ),
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
    vm.rows(&rows, boot);
    vm.body(COLD_FB, outcome(memory(&machine, spec.memory_mb).await));
    let find = match (find, ocr) {
        (Some(done), _) => done,
        (None, Ok(_)) if stop::requested() => Err("interrupted".to_owned()),
        (None, Ok(ocr)) => outcome(find_framebuffer(&machine, ocr, n).await),
        (None, Err(e)) => Err(format!("no OCR engine: {e}")),
    };
    vm.find(FB_SCREEN, find);
    machine.shutdown().await;
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

/// Bytes in decimal megabytes, as the issue states its figures.
fn format_mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let migration = "the migration-file restore";
        assert_eq!(
            faster_revert(Some(ms(310)), Some(ms(251))),
            Some((migration, ms(251)))
        );
        assert_eq!(
            faster_revert(Some(ms(310)), None),
            Some(("`loadvm`", ms(310)))
        );
        assert_eq!(
            faster_revert(Some(ms(5)), Some(ms(5))).map(|f| f.0),
            Some("`loadvm`")
        );
        assert_eq!(faster_revert(None, None), None);
    }

    #[test]
    fn rows_land_in_report_order_and_a_failed_part_fails_each_of_its_rows() {
        let mut vm = Vm {
            s: Section::new("vm"),
            accel: "tcg".into(),
            mb: 128,
        };
        vm.body(COLD_TEXT, Err("no boot".into()));
        vm.reverts(Ok((ms(900), vec![ms(300), ms(310)])), Err("gone".into()));
        let memory = Memory {
            rss: 100_000_000,
            hwm: 0,
            file: 0,
            guest_ram: None,
            code_buffer: None,
            huge: 0,
        };
        vm.body(STARTED_TEXT, Ok(memory));
        let records = vm.finish();
        let rows: Vec<&str> = records
            .iter()
            .filter(|r| r.unit.is_some() || r.error.is_some())
            .map(|r| r.row.as_str())
            .collect();
        assert_eq!(
            rows,
            [
                "vm_snapshot_revert",
                "vm_savevm",
                "vm_loadvm",
                "vm_migration_save",
                "vm_migration_restore",
                "vm_migration_restore_only",
                "vm_migration_resume",
                "vm_rss_vm_start_text",
                "vm_rss_cold_boot_text",
            ]
        );
        let row = |id: &str| records.iter().find(|r| r.row == id).unwrap();
        let revert = row("vm_snapshot_revert");
        assert_eq!(revert.value, Some(300e6));
        assert_eq!(
            revert.note.as_deref(),
            Some(
                "VM snapshot revert, the faster of `loadvm` and a migration-file restore: \
                 `loadvm` (tcg)"
            )
        );
        let save = row("vm_migration_save");
        assert_eq!(save.error.as_deref(), Some("failed: gone"));
        assert_eq!(
            save.note.as_deref(),
            Some(
                "VM `Machine::save_state` once (the machine paused, its state written to a \
                 file) (tcg)"
            )
        );
        assert_eq!(row("vm_rss_vm_start_text").value, Some(1e8));
        // The memory table: line 1 (started) before line 4 (cold boot, failed).
        let cells: Vec<(&str, Option<&str>)> = records
            .iter()
            .filter(|r| r.row.starts_with("memory:"))
            .map(|r| (r.row.as_str(), r.note.as_deref()))
            .collect();
        assert_eq!(cells.len(), 20);
        assert_eq!(cells[0], ("memory:1", Some(BODIES[0].1)));
        assert_eq!(cells[3], ("memory:1", Some("100.0 MB (95.4 MiB)")));
        assert_eq!(cells[13], ("memory:4", Some("failed: no boot")));
    }
}
