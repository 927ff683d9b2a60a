//! Snapshots of a workspace directory, with three backends chosen automatically and reported
//! by name:
//!
//! - **btrfs subvolume** when the workspace is a btrfs subvolume: a read-only snapshot beside
//!   it is O(1) to take, and a restore snapshots it back and swaps it into place with one
//!   atomic `renameat2(RENAME_EXCHANGE)`;
//! - **reflink** on filesystems that share extents (btrfs, xfs): every file is cloned with
//!   `FICLONE`, so a snapshot costs metadata, not data;
//! - **copy** anywhere else: files go once into a content-addressed object store (blake3), and
//!   a file whose size and modification time did not change since the last snapshot is not
//!   read again.
//!
//! Every read and change of the workspace tree goes through directory handles opened from
//! its root one component at a time without following symlinks (`openat` with `O_NOFOLLOW`,
//! `unlinkat`, `renameat`, `fchmod` and `futimens` on open files), so a symlink swapped in for
//! a directory while a snapshot or restore runs is an entry to replace or an error, never a
//! way out of the workspace.
//!
//! A reflink or copy restore is incremental and idempotent: it removes what the snapshot does
//! not hold, and rewrites only files whose size, mode or modification time differ (each by
//! temp file and rename, with the recorded mtime put back). Run again after a crash, it
//! finishes the job, which is how callers make a restore "before or after", never half.
//!
//! ```
//! use aido_snapshots::Store;
//! let dir = tempfile::tempdir().unwrap();
//! let ws = dir.path().join("ws");
//! std::fs::create_dir(&ws).unwrap();
//! std::fs::write(ws.join("a.txt"), "one").unwrap();
//! let store = Store::open(&ws, &dir.path().join("aido")).unwrap();
//! store.create("s1", 0).unwrap();
//! std::fs::write(ws.join("a.txt"), "two").unwrap();
//! store.restore("s1").unwrap();
//! assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one");
//! ```

/// btrfs subvolume snapshots through the `btrfs` command.
mod btrfs;
/// Which backend a directory supports.
mod detect;
/// Why a snapshot operation failed.
mod error;
/// Walking a tree into a manifest, and making a tree match one.
mod manifest;
/// The store: create, restore, list, delete.
mod store;
/// Directory handles: every read and change relative to an open directory, no symlink followed.
mod tree;
/// Making a workspace: a btrfs subvolume, optionally in a loop file.
pub mod volume;

pub use detect::Backend;
pub use manifest::{Entry, Manifest};
pub use store::{RestoreStats, Snapshot, SnapshotError, Store};
#[doc(hidden)]
pub use tree::Step;
