//! The VM section's rows and blocks: boot, snapshot revert, pool acquire, QEMU memory per body
//! and `find_text`, each row naming its accelerator, the reference system's figures from the
//! issue in the target table.

use super::schema::{Fact, Outcome, Row, Section, Unit, Value};
use super::{format_bytes, format_duration, once, part, row, samples, table};
use crate::vm::{Body, Results, Screen, faster_revert};

/// The VM section's state in one run.
pub type VmSection = crate::harness::Run<Box<Results>>;

const S: &str = "vm";
/// The bodies whose memory is judged, in report order.
const BODIES: [Body; 5] = [
    Body::StartedText,
    Body::PoolClone,
    Body::StartedFramebuffer,
    Body::TextIdle,
    Body::Framebuffer,
];

fn bytes(b: u64) -> Value {
    Value {
        unit: Unit::Bytes,
        median: b as f64,
        ..Value::default()
    }
}

fn screen_id(screen: Screen) -> &'static str {
    match screen {
        Screen::Text => "text",
        Screen::Framebuffer => "framebuffer",
    }
}

/// The VM section, its rows pushed onto `rows`.
#[allow(clippy::too_many_lines)]
pub(super) fn section(section: &VmSection, rows: &mut Vec<Row>) -> Section {
    let r = match section {
        VmSection::Ran(r) => r,
        VmSection::Skipped(why) | VmSection::Failed(why) => {
            let why = match section {
                VmSection::Failed(_) => format!("the section failed before measuring: {why}"),
                _ => why.clone(),
            };
            // The judged rows still stand in the summary, saying why they have no value.
            let mut ids = vec![
                ("vm_snapshot_revert", "VM snapshot revert".to_owned()),
                (
                    "vm_pool_acquire_until_running",
                    "VM pool acquire, until the clone runs".into(),
                ),
                (
                    "vm_pool_acquire_call",
                    "VM pool acquire, the whole call".into(),
                ),
            ];
            ids.extend(
                BODIES.map(|b| (b.id(), format!("QEMU RSS (VmRSS) per body: {}", b.label()))),
            );
            for (id, what) in ids {
                rows.push(row(S, id, what, Outcome::NotRun(why.clone())));
            }
            return super::section(S, &[("not_run", why.clone().into())], Vec::new());
        }
    };
    let a = &r.accel;
    let mb = r.guest_mb;
    let accel_of = |o: &Result<String, String>| o.clone().unwrap_or_else(|_| a.clone());
    let mut push = |id: &str, what: String, accel: String, outcome: Outcome| {
        rows.push(row(S, id, format!("{what} ({accel})"), outcome));
    };

    let boot_accel = accel_of(
        &r.boot
            .as_ref()
            .map(|b| b.accel.clone())
            .map_err(Clone::clone),
    );
    push(
        "vm_boot_text",
        format!(
            "VM boot to a shell prompt: `Machine::boot` call to `# ` on the VGA console, text \
             console, {mb} MiB guest"
        ),
        boot_accel.clone(),
        part(&r.boot, |b| samples(&b.prompt)),
    );
    push(
        "vm_boot_text_ready",
        "VM boot, QEMU's exec to the guest's `AIDO-GUEST-READY` on its serial port \
         (`Machine::booted_in`), text console"
            .into(),
        boot_accel,
        part(&r.boot, |b| samples(&b.ready)),
    );
    let fb_accel = accel_of(
        &r.fb_boot
            .as_ref()
            .map(|b| b.accel.clone())
            .map_err(Clone::clone),
    );
    push(
        "vm_boot_framebuffer",
        "VM boot to prompt, framebuffer guest: `Machine::boot` call to the shell's banner \
         `BusyBox` read by OCR (one boot)"
            .into(),
        fb_accel.clone(),
        part(&r.fb_boot, |b| once(b.banner)),
    );
    push(
        "vm_boot_framebuffer_ready",
        "VM boot, framebuffer guest, QEMU's exec to the ready line (one boot)".into(),
        fb_accel,
        part(&r.fb_boot, |b| once(b.ready)),
    );
    let start_accel = accel_of(
        &r.start
            .as_ref()
            .map(|b| b.accel.clone())
            .map_err(Clone::clone),
    );
    push(
        "vm_start",
        format!(
            "VM start from the image's template (`vm_start`: `Template::start`, a new QEMU \
             restored from the saved state, `cont`, until the guest has printed its new \
             identity), text console, {mb} MiB guest"
        ),
        start_accel.clone(),
        part(&r.start, |t| samples(&t.start)),
    );
    push(
        "vm_start_template",
        "VM template made once: a boot, the prompt, the save".into(),
        start_accel,
        part(&r.start, |t| once(t.make)),
    );
    let faster = faster_revert(&r.loadvm, &r.migration);
    let revert_accel = r
        .loadvm
        .as_ref()
        .map(|l| l.accel.clone())
        .or_else(|_| r.migration.as_ref().map(|m| m.accel.clone()))
        .unwrap_or_else(|_| a.clone());
    push(
        "vm_snapshot_revert",
        format!(
            "VM snapshot revert, the faster of `loadvm` and a migration-file restore{}",
            faster.map_or(String::new(), |(which, _)| format!(": {which}"))
        ),
        revert_accel,
        match (faster, &r.loadvm, &r.migration) {
            (Some((_, t)), _, _) => Outcome::Measured(Value {
                median: t.as_nanos() as f64,
                ..Value::default()
            }),
            (None, Err(a), Err(b)) => Outcome::Failed(format!("{a}; {b}")),
            (None, _, _) => Outcome::Failed("no revert path measured".into()),
        },
    );
    let load_accel = accel_of(
        &r.loadvm
            .as_ref()
            .map(|l| l.accel.clone())
            .map_err(Clone::clone),
    );
    push(
        "vm_savevm",
        format!(
            "VM `savevm {}` once (RAM and device state into the disk overlay)",
            crate::vm::SNAPSHOT
        ),
        load_accel.clone(),
        part(&r.loadvm, |l| once(l.save)),
    );
    push(
        "vm_loadvm",
        "VM snapshot revert: `loadvm` (HMP) of a snapshot `savevm` took once, after changing \
         the screen"
            .into(),
        load_accel,
        part(&r.loadvm, |l| samples(&l.load)),
    );
    let mig_accel = accel_of(
        &r.migration
            .as_ref()
            .map(|m| m.accel.clone())
            .map_err(Clone::clone),
    );
    push(
        "vm_migration_save",
        format!(
            "VM `Machine::save_state` once (the machine paused, its state written to a file{})",
            r.migration.as_ref().map_or(String::new(), |m| format!(
                " of {}",
                format_bytes(m.state_bytes)
            ))
        ),
        mig_accel.clone(),
        part(&r.migration, |m| once(m.save)),
    );
    push(
        "vm_migration_restore",
        "VM snapshot revert: migration-file restore (`Machine::restore`: a new QEMU loads the \
         saved state; then `resume`), total"
            .into(),
        mig_accel.clone(),
        part(&r.migration, |m| samples(&m.total)),
    );
    push(
        "vm_migration_restore_only",
        "VM migration-file restore, `Machine::restore` alone (new QEMU, QMP, incoming \
         migration)"
            .into(),
        mig_accel.clone(),
        part(&r.migration, |m| samples(&m.restore)),
    );
    push(
        "vm_migration_resume",
        "VM migration-file restore, `resume` alone".into(),
        mig_accel,
        part(&r.migration, |m| samples(&m.resume)),
    );
    let pool_accel = accel_of(
        &r.pool
            .as_ref()
            .map(|p| p.accel.clone())
            .map_err(Clone::clone),
    );
    let pool = r.options.pool_size;
    push(
        "vm_pool_open",
        format!(
            "VM `Pool::open` with {pool} warm clones, the first time (the template's boot to \
             its prompt, its state saved, each clone restored paused)"
        ),
        pool_accel.clone(),
        part(&r.pool, |p| once(p.open)),
    );
    push(
        "vm_pool_acquire_until_running",
        format!(
            "VM pool acquire, until the clone runs (the Duration `Pool::acquire` returns: a \
             paused clone popped, `cont`), pool of {pool}"
        ),
        pool_accel.clone(),
        part(&r.pool, |p| samples(&p.handout)),
    );
    push(
        "vm_pool_acquire_call",
        format!(
            "VM pool acquire, the whole `Pool::acquire` call (the clone runs, its identity line \
             is written to its serial console, the call returns once the guest has printed it), \
             pool of {pool}"
        ),
        pool_accel.clone(),
        part(&r.pool, |p| samples(&p.wall)),
    );
    push(
        "vm_pool_refill",
        "VM `Pool::refill` after each acquisition (one clone restored)".into(),
        pool_accel,
        part(&r.pool, |p| samples(&p.refill)),
    );
    let mut memory = Vec::new();
    for x in &r.rss {
        let accel = x.outcome.as_ref().map_or(a.clone(), |m| m.accel.clone());
        push(
            x.body.id(),
            format!(
                "QEMU RSS (VmRSS) per body: {}, {mb} MiB guest",
                x.body.label()
            ),
            accel.clone(),
            part(&x.outcome, |m| bytes(m.rss)),
        );
        let cells = match &x.outcome {
            Ok(m) => {
                let rest = m
                    .rss
                    .saturating_sub(m.guest_ram.unwrap_or(0) + m.code_buffer.unwrap_or(0));
                let mb = |v: Option<u64>| v.map_or("—".to_owned(), |b| format_mb(b as f64));
                vec![
                    format!("{} ({})", format_mb(m.rss as f64), format_bytes(m.rss)),
                    mb(m.guest_ram),
                    mb(m.code_buffer),
                    mb(Some(rest)),
                    mb(Some(m.file)),
                    mb(Some(m.huge)),
                    mb(Some(m.hwm)),
                ]
            }
            Err(e) => {
                let mut cells = vec![format!("failed: {e}")];
                cells.resize(7, String::new());
                cells
            }
        };
        let mut line = vec![x.body.label().to_owned(), accel, format!("{mb} MiB")];
        line.extend(cells);
        memory.push(line);
    }
    for f in &r.find {
        let id = format!("vm_find_text_{}", screen_id(f.screen));
        let accel = f.outcome.as_ref().map_or(a.clone(), |t| t.accel.clone());
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
        push(
            &id,
            format!("VM `find_text` on a {screen}{how}"),
            accel.clone(),
            part(&f.outcome, |t| samples(&t.times)),
        );
        push(
            &format!("{id}_first"),
            format!("VM `find_text` on a {screen}, the first call (not in the median)"),
            accel.clone(),
            part(&f.outcome, |t| once(t.first)),
        );
        push(
            &format!("{id}_screenshot"),
            format!("VM the PNG screenshot an agent gets (vm_screenshot) alone, {screen}"),
            accel.clone(),
            part(&f.outcome, |t| samples(&t.screenshot)),
        );
        push(
            &format!("{id}_reader"),
            format!("VM the reader alone, {screen}"),
            accel,
            part(&f.outcome, |t| samples(&t.read)),
        );
    }
    blocks(r, memory)
}

