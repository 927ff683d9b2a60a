//! `aido grant mint | list | revoke`: the operator's hand on capability grants. Each runs the
//! grant primitive in a session of its own (`aido grant`), so it is judged and journaled like
//! an agent's call; the session is under no grant, so it may list and revoke every grant of
//! this AIDO_HOME.

use std::path::Path;
use std::process::ExitCode;

use aido_actions::Action;
use aido_actions::meta::{GrantList, GrantMint, GrantRate, GrantRevoke};
use aido_policy::Layered;
use anyhow::{Result, bail};
use serde_json::Value;

use crate::GrantCmd;

/// Run `cmd` in its own journaled session.
pub async fn run(layered: Layered, home: &Path, cmd: &GrantCmd) -> Result<ExitCode> {
    let (action, json) = match cmd {
        GrantCmd::Mint {
            primitives,
            read,
            write,
            hosts,
            expires_in,
            uses,
            rate,
            json,
        } => {
            let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
            // Roots on the command line are the operator's: relative to where they typed it.
            let cwd = std::env::current_dir()?;
            let absolute = |v: &Vec<String>| {
                v.iter()
                    .map(|p| cwd.join(p).display().to_string())
                    .collect::<Vec<_>>()
            };
            let (read, write) = (absolute(read), absolute(write));
            let rate = rate.as_deref().map(parse_rate).transpose()?;
            (
                Action::GrantMint(GrantMint {
                    primitives: some(primitives),
                    read: some(&read),
                    write: some(&write),
                    hosts: some(hosts),
                    expires_in_s: *expires_in,
                    uses_max: *uses,
                    rate,
                }),
                *json,
            )
        }
        GrantCmd::List { json } => (Action::GrantList(GrantList { all: true }), *json),
        GrantCmd::Revoke { id } => (Action::GrantRevoke(GrantRevoke { id: id.clone() }), false),
    };
    let runtime = crate::open_runtime(layered, home).await?;
    let session = runtime
        .open_session(Some("aido grant".into()))
        .await
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let result = session.run(action, aido_actors::Hooks::default()).await;
    session.close("aido grant finished").await;
    runtime.shutdown().await;
    let output = match result {
        Ok(ran) => ran.outcome.output,
        Err(e) => {
            eprintln!("aido: [{}] {}", e.failure.code, e.failure.message);
            return Ok(ExitCode::from(1));
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&output)?);
        return Ok(ExitCode::SUCCESS);
    }
    match cmd {
        GrantCmd::Mint { .. } => {
            let grant = &output["grant"];
            eprintln!(
                "aido grant: minted {} ({}); its token (shown once):",
                grant["id"].as_str().unwrap_or_default(),
                describe(grant)
            );
            println!("{}", output["token"].as_str().unwrap_or_default());
        }
        GrantCmd::List { .. } => {
            let grants = output["grants"].as_array().cloned().unwrap_or_default();
            if grants.is_empty() {
                println!("no grants");
            }
            for g in &grants {
                println!("{}  {}", g["id"].as_str().unwrap_or_default(), describe(g));
            }
        }
        GrantCmd::Revoke { .. } => {
            for id in output["revoked"].as_array().into_iter().flatten() {
                println!("revoked {}", id.as_str().unwrap_or_default());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `10/60` as a rate.
fn parse_rate(text: &str) -> Result<GrantRate> {
    let Some((count, per_s)) = text.split_once('/') else {
        bail!("[grant_invalid] --rate is COUNT/SECONDS (10/60), not {text:?}");
    };
    match (count.trim().parse(), per_s.trim().parse()) {
        (Ok(count), Ok(per_s)) => Ok(GrantRate { count, per_s }),
        _ => bail!("[grant_invalid] --rate is COUNT/SECONDS (10/60), not {text:?}"),
    }
}

/// One line about a grant as `grant_list` shows it.
fn describe(g: &Value) -> String {
    let mut parts = Vec::new();
    for (key, label) in [
        ("primitives", "primitives"),
        ("read", "read"),
        ("write", "write"),
        ("hosts", "hosts"),
    ] {
        if let Some(list) = g["scope"][key].as_array() {
            let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
            parts.push(format!("{label} {}", names.join(",")));
        }
    }
    if let Some(uses) = g["uses"].as_u64() {
        match g["uses_max"].as_u64() {
            Some(max) => parts.push(format!("used {uses}/{max}")),
            None => parts.push(format!("used {uses}")),
        }
    }
    if g["revoked_ms"].is_u64() {
        parts.push("REVOKED".into());
    }
    if let Some(at) = g["expires_ms"].as_u64() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if now >= at {
            parts.push("EXPIRED".into());
        } else {
            parts.push(format!("expires in {} s", (at - now) / 1000));
        }
    }
    if parts.is_empty() {
        "unrestricted".into()
    } else {
        parts.join("; ")
    }
}
