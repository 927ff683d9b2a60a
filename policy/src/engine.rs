use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aido_actions::verdict::{DenyCode, Gate};
use aido_actions::{AccessKind, Action, Body, SideEffectClass, Verdict};
use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::config::{Config, ConfigError};
use crate::grant::GrantScope;
use crate::resolve::{
    FsResolver, PathResolver, ResolveError, is_canonical, normalize_lexically, strip_prefix_spelled,
};

/// The chain: the gates in their order, one function each.
mod chain;

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
    /// The session's capability grant (primitives, paths, hosts); `None` narrows nothing.
    pub capabilities: Option<Arc<GrantScope>>,
    /// Why the grant's store refused this use of it (expired, exhausted, revoked, over its
    /// rate), found by the runtime before the chain runs: every action is then refused.
    pub grant_refused: Option<(DenyCode, String)>,
    /// The id of the session's grant in the grant store (never its token).
    pub grant_id: Option<String>,
    /// The paths the chain admitted for the action being run, handed to its body so the body
    /// does not resolve them again (see [`Admissions`]).
    pub admitted: Option<Arc<Admissions>>,
}

impl SessionContext {
    /// A context with every capability.
    pub fn new(cwd: PathBuf) -> Self {
        Self {
            cwd,
            capabilities: None,
            grant_refused: None,
            grant_id: None,
            admitted: None,
        }
    }

    /// This context, carrying what the chain admitted for one action.
    pub fn with_admitted(&self, admitted: Admissions) -> Self {
        Self {
            admitted: (!admitted.checks.is_empty()).then(|| Arc::new(admitted)),
            ..self.clone()
        }
    }

    /// What the chain admitted for `given` and `kind` from this context's working directory,
    /// if it judged that path for the action being run.
    pub fn admitted(&self, given: &str, kind: AccessKind) -> Option<&PathCheck> {
        let admitted = self.admitted.as_deref()?;
        if admitted.cwd != self.cwd {
            return None;
        }
        // A command's change set admits thousands of paths at once: those are found by an
        // index, made on the first look; a leaf's few by a scan.
        if admitted.checks.len() <= ADMISSIONS_SCANNED_MAX {
            return admitted
                .checks
                .iter()
                .find(|check| check.kind == kind && check.given == given);
        }
        let index = admitted.index.get_or_init(|| {
            let mut index: std::collections::HashMap<String, Vec<usize>> =
                std::collections::HashMap::with_capacity(admitted.checks.len());
            for (at, check) in admitted.checks.iter().enumerate() {
                index.entry(check.given.clone()).or_default().push(at);
            }
            index
        });
        index
            .get(given)?
            .iter()
            .filter_map(|&at| admitted.checks.get(at))
            .find(|check| check.kind == kind)
    }
}

/// Most admissions looked up by a scan rather than an index.
const ADMISSIONS_SCANNED_MAX: usize = 32;

/// The paths one evaluation admitted (every path of every leaf, resolved): resolved once by
/// the chain and used again by the body, which opens each under its root's handle and judges
/// what the kernel says it opened (so a path changed since the chain looked is caught there).
#[derive(Clone, Debug, Default)]
pub struct Admissions {
    /// The working directory the paths were resolved from.
    pub cwd: PathBuf,
    /// The admitted paths, in the order the chain judged them.
    pub checks: Vec<PathCheck>,
    /// Where each path's checks are in `checks`, in order, made on the first look at many.
    pub index: std::sync::OnceLock<std::collections::HashMap<String, Vec<usize>>>,
}

impl Admissions {
    /// What was admitted from `cwd`.
    pub fn new(cwd: PathBuf, checks: Vec<PathCheck>) -> Self {
        Self {
            cwd,
            checks,
            index: std::sync::OnceLock::new(),
        }
    }
}

/// A path that passed the walls and the deny globs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathCheck {
    /// The path the agent wrote.
    pub given: String,
    /// Absolute and `~` expanded, otherwise as written (`..` and `.` are left for the
    /// resolver, which applies them after symlinks).
    pub lexical: PathBuf,
    /// Symlinks resolved.
    pub resolved: PathBuf,
    /// The wall root that admitted it.
    pub root: PathBuf,
    /// How it is touched.
    pub kind: AccessKind,
}

/// Why [`PolicyEngine::check_path`] refused a path. Each refusal has one [`DenyCode`]; the
/// text is only built when the refusal is shown, so checking a path that passes formats nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathCheckError {
    /// Empty, holding a NUL byte, or `~user`.
    #[error("{given:?}: {why}")]
    Invalid {
        /// The path as written.
        given: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The resolver could not follow it.
    #[error("{error}")]
    Unresolvable {
        /// The path as written.
        given: String,
        /// Why.
        error: ResolveError,
    },
    /// Inside `AIDO_HOME`.
    #[error("{given} is inside AIDO_HOME ({aido_home}), which holds the journal")]
    InAidoHome {
        /// The path as written.
        given: String,
        /// `AIDO_HOME`, resolved.
        aido_home: PathBuf,
    },
    /// A removal of a wall root itself.
    #[error("{given} is a wall root itself and cannot be removed")]
    WallRoot {
        /// The path as written.
        given: String,
    },
    /// Under no root allowed for this kind of access.
    #[error(
        "{given} resolves to {resolved}, outside the allowed {} roots ([paths] {})",
        walls_of(*.kind),
        walls_of(*.kind)
    )]
    OutsideWalls {
        /// The path as written.
        given: String,
        /// Where it resolves to.
        resolved: PathBuf,
        /// How it would be touched.
        kind: AccessKind,
    },
    /// The path as written or as resolved matches a deny glob.
    #[error("{given} ({candidate}) matches the deny pattern {pattern} ([paths] deny)")]
    DeniedByPattern {
        /// The path as written.
        given: String,
        /// The form that matched (as written, or resolved).
        candidate: PathBuf,
        /// The deny glob as configured.
        pattern: String,
    },
    /// A write, creation or removal of a path (as written or resolved) that matches a
    /// `paths.protect` glob: readable, never written.
    #[error(
        "{given} ({candidate}) is protected by {pattern} ([paths] protect): it may be read, never \
         written"
    )]
    Protected {
        /// The path as written.
        given: String,
        /// The form that matched.
        candidate: PathBuf,
        /// The protect glob as configured.
        pattern: String,
    },
}

