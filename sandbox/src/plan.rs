//! Resolving a [`Profile`] and a [`Request`] into the child's [`Plan`], in the parent.
//!
//! Everything that needs judgement (globs, canonical paths, what a missing denied path needs)
//! happens here, before anything is spawned, so the child only executes a list.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use aido_globs::{GlobIndex, is_glob};

use crate::error::SpawnError;
use crate::profile::{LANDLOCK_ABI_KNOWN_MAX, Profile, Request, WriteMode};
use crate::protocol::{Hidden, Plan};

/// Arguments in one command line.
pub(crate) const ARGV_ENTRIES_MAX: usize = 4096;
/// Variables in the command's environment.
pub(crate) const ENV_ENTRIES_MAX: usize = 1024;
/// The longest timeout a request may ask for (one day).
pub(crate) const TIMEOUT_MS_MAX: u64 = 86_400_000;
/// Entries of the deny list.
pub(crate) const DENY_ENTRIES_MAX: usize = 1024;

/// The environment every command starts from, before the allowlist and the request's own.
const ENV_DEFAULTS: [(&str, &str); 5] = [
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("LANG", "C.UTF-8"),
    ("TZ", "UTC"),
    ("TERM", "dumb"),
    ("HOME", "/tmp"),
];

/// A resolved plan and the placeholders the parent must create before the spawn and remove
/// after it (denied paths that did not exist yet under a writable root).
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) plan: Plan,
    pub(crate) placeholders: Vec<PathBuf>,
    /// For a command that runs as an unprivileged host user: what the child prepares.
    pub(crate) ids: Option<crate::protocol::Ids>,
}

