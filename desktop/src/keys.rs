//! Keys as X keysyms: names (`Return`, `ctrl`, `F5`, `a`), characters (any Unicode scalar:
//! Latin-1 keysyms are the code point, others `0x0100_0000 + code point`), chords
//! (`ctrl+shift+t`) and the chords that are never sent (VT switches, the X server's zap,
//! compositor exits).

use crate::error::DesktopError;

/// An X keysym.
pub type Keysym = u32;

/// Modifier keysyms, by the names agents use.
const MODIFIERS: &[(&[&str], Keysym)] = &[
    (&["ctrl", "control", "control_l", "ctrl_l"], 0xffe3),
    (&["control_r", "ctrl_r"], 0xffe4),
    (&["shift", "shift_l"], 0xffe1),
    (&["shift_r"], 0xffe2),
    (&["alt", "alt_l", "option"], 0xffe9),
    (&["alt_r", "altgr"], 0xffea),
    (
        &["super", "super_l", "win", "meta", "cmd", "command", "logo"],
        0xffeb,
    ),
    (&["super_r"], 0xffec),
];

/// Named keys (case-insensitive).
const NAMED: &[(&[&str], Keysym)] = &[
    (&["return", "enter", "kp_enter"], 0xff0d),
    (&["tab"], 0xff09),
    (&["escape", "esc"], 0xff1b),
    (&["backspace", "back_space"], 0xff08),
    (&["delete", "del"], 0xffff),
    (&["insert", "ins"], 0xff63),
    (&["home"], 0xff50),
    (&["end"], 0xff57),
    (&["page_up", "pageup", "prior"], 0xff55),
    (&["page_down", "pagedown", "next"], 0xff56),
    (&["left", "arrowleft"], 0xff51),
    (&["up", "arrowup"], 0xff52),
    (&["right", "arrowright"], 0xff53),
    (&["down", "arrowdown"], 0xff54),
    (&["space"], 0x0020),
    (&["menu"], 0xff67),
    (&["print", "printscreen"], 0xff61),
    (&["sys_req", "sysrq"], 0xff15),
    (&["pause", "break"], 0xff13),
    (&["caps_lock", "capslock"], 0xffe5),
    (&["num_lock", "numlock"], 0xff7f),
    (&["scroll_lock"], 0xff14),
    (&["minus"], 0x002d),
    (&["plus"], 0x002b),
];

/// Keysyms that are refused alone: they switch VTs or end the session.
const REFUSED_ALONE: &[(Keysym, &str)] = &[
    (0xff15, "SysRq reaches the kernel"),
    (0x1008fe01, "XF86Switch_VT_1 switches the virtual terminal"),
    (0x1008fe20, "XF86Ungrab breaks every grab"),
    (0x1008fe21, "XF86ClearGrab kills the grabbing client"),
    (0xfed5, "Terminate_Server kills the X server"),
];

/// Whether `keysym` is a modifier.
pub fn is_modifier(keysym: Keysym) -> bool {
    MODIFIERS.iter().any(|(_, k)| *k == keysym)
}

/// The keysym of one key name: a modifier, a named key, `F1`..`F35`, or one character.
pub fn keysym_of(name: &str) -> Result<Keysym, DesktopError> {
    let lower = name.to_ascii_lowercase();
    let found = MODIFIERS
        .iter()
        .chain(NAMED)
        .find(|(names, _)| names.contains(&lower.as_str()))
        .map(|(_, k)| *k);
    if let Some(k) = found {
        return Ok(k);
    }
    if let Some(n) = lower.strip_prefix('f').and_then(|d| d.parse::<u32>().ok())
        && (1..=35).contains(&n)
    {
        return Ok(0xffbe + n - 1);
    }
    let mut chars = name.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        // One letter names the key, not the shifted character: "ctrl+T" is ctrl+t.
        let c = if c.is_ascii_uppercase() {
            c.to_ascii_lowercase()
        } else {
            c
        };
        return char_keysym(c);
    }
    Err(DesktopError::KeyUnknown {
        name: name.to_owned(),
    })
}

/// The keysym that types `c`.
pub fn char_keysym(c: char) -> Result<Keysym, DesktopError> {
    let code = c as u32;
    match c {
        '\n' | '\r' => Ok(0xff0d),
        '\t' => Ok(0xff09),
        c if c.is_control() => Err(DesktopError::CharUntypable { code }),
        _ if (0x20..=0x7e).contains(&code) || (0xa0..=0xff).contains(&code) => Ok(code),
        _ => Ok(0x0100_0000 + code),
    }
}

