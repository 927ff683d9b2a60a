//! The X11 backend: XTEST for input, GetImage for the screen, EWMH (with a QueryTree
//! fallback) for windows and focus, selections for the clipboard, all through x11rb's pure
//! Rust connection.
//!
//! What the server offers is probed when the backend connects (its extension list and the
//! window manager's `_NET_SUPPORTED`), never guessed from environment variables. An XWayland
//! server is refused: a compositor may drop XTEST input while the X server reports it done.
//!
//! Unicode text is typed as xdotool does: a character no key types gets a spare keycode
//! mapped to its keysym for the call (`prepare_keys`), and the mapping is put back after
//! (`restore_keys`). The clipboard is served by a thread with its own connection, which owns
//! the CLIPBOARD and PRIMARY selections and answers requests for as long as aido owns them.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use x11rb::connection::Connection;
use x11rb::protocol::Event as XEvent;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConfigureWindowAux, ConnectionExt as _, CreateWindowAux,
    EventMask, ImageFormat, ImageOrder, InputFocus, MapState, PropMode, SelectionNotifyEvent,
    StackMode, WindowClass,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

use crate::backend::{Backend, Button, Capabilities, Direction, Event, Frame, Rect, Window};
use crate::error::DesktopError;
use crate::keys::Keysym;

x11rb::atom_manager! {
    /// The atoms the backend uses.
    pub Atoms: AtomsCookie {
        _NET_ACTIVE_WINDOW,
        _NET_CLIENT_LIST,
        _NET_CLIENT_LIST_STACKING,
        _NET_SUPPORTED,
        _NET_SUPPORTING_WM_CHECK,
        _NET_WM_NAME,
        _NET_WM_PID,
        UTF8_STRING,
        CLIPBOARD,
        TARGETS,
        TEXT,
        INCR,
        AIDO_SELECTION,
        TEXT_PLAIN_UTF8: b"text/plain;charset=utf-8",
    }
}

/// Most windows listed.
const WINDOWS_MAX: u32 = 1024;
/// How long the clients get to see a keyboard mapping change before keys are pressed.
const REMAP_SETTLE_MS: u64 = 60;
/// How often a wait polls the server.
const POLL_MS: u64 = 5;

const KEY_PRESS: u8 = 2;
const KEY_RELEASE: u8 = 3;
const BUTTON_PRESS: u8 = 4;
const BUTTON_RELEASE: u8 = 5;
const MOTION: u8 = 6;
const SHIFT_L: Keysym = 0xffe1;

fn err<E: std::fmt::Display>(request: &'static str) -> impl Fn(E) -> DesktopError {
    move |e| DesktopError::protocol(request, e)
}

/// The X11 backend, connected.
pub struct X11 {
    conn: RustConnection,
    display: String,
    root: u32,
    screen: [u32; 2],
    atoms: Atoms,
    caps: Capabilities,
    /// Our own window, the requestor of selection conversions.
    window: u32,
    min_keycode: u8,
    per_keycode: u8,
    /// Keysyms of each keycode from `min_keycode`.
    keymap: Vec<Vec<Keysym>>,
    /// Keycodes mapped for this call, to put back.
    remapped: Vec<u8>,
    clipboard: Option<Owner>,
    /// The pixel layout of a 24-bit screen: bytes per pixel, and whether red comes first in
    /// memory order.
    layout: (usize, ImageOrder),
}

/// Probe an X server without keeping the connection: what `aido desktop doctor` prints.
pub fn probe(display: &str) -> Result<Capabilities, DesktopError> {
    Ok(X11::connect_any(display)?.caps.clone())
}

impl X11 {
    /// Connect to `display` and probe it; refused when it cannot be driven (XWayland, no
    /// XTEST).
    pub fn connect(display: &str) -> Result<Self, DesktopError> {
        let x = Self::connect_any(display)?;
        if x.caps.xwayland {
            return Err(DesktopError::Xwayland);
        }
        if !x.caps.input {
            return Err(DesktopError::Unsupported {
                feature: "XTEST",
                why: "the X server has no XTEST extension, so no input can be sent".into(),
            });
        }
        Ok(x)
    }

