//! Background commands (`run_command` with `background`): each is a [`Handle`] in the
//! runtime's [`HandleTable`], shared by every session of this aido process, so it outlives a
//! client's reconnect.
//!
//! Output is read by one thread per stream, as fast as the command writes it, into a ring of
//! frames of at most [`FRAME_BYTES_MAX`] bytes, bounded at [`HANDLE_BUFFER_BYTES_MAX`]: the
//! oldest frames go first and are counted, so a flood costs aido a fixed amount of memory and
//! never blocks the command or any other call. A frame's `seq` is its cursor; a reader asks
//! from a cursor and gets what is still kept, told how many frames it missed.
//!
//! Each handle has a registry file in `AIDO_HOME/handles` (`h<n>.json`) while it lives. The
//! sandbox child dies with aido (see [`aido_sandbox::Sandbox::start`]), so at the next start a
//! file whose owner process is gone is a lost handle: [`recover_lost`] renames it
//! `h<n>.lost.json`, removes its layer (its file changes were never applied) and the runtime
//! journals a `handle_lost` record for it; asking for it afterwards is `handle_lost`.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aido_actions::Failure;
use aido_actions::process::{CheckHandle, WriteStdin};
use aido_sandbox::{Control, Ended, Exit, Output, SpawnError};
use aido_walk::process::record::{
    self, BufferStats, HandleEnd, HandleFailure, HandleStart, HandleState, HandleStatus, StoppedBy,
};
use serde_json::{Value, json};

use super::HandleError;
use super::dry::Layers;

/// Most background commands alive at once (running or ended but not yet stopped).
pub const HANDLES_MAX: usize = 16;
/// Most stopped handles kept for reading their last output.
pub const STOPPED_KEPT_MAX: usize = 16;
/// Output a handle keeps, in bytes; older frames are dropped and counted.
pub const HANDLE_BUFFER_BYTES_MAX: usize = 1 << 20;
/// Largest frame (one read of a stream).
pub const FRAME_BYTES_MAX: usize = 16 << 10;
/// How long stop_handle waits for a killed tree to be gone.
pub const STOP_KILL_WAIT_MS: u64 = 10_000;
/// How long write_stdin may block on a command that does not read its input.
pub const WRITE_STDIN_TIMEOUT_MS: u64 = 5_000;
/// Lost-handle files kept (the newest).
const LOST_KEPT_MAX: usize = 64;
/// Most entries of a lost handle's layer counted before it is removed.
const LOST_ENTRIES_COUNTED_MAX: u64 = 100_000;

/// Which stream a frame is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
    /// A pty: output and errors together.
    Terminal,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
            Stream::Terminal => "pty",
        }
    }

    fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
            Stream::Terminal => 2,
        }
    }
}

/// One read of an output stream.
#[derive(Debug)]
pub struct Frame {
    seq: u64,
    stream: Stream,
    /// Since the handle started.
    t_ms: u64,
    bytes: Vec<u8>,
}

/// The frames a handle keeps: at most `bytes_max` bytes, the oldest dropped first.
#[derive(Debug)]
pub struct Ring {
    frames: VecDeque<Frame>,
    bytes: usize,
    bytes_max: usize,
    next_seq: u64,
    dropped_frames: u64,
    dropped_bytes: u64,
    totals: [u64; 3],
}

/// What one read of the ring returns.
#[derive(Debug, PartialEq)]
pub struct Window {
    /// The frames, as shown.
    pub frames: Vec<Value>,
    /// The cursor of the next call.
    pub next_cursor: u64,
    /// Frames from the cursor that were dropped before this read.
    pub missed: u64,
    /// Frames kept after `next_cursor` (the byte budget ran out).
    pub more: bool,
}

impl Ring {
    pub fn new(bytes_max: usize) -> Self {
        Ring {
            frames: VecDeque::new(),
            bytes: 0,
            bytes_max,
            next_seq: 0,
            dropped_frames: 0,
            dropped_bytes: 0,
            totals: [0; 3],
        }
    }

