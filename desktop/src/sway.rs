//! The sway / i3 IPC (the `i3-ipc` framing: magic, length, type, JSON), for the window tree and
//! focus: `GET_TREE` names every view with its con_id, app_id, pid, rect and focus;
//! `[con_id=N] focus` moves the focus. The socket is found by probing, not from `SWAYSOCK`:
//! the compositor behind the Wayland socket says its pid (SO_PEERCRED), and sway names its IPC
//! socket `sway-ipc.<uid>.<pid>.sock` in the same runtime directory.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::backend::{Rect, Window};
use crate::error::DesktopError;

const MAGIC: &[u8; 6] = b"i3-ipc";
/// RUN_COMMAND.
pub const RUN_COMMAND: u32 = 0;
/// GET_TREE.
pub const GET_TREE: u32 = 4;
/// GET_VERSION.
pub const GET_VERSION: u32 = 7;
/// Largest reply read (a tree of a few hundred windows is well under this).
const REPLY_MAX: usize = 16 << 20;

/// A connection to the IPC socket (reconnected once if it broke).
pub struct Ipc {
    path: PathBuf,
    stream: Option<UnixStream>,
}

impl Ipc {
    /// Connect and ask for the version (so a socket that is not sway's fails here).
    pub fn connect(path: &Path) -> Result<(Self, String), DesktopError> {
        let mut ipc = Self {
            path: path.to_owned(),
            stream: None,
        };
        let v = ipc.request(GET_VERSION, "")?;
        let version = v["human_readable"].as_str().unwrap_or("?");
        let variant = v["variant"].as_str().unwrap_or("sway");
        Ok((ipc, format!("{variant} {version}")))
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One request and its reply.
    pub fn request(&mut self, kind: u32, payload: &str) -> Result<Value, DesktopError> {
        match self.try_request(kind, payload) {
            Ok(v) => Ok(v),
            Err(_) => {
                self.stream = None;
                self.try_request(kind, payload)
                    .map_err(|e| DesktopError::protocol("the sway IPC", e))
            }
        }
    }

    fn try_request(&mut self, kind: u32, payload: &str) -> std::io::Result<Value> {
        if self.stream.is_none() {
            let s = UnixStream::connect(&self.path)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.set_write_timeout(Some(Duration::from_secs(5)))?;
            self.stream = Some(s);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(std::io::Error::other("no IPC stream"));
        };
        let len = u32::try_from(payload.len()).map_err(std::io::Error::other)?;
        let mut msg = Vec::with_capacity(14 + payload.len());
        msg.extend_from_slice(MAGIC);
        msg.extend_from_slice(&len.to_le_bytes());
        msg.extend_from_slice(&kind.to_le_bytes());
        msg.extend_from_slice(payload.as_bytes());
        stream.write_all(&msg)?;
        let mut header = [0u8; 14];
        stream.read_exact(&mut header)?;
        if &header[..6] != MAGIC {
            return Err(std::io::Error::other("not an i3-ipc reply"));
        }
        let len = u32::from_le_bytes([header[6], header[7], header[8], header[9]]) as usize;
        if len > REPLY_MAX {
            return Err(std::io::Error::other(format!("a {len}-byte reply")));
        }
        let mut body = vec![0u8; len];
        stream.read_exact(&mut body)?;
        serde_json::from_slice(&body).map_err(std::io::Error::other)
    }

    /// Every view, bottom first: views on hidden workspaces, then visible tiled ones, then
    /// visible floating ones (so the last one containing a point is the one on top).
    pub fn windows(&mut self) -> Result<Vec<Window>, DesktopError> {
        let tree = self.request(GET_TREE, "")?;
        let mut found = Vec::new();
        walk(&tree, (0, 0), false, &mut found);
        found.sort_by_key(|(visible, floating, _)| (*visible, *floating));
        Ok(found.into_iter().map(|(_, _, w)| w).collect())
    }

    /// Run a command; an error unless every part succeeded.
    pub fn command(&mut self, command: &str) -> Result<(), DesktopError> {
        let reply = self.request(RUN_COMMAND, command)?;
        let results = reply.as_array().cloned().unwrap_or_default();
        if results.is_empty() {
            return Err(DesktopError::protocol("a sway command", "no reply"));
        }
        for r in results {
            if r["success"] != Value::Bool(true) {
                return Err(DesktopError::protocol(
                    "a sway command",
                    r["error"].as_str().unwrap_or("refused").to_owned(),
                ));
            }
        }
        Ok(())
    }
}

/// A node's rect.
fn rect_of(r: &Value) -> Rect {
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    Rect {
        x: int(&r["x"]) as i32,
        y: int(&r["y"]) as i32,
        width: int(&r["width"]).max(0) as u32,
        height: int(&r["height"]).max(0) as u32,
    }
}

/// The smallest rect holding both (an empty one adds nothing).
fn union(a: Rect, b: Rect) -> Rect {
    if b.width == 0 || b.height == 0 {
        return a;
    }
    let x0 = a.x.min(b.x);
    let y0 = a.y.min(b.y);
    let x1 = (i64::from(a.x) + i64::from(a.width)).max(i64::from(b.x) + i64::from(b.width));
    let y1 = (i64::from(a.y) + i64::from(a.height)).max(i64::from(b.y) + i64::from(b.height));
    Rect {
        x: x0,
        y: y0,
        width: (x1 - i64::from(x0)) as u32,
        height: (y1 - i64::from(y0)) as u32,
    }
}

/// `parent` is the origin `deco_rect` is relative to. A view's rect is its content and its
/// title bar (which shows its title: a deny-listed window is blacked out with it).
fn walk(node: &Value, parent: (i32, i32), floating: bool, out: &mut Vec<(bool, bool, Window)>) {
    let is_view = node.get("pid").is_some_and(|p| !p.is_null())
        && node["nodes"].as_array().is_none_or(|n| n.is_empty());
    if is_view {
        let props = &node["window_properties"];
        let app_id = node["app_id"]
            .as_str()
            .or_else(|| props["class"].as_str())
            .unwrap_or("")
            .to_owned();
        let instance = node["app_id"]
            .as_str()
            .or_else(|| props["instance"].as_str())
            .unwrap_or("")
            .to_owned();
        let mut deco = rect_of(&node["deco_rect"]);
        deco.x += parent.0;
        deco.y += parent.1;
        let window = Window {
            id: node["id"].as_u64().unwrap_or(0),
            instance,
            class: app_id,
            title: node["name"].as_str().unwrap_or("").to_owned(),
            pid: node["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
            rect: union(rect_of(&node["rect"]), deco),
            focused: node["focused"] == Value::Bool(true),
        };
        let visible = node["visible"] == Value::Bool(true);
        out.push((visible, floating, window));
        return;
    }
    let own = rect_of(&node["rect"]);
    let origin = (own.x, own.y);
    for child in node["nodes"].as_array().into_iter().flatten() {
        walk(child, origin, floating, out);
    }
    for child in node["floating_nodes"].as_array().into_iter().flatten() {
        walk(child, origin, true, out);
    }
}

/// sway's IPC socket for the compositor with this pid, in `dir`, if it is there.
pub fn socket_of(dir: &Path, pid: u32) -> Option<PathBuf> {
    let suffix = format!(".{pid}.sock");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        (name.starts_with("sway-ipc.") && name.ends_with(&suffix)).then(|| e.path())
    })
}

