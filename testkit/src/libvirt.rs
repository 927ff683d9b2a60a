//! The host is `AIDO_TEST_LIBVIRT_URI` (default `qemu:///system`, the libvirtd that .ci/run
//! starts), inspected with `virsh`.

/// `virsh -c URI ARGS`: what it printed, or why it failed.
pub fn virsh(uri: &str, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("virsh")
        .arg("-c")
        .arg(uri)
        .args(args)
        .output()
        .map_err(|e| format!("virsh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// The libvirt host's URI when a libvirtd answers there; outside CI, `None`, said aloud (start
/// one with `virtlogd -d; libvirtd -d`); under CI, a failure.
pub fn host() -> Option<String> {
    let uri = std::env::var("AIDO_TEST_LIBVIRT_URI").unwrap_or_else(|_| "qemu:///system".into());
    let answered = virsh(&uri, &["uri"])
        .map(|_| uri.clone())
        .map_err(|e| format!("{e} (start one with `virtlogd -d; libvirtd -d`)"));
    let host = crate::lacking(&format!("libvirt host at {uri}"), answered)?;
    eprintln!("libvirt host: {host}");
    Some(host)
}