/// A chord's keysyms, modifiers first as given (`ctrl+shift+t`, or the keys of
/// press_key_combination), after refusing the ones that are never sent.
pub fn chord(keys: &[String]) -> Result<Vec<Keysym>, DesktopError> {
    let syms = keys
        .iter()
        .map(|k| keysym_of(k))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = keys.join("+");
    if let Some(why) = refused(&syms) {
        return Err(DesktopError::ChordRefused { chord: spec, why });
    }
    Ok(syms)
}

/// Split `ctrl+shift+t` into key names (`+` alone, or last, is the plus key).
pub fn split_chord(spec: &str) -> Vec<String> {
    if spec == "+" {
        return vec!["plus".into()];
    }
    let mut out: Vec<String> = spec.split('+').map(str::to_owned).collect();
    if spec.ends_with("++") {
        out.retain(|k| !k.is_empty());
        out.push("plus".into());
    }
    out.retain(|k| !k.is_empty());
    out
}

/// Why a chord is never sent, if it is one of those.
pub fn refused(syms: &[Keysym]) -> Option<&'static str> {
    let has = |k: Keysym| syms.contains(&k);
    let ctrl = has(0xffe3) || has(0xffe4);
    let alt = has(0xffe9) || has(0xffea);
    let shift = has(0xffe1) || has(0xffe2);
    let logo = has(0xffeb) || has(0xffec);
    let function = syms.iter().any(|k| (0xffbe..=0xffc9).contains(k));
    if let Some((_, why)) = REFUSED_ALONE.iter().find(|(k, _)| has(*k)) {
        return Some(why);
    }
    if syms.iter().any(|k| (0x1008fe01..=0x1008fe0c).contains(k)) {
        return Some("XF86Switch_VT_n switches the virtual terminal");
    }
    if ctrl && alt && function {
        return Some("ctrl+alt+F<n> switches the virtual terminal");
    }
    if ctrl && alt && has(0xff08) {
        return Some("ctrl+alt+BackSpace kills the X server");
    }
    if ctrl && alt && has(0xffff) {
        return Some("ctrl+alt+Delete reboots or logs out");
    }
    if alt && has(0xff61) {
        return Some("alt+Print is the magic SysRq chord");
    }
    if logo && shift && (has(u32::from(b'e')) || has(u32::from(b'q'))) {
        return Some(
            "super+shift+e / super+shift+q exit the compositor or kill windows in sway and i3",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(spec: &str) -> Vec<String> {
        split_chord(spec)
    }

    #[test]
    fn names_chars_and_function_keys() {
        assert_eq!(keysym_of("Return").unwrap(), 0xff0d);
        assert_eq!(keysym_of("enter").unwrap(), 0xff0d);
        assert_eq!(keysym_of("F1").unwrap(), 0xffbe);
        assert_eq!(keysym_of("f12").unwrap(), 0xffc9);
        assert_eq!(keysym_of("a").unwrap(), 0x61);
        assert_eq!(keysym_of("T").unwrap(), 0x74);
        assert_eq!(keysym_of("é").unwrap(), 0xe9);
        assert_eq!(keysym_of("€").unwrap(), 0x0100_20ac);
        assert_eq!(
            keysym_of("nonsense").unwrap_err().code(),
            "desktop_key_unknown"
        );
        assert_eq!(
            char_keysym('\u{7}').unwrap_err().code(),
            "desktop_char_untypable"
        );
    }

    #[test]
    fn split_handles_plus() {
        assert_eq!(keys("ctrl+shift+t"), ["ctrl", "shift", "t"]);
        assert_eq!(keys("ctrl++"), ["ctrl", "plus"]);
        assert_eq!(keys("+"), ["plus"]);
    }

    /// Table: the chords that are never sent, and ordinary ones that are.
    #[test]
    fn dangerous_chords_are_refused() {
        for spec in [
            "ctrl+alt+F1",
            "ctrl+alt+f7",
            "ctrl+alt+BackSpace",
            "ctrl+alt+Delete",
            "alt+Print",
            "sysrq",
            "super+shift+e",
            "super+shift+q",
        ] {
            let err = chord(&keys(spec)).unwrap_err();
            assert_eq!(err.code(), "desktop_chord_refused", "{spec}");
        }
        for spec in [
            "ctrl+c",
            "ctrl+shift+t",
            "alt+F4",
            "F1",
            "super+e",
            "ctrl+alt+t",
        ] {
            assert!(chord(&keys(spec)).is_ok(), "{spec}");
        }
    }
}
