//! Machines on a libvirt host (`qemu:///system`, `qemu+ssh://host/system`), through the virt
//! crate: the libvirt helper's side (`aido-native libvirt`). One helper holds one guest; when
//! its input closes it destroys the guest (aido stopped the machine, or died).
//!
//! The guest's files go to the host through libvirt's storage API (a `dir` pool named `aido`,
//! uploaded once per content hash), so a remote host needs nothing from this one. The domain
//! is transient (it disappears when destroyed), has no network interface, and QEMU runs under
//! libvirt's own seccomp sandbox. QMP commands pass through `virDomainQemuMonitorCommand`, so
//! input, screen text and status work exactly as on a local machine; the screen comes from
//! `virDomainScreenshot`, the serial console from `virDomainOpenConsole`, and snapshots are
//! libvirt's (disk and memory, internal to the qcow2 overlay).
//!
//! Every call here blocks; the helper answers one request at a time.

use std::io::Write;
use std::path::Path;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use virt::connect::Connect;
use virt::domain::Domain;
use virt::storage_pool::StoragePool;
use virt::storage_vol::StorageVol;
use virt::stream::Stream;

use aido_vm::libvirt::{DOMAIN_PREFIX, POOL, domain_name, domain_pid};
use aido_vm::native::{LibvirtRequest, Reply, read_frame, write_frame};
use aido_vm::{MachineSpec, VmError};

/// Where the pool lives on the host when aido has to define it.
const POOL_PATH: &str = "/var/lib/libvirt/images/aido";

/// Upload chunk.
const CHUNK: usize = 1 << 20;

static QUIET: Once = Once::new();
static NEXT: AtomicU64 = AtomicU64::new(0);

fn err(op: &'static str) -> impl Fn(virt::error::Error) -> VmError {
    move |e| VmError::Libvirt {
        op: op.into(),
        message: e.message().to_owned(),
    }
}

/// Open a connection to `uri`.
pub fn connect(uri: &str) -> Result<Connect, VmError> {
    // libvirt prints every error to stderr by default; aido reports them itself.
    QUIET.call_once(virt::error::clear_error_callback);
    Connect::open(Some(uri)).map_err(err("connect"))
}

/// One guest on a libvirt host.
pub struct Guest {
    uri: String,
    conn: Connect,
    dom: Domain,
    name: String,
    console: Stream,
    reader: Option<std::thread::JoinHandle<()>>,
    overlay: Option<StorageVol>,
    destroyed: bool,
}

/// The domain XML for `spec`. No `<interface>`: the guest has no network.
fn domain_xml(
    name: &str,
    spec: &MachineSpec,
    kernel: &str,
    initrd: &str,
    disk: Option<&str>,
) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('\'', "&apos;")
    };
    let kind = if spec.accel == aido_vm::Accel::Kvm {
        "kvm"
    } else {
        "qemu"
    };
    let disk = disk
        .map(|d| {
            format!(
                "<disk type='file' device='disk'><driver name='qemu' type='qcow2'/>\
                 <source file='{}'/><target dev='vda' bus='virtio'/></disk>",
                esc(d)
            )
        })
        .unwrap_or_default();
    format!(
        "<domain type='{kind}'>\
           <name>{name}</name>\
           <memory unit='MiB'>{mem}</memory><vcpu>1</vcpu>\
           <os><type arch='x86_64' machine='pc'>hvm</type>\
             <kernel>{kernel}</kernel><initrd>{initrd}</initrd><cmdline>{cmdline}</cmdline></os>\
           <features><acpi/>{tcg}</features>\
           <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>\
           <devices>{disk}\
             <controller type='usb' model='qemu-xhci'/><input type='tablet' bus='usb'/>\
             <serial type='pty'><target port='0'/></serial>\
             <console type='pty'><target type='serial' port='0'/></console>\
             <video><model type='vga'/></video><memballoon model='none'/>\
           </devices>\
         </domain>",
        mem = spec.memory_mb,
        tcg = if kind == "qemu" {
            format!(
                "<tcg><tb-cache unit='MiB'>{}</tb-cache></tcg>",
                spec.tcg_tb_mb
            )
        } else {
            String::new()
        },
        kernel = esc(kernel),
        initrd = esc(initrd),
        cmdline = esc(&spec.append),
    )
}