    pub fn push(&mut self, stream: Stream, t_ms: u64, bytes: Vec<u8>) {
        self.totals[stream.index()] += bytes.len() as u64;
        while self.bytes + bytes.len() > self.bytes_max {
            let Some(old) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
            self.dropped_frames += 1;
            self.dropped_bytes += old.bytes.len() as u64;
        }
        self.bytes += bytes.len();
        self.frames.push_back(Frame {
            seq: self.next_seq,
            stream,
            t_ms,
            bytes,
        });
        self.next_seq += 1;
        assert!(self.bytes <= self.bytes_max.max(FRAME_BYTES_MAX));
    }

    /// Frames from `cursor` on within `bytes_max` (always at least one when there is one).
    pub fn read(&self, cursor: u64, bytes_max: usize) -> Window {
        let oldest = self.frames.front().map_or(self.next_seq, |frame| frame.seq);
        let start = cursor.max(oldest);
        let mut frames = Vec::new();
        let mut used = 0usize;
        let mut next_cursor = start.min(self.next_seq);
        for frame in self.frames.iter().skip((start - oldest) as usize) {
            if !frames.is_empty() && used + frame.bytes.len() > bytes_max {
                break;
            }
            used += frame.bytes.len();
            frames.push(json!({
                "seq": frame.seq,
                "stream": frame.stream.name(),
                "t_ms": frame.t_ms,
                "text": String::from_utf8_lossy(&frame.bytes),
            }));
            next_cursor = frame.seq + 1;
        }
        Window {
            frames,
            next_cursor,
            missed: start.saturating_sub(cursor),
            more: next_cursor < self.next_seq,
        }
    }

    /// Whether frames from `cursor` on exist.
    fn has_from(&self, cursor: u64) -> bool {
        cursor < self.next_seq
    }

    fn stats(&self) -> BufferStats {
        BufferStats {
            buffer_bytes: self.bytes,
            buffer_bytes_max: self.bytes_max,
            dropped_frames: self.dropped_frames,
            dropped_bytes: self.dropped_bytes,
            stdout_bytes_total: self.totals[0],
            stderr_bytes_total: self.totals[1],
            pty_bytes_total: self.totals[2],
        }
    }
}

/// How a handle's command ended, once it did.
#[derive(Clone, Debug)]
enum End {
    Ended(Ended),
    /// The sandbox lost track of it (its code and message).
    Failed(&'static str, String),
}

#[derive(Debug)]
struct State {
    ring: Ring,
    end: Option<End>,
    readers_open: u8,
    /// stop_handle collected it, and how it stopped.
    stopped: Option<StoppedBy>,
}

/// The part of a handle the output readers and the end callback update.
#[derive(Debug)]
pub struct Cell {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
    started: Instant,
}

impl Cell {
    pub fn new(readers: u8) -> Arc<Self> {
        Arc::new(Cell {
            state: Mutex::new(State {
                ring: Ring::new(HANDLE_BUFFER_BYTES_MAX),
                end: None,
                readers_open: readers,
                stopped: None,
            }),
            changed: tokio::sync::Notify::new(),
            started: Instant::now(),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            // A reader that panicked holding the lock left a consistent ring (push asserts).
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut state)
    }

    /// The end callback for [`aido_sandbox::Sandbox::start`].
    pub fn on_end(self: &Arc<Self>) -> aido_sandbox::OnEnd {
        let cell = Arc::clone(self);
        Box::new(move |end: Result<Ended, SpawnError>| {
            cell.with(|state| {
                state.end = Some(match end {
                    Ok(ended) => End::Ended(ended),
                    Err(error) => End::Failed(error.code(), error.to_string()),
                });
            });
            cell.changed.notify_waiters();
        })
    }

    /// Reads `output` to its ends on threads of their own.
    pub fn read(self: &Arc<Self>, output: Output) {
        let streams: Vec<(Stream, Box<dyn Read + Send>)> = match output {
            Output::Pipes { stdout, stderr } => vec![
                (Stream::Stdout, Box::new(stdout)),
                (Stream::Stderr, Box::new(stderr)),
            ],
            Output::Pty { master } => vec![(Stream::Terminal, Box::new(master))],
        };
        for (stream, mut pipe) in streams {
            let cell = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("aido-handle-{}", stream.name()))
                .spawn(move || {
                    let mut chunk = vec![0u8; FRAME_BYTES_MAX];
                    loop {
                        match pipe.read(&mut chunk) {
                            Ok(0) => break,
                            Ok(count) => {
                                let t_ms = cell.started.elapsed().as_millis() as u64;
                                let bytes = chunk[..count].to_vec();
                                cell.with(|state| state.ring.push(stream, t_ms, bytes));
                                cell.changed.notify_waiters();
                            }
                            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                            // A pty's master reads EIO once the tree is gone.
                            Err(_) => break,
                        }
                    }
                    cell.with(|state| state.readers_open = state.readers_open.saturating_sub(1));
                    cell.changed.notify_waiters();
                });
            if spawned.is_err() {
                self.with(|state| state.readers_open = state.readers_open.saturating_sub(1));
            }
        }
    }