/// Any sway IPC socket in `dir` (an owned session's runtime directory has one sway).
pub fn socket_of_any(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        (name.starts_with("sway-ipc.") && name.ends_with(".sock")).then(|| e.path())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_tree_is_flattened_bottom_first() {
        let tree = serde_json::json!({
            "type": "root", "nodes": [{"type": "output", "nodes": [
                {"type": "workspace", "nodes": [
                    {"id": 5, "pid": 10, "app_id": "foot", "name": "a", "focused": true,
                     "visible": true, "nodes": [],
                     "deco_rect": {"x": 640, "y": 0, "width": 640, "height": 25},
                     "rect": {"x": 640, "y": 25, "width": 640, "height": 775}}],
                 "rect": {"x": 0, "y": 0, "width": 1280, "height": 800},
                 "floating_nodes": [
                    {"id": 7, "pid": 11, "app_id": null,
                     "window_properties": {"class": "XTerm", "instance": "xterm"},
                     "name": "b", "visible": true, "nodes": [],
                     "rect": {"x": 10, "y": 10, "width": 100, "height": 100}}]},
                {"type": "workspace", "nodes": [
                    {"id": 9, "pid": 12, "app_id": "hidden", "name": "c", "visible": false,
                     "nodes": [], "rect": {"x": 0, "y": 0, "width": 1280, "height": 800}}]}
            ]}]
        });
        let mut found = Vec::new();
        walk(&tree, (0, 0), false, &mut found);
        found.sort_by_key(|(v, f, _)| (*v, *f));
        let ids: Vec<u64> = found.iter().map(|(_, _, w)| w.id).collect();
        assert_eq!(ids, [9, 5, 7]);
        let x = &found[2].2;
        assert_eq!((x.class.as_str(), x.instance.as_str()), ("XTerm", "xterm"));
        assert!(found[1].2.focused && !x.focused);
        assert_eq!(found[1].2.pid, Some(10));
    }
}