impl PathCheckError {
    /// The stable code (its gate is `code().gate()`).
    pub fn code(&self) -> DenyCode {
        match self {
            Self::Invalid { .. } => DenyCode::PathInvalid,
            Self::Unresolvable {
                error: ResolveError::NotAbsolute { .. },
                ..
            } => DenyCode::PathInvalid,
            Self::Unresolvable { .. } => DenyCode::PathUnresolvable,
            Self::InAidoHome { .. } => DenyCode::PathInAidoHome,
            Self::WallRoot { .. } => DenyCode::PathIsWallRoot,
            Self::OutsideWalls { .. } => DenyCode::PathOutsideWalls,
            Self::DeniedByPattern { .. } => DenyCode::PathDeniedByPattern,
            Self::Protected { .. } => DenyCode::PathProtected,
        }
    }

    /// The gate that refused.
    pub fn gate(&self) -> Gate {
        self.code().gate()
    }
}

/// Which walls a kind of access is judged against, for messages.
fn walls_of(kind: AccessKind) -> &'static str {
    if kind.needs_write() { "write" } else { "read" }
}

/// A path that passed, borrowing its root from the engine: what the chain needs, without the
/// copies a [`PathCheck`] makes.
struct Admitted<'e> {
    lexical: PathBuf,
    resolved: PathBuf,
    root: &'e Path,
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
    /// `[processes] unix_sockets`, resolved.
    unix_sockets: Vec<PathBuf>,
    /// The roots a read may use (read and write roots), deepest first.
    read_walls: Vec<PathBuf>,
    /// The write roots, deepest first.
    write_walls: Vec<PathBuf>,
    /// `AIDO_HOME` and every root are spelled canonically (see [`is_canonical`]).
    roots_canonical: bool,
    deny: GlobSet,
    deny_globs: Vec<String>,
    /// `paths.protect`: readable, never written.
    protect: GlobSet,
    protect_globs: Vec<String>,
    /// Roots and the working directory that existed when compiled, already resolved.
    anchors: Vec<PathBuf>,
    /// A handful of names at most: scanning them is cheaper than hashing the primitive.
    always_allow: Vec<String>,
    confirm: Vec<String>,
    /// Bodies this build was compiled without, each with the cargo feature that adds it.
    unbuilt: Vec<(Body, &'static str)>,
    /// `[net] allow` and `allow_ranges`, compiled.
    net: aido_net::NetPolicy,
    /// Each `[[downstream]]` entry's refused tools, compiled, and the classes it gives.
    downstream: BTreeMap<String, (GlobSet, BTreeMap<String, SideEffectClass>)>,
    /// The classes the gateway found in the downstream tools' annotations, by namespaced name
    /// (set by the runtime once the servers list their tools).
    downstream_classes: std::sync::RwLock<BTreeMap<String, SideEffectClass>>,
}

impl PolicyEngine {
    /// The classes of the downstream tools, by namespaced name, as the gateway found them in
    /// their annotations (a `[[downstream]]` entry's `classes` still wins).
    pub fn set_downstream_classes(&self, classes: BTreeMap<String, SideEffectClass>) {
        if let Ok(mut known) = self.downstream_classes.write() {
            *known = classes;
        }
    }

    /// The class the policy judges `action` by: the table's, but for a downstream call its
    /// tool's (the entry's `classes`, else its annotations', else `network`, the cautious
    /// class: it changes the world, beyond aido).
    pub fn class_of(&self, action: &Action) -> SideEffectClass {
        match action {
            Action::DownstreamCall(call) => self.downstream_class(&call.tool),
            _ => action.class(),
        }
    }

    /// The class of the downstream tool namespaced `tool` (see [`PolicyEngine::class_of`]).
    pub fn downstream_class(&self, tool: &str) -> SideEffectClass {
        let (server, own) = tool.split_once("__").unwrap_or(("", ""));
        if let Some(class) = self
            .downstream
            .get(server)
            .and_then(|(_, classes)| classes.get(own))
        {
            return *class;
        }
        self.downstream_classes
            .read()
            .ok()
            .and_then(|known| known.get(tool).copied())
            .unwrap_or(SideEffectClass::Network)
    }

    /// The values of a downstream call's arguments that its entry names in `names` (each a
    /// string, or an array of strings).
    fn downstream_arguments(
        &self,
        call: &aido_actions::downstream::DownstreamCall,
        names: fn(&crate::config::Downstream) -> &Vec<String>,
    ) -> Vec<String> {
        let Some(entry) = self
            .config
            .downstream
            .iter()
            .find(|entry| entry.name == call.server())
        else {
            return Vec::new();
        };
        let mut values = Vec::new();
        for name in names(entry) {
            match call.arguments.get(name) {
                Some(serde_json::Value::String(value)) => values.push(value.clone()),
                Some(serde_json::Value::Array(items)) => values.extend(
                    items
                        .iter()
                        .filter_map(serde_json::Value::as_str)
                        .map(str::to_owned),
                ),
                _ => {}
            }
        }
        values
    }

    /// What an action touches as the walls judge it: [`Action::touches`], and for a downstream
    /// call the paths its entry's `path_arguments` hold (read by a read-only tool, written by
    /// any other).
    pub fn touches_of(&self, action: &Action, class: SideEffectClass) -> Vec<aido_actions::Access> {
        let mut touches = action.touches();
        if let Action::DownstreamCall(call) = action {
            for path in self.downstream_arguments(call, |entry| &entry.path_arguments) {
                touches.push(if class.mutates() {
                    aido_actions::Access::write(&path)
                } else {
                    aido_actions::Access::read(&path)
                });
            }
        }
        touches
    }

    /// The URLs a downstream call's arguments hold, as its entry's `url_arguments` names them.
    pub fn downstream_urls(&self, call: &aido_actions::downstream::DownstreamCall) -> Vec<String> {
        self.downstream_arguments(call, |entry| &entry.url_arguments)
    }