    /// Ended, and every output read to its end.
    fn settled(state: &State) -> bool {
        state.end.is_some() && state.readers_open == 0
    }

    /// Waits until `ready` holds or `until` passes; true when it holds.
    async fn wait(&self, until: Instant, ready: impl Fn(&State) -> bool) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.with(|state| ready(state)) {
                return true;
            }
            let until = tokio::time::Instant::from_std(until);
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return self.with(|state| ready(state));
            }
        }
    }
}

/// One background command.
pub struct Handle {
    pub id: String,
    /// What started it: argv, cwd, pty, the session and proposal.
    pub info: Value,
    control: Arc<Control>,
    cell: Arc<Cell>,
    /// Its overlay layer, taken by stop_handle.
    layers: Mutex<Option<Layers>>,
    /// The record its start was journaled with (the command, its profile).
    pub record: HandleStart,
    /// The roots its layer overlays (its profile's writable roots, as given).
    pub roots: Vec<PathBuf>,
    registry: PathBuf,
    /// Its network namespace, which its session's later commands join while it runs.
    network: Option<aido_sandbox::SharedNetwork>,
}

impl Handle {
    /// Its state, with the connections it tried so far through its egress proxy, if any.
    fn state(&self) -> HandleState {
        let mut out = self.cell.with(|state| state_of(state));
        self.with_egress(&mut out);
        out
    }

    /// Adds `egress` (every attempt through its proxy so far) and `egress_totals` to `out`,
    /// when it has a proxy and `out` does not say them already (an ended command's come with
    /// its end).
    fn with_egress(&self, out: &mut HandleState) {
        if out.egress.is_empty() {
            out.egress = self
                .control
                .egress()
                .iter()
                .map(|record| json!(record))
                .collect();
        }
        if out.egress_totals.is_none() {
            out.egress_totals = self.control.egress_totals().map(|totals| json!(totals));
        }
    }
}

fn state_of(state: &State) -> HandleState {
    let mut out = HandleState {
        state: match (&state.stopped, Cell::settled(state)) {
            (Some(_), _) => HandleStatus::Stopped,
            (None, true) => HandleStatus::Exited,
            (None, false) => HandleStatus::Running,
        },
        end: None,
        egress: Vec::new(),
        egress_totals: None,
        failed: None,
        stopped_by: state.stopped,
        buffer: state.ring.stats(),
    };
    match &state.end {
        Some(End::Ended(ended)) => {
            let (exit_code, signal, timed_out) = match ended.exit {
                Exit::Code(code) => (Some(code), None, false),
                Exit::Signal(signal) => (None, Some(signal), false),
                Exit::TimedOut => (None, None, true),
            };
            out.end = Some(HandleEnd {
                exit_code,
                signal,
                timed_out,
                duration_ms: ended.duration_ms,
            });
            out.egress = ended.egress.iter().map(|record| json!(record)).collect();
            out.egress_totals = ended.egress_totals.as_ref().map(|totals| json!(totals));
        }
        Some(End::Failed(code, message)) => {
            out.failed = Some(HandleFailure {
                code: (*code).to_owned(),
                message: message.clone(),
            });
        }
        None => {}
    }
    out
}

