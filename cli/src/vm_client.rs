use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What `aido vm` reads to reach a running aido.
#[derive(Serialize, Deserialize)]
pub struct ControlFile {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Sent as `Authorization: Bearer TOKEN` or `?token=TOKEN`.
    pub token: String,
    /// The aido process.
    pub pid: u32,
}

/// Where the control files of `home` live.
pub fn control_dir(home: &Path) -> PathBuf {
    home.join("vm").join("control")
}

/// The control file of a running aido on this AIDO_HOME (the newest whose process lives).
fn running(home: &Path) -> Result<ControlFile> {
    let dir = control_dir(home);
    let mut found: Vec<(std::time::SystemTime, ControlFile)> = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(file) = serde_json::from_str::<ControlFile>(&text) else {
            continue;
        };
        if Path::new(&format!("/proc/{}", file.pid)).exists() {
            let when = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            found.push((when, file));
        }
    }
    found.sort_by_key(|(when, _)| *when);
    match found.pop() {
        Some((_, file)) => Ok(file),
        None => bail!(
            "[control_not_running] no running aido with a live view on {} (start `aido mcp`)",
            home.display()
        ),
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn show(body: &Value) -> ExitCode {
    if let Some(code) = body.get("code").and_then(Value::as_str) {
        eprintln!("aido: [{code}] {}", body["message"].as_str().unwrap_or(""));
        return ExitCode::from(1);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(body.get("output").unwrap_or(body)).unwrap_or_default()
    );
    ExitCode::SUCCESS
}

/// Run a vm_* primitive through the running aido, as a person.
pub fn call(home: &Path, primitive: &str, args: Value) -> Result<ExitCode> {
    let c = running(home)?;
    let mut resp = agent()
        .post(&format!("{}/api/call/{primitive}", c.url))
        .header("Authorization", &format!("Bearer {}", c.token))
        .send_json(&args)
        .context("calling the running aido")?;
    let body: Value = resp.body_mut().read_json().context("reading its answer")?;
    Ok(show(&body))
}

/// The running machines.
pub fn list(home: &Path) -> Result<ExitCode> {
    let c = running(home)?;
    let mut resp = agent()
        .get(&format!("{}/api/vm", c.url))
        .header("Authorization", &format!("Bearer {}", c.token))
        .call()
        .context("calling the running aido")?;
    let body: Value = resp.body_mut().read_json()?;
    for name in body["machines"].as_array().into_iter().flatten() {
        println!("{}", name.as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

/// Save a machine's screen.
pub fn shot(home: &Path, vm: &str, output: &Path) -> Result<ExitCode> {
    let c = running(home)?;
    let mut resp = agent()
        .get(&format!("{}/api/vm/{vm}/screen.png", c.url))
        .header("Authorization", &format!("Bearer {}", c.token))
        .call()
        .context("calling the running aido")?;
    if resp.status() != 200 {
        let body: Value = resp.body_mut().read_json()?;
        return Ok(show(&body));
    }
    let png = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()?;
    std::fs::write(output, &png).with_context(|| format!("writing {}", output.display()))?;
    println!("{} ({} bytes)", output.display(), png.len());
    Ok(ExitCode::SUCCESS)
}

/// Where the live view is.
pub fn live(home: &Path) -> Result<ExitCode> {
    let c = running(home)?;
    println!("{}/?token={}", c.url, c.token);
    Ok(ExitCode::SUCCESS)
}
