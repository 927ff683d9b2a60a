use std::path::PathBuf;

/// A browser operation failed. Every variant has a stable code; none of them means the
/// operation took effect unless its doc says so.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// The options name no proxy: the browser is never started unproxied (fail closed).
    #[error("no egress proxy was given; the browser is never started without one")]
    ProxyMissing,
    /// The Chromium executable is not there (or not a file).
    #[error("the browser {path:?} is not installed")]
    Unavailable {
        /// The path looked at.
        path: PathBuf,
    },
    /// Chromium did not start, or exited before it offered the DevTools endpoint.
    #[error("the browser did not start: {why}")]
    LaunchFailed {
        /// Why (the spawn error, or the end of its standard error).
        why: String,
    },
    /// The options are not usable (a profile directory that is not a directory, a zero size).
    #[error("the browser options are invalid: {why}")]
    OptionsInvalid {
        /// Why.
        why: String,
    },
    /// Chromium refused a DevTools command, or answered with something unexpected.
    #[error("the browser failed {method}: {why}")]
    Protocol {
        /// The DevTools method.
        method: String,
        /// Its error message.
        why: String,
    },
    /// The DevTools connection is gone (the browser exited or crashed).
    #[error("the browser's DevTools connection is closed")]
    Closed,
    /// Something did not happen within its deadline.
    #[error("{what} did not finish within {timeout_ms} ms")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The deadline.
        timeout_ms: u64,
    },
    /// A navigation failed (DNS, refused connection, the proxy's refusal, ...).
    #[error("navigating to {url:?} failed: {why}")]
    NavigationFailed {
        /// The URL.
        url: String,
        /// Chromium's error text (`net::ERR_...`).
        why: String,
    },
    /// No tab is open (the last one was closed).
    #[error("no tab is open")]
    NoTab,
    /// No tab has this id.
    #[error("no tab {id:?}")]
    TabMissing {
        /// The id asked for.
        id: String,
    },
    /// An element reference that is malformed or names no node of the page.
    #[error(
        "no element {reference:?} on the page: it is stale or was never there (read the page again for fresh references)"
    )]
    RefUnknown {
        /// The reference (`e12`).
        reference: String,
    },
    /// No element matches a CSS selector, or the element has no box to click.
    #[error("element {target:?} is not on the page or has no visible box")]
    ElementMissing {
        /// The reference or selector.
        target: String,
    },
    /// `fill` or `select` on an element that is not a field of that kind.
    #[error("element {reference:?} is not {expected}")]
    NotAField {
        /// The reference.
        reference: String,
        /// What it should be (`an input, textarea or editable element`, `a select`).
        expected: &'static str,
    },
    /// `select` named an option the list does not have.
    #[error("{reference:?} has no option {option:?}")]
    OptionMissing {
        /// The select's reference.
        reference: String,
        /// The option asked for (value or label).
        option: String,
    },
    /// A key name that is not known.
    #[error("unknown key {name:?}")]
    KeyUnknown {
        /// The name.
        name: String,
    },
    /// `evaluate` without `allow_script` in the options.
    #[error("running page scripts is not allowed for this browser (allow_script is off)")]
    ScriptRefused,
    /// The page's script threw.
    #[error("the script threw: {why}")]
    ScriptFailed {
        /// The exception's description.
        why: String,
    },
    /// A request or an answer exceeds a bound.
    #[error("{what} is {size}, more than the {max} allowed")]
    TooLarge {
        /// What.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// A URL whose scheme is not http or https (`file:` would read the host's files around
    /// the proxy, `javascript:` would run script without `allow_script`).
    #[error("the URL {url:?} is refused: only http and https pages are opened")]
    UrlRefused {
        /// The URL.
        url: String,
    },
    /// A download was canceled or its file cannot be read.
    #[error("the download {guid} failed: {why}")]
    DownloadFailed {
        /// Chromium's id for the download.
        guid: String,
        /// Why.
        why: String,
    },
    /// The confinement Chromium runs in (Landlock: files, TCP, scopes; no capabilities)
    /// cannot be built here: the browser is never started without it.
    #[error("the browser cannot be confined here, so it is not started: {why}")]
    Unconfined {
        /// What is missing.
        why: String,
    },
}

aido_codes::coded!(BrowserError {
    ProxyMissing => "browser_proxy_missing",
    Unavailable => "browser_unavailable",
    LaunchFailed => "browser_launch_failed",
    OptionsInvalid => "browser_options_invalid",
    Protocol => "browser_protocol_error",
    Closed => "browser_closed",
    Timeout => "browser_timeout",
    NavigationFailed => "browser_navigation_failed",
    NoTab => "browser_no_tab",
    TabMissing => "browser_tab_missing",
    RefUnknown => "browser_ref_unknown",
    ElementMissing => "browser_element_missing",
    NotAField => "browser_not_a_field",
    OptionMissing => "browser_option_missing",
    KeyUnknown => "browser_key_unknown",
    ScriptRefused => "browser_script_refused",
    ScriptFailed => "browser_script_failed",
    TooLarge => "browser_too_large",
    UrlRefused => "browser_url_refused",
    DownloadFailed => "browser_download_failed",
    Unconfined => "browser_unconfined",
});

impl BrowserError {
    pub(crate) fn protocol(method: &str, why: impl std::fmt::Display) -> Self {
        Self::Protocol {
            method: method.to_owned(),
            why: why.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BrowserError;

    /// The whole table, pinned: a code is never renamed or reused.
    #[test]
    fn codes_are_pinned() {
        assert_eq!(
            BrowserError::CODES,
            &[
                "browser_proxy_missing",
                "browser_unavailable",
                "browser_launch_failed",
                "browser_options_invalid",
                "browser_protocol_error",
                "browser_closed",
                "browser_timeout",
                "browser_navigation_failed",
                "browser_no_tab",
                "browser_tab_missing",
                "browser_ref_unknown",
                "browser_element_missing",
                "browser_not_a_field",
                "browser_option_missing",
                "browser_key_unknown",
                "browser_script_refused",
                "browser_script_failed",
                "browser_too_large",
                "browser_url_refused",
                "browser_download_failed",
                "browser_unconfined",
            ]
        );
        assert_eq!(BrowserError::ProxyMissing.code(), "browser_proxy_missing");
    }
}
