//! What a remote command or a container printed, kept within caps, with the time of every
//! piece (a frame) so the journal says when output came as well as what it was.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Which stream a frame came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One piece of output as it arrived: its order, stream, time since the start and size.
/// The bytes themselves are in the kept stream text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Its place, from 0.
    pub seq: u64,
    /// Its stream.
    pub stream: Stream,
    /// Milliseconds from the start of the run.
    pub t_ms: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// How a remote command or a container ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this status (passed through as the command gave it).
    Code(i64),
    /// A signal ended it (its name, as SSH reports it: `KILL`, `TERM`).
    Signal(String),
    /// The timeout passed and it was killed.
    TimedOut,
    /// It ended without saying how (the server closed the channel without an exit status).
    Unknown,
}

/// What one run answered: everything its result is rendered from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteOutcome {
    /// How it ended.
    pub exit: Exit,
    /// The kept standard output (UTF-8, invalid bytes replaced).
    pub stdout: String,
    /// The kept standard error.
    pub stderr: String,
    /// All bytes of standard output, kept or not.
    pub stdout_bytes_total: u64,
    /// All bytes of standard error, kept or not.
    pub stderr_bytes_total: u64,
    /// Whether standard output was cut.
    pub stdout_truncated: bool,
    /// Whether standard error was cut.
    pub stderr_truncated: bool,
    /// The frames, in order, at most [`Capture::FRAMES_MAX`].
    pub frames: Vec<Frame>,
    /// Frames past the bound (counted, not listed).
    pub frames_dropped: u64,
    /// Wall time of the run.
    pub duration_ms: u64,
}

/// Collects output within caps.
#[derive(Debug)]
pub struct Capture {
    started: Instant,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_bytes_max: usize,
    stderr_bytes_max: usize,
    stdout_bytes_total: u64,
    stderr_bytes_total: u64,
    frames: Vec<Frame>,
    frames_total: u64,
}

impl Capture {
    /// Most frames listed per run (each is a few dozen bytes of journal).
    pub const FRAMES_MAX: usize = 1024;

    /// A capture keeping at most these many bytes of each stream, timed from `started`.
    pub fn new(started: Instant, stdout_bytes_max: usize, stderr_bytes_max: usize) -> Self {
        Capture {
            started,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_bytes_max,
            stderr_bytes_max,
            stdout_bytes_total: 0,
            stderr_bytes_total: 0,
            frames: Vec::new(),
            frames_total: 0,
        }
    }

    /// Take one piece of output.
    pub fn push(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let (kept, max, total) = match stream {
            Stream::Stdout => (
                &mut self.stdout,
                self.stdout_bytes_max,
                &mut self.stdout_bytes_total,
            ),
            Stream::Stderr => (
                &mut self.stderr,
                self.stderr_bytes_max,
                &mut self.stderr_bytes_total,
            ),
        };
        *total += data.len() as u64;
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&data[..room.min(data.len())]);
        if self.frames.len() < Self::FRAMES_MAX {
            self.frames.push(Frame {
                seq: self.frames_total,
                stream,
                t_ms: self.started.elapsed().as_millis() as u64,
                bytes: data.len() as u64,
            });
        }
        self.frames_total += 1;
    }

    /// The outcome, ended as `exit`.
    pub fn finish(self, exit: Exit) -> RemoteOutcome {
        RemoteOutcome {
            exit,
            stdout_truncated: self.stdout_bytes_total > self.stdout.len() as u64,
            stderr_truncated: self.stderr_bytes_total > self.stderr.len() as u64,
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
            stdout_bytes_total: self.stdout_bytes_total,
            stderr_bytes_total: self.stderr_bytes_total,
            frames_dropped: self.frames_total - self.frames.len() as u64,
            frames: self.frames,
            duration_ms: self.started.elapsed().as_millis() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_cut_and_count_and_frames_are_bounded() {
        let mut capture = Capture::new(Instant::now(), 4, 100);
        capture.push(Stream::Stdout, b"hello");
        capture.push(Stream::Stderr, b"oops");
        capture.push(Stream::Stdout, b"");
        for _ in 0..Capture::FRAMES_MAX {
            capture.push(Stream::Stdout, b"x");
        }
        let out = capture.finish(Exit::Code(3));
        assert_eq!(out.stdout, "hell");
        assert!(out.stdout_truncated);
        assert_eq!(out.stdout_bytes_total, 5 + Capture::FRAMES_MAX as u64);
        assert_eq!(out.stderr, "oops");
        assert!(!out.stderr_truncated);
        assert_eq!(out.frames.len(), Capture::FRAMES_MAX);
        assert_eq!(out.frames_dropped, 2);
        assert_eq!(out.frames[1].stream, Stream::Stderr);
        assert_eq!(
            serde_json::to_value(&out.exit).unwrap(),
            serde_json::json!({"kind": "code", "value": 3})
        );
    }
}
