//! What a network primitive aims at: a scheme, a host (a name or an address) and a port,
//! parsed the way browsers parse them (WHATWG, the `url` crate), so every spelling of an
//! address (`2130706433`, `0x7f.1`, `0177.0.0.1`, `[::ffff:7f00:1]`) becomes the one address
//! the judge sees.

use std::fmt;
use std::net::IpAddr;

use url::Url;

use crate::error::NetError;

/// The longest host name, in bytes of its ASCII (IDNA) form: 253, the most DNS can carry
/// (RFC 1035). A longer one cannot resolve, so it is refused before anything looks it up.
pub const DOMAIN_BYTES_MAX: usize = 253;
/// The longest host as written, in bytes, before IDNA maps it (a name in Unicode takes more
/// bytes than its ASCII form): what a parser is given at most, whatever a client sends.
pub const HOST_TEXT_BYTES_MAX: usize = 1024;

/// A host: a DNS name (lowercase, no trailing dot, IDNA-encoded) or an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A name, resolved later and judged address by address.
    Domain(String),
    /// An address, judged before anything is sent.
    Ip(IpAddr),
}

impl Host {
    /// Parse a host as a URL's host is parsed (numeric IPv4 spellings included; an IPv6
    /// address in brackets or bare).
    pub fn parse(text: &str) -> Result<Self, NetError> {
        let invalid = |why: String| NetError::UrlInvalid {
            url: text.to_owned(),
            why,
        };
        let bare = text.trim();
        if bare.is_empty() {
            return Err(invalid("the host is empty".into()));
        }
        if bare.len() > HOST_TEXT_BYTES_MAX {
            return Err(NetError::UrlInvalid {
                url: shortened(bare),
                why: format!(
                    "a host of {} bytes (at most {HOST_TEXT_BYTES_MAX})",
                    bare.len()
                ),
            });
        }
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        match url::Host::parse(bare).map_err(|e| invalid(e.to_string()))? {
            url::Host::Ipv4(v4) => Ok(Self::Ip(IpAddr::V4(v4))),
            url::Host::Ipv6(v6) => Ok(Self::Ip(IpAddr::V6(v6))),
            url::Host::Domain(d) => domain(&d).map_err(|why| NetError::UrlInvalid {
                url: shortened(bare),
                why,
            }),
        }
    }

    /// The address, for an address.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Self::Ip(ip) => Some(*ip),
            Self::Domain(_) => None,
        }
    }

    /// As written in a URL or an allowlist entry (`[::1]` for IPv6).
    pub fn bracketed(&self) -> String {
        match self {
            Self::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Domain(d) => f.write_str(d),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

fn trim_dot(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A parsed name, refused past [`DOMAIN_BYTES_MAX`].
fn domain(name: &str) -> Result<Host, String> {
    let name = trim_dot(name);
    if name.len() > DOMAIN_BYTES_MAX {
        return Err(format!(
            "a host name of {} bytes (DNS carries at most {DOMAIN_BYTES_MAX})",
            name.len()
        ));
    }
    Ok(Host::Domain(name))
}

/// The start of an overlong text, for a message that must stay short.
fn shortened(text: &str) -> String {
    let start: String = text.chars().take(64).collect();
    format!("{start}…")
}

/// A name as allowlist entries hold it: lowercase, IDNA-encoded, no trailing dot.
pub(crate) fn normalize_domain(name: &str) -> Result<String, String> {
    match url::Host::parse(name).map_err(|e| e.to_string())? {
        url::Host::Domain(d) => Ok(trim_dot(&d)),
        _ => Err("a suffix must be a name, not an address".into()),
    }
}

/// A scheme, a host and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `http`, `https`, or `tcp` for port_check.
    pub scheme: &'static str,
    /// The host.
    pub host: Host,
    /// The port (the scheme's default when the URL names none).
    pub port: u16,
}

impl Target {
    /// Parse an http or https URL. Other schemes are refused.
    pub fn from_url(text: &str) -> Result<(Url, Self), NetError> {
        let url = Url::parse(text.trim()).map_err(|e| NetError::UrlInvalid {
            url: crate::redact::url_text(text),
            why: e.to_string(),
        })?;
        let target = Self::of(&url)?;
        Ok((url, target))
    }

    /// The target of a parsed URL (a redirect's `Location` joined to its base).
    pub fn of(url: &Url) -> Result<Self, NetError> {
        let scheme = match url.scheme() {
            "http" => "http",
            "https" => "https",
            other => {
                return Err(NetError::SchemeRefused {
                    scheme: other.to_owned(),
                });
            }
        };
        let host = match url.host() {
            Some(url::Host::Domain(d)) => domain(d).map_err(|why| NetError::UrlInvalid {
                url: shortened(&crate::redact::url(url)),
                why,
            })?,
            Some(url::Host::Ipv4(v4)) => Host::Ip(IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => Host::Ip(IpAddr::V6(v6)),
            None => {
                return Err(NetError::UrlInvalid {
                    url: crate::redact::url(url),
                    why: "it names no host".into(),
                });
            }
        };
        let port = url.port_or_known_default().unwrap_or(80);
        Ok(Self { scheme, host, port })
    }

    /// A host and port for a plain TCP connection (port_check).
    pub fn tcp(host: &str, port: u16) -> Result<Self, NetError> {
        let host = host.trim();
        let inner = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Ok(Self {
            scheme: "tcp",
            host: Host::parse(inner)?,
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_spellings_become_one_address() {
        for text in [
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://127.0.0.1./",
        ] {
            let (_, t) = Target::from_url(text).unwrap();
            assert_eq!(t.host, Host::Ip("127.0.0.1".parse().unwrap()), "{text}");
            assert_eq!(t.port, 80);
        }
        let (_, t) = Target::from_url("https://[::ffff:7f00:1]:8443/").unwrap();
        assert_eq!(t.host, Host::Ip("::ffff:127.0.0.1".parse().unwrap()));
        assert_eq!(t.port, 8443);
    }

    #[test]
    fn overlong_hosts_are_refused_before_they_are_looked_up() {
        let label = "a".repeat(63);
        let longest = [label.as_str(); 4].join(".")[..DOMAIN_BYTES_MAX].to_owned();
        assert!(matches!(Host::parse(&longest), Ok(Host::Domain(d)) if d == longest));
        let table = [
            format!("{longest}a"),
            format!("{longest}.com"),
            "a.".repeat(HOST_TEXT_BYTES_MAX),
            "x".repeat(16 << 10),
        ];
        for host in &table {
            let error = Host::parse(host).unwrap_err();
            assert_eq!(error.code(), "net_url_invalid", "{}", host.len());
            assert!(error.to_string().len() < 300, "{error}");
            let error = Target::tcp(host, 443).unwrap_err();
            assert_eq!(error.code(), "net_url_invalid");
            let error = Target::from_url(&format!("http://{host}/")).unwrap_err();
            assert_eq!(error.code(), "net_url_invalid");
        }
    }

    #[test]
    fn names_are_normalized() {
        let (_, t) = Target::from_url("https://Example.COM./").unwrap();
        assert_eq!(t.host, Host::Domain("example.com".into()));
        assert_eq!(t.port, 443);
        assert_eq!(
            Target::tcp("[::1]", 22).unwrap().host,
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Target::tcp("2130706433", 22).unwrap().host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
    }
}