    #[allow(clippy::too_many_lines)]
    fn connect_any(display: &str) -> Result<Self, DesktopError> {
        let (conn, screen_num) =
            x11rb::connect(Some(display)).map_err(|e| DesktopError::ConnectFailed {
                display: display.to_owned(),
                why: e.to_string(),
            })?;
        let setup = conn.setup();
        let screen = setup
            .roots
            .get(screen_num)
            .ok_or_else(|| DesktopError::protocol("setup", "no such screen"))?;
        let root = screen.root;
        let size = [
            u32::from(screen.width_in_pixels),
            u32::from(screen.height_in_pixels),
        ];
        let depth = screen.root_depth;
        let bpp = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == depth)
            .map(|f| f.bits_per_pixel)
            .unwrap_or(0);
        let layout = (usize::from(bpp / 8), setup.image_byte_order);
        let server = format!(
            "{} {}",
            String::from_utf8_lossy(&setup.vendor),
            setup.release_number
        );
        let (min_keycode, max_keycode) = (setup.min_keycode, setup.max_keycode);
        let atoms = Atoms::new(&conn)
            .map_err(err("InternAtom"))?
            .reply()
            .map_err(err("InternAtom"))?;
        let extensions: Vec<String> = conn
            .list_extensions()
            .map_err(err("ListExtensions"))?
            .reply()
            .map_err(err("ListExtensions"))?
            .names
            .into_iter()
            .map(|n| String::from_utf8_lossy(&n.name).into_owned())
            .collect();
        let has = |name: &str| extensions.iter().any(|e| e == name);
        let input = has("XTEST")
            && conn
                .xtest_get_version(2, 2)
                .map_err(err("XTestGetVersion"))?
                .reply()
                .is_ok();
        let window = conn.generate_id().map_err(err("GenerateId"))?;
        conn.create_window(
            0,
            window,
            root,
            0,
            0,
            1,
            1,
            0,
            WindowClass::INPUT_ONLY,
            0,
            &CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )
        .map_err(err("CreateWindow"))?;
        let mapping = conn
            .get_keyboard_mapping(min_keycode, max_keycode - min_keycode + 1)
            .map_err(err("GetKeyboardMapping"))?
            .reply()
            .map_err(err("GetKeyboardMapping"))?;
        let per_keycode = mapping.keysyms_per_keycode;
        let keymap = mapping
            .keysyms
            .chunks(usize::from(per_keycode.max(1)))
            .map(<[u32]>::to_vec)
            .collect();
        let mut x = Self {
            conn,
            display: display.to_owned(),
            root,
            screen: size,
            atoms,
            caps: Capabilities::default(),
            window,
            min_keycode,
            per_keycode,
            keymap,
            remapped: Vec::new(),
            clipboard: None,
            layout,
        };
        let supported: Vec<u32> = x
            .property32(root, atoms._NET_SUPPORTED, AtomEnum::ATOM.into(), 4096)?
            .unwrap_or_default();
        let window_manager = x.window_manager()?;
        x.caps = Capabilities {
            backend: "x11",
            server,
            screen: size,
            input,
            screenshot: depth >= 24 && layout.0 == 4,
            client_list: supported.contains(&atoms._NET_CLIENT_LIST),
            focus_by_wm: window_manager.is_some() && supported.contains(&atoms._NET_ACTIVE_WINDOW),
            window_manager,
            clipboard: true,
            xwayland: has("XWAYLAND"),
            extensions,
        };
        Ok(x)
    }

    /// The EWMH window manager's name, if one runs.
    fn window_manager(&self) -> Result<Option<String>, DesktopError> {
        let check = self
            .property32(
                self.root,
                self.atoms._NET_SUPPORTING_WM_CHECK,
                AtomEnum::WINDOW.into(),
                1,
            )?
            .and_then(|v| v.first().copied());
        let Some(check) = check.filter(|w| *w != 0) else {
            return Ok(None);
        };
        Ok(Some(
            self.text_property(check, self.atoms._NET_WM_NAME)?
                .unwrap_or_else(|| "unnamed".into()),
        ))
    }

    fn property32(
        &self,
        window: u32,
        property: u32,
        type_: u32,
        max: u32,
    ) -> Result<Option<Vec<u32>>, DesktopError> {
        let reply = self
            .conn
            .get_property(false, window, property, type_, 0, max)
            .map_err(err("GetProperty"))?
            .reply();
        // A window that went away meanwhile has no properties.
        let Ok(reply) = reply else { return Ok(None) };
        Ok(reply.value32().map(Iterator::collect))
    }

    fn text_property(&self, window: u32, property: u32) -> Result<Option<String>, DesktopError> {
        let reply = self
            .conn
            .get_property(false, window, property, AtomEnum::ANY, 0, 1024)
            .map_err(err("GetProperty"))?
            .reply();
        let Ok(reply) = reply else { return Ok(None) };
        if reply.format != 8 || reply.value.is_empty() {
            return Ok(None);
        }
        Ok(Some(String::from_utf8_lossy(&reply.value).into_owned()))
    }

    /// A window's description, or None when it is gone or is not a client (no WM_CLASS).
    fn describe(&self, id: u32) -> Result<Option<Window>, DesktopError> {
        let class = x11rb::properties::WmClass::get(&self.conn, id)
            .map_err(err("GetProperty"))?
            .reply();
        let Ok(Some(class)) = class else {
            return Ok(None);
        };
        let title = match self.text_property(id, self.atoms._NET_WM_NAME)? {
            Some(t) => t,
            None => self
                .text_property(id, AtomEnum::WM_NAME.into())?
                .unwrap_or_default(),
        };
        let pid = self
            .property32(id, self.atoms._NET_WM_PID, AtomEnum::CARDINAL.into(), 1)?
            .and_then(|v| v.first().copied());
        let Ok(geometry) = self
            .conn
            .get_geometry(id)
            .map_err(err("GetGeometry"))?
            .reply()
        else {
            return Ok(None);
        };
        let Ok(origin) = self
            .conn
            .translate_coordinates(id, self.root, 0, 0)
            .map_err(err("TranslateCoordinates"))?
            .reply()
        else {
            return Ok(None);
        };
        Ok(Some(Window {
            id: u64::from(id),
            instance: String::from_utf8_lossy(class.instance()).into_owned(),
            class: String::from_utf8_lossy(class.class()).into_owned(),
            title,
            pid,
            rect: Rect {
                x: i32::from(origin.dst_x),
                y: i32::from(origin.dst_y),
                width: u32::from(geometry.width),
                height: u32::from(geometry.height),
            },
            focused: false,
        }))
    }

    /// Top-level client windows, bottom first: EWMH's stacking list, or QueryTree (a frame's
    /// client is the child carrying WM_CLASS).
    fn client_ids(&self) -> Result<Vec<u32>, DesktopError> {
        if self.caps.client_list {
            let stacking = self.property32(
                self.root,
                self.atoms._NET_CLIENT_LIST_STACKING,
                AtomEnum::WINDOW.into(),
                WINDOWS_MAX,
            )?;
            let list = match stacking {
                Some(l) if !l.is_empty() => Some(l),
                _ => self.property32(
                    self.root,
                    self.atoms._NET_CLIENT_LIST,
                    AtomEnum::WINDOW.into(),
                    WINDOWS_MAX,
                )?,
            };
            return Ok(list.unwrap_or_default());
        }
        let tree = self
            .conn
            .query_tree(self.root)
            .map_err(err("QueryTree"))?
            .reply()
            .map_err(err("QueryTree"))?;
        let mut out = Vec::new();
        for child in tree.children {
            let Ok(attributes) = self
                .conn
                .get_window_attributes(child)
                .map_err(err("GetWindowAttributes"))?
                .reply()
            else {
                continue;
            };
            if attributes.map_state != MapState::VIEWABLE || child == self.window {
                continue;
            }
            if self.describe(child)?.is_some() {
                out.push(child);
                continue;
            }
            if let Ok(inner) = self
                .conn
                .query_tree(child)
                .map_err(err("QueryTree"))?
                .reply()
                && let Some(client) = inner
                    .children
                    .into_iter()
                    .find(|c| matches!(self.describe(*c), Ok(Some(_))))
            {
                out.push(client);
            }
        }
        Ok(out)
    }

    fn focused_id(&self) -> Result<Option<u32>, DesktopError> {
        if self.caps.focus_by_wm {
            let active = self
                .property32(
                    self.root,
                    self.atoms._NET_ACTIVE_WINDOW,
                    AtomEnum::WINDOW.into(),
                    1,
                )?
                .and_then(|v| v.first().copied())
                .filter(|w| *w != 0);
            return Ok(active);
        }
        let mut focus = self
            .conn
            .get_input_focus()
            .map_err(err("GetInputFocus"))?
            .reply()
            .map_err(err("GetInputFocus"))?
            .focus;
        // The focus may be a client's child or a frame: walk up to a listed client.
        let clients = self.client_ids()?;
        for _ in 0..32 {
            if focus <= 1 || focus == self.root {
                return Ok(None);
            }
            if clients.contains(&focus) {
                return Ok(Some(focus));
            }
            let Ok(tree) = self
                .conn
                .query_tree(focus)
                .map_err(err("QueryTree"))?
                .reply()
            else {
                return Ok(None);
            };
            if let Some(client) = tree.children.iter().find(|c| clients.contains(c)) {
                return Ok(Some(*client));
            }
            focus = tree.parent;
        }
        Ok(None)
    }

    /// Wait until the server has processed every request, and fail on any error it reported.
    fn sync(&self, request: &'static str) -> Result<(), DesktopError> {
        self.conn
            .get_input_focus()
            .map_err(err(request))?
            .reply()
            .map_err(err(request))?;
        while let Some(event) = self.conn.poll_for_event().map_err(err(request))? {
            if let XEvent::Error(e) = event {
                return Err(DesktopError::protocol(request, format!("{e:?}")));
            }
        }
        Ok(())
    }

    /// The keycode that types `keysym`, and whether shift is needed.
    fn keycode(&self, keysym: Keysym) -> Option<(u8, bool)> {
        let lookup = |keysym: Keysym| {
            self.keymap.iter().enumerate().find_map(|(i, syms)| {
                let code = self.min_keycode as usize + i;
                let code = u8::try_from(code).ok()?;
                match syms.iter().position(|s| *s == keysym) {
                    Some(0) => Some((code, false)),
                    Some(1) => Some((code, true)),
                    _ => None,
                }
            })
        };
        lookup(keysym)
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), DesktopError> {
        self.conn
            .xtest_fake_input(kind, detail, 0, self.root, x, y, 0)
            .map_err(err("XTestFakeInput"))?;
        Ok(())
    }

    fn clipboard_owner(&mut self) -> Result<&Owner, DesktopError> {
        if self.clipboard.is_none() {
            self.clipboard = Some(Owner::start(&self.display)?);
        }
        self.clipboard
            .as_ref()
            .ok_or_else(|| DesktopError::protocol("SetSelectionOwner", "no owner"))
    }
}

