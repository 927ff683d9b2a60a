//! The state of `aido watch` and what changes it: a key pressed ([`App::key`]), a timer
//! ([`App::due`]) and an answer read ([`App::apply`]). Nothing here touches the network or
//! the terminal: a change that needs the runtime returns the [`Request`]s to make, and their
//! answers come back as [`Loaded`]. So every keystroke's effect is tested without a server.

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::{Value, json};

use crate::client::Via;
use crate::detail::Detail;
use crate::model::{Preview, QuestionInfo, RuntimeInfo, SessionInfo, Target, short_id};
use crate::timeline::{Ask, Page, Timeline};

/// How often the open timeline's tail is read.
pub const TAIL_EVERY: Duration = Duration::from_millis(400);
/// How often the waiting questions are read.
pub const QUESTIONS_EVERY: Duration = Duration::from_millis(800);
/// How often the sessions are read.
pub const SESSIONS_EVERY: Duration = Duration::from_secs(2);
/// How often the fleet is read.
pub const FLEET_EVERY: Duration = Duration::from_secs(10);
/// Longest answer typed, in characters.
pub const TYPED_CHARS_MAX: usize = 4000;

/// Something to ask the runtime.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    Fleet,
    Sessions {
        via: Via,
    },
    Questions {
        via: Via,
    },
    Timeline {
        via: Via,
        session: String,
        ask: Ask,
    },
    Step {
        via: Via,
        session: String,
        seq: u64,
    },
    Answer {
        via: Via,
        id: String,
        content: Value,
    },
    Preview {
        via: Via,
        session: String,
        target: Target,
    },
    Rewind {
        via: Via,
        session: String,
        target: Target,
    },
}

/// What the runtime answered a [`Request`] (an error as its text, to show).
#[derive(Clone, Debug, PartialEq)]
pub enum Loaded {
    Fleet(Result<Vec<RuntimeInfo>, String>),
    Sessions {
        via: Via,
        result: Result<Vec<SessionInfo>, String>,
    },
    Questions {
        via: Via,
        result: Result<Vec<QuestionInfo>, String>,
    },
    Timeline {
        via: Via,
        session: String,
        ask: Ask,
        result: Result<Page, String>,
    },
    Step {
        via: Via,
        seq: u64,
        result: Result<Detail, String>,
    },
    Answered {
        id: String,
        result: Result<String, String>,
    },
    Preview {
        target: Target,
        result: Result<Preview, String>,
    },
    Rewound {
        via: Via,
        session: String,
        result: Result<String, String>,
    },
}

/// Which list the arrows move in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Sessions,
    Timeline,
    Questions,
}

/// What the screen is doing besides browsing.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Browse,
    /// An answer to the question `id` being typed (kept by id: the list may change meanwhile).
    Typing {
        id: String,
        text: String,
    },
    /// A step in full.
    Detail {
        seq: u64,
        scroll: usize,
    },
    /// A rewind waiting for `y`, its preview read (or not yet).
    Rewind {
        target: Target,
        preview: Option<Result<Preview, String>>,
    },
    Help,
}

/// A line at the bottom: what happened last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub text: String,
    pub error: bool,
}

/// Everything `aido watch` shows.
pub struct App {
    /// The runtime watched and its fleet (itself first).
    pub runtimes: Vec<RuntimeInfo>,
    /// The one shown.
    pub via: Via,
    pub sessions: Vec<SessionInfo>,
    pub session: usize,
    pub timeline: Option<Timeline>,
    /// The selected row of the timeline.
    pub cursor: usize,
    /// The cursor stays on the newest row as rows come.
    pub stick: bool,
    pub questions: Vec<QuestionInfo>,
    pub question: usize,
    pub detail: Option<Detail>,
    pub focus: Focus,
    pub mode: Mode,
    pub status: Option<Status>,
    /// Whether to draw in colour (no `NO_COLOR`).
    pub colour: bool,
    pub quit: bool,
    /// A session asked for on the command line (an id or a prefix), opened when listed.
    pub wanted: Option<String>,
    /// The height of the timeline's list, as last drawn (for page moves).
    pub page_rows: usize,
    /// The first timeline row in view, as last drawn.
    pub offset: usize,
    pending: Pending,
    last: Last,
}

