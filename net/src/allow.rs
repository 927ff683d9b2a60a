//! The policy's allowlist: which hosts and ports the network primitives may reach, and which
//! refused address ranges they may reach anyway.
//!
//! An entry is `host:port`, `host` (ports 80 and 443), `host:*` (every port), `*.suffix`
//! (any name under the suffix, not the suffix itself) with the same port forms, an IP
//! literal (`127.0.0.1:8080`, `[::1]:11434`), or `*` (every host: the public web, since
//! refused ranges stay refused). An address in a refused range (see
//! [`crate::range`]) is reached only when the policy names it: an entry that is that exact
//! IP literal, or a block of `allow_ranges` holding it.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::NetError;
use crate::range::classify;
use crate::target::{Host, Target};

/// Which ports an entry allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ports {
    /// 80 and 443.
    Web,
    /// Exactly this one.
    One(u16),
    /// Every port.
    Any,
}

impl Ports {
    fn allows(self, port: u16) -> bool {
        match self {
            Self::Web => port == 80 || port == 443,
            Self::One(p) => p == port,
            Self::Any => true,
        }
    }
}

/// What an entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// One name, lowercase, no trailing dot.
    Exact(String),
    /// Names ending in `.suffix` (the suffix held with its leading dot).
    Suffix(String),
    /// One address.
    Ip(IpAddr),
    /// Every host (the public web: refused ranges stay refused).
    Any,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    pattern: Pattern,
    ports: Ports,
}

/// The network part of the policy: the allowlist and the refused ranges it opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetPolicy {
    rules: Vec<Rule>,
    ranges: Vec<IpNet>,
}

/// A target the allowlist admitted, and whether its entry names its address exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The target.
    pub target: Target,
    /// The entry that admitted it, as written in the policy (`*.example.com:443`).
    pub entry: String,
}

impl NetPolicy {
    /// Parse the allowlist and the allowed ranges. An empty allowlist refuses all network.
    pub fn new(allow: &[String], ranges: &[String]) -> Result<Self, NetError> {
        let rules = allow
            .iter()
            .map(|e| parse_entry(e))
            .collect::<Result<_, _>>()?;
        let ranges = ranges
            .iter()
            .map(|r| {
                r.trim()
                    .parse::<IpNet>()
                    .or_else(|_| r.trim().parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| NetError::AllowInvalid {
                        entry: r.clone(),
                        why: "not an address or a CIDR block".into(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules, ranges })
    }

    /// Whether any host at all may be reached.
    pub fn is_closed(&self) -> bool {
        self.rules.is_empty()
    }

    /// Judge a target by the allowlist (host and port) and, for an IP literal, its address.
    /// A name's addresses are judged after resolution, by [`NetPolicy::check_address`].
    pub fn admit(&self, target: &Target) -> Result<Admitted, NetError> {
        let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.ports.allows(target.port) && matches(&r.pattern, &target.host))
        else {
            return Err(NetError::HostDenied {
                host: target.host.to_string(),
                port: target.port,
            });
        };
        if let Host::Ip(ip) = target.host
            && rule.pattern != Pattern::Ip(ip)
        {
            self.check_address(&target.host.to_string(), ip)?;
        }
        Ok(Admitted {
            target: target.clone(),
            entry: entry_text(rule),
        })
    }

    /// Judge a name for a lookup: any entry naming the host, whatever its ports.
    pub fn admit_any_port(&self, target: &Target) -> Result<Admitted, NetError> {
        let rule = self
            .rules
            .iter()
            .find(|r| matches(&r.pattern, &target.host))
            .ok_or_else(|| NetError::HostDenied {
                host: target.host.to_string(),
                port: target.port,
            })?;
        Ok(Admitted {
            target: target.clone(),
            entry: entry_text(rule),
        })
    }

    /// Judge one address a name resolved to (or a literal): refused when it falls in a
    /// refused range no `allow_ranges` block holds.
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), NetError> {
        let Some(range) = classify(ip) else {
            return Ok(());
        };
        // A block written as IPv4 also opens the same address carried in IPv6.
        let canonical = match ip {
            IpAddr::V6(v6) => crate::range::embedded_v4(v6).map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        self.named(host, ip, canonical, range)
    }

    fn named(
        &self,
        host: &str,
        ip: IpAddr,
        canonical: IpAddr,
        range: crate::range::Range,
    ) -> Result<(), NetError> {
        if self
            .ranges
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&canonical))
        {
            return Ok(());
        }
        Err(NetError::AddressRefused {
            host: host.to_owned(),
            address: ip,
            range: range.kind.name(),
            block: range.block.to_string(),
        })
    }
}