fn button_code(button: Button) -> u8 {
    match button {
        Button::Left => 1,
        Button::Middle => 2,
        Button::Right => 3,
    }
}

fn wheel_code(direction: Direction) -> u8 {
    match direction {
        Direction::Up => 4,
        Direction::Down => 5,
        Direction::Left => 6,
        Direction::Right => 7,
    }
}

fn clamp16(v: i32) -> i16 {
    v.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

impl Backend for X11 {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn screen(&self) -> [u32; 2] {
        self.screen
    }

    fn capture(&mut self) -> Result<Frame, DesktopError> {
        if !self.caps.screenshot {
            return Err(DesktopError::Unsupported {
                feature: "GetImage",
                why: "the root window is not a 24-bit, 32 bits-per-pixel screen".into(),
            });
        }
        let [width, height] = self.screen;
        let reply = self
            .conn
            .get_image(
                ImageFormat::Z_PIXMAP,
                self.root,
                0,
                0,
                width as u16,
                height as u16,
                !0,
            )
            .map_err(err("GetImage"))?
            .reply()
            .map_err(err("GetImage"))?;
        let pixels = (width * height) as usize;
        if reply.data.len() < pixels * 4 {
            return Err(DesktopError::protocol("GetImage", "short image"));
        }
        let mut rgb = Vec::with_capacity(pixels * 3);
        let lsb = self.layout.1 == ImageOrder::LSB_FIRST;
        for px in reply.data.chunks_exact(4).take(pixels) {
            if lsb {
                rgb.extend_from_slice(&[px[2], px[1], px[0]]);
            } else {
                rgb.extend_from_slice(&[px[1], px[2], px[3]]);
            }
        }
        Ok(Frame { width, height, rgb })
    }

    fn windows(&mut self) -> Result<Vec<Window>, DesktopError> {
        let focused = self.focused_id()?;
        let mut out = Vec::new();
        for id in self.client_ids()? {
            if let Some(mut w) = self.describe(id)? {
                w.focused = Some(id) == focused;
                out.push(w);
            }
        }
        Ok(out)
    }

    fn focused(&mut self) -> Result<Option<Window>, DesktopError> {
        let Some(id) = self.focused_id()? else {
            return Ok(None);
        };
        Ok(self.describe(id)?.map(|mut w| {
            w.focused = true;
            w
        }))
    }

    fn focus(&mut self, id: u64, timeout_ms: u64) -> Result<Window, DesktopError> {
        let window = u32::try_from(id).map_err(|_| DesktopError::WindowMissing { window: id })?;
        if !self.client_ids()?.contains(&window) {
            return Err(DesktopError::WindowMissing { window: id });
        }
        if self.caps.focus_by_wm {
            // Source 2: a pager or tool acting for the user, which window managers obey.
            let event =
                ClientMessageEvent::new(32, window, self.atoms._NET_ACTIVE_WINDOW, [2, 0, 0, 0, 0]);
            self.conn
                .send_event(
                    false,
                    self.root,
                    EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
                    event,
                )
                .map_err(err("SendEvent"))?;
        } else {
            self.conn
                .configure_window(
                    window,
                    &ConfigureWindowAux::new().stack_mode(StackMode::ABOVE),
                )
                .map_err(err("ConfigureWindow"))?;
            self.conn
                .set_input_focus(InputFocus::PARENT, window, x11rb::CURRENT_TIME)
                .map_err(err("SetInputFocus"))?;
        }
        self.sync("focus")?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if self.focused_id()? == Some(window) {
                return self
                    .focused()?
                    .ok_or(DesktopError::WindowMissing { window: id });
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::FocusNotTaken {
                    window: id,
                    timeout_ms,
                });
            }
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
    }

    fn pointer(&mut self) -> Result<(i32, i32), DesktopError> {
        let reply = self
            .conn
            .query_pointer(self.root)
            .map_err(err("QueryPointer"))?
            .reply()
            .map_err(err("QueryPointer"))?;
        Ok((i32::from(reply.root_x), i32::from(reply.root_y)))
    }

    fn send(&mut self, events: &[Event]) -> Result<(), DesktopError> {
        if !self.caps.input {
            return Err(DesktopError::Unsupported {
                feature: "XTEST",
                why: "the X server has no XTEST extension".into(),
            });
        }
        for event in events {
            match *event {
                Event::Motion { x, y } => self.fake(MOTION, 0, clamp16(x), clamp16(y))?,
                Event::Button { button, press } => {
                    let kind = if press { BUTTON_PRESS } else { BUTTON_RELEASE };
                    self.fake(kind, button_code(button), 0, 0)?;
                }
                Event::Wheel { direction } => {
                    let code = wheel_code(direction);
                    self.fake(BUTTON_PRESS, code, 0, 0)?;
                    self.fake(BUTTON_RELEASE, code, 0, 0)?;
                }
                Event::Key { keysym, press } => {
                    let (code, shift) =
                        self.keycode(keysym)
                            .ok_or_else(|| DesktopError::KeyUnknown {
                                name: format!("keysym 0x{keysym:x} (no key types it)"),
                            })?;
                    let shift_code = if shift {
                        self.keycode(SHIFT_L).map(|(c, _)| c)
                    } else {
                        None
                    };
                    if press {
                        if let Some(s) = shift_code {
                            self.fake(KEY_PRESS, s, 0, 0)?;
                        }
                        self.fake(KEY_PRESS, code, 0, 0)?;
                    } else {
                        self.fake(KEY_RELEASE, code, 0, 0)?;
                        if let Some(s) = shift_code {
                            self.fake(KEY_RELEASE, s, 0, 0)?;
                        }
                    }
                }
            }
        }
        self.sync("XTestFakeInput")
    }

    fn prepare_keys(&mut self, keysyms: &[Keysym]) -> Result<(), DesktopError> {
        let mut missing: Vec<Keysym> = keysyms
            .iter()
            .copied()
            .filter(|k| self.keycode(*k).is_none())
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        // Spare keycodes: no keysym at all, taken from the top down.
        let spare: Vec<usize> = (0..self.keymap.len())
            .rev()
            .filter(|i| self.keymap[*i].iter().all(|s| *s == 0))
            .take(missing.len())
            .collect();
        if spare.len() < missing.len() {
            return Err(DesktopError::KeycodesExhausted {
                count: missing.len(),
            });
        }
        let per = usize::from(self.per_keycode.max(1));
        for (index, keysym) in spare.into_iter().zip(missing) {
            let code = u8::try_from(self.min_keycode as usize + index)
                .map_err(|_| DesktopError::KeycodesExhausted { count: 1 })?;
            let mut syms = vec![0; per];
            syms[0] = keysym;
            if per > 1 {
                syms[1] = keysym;
            }
            self.conn
                .change_keyboard_mapping(1, code, self.per_keycode, &syms)
                .map_err(err("ChangeKeyboardMapping"))?;
            self.keymap[index] = syms;
            self.remapped.push(code);
        }
        self.sync("ChangeKeyboardMapping")?;
        // Clients reload their keymap on MappingNotify; give them the time to.
        std::thread::sleep(Duration::from_millis(REMAP_SETTLE_MS));
        Ok(())
    }

    fn restore_keys(&mut self) -> Result<(), DesktopError> {
        if self.remapped.is_empty() {
            return Ok(());
        }
        // Let the clients read the last keys with the mapping they were typed with.
        std::thread::sleep(Duration::from_millis(REMAP_SETTLE_MS));
        let per = usize::from(self.per_keycode.max(1));
        for code in std::mem::take(&mut self.remapped) {
            let syms = vec![0; per];
            self.conn
                .change_keyboard_mapping(1, code, self.per_keycode, &syms)
                .map_err(err("ChangeKeyboardMapping"))?;
            let index = usize::from(code - self.min_keycode);
            self.keymap[index] = syms;
        }
        self.sync("ChangeKeyboardMapping")
    }

    fn clipboard_get(&mut self, max: usize, timeout_ms: u64) -> Result<String, DesktopError> {
        let atoms = self.atoms;
        let owner = self
            .conn
            .get_selection_owner(atoms.CLIPBOARD)
            .map_err(err("GetSelectionOwner"))?
            .reply()
            .map_err(err("GetSelectionOwner"))?
            .owner;
        if owner == 0 {
            return Err(DesktopError::ClipboardEmpty);
        }
        self.conn
            .delete_property(self.window, atoms.AIDO_SELECTION)
            .map_err(err("DeleteProperty"))?;
        self.conn
            .convert_selection(
                self.window,
                atoms.CLIPBOARD,
                atoms.UTF8_STRING,
                atoms.AIDO_SELECTION,
                x11rb::CURRENT_TIME,
            )
            .map_err(err("ConvertSelection"))?;
        self.conn.flush().map_err(err("ConvertSelection"))?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let property = loop {
            match self
                .conn
                .poll_for_event()
                .map_err(err("ConvertSelection"))?
            {
                Some(XEvent::SelectionNotify(e)) if e.requestor == self.window => {
                    break e.property;
                }
                Some(_) => continue,
                None if Instant::now() >= deadline => {
                    return Err(DesktopError::ClipboardTimeout { timeout_ms });
                }
                None => std::thread::sleep(Duration::from_millis(POLL_MS)),
            }
        };
        if property == 0 {
            return Err(DesktopError::ClipboardEmpty);
        }
        let words = u32::try_from(max.div_ceil(4) + 1).unwrap_or(u32::MAX);
        let reply = self
            .conn
            .get_property(
                true,
                self.window,
                atoms.AIDO_SELECTION,
                AtomEnum::ANY,
                0,
                words,
            )
            .map_err(err("GetProperty"))?
            .reply()
            .map_err(err("GetProperty"))?;
        if reply.type_ == atoms.INCR {
            let size = reply.value32().and_then(|mut v| v.next()).unwrap_or(0) as usize;
            return Err(DesktopError::TooLarge {
                what: "the clipboard",
                size,
                max,
            });
        }
        let size = reply.value.len() + reply.bytes_after as usize;
        if size > max {
            return Err(DesktopError::TooLarge {
                what: "the clipboard",
                size,
                max,
            });
        }
        Ok(if reply.type_ == atoms.UTF8_STRING {
            String::from_utf8_lossy(&reply.value).into_owned()
        } else {
            // STRING is Latin-1.
            reply.value.iter().map(|b| char::from(*b)).collect()
        })
    }

    fn clipboard_set(&mut self, text: &str) -> Result<(), DesktopError> {
        let owner = self.clipboard_owner()?;
        owner.set(text.as_bytes().to_vec())
    }
}