#[allow(clippy::too_many_lines)]
pub(crate) fn resolve(
    profile: &Profile,
    request: &Request,
    home: Option<&Path>,
    parent_env: &BTreeMap<String, String>,
    globs: &GlobIndex,
) -> Result<Resolved, SpawnError> {
    check_request(request)?;
    if profile.landlock_abi_min == 0 {
        return Err(SpawnError::invalid("landlock_abi_min must be at least 1"));
    }
    if profile.landlock_abi_min > LANDLOCK_ABI_KNOWN_MAX {
        return Err(SpawnError::unavailable(
            format!("landlock_abi_v{}", profile.landlock_abi_min),
            format!(
                "this build enforces Landlock up to ABI v{LANDLOCK_ABI_KNOWN_MAX} (landlock crate 0.4.4)"
            ),
        ));
    }
    let writable_roots = profile
        .writable_roots
        .iter()
        .map(|root| canonical_root(root))
        .collect::<Result<Vec<_>, _>>()?;
    let layers_dir = match &profile.writes {
        WriteMode::Direct => None,
        WriteMode::Overlay { layers_dir } => Some(check_layers_dir(layers_dir, &writable_roots)?),
    };
    if profile.deny.len() > DENY_ENTRIES_MAX {
        return Err(SpawnError::invalid(format!(
            "{} deny entries exceed {DENY_ENTRIES_MAX}",
            profile.deny.len()
        )));
    }
    let mut hidden = Vec::new();
    let mut placeholders = Vec::new();
    let mut globbed = Vec::new();
    let mut denied = Vec::new();
    for pattern in &profile.deny {
        for path in expand_home(pattern, home, &writable_roots)? {
            if is_glob(&path) {
                globbed.push(path);
            } else {
                denied.push(path);
            }
        }
    }
    let whole = denied.clone();
    denied.extend(globs.expand(&globbed, &whole)?.0);
    for path in denied {
        deny_one(
            &path,
            &writable_roots,
            layers_dir.as_deref(),
            &mut hidden,
            &mut placeholders,
        )?;
    }
    hidden.sort_by(|left, right| hidden_path(left).cmp(hidden_path(right)));
    hidden.dedup();
    // A denied directory is covered after the roots are bound, so a root inside one would be
    // covered too: refuse rather than leave a root that silently is not there.
    for root in &writable_roots {
        if let Some(Hidden::Dir(denied)) = hidden
            .iter()
            .find(|entry| matches!(entry, Hidden::Dir(denied) if root.starts_with(denied) && root != denied))
        {
            return Err(SpawnError::invalid(format!(
                "writable root {} is inside the denied {}",
                root.display(),
                denied.display()
            )));
        }
    }
    placeholders.sort();
    placeholders.dedup();
    let shared_tmp = match &profile.shared_tmp {
        None => None,
        Some(dir) => Some(check_shared_tmp(dir, &writable_roots, profile.run_as)?),
    };
    let (walls, covers, ids) = match profile.run_as {
        None => (Vec::new(), Vec::new(), None),
        Some(run_as) => {
            if run_as.uid == 0 || run_as.gid == 0 {
                return Err(SpawnError::invalid(
                    "run_as must name an unprivileged user and group (not 0)",
                ));
            }
            let readable: Vec<PathBuf> = profile
                .readable_roots
                .iter()
                .filter_map(|root| root.canonicalize().ok())
                .filter(|root| root.is_dir())
                .collect();
            let walls = walls_of(&readable, &writable_roots, layers_dir.is_some());
            let covers = covers_of(&walls, run_as);
            let ids = crate::protocol::Ids {
                uid: run_as.uid,
                gid: run_as.gid,
                walls: walls.clone(),
                layers: layers_dir.clone().map(|dir| (dir, writable_roots.len())),
                shared_tmp: shared_tmp.clone(),
            };
            (walls, covers, Some(ids))
        }
    };

    let mut env: BTreeMap<String, String> = ENV_DEFAULTS
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    for name in &profile.env_allow {
        if let Some(value) = parent_env.get(name) {
            env.insert(name.clone(), value.clone());
        }
    }
    // Where the egress proxy is, for the tools that read it (it is not the boundary: the
    // namespace has no other way out).
    if let aido_egress::Network::Proxy { .. } = profile.network {
        let proxy = format!("http://127.0.0.1:{}", aido_egress::EGRESS_PORT);
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            env.insert(name.into(), proxy.clone());
        }
        env.insert("NO_PROXY".into(), String::new());
        env.insert("no_proxy".into(), String::new());
    }
    for (name, value) in &request.env {
        env.insert(name.clone(), value.clone());
    }
    for (name, value) in &env {
        if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
            return Err(SpawnError::invalid(format!(
                "environment variable {name:?} is malformed"
            )));
        }
    }
    if env.len() > ENV_ENTRIES_MAX {
        return Err(SpawnError::invalid(format!(
            "{} environment variables exceed {ENV_ENTRIES_MAX}",
            env.len()
        )));
    }

    Ok(Resolved {
        plan: Plan {
            argv: request.argv.clone(),
            cwd: request.cwd.clone(),
            env: env.into_iter().collect(),
            timeout_ms: request.timeout_ms,
            writable_roots,
            writes: match layers_dir {
                None => WriteMode::Direct,
                Some(layers_dir) => WriteMode::Overlay { layers_dir },
            },
            hidden,
            landlock_abi_min: profile.landlock_abi_min,
            rlimits: profile.rlimits,
            tmp_bytes_max: profile.tmp_bytes_max,
            seccomp: aido_confine::seccomp_wire()?,
            live: None,
            walls,
            covers,
            shared_tmp,
            unix_sockets: profile.unix_sockets.clone(),
        },
        placeholders,
        ids,
    })
}

/// A shared `/tmp` must be a directory (not a link) the command's user owns, where no
/// writable root is: its files are the command's scratch, never a change to apply.
fn check_shared_tmp(
    dir: &Path,
    writable_roots: &[PathBuf],
    run_as: Option<crate::RunAs>,
) -> Result<PathBuf, SpawnError> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|error| SpawnError::invalid(format!("the shared /tmp {shown}: {error}")))?;
    if !meta.is_dir() {
        return Err(SpawnError::invalid(format!(
            "the shared /tmp {shown} is not a directory"
        )));
    }
    let owner = run_as.map_or_else(|| rustix::process::geteuid().as_raw(), |run_as| run_as.uid);
    if meta.uid() != owner {
        return Err(SpawnError::invalid(format!(
            "the shared /tmp {shown} is owned by uid {}, not the command's user {owner}",
            meta.uid()
        )));
    }
    let dir = dir
        .canonicalize()
        .map_err(|error| SpawnError::invalid(format!("the shared /tmp {shown}: {error}")))?;
    if let Some(root) = writable_roots
        .iter()
        .find(|root| dir.starts_with(root) || root.starts_with(&dir))
    {
        return Err(SpawnError::invalid(format!(
            "the shared /tmp {shown} overlaps the writable root {}",
            root.display()
        )));
    }
    Ok(dir)
}

