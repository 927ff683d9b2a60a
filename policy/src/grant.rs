//! What a capability grant lets a session do, and whether one grant is narrower than another.
//!
//! A grant only narrows: the policy's gates still judge every action, and the `capabilities`
//! gate then asks the session's grant (primitives, paths, network hosts). What a grant holds
//! over time (expiry, a use count, a rate, revocation) is kept by its store, outside this pure
//! crate; see `aido-grants`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use aido_actions::{AccessKind, Action, SideEffectClass};
use aido_net::{Host, Target};
use serde::{Deserialize, Serialize};

/// The reach of a grant. A field left `None` leaves that dimension as the policy has it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantScope {
    /// Primitive names (`read_file`) or class names (`read_only`) the session may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primitives: Option<BTreeSet<String>>,
    /// Absolute roots the session may read under (write roots are readable too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Vec<PathBuf>>,
    /// Absolute roots the session may write, create and delete under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Vec<PathBuf>>,
    /// Network targets: `host`, `host:port`, `*.suffix` or `*.suffix:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
}

impl GrantScope {
    /// Grants exactly these primitive or class names, nothing else narrowed.
    pub fn primitives<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self {
            primitives: Some(names.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// Whether `primitive` (of `class`) may be called. Composites are judged by their leaves.
    pub fn allows_primitive(&self, primitive: &str, class: SideEffectClass) -> bool {
        class == SideEffectClass::Composite
            || self
                .primitives
                .as_ref()
                .is_none_or(|names| names.contains(primitive) || names.contains(class.name()))
    }

    /// Whether the grant names path roots at all.
    pub fn narrows_paths(&self) -> bool {
        self.read.is_some() || self.write.is_some()
    }

    /// Whether a path (resolved, absolute) may be accessed this way.
    pub fn allows_path(&self, resolved: &Path, kind: AccessKind) -> bool {
        if self.read.is_none() && self.write.is_none() {
            return true;
        }
        let under = |roots: &Option<Vec<PathBuf>>| {
            roots
                .as_ref()
                .is_some_and(|roots| roots.iter().any(|root| resolved.starts_with(root)))
        };
        if kind.needs_write() {
            under(&self.write)
        } else {
            under(&self.read) || under(&self.write)
        }
    }

    /// Whether a network target is within the grant's hosts.
    pub fn allows_target(&self, target: &Target) -> bool {
        let Some(hosts) = &self.hosts else {
            return true;
        };
        let host = match &target.host {
            Host::Domain(name) => name.to_ascii_lowercase(),
            Host::Ip(ip) => ip.to_string(),
        };
        hosts
            .iter()
            .filter_map(|entry| HostEntry::parse(entry))
            .any(|entry| entry.covers_host(&host) && entry.port.is_none_or(|p| p == target.port))
    }

    /// Whether this scope is within `parent` (every dimension the same or narrower); `Err`
    /// says the first dimension that is wider.
    pub fn within(&self, parent: &GrantScope) -> Result<(), String> {
        if let Some(allowed) = &parent.primitives {
            let Some(mine) = &self.primitives else {
                return Err("primitives: the parent grant names primitives; name a subset".into());
            };
            for name in mine {
                let covered = allowed.contains(name)
                    || Action::class_of(name).is_some_and(|class| allowed.contains(class.name()));
                if !covered {
                    return Err(format!("primitives: {name} is not in the parent grant"));
                }
            }
        }
        if parent.read.is_some() || parent.write.is_some() {
            let roots_in = |mine: &Option<Vec<PathBuf>>, theirs: &[&Vec<PathBuf>], what: &str| {
                for root in mine.iter().flatten() {
                    if !theirs.iter().any(|t| t.iter().any(|p| root.starts_with(p))) {
                        return Err(format!(
                            "{what}: {} is not under a root of the parent grant",
                            root.display()
                        ));
                    }
                }
                Ok(())
            };
            if self.read.is_none() && self.write.is_none() {
                return Err("paths: the parent grant names roots; name roots under them".into());
            }
            let parent_write: Vec<&Vec<PathBuf>> = parent.write.iter().collect();
            let parent_any: Vec<&Vec<PathBuf>> =
                parent.read.iter().chain(parent.write.iter()).collect();
            roots_in(&self.write, &parent_write, "write")?;
            roots_in(&self.read, &parent_any, "read")?;
        }
        if let Some(allowed) = &parent.hosts {
            let Some(mine) = &self.hosts else {
                return Err("hosts: the parent grant names hosts; name a subset".into());
            };
            let allowed: Vec<HostEntry> =
                allowed.iter().filter_map(|e| HostEntry::parse(e)).collect();
            for entry in mine {
                let Some(child) = HostEntry::parse(entry) else {
                    return Err(format!(
                        "hosts: {entry:?} is not host[:port] or *.suffix[:port]"
                    ));
                };
                if !allowed.iter().any(|parent| parent.covers(&child)) {
                    return Err(format!("hosts: {entry} is not in the parent grant"));
                }
            }
        }
        Ok(())
    }

    /// Every problem with the scope as written (relative roots, malformed hosts, unknown
    /// primitive or class names).
    pub fn check(&self) -> Result<(), String> {
        for name in self.primitives.iter().flatten() {
            // A downstream tool by its namespaced name (`server__tool`): the server's tools are
            // known only when it runs, so the form is what is checked.
            let downstream = name
                .split_once("__")
                .is_some_and(|(server, tool)| !server.is_empty() && !tool.is_empty());
            let known = Action::class_of(name).is_some()
                || downstream
                || SideEffectClass::ALL
                    .iter()
                    .any(|class| class.name() == name);
            if !known {
                return Err(format!(
                    "primitives: {name} is neither a primitive, a class nor a downstream tool (server__tool)"
                ));
            }
        }
        for root in self.read.iter().chain(self.write.iter()).flatten() {
            if !root.is_absolute() {
                return Err(format!("paths: {} is not absolute", root.display()));
            }
        }
        for entry in self.hosts.iter().flatten() {
            if HostEntry::parse(entry).is_none() {
                return Err(format!(
                    "hosts: {entry:?} is not host[:port] or *.suffix[:port]"
                ));
            }
        }
        Ok(())
    }
}

/// One `hosts` entry.
#[derive(Debug, PartialEq, Eq)]
struct HostEntry {
    /// The host, lowercase; for `*.suffix`, the suffix with its leading dot.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostEntry {
    fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim().to_ascii_lowercase();
        let (host, port) = match entry.rsplit_once(':') {
            // An IPv6 literal is written in brackets: `[::1]:80`.
            Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
                (host.to_owned(), Some(port.parse::<u16>().ok()?))
            }
            _ => (entry.clone(), None),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            return None;
        }
        match host.strip_prefix("*.") {
            Some(suffix) if !suffix.is_empty() && !suffix.contains('*') => Some(Self {
                host: format!(".{suffix}"),
                wildcard: true,
                port,
            }),
            Some(_) => None,
            None if host.contains('*') => None,
            None => Some(Self {
                host,
                wildcard: false,
                port,
            }),
        }
    }