impl Drop for X11 {
    fn drop(&mut self) {
        let _ = self.restore_keys();
    }
}

type SetReply = mpsc::Sender<Result<(), DesktopError>>;

/// The clipboard's owner: a thread with its own connection that holds the text and answers
/// selection requests. It stops when the backend drops it.
struct Owner {
    set: mpsc::Sender<(Vec<u8>, SetReply)>,
}

impl Owner {
    fn start(display: &str) -> Result<Self, DesktopError> {
        let (conn, screen_num) =
            x11rb::connect(Some(display)).map_err(|e| DesktopError::ConnectFailed {
                display: display.to_owned(),
                why: e.to_string(),
            })?;
        let root = conn
            .setup()
            .roots
            .get(screen_num)
            .map(|s| s.root)
            .ok_or_else(|| DesktopError::protocol("setup", "no such screen"))?;
        let atoms = Atoms::new(&conn)
            .map_err(err("InternAtom"))?
            .reply()
            .map_err(err("InternAtom"))?;
        let window = conn.generate_id().map_err(err("GenerateId"))?;
        conn.create_window(
            0,
            window,
            root,
            0,
            0,
            1,
            1,
            0,
            WindowClass::INPUT_ONLY,
            0,
            &CreateWindowAux::new(),
        )
        .map_err(err("CreateWindow"))?;
        conn.flush().map_err(err("CreateWindow"))?;
        let (set, commands) = mpsc::channel::<(Vec<u8>, SetReply)>();
        std::thread::Builder::new()
            .name("aido-clipboard".into())
            .spawn(move || serve(conn, window, atoms, commands))
            .map_err(|e| DesktopError::protocol("clipboard thread", e))?;
        Ok(Self { set })
    }

