use std::net::IpAddr;

/// Why a target is refused before anything is sent. Each has a stable code.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetError {
    /// Not a URL, or a host that does not parse.
    #[error("{url:?} is not a usable URL or host: {why}")]
    UrlInvalid {
        /// The URL, redacted.
        url: String,
        /// What the parser found.
        why: String,
    },
    /// A scheme other than http or https.
    #[error("the scheme {scheme:?} is refused (only http and https)")]
    SchemeRefused {
        /// The scheme.
        scheme: String,
    },
    /// The host and port are not on the policy's allowlist (`[net] allow`).
    #[error("{}", self.message_with("[net] allow", "[net] allow_ranges"))]
    HostDenied {
        /// The host.
        host: String,
        /// The port.
        port: u16,
    },
    /// The address falls in a refused range the policy does not name (`[net] allow_ranges`).
    #[error("{}", self.message_with("[net] allow", "[net] allow_ranges"))]
    AddressRefused {
        /// The host as asked for.
        host: String,
        /// The address it is or resolved to.
        address: IpAddr,
        /// The kind of range (`loopback`, `metadata`, ...).
        range: &'static str,
        /// The block (`127.0.0.0/8`).
        block: String,
    },
    /// An allowlist entry or range that does not parse.
    #[error("the network allowlist entry {entry:?} is invalid: {why}")]
    AllowInvalid {
        /// The entry.
        entry: String,
        /// Why.
        why: String,
    },
}

impl NetError {
    /// The message, naming the settings the allowlist and the ranges came from (`[net] allow`
    /// for aido's own network tools, `[processes] egress` for a command's proxy) and what to
    /// add to them to allow the target.
    pub fn message_with(&self, allow: &str, ranges: &str) -> String {
        match self {
            Self::HostDenied { host, port } => format!(
                "{host}:{port} is not on the network allowlist ({allow}); add \"{host}:{port}\" \
                 there to allow it"
            ),
            Self::AddressRefused {
                host,
                address,
                range,
                block,
            } => format!(
                "{host} is {address}, in the refused {range} range {block} ({ranges} does not \
                 name it; add \"{block}\" there to allow it)"
            ),
            other => other.to_string(),
        }
    }
}

aido_codes::coded!(NetError {
    UrlInvalid => "net_url_invalid",
    SchemeRefused => "net_scheme_refused",
    HostDenied => "net_denied",
    AddressRefused => "net_address_refused",
    AllowInvalid => "net_allow_invalid",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_table_is_pinned() {
        let all = [
            NetError::UrlInvalid {
                url: String::new(),
                why: String::new(),
            },
            NetError::SchemeRefused {
                scheme: String::new(),
            },
            NetError::HostDenied {
                host: String::new(),
                port: 0,
            },
            NetError::AddressRefused {
                host: String::new(),
                address: IpAddr::from([0, 0, 0, 0]),
                range: "",
                block: String::new(),
            },
            NetError::AllowInvalid {
                entry: String::new(),
                why: String::new(),
            },
        ];
        let codes: Vec<_> = all.iter().map(NetError::code).collect();
        assert_eq!(codes, NetError::CODES);
    }
}