/// Requests sent and not answered yet, so a slow runtime is not asked again and again.
#[derive(Default)]
struct Pending {
    fleet: bool,
    sessions: bool,
    questions: bool,
    timeline: bool,
}

/// When each poll was last sent.
#[derive(Default)]
struct Last {
    fleet: Option<Instant>,
    sessions: Option<Instant>,
    questions: Option<Instant>,
    tail: Option<Instant>,
}

fn due(last: &mut Option<Instant>, every: Duration, now: Instant) -> bool {
    if last.is_none_or(|t| now.duration_since(t) >= every) {
        *last = Some(now);
        true
    } else {
        false
    }
}

impl App {
    pub fn new(colour: bool, wanted: Option<String>) -> Self {
        Self {
            runtimes: Vec::new(),
            via: Via::Own,
            sessions: Vec::new(),
            session: 0,
            timeline: None,
            cursor: 0,
            stick: true,
            questions: Vec::new(),
            question: 0,
            detail: None,
            focus: Focus::Sessions,
            mode: Mode::Browse,
            status: None,
            colour,
            quit: false,
            wanted,
            page_rows: 10,
            offset: 0,
            pending: Pending::default(),
            last: Last::default(),
        }
    }

    fn say(&mut self, text: impl Into<String>) {
        self.status = Some(Status {
            text: text.into(),
            error: false,
        });
    }

    fn fail(&mut self, text: impl Into<String>) {
        self.status = Some(Status {
            text: text.into(),
            error: true,
        });
    }

    /// The session shown (its timeline's).
    pub fn open_session(&self) -> Option<&str> {
        self.timeline.as_ref().map(|t| t.session.as_str())
    }

    /// A request the worker could not take (its queue is full): it is not pending any more,
    /// and is asked again when next due.
    pub fn dropped(&mut self, request: &Request) {
        match request {
            Request::Fleet => self.pending.fleet = false,
            Request::Sessions { .. } => self.pending.sessions = false,
            Request::Questions { .. } => self.pending.questions = false,
            Request::Timeline { .. } => self.pending.timeline = false,
            Request::Step { .. }
            | Request::Answer { .. }
            | Request::Preview { .. }
            | Request::Rewind { .. } => {}
        }
        self.fail("the runtime is slow to answer; asking again");
    }

    /// The polls that are due at `now`.
    pub fn due(&mut self, now: Instant) -> Vec<Request> {
        let mut out = Vec::new();
        let via = self.via;
        if !self.pending.fleet && due(&mut self.last.fleet, FLEET_EVERY, now) {
            self.pending.fleet = true;
            out.push(Request::Fleet);
        }
        if !self.pending.sessions && due(&mut self.last.sessions, SESSIONS_EVERY, now) {
            self.pending.sessions = true;
            out.push(Request::Sessions { via });
        }
        if !self.pending.questions && due(&mut self.last.questions, QUESTIONS_EVERY, now) {
            self.pending.questions = true;
            out.push(Request::Questions { via });
        }
        if let Some(t) = &self.timeline
            && t.following
            && !self.pending.timeline
            && due(&mut self.last.tail, TAIL_EVERY, now)
        {
            self.pending.timeline = true;
            out.push(Request::Timeline {
                via,
                session: t.session.clone(),
                ask: Ask::After(t.to),
            });
        }
        out
    }

    fn open(&mut self, id: String) -> Vec<Request> {
        self.timeline = None;
        self.detail = None;
        self.cursor = 0;
        self.stick = true;
        self.pending.timeline = true;
        self.focus = Focus::Timeline;
        vec![Request::Timeline {
            via: self.via,
            session: id,
            ask: Ask::Newest,
        }]
    }

    /// Show another runtime of the fleet.
    fn switch(&mut self, step: isize) -> Vec<Request> {
        if self.runtimes.len() < 2 {
            return Vec::new();
        }
        let places: Vec<Via> = self
            .runtimes
            .iter()
            .map(|r| r.peer.map_or(Via::Own, Via::Peer))
            .collect();
        let at = places.iter().position(|v| *v == self.via).unwrap_or(0) as isize;
        let next = (at + step).rem_euclid(places.len() as isize) as usize;
        self.via = places[next];
        self.sessions.clear();
        self.questions.clear();
        self.timeline = None;
        self.detail = None;
        self.session = 0;
        self.pending = Pending::default();
        self.last = Last::default();
        self.say(format!("runtime {}", self.runtimes[next].name()));
        Vec::new()
    }

