use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use aido_actions::verdict::Gate;
use aido_actions::{AccessKind, Action, SideEffectClass, Verdict};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::config::{Config, ConfigError, Mode};
use crate::resolve::{FsResolver, PathResolver, ResolveError, normalize_lexically};

/// Where the engine lives: the user's home (for `~`) and aido's own home, which agents may
/// never touch (it holds the journal and the config).
#[derive(Clone, Debug)]
pub struct Environment {
    /// The user's home directory.
    pub home: PathBuf,
    /// `AIDO_HOME`.
    pub aido_home: PathBuf,
}

/// What the policy knows about the session an action comes from.
#[derive(Clone, Debug)]
pub struct SessionContext {
    /// Where relative paths start (absolute).
    pub cwd: PathBuf,
    /// The session's grants (primitive or class names); `None` grants everything.
    pub capabilities: Option<BTreeSet<String>>,
}

impl SessionContext {
    /// A context with every capability.
    pub fn new(cwd: PathBuf) -> Self {
        Self {
            cwd,
            capabilities: None,
        }
    }
}

/// A path that passed the walls and the deny globs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathCheck {
    /// The path the agent wrote.
    pub given: String,
    /// Absolute, `~` expanded, lexically cleaned.
    pub lexical: PathBuf,
    /// Symlinks resolved.
    pub resolved: PathBuf,
    /// The wall root that admitted it.
    pub root: PathBuf,
    /// How it is touched.
    pub kind: AccessKind,
}

/// The compiled policy. Cheap to share (`Arc`) and to evaluate.
#[derive(Debug)]
pub struct PolicyEngine {
    config: Config,
    home: PathBuf,
    aido_home: PathBuf,
    workdir: PathBuf,
    read_roots: Vec<PathBuf>,
    write_roots: Vec<PathBuf>,
    deny: GlobSet,
    deny_globs: Vec<String>,
    /// Roots and the working directory that existed when compiled, already resolved.
    anchors: Vec<PathBuf>,
    always_allow: HashSet<String>,
    confirm: HashSet<String>,
}

