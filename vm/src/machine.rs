use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qapi::qmp;
use serde::Serialize;
use serde_json::json;
use tokio::io::WriteHalf;
use tokio::net::UnixStream;

use crate::accel::Accel;
use crate::error::VmError;
use crate::keys;
use crate::libvirt::Guest;
use crate::screen::{TextMatch, TextScreen};
pub use crate::spec::MachineSpec;

/// Pause after each key release. QEMU's keyboard queue is small: keys sent in a burst are
/// silently lost, while 4 ms apart they all arrive (measured: 191 characters intact).
const KEY_GAP_MS: u64 = 4;
/// How long QEMU has to open its QMP socket.
const QMP_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// How often the serial log and the screen are polled.
const POLL_MS: u64 = 50;
/// The physical address and size of the VGA text buffer.
const VGA_TEXT_ADDR: u64 = 0xB8000;
const VGA_TEXT_BYTES: u64 = 4000;
/// input-send-event absolute coordinates run from 0 to this.
const ABS_MAX: u64 = 32767;

/// QEMU asks for transparent huge pages on guest RAM (and TCG's translation buffer), so a
/// guest touching a few bytes of a 2 MiB region makes all of it resident: a machine restored
/// from a template, whose RAM is mostly zero and never touched, held ~144 MB with them and
/// ~111 MB without (measured here, TCG). The kernel's "THP disable" flag is per process,
/// inherited by children and kept across exec, and nothing lets a parent set it on one child
/// without `unsafe` code between fork and exec; so it is set on this process, once, before the
/// first QEMU starts. aido itself asks for no huge pages, so under the host's usual `madvise`
/// mode this changes nothing else (under `always`, aido's own heap loses them too). Machines on
/// a libvirt host are started by libvirtd, not by this process: they keep the host's setting.
fn no_huge_pages_for_qemu() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
            tracing::warn!("cannot turn transparent huge pages off for QEMU: {e}");
        }
    });
}

type Qmp = qapi::futures::QapiService<qapi::futures::QmpStreamTokio<WriteHalf<UnixStream>>>;

/// How aido reaches a machine's QEMU. (One per machine: the size of the local variant does
/// not matter.)
#[allow(clippy::large_enum_variant)]
enum Link {
    /// A QEMU process aido started, over its QMP socket.
    Local {
        child: tokio::process::Child,
        qmp: Qmp,
        events: tokio::task::JoinHandle<()>,
    },
    /// A domain on a libvirt host.
    Libvirt(Arc<std::sync::Mutex<Guest>>),
}

/// One running QEMU.
pub struct Machine {
    link: Link,
    dir: tempfile::TempDir,
    accel: Accel,
    booted_in: Duration,
    /// The screen size in pixels, from the last screenshot (text mode: 720x400).
    screen: Mutex<(u32, u32)>,
    /// Where aido last put the pointer.
    pointer: Mutex<(u32, u32)>,
    /// The line the guest prints when it is up (for reboots).
    ready_marker: String,
    boot_timeout_ms: u64,
    /// aido's connection to the serial port, opened on first write and kept (what the guest
    /// prints on it is drained; the log file has it all).
    serial_tx: tokio::sync::Mutex<Option<SerialLink>>,
}

/// A kept connection to a local machine's serial socket.
struct SerialLink {
    tx: tokio::net::unix::OwnedWriteHalf,
    drain: tokio::task::JoinHandle<()>,
}

impl Drop for SerialLink {
    fn drop(&mut self) {
        self.drain.abort();
    }
}

fn program(name: &'static str) -> Result<(), VmError> {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join(name).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(VmError::Missing { program: name })
    }
}

impl Machine {
    /// Boot `spec` and wait until the guest says it is ready. On any failure QEMU is killed.
    pub async fn boot(spec: &MachineSpec) -> Result<Self, VmError> {
        Self::launch(spec, None).await
    }

    /// Start from a saved state (see [`Machine::save_state`]) instead of booting: the machine
    /// comes back paused, exactly as it was saved; [`Machine::resume`] runs it. `spec.disk`
    /// must be a base whose contents match the moment of the save.
    pub async fn restore(spec: &MachineSpec, state: &Path) -> Result<Self, VmError> {
        Self::launch(spec, Some(state)).await
    }