    /// A key pressed; what to ask the runtime.
    pub fn key(&mut self, key: KeyEvent) -> Vec<Request> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.quit = true;
            return Vec::new();
        }
        match self.mode.clone() {
            Mode::Typing { id, text } => self.typing(key, id, text),
            Mode::Detail { seq, scroll } => self.detail_key(key, seq, scroll),
            Mode::Rewind { target, .. } => self.rewind_key(key, target),
            Mode::Help => {
                self.mode = Mode::Browse;
                Vec::new()
            }
            Mode::Browse => self.browse(key),
        }
    }

    fn browse(&mut self, key: KeyEvent) -> Vec<Request> {
        match key.code {
            KeyCode::Char('q') => {
                self.quit = true;
                Vec::new()
            }
            KeyCode::Char('?') => {
                self.mode = Mode::Help;
                Vec::new()
            }
            KeyCode::Tab => {
                self.focus = match self.focus {
                    Focus::Sessions => Focus::Timeline,
                    Focus::Timeline if !self.questions.is_empty() => Focus::Questions,
                    Focus::Timeline | Focus::Questions => Focus::Sessions,
                };
                Vec::new()
            }
            KeyCode::BackTab => {
                self.focus = match self.focus {
                    Focus::Sessions if !self.questions.is_empty() => Focus::Questions,
                    Focus::Sessions => Focus::Timeline,
                    Focus::Timeline => Focus::Sessions,
                    Focus::Questions => Focus::Timeline,
                };
                Vec::new()
            }
            KeyCode::Char('<') => self.switch(-1),
            KeyCode::Char('>') => self.switch(1),
            KeyCode::Char('a') => self.approve(true),
            KeyCode::Char('d') => self.approve(false),
            KeyCode::Char('t') => {
                self.start_typing();
                Vec::new()
            }
            KeyCode::Char('r') => self.rewind_ask(),
            KeyCode::Enter => self.enter(),
            _ => self.movement(key.code),
        }
    }

    /// Arrows, pages, home and end in the focused list.
    fn movement(&mut self, code: KeyCode) -> Vec<Request> {
        let page = self.page_rows.max(1) as isize;
        let step: Option<isize> = match code {
            KeyCode::Up | KeyCode::Char('k') => Some(-1),
            KeyCode::Down | KeyCode::Char('j') => Some(1),
            KeyCode::PageUp => Some(-page),
            KeyCode::PageDown => Some(page),
            KeyCode::Home | KeyCode::Char('g') => Some(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => Some(isize::MAX / 2),
            _ => None,
        };
        let Some(step) = step else {
            return Vec::new();
        };
        let moved = |at: usize, len: usize| -> usize {
            if len == 0 {
                return 0;
            }
            (at as isize)
                .saturating_add(step)
                .clamp(0, len as isize - 1) as usize
        };
        match self.focus {
            Focus::Sessions => self.session = moved(self.session, self.sessions.len()),
            Focus::Questions => self.question = moved(self.question, self.questions.len()),
            Focus::Timeline => return self.scroll_timeline(step, moved),
        }
        Vec::new()
    }

    fn scroll_timeline(
        &mut self,
        step: isize,
        moved: impl Fn(usize, usize) -> usize,
    ) -> Vec<Request> {
        let Some(t) = &self.timeline else {
            return Vec::new();
        };
        let len = t.rows.len();
        let at_top = self.cursor == 0;
        self.cursor = moved(self.cursor, len);
        self.stick = self.cursor + 1 >= len;
        // Up past the oldest row held: the page before it. End when the tail is not
        // followed: the newest page again.
        if step < 0 && at_top && t.older() && !self.pending.timeline {
            self.pending.timeline = true;
            return vec![Request::Timeline {
                via: self.via,
                session: t.session.clone(),
                ask: Ask::Before(t.from),
            }];
        }
        if step > 0 && self.stick && !t.following && !self.pending.timeline {
            self.pending.timeline = true;
            return vec![Request::Timeline {
                via: self.via,
                session: t.session.clone(),
                ask: Ask::Newest,
            }];
        }
        Vec::new()
    }

    fn enter(&mut self) -> Vec<Request> {
        match self.focus {
            Focus::Sessions => match self.sessions.get(self.session) {
                Some(s) => self.open(s.id.clone()),
                None => Vec::new(),
            },
            Focus::Timeline => {
                let Some(t) = &self.timeline else {
                    return Vec::new();
                };
                let Some(row) = t.rows.get(self.cursor) else {
                    return Vec::new();
                };
                self.mode = Mode::Detail {
                    seq: row.seq,
                    scroll: 0,
                };
                vec![Request::Step {
                    via: self.via,
                    session: t.session.clone(),
                    seq: row.seq,
                }]
            }
            Focus::Questions => {
                self.start_typing();
                Vec::new()
            }
        }
    }

    /// `a` and `d`: approve or deny a confirmation; for another question, `a` starts an
    /// answer and `d` declines it.
    fn approve(&mut self, yes: bool) -> Vec<Request> {
        let Some(q) = self.questions.get(self.question) else {
            self.say("no question is waiting");
            return Vec::new();
        };
        let content = match (q.question.kind.as_str(), yes) {
            ("confirm", _) => json!({"approve": yes}),
            (_, true) => {
                self.start_typing();
                return Vec::new();
            }
            (_, false) => json!({"decline": true}),
        };
        vec![Request::Answer {
            via: self.via,
            id: q.id.clone(),
            content,
        }]
    }

    /// Start typing an answer to the selected question.
    fn start_typing(&mut self) {
        match self.questions.get(self.question) {
            Some(q) => {
                self.mode = Mode::Typing {
                    id: q.id.clone(),
                    text: String::new(),
                }
            }
            None => self.say("no question is waiting"),
        }
    }

    fn typing(&mut self, key: KeyEvent, id: String, mut text: String) -> Vec<Request> {
        match key.code {
            KeyCode::Esc => {
                self.mode = Mode::Browse;
                return Vec::new();
            }
            KeyCode::Enter => {
                self.mode = Mode::Browse;
                let Some(q) = self.questions.iter().find(|q| q.id == id) else {
                    self.fail(format!(
                        "{id} is no longer waiting (answered elsewhere, or it timed out)"
                    ));
                    return Vec::new();
                };
                return match typed_answer(q, &text) {
                    Ok(content) => vec![Request::Answer {
                        via: self.via,
                        id,
                        content,
                    }],
                    Err(why) => {
                        self.fail(why);
                        Vec::new()
                    }
                };
            }
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) if text.chars().count() < TYPED_CHARS_MAX => text.push(c),
            _ => {}
        }
        self.mode = Mode::Typing { id, text };
        Vec::new()
    }

    fn detail_key(&mut self, key: KeyEvent, seq: u64, scroll: usize) -> Vec<Request> {
        let lines = self.detail.as_ref().map_or(0, |d| d.lines.len());
        let page = self.page_rows.max(1);
        let scroll = match key.code {
            KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q') => {
                self.mode = Mode::Browse;
                return Vec::new();
            }
            KeyCode::Up | KeyCode::Char('k') => scroll.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => scroll + 1,
            KeyCode::PageUp => scroll.saturating_sub(page),
            KeyCode::PageDown | KeyCode::Char(' ') => scroll + page,
            KeyCode::Home | KeyCode::Char('g') => 0,
            KeyCode::End | KeyCode::Char('G') => lines,
            _ => scroll,
        };
        self.mode = Mode::Detail {
            seq,
            scroll: scroll.min(lines.saturating_sub(1)),
        };
        Vec::new()
    }

    /// `r` on a timeline row: preview a rewind that undoes it (an action) or keeps it.
    fn rewind_ask(&mut self) -> Vec<Request> {
        let Some(t) = &self.timeline else {
            self.say("open a session first (Enter on it)");
            return Vec::new();
        };
        let Some(row) = t.rows.get(self.cursor) else {
            return Vec::new();
        };
        let target = Target {
            seq: row.seq,
            keep: !row.is_action(),
        };
        self.mode = Mode::Rewind {
            target,
            preview: None,
        };
        vec![Request::Preview {
            via: self.via,
            session: t.session.clone(),
            target,
        }]
    }

    fn rewind_key(&mut self, key: KeyEvent, target: Target) -> Vec<Request> {
        let Some(session) = self.open_session().map(str::to_owned) else {
            self.mode = Mode::Browse;
            return Vec::new();
        };
        let previewed = matches!(
            &self.mode,
            Mode::Rewind {
                preview: Some(Ok(_)),
                ..
            }
        );
        match key.code {
            // Only what was shown is done: no rewind before its preview was read whole.
            KeyCode::Char('y') if !previewed => {
                self.mode = Mode::Browse;
                self.fail("nothing rewound: the rewind had no preview");
                Vec::new()
            }
            KeyCode::Char('y') => {
                self.mode = Mode::Browse;
                self.say(format!("rewinding: {}…", target.words()));
                vec![Request::Rewind {
                    via: self.via,
                    session,
                    target,
                }]
            }
            KeyCode::Char('k') => {
                let target = Target {
                    keep: !target.keep,
                    ..target
                };
                self.mode = Mode::Rewind {
                    target,
                    preview: None,
                };
                vec![Request::Preview {
                    via: self.via,
                    session,
                    target,
                }]
            }
            _ => {
                self.mode = Mode::Browse;
                self.say("nothing rewound");
                Vec::new()
            }
        }
    }

    /// An answer read.
    pub fn apply(&mut self, loaded: Loaded) -> Vec<Request> {
        match loaded {
            Loaded::Fleet(result) => {
                self.pending.fleet = false;
                match result {
                    Ok(runtimes) => self.runtimes = runtimes,
                    Err(e) => self.fail(e),
                }
                Vec::new()
            }
            Loaded::Sessions { via, result } if via == self.via => {
                self.pending.sessions = false;
                match result {
                    Ok(sessions) => return self.sessions_read(sessions),
                    Err(e) => self.fail(e),
                }
                Vec::new()
            }
            Loaded::Questions { via, result } if via == self.via => {
                self.pending.questions = false;
                match result {
                    Ok(questions) => self.questions_read(questions),
                    Err(e) => self.fail(e),
                }
                Vec::new()
            }
            Loaded::Timeline {
                via,
                session,
                ask,
                result,
            } if via == self.via => {
                self.pending.timeline = false;
                match result {
                    Ok(page) => return self.page_read(session, ask, page),
                    Err(e) => self.fail(e),
                }
                Vec::new()
            }
            Loaded::Step { via, seq, result } if via == self.via => {
                match result {
                    Ok(detail) => self.detail = Some(detail),
                    Err(e) => {
                        self.detail = None;
                        self.fail(format!("step #{seq}: {e}"));
                    }
                }
                Vec::new()
            }
            Loaded::Answered { id, result } => {
                match result {
                    Ok(state) => self.say(format!("answered {id}: {state}")),
                    Err(e) => self.fail(format!("answering {id}: {e}")),
                }
                self.last.questions = None;
                Vec::new()
            }
            Loaded::Preview { target, result } => {
                if matches!(&self.mode, Mode::Rewind { target: t, .. } if *t == target) {
                    self.mode = Mode::Rewind {
                        target,
                        preview: Some(result),
                    };
                }
                Vec::new()
            }
            Loaded::Rewound {
                via,
                session,
                result,
            } => self.rewound(via, session, result),
            // An answer for a runtime no longer shown.
            Loaded::Sessions { .. }
            | Loaded::Questions { .. }
            | Loaded::Timeline { .. }
            | Loaded::Step { .. } => Vec::new(),
        }
    }

    fn questions_read(&mut self, questions: Vec<QuestionInfo>) {
        let selected = self.questions.get(self.question).map(|q| q.id.clone());
        self.questions = questions;
        self.question = selected
            .and_then(|id| self.questions.iter().position(|q| q.id == id))
            .unwrap_or(0);
        if self.questions.is_empty() && self.focus == Focus::Questions {
            self.focus = Focus::Timeline;
        }
    }

    fn rewound(
        &mut self,
        via: Via,
        session: String,
        result: Result<String, String>,
    ) -> Vec<Request> {
        match result {
            Ok(text) => self.say(text),
            Err(e) => self.fail(format!("rewind: {e}")),
        }
        if via != self.via || self.open_session() != Some(session.as_str()) {
            return Vec::new();
        }
        // The rewind's own rows are the newest: show them; what it abandoned is marked on the
        // rows before it, so the newest page is read again whole.
        self.stick = true;
        self.pending.timeline = true;
        vec![Request::Timeline {
            via,
            session,
            ask: Ask::Newest,
        }]
    }

    fn sessions_read(&mut self, sessions: Vec<SessionInfo>) -> Vec<Request> {
        let selected = self.sessions.get(self.session).map(|s| s.id.clone());
        self.sessions = sessions;
        self.session = selected
            .and_then(|id| self.sessions.iter().position(|s| s.id == id))
            .unwrap_or(0);
        if self.timeline.is_some() || self.pending.timeline {
            return Vec::new();
        }
        // Nothing open yet: the session asked for, else the newest an agent drives.
        let pick = match &self.wanted {
            Some(prefix) => self.sessions.iter().position(|s| s.id.starts_with(prefix)),
            None => self.sessions.iter().position(|s| !s.runtime),
        };
        match pick {
            Some(i) => {
                self.session = i;
                let id = self.sessions[i].id.clone();
                self.open(id)
            }
            None => Vec::new(),
        }
    }

    fn page_read(&mut self, session: String, ask: Ask, page: Page) -> Vec<Request> {
        let same = self.open_session() == Some(session.as_str());
        match (ask, &mut self.timeline) {
            (Ask::Newest, _) => {
                let keep = self
                    .timeline
                    .as_ref()
                    .filter(|_| same)
                    .and_then(|t| t.rows.get(self.cursor).map(|r| r.seq));
                let t = Timeline::newest(&session, page);
                self.cursor = match keep.and_then(|seq| t.index_of(seq)) {
                    Some(i) if !self.stick => i,
                    _ => t.rows.len().saturating_sub(1),
                };
                self.timeline = Some(t);
            }
            (Ask::Before(_), Some(t)) if same => {
                let added = t.prepend(page);
                self.cursor += added;
                self.cursor = self
                    .cursor
                    .saturating_sub(1)
                    .min(t.rows.len().saturating_sub(1));
                if added == 0 {
                    self.cursor = 0;
                }
            }
            (Ask::After(_), Some(t)) if same => {
                let len = t.rows.len();
                let rewound = page.rows.iter().any(|r| r.kind == "rewound");
                let added = t.append(page);
                // Rows let go at the front move the cursor's row up.
                let dropped = (len + added).saturating_sub(t.rows.len());
                self.cursor = self.cursor.saturating_sub(dropped);
                if self.stick {
                    self.cursor = t.rows.len().saturating_sub(1);
                }
                self.cursor = self.cursor.min(t.rows.len().saturating_sub(1));
                // What a rewind abandoned is marked on the rows before it: read them again.
                if rewound {
                    self.pending.timeline = true;
                    return vec![Request::Timeline {
                        via: self.via,
                        session,
                        ask: Ask::Newest,
                    }];
                }
            }
            _ => {}
        }
        Vec::new()
    }

    /// The selected session's short id, for titles.
    pub fn title_session(&self) -> String {
        self.open_session()
            .map(|s| short_id(s).to_owned())
            .unwrap_or_default()
    }
}

