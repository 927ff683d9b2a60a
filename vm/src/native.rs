//! The helper that hosts aido's native libraries: `aido-native` (a second executable of the
//! `aido` package, installed beside it; its code is the `aido-native` crate).
//!
//! tesseract and libvirt are C and C++ libraries with some sixty shared libraries of their
//! own. Linked into aido, every aido process paid for loading them (about 20 ms here, before
//! `main`), including `aido exec` and every `aido mcp` that never reads a screen, and a crash
//! in either took aido down. So aido links neither: a machine on a libvirt host and an OCR
//! engine each get a helper process, spoken to over its standard input and output in
//! [frames](write_frame): a JSON header and an optional binary body. A helper that sees its
//! input close (aido exited, even killed) destroys what it made and exits.
//!
//! This module is both ends' protocol: the requests and replies, the frame format and, for
//! aido, [`Helper`] (finding, starting and calling one).

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::error::VmError;
use crate::spec::MachineSpec;

/// The helper's file name, beside the executable that starts it.
pub const HELPER_NAME: &str = "aido-native";
/// The environment variable that names the helper instead (tests, unusual installs).
pub const HELPER_ENV: &str = "AIDO_NATIVE";
/// `argv[1]` of an OCR helper.
pub const OCR_MODE: &str = "ocr";
/// `argv[1]` of a libvirt helper.
pub const LIBVIRT_MODE: &str = "libvirt";

/// Largest frame header.
pub const HEADER_BYTES_MAX: u32 = 1 << 20;
/// Largest frame body (a screenshot, an upscaled frame for OCR).
pub const BODY_BYTES_MAX: u32 = 256 << 20;
/// How long a helper has to exit once told to (after that it is killed).
const EXIT_WAIT_MS: u64 = 5_000;

/// What aido asks an OCR helper.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OcrRequest {
    /// Start the engine (English); answered once it is up.
    Start,
    /// Recognize the body: `width * height` 8-bit grey pixels, rows top to bottom.
    Recognize {
        /// Pixels per row.
        width: u32,
        /// Rows.
        height: u32,
        /// The resolution tesseract should assume (dots per inch).
        ppi: u32,
    },
}

/// What aido asks a libvirt helper. A helper serves one guest: `Create` first.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LibvirtRequest {
    /// Define and start the guest on `uri`, its serial console copied into `serial_log`.
    Create {
        /// The libvirt URI.
        uri: String,
        /// What to boot.
        spec: MachineSpec,
        /// Where the console goes.
        serial_log: PathBuf,
    },
    /// One QMP command (JSON) through `virDomainQemuMonitorCommand`.
    Monitor {
        /// The command.
        command: String,
    },
    /// The screen, as the body of the reply.
    Screenshot,
    /// The body, written to the serial console.
    SerialWrite,
    /// Take snapshot `name` (disk and memory).
    SnapshotSave {
        /// Its name.
        name: String,
    },
    /// Go back to snapshot `name`.
    SnapshotLoad {
        /// Its name.
        name: String,
    },
    /// Delete snapshot `name`.
    SnapshotDelete {
        /// Its name.
        name: String,
    },
    /// The snapshots' names.
    SnapshotList,
    /// Destroy the guest and its overlay, then exit.
    Destroy,
    /// Destroy the domains this machine's dead aido processes left on `uri` (no guest needed).
    Reap {
        /// The libvirt URI.
        uri: String,
    },
}

/// A helper's answer: a value (with the reply frame's body beside it), or why not.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply<T> {
    /// It worked.
    Done {
        /// The value.
        value: T,
    },
    /// A libvirt call failed.
    Libvirt {
        /// The operation.
        op: String,
        /// libvirt's message.
        message: String,
    },
    /// OCR failed.
    Ocr {
        /// Why.
        message: String,
    },
    /// A file of this machine could not be used.
    Io {
        /// What was being done.
        op: String,
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
}

