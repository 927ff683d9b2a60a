//! Desktop notifications: the freedesktop `org.freedesktop.Notifications` interface on the
//! session bus, over zbus. aido sends as app "aido", with no actions (an agent cannot make a
//! person click a button that does something), and never waits forever.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::error::DesktopError;

const DESTINATION: &str = "org.freedesktop.Notifications";
const PATH: &str = "/org/freedesktop/Notifications";
/// How long a call to the notification server may take.
const CALL_TIMEOUT_MS: u64 = 5_000;

/// What the notification server says it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    /// Its name (`dunst`, `mako`).
    pub name: String,
    /// Its vendor.
    pub vendor: String,
    /// Its version.
    pub version: String,
    /// The spec version it implements.
    pub spec: String,
}

fn failed(e: impl std::fmt::Display) -> DesktopError {
    DesktopError::NotifyFailed { why: e.to_string() }
}

async fn connect(address: &str) -> Result<zbus::Connection, DesktopError> {
    let builder = zbus::connection::Builder::address(address);
    tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), builder.build())
        .await
        .map_err(|_| {
            failed(format!(
                "no bus answered at {address} within {CALL_TIMEOUT_MS} ms"
            ))
        })?
        .map_err(failed)
}

async fn call<B>(address: &str, method: &str, body: &B) -> Result<zbus::Message, DesktopError>
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    let conn = connect(address).await?;
    tokio::time::timeout(
        Duration::from_millis(CALL_TIMEOUT_MS),
        conn.call_method(Some(DESTINATION), PATH, Some(DESTINATION), method, body),
    )
    .await
    .map_err(|_| {
        failed(format!(
            "{method} got no answer within {CALL_TIMEOUT_MS} ms"
        ))
    })?
    .map_err(failed)
}

/// Show a notification; returns the id the server gave it.
pub async fn notify(
    address: &str,
    summary: &str,
    body: &str,
    expire_ms: i32,
) -> Result<u32, DesktopError> {
    let hints: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
    let actions: Vec<&str> = Vec::new();
    let reply = call(
        address,
        "Notify",
        &("aido", 0u32, "", summary, body, actions, hints, expire_ms),
    )
    .await?;
    reply.body().deserialize::<u32>().map_err(failed)
}

/// Ask the server what it is.
pub async fn server_info(address: &str) -> Result<ServerInfo, DesktopError> {
    let reply = call(address, "GetServerInformation", &()).await?;
    let (name, vendor, version, spec): (String, String, String, String) =
        reply.body().deserialize().map_err(failed)?;
    Ok(ServerInfo {
        name,
        vendor,
        version,
        spec,
    })
}
