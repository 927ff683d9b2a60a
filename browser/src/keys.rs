//! Key names as DevTools key events: the DOM `key`, its `code` and Windows virtual key code.

/// A key to press: what `Input.dispatchKeyEvent` needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    /// The DOM `key` value (`Enter`, `a`).
    pub key: String,
    /// The DOM `code` (`Enter`, `KeyA`).
    pub code: String,
    /// The Windows virtual key code Chromium keys its default actions on.
    pub virtual_code: u32,
    /// The text the key types, if any.
    pub text: Option<String>,
}

/// Named keys: (name, code, virtual key code, text).
const NAMED: &[(&str, &str, u32, Option<&str>)] = &[
    ("Enter", "Enter", 13, Some("\r")),
    ("Tab", "Tab", 9, None),
    ("Escape", "Escape", 27, None),
    ("Backspace", "Backspace", 8, None),
    ("Delete", "Delete", 46, None),
    ("ArrowUp", "ArrowUp", 38, None),
    ("ArrowDown", "ArrowDown", 40, None),
    ("ArrowLeft", "ArrowLeft", 37, None),
    ("ArrowRight", "ArrowRight", 39, None),
    ("Home", "Home", 36, None),
    ("End", "End", 35, None),
    ("PageUp", "PageUp", 33, None),
    ("PageDown", "PageDown", 34, None),
    ("Space", "Space", 32, Some(" ")),
    ("Insert", "Insert", 45, None),
    ("F1", "F1", 112, None),
    ("F2", "F2", 113, None),
    ("F3", "F3", 114, None),
    ("F4", "F4", 115, None),
    ("F5", "F5", 116, None),
    ("F6", "F6", 117, None),
    ("F7", "F7", 118, None),
    ("F8", "F8", 119, None),
    ("F9", "F9", 120, None),
    ("F10", "F10", 121, None),
    ("F11", "F11", 122, None),
    ("F12", "F12", 123, None),
];

/// Modifier keys: the names a chord may use, the key event, and its bit in DevTools'
/// `modifiers` (Alt 1, Control 2, Meta 4, Shift 8).
const MODIFIERS: &[(&[&str], &str, &str, u32, u32)] = &[
    (&["alt", "option"], "Alt", "AltLeft", 18, 1),
    (&["ctrl", "control"], "Control", "ControlLeft", 17, 2),
    (
        &["cmd", "command", "meta", "super", "win"],
        "Meta",
        "MetaLeft",
        91,
        4,
    ),
    (&["shift"], "Shift", "ShiftLeft", 16, 8),
];

/// xdotool's and the computer-use tools' names for keys the DOM names otherwise.
const ALIASES: &[(&str, &str)] = &[
    ("esc", "Escape"),
    ("return", "Enter"),
    ("backspace", "Backspace"),
    ("del", "Delete"),
    ("page_up", "PageUp"),
    ("pgup", "PageUp"),
    ("page_down", "PageDown"),
    ("pgdn", "PageDown"),
    ("up", "ArrowUp"),
    ("down", "ArrowDown"),
    ("left", "ArrowLeft"),
    ("right", "ArrowRight"),
    ("space", "Space"),
    ("kp_enter", "Enter"),
];

/// A chord: modifiers held around one key (`ctrl+shift+p`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chord {
    /// The modifiers' key events, in the order they are pressed.
    pub held: Vec<Key>,
    /// Their DevTools bits together.
    pub bits: u32,
    /// The key pressed while they are held; `None` for a chord of modifiers only (`shift`).
    pub key: Option<Key>,
}

/// The modifier a chord part names, as its key event and bit.
pub(crate) fn modifier(name: &str) -> Option<(Key, u32)> {
    let lower = name.to_ascii_lowercase();
    MODIFIERS
        .iter()
        .find(|(names, ..)| names.contains(&lower.as_str()))
        .map(|(_, key, code, virtual_code, bit)| {
            (
                Key {
                    key: (*key).to_owned(),
                    code: (*code).to_owned(),
                    virtual_code: *virtual_code,
                    text: None,
                },
                *bit,
            )
        })
}

