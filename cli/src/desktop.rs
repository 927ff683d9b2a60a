//! `aido desktop doctor`: what a display offers, probed (never guessed from environment
//! variables). With `--display`, that display is probed and nothing is started; without it,
//! the owned session `[desktop]` describes is started, probed and stopped.

use std::process::ExitCode;

use aido_desktop::session::{OwnedSession, SessionOptions};
use aido_policy::{DesktopSession, Layered};
use anyhow::Result;
use serde_json::{Value, json};

/// Probe and print.
pub fn doctor(layered: &Layered, display: Option<&str>, as_json: bool) -> Result<ExitCode> {
    let d = &layered.config.desktop;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mode, owned, display, bus) = match (display, d.session) {
        (Some(display), _) => ("attach", None, display.to_owned(), None),
        (None, DesktopSession::Attach) => (
            "attach",
            None,
            d.display.clone(),
            Some(d.bus.clone()).filter(|b| !b.is_empty()),
        ),
        (None, DesktopSession::Owned) => {
            let session = OwnedSession::start(&SessionOptions {
                width: d.width,
                height: d.height,
                window_manager: Some(d.window_manager.clone()).filter(|w| !w.is_empty()),
                autostart: Vec::new(),
                runtime_parent: std::env::temp_dir(),
                ..SessionOptions::default()
            });
            match session {
                Ok(s) => {
                    let (display, bus) = (s.display.clone(), Some(s.bus.clone()));
                    ("owned", Some(s), display, bus)
                }
                Err(e) => {
                    let report = json!({"session": "owned", "error": {"code": e.code(), "message": e.to_string()}});
                    print(&report, as_json);
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
    };
    let capabilities = match aido_desktop::doctor(&display) {
        Ok(c) => serde_json::to_value(&c)?,
        Err(e) => json!({"error": {"code": e.code(), "message": e.to_string()}}),
    };
    let notifications = match &bus {
        Some(bus) => match runtime.block_on(aido_desktop::notify::server_info(bus)) {
            Ok(info) => serde_json::to_value(info)?,
            Err(e) => json!({"error": {"code": e.code(), "message": e.to_string()}}),
        },
        None => {
            json!({"error": {"code": "desktop_no_bus", "message": "no session bus is configured"}})
        }
    };
    let wayland = if std::env::var_os("WAYLAND_DISPLAY").is_some() {
        "WAYLAND_DISPLAY is set, but the wlr backend is not built: it was not probed"
    } else {
        "not probed (the wlr backend is not built)"
    };
    let report = json!({
        "session": mode,
        "display": display,
        "enabled": d.enabled,
        "x11": capabilities,
        "notifications": notifications,
        "wayland": wayland,
    });
    drop(owned);
    print(&report, as_json);
    Ok(if report["x11"].get("error").is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[allow(clippy::print_stdout)]
fn print(report: &Value, as_json: bool) {
    if as_json {
        println!("{report}");
        return;
    }
    println!(
        "desktop session: {} (display {})",
        report["session"].as_str().unwrap_or("?"),
        report["display"].as_str().unwrap_or("?")
    );
    println!("desktop.enabled: {}", report["enabled"]);
    let x = &report["x11"];
    if let Some(e) = x.get("error") {
        println!(
            "x11: unavailable ({}: {})",
            e["code"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        );
    } else {
        println!(
            "x11: {} screen {}x{}",
            x["server"].as_str().unwrap_or(""),
            x["screen"][0],
            x["screen"][1]
        );
        for (what, key) in [
            ("input (XTEST)", "input"),
            ("screenshots (GetImage)", "screenshot"),
            ("window list (_NET_CLIENT_LIST)", "client_list"),
            ("focus through the window manager", "focus_by_wm"),
            ("clipboard (selections)", "clipboard"),
        ] {
            println!(
                "  {what}: {}",
                if x[key] == Value::Bool(true) {
                    "yes"
                } else {
                    "no"
                }
            );
        }
        println!(
            "  window manager: {}",
            x["window_manager"].as_str().unwrap_or("none")
        );
        if x["xwayland"] == Value::Bool(true) {
            println!("  XWayland: yes (the x11 backend refuses to drive it)");
        }
    }
    match report["notifications"].get("error") {
        Some(e) => println!(
            "notifications: unavailable ({})",
            e["message"].as_str().unwrap_or("")
        ),
        None => println!(
            "notifications: {} {}",
            report["notifications"]["name"].as_str().unwrap_or(""),
            report["notifications"]["version"].as_str().unwrap_or("")
        ),
    }
    println!("wayland: {}", report["wayland"].as_str().unwrap_or(""));
}