/// Every handle of this aido process, and where their registry files live.
pub struct HandleTable {
    dir: PathBuf,
    handles: Mutex<BTreeMap<u64, Arc<Handle>>>,
}

impl HandleTable {
    /// A table whose registry files live in `dir` (`AIDO_HOME/handles`).
    pub fn new(dir: PathBuf) -> Self {
        HandleTable {
            dir,
            handles: Mutex::new(BTreeMap::new()),
        }
    }

    fn locked<T>(&self, f: impl FnOnce(&mut BTreeMap<u64, Arc<Handle>>) -> T) -> T {
        let mut handles = match self.handles.lock() {
            Ok(handles) => handles,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut handles)
    }

    /// Claims a new id with its registry file (written before anything is spawned, so a
    /// crash in between still leaves a record), refusing past [`HANDLES_MAX`] alive.
    pub fn reserve(&self, info: &Value) -> Result<(String, PathBuf), Failure> {
        let alive = self.locked(|handles| {
            handles
                .values()
                .filter(|handle| handle.cell.with(|state| state.stopped.is_none()))
                .count()
        });
        if alive >= HANDLES_MAX {
            return Err(HandleError::TooMany { max: HANDLES_MAX }.into_failure());
        }
        let io = |error: std::io::Error| HandleError::Registry {
            why: error.to_string(),
        };
        std::fs::create_dir_all(&self.dir).map_err(|error| io(error).into_failure())?;
        let mut number = registry_numbers(&self.dir).into_iter().max().unwrap_or(0);
        let record = json!({
            "owner_pid": std::process::id(),
            "owner_start": process_start(std::process::id()),
            "info": info,
        });
        loop {
            number += 1;
            let id = format!("h{number}");
            let path = self.dir.join(format!("{id}.json"));
            if self.dir.join(format!("{id}.lost.json")).exists() {
                continue;
            }
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path);
            match created {
                Ok(mut file) => {
                    let mut record = record.clone();
                    record["handle"] = json!(id);
                    use std::io::Write;
                    file.write_all(record.to_string().as_bytes())
                        .and_then(|()| file.sync_all())
                        .map_err(|error| io(error).into_failure())?;
                    return Ok((id, path));
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(io(error).into_failure()),
            }
        }
    }

