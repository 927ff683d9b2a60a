//! Machines on a libvirt host (`qemu:///system`, `qemu+ssh://host/system`): aido's side. The
//! libvirt client library runs in a helper process of its own per guest (`aido-native
//! libvirt`, [`crate::native`]); see the `aido-native` crate for what it does there: the
//! guest's files go to the host through libvirt's storage API, the domain is transient, has
//! no network interface and runs under libvirt's seccomp sandbox, QMP commands pass through
//! `virDomainQemuMonitorCommand`, the screen comes from `virDomainScreenshot` and the serial
//! console is copied into the machine's log. If aido dies, the helper sees its input close
//! and destroys the guest.
//!
//! Every call here blocks: [`crate::Machine`] runs them on tokio's blocking pool.

use std::path::Path;
use std::sync::Mutex;

use crate::error::VmError;
use crate::native::{HELPER_NAME, Helper, LIBVIRT_MODE, LibvirtRequest};
use crate::spec::MachineSpec;

/// The storage pool aido keeps guest files in on a libvirt host.
pub const POOL: &str = "aido";
/// Every domain aido defines is named `aido-<machine>-<pid>-<n>`, `pid` being the helper
/// process that made it: the machine and the pid tell a leftover from a live one.
pub const DOMAIN_PREFIX: &str = "aido-";

/// This machine's name as it goes into domain names: letters, digits and `_`, at most 24.
fn machine_tag() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let tag: String = name
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(24)
        .collect();
    if tag.is_empty() { "host".into() } else { tag }
}

/// `aido-<this machine>-`: every domain this machine's aido processes define starts so.
pub fn domain_prefix() -> String {
    format!("{DOMAIN_PREFIX}{}-", machine_tag())
}

/// The name of the `n`th domain the process `pid` (a libvirt helper) defines.
pub fn domain_name(pid: u32, n: u64) -> String {
    format!("{}{pid}-{n}", domain_prefix())
}

/// The pid in a domain name of this machine's, if it is one.
pub fn domain_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(&domain_prefix())?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// One guest on a libvirt host, held by its helper.
pub struct Guest {
    uri: String,
    name: String,
    helper: Mutex<Option<Helper>>,
}

impl Guest {
    /// Define and start a transient domain for `spec` on `uri`, its serial console copied into
    /// `serial_log`. The guest starts paused until the console is attached, so not a byte of
    /// it is lost; it runs when this returns.
    pub fn create(uri: &str, spec: &MachineSpec, serial_log: &Path) -> Result<Self, VmError> {
        let mut helper = Helper::start(LIBVIRT_MODE)?;
        let request = LibvirtRequest::Create {
            uri: uri.to_owned(),
            spec: spec.clone(),
            serial_log: serial_log.to_owned(),
        };
        let name = match helper.call::<_, String>(&request, &[]) {
            Ok((name, _)) => name,
            Err(error) => {
                helper.finish();
                return Err(error);
            }
        };
        Ok(Self {
            uri: uri.to_owned(),
            name,
            helper: Mutex::new(Some(helper)),
        })
    }

    /// The host's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The domain's name on the host.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn ask<A: serde::de::DeserializeOwned>(
        &self,
        request: &LibvirtRequest,
        body: &[u8],
    ) -> Result<(A, Vec<u8>), VmError> {
        let gone = |message: &str| VmError::Helper {
            helper: HELPER_NAME,
            message: message.into(),
        };
        let mut helper = self
            .helper
            .lock()
            .map_err(|_| gone("the guest's lock is poisoned"))?;
        helper
            .as_mut()
            .ok_or_else(|| gone("the guest was destroyed"))?
            .call(request, body)
    }

    /// Run one QMP command (JSON) through libvirt; QEMU's whole reply.
    pub fn monitor(&self, command: &str) -> Result<String, VmError> {
        let request = LibvirtRequest::Monitor {
            command: command.to_owned(),
        };
        Ok(self.ask(&request, &[])?.0)
    }

    /// The screen as libvirt hands it over (PNG from QEMU 10 hosts, PPM from older ones).
    pub fn screenshot(&self) -> Result<Vec<u8>, VmError> {
        Ok(self.ask::<()>(&LibvirtRequest::Screenshot, &[])?.1)
    }

    /// Write bytes to the guest's serial console.
    pub fn serial_write(&self, bytes: &[u8]) -> Result<(), VmError> {
        self.ask::<()>(&LibvirtRequest::SerialWrite, bytes)
            .map(drop)
    }

    /// Take a snapshot of disk and memory named `name`.
    pub fn snapshot_save(&self, name: &str) -> Result<(), VmError> {
        let request = LibvirtRequest::SnapshotSave { name: name.into() };
        self.ask::<()>(&request, &[]).map(drop)
    }

    /// Go back to snapshot `name` (running).
    pub fn snapshot_load(&self, name: &str) -> Result<(), VmError> {
        let request = LibvirtRequest::SnapshotLoad { name: name.into() };
        self.ask::<()>(&request, &[]).map(drop)
    }

    /// Delete snapshot `name`.
    pub fn snapshot_delete(&self, name: &str) -> Result<(), VmError> {
        let request = LibvirtRequest::SnapshotDelete { name: name.into() };
        self.ask::<()>(&request, &[]).map(drop)
    }

    /// The snapshots' names.
    pub fn snapshot_list(&self) -> Result<Vec<String>, VmError> {
        Ok(self.ask(&LibvirtRequest::SnapshotList, &[])?.0)
    }

    /// Pull the plug: destroy the domain, delete its overlay, stop the helper. Safe to call
    /// twice.
    pub fn destroy(&mut self) {
        let helper = self.helper.get_mut().ok().and_then(Option::take);
        if let Some(mut helper) = helper {
            let _ = helper.call::<_, ()>(&LibvirtRequest::Destroy, &[]);
            helper.finish();
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Destroy the domains this machine's aido processes left on `uri` when they died (named
/// after a process that is gone); the names of those destroyed.
pub fn reap(uri: &str) -> Result<Vec<String>, VmError> {
    let mut helper = Helper::start(LIBVIRT_MODE)?;
    let reaped = helper.call::<_, Vec<String>>(
        &LibvirtRequest::Reap {
            uri: uri.to_owned(),
        },
        &[],
    );
    helper.finish();
    Ok(reaped?.0)
}