/// The walls an unprivileged command sees as its own: the outermost of the readable and
/// writable roots, read-only (a writable root's overlay writes above it), and with direct
/// writes each writable root again, writable, on top.
fn walls_of(
    readable: &[PathBuf],
    writable: &[PathBuf],
    overlay: bool,
) -> Vec<crate::protocol::Wall> {
    let all: Vec<&PathBuf> = readable.iter().chain(writable.iter()).collect();
    let mut outermost: Vec<PathBuf> = all
        .iter()
        .filter(|root| {
            !all.iter()
                .any(|other| other != *root && root.starts_with(other.as_path()))
        })
        .map(|root| (*root).clone())
        .collect();
    outermost.sort();
    outermost.dedup();
    let mut walls: Vec<crate::protocol::Wall> = outermost
        .into_iter()
        .map(|path| crate::protocol::Wall {
            path,
            writable: false,
        })
        .collect();
    if !overlay {
        walls.extend(writable.iter().map(|path| crate::protocol::Wall {
            path: path.clone(),
            writable: true,
        }));
    }
    walls
}

/// The shallowest directory on the way to each wall that `run_as` cannot search (no execute
/// bit it is granted as other, or as the owner or group it is not).
fn covers_of(walls: &[crate::protocol::Wall], run_as: crate::RunAs) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut covers: Vec<PathBuf> = Vec::new();
    for wall in walls {
        // Under the private /tmp and /dev/shm the way down is made afresh, by the command's
        // own user.
        if wall.path.starts_with("/tmp") || wall.path.starts_with("/dev/shm") {
            continue;
        }
        let mut at = PathBuf::from("/");
        for part in wall.path.components().skip(1) {
            if at != wall.path && covers.iter().any(|cover| at.starts_with(cover)) {
                break;
            }
            let searchable = std::fs::metadata(&at).is_ok_and(|meta| {
                let mode = meta.mode();
                mode & 0o001 != 0
                    || (meta.uid() == run_as.uid && mode & 0o100 != 0)
                    || (meta.gid() == run_as.gid && mode & 0o010 != 0)
            });
            if !searchable {
                covers.push(at.clone());
                break;
            }
            at.push(part);
        }
    }
    covers.sort();
    covers.dedup();
    covers
}

pub(crate) fn hidden_path(hidden: &Hidden) -> &Path {
    match hidden {
        Hidden::Dir(path) | Hidden::File(path) => path,
    }
}

fn check_request(request: &Request) -> Result<(), SpawnError> {
    if request.argv.is_empty() || request.argv[0].is_empty() {
        return Err(SpawnError::invalid("argv is empty"));
    }
    if request.argv.len() > ARGV_ENTRIES_MAX {
        return Err(SpawnError::invalid(format!(
            "{} arguments exceed {ARGV_ENTRIES_MAX}",
            request.argv.len()
        )));
    }
    if request.argv.iter().any(|argument| argument.contains('\0')) {
        return Err(SpawnError::invalid("an argument contains NUL"));
    }
    if request.stdin.len() > crate::protocol::FRAME_BYTES_MAX {
        return Err(SpawnError::invalid(format!(
            "{} stdin bytes exceed {}",
            request.stdin.len(),
            crate::protocol::FRAME_BYTES_MAX
        )));
    }
    if !request.cwd.is_absolute() {
        return Err(SpawnError::invalid(format!(
            "cwd {:?} is not absolute",
            request.cwd
        )));
    }
    if request.timeout_ms == 0 || request.timeout_ms > TIMEOUT_MS_MAX {
        return Err(SpawnError::invalid(format!(
            "timeout_ms {} is outside 1..={TIMEOUT_MS_MAX}",
            request.timeout_ms
        )));
    }
    Ok(())
}