    /// Adds a started handle.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &self,
        id: String,
        registry: PathBuf,
        info: Value,
        (record, roots): (HandleStart, Vec<PathBuf>),
        (control, network): (Arc<Control>, Option<aido_sandbox::SharedNetwork>),
        cell: Arc<Cell>,
        layers: Layers,
    ) {
        let number = handle_number(&id).unwrap_or(u64::MAX);
        let handle = Arc::new(Handle {
            id,
            info,
            control,
            cell,
            layers: Mutex::new(Some(layers)),
            record,
            roots,
            registry,
            network,
        });
        self.locked(|handles| {
            handles.insert(number, handle);
            // Stopped handles beyond the bound go, oldest first.
            let stopped: Vec<u64> = handles
                .iter()
                .filter(|(_, handle)| handle.cell.with(|state| state.stopped.is_some()))
                .map(|(number, _)| *number)
                .collect();
            for number in stopped
                .iter()
                .take(stopped.len().saturating_sub(STOPPED_KEPT_MAX))
            {
                handles.remove(number);
            }
        });
    }

    /// The network namespace the running background commands of `session` share, if any.
    pub fn network_of(&self, session: &str) -> Option<aido_sandbox::SharedNetwork> {
        self.locked(|handles| {
            handles
                .values()
                .filter(|handle| handle.info["session"] == session)
                .filter(|handle| {
                    handle
                        .cell
                        .with(|state| state.end.is_none() && state.stopped.is_none())
                })
                .find_map(|handle| handle.network.clone())
        })
    }

    /// The handle `id`, or why there is none.
    pub fn get(&self, id: &str) -> Result<Arc<Handle>, Failure> {
        let found = handle_number(id).and_then(|number| self.locked(|h| h.get(&number).cloned()));
        if let Some(handle) = found {
            return Ok(handle);
        }
        match std::fs::read(self.dir.join(format!("{id}.lost.json"))) {
            Ok(bytes) if handle_number(id).is_some() => {
                let record: Value = serde_json::from_slice(&bytes).unwrap_or_default();
                Err(HandleError::Lost { handle: id.into() }
                    .into_failure()
                    .with_details(record))
            }
            _ => Err(HandleError::Unknown { handle: id.into() }.into_failure()),
        }
    }

    /// check_handle: frames from the cursor, long-polling until `deadline` at the latest.
    /// `budget` bounds the bytes returned below [`CheckHandle::BYTES_MAX`] (a share of the
    /// journal's record bound: the frames are in the recorded input and in the result).
    pub async fn check(
        &self,
        check: &CheckHandle,
        deadline: Instant,
        budget: usize,
    ) -> Result<Value, Failure> {
        let handle = self.get(&check.handle)?;
        let cursor = check.cursor.unwrap_or(0);
        let bytes_max = check
            .bytes_max
            .unwrap_or(CheckHandle::BYTES_MAX)
            .clamp(1, CheckHandle::BYTES_MAX.min(budget).max(1));
        let wait_ms = check.wait_ms.unwrap_or(0).min(CheckHandle::WAIT_MS_MAX);
        // Answer a little before the call's own deadline.
        let until = (Instant::now() + Duration::from_millis(wait_ms)).min(
            deadline
                .checked_sub(Duration::from_millis(250))
                .unwrap_or(deadline),
        );
        if wait_ms > 0 {
            handle
                .cell
                .wait(until, |state| {
                    state.ring.has_from(cursor) || Cell::settled(state)
                })
                .await;
        }
        let (window, mut state) = handle
            .cell
            .with(|state| (state.ring.read(cursor, bytes_max), state_of(state)));
        handle.with_egress(&mut state);
        let answer = {
            let mut out = record::to_value(&state);
            out["handle"] = json!(handle.id);
            out["cursor"] = json!(cursor);
            out["frames"] = json!(window.frames);
            out["next_cursor"] = json!(window.next_cursor);
            out["missed_frames"] = json!(window.missed);
            out["more"] = json!(window.more);
            out
        };
        Ok(answer)
    }

    /// write_stdin.
    pub async fn write(&self, write: &WriteStdin) -> Result<Value, Failure> {
        let handle = self.get(&write.handle)?;
        if write.text.len() > WriteStdin::TEXT_BYTES_MAX {
            return Err(super::ProcessError::InvalidCommand {
                why: format!("text is over {} bytes", WriteStdin::TEXT_BYTES_MAX),
            }
            .into_failure());
        }
        if handle.cell.with(|state| state.end.is_some()) {
            return Err(HandleError::Ended {
                handle: handle.id.clone(),
            }
            .into_failure());
        }
        let control = Arc::clone(&handle.control);
        let (text, close) = (write.text.clone().into_bytes(), write.close);
        let written = tokio::task::spawn_blocking(move || {
            if !text.is_empty() {
                control.write_stdin(&text)?;
            }
            if close {
                control.close_stdin()?;
            }
            Ok::<_, std::io::Error>(text.len())
        });
        let blocked = || {
            HandleError::StdinBlocked {
                handle: handle.id.clone(),
                waited_ms: WRITE_STDIN_TIMEOUT_MS,
            }
            .into_failure()
        };
        match tokio::time::timeout(Duration::from_millis(WRITE_STDIN_TIMEOUT_MS), written).await {
            Ok(Ok(Ok(bytes))) => Ok(json!({
                "handle": handle.id,
                "bytes_written": bytes,
                "closed": close,
            })),
            Ok(Ok(Err(_))) | Ok(Err(_)) => Err(HandleError::Ended {
                handle: handle.id.clone(),
            }
            .into_failure()),
            Err(_) => Err(blocked()),
        }
    }

    /// stop_handle's first half: TERM, KILL after `grace_ms`, until the tree is gone; then the
    /// handle is marked stopped and its registry file removed. Returns the handle, how it was
    /// stopped, its final state and its layer (none when an earlier stop took it).
    pub async fn stop(
        &self,
        id: &str,
        grace_ms: u64,
    ) -> Result<(Arc<Handle>, HandleState, Option<Layers>), Failure> {
        let handle = self.get(id)?;
        let settled = |state: &State| Cell::settled(state);
        let how = if handle.cell.with(|state| settled(state)) {
            StoppedBy::AlreadyEnded
        } else {
            let _ = handle.control.terminate();
            let grace = Instant::now() + Duration::from_millis(grace_ms);
            if handle.cell.wait(grace, settled).await {
                StoppedBy::Term
            } else {
                handle.control.kill();
                let gone = Instant::now() + Duration::from_millis(STOP_KILL_WAIT_MS);
                if !handle.cell.wait(gone, settled).await {
                    return Err(HandleError::StopFailed {
                        handle: handle.id.clone(),
                        waited_ms: grace_ms + STOP_KILL_WAIT_MS,
                    }
                    .into_failure());
                }
                StoppedBy::Kill
            }
        };
        let state = handle.cell.with(|state| {
            if state.stopped.is_none() {
                state.stopped = Some(how);
            }
            state_of(state)
        });
        let _ = std::fs::remove_file(&handle.registry);
        let layers = match handle.layers.lock() {
            Ok(mut layers) => layers.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        Ok((handle, state, layers))
    }

    /// list_processes: each handle's command with its host pids (the sandbox's init and, while
    /// it runs, the command: init's first child), argv, state and start time.
    pub fn processes(&self) -> Vec<Value> {
        self.locked(|handles| {
            handles
                .values()
                .map(|handle| {
                    let state = handle.state();
                    let init = handle.control.init_pid();
                    let running = state.state == HandleStatus::Running;
                    let pid = init.filter(|_| running).and_then(first_child);
                    json!({
                        "handle": handle.id,
                        "pid": pid,
                        "sandbox_pid": init.filter(|_| running),
                        "argv": handle.info["argv"],
                        "cwd": handle.info["cwd"],
                        "state": state.state,
                        "exit_code": state.end.and_then(|end| end.exit_code),
                        "started_unix_ms": handle.info["started_unix_ms"],
                        "session": handle.info["session"],
                        "proposal": handle.info["proposal"],
                    })
                })
                .collect()
        })
    }

    /// list_handles: this process's handles and the lost ones on record.
    pub fn list(&self) -> Value {
        let handles: Vec<Value> = self.locked(|handles| {
            handles
                .values()
                .map(|handle| {
                    let mut out = record::to_value(&handle.state());
                    out["handle"] = json!(handle.id);
                    out["argv"] = handle.info["argv"].clone();
                    out["cwd"] = handle.info["cwd"].clone();
                    out["pty"] = handle.info["pty"].clone();
                    out
                })
                .collect()
        });
        let mut lost: Vec<(u64, Value)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let number = handle_number(name.strip_suffix(".lost.json")?)?;
                let record: Value =
                    serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
                Some((
                    number,
                    json!({
                        "handle": record["handle"],
                        "state": "lost",
                        "argv": record["info"]["argv"],
                        "cwd": record["info"]["cwd"],
                        "changes_discarded": record["changes_discarded"],
                    }),
                ))
            })
            .collect();
        lost.sort_by_key(|(number, _)| *number);
        json!({
            "handles": handles,
            "lost": lost.into_iter().map(|(_, record)| record).collect::<Vec<_>>(),
        })
    }
}

