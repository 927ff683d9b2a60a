//! A US keyboard: which QEMU key codes (qcodes) type a character, and what a chord like
//! `ctrl+alt+t` presses.

use crate::error::VmError;

/// The qcode for a character, and whether shift is held.
pub fn for_char(c: char) -> Result<(&'static str, bool), VmError> {
    const LOWER: [&str; 26] = [
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
        "s", "t", "u", "v", "w", "x", "y", "z",
    ];
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    let plain = |k| Ok((k, false));
    let shifted = |k| Ok((k, true));
    match c {
        'a'..='z' => plain(LOWER[(c as u8 - b'a') as usize]),
        'A'..='Z' => shifted(LOWER[(c as u8 - b'A') as usize]),
        '0'..='9' => plain(DIGITS[(c as u8 - b'0') as usize]),
        ' ' => plain("spc"),
        '\n' => plain("ret"),
        '\t' => plain("tab"),
        '-' => plain("minus"),
        '_' => shifted("minus"),
        '=' => plain("equal"),
        '+' => shifted("equal"),
        '[' => plain("bracket_left"),
        '{' => shifted("bracket_left"),
        ']' => plain("bracket_right"),
        '}' => shifted("bracket_right"),
        '\\' => plain("backslash"),
        '|' => shifted("backslash"),
        ';' => plain("semicolon"),
        ':' => shifted("semicolon"),
        '\'' => plain("apostrophe"),
        '"' => shifted("apostrophe"),
        '`' => plain("grave_accent"),
        '~' => shifted("grave_accent"),
        ',' => plain("comma"),
        '<' => shifted("comma"),
        '.' => plain("dot"),
        '>' => shifted("dot"),
        '/' => plain("slash"),
        '?' => shifted("slash"),
        '!' => shifted("1"),
        '@' => shifted("2"),
        '#' => shifted("3"),
        '$' => shifted("4"),
        '%' => shifted("5"),
        '^' => shifted("6"),
        '&' => shifted("7"),
        '*' => shifted("8"),
        '(' => shifted("9"),
        ')' => shifted("0"),
        other => Err(VmError::UnknownKey {
            what: other.to_string(),
        }),
    }
}

/// The qcodes a chord presses, in order (`ctrl+alt+t` -> ctrl, alt, t). Names are
/// case-insensitive; xdotool-style names (`Return`, `BackSpace`, `super`) are accepted.
pub fn chord(spec: &str) -> Result<Vec<&'static str>, VmError> {
    let unknown = || VmError::UnknownKey {
        what: spec.to_owned(),
    };
    if spec.trim().is_empty() {
        return Err(unknown());
    }
    spec.split('+')
        .map(|part| {
            let name = part.trim().to_ascii_lowercase();
            let code = match name.as_str() {
                "ctrl" | "control" | "control_l" => "ctrl",
                "ctrl_r" | "control_r" => "ctrl_r",
                "alt" | "alt_l" => "alt",
                "alt_r" | "altgr" => "alt_r",
                "shift" | "shift_l" => "shift",
                "shift_r" => "shift_r",
                "super" | "meta" | "win" | "cmd" | "super_l" => "meta_l",
                "enter" | "return" | "ret" | "kp_enter" => "ret",
                "esc" | "escape" => "esc",
                "backspace" => "backspace",
                "tab" => "tab",
                "space" | "spc" => "spc",
                "delete" | "del" => "delete",
                "insert" => "insert",
                "home" => "home",
                "end" => "end",
                "pageup" | "page_up" | "prior" | "pgup" => "pgup",
                "pagedown" | "page_down" | "next" | "pgdn" => "pgdn",
                "up" => "up",
                "down" => "down",
                "left" => "left",
                "right" => "right",
                "f1" => "f1",
                "f2" => "f2",
                "f3" => "f3",
                "f4" => "f4",
                "f5" => "f5",
                "f6" => "f6",
                "f7" => "f7",
                "f8" => "f8",
                "f9" => "f9",
                "f10" => "f10",
                "f11" => "f11",
                "f12" => "f12",
                "minus" => "minus",
                "plus" | "equal" => "equal",
                one if one.chars().count() == 1 => {
                    let c = one.chars().next().ok_or_else(unknown)?;
                    for_char(c).map_err(|_| unknown())?.0
                }
                _ => return Err(unknown()),
            };
            Ok(code)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_and_chords_map_to_qcodes() {
        assert_eq!(for_char('a').unwrap(), ("a", false));
        assert_eq!(for_char('Q').unwrap(), ("q", true));
        assert_eq!(for_char('|').unwrap(), ("backslash", true));
        assert_eq!(for_char('\n').unwrap(), ("ret", false));
        assert_eq!(for_char('é').unwrap_err().code(), "vm_unknown_key");
        assert_eq!(chord("ctrl+alt+t").unwrap(), ["ctrl", "alt", "t"]);
        assert_eq!(chord("Return").unwrap(), ["ret"]);
        assert_eq!(chord("super+L").unwrap(), ["meta_l", "l"]);
        assert_eq!(chord("ctrl+nope").unwrap_err().code(), "vm_unknown_key");
    }
}