fn canonical_root(root: &Path) -> Result<PathBuf, SpawnError> {
    if !root.is_absolute() {
        return Err(SpawnError::invalid(format!(
            "writable root {root:?} is not absolute"
        )));
    }
    let canonical = root
        .canonicalize()
        .map_err(|error| SpawnError::invalid(format!("writable root {root:?}: {error}")))?;
    if !canonical.is_dir() {
        return Err(SpawnError::invalid(format!(
            "writable root {root:?} is not a directory"
        )));
    }
    if canonical == Path::new("/") {
        return Err(SpawnError::invalid(
            "the host root cannot be a writable root",
        ));
    }
    if mount_option_unsafe(&canonical) {
        return Err(SpawnError::invalid(format!(
            "writable root {canonical:?} contains ',', ':' or a newline"
        )));
    }
    Ok(canonical)
}

fn check_layers_dir(layers_dir: &Path, roots: &[PathBuf]) -> Result<PathBuf, SpawnError> {
    let canonical = layers_dir
        .canonicalize()
        .map_err(|error| SpawnError::invalid(format!("layers_dir {layers_dir:?}: {error}")))?;
    if !canonical.is_dir() || mount_option_unsafe(&canonical) {
        return Err(SpawnError::invalid(format!(
            "layers_dir {canonical:?} is not a plain directory"
        )));
    }
    if roots
        .iter()
        .any(|root| canonical.starts_with(root) || root.starts_with(&canonical))
    {
        return Err(SpawnError::invalid(format!(
            "layers_dir {canonical:?} overlaps a writable root"
        )));
    }
    Ok(canonical)
}

/// Overlayfs options are comma-separated and its layers colon-separated.
fn mount_option_unsafe(path: &Path) -> bool {
    path.to_string_lossy()
        .chars()
        .any(|character| matches!(character, ',' | ':' | '\n'))
}

/// `~/x` becomes `$HOME/x`; a relative pattern applies under every writable root. Globs are
/// returned as globs, expanded together by the caller.
fn expand_home(
    pattern: &str,
    home: Option<&Path>,
    roots: &[PathBuf],
) -> Result<Vec<PathBuf>, SpawnError> {
    let bases: Vec<PathBuf> = if let Some(rest) = pattern.strip_prefix("~/") {
        match home {
            Some(home) => vec![home.join(rest)],
            // Without a home there is nothing of it to hide.
            None => Vec::new(),
        }
    } else if pattern.starts_with('/') {
        vec![PathBuf::from(pattern)]
    } else {
        roots.iter().map(|root| root.join(pattern)).collect()
    };
    let mut paths = Vec::new();
    for base in bases {
        if base
            .components()
            .any(|component| matches!(component, Component::ParentDir | Component::CurDir))
        {
            return Err(SpawnError::invalid(format!(
                "deny pattern {pattern:?} has . or .."
            )));
        }
        paths.push(base);
    }
    Ok(paths)
}

fn deny_one(
    path: &Path,
    roots: &[PathBuf],
    layers_dir: Option<&Path>,
    hidden: &mut Vec<Hidden>,
    placeholders: &mut Vec<PathBuf>,
) -> Result<(), SpawnError> {
    if std::fs::symlink_metadata(path).is_ok() {
        // The mount lands on what the path resolves to; a dangling link resolves to nothing and
        // is handled as the missing path it points at.
        match path.canonicalize() {
            Ok(canonical) if canonical.is_dir() => hidden.push(Hidden::Dir(canonical)),
            Ok(canonical) => hidden.push(Hidden::File(canonical)),
            Err(_) => {
                if let Ok(target) = std::fs::read_link(path) {
                    let target = path.parent().unwrap_or(Path::new("/")).join(target);
                    if !target
                        .components()
                        .any(|component| matches!(component, Component::ParentDir))
                        && std::fs::symlink_metadata(&target).is_err()
                    {
                        return deny_missing(&target, roots, layers_dir, hidden, placeholders);
                    }
                }
            }
        }
        return Ok(());
    }
    deny_missing(path, roots, layers_dir, hidden, placeholders)
}

