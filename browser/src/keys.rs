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
];

/// The key called `name`: a named key (case-insensitive, `Esc` and `Return` too) or one
/// printable character. `None` for anything else.
pub(crate) fn key(name: &str) -> Option<Key> {
    let canonical = match name.to_ascii_lowercase().as_str() {
        "esc" => "Escape".to_owned(),
        "return" => "Enter".to_owned(),
        " " => "Space".to_owned(),
        _ => name.to_owned(),
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
    use super::key;

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