impl<T> Reply<T> {
    /// The reply to a failed call.
    pub fn failed(error: &VmError) -> Self {
        match error {
            VmError::Libvirt { op, message } => Self::Libvirt {
                op: op.clone(),
                message: message.clone(),
            },
            VmError::Io { op, path, source } => Self::Io {
                op: (*op).to_owned(),
                path: path.clone(),
                message: source.to_string(),
            },
            other => Self::Ocr {
                message: other.to_string(),
            },
        }
    }

    fn into_result(self) -> Result<T, VmError> {
        match self {
            Self::Done { value } => Ok(value),
            Self::Libvirt { op, message } => Err(VmError::Libvirt { op, message }),
            Self::Ocr { message } => Err(VmError::Ocr { message }),
            Self::Io { op, path, message } => Err(VmError::Helper {
                helper: HELPER_NAME,
                message: format!("{op} {path}: {message}"),
            }),
        }
    }
}

/// Writes one frame: the header's length (u32, little endian), the header (JSON), the body's
/// length (u32) and the body.
pub fn write_frame<T: Serialize>(
    out: &mut impl Write,
    header: &T,
    body: &[u8],
) -> std::io::Result<()> {
    let header = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    let too_big = |what| std::io::Error::other(format!("the frame's {what} is over its bound"));
    let header_len = u32::try_from(header.len())
        .ok()
        .filter(|n| *n <= HEADER_BYTES_MAX)
        .ok_or_else(|| too_big("header"))?;
    let body_len = u32::try_from(body.len())
        .ok()
        .filter(|n| *n <= BODY_BYTES_MAX)
        .ok_or_else(|| too_big("body"))?;
    out.write_all(&header_len.to_le_bytes())?;
    out.write_all(&header)?;
    out.write_all(&body_len.to_le_bytes())?;
    out.write_all(body)?;
    out.flush()
}

/// Reads one frame; `None` at a clean end of input (before a frame's first byte).
pub fn read_frame<T: DeserializeOwned>(
    input: &mut impl Read,
) -> std::io::Result<Option<(T, Vec<u8>)>> {
    let mut length = [0u8; 4];
    match input.read_exact(&mut length) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let header = read_part(input, u32::from_le_bytes(length), HEADER_BYTES_MAX)?;
    input.read_exact(&mut length)?;
    let body = read_part(input, u32::from_le_bytes(length), BODY_BYTES_MAX)?;
    let header = serde_json::from_slice(&header).map_err(std::io::Error::other)?;
    Ok(Some((header, body)))
}

fn read_part(input: &mut impl Read, length: u32, max: u32) -> std::io::Result<Vec<u8>> {
    if length > max {
        return Err(std::io::Error::other(format!(
            "a frame part of {length} bytes is over its bound of {max}"
        )));
    }
    let mut part = vec![0u8; length as usize];
    input.read_exact(&mut part)?;
    Ok(part)
}

/// The helper executable: `AIDO_NATIVE` if set, else `aido-native` beside this executable, or
/// one directory up (a test binary of cargo's in `target/*/deps` finds the one in
/// `target/*`).
pub fn helper_exe() -> Result<PathBuf, VmError> {
    if let Some(named) = std::env::var_os(HELPER_ENV) {
        return Ok(PathBuf::from(named));
    }
    let missing = |message: String| VmError::Helper {
        helper: HELPER_NAME,
        message,
    };
    let current = std::env::current_exe()
        .map_err(|e| missing(format!("cannot tell this executable's path: {e}")))?;
    let beside = current.with_file_name(HELPER_NAME);
    let above = current
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(HELPER_NAME));
    [Some(beside.clone()), above]
        .into_iter()
        .flatten()
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            missing(format!(
                "{} is not installed (install it beside aido: `cargo install --path cli` installs both; \
                 or name it with {HELPER_ENV})",
                beside.display()
            ))
        })
}