/// The first child of `pid` (`/proc/PID/task/PID/children`).
fn first_child(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// `h12` → 12.
fn handle_number(id: &str) -> Option<u64> {
    let digits = id.strip_prefix('h')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The numbers of every registry file, live or lost.
fn registry_numbers(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name
                .strip_suffix(".lost.json")
                .or_else(|| name.strip_suffix(".json"))?;
            handle_number(stem)
        })
        .collect()
}

/// A process's start time (clock ticks since boot, field 22 of `/proc/PID/stat`): with its
/// pid, it names one process for good (a pid alone is reused).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after its last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    rest.split(' ').nth(19)?.parse().ok()
}

/// A handle another aido process left behind when it ended.
#[derive(Debug)]
pub struct LostHandle {
    /// Its id.
    pub handle: String,
    /// The session that started it (32 hex digits), and the start's proposal seq.
    pub session: String,
    /// The proposal that started it.
    pub proposal: u64,
    /// Its command line.
    pub argv: Vec<String>,
    /// Entries its layer held, never applied.
    pub changes_discarded: u64,
}

/// At start-up: every registry file in `dir` whose owner process is gone becomes a lost
/// handle (its layer removed, its file renamed `.lost.json` with what was discarded). Files
/// of another aido process still running are left alone.
pub fn recover_lost(dir: &Path, now_ms: u64) -> Vec<LostHandle> {
    let mut lost = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return lost;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".lost.json") {
            continue;
        }
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if handle_number(id).is_none() {
            continue;
        }
        let path = entry.path();
        let Ok(mut record) = std::fs::read(&path)
            .map_err(drop)
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).map_err(drop))
        else {
            continue;
        };
        let owner = record["owner_pid"].as_u64().unwrap_or(0) as u32;
        // The same pid with the same start time is the same process, still running (another
        // aido on this home, or another runtime of this one).
        let alive = owner != 0
            && process_start(owner).is_some()
            && process_start(owner) == record["owner_start"].as_u64();
        if alive {
            continue;
        }
        let layers = record["info"]["layers_dir"].as_str().map(PathBuf::from);
        let discarded = layers.as_deref().map_or(0, count_layer_entries);
        if let Some(layers) = &layers {
            super::dry::remove(layers);
        }
        record["handle"] = json!(id);
        record["changes_discarded"] = json!(discarded);
        record["lost_at_ms"] = json!(now_ms);
        let kept = std::fs::write(dir.join(format!("{id}.lost.json")), record.to_string());
        if kept.is_ok() {
            let _ = std::fs::remove_file(&path);
        }
        lost.push(LostHandle {
            handle: id.to_owned(),
            session: record["info"]["session"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            proposal: record["info"]["proposal"].as_u64().unwrap_or(0),
            argv: serde_json::from_value(record["info"]["argv"].clone()).unwrap_or_default(),
            changes_discarded: discarded,
        });
    }
    // Only the newest lost files are kept.
    let mut numbers: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            handle_number(name.strip_suffix(".lost.json")?)
        })
        .collect();
    numbers.sort_unstable();
    for number in numbers
        .iter()
        .take(numbers.len().saturating_sub(LOST_KEPT_MAX))
    {
        let _ = std::fs::remove_file(dir.join(format!("h{number}.lost.json")));
    }
    lost.sort_by_key(|lost| handle_number(&lost.handle));
    lost
}

