//! Facts about the machine and the build the numbers came from.

use std::path::Path;
use std::process::Command;

/// What the report's header states.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// CPUs this process may use.
    pub cpus: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Physical memory, from /proc/meminfo.
    pub memory: String,
    /// The kernel release.
    pub kernel: String,
    /// When the run happened (UTC).
    pub date: String,
    /// `rustc --version`.
    pub rustc: String,
    /// The git commit, and whether the tree had uncommitted changes.
    pub commit: String,
    /// `node --version`.
    pub node: String,
    /// The file system under the temp dir (where the journal and the files were).
    pub temp_fs: String,
}

impl Machine {
    /// Collects the facts; anything that cannot be read says `unknown`.
    pub fn collect(node: &str, temp: &Path) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let commit = match run("git", &["rev-parse", "--short=12", "HEAD"]) {
            Some(hash) => {
                let dirty = run("git", &["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{hash} (plus uncommitted changes)")
                } else {
                    hash
                }
            }
            None => "unknown".into(),
        };
        Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            memory: field(&meminfo, "MemTotal")
                .and_then(|kb| kb.trim_end_matches(" kB").trim().parse::<u64>().ok())
                .map_or_else(
                    || "unknown".into(),
                    |kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0),
                ),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
            date: run("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown".into()),
            rustc: run("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
            commit,
            node: run(node, &["--version"]).unwrap_or_else(|| "unknown".into()),
            temp_fs: fs_type(temp).unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// The type of the file system `path` is on (`ext4`, `tmpfs`, ...), if it can be told.
pub fn fs_type(path: &Path) -> Option<String> {
    // findmnt names ext4 as such; `stat -f` only knows the ext2/ext3 magic.
    run(
        "findmnt",
        &["-n", "-o", "FSTYPE", "--target", &path.to_string_lossy()],
    )
    .and_then(|out| last_line(&out))
    .or_else(|| run("stat", &["-f", "-c", "%T", &path.to_string_lossy()]))
    .and_then(|out| last_line(&out))
}

/// findmnt lists every file system stacked on one mount point, the visible one last.
fn last_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .map(str::to_owned)
}

/// Whether `dir` can hold the tmpfs run: `Ok` if it is a directory on tmpfs, otherwise why not.
pub fn check_tmpfs(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("{} does not exist on this machine", dir.display()));
    }
    tmpfs_verdict(dir, fs_type(dir).as_deref())
}

/// [`check_tmpfs`] once the file system type is known.
fn tmpfs_verdict(dir: &Path, fs: Option<&str>) -> Result<(), String> {
    match fs {
        Some("tmpfs") => Ok(()),
        Some(other) => Err(format!("{} is {other}, not tmpfs", dir.display())),
        None => Err(format!(
            "the file system of {} could not be determined",
            dir.display()
        )),
    }
}

/// The value of the first `key : value` line.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

/// The first line `program --version` prints, if it runs.
pub fn version(program: &str) -> Option<String> {
    Some(run(program, &["--version"])?.lines().next()?.to_owned())
}

/// A command's trimmed stdout, if it ran and succeeded.
fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

impl Machine {
    /// The run's header: where and when it was measured, and the machine's facts.
    pub fn records(&self) -> Vec<crate::record::Record> {
        let mut run = crate::record::Section::new("run");
        let source = format!("measured by aido-bench at commit {}", self.commit);
        run.fact("source", source);
        run.fact("date", self.date.clone());
        let mut machine = crate::record::Section::new("machine");
        for (fact, value) in [
            ("CPUs (nproc)", self.cpus.to_string()),
            ("CPU model", self.cpu_model.clone()),
            ("memory", self.memory.clone()),
            ("kernel", self.kernel.clone()),
            ("file system under the temp dir", self.temp_fs.clone()),
            ("rustc", self.rustc.clone()),
            ("node (for the peer)", self.node.clone()),
            ("git commit", format!("`{}`", self.commit)),
            ("date", self.date.clone()),
        ] {
            machine.fact(fact, value);
        }
        let mut out = run.records;
        out.extend(machine.records);
        out
    }
}

/// Bytes under a path: apparent (file sizes) and allocated (blocks).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// The regular files' sizes.
    pub apparent: u64,
    /// The blocks allocated to everything under it.
    pub allocated: u64,
}

/// [`Usage`] of everything under `path` (not following symlinks).
pub fn usage(path: &Path) -> std::io::Result<Usage> {
    use std::os::unix::fs::MetadataExt;
    let mut total = Usage::default();
    let mut stack = vec![path.to_owned()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue; // gone meanwhile
        };
        total.allocated += meta.blocks() * 512;
        if meta.is_file() {
            total.apparent += meta.len();
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&p)?.flatten() {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_files_and_blocks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 5000]).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/b"), b"xy").unwrap();
        let u = usage(dir.path()).unwrap();
        assert_eq!(u.apparent, 5002);
        assert!(u.allocated >= 5002, "{u:?}");
    }

    #[test]
    fn field_takes_the_first_match() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC\nmodel name\t: other\n";
        assert_eq!(field(text, "model name").as_deref(), Some("AMD EPYC"));
        assert_eq!(field(text, "missing"), None);
    }

    #[test]
    fn stacked_mounts_name_the_visible_one() {
        assert_eq!(last_line("tmpfs\ntmpfs\n").as_deref(), Some("tmpfs"));
        assert_eq!(
            last_line("ext4\n  overlay \n\n").as_deref(),
            Some("overlay")
        );
        assert_eq!(last_line("\n"), None);
    }

    #[test]
    fn tmpfs_check_says_why_not() {
        let dir = Path::new("/dev/shm");
        assert_eq!(tmpfs_verdict(dir, Some("tmpfs")), Ok(()));
        assert_eq!(
            tmpfs_verdict(dir, Some("ext4")),
            Err("/dev/shm is ext4, not tmpfs".to_owned())
        );
        assert!(
            tmpfs_verdict(dir, None)
                .unwrap_err()
                .contains("could not be determined")
        );
        let missing = Path::new("/no/such/dir/for/aido-bench");
        assert_eq!(
            check_tmpfs(missing),
            Err("/no/such/dir/for/aido-bench does not exist on this machine".to_owned())
        );
    }
}
