//! Secrets kept out of the journal: a URL's userinfo and secret-looking query values, and
//! secret headers (Authorization, Cookie, API keys). The request goes out with the real
//! values; the journal holds a marker in their place.

use url::Url;

/// What the journal keeps in place of a secret value: a marker with its length only (a hash
/// would let a short secret be guessed offline).
pub fn marker(value: &str) -> String {
    format!("[redacted {} bytes]", value.len())
}

/// Whether a header carries a secret: credentials, cookies and anything named like a key or
/// token.
pub fn is_secret_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || [
        "key",
        "token",
        "secret",
        "auth",
        "password",
        "session",
        "signature",
    ]
    .iter()
    .any(|word| lower.contains(word))
}

/// Whether a query parameter carries a secret (`api_key`, `token`, `sig`, ...).
fn is_secret_param(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    is_secret_header(&lower) || matches!(lower.as_str(), "sig" | "code" | "pass" | "pwd")
}

/// The URL as the journal keeps it: userinfo and secret query values replaced by markers.
pub fn url(url: &Url) -> String {
    let mut kept = url.clone();
    if !kept.username().is_empty() {
        let _ = kept.set_username("redacted");
    }
    if kept.password().is_some() {
        let _ = kept.set_password(Some("redacted"));
    }
    if kept.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_param(&k) {
                    marker(&v)
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        kept.query_pairs_mut().clear().extend_pairs(pairs);
    }
    kept.to_string()
}

/// A URL given as text, redacted when it parses; otherwise its userinfo (before a `@`) and
/// its query are replaced by markers (they may hold credentials).
pub fn url_text(text: &str) -> String {
    if let Ok(u) = Url::parse(text.trim()) {
        return url(&u);
    }
    let mut kept: String = text.chars().take(512).collect();
    if let Some(at) = kept.find('@') {
        let start = kept.find("://").map_or(0, |i| i + 3);
        if start <= at {
            kept.replace_range(start..=at, "[redacted]@");
        }
    }
    if let Some(q) = kept.find('?') {
        kept.truncate(q);
        kept.push_str("?[redacted]");
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_secret_params_are_replaced() {
        let u =
            Url::parse("https://alice:hunter2@example.com/p?api_key=abc&q=rust&token=t0k").unwrap();
        let kept = url(&u);
        assert!(
            !kept.contains("hunter2") && !kept.contains("alice"),
            "{kept}"
        );
        assert!(!kept.contains("abc") && !kept.contains("t0k"), "{kept}");
        assert!(kept.contains("q=rust"), "{kept}");
        assert_eq!(
            url_text("http://a:b@[bad?k=v"),
            "http://[redacted]@[bad?[redacted]"
        );
    }

    #[test]
    fn secret_headers_are_known() {
        for name in [
            "Authorization",
            "cookie",
            "X-Api-Key",
            "x-goog-api-key",
            "X-Auth-Token",
            "Proxy-Authorization",
        ] {
            assert!(is_secret_header(name), "{name}");
        }
        for name in ["accept", "content-type", "user-agent", "anthropic-version"] {
            assert!(!is_secret_header(name), "{name}");
        }
    }
}
