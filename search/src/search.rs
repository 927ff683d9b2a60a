//! `search_code`: the judged walk, then the files searched in path order by a few threads.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkFinish,
    SinkMatch,
};
use regex::bytes::RegexSet;

use crate::error::SearchError;
use crate::judge::Judge;
use crate::pattern::{self, Patterns};
use crate::request::{Limits, OutputMode, SearchRequest};
use crate::result::{
    ContextLine, FileCount, FileHits, Hit, Output, SearchResult, Skipped, Truncation,
};
use crate::walk;

/// Searches `request.scope` for the patterns, judging every entry before it is opened.
///
/// The deadline is `limits.timeout_ms` from now; see [`search_code_until`] to pass one that
/// travels with the request.
pub fn search_code(
    request: &SearchRequest,
    limits: &Limits,
    judge: &dyn Judge,
) -> Result<SearchResult, SearchError> {
    let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
    search_code_until(request, limits, judge, deadline)
}

/// [`search_code`] with the earlier of `deadline` and `limits.timeout_ms` from now.
///
/// The result is deterministic for a given tree unless it says `Truncation::Timeout`: the
/// walk keeps the first `files_max` paths in order, files are searched in path order and a
/// limit cuts the first hits in (path, line) order, whatever the threads did.
pub fn search_code_until(
    request: &SearchRequest,
    limits: &Limits,
    judge: &dyn Judge,
    deadline: Instant,
) -> Result<SearchResult, SearchError> {
    let deadline = deadline.min(Instant::now() + Duration::from_millis(limits.timeout_ms));
    for lines in [request.context_before, request.context_after] {
        if lines > limits.context_lines_max {
            return Err(SearchError::ContextTooLarge {
                lines,
                max: limits.context_lines_max,
            });
        }
    }
    let patterns = pattern::compile(request, limits)?;
    let walked = walk::walk(&request.scope, limits, judge, deadline)?;
    let limit = match request.mode {
        OutputMode::Content => limits.hits_max,
        OutputMode::FilesWithMatches | OutputMode::Count => limits.matched_files_max,
    };
    let limit = request.limit.map_or(limit, |asked| asked.min(limit));
    let plan = Plan {
        request,
        limits,
        patterns: &patterns,
        limit,
        deadline,
    };
    let searched = plan.search(&walked.files);

    let mut skipped = Skipped {
        denied_files: walked.denied_files,
        denied_dirs: walked.denied_dirs,
        symlinks: walked.symlinks,
        unreadable: walked.unreadable,
        ..Skipped::default()
    };
    let mut files_searched = 0;
    let mut taken = 0u64;
    let mut cut = false;
    let mut paths = Vec::new();
    let mut contents = Vec::new();
    let mut counts = Vec::new();
    for (path, outcome) in walked.files.iter().zip(&searched.outcomes) {
        let Some(outcome) = outcome else { break };
        match outcome {
            Outcome::Binary => skipped.binary += 1,
            Outcome::TooLarge => skipped.too_large += 1,
            Outcome::Unreadable => skipped.unreadable += 1,
            Outcome::Searched { .. } => {}
        }
        files_searched += u64::from(!matches!(outcome, Outcome::TooLarge | Outcome::Unreadable));
        let Outcome::Searched { hits, count } = outcome else {
            continue;
        };
        if *count == 0 {
            continue;
        }
        let relative = relative(&request.scope.root, path);
        match request.mode {
            OutputMode::Content => {
                let room = usize::try_from(limit - taken).unwrap_or(usize::MAX);
                let kept: Vec<Hit> = hits.iter().take(room).cloned().collect();
                taken += kept.len() as u64;
                cut = (kept.len() as u64) < *count;
                if !kept.is_empty() {
                    contents.push(FileHits {
                        path: relative,
                        hits: kept,
                    });
                }
            }
            OutputMode::FilesWithMatches | OutputMode::Count => {
                if taken == limit {
                    cut = true;
                } else {
                    taken += 1;
                    paths.push(relative.clone());
                    counts.push(FileCount {
                        path: relative,
                        count: *count,
                    });
                }
            }
        }
        if cut {
            break;
        }
    }
    let truncation = if searched.timed_out || walked.timed_out {
        Some(Truncation::Timeout)
    } else if cut {
        Some(Truncation::Limit)
    } else if walked.files_max_reached {
        Some(Truncation::FilesMax)
    } else {
        None
    };
    let output = match request.mode {
        OutputMode::FilesWithMatches => Output::FilesWithMatches { files: paths },
        OutputMode::Content => Output::Content { files: contents },
        OutputMode::Count => Output::Count { files: counts },
    };
    Ok(SearchResult {
        output,
        truncated: truncation.is_some(),
        truncation,
        files_searched,
        skipped,
    })
}