/// A denied path that does not exist yet. Under a read-only part of the host it cannot be
/// created, so nothing is needed. In overlay mode nothing is needed either: whatever the
/// command makes there stays in its layer, which reaches the host only if the caller applies
/// it, and aido judges every change of a layer by the same deny globs (one denied path refuses
/// the whole set). Under a writable root in direct mode its first missing component gets an
/// empty directory (the placeholder) with a read-only tmpfs over it, so neither it nor
/// anything below it can be created; the parent removes the placeholder afterwards.
fn deny_missing(
    path: &Path,
    roots: &[PathBuf],
    layers_dir: Option<&Path>,
    hidden: &mut Vec<Hidden>,
    placeholders: &mut Vec<PathBuf>,
) -> Result<(), SpawnError> {
    if layers_dir.is_some() {
        return Ok(());
    }
    let mut existing = path.to_path_buf();
    let mut first_missing = None;
    while std::fs::symlink_metadata(&existing).is_err() {
        first_missing = existing.file_name().map(PathBuf::from);
        if !existing.pop() {
            return Ok(());
        }
    }
    let Some(name) = first_missing else {
        return Ok(());
    };
    let Ok(existing) = existing.canonicalize() else {
        return Ok(());
    };
    if !roots.iter().any(|root| existing.starts_with(root)) {
        return Ok(());
    }
    let placeholder = existing.join(name);
    hidden.push(Hidden::Dir(placeholder.clone()));
    placeholders.push(placeholder);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_with(profile: &Profile, root: &Path) -> Result<Resolved, SpawnError> {
        let request = Request::new(["true"], root);
        resolve(
            profile,
            &request,
            Some(Path::new("/nonexistent-home")),
            &BTreeMap::new(),
            &GlobIndex::default(),
        )
    }

    #[test]
    fn missing_denied_path_under_a_root_gets_a_placeholder_at_its_first_missing_component() {
        let root = tempfile::tempdir().unwrap();
        let canonical = root.path().canonicalize().unwrap();
        let mut profile = Profile::new(vec![root.path().to_path_buf()]);
        profile.deny = vec![
            ".git/hooks/post-commit".into(),
            "/etc/no-such-file-aido".into(),
        ];
        let resolved = resolve_with(&profile, root.path()).unwrap();
        assert_eq!(resolved.placeholders, vec![canonical.join(".git")]);
        assert_eq!(
            resolved.plan.hidden,
            vec![Hidden::Dir(canonical.join(".git"))]
        );
    }

    #[test]
    fn globs_expand_over_existing_entries_without_descending_into_matches() {
        let root = tempfile::tempdir().unwrap();
        let canonical = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.path().join("a/secrets/deeper/secrets")).unwrap();
        std::fs::write(root.path().join("a/.env"), "k").unwrap();
        let mut profile = Profile::new(vec![root.path().to_path_buf()]);
        profile.deny = vec!["**/secrets".into(), "*/.env".into()];
        let resolved = resolve_with(&profile, root.path()).unwrap();
        assert_eq!(
            resolved.plan.hidden,
            vec![
                Hidden::File(canonical.join("a/.env")),
                Hidden::Dir(canonical.join("a/secrets")),
            ]
        );
        assert!(resolved.placeholders.is_empty());
    }

    #[test]
    fn table_of_refusals() {
        let root = tempfile::tempdir().unwrap();
        type Change = fn(&mut Profile, &mut Request);
        let cases: [(&str, Change, &str); 7] = [
            (
                "empty argv",
                |_, request| request.argv.clear(),
                "sandbox_request_invalid",
            ),
            (
                "relative cwd",
                |_, request| request.cwd = "rel".into(),
                "sandbox_request_invalid",
            ),
            (
                "zero timeout",
                |_, request| request.timeout_ms = 0,
                "sandbox_request_invalid",
            ),
            (
                "root writable",
                |profile, _| profile.writable_roots = vec!["/".into()],
                "sandbox_request_invalid",
            ),
            (
                "landlock v7",
                |profile, _| profile.landlock_abi_min = 7,
                "sandbox_unavailable",
            ),
            (
                "dotdot deny",
                |profile, _| profile.deny = vec!["/etc/../root".into()],
                "sandbox_request_invalid",
            ),
            (
                "root inside a denied directory",
                |profile, _| {
                    let root = profile.writable_roots[0].clone();
                    profile.deny = vec![root.parent().unwrap().display().to_string()];
                },
                "sandbox_request_invalid",
            ),
        ];
        for (name, change, code) in cases {
            let mut profile = Profile::new(vec![root.path().to_path_buf()]);
            let mut request = Request::new(["true"], root.path());
            change(&mut profile, &mut request);
            let error = resolve(
                &profile,
                &request,
                None,
                &BTreeMap::new(),
                &GlobIndex::default(),
            )
            .unwrap_err();
            assert_eq!(error.code(), code, "{name}: {error}");
        }
    }
}
