//! Machine primitives: a whole QEMU guest for the agent, with root inside and nothing of the
//! host reachable. `vm` names a machine started with vm_start (default `default`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

fn default_vm() -> String {
    "default".into()
}

/// Boot a machine from the cached guest image (see `aido vm image build`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmStart {
    /// Its name (default `default`).
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Guest memory in MiB (default 128, at most 2048).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
    /// `text` (VGA text console, read exactly; the default) or `framebuffer` (a 1280x800
    /// graphical console, read by OCR; built with `aido vm image build --framebuffer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// Boot the kernel (seconds) instead of starting from the image's template, a machine saved
    /// at its prompt (well under a second once the template exists; the first start makes it).
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_boot: Option<bool>,
}

/// Shut a machine down (QEMU quits; its disk overlay and snapshots go with it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmShutdown {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
}

/// The running machines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmList {}

/// One machine: accelerator (kvm or tcg), boot time, screen size, QEMU pid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmInfo {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
}

/// A PNG of the machine's screen (an MCP image), plus its text when the guest is in text mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmScreenshot {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
}

/// Type text on the machine's keyboard (US layout), paced so no key is lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmType {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// The text; `\n` presses Enter.
    pub text: String,
}

/// Press a key or chord: `Return`, `ctrl+alt+t`, `ctrl+c`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmKey {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Keys joined by `+`.
    pub keys: String,
}

/// Click at a point of the screen (pixels).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmClick {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Pixels from the left.
    pub x: u32,
    /// Pixels from the top.
    pub y: u32,
    /// left (default), middle or right.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub button: Option<String>,
}

/// Find text on the screen: every match with its bounding box and center.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmFindText {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// The text to find.
    pub text: String,
}

/// Wait until text is on the screen (polling), then say where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmWaitForText {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// The text to wait for.
    pub text: String,
    /// How long to wait (default 10000 ms, at most 120000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Find text on the screen and click its center.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmClickText {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// The text to click.
    pub text: String,
}

/// Save the machine's disk and memory under a name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmSnapshotCreate {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Letters, digits, `.`, `_`, `-`.
    pub name: String,
}

/// Go back to a named machine snapshot (disk, memory and screen).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmSnapshotRestore {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// The snapshot.
    pub name: String,
}

/// Names just a machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmTarget {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
}

/// A point on a machine's screen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmPoint {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Pixels from the left.
    pub x: u32,
    /// Pixels from the top.
    pub y: u32,
}

/// A drag on a machine's screen, left button held from one point to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmDrag {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Start, pixels from the left.
    pub from_x: u32,
    /// Start, pixels from the top.
    pub from_y: u32,
    /// End, pixels from the left.
    pub to_x: u32,
    /// End, pixels from the top.
    pub to_y: u32,
}

/// Scroll the wheel at a point: positive `amount` scrolls down, negative up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmScroll {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// Pixels from the left.
    pub x: u32,
    /// Pixels from the top.
    pub y: u32,
    /// Wheel steps (at most 100 either way).
    pub amount: i32,
}

/// Wait a while, e.g. for a program in the machine to settle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmWait {
    /// Milliseconds (at most 60000).
    pub ms: u64,
}

/// Delete a named machine snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmSnapshotDelete {
    /// The machine.
    #[serde(default = "default_vm")]
    pub vm: String,
    /// The snapshot.
    pub name: String,
}

/// Clone a running machine (its disk, memory and screen) into a new one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmClone {
    /// The machine to copy.
    #[serde(default = "default_vm")]
    pub source: String,
    /// The new machine's name.
    pub vm: String,
}

/// Take a warm clone from the pool (near-instant; a fresh identity), under a name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmPoolAcquire {
    /// The name it will have.
    pub vm: String,
}

/// The warm pool: clones ready, size, handed out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmPoolStatus {}

pub use crate::computer::{ComputerAction, ScrollDirection};
use crate::computer::{ComputerInput, ToolUse, ToolsetVersion};

/// Anthropic's `computer` tool (computer_20250124 / computer_20251124), with exactly its
/// actions and parameters, driving a machine (the one named `vm`, default `default`), so
/// computer-use agents work unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Computer {
    /// What to do.
    pub action: ComputerAction,
    /// Its parameters.
    #[serde(flatten)]
    pub input: ComputerInput,
    /// The machine (an aido extension; default `default`).
    #[serde(default = "default_vm")]
    pub vm: String,
}

/// The `computer_toolset_20260801` members of one assistant turn on a machine, run in order;
/// the first that fails stops the batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputerToolset {
    /// `computer_toolset_20260801` (the default).
    #[serde(default)]
    pub version: ToolsetVersion,
    /// The turn's member calls (1 to 32), in the order the model sent them.
    pub actions: Vec<ToolUse>,
    /// The machine (an aido extension; default `default`).
    #[serde(default = "default_vm")]
    pub vm: String,
}

macro_rules! touches_nothing {
    ($($t:ty),*) => {
        $(impl Touches for $t {
            fn touches(&self, _out: &mut Vec<Access>) {}
        })*
    };
}

touches_nothing!(
    VmStart,
    VmShutdown,
    VmList,
    VmInfo,
    VmScreenshot,
    VmType,
    VmKey,
    VmClick,
    VmFindText,
    VmWaitForText,
    VmClickText,
    VmSnapshotCreate,
    VmSnapshotRestore,
    VmTarget,
    VmPoint,
    VmDrag,
    VmScroll,
    VmWait,
    VmSnapshotDelete,
    Computer,
    ComputerToolset,
    VmClone,
    VmPoolAcquire,
    VmPoolStatus
);
