//! The price of one metadata system call on this machine, measured at report time: the full
//! policy evaluation differs from the gates alone by the metadata calls its path walk makes.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Calls timed together: one clock reading per batch keeps the clock's own cost out.
pub const BATCH: usize = 100;

/// What one `std::fs::symlink_metadata` call costs.
#[derive(Clone, Debug, PartialEq)]
pub struct MetadataCost {
    /// Calls made in all.
    pub calls: usize,
    /// Median over the batches of the time per call, nanoseconds.
    pub median_ns: f64,
    /// The file system the file was on.
    pub fs: String,
}

/// Times `calls` (rounded up to whole batches of [`BATCH`]) `std::fs::symlink_metadata` calls
/// on one file in a fresh directory under `parent`, and returns the median time per call.
pub fn measure(parent: &Path, calls: usize, fs: String) -> Result<MetadataCost> {
    let dir = tempfile::Builder::new()
        .prefix("aido-bench-metadata-")
        .tempdir_in(parent)
        .with_context(|| format!("creating a temp dir in {}", parent.display()))?;
    let file = dir.path().join("file.txt");
    std::fs::write(&file, "x\n").with_context(|| format!("writing {}", file.display()))?;
    let batches = calls.div_ceil(BATCH).max(1);
    // One unmeasured batch first, so the dentry and inode are cached like in the policy bench.
    for _ in 0..BATCH {
        std::fs::symlink_metadata(&file).with_context(|| format!("lstat {}", file.display()))?;
    }
    let mut per_call = Vec::with_capacity(batches);
    for _ in 0..batches {
        let start = Instant::now();
        for _ in 0..BATCH {
            if black_box(std::fs::symlink_metadata(black_box(&file))).is_err() {
                bail!("lstat {} failed while measuring", file.display());
            }
        }
        per_call.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    Ok(MetadataCost {
        calls: batches * BATCH,
        median_ns: median(&mut per_call),
        fs,
    })
}

/// The median (the mean of the two middle values for an even count); zero when empty.
fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn measures_whole_batches_in_the_given_dir() {
        let parent = tempfile::tempdir().unwrap();
        let cost = measure(parent.path(), 250, "somefs".into()).unwrap();
        assert_eq!(cost.calls, 3 * BATCH);
        assert!(cost.median_ns > 0.0 && cost.median_ns < 1e7, "{cost:?}");
        assert_eq!(cost.fs, "somefs");
        // The measuring dir is gone afterwards.
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }
}