/// The `aido` pool, defined and started when missing.
fn pool(conn: &Connect) -> Result<StoragePool, VmError> {
    let pool = match conn.lookup_storage_pool_by_name(POOL) {
        Ok(p) => p,
        Err(_) => {
            let xml = format!(
                "<pool type='dir'><name>{POOL}</name><target><path>{POOL_PATH}</path></target></pool>"
            );
            let p = conn
                .define_storage_pool_xml(&xml, 0)
                .map_err(err("pool-define"))?;
            p.build(0).map_err(err("pool-build"))?;
            let _ = p.set_autostart(true);
            p
        }
    };
    if !pool.is_active().map_err(err("pool-info"))? {
        pool.create(0).map_err(err("pool-start"))?;
    }
    pool.refresh(0).map_err(err("pool-refresh"))?;
    Ok(pool)
}

/// Volumes this process already has on a host, by (URI, local file, its size and mtime): a
/// machine started again on the same host neither reads nor hashes the image files again.
type Uploaded =
    std::collections::HashMap<(String, std::path::PathBuf, u64, std::time::SystemTime), String>;
static UPLOADED: std::sync::Mutex<Option<Uploaded>> = std::sync::Mutex::new(None);

/// [`upload`], remembered per host and file version.
fn upload_once(uri: &str, pool: &StoragePool, file: &Path) -> Result<String, VmError> {
    let key = std::fs::metadata(file)
        .and_then(|m| Ok((uri.to_owned(), file.to_owned(), m.len(), m.modified()?)))
        .map_err(|e| VmError::io("stat", file, e))?;
    if let Some(path) = UPLOADED
        .lock()
        .ok()
        .and_then(|u| u.as_ref()?.get(&key).cloned())
        // Still there (someone may have deleted it on the host).
        && pool
            .connect()
            .is_ok_and(|c| c.lookup_storage_vol_by_path(&path).is_ok())
    {
        return Ok(path);
    }
    let path = upload(pool, file)?;
    if let Ok(mut u) = UPLOADED.lock() {
        u.get_or_insert_with(Default::default)
            .insert(key, path.clone());
    }
    Ok(path)
}