    fn covers_host(&self, host: &str) -> bool {
        if self.wildcard {
            host.ends_with(&self.host)
        } else {
            host == self.host
        }
    }

    /// Whether every target `other` admits, this entry admits too.
    fn covers(&self, other: &HostEntry) -> bool {
        let port = self.port.is_none() || self.port == other.port;
        let host = match (self.wildcard, other.wildcard) {
            (false, false) => self.host == other.host,
            (true, false) => other.host.ends_with(&self.host),
            (true, true) => other.host.ends_with(&self.host),
            (false, true) => false,
        };
        port && host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(read: &[&str], write: &[&str]) -> GrantScope {
        let roots = |r: &[&str]| (!r.is_empty()).then(|| r.iter().map(PathBuf::from).collect());
        GrantScope {
            read: roots(read),
            write: roots(write),
            ..GrantScope::default()
        }
    }

    #[test]
    fn primitives_by_name_or_class_and_composites_by_their_leaves() {
        let g = GrantScope::primitives(["read_only", "write_file"]);
        assert!(g.allows_primitive("read_file", SideEffectClass::ReadOnly));
        assert!(g.allows_primitive("write_file", SideEffectClass::FsWrite));
        assert!(!g.allows_primitive("edit_file", SideEffectClass::FsWrite));
        assert!(g.allows_primitive("pipeline", SideEffectClass::Composite));
        assert!(GrantScope::default().allows_primitive("rewind", SideEffectClass::Destructive));
    }

    #[test]
    fn paths_read_under_either_root_write_only_under_write_roots() {
        let g = paths(&["/w/docs"], &["/w/src"]);
        assert!(g.allows_path(Path::new("/w/docs/a.md"), AccessKind::Read));
        assert!(g.allows_path(Path::new("/w/src/a.rs"), AccessKind::Read));
        assert!(g.allows_path(Path::new("/w/src/a.rs"), AccessKind::Write));
        assert!(!g.allows_path(Path::new("/w/docs/a.md"), AccessKind::Write));
        assert!(!g.allows_path(Path::new("/w/docsx/a.md"), AccessKind::Read));
        assert!(!g.allows_path(Path::new("/w"), AccessKind::Delete));
    }

    #[test]
    fn hosts_exact_suffix_and_port() {
        let g = GrantScope {
            hosts: Some(vec!["api.example.com:443".into(), "*.test.dev".into()]),
            ..GrantScope::default()
        };
        let t = |url: &str| Target::from_url(url).unwrap().1;
        assert!(g.allows_target(&t("https://api.example.com/x")));
        assert!(!g.allows_target(&t("http://api.example.com/x")));
        assert!(g.allows_target(&t("http://a.b.test.dev:8080/")));
        assert!(!g.allows_target(&t("http://test.dev/")));
        assert!(!g.allows_target(&t("http://evil-test.dev/")));
    }

    #[test]
    fn a_child_scope_is_within_its_parent_only_when_narrower_in_every_dimension() {
        let parent = GrantScope {
            primitives: Some(["read_only".into(), "write_file".into()].into()),
            read: Some(vec!["/w".into()]),
            write: Some(vec!["/w/src".into()]),
            hosts: Some(vec!["*.example.com".into()]),
        };
        let ok = GrantScope {
            primitives: Some(["read_file".into()].into()),
            read: Some(vec!["/w/src/lib".into()]),
            write: Some(vec!["/w/src/lib".into()]),
            hosts: Some(vec!["api.example.com:443".into()]),
        };
        assert_eq!(ok.within(&parent), Ok(()));
        let wider = [
            GrantScope {
                primitives: Some(["edit_file".into()].into()),
                ..ok.clone()
            },
            GrantScope {
                primitives: None,
                ..ok.clone()
            },
            GrantScope {
                write: Some(vec!["/w/docs".into()]),
                ..ok.clone()
            },
            GrantScope {
                read: Some(vec!["/etc".into()]),
                ..ok.clone()
            },
            GrantScope {
                hosts: Some(vec!["*.com".into()]),
                ..ok.clone()
            },
            GrantScope {
                hosts: None,
                ..ok.clone()
            },
        ];
        for scope in wider {
            assert!(scope.within(&parent).is_err(), "{scope:?} is wider");
        }
        // Anything is within a parent that narrows nothing.
        assert_eq!(parent.within(&GrantScope::default()), Ok(()));
    }

    #[test]
    fn a_scope_as_written_is_checked() {
        assert!(
            GrantScope::primitives(["read_file", "read_only"])
                .check()
                .is_ok()
        );
        assert!(GrantScope::primitives(["rm_rf"]).check().is_err());
        assert!(paths(&["relative"], &[]).check().is_err());
        let bad_host = GrantScope {
            hosts: Some(vec!["*".into()]),
            ..GrantScope::default()
        };
        assert!(bad_host.check().is_err());
    }
}