/// The section's prose and its memory table.
fn blocks(r: &Results, memory: Vec<Vec<String>>) -> Section {
    let builds: Vec<String> = r
        .builds
        .iter()
        .map(|(what, took)| format!("{what} in {}", format_duration(*took)))
        .collect();
    let o = &r.options;
    let omp = r.omp_thread_limit.as_deref();
    let mut params: Vec<(&str, Fact)> = vec![
        ("accel", r.accel.clone().into()),
        ("accel_why", r.accel_why.clone().into()),
        ("qemu", r.qemu.clone().into()),
        ("builds", builds.join(", ").into()),
        ("guest", r.guest.clone().into()),
        ("guest_mb", r.guest_mb.into()),
        (
            "omp",
            omp.map_or("unset".to_owned(), |v| format!("`{v}`")).into(),
        ),
        ("took", format_duration(r.took).into()),
        ("boots", o.boots.into()),
        ("reverts", o.reverts.into()),
        ("acquisitions", o.acquisitions.into()),
        ("finds", o.finds.into()),
        ("pool_size", o.pool_size.into()),
        ("thp", r.thp.clone().into()),
    ];
    if r.leftover.is_empty() {
        params.push(("none_left", String::new().into()));
    } else {
        let pids: Vec<String> = r.leftover.iter().map(u32::to_string).collect();
        params.push(("left", r.leftover.len().into()));
        params.push(("left_pids", pids.join(", ").into()));
    }
    if r.accel == "tcg" {
        params.push(("tcg", String::new().into()));
    }
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
    super::section(S, &params, vec![("memory", table(&columns, memory))])
}

/// Bytes in decimal megabytes, as the issue states its figures.
fn format_mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}