/// Upload `file` into the pool once per content: the volume is named by its blake3 hash.
fn upload(pool: &StoragePool, file: &Path) -> Result<String, VmError> {
    let bytes = std::fs::read(file).map_err(|e| VmError::io("read", file, e))?;
    let leaf = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = format!(
        "{DOMAIN_PREFIX}{}-{leaf}",
        &blake3::hash(&bytes).to_hex()[..16]
    );
    // Clients on this machine upload one at a time (a pool has no atomic rename).
    let lock_path = std::env::temp_dir().join("aido-libvirt-upload.lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| VmError::io("create", &lock_path, e))?;
    lock.lock()
        .map_err(|e| VmError::io("lock", &lock_path, e))?;
    if let Ok(vol) = pool.lookup_storage_vol_by_name(&name) {
        return vol.path().map_err(err("vol-path"));
    }
    // libvirt copies by `qemu-img convert`, which must keep a qcow2 a qcow2.
    let format = if bytes.starts_with(b"QFI\xfb") {
        "qcow2"
    } else {
        "raw"
    };
    let xml = format!(
        "<volume><name>{name}.{}-{}.part</name><capacity unit='bytes'>{}</capacity>\
         <target><format type='raw'/></target></volume>",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        bytes.len()
    );
    let part = StorageVol::create_xml(pool, &xml, 0).map_err(err("vol-create"))?;
    let sent = (|| {
        let conn = pool.connect().map_err(err("vol-upload"))?;
        let stream = Stream::new(&conn, 0).map_err(err("vol-upload"))?;
        part.upload(&stream, 0, bytes.len() as u64, 0)
            .map_err(err("vol-upload"))?;
        for chunk in bytes.chunks(CHUNK) {
            send_all(&stream, chunk, "vol-upload")?;
        }
        stream.finish().map_err(err("vol-upload"))
    })();
    if let Err(e) = sent {
        let _ = part.delete(0);
        return Err(e);
    }
    // Only a complete upload gets the real name, so a killed upload is never mistaken for one.
    let xml = format!(
        "<volume><name>{name}</name><capacity unit='bytes'>{}</capacity>\
         <target><format type='{format}'/></target></volume>",
        bytes.len()
    );
    let vol = StorageVol::create_xml_from(pool, &xml, &part, 0).map_err(err("vol-create"));
    let _ = part.delete(0);
    vol?.path().map_err(err("vol-path"))
}

/// A qcow2 overlay on `base` (a path in the pool) for one machine.
fn overlay(pool: &StoragePool, name: &str, base: &str, size: u64) -> Result<StorageVol, VmError> {
    let xml = format!(
        "<volume><name>{name}-overlay.qcow2</name><capacity unit='bytes'>{size}</capacity>\
         <target><format type='qcow2'/></target>\
         <backingStore><path>{base}</path><format type='qcow2'/></backingStore></volume>"
    );
    StorageVol::create_xml(pool, &xml, 0).map_err(err("vol-create"))
}

/// A qcow2 header's virtual size (bytes 24..32, big endian), when the file is readable here.
fn qcow2_virtual_size(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut head = [0u8; 32];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    (head[..4] == *b"QFI\xfb")
        .then(|| u64::from_be_bytes(head[24..32].try_into().unwrap_or([0; 8])))
}

/// Destroy domains aido processes of this machine left behind on the host: those named
/// `aido-<this machine>-<pid>-<n>` whose pid is no longer a running process here. Other
/// machines' domains are never touched.
pub fn reap(conn: &Connect) -> Vec<String> {
    let mut reaped = Vec::new();
    let Ok(domains) = conn.list_all_domains(0) else {
        return reaped;
    };
    for dom in domains {
        let Ok(name) = dom.name() else { continue };
        let Some(pid) = domain_pid(&name) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = dom.destroy();
            let _ = dom.undefine();
            reaped.push(name);
        }
    }
    reaped
}

