//! The filesystem body: the one place that touches the agent's files.
//!
//! Every path was judged by the policy before the body sees it, and the body checks again
//! where it counts: it resolves the path, opens it *relative to the wall root's directory
//! handle* with cap-std (which refuses to follow anything out of that directory), and then
//! asks the kernel which file the open descriptor really is (`/proc/self/fd`) and runs the
//! walls and deny globs on that. A symlink swapped in between the check and the use can make
//! an action fail (`path_changed_during_check`); it cannot make it touch a denied file.
//!
//! Every change is made the same way (`walls::Walls::parent`): the directory the checked path
//! lives in is opened from the root's handle one component at a time with `O_NOFOLLOW |
//! O_DIRECTORY`, confirmed through `/proc/self/fd` to be the one the check named, and the
//! change is made relative to it: `unlinkat` and a bounded, handle-based tree removal (a
//! symlink met is unlinked itself), `renameat` between two handles (the trash's own, opened
//! the same way, included), a copy through handles where the two are on different
//! filesystems, `mkdirat` one component at a time. So a directory on the path swapped for a
//! symlink between the check and the act cannot make aido remove, move or create anything
//! outside the checked root.

/// The actor and its messages.
pub mod actor;
/// A command's file changes: staged into the journal whole, then applied.
pub mod changeset;
/// What a write is about to do, on disk before its rename.
pub mod intent;
/// The operations, one function per primitive.
mod ops;
/// Snapshots, restores and rewind steps.
pub mod snapshot;
/// diff and render_template: reads judged by the walls, results from `aido_walk::tools`.
pub mod tools;
/// The freedesktop.org trash.
mod trash;
/// Opening and changing files under checked roots, by handle (and the hidden check hook).
mod walls;

/// Errors and their codes, and results as pure functions of arguments and recorded inputs
/// (shared with playback): they live in `aido-walk`.
pub use aido_walk::fs::{FsError, error, render};
pub use aido_walk::{Executed, Step};

pub use actor::{FsBody, FsBodyArgs, FsMsg};
pub use snapshot::SnapshotOp;
#[doc(hidden)]
pub use walls::hook;
