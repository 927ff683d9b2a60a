//! A fetched page as the agent reads it: HTML converted to markdown (htmd, turndown's
//! rules) or to plain text, then a window of it (`offset` and `length` in characters), so a
//! long page is read a piece at a time. Pure: playback converts the recorded body again.

use serde::{Deserialize, Serialize};

/// How a page is handed to the agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// HTML as markdown (headings, links, lists, tables, code); other text as it is.
    #[default]
    Markdown,
    /// HTML as plain text: markdown's markup dropped, link texts kept.
    Text,
    /// The body as received.
    Raw,
}

/// Whether a content type is HTML (or the body looks like it when none is given).
pub fn is_html(content_type: &str, body: &str) -> bool {
    let kind = content_type.to_ascii_lowercase();
    if kind.contains("html") {
        return true;
    }
    if !kind.trim().is_empty() {
        return false;
    }
    let head: String = body
        .trim_start()
        .chars()
        .take(64)
        .collect::<String>()
        .to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html")
}

/// The page in `format`. Scripts, styles and other invisible parts of HTML are dropped.
pub fn convert(body: &str, content_type: &str, format: Format) -> String {
    if format == Format::Raw || !is_html(content_type, body) {
        return body.to_owned();
    }
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "head", "svg", "iframe", "object",
        ])
        .build();
    // htmd fails only on an I/O error of its in-memory reader; the page is then kept as text.
    let markdown = converter.convert(body).unwrap_or_else(|_| body.to_owned());
    match format {
        Format::Markdown | Format::Raw => markdown,
        Format::Text => plain(&markdown),
    }
}

/// Markdown without its markup: `[text](url)` is `text`, images go, emphasis, heading marks,
/// quote marks and code fences are dropped; lines and list items stay.
pub fn plain(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            continue;
        }
        let body = trimmed
            .trim_start_matches('#')
            .trim_start_matches('>')
            .trim_start();
        out.push_str(&inline_plain(body));
        out.push('\n');
    }
    out.trim_end().to_owned()
}

fn inline_plain(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let image = c == '!' && chars.get(i + 1) == Some(&'[');
        if c == '[' || image {
            let open = if image { i + 1 } else { i };
            if let Some(close) = find(&chars, open + 1, ']')
                && chars.get(close + 1) == Some(&'(')
                && let Some(end) = find(&chars, close + 2, ')')
            {
                if !image {
                    out.extend(&chars[open + 1..close]);
                }
                i = end + 1;
                continue;
            }
        }
        if matches!(c, '*' | '_' | '`') {
            i += 1;
            continue;
        }
        if c == '\\' && i + 1 < chars.len() {
            out.push(chars[i + 1]);
            i += 2;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

fn find(chars: &[char], from: usize, what: char) -> Option<usize> {
    (from..chars.len()).find(|&j| chars[j] == what)
}

/// A window of a converted page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    /// The characters of the window.
    pub content: String,
    /// Where it starts, in characters.
    pub offset: usize,
    /// The page's length in characters.
    pub total_chars: usize,
    /// Where the next window starts, when the page goes on.
    pub next_offset: Option<usize>,
}

/// `length` characters of `text` from `offset` (both in characters, never splitting one).
pub fn window(text: &str, offset: usize, length: usize) -> Window {
    let total_chars = text.chars().count();
    let start = offset.min(total_chars);
    let content: String = text.chars().skip(start).take(length).collect();
    let end = start + content.chars().count();
    Window {
        content,
        offset: start,
        total_chars,
        next_offset: (end < total_chars).then_some(end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "<!doctype html><html><head><title>T</title><style>p{}</style></head><body>\
        <h1>Rust</h1><p>A <a href=\"https://www.rust-lang.org/\">language</a> for <b>everyone</b>.</p>\
        <script>alert('x')</script><ul><li>fast</li><li>safe</li></ul></body></html>";

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let md = convert(PAGE, "text/html; charset=utf-8", Format::Markdown);
        assert!(md.starts_with("# Rust"), "{md}");
        assert!(
            md.contains("[language](https://www.rust-lang.org/)"),
            "{md}"
        );
        assert!(md.contains("**everyone**"), "{md}");
        assert!(md.contains("fast") && md.contains("safe"), "{md}");
        assert!(!md.contains("alert") && !md.contains("p{}"), "{md}");
    }

    #[test]
    fn text_drops_the_markup() {
        let text = convert(PAGE, "text/html", Format::Text);
        assert!(text.starts_with("Rust\n"), "{text}");
        assert!(text.contains("A language for everyone."), "{text}");
        assert!(!text.contains("https://") && !text.contains('*'), "{text}");
    }

    #[test]
    fn non_html_and_raw_are_kept() {
        assert_eq!(
            convert("{\"a\": 1}", "application/json", Format::Markdown),
            "{\"a\": 1}"
        );
        assert_eq!(convert(PAGE, "text/html", Format::Raw), PAGE);
        assert!(is_html("", "<!DOCTYPE html><p>x"));
    }

    #[test]
    fn windows_page_by_characters() {
        let w = window("héllo wörld", 3, 4);
        assert_eq!(w.content, "lo w");
        assert_eq!((w.offset, w.total_chars, w.next_offset), (3, 11, Some(7)));
        let last = window("héllo", 2, 100);
        assert_eq!((last.content.as_str(), last.next_offset), ("llo", None));
        let past = window("abc", 10, 5);
        assert_eq!((past.content.as_str(), past.offset), ("", 3));
    }
}
