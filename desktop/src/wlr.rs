//! The wlr backend: a Wayland compositor that offers the wlroots protocols (sway), driven over
//! a pure-Rust Wayland connection, with the window tree and focus from the sway IPC.
//!
//! What the server offers is probed from its globals, never assumed:
//! - input: `zwlr_virtual_pointer_manager_v1` (absolute motion over the output, buttons,
//!   discrete wheel clicks) and `zwp_virtual_keyboard_manager_v1` with a keymap aido writes
//!   itself: every keysym a call needs gets a keycode of its own (9 to 255, one level), so
//!   any Unicode text types without depending on the user's layout, and the modifiers are
//!   keys of that keymap too (sent also as an explicit `modifiers` state);
//! - screenshots: `zwlr_screencopy_manager_v1` into a `wl_shm` buffer in a memfd, read back
//!   with `pread` (no mapping, so no `unsafe`);
//! - the clipboard: `zwlr_data_control_manager_v1` (no focus needed, so no focus stealing);
//! - windows: the sway IPC socket of the compositor behind the Wayland socket (found by its
//!   pid, SO_PEERCRED), `GET_TREE` and `[con_id=N] focus`.
//!
//! A missing global is `desktop_unsupported` naming it; every batch of input ends with a
//! round trip (`wl_display.sync`), so `Ok` means the compositor processed every request.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wayland_client::backend::{ObjectId, WaylandError};
use wayland_client::globals::{GlobalListContents, registry_queue_init};
use wayland_client::protocol::{
    wl_buffer::WlBuffer, wl_output, wl_output::WlOutput, wl_pointer, wl_registry::WlRegistry,
    wl_seat::WlSeat, wl_shm, wl_shm::WlShm, wl_shm_pool::WlShmPool,
};
use wayland_client::{Connection, Dispatch, EventQueue, Proxy, QueueHandle, WEnum};
use wayland_protocols_misc::zwp_virtual_keyboard_v1::client::{
    zwp_virtual_keyboard_manager_v1::ZwpVirtualKeyboardManagerV1,
    zwp_virtual_keyboard_v1::ZwpVirtualKeyboardV1,
};
use wayland_protocols_wlr::data_control::v1::client::{
    zwlr_data_control_device_v1::{self, ZwlrDataControlDeviceV1},
    zwlr_data_control_manager_v1::ZwlrDataControlManagerV1,
    zwlr_data_control_offer_v1::{self, ZwlrDataControlOfferV1},
    zwlr_data_control_source_v1::{self, ZwlrDataControlSourceV1},
};
use wayland_protocols_wlr::screencopy::v1::client::{
    zwlr_screencopy_frame_v1::{self, ZwlrScreencopyFrameV1},
    zwlr_screencopy_manager_v1::ZwlrScreencopyManagerV1,
};
use wayland_protocols_wlr::virtual_pointer::v1::client::{
    zwlr_virtual_pointer_manager_v1::ZwlrVirtualPointerManagerV1,
    zwlr_virtual_pointer_v1::ZwlrVirtualPointerV1,
};

use crate::backend::{Backend, Button, Capabilities, Direction, Event, Frame, Window};
use crate::error::DesktopError;
use crate::keys::Keysym;
use crate::sway::Ipc;

/// How long one request may wait for the compositor, in ms.
const REPLY_TIMEOUT_MS: u64 = 5000;
/// The first and last keycodes of the generated keymap (XWayland's limit is 255).
const KEYCODE_MIN: u32 = 9;
const KEYCODE_MAX: u32 = 255;
/// Text MIME types, best first.
const TEXT_MIMES: &[&str] = &[
    "text/plain;charset=utf-8",
    "UTF8_STRING",
    "text/plain",
    "TEXT",
    "STRING",
];