/// The path relative to the root with `/` separators; a file root is shown by its name.
pub(crate) fn relative(root: &Path, path: &Path) -> String {
    let shown = match path.strip_prefix(root) {
        Ok(rest) if !rest.as_os_str().is_empty() => rest,
        _ => path.file_name().map_or(path, Path::new),
    };
    let parts: Vec<_> = shown
        .components()
        .map(|part| part.as_os_str().to_string_lossy())
        .collect();
    parts.join("/")
}

/// Opens a file that the judge allowed: never through a symbolic link (`O_NOFOLLOW`), never
/// blocking on a FIFO swapped in after the walk (`O_NONBLOCK`), and only a regular file no
/// larger than `file_bytes_max`.
pub(crate) fn open_judged(path: &Path, file_bytes_max: u64) -> Result<File, Outcome> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| Outcome::Unreadable)?;
    let metadata = file.metadata().map_err(|_| Outcome::Unreadable)?;
    if !metadata.is_file() {
        return Err(Outcome::Unreadable);
    }
    if metadata.len() > file_bytes_max {
        return Err(Outcome::TooLarge);
    }
    Ok(file)
}

/// What searching one file gave.
pub(crate) enum Outcome {
    /// `count` hits, the first of which (up to the limit plus one) are in `hits` in content mode.
    Searched {
        hits: Vec<Hit>,
        count: u64,
    },
    Binary,
    TooLarge,
    Unreadable,
}

struct Plan<'a> {
    request: &'a SearchRequest,
    limits: &'a Limits,
    patterns: &'a Patterns,
    limit: u64,
    deadline: Instant,
}

struct Searched {
    /// One slot per walked file, in path order; `None` from the first file not searched.
    outcomes: Vec<Option<Outcome>>,
    timed_out: bool,
}

/// The prefix of files whose outcomes are all known, and where the search may stop.
struct Progress {
    outcomes: Vec<Option<Outcome>>,
    /// Slots `..known` are all filled.
    known: usize,
    /// Hits (content) or matched files (other modes) in slots `..known`.
    total: u64,
}

impl Plan<'_> {
    fn search(&self, files: &[PathBuf]) -> Searched {
        let next = AtomicUsize::new(0);
        // Workers take no slot past `stop`: the files there cannot appear in the result.
        let stop = AtomicUsize::new(files.len());
        let timed_out = AtomicBool::new(false);
        let progress = Mutex::new(Progress {
            outcomes: (0..files.len()).map(|_| None).collect(),
            known: 0,
            total: 0,
        });
        std::thread::scope(|scope| {
            for _ in 0..self.limits.threads.max(1) {
                scope.spawn(|| {
                    let mut searcher = self.searcher();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= files.len() || index > stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if Instant::now() >= self.deadline {
                            timed_out.store(true, Ordering::Relaxed);
                            stop.fetch_min(index, Ordering::Relaxed);
                            break;
                        }
                        let outcome = self.search_file(&mut searcher, &files[index], &timed_out);
                        if timed_out.load(Ordering::Relaxed) {
                            // A file cut by the deadline is not reported half-searched.
                            stop.fetch_min(index, Ordering::Relaxed);
                            break;
                        }
                        self.record(&progress, &stop, index, outcome);
                    }
                });
            }
        });
        let progress = match progress.into_inner() {
            Ok(progress) => progress,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut outcomes = progress.outcomes;
        // Keep only the gap-free prefix: what a worker happened to search beyond a gap
        // (a timeout) would make the result depend on thread timing.
        let known = progress.known;
        for slot in outcomes.iter_mut().skip(known) {
            *slot = None;
        }
        Searched {
            outcomes,
            timed_out: timed_out.load(Ordering::Relaxed),
        }
    }

    /// How much of the limit one outcome uses.
    fn units(&self, outcome: Option<&Outcome>) -> u64 {
        match outcome {
            Some(Outcome::Searched { count, .. }) => match self.request.mode {
                OutputMode::Content => *count,
                OutputMode::FilesWithMatches | OutputMode::Count => u64::from(*count > 0),
            },
            _ => 0,
        }
    }

    fn record(
        &self,
        progress: &Mutex<Progress>,
        stop: &AtomicUsize,
        index: usize,
        outcome: Outcome,
    ) {
        let mut progress = match progress.lock() {
            Ok(progress) => progress,
            Err(poisoned) => poisoned.into_inner(),
        };
        progress.outcomes[index] = Some(outcome);
        while progress.known < progress.outcomes.len()
            && progress.outcomes[progress.known].is_some()
        {
            let units = self.units(progress.outcomes[progress.known].as_ref());
            progress.total += units;
            if progress.total > self.limit {
                // The limit is passed, so the result is cut within this file and no later
                // file can appear in it: the search stops here.
                stop.fetch_min(progress.known, Ordering::Relaxed);
            }
            progress.known += 1;
        }
    }

    fn searcher(&self) -> Searcher {
        let content = self.request.mode == OutputMode::Content;
        SearcherBuilder::new()
            .line_number(true)
            .multi_line(self.request.multiline)
            .before_context(if content {
                self.request.context_before as usize
            } else {
                0
            })
            .after_context(if content {
                self.request.context_after as usize
            } else {
                0
            })
            .binary_detection(BinaryDetection::quit(b'\x00'))
            // The file is at most `file_bytes_max`, so this bounds the buffer without ever
            // refusing a file that passed the size check.
            .heap_limit(
                usize::try_from(self.limits.file_bytes_max)
                    .ok()
                    .map(|bytes| bytes.saturating_add(1 << 16)),
            )
            .build()
    }

    fn search_file(&self, searcher: &mut Searcher, path: &Path, timed_out: &AtomicBool) -> Outcome {
        let file = match open_judged(path, self.limits.file_bytes_max) {
            Ok(file) => file,
            Err(outcome) => return outcome,
        };
        let mut sink = Collect {
            set: &self.patterns.set,
            mode: self.request.mode,
            cap: self.limit.saturating_add(1),
            line_bytes_max: self.limits.line_bytes_max,
            deadline: self.deadline,
            hits: Vec::new(),
            count: 0,
            before: Vec::new(),
            binary: false,
            timed_out: false,
        };
        let searched = searcher.search_file(&self.patterns.matcher, &file, &mut sink);
        if sink.timed_out {
            timed_out.store(true, Ordering::Relaxed);
        }
        match searched {
            _ if sink.binary => Outcome::Binary,
            Ok(()) => Outcome::Searched {
                hits: sink.hits,
                count: sink.count,
            },
            Err(_) => Outcome::Unreadable,
        }
    }
}