    /// Whether the `[[downstream]]` entry of a downstream call refuses its tool (by the tool's
    /// own name, or its namespaced one).
    pub fn downstream_denied(&self, call: &aido_actions::downstream::DownstreamCall) -> bool {
        let own = call.tool.split_once("__").map_or("", |(_, tool)| tool);
        self.downstream
            .get(call.server())
            .is_some_and(|(deny, _)| deny.is_match(own) || deny.is_match(&call.tool))
    }

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
        let expand_all = |key: &str, list: &[String]| -> Result<Vec<PathBuf>, ConfigError> {
            list.iter().map(|s| expand_root(key, s)).collect()
        };
        let read_roots = expand_all("paths.read", &config.paths.read)?;
        let write_roots = expand_all("paths.write", &config.paths.write)?;
        let workdir = expand_root("workdir", &config.workdir)?;
        let unix_sockets = expand_all("processes.unix_sockets", &config.processes.unix_sockets)?;
        // aido's own snapshot storage beside a workspace is never the agent's to touch.
        let builtin = [
            "**/.aido-snapshots/**".to_owned(),
            "**/.*.aido-swap/**".to_owned(),
        ];
        let (deny, deny_globs) = compile_globs(
            "paths.deny",
            config.paths.deny.iter().chain(builtin.iter()),
            &home,
        )?;
        let (protect, protect_globs) =
            compile_globs("paths.protect", config.paths.protect.iter(), &home)?;
        let net =
            aido_net::NetPolicy::new(&config.net.allow, &config.net.allow_ranges).map_err(|e| {
                ConfigError::Value {
                    key: "net.allow".into(),
                    reason: e.to_string(),
                }
            })?;
        let anchors: Vec<PathBuf> = read_roots
            .iter()
            .chain(write_roots.iter())
            .chain(std::iter::once(&workdir))
            .filter(|p| p.is_dir())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        // The nearest root that holds a path is the deepest one; sorted once here, the first
        // that holds it is the one (roots of equal depth that both hold a path are equal).
        let deepest_first = |roots: Vec<PathBuf>| {
            let mut roots: Vec<PathBuf> = roots
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            roots.sort_by_key(|root| std::cmp::Reverse(root.components().count()));
            roots
        };
        let read_walls = deepest_first(read_roots.iter().chain(&write_roots).cloned().collect());
        let write_walls = deepest_first(write_roots.clone());
        let aido_home = real(&env.aido_home);
        let roots_canonical =
            is_canonical(&aido_home) && read_walls.iter().all(|root| is_canonical(root));
        Ok(Self {
            anchors,
            roots_canonical,
            always_allow: config.actions.always_allow.clone(),
            confirm: config.actions.confirm.clone(),
            config: config.clone(),
            aido_home,
            home,
            workdir,
            read_roots,
            write_roots,
            unix_sockets,
            read_walls,
            write_walls,
            deny,
            deny_globs,
            protect,
            protect_globs,
            unbuilt: Vec::new(),
            net,
            downstream: compile_downstream(&config.downstream)?,
            downstream_classes: Default::default(),
        })
    }

    /// The same policy for a build compiled without some bodies (each with the cargo feature
    /// that adds it): their primitives are refused with `primitive_not_built`.
    pub fn without_bodies(mut self, unbuilt: Vec<(Body, &'static str)>) -> Self {
        self.unbuilt = unbuilt;
        self
    }

    /// The config this engine was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// AIDO_HOME, resolved (the journal, memory and aido's own log live there).
    pub fn aido_home(&self) -> &Path {
        &self.aido_home
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
                    p.into_owned()
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

    /// The host Unix sockets commands may connect to (`[processes] unix_sockets`, resolved).
    pub fn unix_sockets(&self) -> &[PathBuf] {
        &self.unix_sockets
    }

    /// The network allowlist, for the net body to judge resolved addresses and redirects.
    pub fn net(&self) -> &aido_net::NetPolicy {
        &self.net
    }

    /// Judge one action tree: every gate, in order, in one pass.
    pub fn evaluate(
        &self,
        action: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Verdict {
        self.judge(action, ctx, resolver, "", &mut None)
    }

    /// [`Self::evaluate`], also returning every path it admitted, for the body.
    pub fn evaluate_admitting(
        &self,
        action: &Action,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> (Verdict, Admissions) {
        let mut checks = Some(Vec::new());
        let verdict = self.judge(action, ctx, resolver, "", &mut checks);
        let admissions = Admissions::new(
            ctx.cwd.clone(),
            match verdict {
                Verdict::Deny { .. } => Vec::new(),
                _ => checks.unwrap_or_default(),
            },
        );
        (verdict, admissions)
    }

    /// Check one path against the walls and the deny globs. Used by the chain and again by
    /// the filesystem body on the file it actually opened.
    pub fn check_path(
        &self,
        given: &str,
        kind: AccessKind,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Result<PathCheck, PathCheckError> {
        let admitted = self.check(given, kind, ctx, resolver)?;
        Ok(PathCheck {
            given: given.to_owned(),
            lexical: admitted.lexical,
            resolved: admitted.resolved,
            root: admitted.root.to_owned(),
            kind,
        })
    }

    /// [`Self::check_path`] without the copies: the walls, then the deny globs.
    fn check(
        &self,
        given: &str,
        kind: AccessKind,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Result<Admitted<'_>, PathCheckError> {
        let lexical = self.absolute(given, &ctx.cwd)?;
        let unresolvable = |error| PathCheckError::Unresolvable {
            given: given.to_owned(),
            error,
        };
        let resolved = match (kind, lexical.parent(), lexical.file_name()) {
            // A removal (or the source of a move) takes the entry itself, as unlink and rename
            // do: a symlink in the last component is the link, never its target.
            (AccessKind::Delete, Some(parent), Some(name)) => resolver
                .resolve_from(parent, &self.anchors)
                .map_err(unresolvable)?
                .join(name),
            _ => resolver
                .resolve_from(&lexical, &self.anchors)
                .map_err(unresolvable)?,
        };
        let root = self.admit(&resolved, kind, given)?;
        // The path as written is matched first, then the resolved one unless it is the same.
        let same = lexical.as_os_str() == resolved.as_os_str();
        // Each form is made a glob candidate once, for the deny and the protect globs both.
        let candidates = [Some(&lexical), (!same).then_some(&resolved)]
            .map(|form| form.map(|path| (path, Candidate::new(path))));
        for (path, candidate) in candidates.iter().flatten() {
            if self.deny.is_match_candidate(candidate) {
                return Err(PathCheckError::DeniedByPattern {
                    given: given.to_owned(),
                    candidate: (*path).clone(),
                    pattern: self.denied_by_pattern(path).unwrap_or_default().to_owned(),
                });
            }
        }
        if kind.needs_write() {
            for (path, candidate) in candidates.iter().flatten() {
                if !self.protect.is_match_candidate(candidate) {
                    continue;
                }
                let matched = self.protect.matches_candidate(candidate);
                let pattern = matched
                    .first()
                    .map(|index| self.protect_globs[*index].clone())
                    .unwrap_or_default();
                return Err(PathCheckError::Protected {
                    given: given.to_owned(),
                    candidate: (*path).clone(),
                    pattern,
                });
            }
        }
        Ok(Admitted {
            lexical,
            resolved,
            root,
        })
    }

    /// Where a symbolic link made at `link` (a path already admitted for writing) may point:
    /// anywhere but aido's home and what the deny globs hide. A link carries no access of its
    /// own (every later action resolves it and is judged on where it leads, and the sandbox
    /// shows a command no denied path), so a target outside the walls is fine (a venv's
    /// `bin/python`); one into a denied path or the journal is refused, so no tool that follows
    /// links blindly (an archiver, a copy) is handed a secret through the workspace. `target`
    /// is as written in the link, relative to the link's directory; `..` and links in it are
    /// resolved as the kernel would.
    pub fn check_link_target(
        &self,
        link: &Path,
        target: &str,
        ctx: &SessionContext,
        resolver: &dyn PathResolver,
    ) -> Result<(), PathCheckError> {
        let given = target;
        // As the kernel reads it: no `~`, relative to the link's own directory.
        let absolute = link.parent().unwrap_or(&ctx.cwd).join(target);
        let lexical = crate::resolve::normalize_lexically(&absolute);
        let resolved = resolver
            .resolve_from(&absolute, &self.anchors)
            .map_err(|error| PathCheckError::Unresolvable {
                given: given.to_owned(),
                error,
            })?;
        for path in [&lexical, &resolved] {
            let canonical = self.roots_canonical && is_canonical(path);
            if strip_prefix_spelled(path, &self.aido_home, canonical).is_some() {
                return Err(PathCheckError::InAidoHome {
                    given: given.to_owned(),
                    aido_home: self.aido_home.clone(),
                });
            }
            if let Some(pattern) = self.denied_by_pattern(path) {
                return Err(PathCheckError::DeniedByPattern {
                    given: given.to_owned(),
                    candidate: path.clone(),
                    pattern: pattern.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The deny glob `path` matches, if any.
    pub fn denied_by_pattern(&self, path: &Path) -> Option<&str> {
        let candidate = Candidate::new(path);
        if !self.deny.is_match_candidate(&candidate) {
            return None;
        }
        self.deny
            .matches_candidate(&candidate)
            .first()
            .map(|i| self.deny_globs[*i].as_str())
    }

    /// The wall root that admits a resolved path for this kind of access.
    fn admit(
        &self,
        resolved: &Path,
        kind: AccessKind,
        given: &str,
    ) -> Result<&Path, PathCheckError> {
        // Checked once here: with the roots (checked when compiled) canonical too, every
        // comparison below is a byte comparison.
        let canonical = self.roots_canonical && is_canonical(resolved);
        let holds = |root: &Path| strip_prefix_spelled(resolved, root, canonical).is_some();
        if holds(&self.aido_home) {
            return Err(PathCheckError::InAidoHome {
                given: given.to_owned(),
                aido_home: self.aido_home.clone(),
            });
        }
        let walls = if kind.needs_write() {
            &self.write_walls
        } else {
            &self.read_walls
        };
        // Deepest first, so the first root that holds the path is the nearest. `starts_with`
        // compares whole components, so /w/a never admits /w/ab.
        match walls.iter().find(|root| holds(root)) {
            Some(root) if kind == AccessKind::Delete && resolved == root.as_path() => {
                Err(PathCheckError::WallRoot {
                    given: given.to_owned(),
                })
            }
            Some(root) => Ok(root),
            None => Err(PathCheckError::OutsideWalls {
                given: given.to_owned(),
                resolved: resolved.to_owned(),
                kind,
            }),
        }
    }

    /// `~` expanded, made absolute against `cwd`.
    fn absolute(&self, given: &str, cwd: &Path) -> Result<PathBuf, PathCheckError> {
        let invalid = |why: &'static str| PathCheckError::Invalid {
            given: given.to_owned(),
            why,
        };
        if given.is_empty() {
            return Err(invalid("empty path"));
        }
        if given.contains('\0') {
            return Err(invalid("contains a NUL byte"));
        }
        let path = expand_tilde(given, &self.home)
            .ok_or_else(|| invalid("only ~ and ~/ are expanded, not ~user"))?;
        Ok(if path.is_absolute() {
            path.into_owned()
        } else {
            let mut absolute =
                PathBuf::with_capacity(cwd.as_os_str().len() + 1 + path.as_os_str().len());
            absolute.push(cwd);
            absolute.push(path);
            absolute
        })
    }
}

/// Each `[[downstream]]` entry's refused tools as a glob set (of the tools' own names) and
/// its classes, by server name; a name given twice is refused.
type DownstreamRules = BTreeMap<String, (GlobSet, BTreeMap<String, SideEffectClass>)>;

fn compile_downstream(
    entries: &[crate::config::Downstream],
) -> Result<DownstreamRules, ConfigError> {
    let mut rules = DownstreamRules::new();
    for entry in entries {
        let key = format!("downstream.{}.deny_tools", entry.name);
        let mut builder = GlobSetBuilder::new();
        for pattern in &entry.deny_tools {
            let glob = GlobBuilder::new(pattern)
                .build()
                .map_err(|e| ConfigError::Value {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
            builder.add(glob);
        }
        let set = builder.build().map_err(|e| ConfigError::Value {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        if rules
            .insert(entry.name.clone(), (set, entry.classes.clone()))
            .is_some()
        {
            return Err(ConfigError::Value {
                key: "downstream".into(),
                reason: format!("two [[downstream]] entries are named {:?}", entry.name),
            });
        }
    }
    Ok(rules)
}

/// A glob set from configured patterns (`~/` is the home; `dir/**` matches `dir` too), with
/// the pattern behind each glob, for messages.
fn compile_globs<'p>(
    key: &str,
    patterns: impl Iterator<Item = &'p String>,
    home: &Path,
) -> Result<(GlobSet, Vec<String>), ConfigError> {
    let mut globs = Vec::new();
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let expanded = match pattern.strip_prefix("~/") {
            Some(rest) => format!("{}/{rest}", home.display()),
            None => pattern.clone(),
        };
        // `dir/**` also matches `dir` itself, so the directory cannot be trashed or replaced.
        let mut forms = vec![expanded.clone()];
        if let Some(dir) = expanded.strip_suffix("/**") {
            forms.push(dir.to_owned());
        }
        for form in forms {
            let glob = GlobBuilder::new(&form)
                .literal_separator(true)
                .build()
                .map_err(|e| ConfigError::Value {
                    key: key.into(),
                    reason: e.to_string(),
                })?;
            builder.add(glob);
            globs.push(pattern.clone());
        }
    }
    let set = builder.build().map_err(|e| ConfigError::Value {
        key: key.into(),
        reason: e.to_string(),
    })?;
    Ok((set, globs))
}

/// `path` with a leading `~` (alone or before `/`) as `home`; `None` for `~user`.
pub fn expand_tilde<'a>(path: &'a str, home: &Path) -> Option<Cow<'a, Path>> {
    if path == "~" {
        Some(Cow::Owned(home.to_owned()))
    } else if let Some(rest) = path.strip_prefix("~/") {
        Some(Cow::Owned(home.join(rest)))
    } else if path.starts_with('~') {
        None
    } else {
        Some(Cow::Borrowed(Path::new(path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change set's thousands of admissions are found by path and kind (the index), as a
    /// leaf's few are (the scan): the same answers, the first of a path's checks, nothing for
    /// another kind or another working directory.
    #[test]
    fn admissions_are_found_by_path_and_kind_however_many() {
        let check = |given: &str, kind, root: &str| PathCheck {
            given: given.to_owned(),
            lexical: PathBuf::from(given),
            resolved: PathBuf::from(given),
            root: PathBuf::from(root),
            kind,
        };
        for many in [3usize, 5_000] {
            let mut checks: Vec<PathCheck> = (0..many)
                .map(|i| check(&format!("/w/f{i}"), AccessKind::Write, "/w"))
                .collect();
            checks.push(check("/w/f1", AccessKind::Write, "/second"));
            checks.push(check("/w/gone", AccessKind::Delete, "/w"));
            let ctx = SessionContext::new(PathBuf::from("/w"))
                .with_admitted(Admissions::new(PathBuf::from("/w"), checks));
            let found = ctx.admitted("/w/f1", AccessKind::Write).unwrap();
            assert_eq!(
                found.root,
                PathBuf::from("/w"),
                "the first of a path's checks"
            );
            assert!(
                ctx.admitted(&format!("/w/f{}", many - 1), AccessKind::Write)
                    .is_some()
            );
            assert!(ctx.admitted("/w/f1", AccessKind::Delete).is_none());
            assert!(ctx.admitted("/w/gone", AccessKind::Delete).is_some());
            assert!(ctx.admitted("/w/nope", AccessKind::Write).is_none());
            let elsewhere = SessionContext {
                cwd: PathBuf::from("/other"),
                ..ctx.clone()
            };
            assert!(elsewhere.admitted("/w/f1", AccessKind::Write).is_none());
        }
    }
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
            Verdict::Deny { code, .. } => code.code(),
        }
    }

    #[test]
    fn an_evaluation_hands_every_admitted_path_to_the_body_and_a_denial_hands_none() {
        let w = world("");
        let pipeline = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "new/f.txt", "content": "x"},
                {"type": "read_file", "path": "keys/../file"},
            ]}),
        )
        .unwrap();
        let (verdict, admitted) = w.engine.evaluate_admitting(&pipeline, &w.ctx, &FsResolver);
        assert_eq!(verdict, Verdict::Allow);
        let ctx = w.ctx.with_admitted(admitted);
        let write = ctx.admitted("new/f.txt", AccessKind::Write).unwrap();
        assert_eq!(write.resolved, w.base.join("w/a/new/f.txt"));
        assert_eq!(write.root, w.base.join("w/a"));
        // Resolved as the chain resolved it: the symlink first, then `..`.
        let read = ctx.admitted("keys/../file", AccessKind::Read).unwrap();
        assert_eq!(read.resolved, w.base.join("home/file"));
        // Another kind, or a path the chain did not judge, is resolved by the body itself.
        assert!(ctx.admitted("new/f.txt", AccessKind::Read).is_none());
        assert!(ctx.admitted("other.txt", AccessKind::Write).is_none());
        // A context with another working directory never uses them.
        let mut moved = ctx.clone();
        moved.cwd = w.base.join("ro");
        assert!(moved.admitted("new/f.txt", AccessKind::Write).is_none());

        let denied = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "ok.txt", "content": "x"},
                {"type": "read_file", "path": "to_outside/secret"},
            ]}),
        )
        .unwrap();
        let (verdict, admitted) = w.engine.evaluate_admitting(&denied, &w.ctx, &FsResolver);
        assert!(matches!(verdict, Verdict::Deny { .. }));
        assert!(admitted.checks.is_empty());
        assert!(w.ctx.with_admitted(admitted).admitted.is_none());
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
            // A removal takes the link itself: one that leads out of the walls (or into a
            // denied directory) can go, what it names stays where it is.
            ("move_to_trash", "secret_link", "allow"),
            ("move_to_trash", "to_outside", "allow"),
            ("move_to_trash", "keys", "allow"),
            ("move_to_trash", "to_outside/secret", "path_outside_walls"), // through the link
            ("move_to_trash", "keys/id_ed25519", "path_denied_by_pattern"),
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
                assert_eq!(code, DenyCode::PathOutsideWalls);
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

    /// Every desktop primitive answers to desktop.enabled (off by default), read-only ones
    /// too; enabled, simulate marks the changing ones irreversible.
    #[test]
    fn desktop_primitives_answer_to_desktop_enabled_and_simulate_says_irreversible() {
        let off = world("");
        for (primitive, args) in [
            ("screenshot", json!({})),
            ("get_clipboard", json!({})),
            ("type_text", json!({"text": "ls"})),
        ] {
            assert_eq!(
                code(&verdict(&off, primitive, args)),
                "desktop_disabled",
                "{primitive}"
            );
        }
        let on = world("[desktop]\nenabled = true\ndeny = [{ class = \"keepassxc\" }]");
        assert_eq!(on.engine.config().desktop.deny.len(), 1);
        let tree = Action::from_tool_call(
            "pipeline",
            json!({"steps": [{"type": "screenshot"}, {"type": "type_text", "text": "ls"}]}),
        )
        .unwrap();
        let sim = on.engine.simulate(&tree, &on.ctx, &FsResolver);
        assert!(sim.verdict.is_allow());
        let flags: Vec<(&str, bool)> = sim
            .leaves
            .iter()
            .map(|l| (l.primitive, l.irreversible))
            .collect();
        assert_eq!(flags, [("screenshot", false), ("type_text", true)]);
        let shown = serde_json::to_value(&sim).unwrap();
        assert_eq!(shown["leaves"][1]["irreversible"], true);
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
                assert_eq!(code, DenyCode::PathDeniedByPattern);
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
        w.ctx.capabilities = Some(Arc::new(GrantScope::primitives(["read_only"])));
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

    #[test]
    fn a_grants_roots_bound_paths_as_resolved_inside_pipelines_too_and_refuse_commands() {
        let mut w = world("");
        w.ctx.cwd = w.base.join("w/a");
        w.ctx.capabilities = Some(Arc::new(GrantScope {
            write: Some(vec![w.base.join("w/a/sub")]),
            ..GrantScope::default()
        }));
        let write = |p: &str| json!({"path": p, "content": "x"});
        assert_eq!(
            code(&verdict(&w, "write_file", write("sub/n.txt"))),
            "allow"
        );
        assert_eq!(
            code(&verdict(&w, "read_file", json!({"path": "sub/n.txt"}))),
            "allow"
        );
        assert_eq!(
            code(&verdict(&w, "read_file", json!({"path": "file"}))),
            "grant_path_outside"
        );
        // ro/into_a is a link into w/a/sub: judged where it points, so reading through it is
        // inside the grant; the same name spelled as its own dir is not.
        assert_eq!(
            code(&verdict(
                &w,
                "read_file",
                json!({"path": "../../ro/into_a"})
            )),
            "allow"
        );
        let pipeline = json!({"steps": [
            {"type": "write_file", "path": "sub/ok.txt", "content": "x"},
            {"type": "write_file", "path": "no.txt", "content": "x"},
        ]});
        match verdict(&w, "pipeline", pipeline) {
            Verdict::Deny { code, leaf, .. } => {
                assert_eq!(code, DenyCode::GrantPathOutside);
                assert_eq!(leaf.as_deref(), Some("steps[1]"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            code(&verdict(&w, "run_command", json!({"argv": ["true"]}))),
            "grant_path_outside"
        );
    }

    /// One input that must be refused with `code`.
    struct DenyCase {
        code: DenyCode,
        config: &'static str,
        grant: Option<GrantScope>,
        refused: Option<DenyCode>,
        unbuilt: &'static [(Body, &'static str)],
        primitive: &'static str,
        args: serde_json::Value,
    }

    /// A case with no grant, no refused grant and every body built.
    fn case(
        code: DenyCode,
        config: &'static str,
        primitive: &'static str,
        args: serde_json::Value,
    ) -> DenyCase {
        DenyCase {
            code,
            config,
            grant: None,
            refused: None,
            unbuilt: &[],
            primitive,
            args,
        }
    }

    fn write(path: &str) -> serde_json::Value {
        json!({"path": path, "content": "x"})
    }

    /// The bodies gate's codes, and the mode's and action_enabled's.
    fn switch_cases() -> Vec<DenyCase> {
        vec![
            case(
                DenyCode::VmDisabled,
                "[vm]\nenabled = false",
                "vm_list",
                json!({}),
            ),
            case(
                DenyCode::ModeReadonly,
                "mode = \"readonly\"",
                "write_file",
                write("x"),
            ),
            case(
                DenyCode::ActionDisabled,
                "[actions]\nenabled = { read_file = false }",
                "read_file",
                json!({"path": "file"}),
            ),
            case(
                DenyCode::MemoryDisabled,
                "[memory]\nenabled = false",
                "recall",
                json!({"query": "x"}),
            ),
            case(
                DenyCode::ArtifactsDisabled,
                "[artifacts]\nenabled = false",
                "artifact_list",
                json!({}),
            ),
            case(
                DenyCode::BrowserDisabled,
                "[browser]\nenabled = false",
                "browser_snapshot",
                json!({}),
            ),
            case(
                DenyCode::DownstreamToolDenied,
                "[[downstream]]\nname = \"git\"\ncommand = \"mcp-server-git\"\ndeny_tools = [\"git_commit\"]",
                "downstream_call",
                json!({"tool": "git__git_commit"}),
            ),
            // Script evaluation is off by default.
            case(
                DenyCode::BrowserScriptDisabled,
                "",
                "browser_evaluate",
                json!({"script": "1"}),
            ),
            // The host's processes are hidden by default.
            case(
                DenyCode::HostProcessesHidden,
                "",
                "list_processes",
                json!({"host": true}),
            ),
            // Read-only desktop primitives answer to desktop.enabled too (off by default).
            case(DenyCode::DesktopDisabled, "", "screenshot", json!({})),
            // Refused before always_allow: vm_list is meta, and listed there.
            DenyCase {
                unbuilt: &[(Body::Machine, "prim-vm")],
                ..case(
                    DenyCode::PrimitiveNotBuilt,
                    "[actions]\nalways_allow = [\"vm_list\"]",
                    "vm_list",
                    json!({}),
                )
            },
        ]
    }

    /// The path_walls and deny_patterns gates' codes.
    fn path_cases() -> Vec<DenyCase> {
        vec![
            case(
                DenyCode::PathInvalid,
                "",
                "read_file",
                json!({"path": "~root/x"}),
            ),
            case(
                DenyCode::PathUnresolvable,
                "",
                "write_file",
                write("missing/../../x"),
            ),
            case(
                DenyCode::PathOutsideWalls,
                "",
                "read_file",
                json!({"path": "/etc/passwd"}),
            ),
            case(
                DenyCode::PathInAidoHome,
                "",
                "write_file",
                write("~/.aido/config.toml"),
            ),
            case(
                DenyCode::PathIsWallRoot,
                "",
                "move_to_trash",
                json!({"path": "."}),
            ),
            case(
                DenyCode::PathDeniedByPattern,
                "",
                "read_file",
                json!({"path": "keys/id_ed25519"}),
            ),
            case(
                DenyCode::PathProtected,
                "",
                "write_file",
                write("~/.bashrc"),
            ),
        ]
    }

    /// The capabilities gate's codes: a grant's scope, and a grant its store refused.
    fn grant_cases() -> Vec<DenyCase> {
        let mut cases = vec![
            DenyCase {
                grant: Some(GrantScope::primitives(["read_only"])),
                ..case(DenyCode::CapabilityMissing, "", "write_file", write("x"))
            },
            DenyCase {
                grant: Some(GrantScope {
                    read: Some(vec!["/".into()]),
                    ..GrantScope::default()
                }),
                ..case(DenyCode::GrantPathOutside, "", "write_file", write("x"))
            },
            DenyCase {
                grant: Some(GrantScope {
                    hosts: Some(vec!["other.org".into()]),
                    ..GrantScope::default()
                }),
                ..case(
                    DenyCode::GrantHostOutside,
                    "[net]\nallow = [\"example.com:443\"]",
                    "fetch_url",
                    json!({"url": "https://example.com/"}),
                )
            },
        ];
        for (refused, primitive, args) in [
            (DenyCode::GrantExpired, "read_file", json!({"path": "x"})),
            (DenyCode::GrantExhausted, "session_history", json!({})),
            (DenyCode::GrantRevoked, "read_file", json!({"path": "x"})),
            (
                DenyCode::GrantRateLimited,
                "read_file",
                json!({"path": "x"}),
            ),
        ] {
            cases.push(DenyCase {
                refused: Some(refused),
                ..case(refused, "", primitive, args)
            });
        }
        cases
    }

    /// The net_allowlist and remote_allowlist gates' codes.
    fn reach_cases() -> Vec<DenyCase> {
        vec![
            case(
                DenyCode::NetDenied,
                "",
                "fetch_url",
                json!({"url": "https://example.com/"}),
            ),
            case(
                DenyCode::NetAddressRefused,
                "[net]\nallow = [\"*\"]",
                "fetch_url",
                json!({"url": "http://127.0.0.2/"}),
            ),
            case(
                DenyCode::NetUrlInvalid,
                "",
                "http_request",
                json!({"url": "not a url"}),
            ),
            case(
                DenyCode::NetSchemeRefused,
                "",
                "http_request",
                json!({"url": "file:///etc/passwd"}),
            ),
            case(
                DenyCode::SshHostNotAllowed,
                "[ssh]\nhosts = [{ name = \"build\", host = \"127.0.0.1\", user = \"ci\", host_key = \"SHA256:x\", key_file = \"/k\" }]",
                "ssh_exec",
                json!({"host": "127.0.0.1", "command": "true"}),
            ),
            case(
                DenyCode::ContainerImageNotAllowed,
                "[containers]\nimages = [\"localhost/a:1\"]",
                "run_container_group",
                json!({"containers": [
                    {"image": "localhost/a:1", "argv": ["true"], "mount": "none"},
                    {"image": "docker.io/library/alpine", "argv": ["true"], "mount": "none"},
                ]}),
            ),
        ]
    }

    /// Every denial code comes out of a real input: one case per code, each judged by the real
    /// engine over real files. (The code table itself is pinned in `aido_actions::verdict`.)
    #[test]
    fn every_deny_code_is_produced() {
        let cases: Vec<DenyCase> = [switch_cases(), path_cases(), grant_cases(), reach_cases()]
            .into_iter()
            .flatten()
            .collect();
        let mut covered: Vec<DenyCode> = cases.iter().map(|c| c.code).collect();
        covered.sort();
        let mut all = DenyCode::ALL.to_vec();
        all.sort();
        assert_eq!(covered, all, "one case per code, each code once");
        for c in &cases {
            let mut w = world(c.config);
            w.engine = w.engine.without_bodies(c.unbuilt.to_vec());
            w.ctx.capabilities = c.grant.clone().map(Arc::new);
            w.ctx.grant_refused = c.refused.map(|code| (code, format!("{code:?}")));
            match verdict(&w, c.primitive, c.args.clone()) {
                Verdict::Deny {
                    gate, code, reason, ..
                } => {
                    assert_eq!(code, c.code, "{} {}: {reason}", c.primitive, c.args);
                    assert_eq!(gate, c.code.gate());
                    assert!(!reason.is_empty());
                }
                other => panic!("{} {}: {other:?}", c.primitive, c.args),
            }
        }
    }

    /// ssh_exec reaches only a host [ssh] hosts names, and under a grant only within its
    /// hosts; containers run only listed images, and their workspace mount is judged by the
    /// walls (read-only by the read walls, read-write by the write walls).
    #[test]
    fn the_remote_gate_names_hosts_and_images_and_mounts_answer_to_the_walls() {
        let w = world(
            "[ssh]\nhosts = [{ name = \"build\", host = \"127.0.0.1\", port = 2222, user = \"ci\", host_key = \"SHA256:x\", key_file = \"/k\" }]\n\
             [containers]\nimages = [\"localhost/aido-test:latest\"]",
        );
        let ssh = json!({"host": "build", "argv": ["uname"]});
        assert_eq!(code(&verdict(&w, "ssh_exec", ssh.clone())), "allow");
        let mut granted = world(
            "[ssh]\nhosts = [{ name = \"build\", host = \"127.0.0.1\", port = 2222, user = \"ci\", host_key = \"SHA256:x\", key_file = \"/k\" }]",
        );
        granted.ctx.capabilities = Some(Arc::new(GrantScope {
            hosts: Some(vec!["127.0.0.1:22".into()]),
            ..GrantScope::default()
        }));
        assert_eq!(
            code(&verdict(&granted, "ssh_exec", ssh.clone())),
            "grant_host_outside"
        );
        granted.ctx.capabilities = Some(Arc::new(GrantScope {
            hosts: Some(vec!["127.0.0.1:2222".into()]),
            ..GrantScope::default()
        }));
        assert_eq!(code(&verdict(&granted, "ssh_exec", ssh)), "allow");

        let image = "localhost/aido-test:latest";
        let run = |extra: serde_json::Value| {
            let mut args = json!({"image": image, "argv": ["true"]});
            for (k, v) in extra.as_object().unwrap() {
                args[k] = v.clone();
            }
            code(&verdict(&w, "run_in_sandbox", args)).to_owned()
        };
        assert_eq!(run(json!({})), "allow");
        assert_eq!(
            run(json!({"image": "alpine"})),
            "container_image_not_allowed"
        );
        assert_eq!(run(json!({"workspace": "/etc"})), "path_outside_walls");
        assert_eq!(run(json!({"workspace": "/etc", "mount": "none"})), "allow");
        assert_eq!(
            run(json!({"workspace": "/", "mount": "read_write"})),
            "path_outside_walls"
        );
        assert_eq!(run(json!({"mount": "read_write"})), "allow");
        let off = world("");
        assert_eq!(
            code(&verdict(
                &off,
                "ssh_exec",
                json!({"host": "build", "command": "true"})
            )),
            "ssh_host_not_allowed"
        );
        assert_eq!(
            code(&verdict(
                &off,
                "run_in_sandbox",
                json!({"image": image, "argv": ["true"]})
            )),
            "container_image_not_allowed"
        );
    }

    /// The desktop gate asks the action table which actions drive a machine, not their names:
    /// machine actions of every class answer to vm.enabled, and desktop.enabled does not
    /// refuse a machine's screen.
    #[test]
    fn machines_answer_to_vm_enabled_whatever_their_class() {
        let off = world("[vm]\nenabled = false");
        for (primitive, args) in [
            ("vm_list", json!({})),
            ("vm_start", json!({})),
            ("vm_click", json!({"x": 1, "y": 2})),
            ("vm_reboot", json!({})),
        ] {
            let action = Action::from_tool_call(primitive, args).unwrap();
            assert_eq!(action.body(), Body::Machine);
            let v = off.engine.evaluate(&action, &off.ctx, &FsResolver);
            assert_eq!(code(&v), "vm_disabled", "{primitive}");
        }
        // Not a machine action: vm.enabled does not concern it.
        assert_eq!(
            code(&verdict(&off, "read_file", json!({"path": "file"}))),
            "allow"
        );
        let on = world("");
        assert!(!on.engine.config().desktop.enabled);
        assert_eq!(
            code(&verdict(&on, "vm_click", json!({"x": 1, "y": 2}))),
            "allow"
        );
    }

    /// A body the build lacks refuses its leaves wherever they are: alone, or deep in a
    /// pipeline (the whole tree is refused, naming the leaf and the feature), and nothing else.
    #[test]
    fn an_unbuilt_family_is_refused_alone_and_inside_a_pipeline() {
        let mut w = world("");
        w.engine = w
            .engine
            .without_bodies(vec![(Body::Process, "prim-process")]);
        let run = json!({"argv": ["true"]});
        let alone = verdict(&w, "run_command", run.clone());
        assert_eq!(code(&alone), "primitive_not_built");
        let Verdict::Deny { reason, .. } = alone else {
            unreachable!()
        };
        assert!(reason.contains("prim-process"), "{reason}");
        let tree = json!({"steps": [
            {"type": "read_file", "path": "file"},
            {"type": "run_command", "argv": ["true"]},
        ]});
        match verdict(&w, "pipeline", tree) {
            Verdict::Deny { code, leaf, .. } => {
                assert_eq!(code, DenyCode::PrimitiveNotBuilt);
                assert_eq!(leaf.as_deref(), Some("steps[1]"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            code(&verdict(&w, "read_file", json!({"path": "file"}))),
            "allow"
        );
    }

    /// check_path's refusals are typed and carry their context; the text is built from it.
    #[test]
    fn path_refusals_are_typed() {
        let w = world("");
        let check = |given: &str, kind| w.engine.check_path(given, kind, &w.ctx, &FsResolver);
        match check("secret_link", AccessKind::Read) {
            Err(PathCheckError::OutsideWalls { resolved, kind, .. }) => {
                assert_eq!(resolved, w.base.join("outside/secret"));
                assert_eq!(kind, AccessKind::Read);
            }
            other => panic!("{other:?}"),
        }
        match check("keys/id_ed25519", AccessKind::Read) {
            Err(e @ PathCheckError::DeniedByPattern { .. }) => {
                assert_eq!(e.gate(), Gate::DenyPatterns);
                let PathCheckError::DeniedByPattern {
                    candidate, pattern, ..
                } = e
                else {
                    unreachable!()
                };
                // As written it matches nothing; resolved, it is inside .ssh.
                assert_eq!(candidate, w.base.join("home/.ssh/id_ed25519"));
                assert_eq!(pattern, "**/.ssh/**");
            }
            other => panic!("{other:?}"),
        }
        let ok = check("sub/new.txt", AccessKind::Write).unwrap();
        assert_eq!(ok.root, w.base.join("w/a"));
        assert_eq!(ok.resolved, w.base.join("w/a/sub/new.txt"));
        // The nearest root admits: ~ is a write root too, but w/a is deeper.
        let ok = check("~/notes.txt", AccessKind::Write).unwrap();
        assert_eq!(ok.root, w.base.join("home"));
    }

    /// A symlink whose target does not exist is judged by where it points, not by its name.
    #[test]
    fn dangling_symlinks_are_judged_by_their_target() {
        let w = world("");
        symlink(w.base.join("outside/new"), w.base.join("w/a/dangling")).unwrap();
        symlink(
            "../../../home/.ssh/new_key",
            w.base.join("w/a/sub/dangling_key"),
        )
        .unwrap();
        symlink("nowhere/yet", w.base.join("w/a/dangling_inside")).unwrap();
        let write = |path: &str| verdict(&w, "write_file", json!({"path": path, "content": "x"}));
        assert_eq!(code(&write("dangling")), "path_outside_walls");
        assert_eq!(code(&write("sub/dangling_key")), "path_denied_by_pattern");
        assert_eq!(code(&write("dangling_inside")), "allow");
    }

    /// A link a command makes may point anywhere but into a denied path or aido's home, as
    /// written or resolved (through `..` and through links already there).
    #[test]
    fn a_links_target_is_judged_by_the_deny_globs_and_aido_home_only() {
        let w = world("");
        let link = w.base.join("w/a/sub/link");
        let cases: &[(&str, &str)] = &[
            ("../file", "allow"),
            ("/usr/bin/python3", "allow"),
            ("../../../outside/secret", "allow"),
            ("nowhere/yet", "allow"),
            ("{b}/home/.ssh/id_ed25519", "path_denied_by_pattern"),
            ("../../../home/.ssh/new_key", "path_denied_by_pattern"),
            ("../keys/id_ed25519", "path_denied_by_pattern"),
            ("{b}/home/.aido/journal", "path_in_aido_home"),
            ("../../../home/.ssh/../.aido", "path_in_aido_home"),
            ("../../../home/gone_/../.ssh/k", "path_unresolvable"),
        ];
        let b = w.base.display().to_string();
        for (target, expected) in cases {
            let target = target.replace("{b}", &b);
            let got = match w
                .engine
                .check_link_target(&link, &target, &w.ctx, &FsResolver)
            {
                Ok(()) => "allow",
                Err(e) => e.code().code(),
            };
            assert_eq!(got, *expected, "{target}");
        }
    }

    /// Roots compared by bytes only when every spelling is canonical: a resolver that answers
    /// with trailing separators (non-canonical) gets the component comparison, and the same
    /// verdicts.
    #[test]
    fn walls_hold_the_same_paths_whatever_the_spelling() {
        struct Trailing;
        impl PathResolver for Trailing {
            fn resolve(&self, path: &Path) -> Result<PathBuf, ResolveError> {
                Ok(PathBuf::from(format!(
                    "{}/",
                    normalize_lexically(path).display()
                )))
            }
        }
        let w = world("");
        let b = w.base.display().to_string();
        let text = format!("[paths]\nread = [\"{b}/ro\"]\nwrite = [\"{b}/w/a\"]\n");
        let config = Layered::from_layers(&[(Source::File("t".into()), &text)])
            .unwrap()
            .config;
        let env = Environment {
            home: w.base.join("home"),
            aido_home: w.base.join("home/.aido"),
        };
        let engine = PolicyEngine::new(&config, &env, &Trailing).unwrap();
        assert!(!engine.roots_canonical);
        let ctx = SessionContext::new(w.base.join("w/a"));
        let cases: &[(&str, AccessKind, &str)] = &[
            ("{b}/w/a/new.txt", AccessKind::Write, "allow"),
            ("{b}/w/ab/x", AccessKind::Write, "path_outside_walls"),
            ("{b}/ro/x", AccessKind::Read, "allow"),
            ("{b}/ro/x", AccessKind::Write, "path_outside_walls"),
            ("{b}/home/.aido/x", AccessKind::Read, "path_in_aido_home"),
            ("{b}/w/a", AccessKind::Delete, "path_is_wall_root"),
        ];
        for (given, kind, expected) in cases {
            let given = given.replace("{b}", &b);
            let got = match engine.check_path(&given, *kind, &ctx, &Trailing) {
                Ok(_) => "allow",
                Err(e) => e.code().code(),
            };
            assert_eq!(got, *expected, "{given} {kind:?}");
        }
    }
}