    fn set(&self, text: Vec<u8>) -> Result<(), DesktopError> {
        let (tx, rx) = mpsc::channel();
        self.set.send((text, tx)).map_err(|_| {
            DesktopError::protocol("SetSelectionOwner", "the clipboard thread is gone")
        })?;
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| DesktopError::ClipboardTimeout { timeout_ms: 5000 })?
    }
}

#[allow(clippy::too_many_lines)]
fn serve(
    conn: RustConnection,
    window: u32,
    atoms: Atoms,
    commands: mpsc::Receiver<(Vec<u8>, SetReply)>,
) {
    let mut text: Option<Vec<u8>> = None;
    let selections = [atoms.CLIPBOARD, u32::from(AtomEnum::PRIMARY)];
    loop {
        match commands.try_recv() {
            Ok((bytes, reply)) => {
                let owned = (|| -> Result<(), DesktopError> {
                    for selection in selections {
                        conn.set_selection_owner(window, selection, x11rb::CURRENT_TIME)
                            .map_err(err("SetSelectionOwner"))?;
                    }
                    let owner = conn
                        .get_selection_owner(atoms.CLIPBOARD)
                        .map_err(err("GetSelectionOwner"))?
                        .reply()
                        .map_err(err("GetSelectionOwner"))?
                        .owner;
                    if owner != window {
                        return Err(DesktopError::protocol(
                            "SetSelectionOwner",
                            "another client kept the clipboard",
                        ));
                    }
                    Ok(())
                })();
                if owned.is_ok() {
                    text = Some(bytes);
                }
                let _ = reply.send(owned);
                continue;
            }
            Err(mpsc::TryRecvError::Disconnected) => return,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let event = match conn.poll_for_event() {
            Ok(Some(e)) => e,
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(POLL_MS));
                continue;
            }
            Err(_) => return,
        };
        match event {
            XEvent::SelectionRequest(request) => {
                let mut property = if request.property == 0 {
                    request.target
                } else {
                    request.property
                };
                let answered = match &text {
                    Some(bytes) if request.target == atoms.TARGETS => conn
                        .change_property32(
                            PropMode::REPLACE,
                            request.requestor,
                            property,
                            AtomEnum::ATOM,
                            &[
                                atoms.TARGETS,
                                atoms.UTF8_STRING,
                                u32::from(AtomEnum::STRING),
                                atoms.TEXT,
                                atoms.TEXT_PLAIN_UTF8,
                            ],
                        )
                        .map(|_| bytes.len())
                        .is_ok(),
                    Some(bytes)
                        if [
                            atoms.UTF8_STRING,
                            atoms.TEXT,
                            atoms.TEXT_PLAIN_UTF8,
                            u32::from(AtomEnum::STRING),
                        ]
                        .contains(&request.target) =>
                    {
                        let type_ = if request.target == atoms.TEXT {
                            atoms.UTF8_STRING
                        } else {
                            request.target
                        };
                        conn.change_property8(
                            PropMode::REPLACE,
                            request.requestor,
                            property,
                            type_,
                            bytes,
                        )
                        .is_ok()
                    }
                    _ => false,
                };
                if !answered {
                    property = 0;
                }
                let notify = SelectionNotifyEvent {
                    response_type: x11rb::protocol::xproto::SELECTION_NOTIFY_EVENT,
                    sequence: 0,
                    time: request.time,
                    requestor: request.requestor,
                    selection: request.selection,
                    target: request.target,
                    property,
                };
                let _ = conn.send_event(false, request.requestor, EventMask::NO_EVENT, notify);
                let _ = conn.flush();
            }
            XEvent::SelectionClear(clear) if clear.selection == atoms.CLIPBOARD => text = None,
            _ => {}
        }
    }
}