/// The Wayland socket a display name means: an absolute path, or a name in XDG_RUNTIME_DIR.
pub fn socket_path(display: &str) -> PathBuf {
    let path = Path::new(display);
    if path.is_absolute() {
        return path.to_owned();
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(path)
}

#[derive(Default)]
struct FrameState {
    buffer: Option<(u32, u32, u32, u32)>,
    buffer_done: bool,
    y_invert: bool,
    ready: bool,
    failed: bool,
}

#[derive(Default)]
struct State {
    /// The current mode of each output.
    modes: HashMap<ObjectId, (i32, i32)>,
    frame: FrameState,
    /// MIME types of each data offer.
    offers: HashMap<ObjectId, Vec<String>>,
    selection: Option<Option<ZwlrDataControlOfferV1>>,
}

/// The virtual keyboard and the keymap uploaded to it.
struct Keyboard {
    device: ZwpVirtualKeyboardV1,
    /// Keycode `KEYCODE_MIN + i` types `keys[i]`.
    keys: Vec<Keysym>,
    /// The modifiers held (X modifier mask bits).
    mods: u32,
}

/// A wlroots compositor, driven.
pub struct Wlr {
    _conn: Connection,
    queue: EventQueue<State>,
    qh: QueueHandle<State>,
    state: State,
    caps: Capabilities,
    socket: PathBuf,
    output: Option<WlOutput>,
    shm: Option<WlShm>,
    seat: Option<WlSeat>,
    screencopy: Option<ZwlrScreencopyManagerV1>,
    pointer: Option<ZwlrVirtualPointerV1>,
    keyboard: Option<Keyboard>,
    keyboard_manager: Option<ZwpVirtualKeyboardManagerV1>,
    data_control: Option<ZwlrDataControlManagerV1>,
    ipc: Option<Ipc>,
    started: Instant,
    cursor: Option<(i32, i32)>,
}

fn connect_failed(socket: &Path, why: impl std::fmt::Display) -> DesktopError {
    DesktopError::ConnectFailed {
        display: socket.display().to_string(),
        why: why.to_string(),
    }
}

fn unsupported(feature: &'static str, why: &str) -> DesktopError {
    DesktopError::Unsupported {
        feature,
        why: why.to_owned(),
    }
}

/// Connect to a Wayland socket and say what the compositor offers.
pub fn probe(display: &str) -> Result<Capabilities, DesktopError> {
    Ok(Wlr::connect(display)?.caps)
}

impl Wlr {
    /// Connect to the compositor behind `display` (a socket name or path) and probe it.
    pub fn connect(display: &str) -> Result<Self, DesktopError> {
        let socket = socket_path(display);
        let stream = UnixStream::connect(&socket).map_err(|e| connect_failed(&socket, e))?;
        // The compositor's pid names its IPC socket.
        let peer = rustix::net::sockopt::socket_peercred(&stream).ok();
        let conn = Connection::from_socket(stream).map_err(|e| connect_failed(&socket, e))?;
        let (globals, mut queue) =
            registry_queue_init::<State>(&conn).map_err(|e| connect_failed(&socket, e))?;
        let qh = queue.handle();
        let mut state = State::default();
        let list = globals.contents().clone_list();
        let has = |name: &str| list.iter().any(|g| g.interface == name);
        let output: Option<WlOutput> = globals.bind(&qh, 1..=3, ()).ok();
        let shm: Option<WlShm> = globals.bind(&qh, 1..=1, ()).ok();
        let seat: Option<WlSeat> = globals.bind(&qh, 1..=5, ()).ok();
        let screencopy: Option<ZwlrScreencopyManagerV1> = globals.bind(&qh, 1..=3, ()).ok();
        let pointer_manager: Option<ZwlrVirtualPointerManagerV1> =
            globals.bind(&qh, 1..=2, ()).ok();
        let keyboard_manager: Option<ZwpVirtualKeyboardManagerV1> =
            globals.bind(&qh, 1..=1, ()).ok();
        let data_control: Option<ZwlrDataControlManagerV1> = globals.bind(&qh, 1..=2, ()).ok();
        // The output's mode arrives after a round trip.
        queue
            .roundtrip(&mut state)
            .map_err(|e| connect_failed(&socket, e))?;
        let screen = output
            .as_ref()
            .and_then(|o| state.modes.get(&o.id()))
            .map_or([0, 0], |&(w, h)| [w.max(0) as u32, h.max(0) as u32]);
        let pointer = match (&pointer_manager, &seat) {
            (Some(m), seat) => Some(m.create_virtual_pointer(seat.as_ref(), &qh, ())),
            (None, _) => None,
        };
        let dir = socket.parent().unwrap_or(Path::new("/"));
        let ipc = peer
            .and_then(|p| crate::sway::socket_of(dir, p.pid.as_raw_nonzero().get() as u32))
            .and_then(|path| Ipc::connect(&path).ok());
        let (ipc, manager) = match ipc {
            Some((ipc, name)) => (Some(ipc), Some(name)),
            None => (None, None),
        };
        let mut extensions: Vec<String> = list
            .iter()
            .map(|g| format!("{} v{}", g.interface, g.version))
            .collect();
        extensions.sort();
        extensions.dedup();
        let caps = Capabilities {
            backend: "wlr",
            server: manager
                .clone()
                .unwrap_or_else(|| "a Wayland compositor without the sway IPC".into()),
            screen,
            input: pointer.is_some()
                && seat.is_some()
                && has("zwp_virtual_keyboard_manager_v1")
                && screen != [0, 0],
            screenshot: screencopy.is_some() && shm.is_some() && output.is_some(),
            window_manager: manager,
            client_list: ipc.is_some(),
            focus_by_wm: ipc.is_some(),
            clipboard: data_control.is_some() && seat.is_some(),
            xwayland: false,
            extensions,
        };
        queue
            .roundtrip(&mut state)
            .map_err(|e| connect_failed(&socket, e))?;
        Ok(Self {
            _conn: conn,
            queue,
            qh,
            state,
            caps,
            socket,
            output,
            shm,
            seat,
            screencopy,
            pointer,
            keyboard: None,
            keyboard_manager,
            data_control,
            ipc,
            started: Instant::now(),
            cursor: None,
        })
    }

    /// The IPC socket used for the window tree, if any.
    pub fn ipc_socket(&self) -> Option<&Path> {
        self.ipc.as_ref().map(Ipc::path)
    }

    fn time(&self) -> u32 {
        self.started.elapsed().as_millis() as u32
    }

    fn ipc(&mut self) -> Result<&mut Ipc, DesktopError> {
        self.ipc.as_mut().ok_or_else(|| {
            unsupported(
                "the sway IPC",
                "the compositor has no sway/i3 IPC socket next to its Wayland socket, so its windows cannot be listed or focused",
            )
        })
    }

    fn roundtrip(&mut self, request: &'static str) -> Result<(), DesktopError> {
        self.dispatch_until(request, |_| true)
    }

    /// Flush, then read and dispatch events until `done` (a sync first, so `done` can also
    /// mean "the server processed everything sent so far"), within the reply timeout.
    fn dispatch_until(
        &mut self,
        request: &'static str,
        done: impl Fn(&State) -> bool,
    ) -> Result<(), DesktopError> {
        let synced = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        self._conn
            .display()
            .sync(&self.qh, SyncDone(synced.clone()));
        let deadline = Instant::now() + Duration::from_millis(REPLY_TIMEOUT_MS);
        loop {
            self.queue
                .dispatch_pending(&mut self.state)
                .map_err(|e| DesktopError::protocol(request, e))?;
            if synced.load(std::sync::atomic::Ordering::SeqCst) && done(&self.state) {
                return Ok(());
            }
            self.queue
                .flush()
                .map_err(|e| DesktopError::protocol(request, e))?;
            let Some(guard) = self.queue.prepare_read() else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DesktopError::protocol(
                    request,
                    format!("no answer within {REPLY_TIMEOUT_MS} ms"),
                ));
            }
            let ready = {
                let fd = guard.connection_fd();
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN | rustix::event::PollFlags::ERR,
                )];
                let timeout = rustix::event::Timespec {
                    tv_sec: left.as_secs() as rustix::event::Secs,
                    tv_nsec: left.subsec_nanos().into(),
                };
                rustix::event::poll(&mut fds, Some(&timeout))
                    .map_err(|e| DesktopError::protocol(request, e))?
            };
            if ready == 0 {
                continue;
            }
            match guard.read() {
                Ok(_) => {}
                Err(WaylandError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(DesktopError::protocol(request, e)),
            }
        }
    }

    fn keyboard(&mut self) -> Result<&mut Keyboard, DesktopError> {
        if self.keyboard.is_none() {
            let (Some(m), Some(seat)) = (&self.keyboard_manager, &self.seat) else {
                return Err(unsupported(
                    "zwp_virtual_keyboard_manager_v1",
                    "the compositor offers no virtual keyboard (and a seat), so keys cannot be sent",
                ));
            };
            self.keyboard = Some(Keyboard {
                device: m.create_virtual_keyboard(seat, &self.qh, ()),
                keys: Vec::new(),
                mods: 0,
            });
        }
        self.keyboard
            .as_mut()
            .ok_or_else(|| unsupported("zwp_virtual_keyboard_manager_v1", "no keyboard"))
    }

    fn upload_keymap(&mut self, keys: Vec<Keysym>) -> Result<(), DesktopError> {
        let text = keymap(&keys);
        let file = memfd("aido-keymap")?;
        (&file)
            .write_all(text.as_bytes())
            .and_then(|()| (&file).write_all(b"\0"))
            .map_err(|e| DesktopError::protocol("the keymap", e))?;
        let kb = self.keyboard()?;
        // Format 1: XKB v1 text, NUL-terminated, `size` counting the NUL.
        kb.device.keymap(1, file.as_fd(), (text.len() + 1) as u32);
        kb.keys = keys;
        drop(file);
        self.roundtrip("zwp_virtual_keyboard_v1.keymap")
    }
}

