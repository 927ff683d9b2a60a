//! Address ranges a connection is refused unless the policy names them: loopback, private,
//! link-local, carrier-grade NAT, cloud metadata, multicast and the reserved blocks.
//!
//! An IPv6 address that carries an IPv4 address is judged by the IPv4 address it carries, so
//! `[::ffff:127.0.0.1]` is loopback like `127.0.0.1`: IPv4-mapped `::ffff:0:0/96`,
//! IPv4-translated `::ffff:0:0:0/96` (SIIT, RFC 2765), IPv4-compatible `::/96`, NAT64
//! `64:ff9b::/96` and the `/96` form of the local-use `64:ff9b:1::/48` (RFC 6052, RFC 8215),
//! and 6to4 `2002::/16` (RFC 3056). An ISATAP address (`…:0:5efe:a.b.c.d` or
//! `…:200:5efe:a.b.c.d`, RFC 5214) must pass both as IPv6 and as the IPv4 address in its
//! interface identifier. Forms whose IPv4 address cannot be located are refused whole: Teredo
//! (`2001::/32`, the client address is obfuscated), the rest of `64:ff9b::/32` (a site chooses
//! where its local-use prefix puts the address) and the rest of `::/8`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::Serialize;

/// Why an address is not a public one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    /// `0.0.0.0/8`, `::` (this host, "any").
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `100.64/10` (carrier-grade NAT; also Alibaba's metadata address).
    Cgnat,
    /// Cloud metadata services: `169.254.169.254`, `fd00:ec2::254`, `100.100.100.200`.
    Metadata,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `192.0.0/24`, `198.18/15` (benchmarking), `240/4` and broadcast, documentation
    /// blocks, Teredo, the rest of `::/8` and `64:ff9b::/32`, and other special-purpose blocks.
    Reserved,
}

impl RangeKind {
    /// The snake_case name errors and the journal show.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link_local",
            Self::Cgnat => "cgnat",
            Self::Metadata => "metadata",
            Self::Multicast => "multicast",
            Self::Reserved => "reserved",
        }
    }
}

/// A refused range an address fell in: its kind and the block (`127.0.0.0/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Range {
    /// What kind of block.
    pub kind: RangeKind,
    /// The block itself.
    #[serde(serialize_with = "display")]
    pub block: IpNet,
}

fn display<S: serde::Serializer>(net: &IpNet, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(net)
}

/// Most specific first: metadata addresses sit inside link-local, private and CGNAT blocks.
const V4: &[(RangeKind, [u8; 4], u8)] = &[
    (RangeKind::Metadata, [169, 254, 169, 254], 32),
    (RangeKind::Metadata, [100, 100, 100, 200], 32),
    (RangeKind::Unspecified, [0, 0, 0, 0], 8),
    (RangeKind::Private, [10, 0, 0, 0], 8),
    (RangeKind::Cgnat, [100, 64, 0, 0], 10),
    (RangeKind::Loopback, [127, 0, 0, 0], 8),
    (RangeKind::LinkLocal, [169, 254, 0, 0], 16),
    (RangeKind::Private, [172, 16, 0, 0], 12),
    (RangeKind::Reserved, [192, 0, 0, 0], 24),
    (RangeKind::Reserved, [192, 0, 2, 0], 24),
    (RangeKind::Private, [192, 168, 0, 0], 16),
    (RangeKind::Reserved, [198, 18, 0, 0], 15),
    (RangeKind::Reserved, [198, 51, 100, 0], 24),
    (RangeKind::Reserved, [203, 0, 113, 0], 24),
    (RangeKind::Multicast, [224, 0, 0, 0], 4),
    (RangeKind::Reserved, [240, 0, 0, 0], 4),
];