/// Entries in the upper directories of a layer (what its command changed), up to a bound.
fn count_layer_entries(layers: &Path) -> u64 {
    fn visit(dir: &Path, count: &mut u64) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if *count >= LOST_ENTRIES_COUNTED_MAX {
                return;
            }
            *count += 1;
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                visit(&entry.path(), count);
            }
        }
    }
    let mut count = 0;
    if let Ok(roots) = std::fs::read_dir(layers) {
        for root in roots.flatten() {
            visit(&root.path().join("upper"), &mut count);
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_its_bound_and_counts_what_it_dropped() {
        let mut ring = Ring::new(100);
        for index in 0..50u8 {
            ring.push(Stream::Stdout, 0, vec![index; 10]);
        }
        assert_eq!(ring.bytes, 100);
        assert_eq!(ring.frames.len(), 10);
        assert_eq!(ring.dropped_frames, 40);
        assert_eq!(ring.dropped_bytes, 400);
        assert_eq!(ring.totals[0], 500);
        // A cursor before the oldest kept frame is told how many it missed.
        let window = ring.read(5, 1000);
        assert_eq!(window.missed, 35);
        assert_eq!(window.frames.len(), 10);
        assert_eq!(window.frames[0]["seq"], 40);
        assert_eq!(window.next_cursor, 50);
        assert!(!window.more);
        // A budget returns whole frames, at least one, and says more remain.
        let window = ring.read(42, 25);
        assert_eq!(window.frames.len(), 2);
        assert_eq!(window.next_cursor, 44);
        assert!(window.more);
        let window = ring.read(42, 1);
        assert_eq!(window.frames.len(), 1);
        // At the end: nothing, and the cursor stays.
        let window = ring.read(50, 1000);
        assert!(window.frames.is_empty());
        assert_eq!(window.next_cursor, 50);
        assert_eq!(window.missed, 0);
        let window = ring.read(70, 1000);
        assert!(window.frames.is_empty());
        assert_eq!(window.next_cursor, 50);
    }

    #[test]
    fn a_handle_id_is_h_and_digits() {
        assert_eq!(handle_number("h12"), Some(12));
        for bad in ["h", "12", "h1x", "../h1", "h-1"] {
            assert_eq!(handle_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_registry_file_of_a_dead_owner_is_lost_and_its_layer_removed() {
        let dir = tempfile::tempdir().unwrap();
        let layers = dir.path().join("layer");
        std::fs::create_dir_all(layers.join("0/upper/sub")).unwrap();
        std::fs::write(layers.join("0/upper/sub/new.txt"), "x").unwrap();
        let handles = dir.path().join("handles");
        std::fs::create_dir_all(&handles).unwrap();
        let record = json!({
            "owner_pid": u32::MAX - 1, "owner_start": 1, "handle": "h3",
            "info": {"argv": ["sleep", "9"], "session": "ab", "proposal": 7,
                     "layers_dir": layers},
        });
        std::fs::write(handles.join("h3.json"), record.to_string()).unwrap();
        // A file of a process still running is not lost.
        let mine = json!({"owner_pid": std::process::id(),
                          "owner_start": process_start(std::process::id()),
                          "info": {}});
        std::fs::write(handles.join("h4.json"), mine.to_string()).unwrap();
        let lost = recover_lost(&handles, 5);
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert!(handles.join("h4.json").exists());
        let three = lost.iter().find(|l| l.handle == "h3").unwrap();
        assert_eq!(three.argv, ["sleep", "9"]);
        assert_eq!(three.proposal, 7);
        assert_eq!(three.changes_discarded, 2);
        assert!(!layers.exists());
        assert!(handles.join("h3.lost.json").exists());
        assert!(!handles.join("h3.json").exists());
        let table = HandleTable::new(handles);
        let failure = table.get("h3").err().unwrap();
        assert_eq!(failure.code, "handle_lost");
        assert_eq!(table.get("h9").err().unwrap().code, "handle_unknown");
        assert_eq!(table.list()["lost"][0]["handle"], "h3");
    }
}