impl Guest {
    /// Define and start a transient domain for `spec` on `uri`, its serial console copied into
    /// `serial_log`. The guest starts paused until the console is attached, so not a byte of
    /// it is lost; it runs when this returns.
    pub fn create(uri: &str, spec: &MachineSpec, serial_log: &Path) -> Result<Self, VmError> {
        let conn = connect(uri)?;
        reap(&conn);
        let pool = pool(&conn)?;
        let kernel = upload_once(uri, &pool, &spec.kernel)?;
        let initrd = upload_once(uri, &pool, &spec.initrd)?;
        let name = domain_name(std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let overlay = match &spec.disk {
            Some(local) => {
                // The size comes from the local file: on a remote host the pool path is not here.
                let size = qcow2_virtual_size(local).ok_or_else(|| VmError::Libvirt {
                    op: "vol-create".into(),
                    message: format!("{} is not a qcow2 image", local.display()),
                })?;
                let base = upload_once(uri, &pool, local)?;
                Some(overlay(&pool, &name, &base, size)?)
            }
            None => None,
        };
        let disk = match &overlay {
            Some(v) => Some(v.path().map_err(err("vol-path"))?),
            None => None,
        };
        let xml = domain_xml(&name, spec, &kernel, &initrd, disk.as_deref());
        let created = Stream::new(&conn, 0)
            .map_err(err("console"))
            .and_then(|console| {
                conn.create_domain_xml(&xml, virt::sys::VIR_DOMAIN_START_PAUSED)
                    .map(|dom| (console, dom))
                    .map_err(err("domain-create"))
            });
        let (console, dom) = match created {
            Ok(made) => made,
            Err(e) => {
                if let Some(v) = &overlay {
                    let _ = v.delete(0);
                }
                return Err(e);
            }
        };
        // From here on the guest's Drop destroys the domain and deletes the overlay.
        let mut guest = Self {
            uri: uri.to_owned(),
            conn,
            dom,
            name,
            console,
            reader: None,
            overlay,
            destroyed: false,
        };
        guest
            .dom
            .open_console(None, &guest.console, virt::sys::VIR_DOMAIN_CONSOLE_FORCE)
            .map_err(err("console"))?;
        let log =
            std::fs::File::create(serial_log).map_err(|e| VmError::io("create", serial_log, e))?;
        let stream = guest.console.clone();
        guest.reader = Some(std::thread::spawn(move || copy_console(&stream, log)));
        guest.dom.resume().map_err(err("resume"))?;
        Ok(guest)
    }

    /// The host's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The domain's name on the host.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run one QMP command (JSON) through libvirt; QEMU's whole reply.
    pub fn monitor(&self, command: &str) -> Result<String, VmError> {
        self.dom
            .qemu_monitor_command(command, 0)
            .map_err(err("qemu-monitor-command"))
    }

    /// The screen as libvirt hands it over (PNG from QEMU 10 hosts, PPM from older ones).
    pub fn screenshot(&self) -> Result<Vec<u8>, VmError> {
        let stream = Stream::new(&self.conn, 0).map_err(err("screenshot"))?;
        self.dom
            .screenshot(&stream, 0, 0)
            .map_err(err("screenshot"))?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = stream.recv(&mut buf).map_err(err("screenshot"))?;
            let Ok(n) = usize::try_from(n) else { break };
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let _ = stream.finish();
        Ok(out)
    }

    /// Write bytes to the guest's serial console.
    pub fn serial_write(&self, bytes: &[u8]) -> Result<(), VmError> {
        send_all(&self.console, bytes, "console")
    }

    /// Take a snapshot of disk and memory named `name`.
    pub fn snapshot_save(&self, name: &str) -> Result<(), VmError> {
        let xml = format!("<domainsnapshot><name>{name}</name></domainsnapshot>");
        self.dom
            .create_snapshot_xml(&xml, 0)
            .map(|_| ())
            .map_err(err("snapshot-create"))
    }

    /// Go back to snapshot `name` (running).
    pub fn snapshot_load(&self, name: &str) -> Result<(), VmError> {
        let snap =
            Domain::lookup_snapshot_by_name(&self.dom, name, 0).map_err(err("snapshot-revert"))?;
        snap.revert(virt::sys::VIR_DOMAIN_SNAPSHOT_REVERT_RUNNING)
            .map_err(err("snapshot-revert"))
    }

    /// Delete snapshot `name`.
    pub fn snapshot_delete(&self, name: &str) -> Result<(), VmError> {
        let snap =
            Domain::lookup_snapshot_by_name(&self.dom, name, 0).map_err(err("snapshot-delete"))?;
        snap.delete(0).map_err(err("snapshot-delete"))
    }

    /// The snapshots' names.
    pub fn snapshot_list(&self) -> Result<Vec<String>, VmError> {
        let snaps = self
            .dom
            .list_all_snapshots(0)
            .map_err(err("snapshot-list"))?;
        Ok(snaps.iter().filter_map(|s| s.name().ok()).collect())
    }

    /// Pull the plug: destroy the domain, delete its overlay. Safe to call twice.
    pub fn destroy(&mut self) {
        if self.destroyed {
            return;
        }
        self.destroyed = true;
        let _ = self.console.clone().abort();
        // Snapshot metadata would keep a transient domain's name busy.
        if let Ok(snaps) = self.dom.list_all_snapshots(0) {
            for s in snaps {
                let _ = s.delete(virt::sys::VIR_DOMAIN_SNAPSHOT_DELETE_METADATA_ONLY);
            }
        }
        let _ = self.dom.destroy();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        if let Some(v) = self.overlay.take() {
            let _ = v.delete(0);
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Send all of `bytes` on a blocking stream (a send may take part of them).
fn send_all(stream: &Stream, bytes: &[u8], op: &'static str) -> Result<(), VmError> {
    let mut off = 0;
    while off < bytes.len() {
        let n = stream.send(&bytes[off..]).map_err(err(op))?;
        off += usize::try_from(n).unwrap_or(0).max(1);
    }
    Ok(())
}

/// Copy the console into the serial log until the stream ends.
fn copy_console(stream: &Stream, mut log: std::fs::File) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = stream.recv(&mut buf) {
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 || log.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

/// Serves one guest over standard input and output until the input closes (or `Destroy`):
/// see [`aido_vm::native`].
pub fn serve() -> std::process::ExitCode {
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut guest: Option<Guest> = None;
    // Until aido is gone (or says nothing readable more): the guest goes with it.
    while let Ok(Some((request, body))) = read_frame::<LibvirtRequest>(&mut input) {
        let last = matches!(request, LibvirtRequest::Destroy);
        let (reply, body) = answer(&mut guest, request, &body);
        if write_frame(&mut output, &reply, &body).is_err() || last {
            break;
        }
    }
    if let Some(mut guest) = guest.take() {
        guest.destroy();
    }
    std::process::ExitCode::SUCCESS
}

fn answer(
    guest: &mut Option<Guest>,
    request: LibvirtRequest,
    body: &[u8],
) -> (Reply<serde_json::Value>, Vec<u8>) {
    let done = |value: serde_json::Value| Reply::Done { value };
    let failed = |error: VmError| (Reply::failed(&error), Vec::new());
    let no_guest = || VmError::Libvirt {
        op: "guest".into(),
        message: "no guest was created on this helper".into(),
    };
    let result: Result<(serde_json::Value, Vec<u8>), VmError> = match request {
        LibvirtRequest::Create {
            uri,
            spec,
            serial_log,
        } => match guest {
            Some(_) => Err(VmError::Libvirt {
                op: "domain-create".into(),
                message: "this helper already holds a guest".into(),
            }),
            None => Guest::create(&uri, &spec, &serial_log).map(|made| {
                let name = serde_json::Value::from(made.name().to_owned());
                *guest = Some(made);
                (name, Vec::new())
            }),
        },
        LibvirtRequest::Reap { uri } => connect(&uri).map(|conn| (reap(&conn).into(), Vec::new())),
        LibvirtRequest::Destroy => {
            if let Some(mut held) = guest.take() {
                held.destroy();
            }
            Ok((serde_json::Value::Null, Vec::new()))
        }
        other => match guest.as_ref() {
            None => Err(no_guest()),
            Some(held) => held.on(other, body),
        },
    };
    match result {
        Ok((value, body)) => (done(value), body),
        Err(error) => failed(error),
    }
}

impl Guest {
    /// One request about the guest: its answer and the reply's body.
    fn on(
        &self,
        request: LibvirtRequest,
        body: &[u8],
    ) -> Result<(serde_json::Value, Vec<u8>), VmError> {
        let none = |()| (serde_json::Value::Null, Vec::new());
        match request {
            LibvirtRequest::Monitor { command } => {
                self.monitor(&command).map(|said| (said.into(), Vec::new()))
            }
            LibvirtRequest::Screenshot => {
                self.screenshot().map(|png| (serde_json::Value::Null, png))
            }
            LibvirtRequest::SerialWrite => self.serial_write(body).map(none),
            LibvirtRequest::SnapshotSave { name } => self.snapshot_save(&name).map(none),
            LibvirtRequest::SnapshotLoad { name } => self.snapshot_load(&name).map(none),
            LibvirtRequest::SnapshotDelete { name } => self.snapshot_delete(&name).map(none),
            LibvirtRequest::SnapshotList => {
                self.snapshot_list().map(|names| (names.into(), Vec::new()))
            }
            LibvirtRequest::Create { .. }
            | LibvirtRequest::Destroy
            | LibvirtRequest::Reap { .. } => Err(VmError::Libvirt {
                op: "guest".into(),
                message: "not a request about the guest".into(),
            }),
        }
    }
}
