//! Secrets out of log text, before anything is matched, returned or journaled: values of
//! secret-looking keys (`NAME=value`, `NAME: value`, `"name": "value"`, judged by the same
//! [`is_secret_name`] that keeps `run_command`'s secret environment values out of
//! the journal), bearer and basic credentials, passwords in URLs, and well-known token shapes.
//! Redacting before `grep` runs means a pattern cannot probe a secret one character at a time.

use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What a secret is replaced by.
pub const MARK: &str = "[REDACTED]";

static PAIR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"(?P<name>[A-Za-z0-9_.\-]+)(?P<q1>"?)(?P<sep>\s*[:=]\s*)(?P<q2>"?)(?P<value>[^\s"',;&}\]]+)"#).ok()
});
static SCHEME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?P<scheme>bearer|basic|token)\s+[A-Za-z0-9._~+/=\-]{8,}").ok()
});
static URL_PASSWORD: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?P<head>://[^/\s:@]+:)[^/\s@]+@").ok());
static SHAPES: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_\-]{20,}",
        r"|AKIA[0-9A-Z]{16}|xox[baprs]-[A-Za-z0-9\-]{10,}|glpat-[A-Za-z0-9_\-]{20,})",
        r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    ))
    .ok()
});

/// `text` with its secrets replaced by [`MARK`]. If a pattern could not be built (it is a
/// constant, so never), every line is replaced: redaction fails closed.
pub fn redact(text: &str) -> String {
    let (Some(pair), Some(scheme), Some(url), Some(shapes)) = (
        PAIR.as_ref(),
        SCHEME.as_ref(),
        URL_PASSWORD.as_ref(),
        SHAPES.as_ref(),
    ) else {
        return text.lines().map(|_| format!("{MARK}\n")).collect();
    };
    let text = shapes.replace_all(text, MARK);
    let text = scheme.replace_all(&text, |c: &Captures| format!("{} {MARK}", &c["scheme"]));
    let text = url.replace_all(&text, |c: &Captures| format!("{}{MARK}@", &c["head"]));
    let text = pair.replace_all(&text, |c: &Captures| {
        let value = &c["value"];
        let keep = !is_secret_name(&c["name"])
            || value == MARK
            || value.starts_with('[')
            || ["bearer", "basic", "token"]
                .iter()
                .any(|s| value.eq_ignore_ascii_case(s));
        if keep {
            c[0].to_owned()
        } else {
            format!("{}{}{}{}{MARK}", &c["name"], &c["q1"], &c["sep"], &c["q2"])
        }
    });
    text.into_owned()
}

/// How many secrets a redacted text shows as redacted.
pub fn count(redacted: &str) -> u64 {
    redacted.matches(MARK).count() as u64
}

/// Whether an environment variable's value must not be journaled (only its hash is).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|word| upper.contains(word))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn secrets_of_every_shape_are_redacted_and_the_rest_is_kept() {
        let cases = [
            ("API_KEY=hunter2 mode=fast", "API_KEY=[REDACTED] mode=fast"),
            (
                r#"{"password": "p4ss", "user": "bob"}"#,
                r#"{"password": "[REDACTED]", "user": "bob"}"#,
            ),
            (
                "Authorization: Bearer abcdefgh12345678",
                "Authorization: Bearer [REDACTED]",
            ),
            (
                "fetch https://bob:s3cret@example.com/x",
                "fetch https://bob:[REDACTED]@example.com/x",
            ),
            (
                "token ghp_abcdefghijklmnopqrstuvwxyz0123 used",
                "token [REDACTED] used",
            ),
            ("key AKIAABCDEFGHIJKLMNOP here", "key [REDACTED] here"),
            ("-----BEGIN RSA PRIVATE KEY-----", "[REDACTED]"),
            ("path=/tmp/x count=3", "path=/tmp/x count=3"),
        ];
        for (given, want) in cases {
            assert_eq!(redact(given), want, "{given}");
        }
        assert_eq!(count(&redact("A_TOKEN=x B_SECRET=y")), 2);
    }
}