/// A `wl_display.sync` callback that sets a flag.
struct SyncDone(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Dispatch<wayland_client::protocol::wl_callback::WlCallback, SyncDone> for State {
    fn event(
        _: &mut Self,
        _: &wayland_client::protocol::wl_callback::WlCallback,
        _: wayland_client::protocol::wl_callback::Event,
        done: &SyncDone,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        done.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn memfd(name: &str) -> Result<File, DesktopError> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| DesktopError::protocol("memfd_create", e))?;
    Ok(File::from(fd))
}

/// The X modifier mask bit a modifier keysym sets, if it is one.
fn modifier_bit(keysym: Keysym) -> Option<(u32, &'static str)> {
    match keysym {
        0xffe1 | 0xffe2 => Some((1, "Shift")),
        0xffe3 | 0xffe4 => Some((4, "Control")),
        0xffe9 | 0xffea => Some((8, "Mod1")),
        0xffeb | 0xffec => Some((64, "Mod4")),
        _ => None,
    }
}

/// An XKB keymap where keycode `KEYCODE_MIN + i` types `keys[i]` at its only level, and the
/// modifier keysyms are in their modifier maps.
pub fn keymap(keys: &[Keysym]) -> String {
    let mut out = String::from("xkb_keymap {\nxkb_keycodes \"aido\" {\n");
    out.push_str(&format!(
        "minimum = {KEYCODE_MIN};\nmaximum = {KEYCODE_MAX};\n"
    ));
    for i in 0..keys.len() {
        let code = KEYCODE_MIN + i as u32;
        out.push_str(&format!("<K{code}> = {code};\n"));
    }
    out.push_str("};\nxkb_types \"aido\" { include \"complete\" };\n");
    out.push_str("xkb_compatibility \"aido\" { include \"complete\" };\n");
    out.push_str("xkb_symbols \"aido\" {\n");
    for (i, sym) in keys.iter().enumerate() {
        let code = KEYCODE_MIN + i as u32;
        out.push_str(&format!("key <K{code}> {{ [ 0x{sym:08x} ] }};\n"));
        if let Some((_, map)) = modifier_bit(*sym) {
            out.push_str(&format!("modifier_map {map} {{ <K{code}> }};\n"));
        }
    }
    out.push_str("};\n};\n");
    out
}

/// The evdev button code.
fn button_code(b: Button) -> u32 {
    match b {
        Button::Left => 0x110,
        Button::Right => 0x111,
        Button::Middle => 0x112,
    }
}

/// Convert a screencopy buffer to RGB.
fn to_rgb(
    raw: &[u8],
    format: u32,
    (width, height, stride): (u32, u32, u32),
    y_invert: bool,
) -> Result<Frame, DesktopError> {
    // wl_shm formats are little-endian: XRGB8888 is B, G, R, X in memory.
    let order: [usize; 3] = match format {
        f if f == u32::from(wl_shm::Format::Xrgb8888)
            || f == u32::from(wl_shm::Format::Argb8888) =>
        {
            [2, 1, 0]
        }
        f if f == u32::from(wl_shm::Format::Xbgr8888)
            || f == u32::from(wl_shm::Format::Abgr8888) =>
        {
            [0, 1, 2]
        }
        other => {
            return Err(unsupported(
                "a 32-bit RGB screencopy format",
                &format!("the compositor offered wl_shm format 0x{other:08x}"),
            ));
        }
    };
    let mut rgb = Vec::with_capacity((width * height * 3) as usize);
    for row in 0..height {
        let src = if y_invert { height - 1 - row } else { row };
        let line = &raw[(src * stride) as usize..][..(width * 4) as usize];
        for px in line.chunks_exact(4) {
            rgb.extend_from_slice(&[px[order[0]], px[order[1]], px[order[2]]]);
        }
    }
    Ok(Frame { width, height, rgb })
}

impl Backend for Wlr {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn screen(&self) -> [u32; 2] {
        self.caps.screen
    }

    fn capture(&mut self) -> Result<Frame, DesktopError> {
        let (Some(manager), Some(output), Some(shm)) = (&self.screencopy, &self.output, &self.shm)
        else {
            return Err(unsupported(
                "zwlr_screencopy_manager_v1",
                "the compositor offers no wlr-screencopy (with wl_shm and an output)",
            ));
        };
        let version = manager.version();
        self.state.frame = FrameState::default();
        let frame = manager.capture_output(0, output, &self.qh, ());
        let shm = shm.clone();
        self.dispatch_until("zwlr_screencopy_frame_v1 (buffer)", |s| {
            s.frame.failed || (s.frame.buffer.is_some() && (version < 3 || s.frame.buffer_done))
        })?;
        let Some((format, width, height, stride)) = self.state.frame.buffer else {
            frame.destroy();
            return Err(DesktopError::protocol(
                "zwlr_screencopy_frame_v1",
                "the capture failed before a buffer was offered",
            ));
        };
        let size = u64::from(stride) * u64::from(height);
        let file = memfd("aido-screencopy")?;
        file.set_len(size)
            .map_err(|e| DesktopError::protocol("the screencopy buffer", e))?;
        let pool = shm.create_pool(file.as_fd(), size as i32, &self.qh, ());
        let format_enum = wl_shm::Format::try_from(format).map_err(|()| {
            unsupported(
                "a known wl_shm format",
                &format!("the compositor offered 0x{format:08x}"),
            )
        })?;
        let buffer = pool.create_buffer(
            0,
            width as i32,
            height as i32,
            stride as i32,
            format_enum,
            &self.qh,
            (),
        );
        frame.copy(&buffer);
        let copied = self.dispatch_until("zwlr_screencopy_frame_v1.copy", |s| {
            s.frame.ready || s.frame.failed
        });
        frame.destroy();
        buffer.destroy();
        pool.destroy();
        copied?;
        if self.state.frame.failed {
            return Err(DesktopError::protocol(
                "zwlr_screencopy_frame_v1.copy",
                "the compositor said the copy failed",
            ));
        }
        let mut raw = vec![0u8; size as usize];
        file.read_exact_at(&mut raw, 0)
            .map_err(|e| DesktopError::protocol("reading the screencopy buffer", e))?;
        to_rgb(
            &raw,
            format,
            (width, height, stride),
            self.state.frame.y_invert,
        )
    }

    fn windows(&mut self) -> Result<Vec<Window>, DesktopError> {
        self.ipc()?.windows()
    }

    fn focused(&mut self) -> Result<Option<Window>, DesktopError> {
        Ok(self.windows()?.into_iter().find(|w| w.focused))
    }

    fn focus(&mut self, id: u64, timeout_ms: u64) -> Result<Window, DesktopError> {
        if !self.windows()?.iter().any(|w| w.id == id) {
            return Err(DesktopError::WindowMissing { window: id });
        }
        self.ipc()?.command(&format!("[con_id={id}] focus"))?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some(w) = self.focused()?
                && w.id == id
            {
                return Ok(w);
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::FocusNotTaken {
                    window: id,
                    timeout_ms,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pointer(&mut self) -> Result<(i32, i32), DesktopError> {
        self.cursor.ok_or_else(|| {
            unsupported(
                "the pointer position",
                "Wayland tells a client where the pointer is only over its own surfaces; aido knows it once it has moved the pointer",
            )
        })
    }

    fn send(&mut self, events: &[Event]) -> Result<(), DesktopError> {
        let [width, height] = self.caps.screen;
        for e in events {
            let time = self.time();
            match *e {
                Event::Key { keysym, press } => {
                    let kb = self.keyboard()?;
                    let Some(i) = kb.keys.iter().position(|&k| k == keysym) else {
                        return Err(DesktopError::protocol(
                            "zwp_virtual_keyboard_v1.key",
                            format!("keysym 0x{keysym:x} is not in the keymap"),
                        ));
                    };
                    // evdev code = XKB keycode - 8.
                    kb.device
                        .key(time, KEYCODE_MIN + i as u32 - 8, u32::from(press));
                    if let Some((bit, _)) = modifier_bit(keysym) {
                        if press {
                            kb.mods |= bit;
                        } else {
                            kb.mods &= !bit;
                        }
                        kb.device.modifiers(kb.mods, 0, 0, 0);
                    }
                }
                Event::Motion { x, y } => {
                    let p = self.pointer.as_ref().ok_or_else(no_pointer)?;
                    p.motion_absolute(time, x.max(0) as u32, y.max(0) as u32, width, height);
                    p.frame();
                    self.cursor = Some((x, y));
                }
                Event::Button { button, press } => {
                    let p = self.pointer.as_ref().ok_or_else(no_pointer)?;
                    let state = if press {
                        wl_pointer::ButtonState::Pressed
                    } else {
                        wl_pointer::ButtonState::Released
                    };
                    p.button(time, button_code(button), state);
                    p.frame();
                }
                Event::Wheel { direction } => {
                    let p = self.pointer.as_ref().ok_or_else(no_pointer)?;
                    let (axis, sign) = match direction {
                        Direction::Up => (wl_pointer::Axis::VerticalScroll, -1),
                        Direction::Down => (wl_pointer::Axis::VerticalScroll, 1),
                        Direction::Left => (wl_pointer::Axis::HorizontalScroll, -1),
                        Direction::Right => (wl_pointer::Axis::HorizontalScroll, 1),
                    };
                    if p.version() >= 2 {
                        p.axis_source(wl_pointer::AxisSource::Wheel);
                        p.axis_discrete(time, axis, f64::from(15 * sign), sign);
                    } else {
                        p.axis(time, axis, f64::from(15 * sign));
                    }
                    p.frame();
                }
            }
        }
        // The compositor has processed every request once the sync returns.
        self.roundtrip("the input batch")
    }

    fn prepare_keys(&mut self, keysyms: &[Keysym]) -> Result<(), DesktopError> {
        let current = self.keyboard()?.keys.clone();
        let missing: Vec<Keysym> = {
            let mut m: Vec<Keysym> = keysyms
                .iter()
                .copied()
                .filter(|k| !current.contains(k))
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        };
        if missing.is_empty() {
            return Ok(());
        }
        let capacity = (KEYCODE_MAX - KEYCODE_MIN + 1) as usize;
        let mut keys = current;
        keys.extend(&missing);
        if keys.len() > capacity {
            // Start over with what this call needs (and whatever is held now).
            let held = self.keyboard()?.mods;
            let mut fresh: Vec<Keysym> = keysyms.to_vec();
            if held != 0 {
                fresh.extend([0xffe1, 0xffe3, 0xffe9, 0xffeb]);
            }
            fresh.sort_unstable();
            fresh.dedup();
            if fresh.len() > capacity {
                return Err(DesktopError::KeycodesExhausted { count: fresh.len() });
            }
            keys = fresh;
        }
        self.upload_keymap(keys)
    }

    fn restore_keys(&mut self) -> Result<(), DesktopError> {
        // The keymap stays: the next call reuses its keycodes (re-uploading costs every
        // client a keymap compile).
        Ok(())
    }

    fn clipboard_get(&mut self, max: usize, timeout_ms: u64) -> Result<String, DesktopError> {
        let (Some(manager), Some(seat)) = (&self.data_control, &self.seat) else {
            return Err(no_data_control());
        };
        self.state.selection = None;
        self.state.offers.clear();
        let device = manager.get_data_device(seat, &self.qh, ());
        let seen = self.dispatch_until("zwlr_data_control_device_v1 (selection)", |s| {
            s.selection.is_some()
        });
        let offer = self.state.selection.take().flatten();
        let result = (|| {
            seen?;
            let offer = offer.as_ref().ok_or(DesktopError::ClipboardEmpty)?;
            let mimes = self
                .state
                .offers
                .get(&offer.id())
                .cloned()
                .unwrap_or_default();
            let mime = TEXT_MIMES
                .iter()
                .find(|m| mimes.iter().any(|o| o == *m))
                .ok_or(DesktopError::ClipboardEmpty)?;
            let (reader, writer) =
                std::io::pipe().map_err(|e| DesktopError::protocol("pipe", e))?;
            offer.receive((*mime).to_owned(), writer.as_fd());
            drop(writer);
            self.roundtrip("zwlr_data_control_offer_v1.receive")?;
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut data = Vec::new();
                let read = reader.take(max as u64 + 1).read_to_end(&mut data);
                let _ = tx.send(read.map(|_| data));
            });
            let data = rx
                .recv_timeout(Duration::from_millis(timeout_ms))
                .map_err(|_| DesktopError::ClipboardTimeout { timeout_ms })?
                .map_err(|e| DesktopError::protocol("reading the clipboard", e))?;
            if data.len() > max {
                return Err(DesktopError::TooLarge {
                    what: "the clipboard text",
                    size: data.len(),
                    max,
                });
            }
            Ok(String::from_utf8_lossy(&data).into_owned())
        })();
        if let Some(o) = offer {
            o.destroy();
        }
        device.destroy();
        let _ = self.roundtrip("zwlr_data_control_device_v1.destroy");
        result
    }

    fn clipboard_set(&mut self, text: &str) -> Result<(), DesktopError> {
        if self.data_control.is_none() || self.seat.is_none() {
            return Err(no_data_control());
        }
        serve_clipboard(&self.socket, text.to_owned())
    }
}

fn no_pointer() -> DesktopError {
    unsupported(
        "zwlr_virtual_pointer_manager_v1",
        "the compositor offers no virtual pointer, so pointer input cannot be sent",
    )
}

fn no_data_control() -> DesktopError {
    unsupported(
        "zwlr_data_control_manager_v1",
        "the compositor offers no wlr-data-control (with a seat), so the clipboard cannot be read or set without stealing the focus",
    )
}

/// The state of the thread that serves a clipboard text aido set.
struct Serving {
    text: String,
    live: usize,
}

/// Own the clipboard and the primary selection with `text`, on a connection of its own and
/// a thread that answers paste requests until another client takes both selections (or the
/// compositor goes away). Returns once the compositor has processed the selection.
fn serve_clipboard(socket: &Path, text: String) -> Result<(), DesktopError> {
    let stream = UnixStream::connect(socket).map_err(|e| connect_failed(socket, e))?;
    let conn = Connection::from_socket(stream).map_err(|e| connect_failed(socket, e))?;
    let (globals, mut queue) =
        registry_queue_init::<Serving>(&conn).map_err(|e| connect_failed(socket, e))?;
    let qh = queue.handle();
    let seat: WlSeat = globals
        .bind(&qh, 1..=5, ())
        .map_err(|_| no_data_control())?;
    let manager: ZwlrDataControlManagerV1 = globals
        .bind(&qh, 1..=2, ())
        .map_err(|_| no_data_control())?;
    let device = manager.get_data_device(&seat, &qh, ());
    let source = |qh: &QueueHandle<Serving>| {
        let s = manager.create_data_source(qh, ());
        for m in TEXT_MIMES {
            s.offer((*m).to_owned());
        }
        s
    };
    let mut state = Serving { text, live: 1 };
    device.set_selection(Some(&source(&qh)));
    if device.version() >= 2 {
        device.set_primary_selection(Some(&source(&qh)));
        state.live = 2;
    }
    queue
        .roundtrip(&mut state)
        .map_err(|e| DesktopError::protocol("zwlr_data_control_device_v1.set_selection", e))?;
    std::thread::Builder::new()
        .name("aido-wl-clipboard".into())
        .spawn(move || {
            let _keep = (conn, device, manager, seat);
            while state.live > 0 {
                if queue.blocking_dispatch(&mut state).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| DesktopError::protocol("the clipboard thread", e))?;
    Ok(())
}

impl Dispatch<ZwlrDataControlSourceV1, ()> for Serving {
    fn event(
        state: &mut Self,
        source: &ZwlrDataControlSourceV1,
        event: zwlr_data_control_source_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            zwlr_data_control_source_v1::Event::Send { fd, .. } => {
                let mut out = File::from(fd);
                let _ = out.write_all(state.text.as_bytes());
            }
            zwlr_data_control_source_v1::Event::Cancelled => {
                source.destroy();
                state.live = state.live.saturating_sub(1);
            }
            _ => {}
        }
    }
}

impl Dispatch<ZwlrDataControlDeviceV1, ()> for Serving {
    fn event(
        _: &mut Self,
        _: &ZwlrDataControlDeviceV1,
        event: zwlr_data_control_device_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        // Offers of other clients' selections are not read here.
        match event {
            zwlr_data_control_device_v1::Event::Selection { id: Some(o) }
            | zwlr_data_control_device_v1::Event::PrimarySelection { id: Some(o) } => {
                o.destroy();
            }
            _ => {}
        }
    }

    wayland_client::event_created_child!(Serving, ZwlrDataControlDeviceV1, [
        zwlr_data_control_device_v1::EVT_DATA_OFFER_OPCODE => (ZwlrDataControlOfferV1, ()),
    ]);
}

wayland_client::delegate_noop!(Serving: ignore ZwlrDataControlOfferV1);
wayland_client::delegate_noop!(Serving: ignore ZwlrDataControlManagerV1);
wayland_client::delegate_noop!(Serving: ignore WlSeat);

impl Dispatch<WlRegistry, GlobalListContents> for Serving {
    fn event(
        _: &mut Self,
        _: &WlRegistry,
        _: wayland_client::protocol::wl_registry::Event,
        _: &GlobalListContents,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

impl Dispatch<WlRegistry, GlobalListContents> for State {
    fn event(
        _: &mut Self,
        _: &WlRegistry,
        _: wayland_client::protocol::wl_registry::Event,
        _: &GlobalListContents,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

impl Dispatch<WlOutput, ()> for State {
    fn event(
        state: &mut Self,
        output: &WlOutput,
        event: wl_output::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let wl_output::Event::Mode {
            flags: WEnum::Value(flags),
            width,
            height,
            ..
        } = event
            && flags.contains(wl_output::Mode::Current)
        {
            state.modes.insert(output.id(), (width, height));
        }
    }
}

impl Dispatch<ZwlrScreencopyFrameV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &ZwlrScreencopyFrameV1,
        event: zwlr_screencopy_frame_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        use zwlr_screencopy_frame_v1::Event as E;
        match event {
            E::Buffer {
                format,
                width,
                height,
                stride,
            } => {
                let format = match format {
                    WEnum::Value(f) => u32::from(f),
                    WEnum::Unknown(f) => f,
                };
                state.frame.buffer = Some((format, width, height, stride));
            }
            E::Flags {
                flags: WEnum::Value(flags),
            } => {
                state.frame.y_invert = flags.contains(zwlr_screencopy_frame_v1::Flags::YInvert);
            }
            E::BufferDone => state.frame.buffer_done = true,
            E::Ready { .. } => state.frame.ready = true,
            E::Failed => state.frame.failed = true,
            _ => {}
        }
    }
}

impl Dispatch<ZwlrDataControlDeviceV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &ZwlrDataControlDeviceV1,
        event: zwlr_data_control_device_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        use zwlr_data_control_device_v1::Event as E;
        match event {
            E::DataOffer { id } => {
                state.offers.insert(id.id(), Vec::new());
            }
            E::Selection { id } => state.selection = Some(id),
            E::PrimarySelection { id: Some(o) } => o.destroy(),
            _ => {}
        }
    }

    wayland_client::event_created_child!(State, ZwlrDataControlDeviceV1, [
        zwlr_data_control_device_v1::EVT_DATA_OFFER_OPCODE => (ZwlrDataControlOfferV1, ()),
    ]);
}

impl Dispatch<ZwlrDataControlOfferV1, ()> for State {
    fn event(
        state: &mut Self,
        offer: &ZwlrDataControlOfferV1,
        event: zwlr_data_control_offer_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let zwlr_data_control_offer_v1::Event::Offer { mime_type } = event {
            state.offers.entry(offer.id()).or_default().push(mime_type);
        }
    }
}

wayland_client::delegate_noop!(State: ignore WlShm);
wayland_client::delegate_noop!(State: ignore WlShmPool);
wayland_client::delegate_noop!(State: ignore WlBuffer);
wayland_client::delegate_noop!(State: ignore WlSeat);
wayland_client::delegate_noop!(State: ignore ZwlrScreencopyManagerV1);
wayland_client::delegate_noop!(State: ignore ZwlrVirtualPointerManagerV1);
wayland_client::delegate_noop!(State: ignore ZwlrVirtualPointerV1);
wayland_client::delegate_noop!(State: ignore ZwpVirtualKeyboardManagerV1);
wayland_client::delegate_noop!(State: ignore ZwpVirtualKeyboardV1);
wayland_client::delegate_noop!(State: ignore ZwlrDataControlManagerV1);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_keymap_gives_each_keysym_a_keycode_and_maps_modifiers() {
        let map = keymap(&[0x61, 0x20ac + 0x0100_0000, 0xffe3]);
        assert!(map.contains("<K9> = 9;"));
        assert!(map.contains("key <K9> { [ 0x00000061 ] };"));
        assert!(map.contains("key <K10> { [ 0x010020ac ] };"));
        assert!(map.contains("modifier_map Control { <K11> };"));
        assert!(map.contains("maximum = 255;"));
    }

    #[test]
    fn xrgb_and_y_invert_convert_to_rgb() {
        // 2x2 XRGB8888 (B, G, R, X), stride 8.
        let raw = [1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 10, 11, 12, 0];
        let xrgb = u32::from(wl_shm::Format::Xrgb8888);
        let f = to_rgb(&raw, xrgb, (2, 2, 8), false).unwrap();
        assert_eq!(f.rgb, [3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
        let f = to_rgb(&raw, xrgb, (2, 2, 8), true).unwrap();
        assert_eq!(&f.rgb[..3], &[9, 8, 7]);
        assert_eq!(
            to_rgb(&raw, 0x3432_5258, (2, 2, 8), false)
                .unwrap_err()
                .code(),
            "desktop_unsupported"
        );
    }
}