    #[allow(clippy::too_many_lines)]
    async fn launch(spec: &MachineSpec, incoming: Option<&Path>) -> Result<Self, VmError> {
        if let Some(uri) = &spec.host {
            if incoming.is_some() {
                return Err(VmError::Unsupported {
                    what: "starting from a saved state",
                    uri: uri.clone(),
                });
            }
            return Self::launch_libvirt(spec, uri).await;
        }
        for p in ["qemu-system-x86_64", "qemu-img", "setpriv"] {
            program(p)?;
        }
        no_huge_pages_for_qemu();
        let dir = tempfile::Builder::new()
            .prefix("aido-vm-")
            .tempdir()
            .map_err(|e| VmError::io("create", Path::new("aido-vm-*"), e))?;
        let qmp_path = dir.path().join("qmp.sock");
        let serial = dir.path().join("serial.log");
        let stderr_path = dir.path().join("qemu.stderr");
        let mut args: Vec<String> = vec![
            "--pdeathsig".into(),
            "KILL".into(),
            "--".into(),
            "qemu-system-x86_64".into(),
            "-name".into(),
            "aido-vm".into(),
            "-machine".into(),
            "pc".into(),
            "-accel".into(),
            match spec.accel {
                // TCG's translation buffer defaults to 1 GiB here, touched lazily in huge pages:
                // a small one keeps QEMU's memory down for a few percent of speed.
                Accel::Tcg => format!("tcg,tb-size={}", spec.tcg_tb_mb),
                Accel::Kvm => "kvm".into(),
            },
            "-m".into(),
            spec.memory_mb.to_string(),
            "-nodefaults".into(),
            "-vga".into(),
            "std".into(),
            "-display".into(),
            "none".into(),
            "-kernel".into(),
            spec.kernel.display().to_string(),
            "-initrd".into(),
            spec.initrd.display().to_string(),
            "-append".into(),
            spec.append.clone(),
            // The serial port is a socket (so aido can write to the guest's shell) that also
            // logs everything the guest prints.
            "-chardev".into(),
            format!(
                "socket,id=serial0,path={},server=on,wait=off,logfile={}",
                dir.path().join("serial.sock").display(),
                serial.display()
            ),
            "-serial".into(),
            "chardev:serial0".into(),
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", qmp_path.display()),
            // Containment: no network, seccomp on, nothing of the host shared.
            "-nic".into(),
            "none".into(),
            "-sandbox".into(),
            "on".into(),
            "-device".into(),
            "qemu-xhci".into(),
            "-device".into(),
            "usb-tablet".into(),
        ];
        if incoming.is_some() {
            args.push("-incoming".into());
            args.push("defer".into());
        }
        if let Some(base) = &spec.disk {
            let overlay = dir.path().join("overlay.qcow2");
            let made = std::process::Command::new("qemu-img")
                .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
                .arg(base)
                .arg(&overlay)
                .output()
                .map_err(|e| VmError::Spawn {
                    message: format!("qemu-img: {e}"),
                })?;
            if !made.status.success() {
                return Err(VmError::Spawn {
                    message: String::from_utf8_lossy(&made.stderr).trim().to_owned(),
                });
            }
            args.push("-drive".into());
            args.push(format!("file={},if=virtio,format=qcow2", overlay.display()));
        }
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| VmError::io("create", &stderr_path, e))?;
        let started = Instant::now();
        let mut child = tokio::process::Command::new("setpriv")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| VmError::Spawn {
                message: e.to_string(),
            })?;
        let exited = |child: &mut tokio::process::Child| exited(child, &stderr_path);
        // QMP: the socket appears once QEMU has parsed its arguments.
        let deadline = Instant::now() + Duration::from_millis(QMP_CONNECT_TIMEOUT_MS);
        let stream = loop {
            if let Some(e) = exited(&mut child) {
                return Err(e);
            }
            if let Ok(negotiation) = qapi::futures::QmpStreamTokio::open_uds(&qmp_path).await {
                match negotiation.negotiate().await {
                    Ok(stream) => break stream,
                    Err(e) => {
                        // QEMU opens the socket early and may still fail (a missing kernel):
                        // then what it printed says more than the broken socket.
                        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                        return Err(exited(&mut child).unwrap_or(VmError::Qmp {
                            command: "qmp_capabilities",
                            message: e.to_string(),
                        }));
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(VmError::Spawn {
                    message: "QEMU did not open its QMP socket".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let (qmp, events) = stream.spawn_tokio();
        let mut machine = Self::new(Link::Local { child, qmp, events }, dir, spec);
        if let Some(state) = incoming {
            machine
                .execute(qmp::migrate_incoming {
                    uri: Some(format!("file:{}", state.display())),
                    channels: None,
                    exit_on_error: None,
                })
                .await?;
            machine
                .wait_migration("migrate-incoming", spec.boot_timeout_ms)
                .await?;
            machine.booted_in = started.elapsed();
            return Ok(machine);
        }
        machine.wait_ready(started).await?;
        Ok(machine)
    }

    /// Boot `spec` as a domain on the libvirt host `uri` and wait for the guest's ready line
    /// (its serial console is copied into the same log a local machine writes).
    async fn launch_libvirt(spec: &MachineSpec, uri: &str) -> Result<Self, VmError> {
        let dir = tempfile::Builder::new()
            .prefix("aido-vm-")
            .tempdir()
            .map_err(|e| VmError::io("create", Path::new("aido-vm-*"), e))?;
        let serial = dir.path().join("serial.log");
        let started = Instant::now();
        let guest = {
            let (spec, uri, serial) = (spec.clone(), uri.to_owned(), serial.clone());
            tokio::task::spawn_blocking(move || Guest::create(&uri, &spec, &serial))
                .await
                .map_err(|e| VmError::Libvirt {
                    op: "domain-create".into(),
                    message: e.to_string(),
                })??
        };
        let mut machine = Self::new(Link::Libvirt(Arc::new(Mutex::new(guest))), dir, spec);
        machine.wait_ready(started).await?;
        Ok(machine)
    }

    fn new(link: Link, dir: tempfile::TempDir, spec: &MachineSpec) -> Self {
        Self {
            link,
            dir,
            accel: spec.accel,
            booted_in: Duration::ZERO,
            screen: Mutex::new((720, 400)),
            pointer: Mutex::new((0, 0)),
            ready_marker: spec.ready_marker.clone(),
            boot_timeout_ms: spec.boot_timeout_ms,
            serial_tx: tokio::sync::Mutex::new(None),
        }
    }

    /// Wait until the guest says it is up on its serial port, `boot_timeout_ms` from `started`;
    /// a QEMU that exits meanwhile is an error, and on a timeout the machine is killed.
    async fn wait_ready(&mut self, started: Instant) -> Result<(), VmError> {
        let deadline = started + Duration::from_millis(self.boot_timeout_ms);
        while !self.serial().contains(&self.ready_marker) {
            if let Link::Local { child, .. } = &mut self.link
                && let Some(e) = exited(child, &self.dir.path().join("qemu.stderr"))
            {
                return Err(e);
            }
            if Instant::now() > deadline {
                self.kill().await;
                return Err(VmError::BootTimeout {
                    timeout_ms: self.boot_timeout_ms,
                });
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
        self.booted_in = started.elapsed();
        Ok(())
    }

    /// Run a blocking call on the libvirt guest.
    async fn on_guest<T: Send + 'static>(
        guest: &Arc<Mutex<Guest>>,
        op: &'static str,
        f: impl FnOnce(&mut Guest) -> Result<T, VmError> + Send + 'static,
    ) -> Result<T, VmError> {
        let guest = guest.clone();
        tokio::task::spawn_blocking(move || {
            let mut g = guest.lock().map_err(|_| VmError::Libvirt {
                op: op.into(),
                message: "the guest's lock is poisoned".into(),
            })?;
            f(&mut g)
        })
        .await
        .map_err(|e| VmError::Libvirt {
            op: op.into(),
            message: e.to_string(),
        })?
    }

    /// Run one QMP command: over the socket for a local machine, through
    /// `virDomainQemuMonitorCommand` on a libvirt host.
    async fn execute<C>(&self, command: C) -> Result<C::Ok, VmError>
    where
        C: qapi::Command + qapi::qmp::QmpCommand + 'static,
    {
        let guest = match &self.link {
            Link::Local { qmp, .. } => {
                return qmp.execute(command).await.map_err(|e| VmError::Qmp {
                    command: C::NAME,
                    message: e.to_string(),
                });
            }
            Link::Libvirt(guest) => guest,
        };
        let line = serde_json::to_string(&json!({"execute": C::NAME, "arguments": command}))
            .map_err(|e| VmError::Qmp {
                command: C::NAME,
                message: e.to_string(),
            })?;
        let reply =
            Self::on_guest(guest, "qemu-monitor-command", move |g| g.monitor(&line)).await?;
        let qmp_error = |message: String| VmError::Qmp {
            command: C::NAME,
            message,
        };
        let reply: serde_json::Value =
            serde_json::from_str(&reply).map_err(|e| qmp_error(e.to_string()))?;
        match reply.get("return") {
            Some(ok) => serde_json::from_value(ok.clone()).map_err(|e| qmp_error(e.to_string())),
            None => Err(qmp_error(
                reply["error"]["desc"]
                    .as_str()
                    .unwrap_or("no return in QEMU's reply")
                    .to_owned(),
            )),
        }
    }

    /// The libvirt host's URI, for a machine there.
    pub fn host(&self) -> Option<String> {
        match &self.link {
            Link::Local { .. } => None,
            Link::Libvirt(g) => g.lock().ok().map(|g| g.uri().to_owned()),
        }
    }

    /// The domain's name on the libvirt host, for a machine there.
    pub fn domain(&self) -> Option<String> {
        match &self.link {
            Link::Local { .. } => None,
            Link::Libvirt(g) => g.lock().ok().map(|g| g.name().to_owned()),
        }
    }

    fn local_only(&self, what: &'static str) -> Result<(), VmError> {
        match self.host() {
            Some(uri) => Err(VmError::Unsupported { what, uri }),
            None => Ok(()),
        }
    }

    async fn wait_migration(&self, command: &'static str, timeout_ms: u64) -> Result<(), VmError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            let info = self.execute(qmp::query_migrate {}).await?;
            match info.status {
                Some(qmp::MigrationStatus::completed) => return Ok(()),
                Some(qmp::MigrationStatus::failed) | Some(qmp::MigrationStatus::cancelled) => {
                    return Err(VmError::Qmp {
                        command,
                        message: info.error_desc.unwrap_or_else(|| "failed".into()),
                    });
                }
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(VmError::Qmp {
                    command,
                    message: format!("not done within {timeout_ms} ms"),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Pause the machine and write its whole state (CPU, RAM, devices) to `path`. The disk is
    /// not in it: keep the disk overlay as it is now for [`Machine::restore`].
    pub async fn save_state(&self, path: &Path) -> Result<(), VmError> {
        self.local_only("saving the machine's state to a file")?;
        self.execute(qmp::stop {}).await?;
        self.execute(qmp::migrate {
            uri: Some(format!("file:{}", path.display())),
            channels: None,
            detach: None,
            resume: None,
        })
        .await?;
        self.wait_migration("migrate", 60_000).await
    }

    /// Copy the machine's disk overlay as it is now to `to`: taken while the machine is paused
    /// after [`Machine::save_state`], it is the disk that goes with that state (the base of
    /// machines restored from it).
    pub fn copy_disk(&self, to: &Path) -> Result<(), VmError> {
        let overlay = self.dir.path().join("overlay.qcow2");
        std::fs::copy(&overlay, to)
            .map(|_| ())
            .map_err(|e| VmError::io("copy", &overlay, e))
    }

    /// Pause a running machine (its vCPU stops; QEMU and its state stay).
    pub async fn pause(&self) -> Result<(), VmError> {
        self.execute(qmp::stop {}).await?;
        Ok(())
    }

    /// Run a paused machine.
    pub async fn resume(&self) -> Result<(), VmError> {
        self.execute(qmp::cont {}).await?;
        Ok(())
    }

    /// Write a line to the guest's serial console (its root shell there runs it).
    pub async fn serial_write(&self, line: &str) -> Result<(), VmError> {
        use tokio::io::AsyncWriteExt;
        if let Link::Libvirt(guest) = &self.link {
            let bytes = format!("{line}\n").into_bytes();
            return Self::on_guest(guest, "console", move |g| g.serial_write(&bytes)).await;
        }
        let path = self.dir.path().join("serial.sock");
        let mut link = self.serial_tx.lock().await;
        if link.is_none() {
            let sock = UnixStream::connect(&path)
                .await
                .map_err(|e| VmError::io("connect", &path, e))?;
            let (mut rx, tx) = sock.into_split();
            // QEMU writes the guest's output to every connected client as well as the log: read
            // it, or a full socket buffer would stall the guest's serial port.
            let drain = tokio::spawn(async move {
                let mut sink = tokio::io::sink();
                let _ = tokio::io::copy(&mut rx, &mut sink).await;
            });
            *link = Some(SerialLink { tx, drain });
        }
        let Some(SerialLink { tx, .. }) = link.as_mut() else {
            return Err(VmError::io(
                "connect",
                &path,
                std::io::Error::other("no serial link"),
            ));
        };
        let written = async {
            tx.write_all(format!("{line}\n").as_bytes()).await?;
            tx.flush().await
        }
        .await;
        if let Err(e) = written {
            // A broken link is dropped; the next write connects again.
            *link = None;
            return Err(VmError::io("write", &path, e));
        }
        Ok(())
    }

    /// The machine's private directory (sockets, logs, overlay).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The accelerator it runs on.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// How long it took from exec to ready.
    pub fn booted_in(&self) -> Duration {
        self.booted_in
    }

    /// QEMU's process id.
    pub fn pid(&self) -> Option<u32> {
        match &self.link {
            Link::Local { child, .. } => child.id(),
            Link::Libvirt(_) => None,
        }
    }

    /// The serial log so far.
    pub fn serial(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serial.log")).unwrap_or_default()
    }

    async fn hmp(&self, line: &str) -> Result<String, VmError> {
        self.execute(qmp::human_monitor_command {
            command_line: line.to_owned(),
            cpu_index: None,
        })
        .await
    }

    /// A PNG of the screen.
    pub async fn screenshot_png(&self) -> Result<Vec<u8>, VmError> {
        if let Link::Libvirt(guest) = &self.link {
            let shot = Self::on_guest(guest, "screenshot", |g| g.screenshot()).await?;
            return Ok(self.seen(crate::image::to_png(&shot)?));
        }
        self.screendump(qmp::ImageFormat::png, "screen.png").await
    }

    /// The screen uncompressed (PPM) from a local machine; what the host sends (PNG) from a
    /// libvirt host.
    async fn screen_raw(&self) -> Result<Vec<u8>, VmError> {
        if let Link::Libvirt(_) = &self.link {
            return self.screenshot_png().await;
        }
        self.screendump(qmp::ImageFormat::ppm, "screen.ppm").await
    }

    /// QEMU's `screendump` of a local machine, in `format`, through the file `name` in the
    /// machine's directory.
    async fn screendump(&self, format: qmp::ImageFormat, name: &str) -> Result<Vec<u8>, VmError> {
        let path = self.dir.path().join(name);
        self.execute(qmp::screendump {
            filename: path.display().to_string(),
            format: Some(format),
            device: None,
            head: None,
        })
        .await?;
        let shot = std::fs::read(&path).map_err(|e| VmError::io("read", &path, e))?;
        Ok(self.seen(shot))
    }

    /// Remember a screen image's size (pointer positions are scaled to it), and pass it on.
    fn seen(&self, shot: Vec<u8>) -> Vec<u8> {
        if let Some(size) = image_size(&shot)
            && let Ok(mut screen) = self.screen.lock()
        {
            *screen = size;
        }
        shot
    }

    /// The screen's text, exactly, from the VGA text buffer (text mode only).
    pub async fn text_screen(&self) -> Result<TextScreen, VmError> {
        if let Link::Libvirt(_) = &self.link {
            // pmemsave writes on the host; `xp` hands the bytes back over the monitor.
            let dump = self
                .hmp(&format!("xp /{VGA_TEXT_BYTES}xb {VGA_TEXT_ADDR:#x}"))
                .await?;
            return Ok(TextScreen::from_vga(&parse_xp(&dump)));
        }
        let path = self.dir.path().join("vga.bin");
        self.execute(qmp::pmemsave {
            val: VGA_TEXT_ADDR,
            size: VGA_TEXT_BYTES,
            filename: path.display().to_string(),
        })
        .await?;
        let bytes = std::fs::read(&path).map_err(|e| VmError::io("read", &path, e))?;
        Ok(TextScreen::from_vga(&bytes))
    }

    /// Whether the screen is in VGA text mode (QEMU's 720x400 screen), read exactly from the
    /// text buffer; otherwise it is graphical and read by OCR.
    pub async fn in_text_mode(&self) -> Result<bool, VmError> {
        Ok(text_mode(&self.screen_raw().await?))
    }

    /// Find `needle` on the screen: exactly from the VGA text buffer when the guest is in text
    /// mode (QEMU's 720x400 screen), else by OCR with fuzzy matching. Best match first.
    pub async fn find_text(
        &self,
        needle: &str,
        ocr: &crate::ocr::Ocr,
    ) -> Result<Vec<ScreenMatch>, VmError> {
        // A PPM screendump: QEMU writes it without compressing (a PNG costs it several ms
        // more), its header says whether the screen is QEMU's 720x400 text mode, and OCR
        // reads it as it is.
        let shot = self.screen_raw().await?;
        if text_mode(&shot) {
            let screen = self.text_screen().await?;
            return Ok(screen
                .find(needle)
                .into_iter()
                .map(|m| ScreenMatch {
                    text: needle.to_owned(),
                    bbox: m.bbox,
                    center: m.center,
                    similarity: 1.0,
                    source: "vga_text",
                })
                .collect());
        }
        let ocr = ocr.clone();
        let words = tokio::task::spawn_blocking(move || ocr.words(&shot))
            .await
            .map_err(|e| VmError::Ocr {
                message: e.to_string(),
            })??;
        Ok(crate::ocr::find(&words, needle)
            .into_iter()
            .map(|m| ScreenMatch {
                text: m.text,
                bbox: m.bbox,
                center: m.center,
                similarity: m.similarity,
                source: "ocr",
            })
            .collect())
    }

    /// Poll [`Machine::find_text`] until `needle` shows up or `timeout_ms` passes.
    pub async fn wait_for_screen_text(
        &self,
        needle: &str,
        ocr: &crate::ocr::Ocr,
        timeout_ms: u64,
    ) -> Result<ScreenMatch, VmError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some(found) = self.find_text(needle, ocr).await?.into_iter().next() {
                return Ok(found);
            }
            if Instant::now() > deadline {
                return Err(VmError::TextTimeout {
                    text: needle.to_owned(),
                    timeout_ms,
                });
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    /// Wait until `text` is on the screen; where it is.
    pub async fn wait_for_text(&self, text: &str, timeout_ms: u64) -> Result<TextMatch, VmError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some(found) = self.text_screen().await?.find(text).into_iter().next() {
                return Ok(found);
            }
            if Instant::now() > deadline {
                return Err(VmError::TextTimeout {
                    text: text.to_owned(),
                    timeout_ms,
                });
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    async fn send(&self, events: Vec<serde_json::Value>) -> Result<(), VmError> {
        let events = events
            .into_iter()
            .map(|e| {
                serde_json::from_value::<qmp::InputEvent>(e.clone()).map_err(|_| {
                    VmError::UnknownKey {
                        what: e.to_string(),
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.execute(qmp::input_send_event {
            device: None,
            head: None,
            events,
        })
        .await?;
        Ok(())
    }

    async fn key_event(&self, code: &str, down: bool) -> Result<(), VmError> {
        self.send(vec![
            json!({"type": "key", "data": {"down": down, "key": {"type": "qcode", "data": code}}}),
        ])
        .await
    }

    /// Press (`down`) or release a chord's keys: down in order, up in reverse.
    pub async fn hold(&self, chord: &str, down: bool) -> Result<(), VmError> {
        let codes = keys::chord(chord)?;
        let ordered: Vec<&&str> = if down {
            codes.iter().collect()
        } else {
            codes.iter().rev().collect()
        };
        for code in ordered {
            self.key_event(code, down).await?;
        }
        Ok(())
    }

    /// Press a chord (`ctrl+alt+t`, `Return`): every key down in order, then up in reverse.
    pub async fn key(&self, chord: &str) -> Result<(), VmError> {
        let codes = keys::chord(chord)?;
        for code in &codes {
            self.key_event(code, true).await?;
        }
        for code in codes.iter().rev() {
            self.key_event(code, false).await?;
            tokio::time::sleep(Duration::from_millis(KEY_GAP_MS)).await;
        }
        Ok(())
    }

    /// Type text on the US keyboard, paced so no key is dropped. Characters the keyboard
    /// cannot type are refused before the first key is sent.
    pub async fn type_text(&self, text: &str) -> Result<(), VmError> {
        let plan = text
            .chars()
            .map(keys::for_char)
            .collect::<Result<Vec<_>, _>>()?;
        for (code, shift) in plan {
            if shift {
                self.key_event("shift", true).await?;
            }
            self.key_event(code, true).await?;
            self.key_event(code, false).await?;
            if shift {
                self.key_event("shift", false).await?;
            }
            tokio::time::sleep(Duration::from_millis(KEY_GAP_MS)).await;
        }
        Ok(())
    }

    /// Move the pointer to (x, y) in screen pixels (the usb-tablet takes absolute positions).
    pub async fn move_to(&self, x: u32, y: u32) -> Result<(), VmError> {
        let (w, h) = self.screen.lock().map(|s| *s).unwrap_or((720, 400));
        let (x, y) = (x.min(w.saturating_sub(1)), y.min(h.saturating_sub(1)));
        let scale = |v: u32, size: u32| u64::from(v) * ABS_MAX / u64::from(size.max(2) - 1);
        self.send(vec![
            json!({"type": "abs", "data": {"axis": "x", "value": scale(x, w)}}),
            json!({"type": "abs", "data": {"axis": "y", "value": scale(y, h)}}),
        ])
        .await?;
        if let Ok(mut p) = self.pointer.lock() {
            *p = (x, y);
        }
        Ok(())
    }

    /// The screen's size as the last screenshot showed it (text mode until then: 720x400).
    pub fn screen_size(&self) -> (u32, u32) {
        self.screen.lock().map(|s| *s).unwrap_or((720, 400))
    }

    /// Where the pointer is (as aido last put it).
    pub fn cursor(&self) -> (u32, u32) {
        self.pointer.lock().map(|p| *p).unwrap_or((0, 0))
    }

    /// Press or release a button: left, middle, right, wheel-up, wheel-down.
    pub async fn button(&self, button: &str, down: bool) -> Result<(), VmError> {
        self.send(vec![
            json!({"type": "btn", "data": {"down": down, "button": button}}),
        ])
        .await?;
        tokio::time::sleep(Duration::from_millis(KEY_GAP_MS)).await;
        Ok(())
    }

    /// Move the pointer to (x, y) in screen pixels and click `button` `count` times.
    pub async fn click_n(&self, x: u32, y: u32, button: &str, count: u32) -> Result<(), VmError> {
        self.move_to(x, y).await?;
        for _ in 0..count {
            self.button(button, true).await?;
            self.button(button, false).await?;
        }
        Ok(())
    }

    /// Move the pointer to (x, y) in screen pixels and click `button` (left, middle, right).
    pub async fn click(&self, x: u32, y: u32, button: &str) -> Result<(), VmError> {
        self.click_n(x, y, button, 1).await
    }

    /// Press the left button at `from`, move to `to`, release.
    pub async fn drag(&self, from: (u32, u32), to: (u32, u32)) -> Result<(), VmError> {
        self.move_to(from.0, from.1).await?;
        self.button("left", true).await?;
        self.move_to(to.0, to.1).await?;
        self.button("left", false).await
    }

    /// Scroll at (x, y): `amount` wheel steps up (negative) or down (positive).
    pub async fn scroll(&self, x: u32, y: u32, amount: i32) -> Result<(), VmError> {
        self.move_to(x, y).await?;
        let wheel = if amount < 0 { "wheel-up" } else { "wheel-down" };
        for _ in 0..amount.unsigned_abs() {
            self.button(wheel, true).await?;
            self.button(wheel, false).await?;
        }
        Ok(())
    }

    /// Reset the machine and wait until the guest is up again.
    pub async fn reboot(&self) -> Result<(), VmError> {
        let seen = self.serial().matches(&self.ready_marker).count();
        self.execute(qmp::system_reset {}).await?;
        let deadline = Instant::now() + Duration::from_millis(self.boot_timeout_ms);
        while self.serial().matches(&self.ready_marker).count() <= seen {
            if Instant::now() > deadline {
                return Err(VmError::BootTimeout {
                    timeout_ms: self.boot_timeout_ms,
                });
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
        Ok(())
    }

    /// The names of the machine's snapshots.
    pub async fn snapshot_list(&self) -> Result<Vec<String>, VmError> {
        if let Link::Libvirt(guest) = &self.link {
            return Self::on_guest(guest, "snapshot-list", |g| g.snapshot_list()).await;
        }
        let table = self.hmp("info snapshots").await?;
        // Rows after the header: "ID  TAG  VM SIZE  DATE  VM CLOCK  ICOUNT".
        Ok(table
            .lines()
            .filter_map(|l| {
                let mut cols = l.split_whitespace();
                let id = cols.next()?;
                let tag = cols.next()?;
                (id.chars().all(|c| c.is_ascii_digit()) || id == "--").then(|| tag.to_owned())
            })
            .collect())
    }

    /// Kill QEMU at once, as pulling the plug.
    pub async fn force_off(mut self) {
        self.kill().await;
    }

    /// Save disk and memory as a named internal snapshot (in the qcow2 overlay).
    pub async fn snapshot_save(&self, name: &str) -> Result<(), VmError> {
        self.named_snapshot("savevm", "snapshot-create", name, Guest::snapshot_save)
            .await
    }

    /// Go back to a named snapshot.
    pub async fn snapshot_load(&self, name: &str) -> Result<(), VmError> {
        self.named_snapshot("loadvm", "snapshot-revert", name, Guest::snapshot_load)
            .await
    }

    /// Delete a named snapshot.
    pub async fn snapshot_delete(&self, name: &str) -> Result<(), VmError> {
        self.named_snapshot("delvm", "snapshot-delete", name, Guest::snapshot_delete)
            .await
    }

    /// One snapshot operation on `name`: the HMP command `hmp` on a local machine, `on_host`
    /// (libvirt's `op`) on a libvirt host.
    async fn named_snapshot(
        &self,
        hmp: &'static str,
        op: &'static str,
        name: &str,
        on_host: fn(&Guest, &str) -> Result<(), VmError>,
    ) -> Result<(), VmError> {
        check_snapshot_name(hmp, name)?;
        if let Link::Libvirt(guest) = &self.link {
            let name = name.to_owned();
            return Self::on_guest(guest, op, move |g| on_host(g, &name)).await;
        }
        // HMP reports errors inside a successful reply: any text back is an error here.
        let said = self.hmp(&format!("{hmp} {name}")).await?;
        if said.trim().is_empty() {
            Ok(())
        } else {
            Err(VmError::Qmp {
                command: hmp,
                message: said.trim().to_owned(),
            })
        }
    }

    /// Ask QEMU to quit and wait for it; kill it if it does not go.
    pub async fn shutdown(mut self) {
        match &mut self.link {
            Link::Local { child, qmp, events } => {
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), qmp.execute(qmp::quit {})).await;
                if tokio::time::timeout(Duration::from_secs(3), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
                events.abort();
            }
            Link::Libvirt(_) => self.kill().await,
        }
    }

    async fn kill(&mut self) {
        match &mut self.link {
            Link::Local { child, events, .. } => {
                let _ = child.kill().await;
                events.abort();
            }
            Link::Libvirt(guest) => {
                let _ = Self::on_guest(guest, "destroy", |g| {
                    g.destroy();
                    Ok(())
                })
                .await;
            }
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        match &mut self.link {
            Link::Local { child, events, .. } => {
                // kill_on_drop covers the child; the event reader goes too.
                events.abort();
                let _ = child.start_kill();
            }
            Link::Libvirt(guest) => {
                // The guest's own Drop destroys the domain; do it off the async threads.
                let guest = guest.clone();
                std::thread::spawn(move || {
                    if let Ok(mut g) = guest.lock() {
                        g.destroy();
                    }
                });
            }
        }
    }
}

/// QEMU's exit while starting, with what it printed on stderr; `None` while it runs.
fn exited(child: &mut tokio::process::Child, stderr: &Path) -> Option<VmError> {
    match child.try_wait() {
        Ok(Some(_)) => Some(VmError::Exited {
            stderr: std::fs::read_to_string(stderr)
                .unwrap_or_default()
                .trim()
                .to_owned(),
        }),
        _ => None,
    }
}

/// A snapshot name is letters, digits, `.`, `_`, `-` (it goes into an HMP line or libvirt XML).
fn check_snapshot_name(command: &'static str, name: &str) -> Result<(), VmError> {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        Ok(())
    } else {
        Err(VmError::Qmp {
            command,
            message: format!("{name:?}: a snapshot name is letters, digits, . _ -"),
        })
    }
}

/// The bytes of an HMP `xp /Nxb ADDR` dump: lines of `address: 0x.. 0x.. ...`.
fn parse_xp(dump: &str) -> Vec<u8> {
    dump.lines()
        .filter_map(|l| l.split_once(": ").map(|(_, bytes)| bytes))
        .flat_map(|bytes| bytes.split_whitespace())
        .filter_map(|b| u8::from_str_radix(b.trim_start_matches("0x"), 16).ok())
        .collect()
}

/// Text found on a screen, by either reader.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScreenMatch {
    /// What is there (OCR's reading; the needle itself for exact text).
    pub text: String,
    /// x, y, width, height in screen pixels.
    pub bbox: [u32; 4],
    /// Its center.
    pub center: [u32; 2],
    /// 1.0 for exact text, OCR's similarity otherwise.
    pub similarity: f64,
    /// `vga_text` or `ocr`.
    pub source: &'static str,
}

/// Whether a screen image is QEMU's 720x400 VGA text mode.
fn text_mode(shot: &[u8]) -> bool {
    image_size(shot) == Some((720, 400))
}

/// Width and height from a PNG's IHDR or a binary PPM's header (`P6 W H MAX`).
fn image_size(shot: &[u8]) -> Option<(u32, u32)> {
    if let Some(rest) = shot.strip_prefix(b"P6") {
        let mut fields = rest
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .take(2)
            .map(|f| std::str::from_utf8(f).ok()?.parse::<u32>().ok());
        return Some((fields.next()??, fields.next()??));
    }
    png_size(shot)
}

/// Width and height from a PNG's IHDR.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    let w = png.get(16..20)?;
    let h = png.get(20..24)?;
    Some((
        u32::from_be_bytes(w.try_into().ok()?),
        u32::from_be_bytes(h.try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screen_sizes_come_from_ppm_and_png_headers() {
        let mut ppm = b"P6\n720 400\n255\n".to_vec();
        ppm.extend([0xff, 0xfe, 0x80, 0x00]);
        assert_eq!(image_size(&ppm), Some((720, 400)));
        assert_eq!(image_size(b"P6 1280 800 255\n\xff"), Some((1280, 800)));
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend(1280u32.to_be_bytes());
        png.extend(800u32.to_be_bytes());
        assert_eq!(image_size(&png), Some((1280, 800)));
        assert_eq!(image_size(b"P6 x"), None);
    }

    #[test]
    fn xp_dumps_become_bytes() {
        let dump = "00000000000b8000: 0x53 0x07 0x65 0x07 0x61 0x07 0x42 0x07\r\n\
                    00000000000b8008: 0x49 0x07\r\n";
        assert_eq!(
            parse_xp(dump),
            vec![0x53, 7, 0x65, 7, 0x61, 7, 0x42, 7, 0x49, 7]
        );
    }
}