/// Collects one file's hits.
struct Collect<'a> {
    set: &'a RegexSet,
    mode: OutputMode,
    /// Hits kept in content mode: the limit plus one, to know whether it was passed.
    cap: u64,
    line_bytes_max: usize,
    deadline: Instant,
    hits: Vec<Hit>,
    count: u64,
    /// Context lines waiting for the hit they come before.
    before: Vec<ContextLine>,
    binary: bool,
    timed_out: bool,
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if Instant::now() >= self.deadline {
            self.timed_out = true;
            return Ok(false);
        }
        self.count += 1;
        match self.mode {
            OutputMode::FilesWithMatches => Ok(false),
            OutputMode::Count => Ok(true),
            OutputMode::Content => {
                let (text, text_truncated) = line_text(found.bytes(), self.line_bytes_max);
                self.hits.push(Hit {
                    line: found.line_number().unwrap_or(0),
                    text,
                    text_truncated,
                    patterns: self.set.matches(found.bytes()).into_iter().collect(),
                    before: std::mem::take(&mut self.before),
                    after: Vec::new(),
                });
                Ok(self.count < self.cap)
            }
        }
    }

    fn context(
        &mut self,
        _searcher: &Searcher,
        context: &SinkContext<'_>,
    ) -> Result<bool, io::Error> {
        let (text, text_truncated) = line_text(context.bytes(), self.line_bytes_max);
        let line = ContextLine {
            line: context.line_number().unwrap_or(0),
            text,
            text_truncated,
        };
        match context.kind() {
            SinkContextKind::Before => self.before.push(line),
            SinkContextKind::After => {
                if let Some(hit) = self.hits.last_mut() {
                    hit.after.push(line);
                }
            }
            SinkContextKind::Other => {}
        }
        Ok(true)
    }

    fn binary_data(&mut self, _searcher: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }

    fn finish(&mut self, _searcher: &Searcher, finish: &SinkFinish) -> Result<(), io::Error> {
        self.binary |= finish.binary_byte_offset().is_some();
        Ok(())
    }
}

/// The matched bytes as text without the line terminator, cut at a character boundary.
pub(crate) fn line_text(bytes: &[u8], bytes_max: usize) -> (String, bool) {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= bytes_max {
        return (text.into_owned(), false);
    }
    let mut end = bytes_max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}