/// A chord written `ctrl+a`, `cmd+shift+p`, `Return` or `shift` (modifiers only). `None` when
/// a part names no key.
pub(crate) fn chord(written: &str) -> Option<Chord> {
    // A lone "+" is the plus key, and "ctrl++" holds ctrl around it.
    let (mods, last) = match written.strip_suffix("++") {
        Some(head) => (head, "+"),
        None => match written.rsplit_once('+') {
            Some((head, last)) if !last.is_empty() => (head, last),
            _ => ("", written),
        },
    };
    let mut held = Vec::new();
    let mut bits = 0;
    for part in mods.split('+').filter(|p| !p.is_empty()) {
        let (key, bit) = modifier(part)?;
        held.push(key);
        bits |= bit;
    }
    if let Some((key, bit)) = modifier(last) {
        held.push(key);
        return Some(Chord {
            held,
            bits: bits | bit,
            key: None,
        });
    }
    let mut key = key(last)?;
    if bits & 8 != 0
        && let Some(text) = &key.text
    {
        key.text = Some(text.to_uppercase());
        key.key = key.key.to_uppercase();
    }
    // Ctrl, Alt or Meta held: the key is a shortcut, it types nothing.
    if bits & 7 != 0 {
        key.text = None;
    }
    Some(Chord {
        held,
        bits,
        key: Some(key),
    })
}

/// The key called `name`: a named key (case-insensitive, `Esc` and `Return` too) or one
/// printable character. `None` for anything else.
pub(crate) fn key(name: &str) -> Option<Key> {
    let lower = name.to_ascii_lowercase();
    let canonical = match ALIASES.iter().find(|(alias, _)| *alias == lower) {
        Some((_, named)) => (*named).to_owned(),
        None if name == " " => "Space".to_owned(),
        None => name.to_owned(),
    };
    if let Some((key, code, virtual_code, text)) = NAMED
        .iter()
        .find(|(key, ..)| key.eq_ignore_ascii_case(&canonical))
    {
        let key = if *key == "Space" { " " } else { key };
        return Some(Key {
            key: key.to_owned(),
            code: (*code).to_owned(),
            virtual_code: *virtual_code,
            text: text.map(str::to_owned),
        });
    }
    let mut chars = name.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    if c.is_control() {
        return None;
    }
    Some(character(c))
}

/// The key event for one printable character.
pub(crate) fn character(c: char) -> Key {
    let upper = c.to_ascii_uppercase();
    let (code, virtual_code) = if c.is_ascii_alphabetic() {
        (format!("Key{upper}"), u32::from(upper))
    } else if c.is_ascii_digit() {
        (format!("Digit{c}"), u32::from(c))
    } else {
        (String::new(), 0)
    };
    Key {
        key: c.to_string(),
        code,
        virtual_code,
        text: Some(c.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::{chord, key};

    #[test]
    fn chords_hold_their_modifiers() {
        let select_all = chord("ctrl+a").unwrap();
        assert_eq!(select_all.bits, 2);
        assert_eq!(select_all.held[0].key, "Control");
        let a = select_all.key.unwrap();
        assert_eq!((a.code.as_str(), a.text), ("KeyA", None));
        let palette = chord("cmd+shift+p").unwrap();
        assert_eq!(palette.bits, 4 | 8);
        let upper = chord("shift+a").unwrap().key.unwrap();
        assert_eq!(upper.text.as_deref(), Some("A"));
        assert_eq!(chord("Return").unwrap().key.unwrap().key, "Enter");
        assert_eq!(chord("BackSpace").unwrap().key.unwrap().key, "Backspace");
        assert_eq!(chord("Page_Down").unwrap().key.unwrap().key, "PageDown");
        assert_eq!(chord("F5").unwrap().key.unwrap().virtual_code, 116);
        let shift = chord("shift").unwrap();
        assert!(shift.key.is_none() && shift.bits == 8);
        assert_eq!(chord("ctrl++").unwrap().key.unwrap().key, "+");
        assert_eq!(chord("+").unwrap().key.unwrap().key, "+");
        assert!(chord("hyper+a").is_none());
        assert!(chord("ctrl+nokey").is_none());
    }

    #[test]
    fn names_and_characters() {
        let enter = key("enter").unwrap();
        assert_eq!(
            (enter.virtual_code, enter.text.as_deref()),
            (13, Some("\r"))
        );
        assert_eq!(key("Esc").unwrap().key, "Escape");
        assert_eq!(key("a").unwrap().code, "KeyA");
        assert_eq!(key("7").unwrap().virtual_code, u32::from('7'));
        assert!(key("Hyper").is_none());
        assert!(key("\u{7}").is_none());
    }
}
