//! `search_code`: each walker thread searches the files it judged; the outcomes are put back
//! in path order and cut at the limit.

use std::collections::BTreeMap;
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

use crate::error::SearchError;
use crate::judge::Judge;
use crate::pattern::{self, Patterns};
use crate::request::{Limits, OutputMode, SearchRequest};
use crate::result::{
    ContextLine, FileCount, FileHits, Hit, Output, SearchResult, Skipped, Truncation,
};
use crate::walk::{self, Found, SortKey, Walked};

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
/// walk keeps the first `files_max` paths in order and a limit cuts the first hits in
/// (path, line) order, whatever order the threads searched the files in.
#[allow(clippy::too_many_lines)]
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
    let limit = match request.mode {
        OutputMode::Content => limits.hits_max,
        OutputMode::FilesWithMatches | OutputMode::Count => limits.matched_files_max,
    };
    let limit = request.limit.map_or(limit, |asked| asked.min(limit));
    let plan = Plan {
        request,
        judge,
        limits,
        patterns: &patterns,
        limit,
        deadline,
    };
    let (walked, searched) = plan.walk_and_search(judge)?;

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
    let budget = request.bytes_max.map_or(limits.result_bytes_max, |asked| {
        asked.min(limits.result_bytes_max)
    });
    let mut used = 0u64;
    let mut over_budget = false;
    let mut paths = Vec::new();
    let mut contents = Vec::new();
    let mut counts = Vec::new();
    for (path, outcome) in walked.files.iter().zip(searched.outcomes) {
        let Some(outcome) = outcome else { break };
        match &outcome {
            Outcome::Binary => skipped.binary += 1,
            Outcome::TooLarge => skipped.too_large += 1,
            Outcome::Unreadable => skipped.unreadable += 1,
            Outcome::Denied => skipped.denied_files += 1,
            Outcome::Searched { .. } => {}
        }
        files_searched += u64::from(!matches!(
            outcome,
            Outcome::TooLarge | Outcome::Unreadable | Outcome::Denied
        ));
        let Outcome::Searched { mut hits, count } = outcome else {
            continue;
        };
        if count == 0 {
            continue;
        }
        let relative = relative(&request.scope.root, path);
        let path_cost = relative.len() as u64 + FRAME_BYTES;
        if used + path_cost > budget {
            over_budget = true;
            break;
        }
        match request.mode {
            OutputMode::Content => {
                let room = usize::try_from(limit - taken).unwrap_or(usize::MAX);
                hits.truncate(room);
                used += path_cost;
                let fits = hits
                    .iter()
                    .take_while(|hit| {
                        let cost = hit_bytes(hit);
                        if used + cost > budget {
                            return false;
                        }
                        used += cost;
                        true
                    })
                    .count();
                if fits < hits.len() {
                    hits.truncate(fits);
                    over_budget = true;
                }
                taken += hits.len() as u64;
                cut = over_budget || (hits.len() as u64) < count;
                if !hits.is_empty() {
                    contents.push(FileHits {
                        path: relative,
                        hits,
                    });
                }
            }
            OutputMode::FilesWithMatches | OutputMode::Count => {
                if taken == limit {
                    cut = true;
                } else {
                    taken += 1;
                    used += path_cost;
                    if request.mode == OutputMode::Count {
                        counts.push(FileCount {
                            path: relative,
                            count,
                        });
                    } else {
                        paths.push(relative);
                    }
                }
            }
        }
        if cut {
            break;
        }
    }
    let truncation = if searched.timed_out || walked.timed_out {
        Some(Truncation::Timeout)
    } else if over_budget {
        Some(Truncation::Budget)
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

/// What a result's framing (field names, numbers, separators) costs per path or line, in
/// the byte budget.
const FRAME_BYTES: u64 = 32;

/// A hit's bytes in the budget: its text and its context lines, each with its framing.
fn hit_bytes(hit: &Hit) -> u64 {
    let context: u64 = hit
        .before
        .iter()
        .chain(&hit.after)
        .map(|line| line.text.len() as u64 + FRAME_BYTES)
        .sum();
    hit.text.len() as u64 + FRAME_BYTES + context
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
pub(crate) fn open_judged(
    path: &Path,
    file_bytes_max: u64,
    judge: &dyn Judge,
) -> Result<File, Outcome> {
    let file = match judge.open(path) {
        Some(crate::judge::Opened::File(file)) => file,
        Some(crate::judge::Opened::Denied) => return Err(Outcome::Denied),
        Some(crate::judge::Opened::Unreadable) => return Err(Outcome::Unreadable),
        None => {
            let file = File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
                .map_err(|_| Outcome::Unreadable)?;
            if judge.opened(path, &file) == crate::judge::Verdict::Deny {
                return Err(Outcome::Denied);
            }
            file
        }
    };
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
    /// The judge refused the file it saw opened (`Judge::opened`): closed unread.
    Denied,
}

struct Plan<'a> {
    request: &'a SearchRequest,
    judge: &'a dyn Judge,
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

/// Files searched beside the walk, by path; whatever lies past the limit's cut is dropped.
#[derive(Default)]
struct Collected {
    outcomes: BTreeMap<SortKey, Outcome>,
    /// Units (see `Plan::units`) in `outcomes`.
    total: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Plan<'_> {
    /// Walks and searches at once, as rg does: each walker thread searches the files it
    /// finds, right after the judge allowed them. Files arrive in no particular order, so
    /// outcomes are kept by path and the tail past the limit's cut is dropped (and not
    /// searched once known to be past it): the result is the same as searching in path order.
    ///
    /// When the walk finds more than `files_max` files, what was searched beside it may
    /// include files the walk later drops, so the kept files are searched again in order.
    fn walk_and_search(&self, judge: &dyn Judge) -> Result<(Walked, Searched), SearchError> {
        let collected = Mutex::new(Collected::default());
        let cut = AtomicBool::new(false);
        let timed_out = AtomicBool::new(false);
        let found = || -> Found<'_> {
            let mut searcher = self.searcher();
            let (collected, cut, timed_out) = (&collected, &cut, &timed_out);
            Box::new(move |path: &Path| {
                self.search_found(&mut searcher, path, collected, cut, timed_out)
            })
        };
        let walked = walk::walk(
            &self.request.scope,
            self.limits,
            judge,
            self.deadline,
            &found,
        )?;
        if walked.files_max_reached {
            let searched = self.search(&walked.files);
            return Ok((walked, searched));
        }
        // Both are in path order: a walked file missing from `collected` was searched and had
        // no hit (or lies past the cut, where the result never looks).
        let collected = collected
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut kept = collected.outcomes.into_iter().peekable();
        let outcomes = walked
            .files
            .iter()
            .map(|path| match kept.next_if(|(key, _)| key.0 == *path) {
                Some((_, outcome)) => Some(outcome),
                None => Some(Outcome::Searched {
                    hits: Vec::new(),
                    count: 0,
                }),
            })
            .collect();
        let timed_out = timed_out.load(Ordering::Relaxed);
        Ok((
            walked,
            Searched {
                outcomes,
                timed_out,
            },
        ))
    }

    /// Searches one file in the walker thread that found it, unless it lies past the cut;
    /// keeps the outcome unless it is a file without hits (most files: no lock for those).
    fn search_found(
        &self,
        searcher: &mut Searcher,
        path: &Path,
        collected: &Mutex<Collected>,
        cut: &AtomicBool,
        timed_out: &AtomicBool,
    ) {
        if timed_out.load(Ordering::Relaxed) {
            return;
        }
        if Instant::now() >= self.deadline {
            timed_out.store(true, Ordering::Relaxed);
            return;
        }
        if cut.load(Ordering::Relaxed) {
            let collected = lock(collected);
            let last = collected.outcomes.last_key_value();
            if last.is_some_and(|(last, _)| walk::path_order(path, &last.0).is_gt()) {
                return;
            }
        }
        let outcome = self.search_file(searcher, path, timed_out);
        if timed_out.load(Ordering::Relaxed)
            || matches!(outcome, Outcome::Searched { count: 0, .. })
        {
            return;
        }
        let units = self.units(Some(&outcome));
        let mut collected = lock(collected);
        collected
            .outcomes
            .insert(SortKey(path.to_path_buf()), outcome);
        collected.total += units;
        // Drop the last file while the files before it already pass the limit.
        while let Some((_, last)) = collected.outcomes.last_key_value() {
            let last = self.units(Some(last));
            if collected.total - last <= self.limit {
                break;
            }
            collected.outcomes.pop_last();
            collected.total -= last;
        }
        if collected.total > self.limit {
            cut.store(true, Ordering::Relaxed);
        }
    }

    /// Searches `files` in path order (used when the walk kept only the first `files_max`).
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
            // Counting lines is a pass over every byte: only content results show them.
            .line_number(content)
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
        let file = match open_judged(path, self.limits.file_bytes_max, self.judge) {
            Ok(file) => file,
            Err(outcome) => return outcome,
        };
        let mut sink = Collect {
            patterns: self.patterns,
            mode: self.request.mode,
            multiline: self.request.multiline,
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
    patterns: &'a Patterns,
    mode: OutputMode,
    multiline: bool,
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
        // The clock is read every 256 hits: a file is bounded by `file_bytes_max` and the
        // regex is linear, so this only bounds files with very many hits.
        if self.count % 256 == 255 && Instant::now() >= self.deadline {
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
                    patterns: self.patterns.which(self.attributed(found.bytes())),
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

impl Collect<'_> {
    /// The bytes the patterns run on: without the terminator of a single line, which the matcher
    /// never sees either (`a\s` must not match `"xa\n"` through its newline).
    fn attributed<'b>(&self, bytes: &'b [u8]) -> &'b [u8] {
        if self.multiline {
            bytes
        } else {
            bytes.strip_suffix(b"\n").unwrap_or(bytes)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::{AllowAll, EntryKind, Verdict};
    use crate::request::Case;
    use std::fs;
    use std::sync::Mutex;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in files {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, text).expect("write");
        }
        dir
    }

    fn content(result: &SearchResult) -> Vec<(String, u64, Vec<usize>)> {
        let Output::Content { files } = &result.output else {
            panic!("not content: {result:?}")
        };
        files
            .iter()
            .flat_map(|file| {
                file.hits
                    .iter()
                    .map(|hit| (file.path.clone(), hit.line, hit.patterns.clone()))
            })
            .collect()
    }

    fn files(result: &SearchResult) -> Vec<String> {
        match &result.output {
            Output::FilesWithMatches { files } => files.clone(),
            other => panic!("not files: {other:?}"),
        }
    }

    #[test]
    fn content_hits_say_which_patterns_matched_in_path_then_line_order() {
        let dir = tree(&[
            ("b.rs", "alpha\nnothing\nalpha beta\n"),
            ("a/z.rs", "beta\n"),
            ("a.rs", "gamma\n"),
        ]);
        let mut request = SearchRequest::new(dir.path(), &["alpha", "beta"]);
        request.mode = OutputMode::Content;
        for _ in 0..3 {
            let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
            assert_eq!(
                content(&result),
                [
                    ("a/z.rs".into(), 1, vec![1]),
                    ("b.rs".into(), 1, vec![0]),
                    ("b.rs".into(), 3, vec![0, 1])
                ]
            );
            assert!(!result.truncated);
            assert_eq!(result.files_searched, 3);
        }
    }

    #[test]
    fn a_newline_never_attributes_a_pattern() {
        let dir = tree(&[("f", "xa\nya b\n")]);
        let mut request = SearchRequest::new(dir.path(), &[r"a\s", "x|y"]);
        request.mode = OutputMode::Content;
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        assert_eq!(
            content(&result),
            [("f".into(), 1, vec![1]), ("f".into(), 2, vec![0, 1])]
        );
    }

    #[test]
    fn catastrophic_and_huge_patterns_are_bounded() {
        // Backtracking engines take exponential time on these; the regex crate is linear.
        let line = format!("{}\n", "a".repeat(200_000));
        let dir = tree(&[("f", &line), ("g", &"x".repeat(100_000))]);
        let request = SearchRequest::new(dir.path(), &["(a*)*b", "(x+x+)+y", "(a|aa)+$b"]);
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        assert_eq!((files(&result), result.files_searched), (vec![], 2));

        let huge = SearchRequest::new(dir.path(), &[r"[\p{L}\p{N}]{500}[\p{L}\p{N}]{500}"]);
        let error = search_code(&huge, &Limits::default(), &AllowAll).err();
        assert_eq!(error.map(|e| e.code()), Some("pattern_too_large"));
        let long = SearchRequest::new(dir.path(), &[&"a".repeat(5000)]);
        let error = search_code(&long, &Limits::default(), &AllowAll).err();
        assert_eq!(error.map(|e| e.code()), Some("pattern_too_long"));
    }

    #[test]
    fn context_lines_are_attached_once() {
        let dir = tree(&[("f", "1\n2 hit\n3\n4 hit\n5\n6\n7\n")]);
        let mut request = SearchRequest::new(dir.path(), &["hit"]);
        request.mode = OutputMode::Content;
        request.context_before = 1;
        request.context_after = 1;
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        let Output::Content { files } = &result.output else {
            panic!("content")
        };
        let lines =
            |context: &[ContextLine]| context.iter().map(|line| line.line).collect::<Vec<_>>();
        let hits = &files[0].hits;
        assert_eq!(
            (hits[0].line, lines(&hits[0].before), lines(&hits[0].after)),
            (2, vec![1], vec![3])
        );
        assert_eq!(
            (hits[1].line, lines(&hits[1].before), lines(&hits[1].after)),
            (4, vec![], vec![5])
        );
        assert_eq!(hits[0].text, "2 hit");

        request.context_after = 51;
        let error = search_code(&request, &Limits::default(), &AllowAll).err();
        assert_eq!(error.map(|e| e.code()), Some("context_too_large"));
    }

    #[test]
    fn binary_and_too_large_files_are_skipped_and_counted() {
        let dir = tree(&[
            ("bin", "hit\0hit\n"),
            ("big", &"hit\n".repeat(100)),
            ("text", "hit\n"),
        ]);
        let mut request = SearchRequest::new(dir.path(), &["hit"]);
        request.mode = OutputMode::Count;
        let limits = Limits {
            file_bytes_max: 100,
            ..Limits::default()
        };
        let result = search_code(&request, &limits, &AllowAll).expect("searches");
        let Output::Count { files } = &result.output else {
            panic!("count")
        };
        assert_eq!(
            files,
            &[FileCount {
                path: "text".into(),
                count: 1
            }]
        );
        assert_eq!((result.skipped.binary, result.skipped.too_large), (1, 1));
    }

    #[test]
    fn a_late_nul_drops_the_hits_seen_before_it() {
        let late = format!("hit\n{}\0\n", "x".repeat(200_000));
        let dir = tree(&[("late", &late)]);
        let mut request = SearchRequest::new(dir.path(), &["hit"]);
        request.mode = OutputMode::Content;
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        assert!(content(&result).is_empty());
        assert_eq!(result.skipped.binary, 1);
    }

    #[test]
    fn a_limit_keeps_the_first_hits_and_says_truncated() {
        let dir = tree(&[("a", "hit\nhit\n"), ("b", "hit\n"), ("c", "hit\nhit\n")]);
        let mut request = SearchRequest::new(dir.path(), &["hit"]);
        request.mode = OutputMode::Content;
        let expect = |limit, hits: &[(&str, u64)], truncated| {
            let mut request = request.clone();
            request.limit = Some(limit);
            let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
            let got: Vec<(String, u64)> = content(&result)
                .into_iter()
                .map(|(path, line, _)| (path, line))
                .collect();
            let want: Vec<(String, u64)> = hits
                .iter()
                .map(|(path, line)| (path.to_string(), *line))
                .collect();
            assert_eq!((got, result.truncated), (want, truncated), "limit {limit}");
            if truncated {
                assert_eq!(result.truncation, Some(Truncation::Limit));
            }
        };
        expect(1, &[("a", 1)], true);
        expect(3, &[("a", 1), ("a", 2), ("b", 1)], true);
        expect(4, &[("a", 1), ("a", 2), ("b", 1), ("c", 1)], true);
        expect(
            5,
            &[("a", 1), ("a", 2), ("b", 1), ("c", 1), ("c", 2)],
            false,
        );

        request.mode = OutputMode::FilesWithMatches;
        for (limit, want, truncated) in [(2, vec!["a", "b"], true), (3, vec!["a", "b", "c"], false)]
        {
            request.limit = Some(limit);
            let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
            assert_eq!(
                (files(&result), result.truncated),
                (want.iter().map(|s| s.to_string()).collect(), truncated)
            );
        }
        // The operator's bound wins over a larger request.
        request.limit = Some(100);
        let limits = Limits {
            matched_files_max: 1,
            ..Limits::default()
        };
        let result = search_code(&request, &limits, &AllowAll).expect("searches");
        assert_eq!(
            (files(&result), result.truncated),
            (vec!["a".to_string()], true)
        );
    }

    #[test]
    fn a_byte_budget_keeps_the_first_hits_and_says_budget() {
        // Each hit costs its text (3 bytes) plus 32 of framing, each path 1 + 32.
        let dir = tree(&[("a", "hit\nhit\n"), ("b", "hit\n"), ("c", "hit\n")]);
        let mut request = SearchRequest::new(dir.path(), &["hit"]);
        request.mode = OutputMode::Content;
        request.bytes_max = Some(33 + 35 + 35 + 33 + 35);
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        let got: Vec<(String, u64)> = content(&result)
            .into_iter()
            .map(|(path, line, _)| (path, line))
            .collect();
        assert_eq!(
            got,
            [("a".to_string(), 1), ("a".into(), 2), ("b".into(), 1)]
        );
        assert_eq!(result.truncation, Some(Truncation::Budget));

        // The operator's bound wins over a larger request, in every mode.
        request.mode = OutputMode::FilesWithMatches;
        request.bytes_max = Some(1 << 30);
        let limits = Limits {
            result_bytes_max: 33 * 2,
            ..Limits::default()
        };
        let result = search_code(&request, &limits, &AllowAll).expect("searches");
        assert_eq!(files(&result), ["a".to_string(), "b".into()]);
        assert_eq!(result.truncation, Some(Truncation::Budget));
        request.bytes_max = None;
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        assert_eq!((files(&result).len(), result.truncated), (3, false));
    }

    #[test]
    fn a_limit_cuts_the_same_prefix_whatever_order_the_walk_finds_files_in() {
        // Many files over many directories, 0 to 3 hits each, searched beside the walk.
        let names: Vec<(String, String)> = (0..400)
            .map(|index| {
                (
                    format!("d{}/e{}/f{index}", index % 7, index % 3),
                    "hit\n".repeat(index * 7 % 4),
                )
            })
            .collect();
        let fixtures: Vec<(&str, &str)> = names
            .iter()
            .map(|(name, text)| (name.as_str(), text.as_str()))
            .collect();
        let dir = tree(&fixtures);
        let mut request = SearchRequest::new(dir.path(), &["hit"]);
        request.mode = OutputMode::Content;
        let all = content(&search_code(&request, &Limits::default(), &AllowAll).expect("searches"));
        assert_eq!(
            all.len(),
            (0..400).map(|index| index * 7 % 4).sum::<usize>()
        );
        for limit in [1, 2, 3, 50, 299, 300, 301, 599, 600] {
            request.limit = Some(limit);
            let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
            let want = &all[..all.len().min(limit as usize)];
            assert_eq!(
                (content(&result).as_slice(), result.truncated),
                (want, want.len() < all.len()),
                "limit {limit}"
            );
        }
        request.mode = OutputMode::FilesWithMatches;
        request.limit = None;
        let every = files(&search_code(&request, &Limits::default(), &AllowAll).expect("searches"));
        for limit in [1, 7, 150, 299, 300, 301] {
            request.limit = Some(limit);
            let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
            let want = &every[..every.len().min(limit as usize)];
            assert_eq!(
                (files(&result).as_slice(), result.truncated),
                (want, want.len() < every.len()),
                "limit {limit}"
            );
        }
    }

    #[test]
    fn files_max_and_timeout_truncate() {
        let dir = tree(&[("a", "hit\n"), ("b", "hit\n"), ("c", "hit\n")]);
        let request = SearchRequest::new(dir.path(), &["hit"]);
        let limits = Limits {
            files_max: 2,
            ..Limits::default()
        };
        let result = search_code(&request, &limits, &AllowAll).expect("searches");
        assert_eq!(
            (files(&result), result.truncation),
            (vec!["a".into(), "b".into()], Some(Truncation::FilesMax))
        );

        let limits = Limits {
            timeout_ms: 0,
            ..Limits::default()
        };
        let result = search_code(&request, &limits, &AllowAll).expect("searches");
        assert_eq!(
            (files(&result), result.truncation),
            (vec![], Some(Truncation::Timeout))
        );
    }

    #[test]
    fn multiline_and_case_options() {
        let dir = tree(&[("f.rs", "fn main() {\n    let x = 1;\n}\nFN Other\n")]);
        let mut request = SearchRequest::new(dir.path(), &[r"\{\n\s+let"]);
        request.mode = OutputMode::Content;
        request.multiline = true;
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        let Output::Content { files } = &result.output else {
            panic!("content")
        };
        assert_eq!(
            (files[0].hits[0].line, files[0].hits[0].text.as_str()),
            (1, "fn main() {\n    let x = 1;")
        );

        let mut request = SearchRequest::new(dir.path(), &["^fn"]);
        request.mode = OutputMode::Count;
        request.case = Case::Insensitive;
        let result = search_code(&request, &Limits::default(), &AllowAll).expect("searches");
        assert_eq!(
            result.output,
            Output::Count {
                files: vec![FileCount {
                    path: "f.rs".into(),
                    count: 2
                }]
            }
        );
    }

    #[test]
    fn long_lines_are_cut_at_a_character_boundary() {
        assert_eq!(
            line_text("héllo\r\n".as_bytes(), 2),
            ("h".to_string(), true)
        );
        assert_eq!(line_text(b"hello\n", 5), ("hello".to_string(), false));
    }

    #[test]
    fn symlinks_are_never_followed() {
        let outside = tree(&[("secret", "hit\n")]);
        let dir = tree(&[("a", "hit\n")]);
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link"))
            .expect("symlink");
        let result = search_code(
            &SearchRequest::new(dir.path(), &["hit"]),
            &Limits::default(),
            &AllowAll,
        )
        .expect("searches");
        assert_eq!(files(&result), ["a"]);
        assert_eq!(result.skipped.symlinks, 1);
    }

    /// A watch on "the file was opened", from the kernel: no instrumentation of our own code.
    struct OpenWatch(rustix::fd::OwnedFd);

    impl OpenWatch {
        fn new(path: &Path) -> Self {
            use rustix::fs::inotify;
            let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
                .expect("inotify");
            inotify::add_watch(&fd, path, inotify::WatchFlags::OPEN).expect("watch");
            OpenWatch(fd)
        }

        fn opened(&self) -> bool {
            let mut buffer = [0u8; 1024];
            match rustix::io::read(&self.0, &mut buffer) {
                Ok(read) => read > 0,
                Err(rustix::io::Errno::AGAIN) => false,
                Err(error) => panic!("inotify read: {error}"),
            }
        }
    }

    #[test]
    fn a_denied_file_is_never_opened_and_never_returned() {
        let dir = tree(&[("allowed.rs", "secret\n"), ("denied.env", "secret\n")]);
        let denied = dir.path().join("denied.env");
        let allowed = dir.path().join("allowed.rs");
        let asked = Mutex::new(Vec::new());
        let judge = |path: &Path, kind: EntryKind| {
            asked.lock().expect("lock").push((path.to_path_buf(), kind));
            if path.extension().is_some_and(|ext| ext == "env") {
                Verdict::Deny
            } else {
                Verdict::Allow
            }
        };
        let denied_watch = OpenWatch::new(&denied);
        let allowed_watch = OpenWatch::new(&allowed);
        for mode in [
            OutputMode::Content,
            OutputMode::FilesWithMatches,
            OutputMode::Count,
        ] {
            let mut request = SearchRequest::new(dir.path(), &["secret"]);
            request.mode = mode;
            let result = search_code(&request, &Limits::default(), &judge).expect("searches");
            let shown = serde_json::to_string(&result).expect("json");
            assert!(
                shown.contains("allowed.rs") && !shown.contains("denied.env"),
                "{shown}"
            );
            assert_eq!(result.skipped.denied_files, 1);
        }
        assert!(
            allowed_watch.opened(),
            "the control: an allowed file's open is seen"
        );
        assert!(!denied_watch.opened(), "the denied file was opened");
        let asked = asked.lock().expect("lock");
        assert_eq!(
            asked.iter().filter(|(path, _)| path == &denied).count(),
            3,
            "judged once per search"
        );
        assert!(
            asked
                .iter()
                .any(|(path, kind)| path == dir.path() && *kind == EntryKind::Dir),
            "the root is judged"
        );
    }

    #[test]
    fn a_file_the_judge_refuses_once_opened_is_never_read_or_returned() {
        let dir = tree(&[("a.rs", "secret\n"), ("b.rs", "secret\n")]);
        struct Opened;
        impl Judge for Opened {
            fn judge(&self, _path: &Path, _kind: EntryKind) -> Verdict {
                Verdict::Allow
            }
            fn opened(&self, path: &Path, _file: &File) -> Verdict {
                if path.ends_with("b.rs") {
                    Verdict::Deny
                } else {
                    Verdict::Allow
                }
            }
        }
        let mut request = SearchRequest::new(dir.path(), &["secret"]);
        request.mode = OutputMode::Content;
        let result = search_code(&request, &Limits::default(), &Opened).expect("searches");
        assert_eq!(content(&result).len(), 1);
        assert_eq!(content(&result)[0].0, "a.rs");
        assert_eq!((result.skipped.denied_files, result.files_searched), (1, 1));
    }

    /// A judge that opens files itself: what it opens is searched, what it refuses is counted
    /// denied and never read, and `opened` is not asked of what it opened.
    #[test]
    fn a_judge_that_opens_files_itself_decides_what_is_read() {
        let dir = tree(&[
            ("a.rs", "secret\n"),
            ("b.rs", "secret\n"),
            ("c.rs", "secret\n"),
        ]);
        struct Opens;
        impl Judge for Opens {
            fn judge(&self, _path: &Path, _kind: EntryKind) -> Verdict {
                Verdict::Allow
            }
            fn opened(&self, _path: &Path, _file: &File) -> Verdict {
                Verdict::Deny
            }
            fn open(&self, path: &Path) -> Option<crate::judge::Opened> {
                Some(if path.ends_with("b.rs") {
                    crate::judge::Opened::Denied
                } else if path.ends_with("c.rs") {
                    crate::judge::Opened::Unreadable
                } else {
                    crate::judge::Opened::File(File::open(path).ok()?)
                })
            }
        }
        let mut request = SearchRequest::new(dir.path(), &["secret"]);
        request.mode = OutputMode::Content;
        let result = search_code(&request, &Limits::default(), &Opens).expect("searches");
        assert_eq!(content(&result).len(), 1);
        assert_eq!(content(&result)[0].0, "a.rs");
        assert_eq!((result.skipped.denied_files, result.files_searched), (1, 1));
    }

    #[test]
    fn a_request_reads_from_agent_json_with_defaults() {
        let json = r#"{"patterns":["fn main"],"scope":{"root":"/r","types":["rust"]},"mode":"content","limit":5}"#;
        let request: SearchRequest = serde_json::from_str(json).expect("parses");
        assert_eq!(request.mode, OutputMode::Content);
        assert!(request.scope.ignore_files && !request.scope.hidden);
        assert_eq!(request.case, Case::Sensitive);
        let unknown = r#"{"patterns":["x"],"scope":{"root":"/r"},"head_limit":5}"#;
        assert!(
            serde_json::from_str::<SearchRequest>(unknown).is_err(),
            "unknown fields are refused"
        );
    }
}