fn matches(pattern: &Pattern, host: &Host) -> bool {
    match (pattern, host) {
        (Pattern::Exact(name), Host::Domain(d)) => name == d,
        (Pattern::Suffix(suffix), Host::Domain(d)) => d.ends_with(suffix.as_str()),
        (Pattern::Ip(a), Host::Ip(b)) => a == b,
        (Pattern::Any, _) => true,
        _ => false,
    }
}

fn entry_text(rule: &Rule) -> String {
    let host = match &rule.pattern {
        Pattern::Exact(n) => n.clone(),
        Pattern::Suffix(s) => format!("*{s}"),
        Pattern::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        Pattern::Ip(ip) => ip.to_string(),
        Pattern::Any => "*".to_owned(),
    };
    match rule.ports {
        Ports::Web => host,
        Ports::One(p) => format!("{host}:{p}"),
        Ports::Any => format!("{host}:*"),
    }
}

fn parse_entry(entry: &str) -> Result<Rule, NetError> {
    let invalid = |why: &str| NetError::AllowInvalid {
        entry: entry.to_owned(),
        why: why.to_owned(),
    };
    let text = entry.trim();
    if text.contains("://") || text.contains('/') || text.contains('@') {
        return Err(invalid("an entry is host or host:port, not a URL"));
    }
    // Split the port off: `[v6]:port`, `[v6]`, `host:port`, `host`.
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| invalid("an unclosed ["))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| invalid("junk after ]"))?),
        };
        (inside, port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return Err(invalid("an IPv6 address must be in brackets")),
            None => (text, None),
        }
    };
    let ports = match port {
        None => Ports::Web,
        Some("*") => Ports::Any,
        Some(p) => Ports::One(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| invalid("the port is not 1 to 65535 or *"))?,
        ),
    };
    let pattern = if host == "*" {
        Pattern::Any
    } else if let Some(suffix) = host.strip_prefix("*.") {
        let name = crate::target::normalize_domain(suffix).map_err(|why| invalid(&why))?;
        if !name.contains('.') && name != "localhost" {
            return Err(invalid(
                "a suffix needs at least two labels (*.example.com)",
            ));
        }
        Pattern::Suffix(format!(".{name}"))
    } else if host.contains('*') {
        return Err(invalid("a wildcard is only allowed as a leading *."));
    } else {
        match crate::target::Host::parse(host).map_err(|e| invalid(&e.to_string()))? {
            Host::Ip(ip) => Pattern::Ip(ip),
            Host::Domain(d) => Pattern::Exact(d),
        }
    };
    Ok(Rule { pattern, ports })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], ranges: &[&str]) -> NetPolicy {
        let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        let ranges: Vec<String> = ranges.iter().map(|s| s.to_string()).collect();
        NetPolicy::new(&allow, &ranges).unwrap()
    }

    fn code(p: &NetPolicy, url: &str) -> &'static str {
        match Target::from_url(url).and_then(|(_, t)| p.admit(&t)) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn the_default_refuses_everything() {
        let p = NetPolicy::default();
        assert!(p.is_closed());
        assert_eq!(code(&p, "https://example.com/"), "net_denied");
    }

    #[test]
    fn exact_and_suffix_entries_with_ports() {
        let p = policy(
            &[
                "example.com",
                "*.docs.rs",
                "api.local.test:8443",
                "any.test:*",
            ],
            &[],
        );
        let table = [
            ("https://example.com/x", "ok"),
            ("http://example.com/x", "ok"),
            ("https://EXAMPLE.com./x", "ok"),
            ("https://example.com:8080/", "net_denied"),
            ("https://www.example.com/", "net_denied"),
            ("https://serde.docs.rs/", "ok"),
            ("https://a.b.docs.rs/", "ok"),
            ("https://docs.rs/", "net_denied"),
            ("https://evildocs.rs/", "net_denied"),
            ("https://api.local.test:8443/", "ok"),
            ("https://api.local.test/", "net_denied"),
            ("http://any.test:1234/", "ok"),
            ("ftp://example.com/", "net_scheme_refused"),
            ("file:///etc/passwd", "net_scheme_refused"),
            ("not a url", "net_url_invalid"),
        ];
        for (url, expected) in table {
            assert_eq!(code(&p, url), expected, "{url}");
        }
    }

    /// Every spelling of loopback and metadata addresses is the same address to the judge,
    /// refused unless the policy names it.
    #[test]
    fn ip_literals_in_every_spelling_are_refused() {
        let p = policy(&["127.0.0.1:8080", "*.evil.test:*"], &[]);
        let refused = [
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://127.1/",
            "http://127.0.0.2/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[0:0:0:0:0:ffff:7f00:1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://2852039166/",
            "http://0xa9fea9fe/",
            "http://0251.0376.0251.0376/",
            "http://[::ffff:169.254.169.254]/",
            "http://[fd00:ec2::254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:a9fe:a9fe::]/",
            "http://[::ffff:0:7f00:1]/",
            "http://[::ffff:0:a9fe:a9fe]/",
            "http://[64:ff9b:1::7f00:1]/",
            "http://[64:ff9b:1:7f00:0:100::]/",
            "http://[::127.0.0.1]/",
            "http://[2001:0:53aa:64c::1]/",
            "http://[2606:4700:1:2:0:5efe:a9fe:a9fe]/",
            "http://0.0.0.0/",
            "http://10.0.0.1/",
            "http://[fe80::1]/",
            "http://100.64.0.1/",
        ];
        for url in refused {
            let (_, target) = Target::from_url(url).unwrap();
            // Admitted by a port-wide rule so the address is what is judged.
            let wide = policy(&[&format!("{}:*", target.host.bracketed())], &[]);
            let exact_ok = matches!(&target.host, Host::Ip(ip) if *ip == "127.0.0.1".parse::<IpAddr>().unwrap())
                && target.port == 8080;
            if !exact_ok {
                assert_eq!(code(&p, url), "net_denied", "{url} (not allowlisted)");
            }
            let judged = wide.admit(&target);
            // An entry naming the literal exactly is the policy naming it.
            assert!(
                judged.is_ok(),
                "{url}: an exact IP entry admits its address"
            );
            let by_suffix = policy(&["*.evil.test:*"], &[]);
            assert_eq!(
                by_suffix
                    .check_address("a.evil.test", target.host.ip().unwrap())
                    .unwrap_err()
                    .code(),
                "net_address_refused",
                "{url}"
            );
        }
        assert_eq!(code(&p, "http://127.0.0.1:8080/"), "ok");
        assert_eq!(code(&p, "http://2130706433:8080/"), "ok");
    }

    #[test]
    fn a_star_admits_the_public_web_only() {
        let p = policy(&["*"], &[]);
        assert_eq!(code(&p, "https://example.com/"), "ok");
        assert_eq!(code(&p, "http://93.184.215.14/"), "ok");
        assert_eq!(code(&p, "http://example.com:8080/"), "net_denied");
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[::ffff:0:a9fe:a9fe]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[2002:7f00:1::]/",
            "http://169.254.169.254/",
            "http://[fd00:ec2::254]/",
        ] {
            assert_eq!(code(&p, url), "net_address_refused", "{url}");
        }
    }

    #[test]
    fn allowed_ranges_open_refused_blocks() {
        let p = policy(&["localhost:*"], &["127.0.0.0/8"]);
        assert!(
            p.check_address("localhost", "127.0.0.1".parse().unwrap())
                .is_ok()
        );
        assert!(
            p.check_address("localhost", "::ffff:127.0.0.1".parse().unwrap())
                .is_ok()
        );
        // A block written as IPv4 opens the same address in every IPv6 form that is it.
        for carried in ["::ffff:0:7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::"] {
            assert!(
                p.check_address("localhost", carried.parse().unwrap())
                    .is_ok(),
                "{carried}"
            );
        }
        let err = p
            .check_address("localhost", "::1".parse().unwrap())
            .unwrap_err();
        assert_eq!(err.code(), "net_address_refused");
        let metadata = p
            .check_address("localhost", "169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert!(matches!(
            metadata,
            NetError::AddressRefused {
                range: "metadata",
                ..
            }
        ));
        assert!(
            p.check_address("example.com", "93.184.215.14".parse().unwrap())
                .is_ok()
        );
    }

    #[test]
    fn bad_entries_are_refused() {
        for entry in [
            "http://example.com",
            "example.com/path",
            "user@example.com",
            "*example.com",
            "a.*.com",
            "*.com",
            "example.com:0",
            "example.com:70000",
            "::1",
            "[::1",
        ] {
            let err = NetPolicy::new(&[entry.to_owned()], &[]).unwrap_err();
            assert_eq!(err.code(), "net_allow_invalid", "{entry}");
        }
        let err = NetPolicy::new(&[], &["127.0.0.0/33".to_owned()]).unwrap_err();
        assert_eq!(err.code(), "net_allow_invalid");
    }
}