impl PolicyEngine {
    /// Compile `config`: expand `~`, resolve the roots, build the deny globs.
    pub fn new(
        config: &Config,
        env: &Environment,
        resolver: &dyn PathResolver,
    ) -> Result<Self, ConfigError> {
        let real = |p: &Path| {
            resolver
                .resolve(p)
                .unwrap_or_else(|_| normalize_lexically(p))
        };
        let home = real(&env.home);
        let expand_root = |key: &str, s: &String| -> Result<PathBuf, ConfigError> {
            let p = expand_tilde(s, &home).ok_or_else(|| ConfigError::Value {
                key: key.to_owned(),
                reason: format!("{s} must be absolute or start with ~/"),
            })?;
            if !p.is_absolute() {
                return Err(ConfigError::Value {
                    key: key.to_owned(),
                    reason: format!("{s} must be absolute or start with ~/"),
                });
            }
            Ok(real(&p))
        };
        let read_roots: Vec<PathBuf> = config
            .paths
            .read
            .iter()
            .map(|s| expand_root("paths.read", s))
            .collect::<Result<_, _>>()?;
        let write_roots: Vec<PathBuf> = config
            .paths
            .write
            .iter()
            .map(|s| expand_root("paths.write", s))
            .collect::<Result<_, _>>()?;
        let workdir = expand_root("workdir", &config.workdir)?;
        let mut deny_globs = Vec::new();
        let mut builder = GlobSetBuilder::new();
        // aido's own snapshot storage beside a workspace is never the agent's to touch.
        let builtin = [
            "**/.aido-snapshots/**".to_owned(),
            "**/.*.aido-swap/**".to_owned(),
        ];
        for pattern in config.paths.deny.iter().chain(builtin.iter()) {
            let expanded = match pattern.strip_prefix("~/") {
                Some(rest) => format!("{}/{rest}", home.display()),
                None => pattern.clone(),
            };
            // `dir/**` also denies `dir` itself, so the directory cannot be trashed or replaced.
            let mut forms = vec![expanded.clone()];
            if let Some(dir) = expanded.strip_suffix("/**") {
                forms.push(dir.to_owned());
            }
            for form in forms {
                let glob = GlobBuilder::new(&form)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| ConfigError::Value {
                        key: "paths.deny".into(),
                        reason: e.to_string(),
                    })?;
                builder.add(glob);
                deny_globs.push(pattern.clone());
            }
        }
        let deny = builder.build().map_err(|e| ConfigError::Value {
            key: "paths.deny".into(),
            reason: e.to_string(),
        })?;
        let anchors: Vec<PathBuf> = read_roots
            .iter()
            .chain(write_roots.iter())
            .chain(std::iter::once(&workdir))
            .filter(|p| p.is_dir())
            .cloned()
            .collect();
        Ok(Self {
            anchors,
            always_allow: config.actions.always_allow.iter().cloned().collect(),
            confirm: config.actions.confirm.iter().cloned().collect(),
            config: config.clone(),
            aido_home: real(&env.aido_home),
            home,
            workdir,
            read_roots,
            write_roots,
            deny,
            deny_globs,
        })
    }

    /// The config this engine was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The resolved working directory new sessions start in.
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The resolved workspace snapshots cover (`snapshots.workspace`, else the workdir).
    pub fn workspace(&self) -> PathBuf {
        let configured = &self.config.snapshots.workspace;
        if configured.is_empty() {
            return self.workdir.clone();
        }
        expand_tilde(configured, &self.home)
            .map(|p| {
                if p.is_absolute() {
                    p
                } else {
                    self.workdir.join(p)
                }
            })
            .map(|p| FsResolver.resolve(&p).unwrap_or(p))
            .unwrap_or_else(|| self.workdir.clone())
    }

    /// The resolved write roots.
    pub fn write_roots(&self) -> &[PathBuf] {
        &self.write_roots
    }

    /// The resolved read roots (write roots are readable too).
    pub fn read_roots(&self) -> impl Iterator<Item = &PathBuf> {
        self.read_roots.iter().chain(self.write_roots.iter())
    }

    /// Judge one action tree: every gate, in order, in one pass.
    pub fn evaluate(
        &self,
        action: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Verdict {
        self.judge(action, ctx, resolver, "")
    }

    fn judge(
        &self,
        action: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
        at: &str,
    ) -> Verdict {
        let primitive = action.primitive();
        let class = action.class();
        let leaf = || {
            if at.is_empty() {
                None
            } else {
                Some(at.to_owned())
            }
        };
        let deny = |gate: Gate, code: &str, reason: String| Verdict::Deny {
            gate,
            code: code.to_owned(),
            reason,
            leaf: leaf(),
        };

        // always_allow: meta primitives listed here skip every gate (the config refuses
        // anything but meta primitives in this list).
        if self.always_allow.contains(primitive) {
            return Verdict::Allow;
        }
        let mut confirm: Option<Verdict> = None;

        // desktop_gate: machines (vm_*) are contained and have their own switch; the host
        // desktop is off unless enabled.
        if primitive.starts_with("vm_") || primitive == "computer" {
            if !self.config.vm.enabled {
                return deny(
                    Gate::DesktopGate,
                    "vm_disabled",
                    format!("{primitive} drives a machine and vm.enabled is false"),
                );
            }
        } else if class == SideEffectClass::Desktop && !self.config.desktop.enabled {
            return deny(
                Gate::DesktopGate,
                "desktop_disabled",
                format!("{primitive} drives a screen and desktop.enabled is false"),
            );
        }

        // mode
        match self.config.mode {
            Mode::Readonly if class.mutates() => {
                return deny(
                    Gate::Mode,
                    "mode_readonly",
                    format!("{primitive} is {class} and the policy mode is readonly"),
                );
            }
            Mode::Confirm if class.mutates() => {
                confirm = Some(Verdict::Confirm {
                    gate: Gate::Mode,
                    reason: format!("{primitive} is {class} and the policy mode is confirm"),
                    leaf: leaf(),
                });
            }
            _ => {}
        }

        // action_enabled
        if self.config.actions.enabled.get(primitive) == Some(&false) {
            return deny(
                Gate::ActionEnabled,
                "action_disabled",
                format!("{primitive} is disabled in actions.enabled"),
            );
        }
        if confirm.is_none() && self.confirm.contains(primitive) {
            confirm = Some(Verdict::Confirm {
                gate: Gate::ActionEnabled,
                reason: format!("{primitive} is listed in actions.confirm"),
                leaf: leaf(),
            });
        }

        // pipeline_preflight: a composite is judged by every leaf it could run; the first
        // denied leaf refuses the whole tree.
        for (label, child) in action.children() {
            let child_at = if at.is_empty() {
                label
            } else {
                format!("{at}.{label}")
            };
            match self.judge(child, ctx, resolver, &child_at) {
                Verdict::Allow => {}
                d @ Verdict::Deny { .. } => return d,
                c @ Verdict::Confirm { .. } => {
                    confirm.get_or_insert(c);
                }
            }
        }

        // path_walls, then deny_patterns, for the paths this action touches itself.
        for access in action.touches() {
            if let Err((gate, code, reason)) =
                self.check_path(&access.path, access.kind, ctx, resolver)
            {
                return deny(gate, code, reason);
            }
        }

        // capabilities: composites are judged by their leaves.
        if let Some(grants) = &ctx.capabilities
            && class != SideEffectClass::Composite
            && !grants.contains(primitive)
            && !grants.contains(class.name())
        {
            return deny(
                Gate::Capabilities,
                "capability_missing",
                format!("this session was not granted {primitive} ({class})"),
            );
        }

        confirm.unwrap_or(Verdict::Allow)
    }

    /// Check one path against the walls and the deny globs. Used by the chain and again by
    /// the filesystem body on the file it actually opened.
    pub fn check_path(
        &self,
        given: &str,
        kind: AccessKind,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Result<PathCheck, (Gate, &'static str, String)> {
        let lexical = self.absolute(given, &ctx.cwd)?;
        let resolved = resolver
            .resolve_from(&lexical, &self.anchors)
            .map_err(|e| {
                let code = match e {
                    ResolveError::NotAbsolute { .. } => "path_invalid",
                    _ => "path_unresolvable",
                };
                (Gate::PathWalls, code, e.to_string())
            })?;
        let root = self.admit(&resolved, kind, given)?;
        for candidate in [&lexical, &resolved] {
            if let Some(pattern) = self.denied_by_pattern(candidate) {
                return Err((
                    Gate::DenyPatterns,
                    "path_denied_by_pattern",
                    format!(
                        "{given} ({}) matches the deny pattern {pattern}",
                        candidate.display()
                    ),
                ));
            }
        }
        Ok(PathCheck {
            given: given.to_owned(),
            lexical,
            resolved,
            root,
            kind,
        })
    }

    /// The deny glob `path` matches, if any.
    pub fn denied_by_pattern(&self, path: &Path) -> Option<&str> {
        self.deny
            .matches(path)
            .first()
            .map(|i| self.deny_globs[*i].as_str())
    }

    /// The wall root that admits a resolved path for this kind of access.
    fn admit(
        &self,
        resolved: &Path,
        kind: AccessKind,
        given: &str,
    ) -> Result<PathBuf, (Gate, &'static str, String)> {
        if resolved.starts_with(&self.aido_home) {
            return Err((
                Gate::PathWalls,
                "path_in_aido_home",
                format!(
                    "{given} is inside AIDO_HOME ({}), which holds the journal",
                    self.aido_home.display()
                ),
            ));
        }
        let roots: Vec<&PathBuf> = if kind.needs_write() {
            self.write_roots.iter().collect()
        } else {
            self.read_roots().collect()
        };
        // `Path::starts_with` compares whole components, so /w/a never admits /w/ab.
        let root = roots
            .into_iter()
            .filter(|root| resolved.starts_with(root))
            .max_by_key(|root| root.components().count());
        match root {
            Some(root) if kind == AccessKind::Delete && resolved == root.as_path() => Err((
                Gate::PathWalls,
                "path_is_wall_root",
                format!("{given} is a wall root itself and cannot be removed"),
            )),
            Some(root) => Ok(root.clone()),
            None => Err((
                Gate::PathWalls,
                "path_outside_walls",
                format!(
                    "{given} resolves to {}, outside the allowed {} roots",
                    resolved.display(),
                    if kind.needs_write() { "write" } else { "read" }
                ),
            )),
        }
    }

    /// `~` expanded, made absolute against `cwd`, lexically cleaned.
    fn absolute(&self, given: &str, cwd: &Path) -> Result<PathBuf, (Gate, &'static str, String)> {
        let invalid = |why: &str| (Gate::PathWalls, "path_invalid", format!("{given:?}: {why}"));
        if given.is_empty() {
            return Err(invalid("empty path"));
        }
        if given.contains('\0') {
            return Err(invalid("contains a NUL byte"));
        }
        let path = expand_tilde(given, &self.home)
            .ok_or_else(|| invalid("only ~ and ~/ are expanded, not ~user"))?;
        let absolute = if path.is_absolute() {
            path
        } else {
            cwd.join(path)
        };
        Ok(absolute)
    }
}

/// Expand a leading `~` or `~/`; `None` for `~user`.
fn expand_tilde(path: &str, home: &Path) -> Option<PathBuf> {
    if path == "~" {
        Some(home.to_owned())
    } else if let Some(rest) = path.strip_prefix("~/") {
        Some(home.join(rest))
    } else if path.starts_with('~') {
        None
    } else {
        Some(PathBuf::from(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Layered, Source};
    use crate::resolve::FsResolver;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    struct World {
        _dir: tempfile::TempDir,
        base: PathBuf,
        engine: PolicyEngine,
        ctx: SessionContext,
    }

    /// base/home is the home dir; base/w/a is the only write root; base/ro is a read root.
    fn world(extra: &str) -> World {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for d in [
            "home/.ssh",
            "w/a/sub",
            "w/ab",
            "ro",
            "outside",
            "home/.aido",
        ] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("home/.ssh/id_ed25519"), "key").unwrap();
        std::fs::write(base.join("outside/secret"), "s").unwrap();
        std::fs::write(base.join("w/a/file"), "f").unwrap();
        symlink(base.join("outside"), base.join("w/a/to_outside")).unwrap();
        symlink(base.join("outside/secret"), base.join("w/a/secret_link")).unwrap();
        symlink(base.join("home/.ssh"), base.join("w/a/keys")).unwrap();
        symlink(base.join("w/a/sub"), base.join("ro/into_a")).unwrap();
        let (top, tables) = if extra.starts_with('[') {
            ("", extra)
        } else {
            (extra, "")
        };
        let text = format!(
            "{top}\nworkdir = \"{b}/w/a\"\n[paths]\nread = [\"{b}/ro\"]\nwrite = [\"{b}/w/a\", \"~\"]\n{tables}",
            b = base.display()
        );
        let config = Layered::from_layers(&[(Source::File("t".into()), &text)])
            .unwrap()
            .config;
        let env = Environment {
            home: base.join("home"),
            aido_home: base.join("home/.aido"),
        };
        let engine = PolicyEngine::new(&config, &env, &FsResolver).unwrap();
        let ctx = SessionContext::new(base.join("w/a"));
        World {
            _dir: dir,
            base,
            engine,
            ctx,
        }
    }

    fn verdict(w: &World, primitive: &str, args: serde_json::Value) -> Verdict {
        let action = Action::from_tool_call(primitive, args).unwrap();
        w.engine.evaluate(&action, &w.ctx, &FsResolver)
    }

    fn code(v: &Verdict) -> &str {
        match v {
            Verdict::Allow => "allow",
            Verdict::Confirm { .. } => "confirm",
            Verdict::Deny { code, .. } => code,
        }
    }

    /// The path walls, case by case. `{b}` is the temp base.
    #[test]
    fn path_walls_table() {
        let w = world("");
        let b = w.base.display().to_string();
        let cases: &[(&str, &str, &str)] = &[
            // (primitive, path, expected code)
            ("write_file", "{b}/w/a/new.txt", "allow"),
            ("write_file", "new.txt", "allow"), // relative, under cwd
            ("write_file", "sub/deeper/new.txt", "allow"), // missing parents
            ("write_file", "{b}/w/ab/x", "path_outside_walls"), // sibling prefix
            ("write_file", "{b}/w/a/../ab/x", "path_outside_walls"), // `..` escape
            ("write_file", "../ab/x", "path_outside_walls"), // relative `..` escape
            ("write_file", "sub/../../ab/x", "path_outside_walls"),
            ("write_file", "to_outside/x", "path_outside_walls"), // symlinked parent dir
            ("write_file", "secret_link", "path_outside_walls"),  // symlinked file
            ("read_file", "secret_link", "path_outside_walls"),
            ("read_file", "{b}/ro/into_a/f", "allow"), // read root, link into a
            ("write_file", "{b}/ro/x", "path_outside_walls"), // read root is not writable
            ("write_file", "{b}/ro/into_a/x", "allow"), // resolves into write root
            ("read_file", "/etc/passwd", "path_outside_walls"),
            ("read_file", "/etc/shadow", "path_outside_walls"),
            ("read_file", "~/.ssh/id_ed25519", "path_denied_by_pattern"),
            ("read_file", "keys/id_ed25519", "path_denied_by_pattern"), // symlink into .ssh
            ("move_to_trash", "~/.ssh", "path_denied_by_pattern"),      // the dir itself
            ("write_file", "~/proj/.env", "path_denied_by_pattern"),
            ("write_file", "~/notes.txt", "allow"),
            ("write_file", "~/.aido/journal/db", "path_in_aido_home"),
            ("read_file", "~/.aido/config.toml", "path_in_aido_home"),
            ("read_file", "~root/x", "path_invalid"),
            ("read_file", "", "path_invalid"),
            ("write_file", "missing/../../../etc/x", "path_unresolvable"),
            ("move_to_trash", "{b}/w/a", "path_is_wall_root"),
            ("move_to_trash", "{b}/w/a/file", "allow"),
        ];
        for (primitive, path, expected) in cases {
            let path = path.replace("{b}", &b);
            let args = match *primitive {
                "write_file" => json!({"path": path, "content": "x"}),
                _ => json!({"path": path}),
            };
            let v = verdict(&w, primitive, args);
            assert_eq!(code(&v), *expected, "{primitive} {path}: {v:?}");
        }
    }

    #[test]
    fn every_denial_names_its_gate_and_code() {
        let w = world("");
        match verdict(&w, "read_file", json!({"path": "/etc/passwd"})) {
            Verdict::Deny {
                gate,
                code,
                reason,
                leaf,
            } => {
                assert_eq!(gate, Gate::PathWalls);
                assert_eq!(code, "path_outside_walls");
                assert!(!reason.is_empty());
                assert_eq!(leaf, None);
            }
            other => panic!("{other:?}"),
        }
        match verdict(&w, "read_file", json!({"path": "~/.ssh/id_ed25519"})) {
            Verdict::Deny { gate, .. } => assert_eq!(gate, Gate::DenyPatterns),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn modes_and_switches() {
        let ro = world("mode = \"readonly\"");
        assert_eq!(
            code(&verdict(
                &ro,
                "write_file",
                json!({"path": "x", "content": ""})
            )),
            "mode_readonly"
        );
        assert_eq!(
            code(&verdict(&ro, "read_file", json!({"path": "file"}))),
            "allow"
        );
        assert_eq!(code(&verdict(&ro, "session_history", json!({}))), "allow");

        let confirm = world("mode = \"confirm\"");
        assert_eq!(
            code(&verdict(
                &confirm,
                "write_file",
                json!({"path": "x", "content": ""})
            )),
            "confirm"
        );
        assert_eq!(
            code(&verdict(&confirm, "read_file", json!({"path": "file"}))),
            "allow"
        );
        // A denial still wins over a confirmation.
        assert_eq!(
            code(&verdict(
                &confirm,
                "write_file",
                json!({"path": "/etc/x", "content": ""})
            )),
            "path_outside_walls"
        );

        let off =
            world("[actions]\nenabled = { move_to_trash = false }\nconfirm = [\"edit_file\"]");
        assert_eq!(
            code(&verdict(&off, "move_to_trash", json!({"path": "file"}))),
            "action_disabled"
        );
        assert_eq!(
            code(&verdict(
                &off,
                "edit_file",
                json!({"path": "file", "old_string": "f", "new_string": "g"})
            )),
            "confirm"
        );
    }

    #[test]
    fn always_allow_skips_the_gates_for_meta_only() {
        let w = world("mode = \"readonly\"");
        // simulate of a write is itself allowed: it runs nothing.
        let v = verdict(
            &w,
            "simulate",
            json!({"action": {"type": "write_file", "path": "/etc/x", "content": ""}}),
        );
        assert_eq!(code(&v), "allow");
    }

    #[test]
    fn one_denied_leaf_refuses_the_tree() {
        let w = world("");
        let v = verdict(
            &w,
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "ok.txt", "content": ""},
                {"type": "try", "action": {"type": "read_file", "path": "file"},
                 "fallback": {"type": "read_file", "path": "~/.ssh/id_ed25519"}},
            ]}),
        );
        match v {
            Verdict::Deny {
                gate, code, leaf, ..
            } => {
                assert_eq!(gate, Gate::DenyPatterns);
                assert_eq!(code, "path_denied_by_pattern");
                assert_eq!(leaf.as_deref(), Some("steps[1].fallback"));
            }
            other => panic!("{other:?}"),
        }
        // Conditions are reads too.
        let v = verdict(
            &w,
            "if",
            json!({"condition": {"kind": "file_contains", "path": "/etc/passwd", "text": "root"},
                   "then": {"type": "read_file", "path": "file"}}),
        );
        assert_eq!(code(&v), "path_outside_walls");
    }

    #[test]
    fn capabilities_limit_a_session() {
        let mut w = world("");
        w.ctx.capabilities = Some(["read_only".to_owned()].into_iter().collect());
        assert_eq!(
            code(&verdict(&w, "read_file", json!({"path": "file"}))),
            "allow"
        );
        assert_eq!(
            code(&verdict(
                &w,
                "write_file",
                json!({"path": "x", "content": ""})
            )),
            "capability_missing"
        );
    }

    /// Every denial code the policy can produce, pinned: codes are never renamed or reused.
    #[test]
    fn denial_code_table() {
        let src = include_str!("engine.rs");
        let all = [
            "desktop_disabled",
            "vm_disabled",
            "mode_readonly",
            "action_disabled",
            "capability_missing",
            "path_invalid",
            "path_unresolvable",
            "path_outside_walls",
            "path_in_aido_home",
            "path_is_wall_root",
            "path_denied_by_pattern",
        ];
        for c in all {
            assert!(src.contains(&format!("\"{c}\"")), "{c}");
        }
    }
}
