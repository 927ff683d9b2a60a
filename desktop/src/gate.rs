//! The desktop's own gates on windows: which apps may be driven or seen (WM_CLASS / app_id
//! and title rules), which are terminals (their input is judged as a command by the caller).
//! Deny rules win over allow rules; with allow rules set, a window none of them matches is
//! refused too. Rules are compiled once; a rule that does not compile is a config error.

use regex::Regex;
use serde::Serialize;

use crate::backend::Window;
use crate::error::DesktopError;

/// One rule: a class (matched case-insensitively against WM_CLASS instance or class, or the
/// app_id) and/or a title regex. A rule with both needs both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppRule {
    /// The class.
    pub class: Option<String>,
    /// The title regex.
    pub title: Option<String>,
}

#[derive(Clone, Debug)]
struct Compiled {
    class: Option<String>,
    title: Option<Regex>,
    text: String,
}

impl Compiled {
    fn matches(&self, w: &Window) -> bool {
        let class = self
            .class
            .as_ref()
            .is_none_or(|c| w.class.eq_ignore_ascii_case(c) || w.instance.eq_ignore_ascii_case(c));
        let title = self.title.as_ref().is_none_or(|t| t.is_match(&w.title));
        class && title
    }
}

/// The compiled rules.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    allow: Vec<Compiled>,
    deny: Vec<Compiled>,
    terminals: Vec<String>,
}

/// What the rules say of a window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Judged {
    /// It may be driven.
    Allowed,
    /// It may not (and is blacked out of screenshots when a deny rule matched).
    Denied {
        /// Why.
        why: String,
        /// A deny rule matched (not merely no allow rule).
        deny_listed: bool,
    },
}

fn compile(rule: &AppRule) -> Result<Compiled, DesktopError> {
    let text = format!(
        "class={} title={}",
        rule.class.as_deref().unwrap_or("*"),
        rule.title.as_deref().unwrap_or("*")
    );
    if rule.class.is_none() && rule.title.is_none() {
        return Err(DesktopError::RuleInvalid {
            rule: text,
            why: "a rule needs a class or a title".into(),
        });
    }
    let title = rule
        .title
        .as_deref()
        .map(|t| {
            regex::RegexBuilder::new(t)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| DesktopError::RuleInvalid {
                    rule: text.clone(),
                    why: e.to_string(),
                })
        })
        .transpose()?;
    Ok(Compiled {
        class: rule.class.clone(),
        title,
        text,
    })
}

impl Rules {
    /// Compile allow and deny rules and the terminal classes.
    pub fn new(
        allow: &[AppRule],
        deny: &[AppRule],
        terminals: &[String],
    ) -> Result<Self, DesktopError> {
        Ok(Self {
            allow: allow.iter().map(compile).collect::<Result<_, _>>()?,
            deny: deny.iter().map(compile).collect::<Result<_, _>>()?,
            terminals: terminals.to_vec(),
        })
    }

    /// Whether allow rules are set (then input needs a judged target).
    pub fn restricts(&self) -> bool {
        !self.allow.is_empty()
    }

    /// Judge a window.
    pub fn judge(&self, w: &Window) -> Judged {
        if let Some(rule) = self.deny.iter().find(|r| r.matches(w)) {
            return Judged::Denied {
                why: format!("it matches the deny rule {}", rule.text),
                deny_listed: true,
            };
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.matches(w)) {
            return Judged::Denied {
                why: "no desktop.allow rule matches it".into(),
                deny_listed: false,
            };
        }
        Judged::Allowed
    }

    /// A window's refusal, or Ok.
    pub fn check(&self, w: &Window) -> Result<(), DesktopError> {
        match self.judge(w) {
            Judged::Allowed => Ok(()),
            Judged::Denied { why, .. } => Err(DesktopError::WindowDenied {
                window: w.id,
                class: w.class.clone(),
                title: w.title.clone(),
                why,
            }),
        }
    }

    /// Whether a deny rule matches (the window is blacked out of screenshots and its title is
    /// hidden).
    pub fn deny_listed(&self, w: &Window) -> bool {
        self.deny.iter().any(|r| r.matches(w))
    }

    /// Whether the window is a terminal (its input is a command).
    pub fn is_terminal(&self, w: &Window) -> bool {
        self.terminals
            .iter()
            .any(|t| w.class.eq_ignore_ascii_case(t) || w.instance.eq_ignore_ascii_case(t))
    }
}

/// The terminals aido knows, by WM_CLASS / app_id.
pub const TERMINALS_DEFAULT: &[&str] = &[
    "xterm",
    "uxterm",
    "foot",
    "footclient",
    "urxvt",
    "rxvt",
    "alacritty",
    "kitty",
    "wezterm",
    "st",
    "gnome-terminal-server",
    "org.gnome.terminal",
    "org.gnome.console",
    "konsole",
    "org.kde.konsole",
    "xfce4-terminal",
    "terminator",
    "tilix",
    "lxterminal",
    "mate-terminal",
    "qterminal",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn window(class: &str, title: &str) -> Window {
        Window {
            id: 1,
            instance: class.to_ascii_lowercase(),
            class: class.into(),
            title: title.into(),
            ..Window::default()
        }
    }

    fn rule(class: Option<&str>, title: Option<&str>) -> AppRule {
        AppRule {
            class: class.map(str::to_owned),
            title: title.map(str::to_owned),
        }
    }

    /// Table: deny wins, allow restricts, class is case-insensitive, title is a regex.
    #[test]
    fn rules_table() {
        let rules = Rules::new(
            &[rule(Some("xterm"), None), rule(None, Some("^notes"))],
            &[
                rule(None, Some("(?i)password")),
                rule(Some("keepassxc"), None),
            ],
            &["xterm".into()],
        )
        .unwrap();
        let cases = [
            (window("XTerm", "bash"), true),
            (window("XTerm", "Password prompt"), false),
            (window("Gedit", "notes.txt"), true),
            (window("Gedit", "other.txt"), false),
            (window("KeePassXC", "notes"), false),
        ];
        for (w, allowed) in cases {
            assert_eq!(rules.check(&w).is_ok(), allowed, "{w:?}");
        }
        assert!(rules.deny_listed(&window("KeePassXC", "x")));
        assert!(!rules.deny_listed(&window("Gedit", "other.txt")));
        assert!(rules.is_terminal(&window("XTerm", "")));
        assert!(!rules.is_terminal(&window("Gedit", "")));
    }

    #[test]
    fn bad_rules_are_coded() {
        let empty = Rules::new(&[rule(None, None)], &[], &[]).unwrap_err();
        assert_eq!(empty.code(), "desktop_rule_invalid");
        let regex = Rules::new(&[], &[rule(None, Some("("))], &[]).unwrap_err();
        assert_eq!(regex.code(), "desktop_rule_invalid");
    }
}