/// One running helper process, asked one thing at a time.
pub struct Helper {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Helper {
    /// Start `aido-native MODE`. tesseract reads `OMP_THREAD_LIMIT` once, at start, and is
    /// 5-9x faster on small machines with one thread: the helper gets `1` unless the
    /// environment says otherwise.
    pub fn start(mode: &str) -> Result<Self, VmError> {
        let exe = helper_exe()?;
        let mut command = Command::new(&exe);
        command
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if std::env::var_os("OMP_THREAD_LIMIT").is_none() {
            command.env("OMP_THREAD_LIMIT", "1");
        }
        let mut child = command.spawn().map_err(|e| VmError::Helper {
            helper: HELPER_NAME,
            message: format!("cannot start {}: {e}", exe.display()),
        })?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(VmError::Helper {
                helper: HELPER_NAME,
                message: "started without its pipes".into(),
            });
        };
        Ok(Self {
            child,
            input,
            output: BufReader::new(output),
        })
    }

    /// Ask `request` with `body`; the answer and the reply's body. A helper that died or broke
    /// the protocol is [`VmError::Helper`].
    pub fn call<Q: Serialize, A: DeserializeOwned>(
        &mut self,
        request: &Q,
        body: &[u8],
    ) -> Result<(A, Vec<u8>), VmError> {
        let broken = |what: &str, e: std::io::Error| VmError::Helper {
            helper: HELPER_NAME,
            message: format!("{what}: {e}"),
        };
        write_frame(&mut self.input, request, body).map_err(|e| broken("cannot ask it", e))?;
        let (reply, body): (Reply<A>, Vec<u8>) = read_frame(&mut self.output)
            .map_err(|e| broken("its answer is unreadable", e))?
            .ok_or_else(|| VmError::Helper {
                helper: HELPER_NAME,
                message: format!("it exited without answering ({})", self.status()),
            })?;
        Ok((reply.into_result()?, body))
    }

    fn status(&mut self) -> String {
        match self.child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            Ok(None) => "still running".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Close its input (it cleans up and exits) and wait for it, killing it after a while.
    pub fn finish(mut self) {
        drop(self.input);
        let deadline = std::time::Instant::now() + Duration::from_millis(EXIT_WAIT_MS);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if std::time::Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_a_clean_end_is_none() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &LibvirtRequest::SnapshotList, b"").unwrap();
        write_frame(
            &mut wire,
            &OcrRequest::Recognize {
                width: 2,
                height: 1,
                ppi: 140,
            },
            &[7, 9],
        )
        .unwrap();
        let mut input = wire.as_slice();
        let (first, body): (LibvirtRequest, Vec<u8>) = read_frame(&mut input).unwrap().unwrap();
        assert!(matches!(first, LibvirtRequest::SnapshotList) && body.is_empty());
        let (second, body): (OcrRequest, Vec<u8>) = read_frame(&mut input).unwrap().unwrap();
        assert!(matches!(second, OcrRequest::Recognize { width: 2, .. }));
        assert_eq!(body, vec![7, 9]);
        assert!(read_frame::<OcrRequest>(&mut input).unwrap().is_none());
    }

    #[test]
    fn an_oversized_or_cut_frame_is_an_error_not_an_allocation() {
        let mut wire = (HEADER_BYTES_MAX + 1).to_le_bytes().to_vec();
        wire.extend_from_slice(b"{}");
        assert!(read_frame::<OcrRequest>(&mut wire.as_slice()).is_err());
        let mut cut = Vec::new();
        write_frame(&mut cut, &LibvirtRequest::Screenshot, b"abc").unwrap();
        cut.truncate(cut.len() - 1);
        assert!(read_frame::<LibvirtRequest>(&mut cut.as_slice()).is_err());
    }

    #[test]
    fn a_failed_reply_comes_back_as_the_same_error() {
        let sent: Reply<()> = Reply::failed(&VmError::Libvirt {
            op: "screenshot".into(),
            message: "no".into(),
        });
        let mut wire = Vec::new();
        write_frame(&mut wire, &sent, b"").unwrap();
        let (back, _): (Reply<()>, Vec<u8>) = read_frame(&mut wire.as_slice()).unwrap().unwrap();
        let error = back.into_result().unwrap_err();
        assert_eq!(error.code(), "vm_libvirt_failed");
        assert_eq!(error.to_string(), "libvirt screenshot: no");
    }
}