/// The form content of a typed answer to `q`: text as it is; a choice by its text or number
/// (several, with commas, when the question takes several); `yes`/`no` for a confirmation.
pub fn typed_answer(q: &QuestionInfo, text: &str) -> Result<Value, String> {
    let text = text.trim();
    match q.question.kind.as_str() {
        "confirm" => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "a" | "approve" => Ok(json!({"approve": true})),
            "n" | "no" | "d" | "deny" => Ok(json!({"approve": false})),
            _ => Err("answer yes or no (or press a / d)".into()),
        },
        "choice" => {
            let pick = |one: &str| -> Result<String, String> {
                let one = one.trim();
                if let Ok(n) = one.parse::<usize>()
                    && let Some(c) = n.checked_sub(1).and_then(|i| q.question.choices.get(i))
                {
                    return Ok(c.clone());
                }
                q.question
                    .choices
                    .iter()
                    .find(|c| c.eq_ignore_ascii_case(one))
                    .cloned()
                    .ok_or_else(|| format!("{one:?} is not one of the choices"))
            };
            if q.question.multiple {
                let picked: Result<Vec<String>, String> = text.split(',').map(pick).collect();
                Ok(json!({"choices": picked?}))
            } else {
                Ok(json!({"choice": pick(text)?}))
            }
        }
        _ => Ok(json!({"answer": text})),
    }
}