/// Most specific first: `::`, `::1` and `64:ff9b::/32` sit inside `::/8`.
const V6: &[(RangeKind, [u16; 8], u8)] = &[
    (
        RangeKind::Metadata,
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254],
        128,
    ),
    (RangeKind::Unspecified, [0; 8], 128),
    (RangeKind::Loopback, [0, 0, 0, 0, 0, 0, 0, 1], 128),
    // NAT64 beyond the forms whose IPv4 address has a known place (judged before this table).
    (RangeKind::Reserved, [0x0064, 0xff9b, 0, 0, 0, 0, 0, 0], 32),
    // Reserved by the IETF (NAT64 above sits in it too); the forms in it that carry IPv4
    // are judged before this table.
    (RangeKind::Reserved, [0; 8], 8),
    (RangeKind::Private, [0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
    (RangeKind::LinkLocal, [0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    (RangeKind::Multicast, [0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
    // Teredo: the client's IPv4 address is obfuscated, so it cannot be judged.
    (RangeKind::Reserved, [0x2001, 0, 0, 0, 0, 0, 0, 0], 32),
    // Benchmarking (RFC 5180).
    (RangeKind::Reserved, [0x2001, 0x0002, 0, 0, 0, 0, 0, 0], 48),
    // Documentation (RFC 3849, RFC 9637).
    (RangeKind::Reserved, [0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32),
    (RangeKind::Reserved, [0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
    // Discard-only (RFC 6666).
    (RangeKind::Reserved, [0x0100, 0, 0, 0, 0, 0, 0, 0], 64),
    // Site-local, deprecated but still routed by some stacks.
    (RangeKind::Reserved, [0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
];

/// The refused range `ip` falls in, or `None` for a public address. An IPv6 address that
/// carries an IPv4 address is judged by that address; an ISATAP one by both.
pub fn classify(ip: IpAddr) -> Option<Range> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6).or_else(|| isatap_v4(v6).and_then(classify_v4)),
        },
    }
}

/// The IPv4 address an IPv6 address *is*, in one of the transition forms: mapped
/// (`::ffff:0:0/96`), translated (`::ffff:0:0:0/96`), compatible (`::/96`, except `::` and
/// `::1`), NAT64 (`64:ff9b::/96`, and `64:ff9b:1::/96` of the local-use `/48`) or 6to4
/// (`2002::/16`, bits 16..48).
pub fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    match s {
        [0, 0, 0, 0, 0, 0xffff, a, b] => Some(v4_of(a, b)),
        [0, 0, 0, 0, 0xffff, 0, a, b] => Some(v4_of(a, b)),
        [0, 0, 0, 0, 0, 0, 0, 0] | [0, 0, 0, 0, 0, 0, 0, 1] => None,
        [0, 0, 0, 0, 0, 0, a, b] => Some(v4_of(a, b)),
        [0x64, 0xff9b, 0, 0, 0, 0, a, b] => Some(v4_of(a, b)),
        [0x64, 0xff9b, 1, 0, 0, 0, a, b] => Some(v4_of(a, b)),
        [0x2002, a, b, ..] => Some(v4_of(a, b)),
        _ => None,
    }
}

/// The IPv4 address in an ISATAP interface identifier (`0:5efe` for a private IPv4 address,
/// `200:5efe` for a global one; RFC 5214), under any prefix.
fn isatap_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    match v6.segments() {
        [.., 0 | 0x0200, 0x5efe, a, b] => Some(v4_of(a, b)),
        _ => None,
    }
}

fn v4_of(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

fn classify_v4(ip: Ipv4Addr) -> Option<Range> {
    if ip == Ipv4Addr::BROADCAST {
        return Some(Range {
            kind: RangeKind::Reserved,
            block: IpNet::from(IpAddr::V4(ip)),
        });
    }
    V4.iter().find_map(|(kind, octets, prefix)| {
        let net = ipnet::Ipv4Net::new(Ipv4Addr::from(*octets), *prefix).ok()?;
        net.contains(&ip).then_some(Range {
            kind: *kind,
            block: IpNet::V4(net),
        })
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Range> {
    V6.iter().find_map(|(kind, segments, prefix)| {
        let net = ipnet::Ipv6Net::new(Ipv6Addr::from(*segments), *prefix).ok()?;
        net.contains(&ip).then_some(Range {
            kind: *kind,
            block: IpNet::V6(net),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> Option<RangeKind> {
        classify(text.parse().unwrap()).map(|r| r.kind)
    }

    #[test]
    fn every_refused_block_is_classified() {
        let table: &[(&str, Option<RangeKind>)] = &[
            ("127.0.0.1", Some(RangeKind::Loopback)),
            ("127.255.255.254", Some(RangeKind::Loopback)),
            ("0.0.0.0", Some(RangeKind::Unspecified)),
            ("10.1.2.3", Some(RangeKind::Private)),
            ("172.16.0.1", Some(RangeKind::Private)),
            ("172.31.255.255", Some(RangeKind::Private)),
            ("192.168.1.1", Some(RangeKind::Private)),
            ("100.64.0.1", Some(RangeKind::Cgnat)),
            ("100.127.255.255", Some(RangeKind::Cgnat)),
            ("169.254.0.5", Some(RangeKind::LinkLocal)),
            ("169.254.169.254", Some(RangeKind::Metadata)),
            ("100.100.100.200", Some(RangeKind::Metadata)),
            ("224.0.0.1", Some(RangeKind::Multicast)),
            ("240.0.0.1", Some(RangeKind::Reserved)),
            ("255.255.255.255", Some(RangeKind::Reserved)),
            ("198.18.0.1", Some(RangeKind::Reserved)),
            ("192.0.0.8", Some(RangeKind::Reserved)),
            ("::", Some(RangeKind::Unspecified)),
            ("::1", Some(RangeKind::Loopback)),
            ("fd00:ec2::254", Some(RangeKind::Metadata)),
            ("fd12::1", Some(RangeKind::Private)),
            ("fc00::1", Some(RangeKind::Private)),
            ("fe80::1", Some(RangeKind::LinkLocal)),
            ("ff02::1", Some(RangeKind::Multicast)),
            ("2001:0:4136:e378::1", Some(RangeKind::Reserved)),
            // IPv4 carried in IPv6 is judged as IPv4.
            ("::ffff:127.0.0.1", Some(RangeKind::Loopback)),
            ("::ffff:7f00:1", Some(RangeKind::Loopback)),
            ("::ffff:169.254.169.254", Some(RangeKind::Metadata)),
            ("::127.0.0.1", Some(RangeKind::Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(RangeKind::Metadata)),
            ("64:ff9b::10.0.0.1", Some(RangeKind::Private)),
            ("64:ff9b:1::7f00:1", Some(RangeKind::Loopback)),
            ("2002:7f00:1::", Some(RangeKind::Loopback)),
            ("2002:a9fe:a9fe::1", Some(RangeKind::Metadata)),
            // IPv4-translated (SIIT): the attacker's `::ffff:0:7f00:1` was passed as public.
            ("::ffff:0:7f00:1", Some(RangeKind::Loopback)),
            ("::ffff:0:127.0.0.1", Some(RangeKind::Loopback)),
            ("::ffff:0:a9fe:a9fe", Some(RangeKind::Metadata)),
            ("::ffff:0:10.1.2.3", Some(RangeKind::Private)),
            ("::ffff:0:192.168.0.1", Some(RangeKind::Private)),
            ("::ffff:0:169.254.3.4", Some(RangeKind::LinkLocal)),
            ("::ffff:0:100.64.0.1", Some(RangeKind::Cgnat)),
            ("::ffff:0:0.0.0.0", Some(RangeKind::Unspecified)),
            // Mapped and compatible, every refused kind.
            ("::ffff:10.0.0.1", Some(RangeKind::Private)),
            ("::ffff:100.100.100.200", Some(RangeKind::Metadata)),
            ("::169.254.169.254", Some(RangeKind::Metadata)),
            ("::10.0.0.1", Some(RangeKind::Private)),
            // NAT64: the well-known prefix, the /96 form of the local-use /48, and the rest.
            ("64:ff9b::127.0.0.1", Some(RangeKind::Loopback)),
            ("64:ff9b::192.168.1.1", Some(RangeKind::Private)),
            ("64:ff9b:1::a9fe:a9fe", Some(RangeKind::Metadata)),
            ("64:ff9b:1::10.0.0.1", Some(RangeKind::Private)),
            ("64:ff9b:1:7f00:0:100::", Some(RangeKind::Reserved)),
            ("64:ff9b:1:ab:cd::1.1.1.1", Some(RangeKind::Reserved)),
            ("64:ff9b:5::1", Some(RangeKind::Reserved)),
            // 6to4.
            ("2002:a00:1::1", Some(RangeKind::Private)),
            ("2002:c0a8:101::", Some(RangeKind::Private)),
            ("2002:6440:1::", Some(RangeKind::Cgnat)),
            // Teredo, whatever it carries.
            ("2001:0:53aa:64c:0:0:0:1", Some(RangeKind::Reserved)),
            // ISATAP under a public prefix carries a refused IPv4 address; under a refused
            // prefix it is refused as IPv6 whatever it carries.
            ("2606:4700:1:2:0:5efe:7f00:1", Some(RangeKind::Loopback)),
            (
                "2606:4700:1:2:200:5efe:a9fe:a9fe",
                Some(RangeKind::Metadata),
            ),
            ("2606:4700:1:2:0:5efe:10.1.1.1", Some(RangeKind::Private)),
            ("fe80::5efe:1.1.1.1", Some(RangeKind::LinkLocal)),
            // The rest of ::/8 and other special-purpose blocks.
            ("::1:0:0:1", Some(RangeKind::Reserved)),
            ("::ffff:1:7f00:1", Some(RangeKind::Reserved)),
            ("0:0:0:ffff::7f00:1", Some(RangeKind::Reserved)),
            ("2001:2::1", Some(RangeKind::Reserved)),
            ("3fff::1", Some(RangeKind::Reserved)),
            ("100::1", Some(RangeKind::Reserved)),
            // Public addresses pass.
            ("93.184.215.14", None),
            ("1.1.1.1", None),
            ("172.32.0.1", None),
            ("100.128.0.1", None),
            ("2606:4700::1111", None),
            ("::ffff:1.1.1.1", None),
            ("::ffff:0:1.1.1.1", None),
            ("64:ff9b::1.1.1.1", None),
            ("64:ff9b:1::8.8.8.8", None),
            ("2002:0101:0101::1", None),
            ("2606:4700:1:2:200:5efe:1.1.1.1", None),
            ("2606:4700:1:2:1:5efe:7f00:1", None),
        ];
        for (text, expected) in table {
            assert_eq!(kind(text), *expected, "{text}");
        }
    }

    #[test]
    fn the_block_is_named() {
        let range = classify("169.254.1.1".parse().unwrap()).unwrap();
        assert_eq!(range.block.to_string(), "169.254.0.0/16");
        let mapped = classify("::ffff:10.9.8.7".parse().unwrap()).unwrap();
        assert_eq!(mapped.block.to_string(), "10.0.0.0/8");
        let translated = classify("::ffff:0:7f00:1".parse().unwrap()).unwrap();
        assert_eq!(translated.block.to_string(), "127.0.0.0/8");
        let nat64 = classify("64:ff9b:1:7f00:0:100::".parse().unwrap()).unwrap();
        assert_eq!(nat64.block.to_string(), "64:ff9b::/32");
    }
}
