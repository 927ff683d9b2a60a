//! `aido desktop doctor`: what a display offers, probed (never guessed from environment
//! variables). With `--display`, that display is probed and nothing is started; without it,
//! the owned session `[desktop]` describes is started, probed and stopped. An X display
//! (`:0`) is probed by the x11 backend (its extensions), a Wayland socket by the wlr backend
//! (its globals and sway IPC); the report names the backend and lists what it found under
//! that backend's key.

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
                server: aido_actors::desktop::actor::server(d.server),
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
    let backend = if aido_desktop::desktop::is_x11_display(&display) {
        "x11"
    } else {
        "wlr"
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
    let report = json!({
        "session": mode,
        "display": display,
        "enabled": d.enabled,
        "backend": backend,
        backend: capabilities,
        "notifications": notifications,
    });
    drop(owned);
    print(&report, as_json);
    Ok(if report[backend].get("error").is_some() {
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
    let backend = report["backend"].as_str().unwrap_or("x11");
    let x = &report[backend];
    let rows: [(&str, &str); 5] = if backend == "wlr" {
        [
            (
                "input (zwlr_virtual_pointer + zwp_virtual_keyboard)",
                "input",
            ),
            ("screenshots (wlr-screencopy)", "screenshot"),
            ("window list (sway IPC GET_TREE)", "client_list"),
            ("focus (sway IPC [con_id] focus)", "focus_by_wm"),
            ("clipboard (wlr-data-control)", "clipboard"),
        ]
    } else {
        [
            ("input (XTEST)", "input"),
            ("screenshots (GetImage)", "screenshot"),
            ("window list (_NET_CLIENT_LIST)", "client_list"),
            ("focus through the window manager", "focus_by_wm"),
            ("clipboard (selections)", "clipboard"),
        ]
    };
    if let Some(e) = x.get("error") {
        println!(
            "{backend}: unavailable ({}: {})",
            e["code"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        );
    } else {
        println!(
            "{backend}: {} screen {}x{}",
            x["server"].as_str().unwrap_or(""),
            x["screen"][0],
            x["screen"][1]
        );
        for (what, key) in rows {
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
}
