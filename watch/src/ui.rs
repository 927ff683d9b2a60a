//! Drawing the [`App`]: a header, the sessions beside the open session's timeline, the
//! questions waiting for a person, the selected step, and a line of keys or of what just
//! happened; a step in full, a rewind's preview and the keys over it when asked. It fits
//! 80x24, and without colour (`NO_COLOR`) every state is still told by text and by bold,
//! dim and reversed, never by colour alone.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap};

use crate::app::{App, Focus, Mode};
use crate::detail::Tone;
use crate::model::{Preview, QuestionInfo, SessionInfo, Target, short_id};
use crate::timeline::Row;

/// Width of the sessions' column, borders included.
pub const SESSIONS_WIDTH: u16 = 24;
/// Height of the selected step's panel, borders included.
pub const STEP_HEIGHT: u16 = 6;
/// Most questions listed at once.
pub const QUESTIONS_SHOWN_MAX: usize = 3;

/// A style with colour, or without it (only modifiers) under `NO_COLOR`.
struct Theme {
    colour: bool,
}

impl Theme {
    fn fg(&self, colour: Color) -> Style {
        if self.colour {
            Style::default().fg(colour)
        } else {
            Style::default()
        }
    }

    fn tone(&self, tone: Tone) -> Style {
        match tone {
            Tone::Plain => Style::default(),
            Tone::Heading => Style::default().add_modifier(Modifier::BOLD),
            Tone::Added => self.fg(Color::Green),
            Tone::Removed => self.fg(Color::Red),
            Tone::Hunk => self.fg(Color::Cyan),
            Tone::Dim => Style::default().add_modifier(Modifier::DIM),
            Tone::Bad => self.fg(Color::Red).add_modifier(Modifier::BOLD),
        }
    }

    fn border(&self, focused: bool) -> Style {
        if focused {
            self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
        } else {
            Style::default()
        }
    }

    fn verdict(&self, word: &str) -> Style {
        match word {
            "ok" => self.fg(Color::Green),
            "deny" | "fail" | "rej" => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            "ask" | "…" => self.fg(Color::Yellow),
            _ => Style::default(),
        }
    }
}

/// Draw everything.
pub fn draw(frame: &mut Frame, app: &mut App) {
    let theme = Theme { colour: app.colour };
    let area = frame.area();
    let questions = if app.questions.is_empty() {
        0
    } else {
        app.questions.len().min(QUESTIONS_SHOWN_MAX) as u16 + 3
    };
    let [header, main, asked, step, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(questions),
        Constraint::Length(STEP_HEIGHT),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, app, header);
    if let Mode::Detail { seq, scroll } = app.mode {
        let whole = Rect {
            height: main.height + asked.height + step.height,
            ..main
        };
        draw_detail(frame, app, &theme, whole, seq, scroll);
    } else {
        let [left, right] =
            Layout::horizontal([Constraint::Length(SESSIONS_WIDTH), Constraint::Min(20)])
                .areas(main);
        draw_sessions(frame, app, &theme, left);
        draw_timeline(frame, app, &theme, right);
        if questions > 0 {
            draw_questions(frame, app, &theme, asked);
        }
        draw_step(frame, app, &theme, step);
    }
    draw_footer(frame, app, &theme, footer);
    match &app.mode {
        Mode::Rewind { target, preview } => {
            draw_rewind(frame, app, &theme, *target, preview.as_ref())
        }
        Mode::Help => draw_help(frame),
        _ => {}
    }
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let runtime = app
        .runtimes
        .iter()
        .find(|r| {
            r.peer
                .map_or(crate::client::Via::Own, crate::client::Via::Peer)
                == app.via
        })
        .map(|r| r.name())
        .unwrap_or_else(|| "connecting…".into());
    let of = if app.runtimes.len() > 1 {
        format!(" (</> 1 of {})", app.runtimes.len())
    } else {
        String::new()
    };
    let text = format!(
        " aido watch │ {runtime}{of} │ {} sessions │ {} waiting │ ? help",
        app.sessions.len(),
        app.questions.len()
    );
    let line = Line::from(Span::styled(
        text,
        Style::default().add_modifier(Modifier::REVERSED),
    ));
    frame.render_widget(
        Paragraph::new(line).style(Style::default().add_modifier(Modifier::REVERSED)),
        area,
    );
}

fn session_line(s: &SessionInfo, open: bool) -> Line<'static> {
    let client = s
        .client
        .as_deref()
        .unwrap_or(if s.runtime { "runtime" } else { "?" });
    let client: String = client.chars().take(8).collect();
    let mark = if open { '*' } else { ' ' };
    let ended = if s.ended.is_some() { " end" } else { "" };
    let text = format!("{mark}{} {:>5} {client}{ended}", short_id(&s.id), s.records);
    let style = if s.ended.is_some() {
        Style::default().add_modifier(Modifier::DIM)
    } else {
        Style::default()
    };
    Line::styled(text, style)
}

fn draw_sessions(frame: &mut Frame, app: &App, theme: &Theme, area: Rect) {
    let open = app.open_session();
    let items: Vec<ListItem> = app
        .sessions
        .iter()
        .map(|s| ListItem::new(session_line(s, open == Some(s.id.as_str()))))
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border(app.focus == Focus::Sessions))
        .title(" sessions ");
    let mut state = ListState::default().with_selected(
        (!app.sessions.is_empty() && app.focus == Focus::Sessions).then_some(app.session),
    );
    let list = List::new(items)
        .block(block)
        .highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    frame.render_stateful_widget(list, area, &mut state);
}

/// A duration in few characters.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m", ms / 60_000),
    }
}

/// The last part of a path.
fn base(path: &str) -> &str {
    path.rsplit('/').find(|p| !p.is_empty()).unwrap_or(path)
}

/// The verdict column: what became of an action.
pub fn verdict_word(row: &Row) -> &'static str {
    match row.verdict.as_deref() {
        Some("deny") => "deny",
        Some("rejected") => "rej",
        Some("confirm") if row.done.is_none() => "ask",
        _ => match row.done.as_ref().and_then(|d| d.status.as_deref()) {
            Some("completed") => "ok",
            Some("failed") => "fail",
            _ => "…",
        },
    }
}

/// What the row says after its columns.
fn row_summary(row: &Row) -> String {
    if let Some(done) = &row.done {
        if done.status.as_deref() == Some("failed") {
            return done.code.clone().unwrap_or_default();
        }
        if !done.paths.is_empty() {
            let more = done.paths.len().saturating_sub(1);
            let first = base(&done.paths[0]);
            return if more > 0 {
                format!("{first} +{more}")
            } else {
                first.to_owned()
            };
        }
    }
    if let Some(why) = &row.why {
        return why.split(':').next().unwrap_or(why).to_owned();
    }
    if let Some(code) = &row.code {
        return code.clone();
    }
    row.arguments.clone().unwrap_or_default()
}

/// One timeline row as a line: seq, mark, primitive, verdict, duration, summary; or a
/// record that is not an action, with its text.
pub fn row_line(row: &Row, theme_colour: bool) -> Line<'static> {
    let theme = Theme {
        colour: theme_colour,
    };
    let mark = if row.abandoned_by_branch.is_some() {
        '~'
    } else if row.parent.is_some() {
        '·'
    } else {
        ' '
    };
    let dim = row.abandoned_by_branch.is_some();
    let base_style = if dim {
        Style::default().add_modifier(Modifier::DIM)
    } else {
        Style::default()
    };
    let Some(primitive) = &row.primitive else {
        let text = row
            .text
            .clone()
            .unwrap_or_else(|| row.kind.replace('_', " "));
        let style = if row.kind == "rewound" {
            theme.fg(Color::Magenta).add_modifier(Modifier::BOLD)
        } else {
            base_style.add_modifier(Modifier::DIM)
        };
        return Line::from(vec![
            Span::styled(format!("{:>4}{mark}", row.seq), base_style),
            Span::styled(format!("── {text}"), style),
        ]);
    };
    let word = verdict_word(row);
    let took = row
        .done
        .as_ref()
        .and_then(|d| d.duration_ms)
        .map(duration)
        .unwrap_or_default();
    let primitive: String = primitive.chars().take(13).collect();
    Line::from(vec![
        Span::styled(format!("{:>4}{mark}{primitive:<13} ", row.seq), base_style),
        Span::styled(
            format!("{word:<4}"),
            if dim { base_style } else { theme.verdict(word) },
        ),
        Span::styled(format!("{took:>6} {}", row_summary(row)), base_style),
    ])
}

fn draw_timeline(frame: &mut Frame, app: &mut App, theme: &Theme, area: Rect) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border(app.focus == Focus::Timeline));
    app.page_rows = area.height.saturating_sub(2) as usize;
    let Some(t) = &app.timeline else {
        let said = if app.sessions.is_empty() {
            "no sessions yet"
        } else {
            "Enter on a session opens its timeline"
        };
        frame.render_widget(Paragraph::new(said).block(block.title(" timeline ")), area);
        return;
    };
    let older = if t.older() { " ↑ older" } else { "" };
    let live = if t.following { "live" } else { "paused: End" };
    let title = format!(
        " {} · {} records · {live}{older} ",
        short_id(&t.session),
        t.records
    );
    let items: Vec<ListItem> = t
        .rows
        .iter()
        .map(|r| ListItem::new(row_line(r, theme.colour)))
        .collect();
    let list = List::new(items)
        .block(block.title(title))
        .highlight_symbol(">")
        .highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = ListState::default().with_selected(Some(app.cursor));
    // Keep the view where it was unless the cursor left it.
    *state.offset_mut() = app.offset.min(app.cursor);
    if app.cursor >= app.offset + app.page_rows.max(1) {
        *state.offset_mut() = app.cursor + 1 - app.page_rows.max(1);
    }
    frame.render_stateful_widget(list, area, &mut state);
    app.offset = state.offset();
}

fn question_lines(q: &QuestionInfo, selected: bool) -> Vec<Line<'static>> {
    let mark = if selected { '>' } else { ' ' };
    let head = format!(
        "{mark}{} #{} {}: {}",
        short_id(&q.session),
        q.seq,
        q.question.kind,
        q.question.question.replace('\n', " ")
    );
    let style = if selected {
        Style::default().add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    vec![Line::styled(head, style)]
}

fn draw_questions(frame: &mut Frame, app: &App, theme: &Theme, area: Rect) {
    let mut lines: Vec<Line> = Vec::new();
    let start = app.question.saturating_sub(QUESTIONS_SHOWN_MAX - 1);
    for (i, q) in app
        .questions
        .iter()
        .enumerate()
        .skip(start)
        .take(QUESTIONS_SHOWN_MAX)
    {
        lines.extend(question_lines(q, i == app.question));
    }
    let hint = match (&app.mode, app.questions.get(app.question)) {
        (Mode::Typing { text, .. }, _) => format!("answer> {text}█  (Enter send, Esc cancel)"),
        (_, Some(q)) if q.question.kind == "confirm" => "a approve  d deny  t type".into(),
        (_, Some(q)) if q.question.kind == "choice" => {
            let choices: Vec<String> = q
                .question
                .choices
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{}) {c}", i + 1))
                .collect();
            format!("t pick: {}  d decline", choices.join(" "))
        }
        _ => "a or t answer  d decline".into(),
    };
    lines.push(Line::styled(
        hint,
        Style::default().add_modifier(Modifier::BOLD),
    ));
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.fg(Color::Yellow).add_modifier(Modifier::BOLD))
        .title(format!(" {} waiting for you ", app.questions.len()));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn step_lines(row: &Row) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let Some(primitive) = &row.primitive else {
        out.push(Line::from(format!(
            "#{} {}",
            row.seq,
            row.kind.replace('_', " ")
        )));
        if let Some(text) = &row.text {
            out.push(Line::from(text.clone()));
        }
        return out;
    };
    let took = row
        .done
        .as_ref()
        .and_then(|d| d.duration_ms)
        .map(|ms| format!(" in {}", duration(ms)))
        .unwrap_or_default();
    let outcome = row
        .done
        .as_ref()
        .map(|d| format!(" → #{} {}", d.seq, d.status.as_deref().unwrap_or("")))
        .unwrap_or_default();
    out.push(Line::from(format!(
        "#{} {primitive} {}{took}{outcome}",
        row.seq,
        row.verdict.as_deref().unwrap_or("")
    )));
    if let Some(why) = &row.why {
        out.push(Line::from(format!("why: {why}")));
    }
    if let Some(args) = &row.arguments {
        out.push(Line::from(format!("args: {args}")));
    }
    if let Some(done) = &row.done {
        if let Some(code) = &done.code {
            out.push(Line::from(format!(
                "failed: [{code}] {}",
                done.text.as_deref().unwrap_or("")
            )));
        }
        if !done.paths.is_empty() {
            out.push(Line::from(format!("changed: {}", done.paths.join(", "))));
        } else if let Some(text) = &done.text {
            out.push(Line::from(format!("→ {text}")));
        }
    }
    out
}

fn draw_step(frame: &mut Frame, app: &App, _theme: &Theme, area: Rect) {
    let row = app.timeline.as_ref().and_then(|t| t.rows.get(app.cursor));
    let (title, lines) = match row {
        Some(r) => (
            format!(" step #{} · Enter: in full · r: rewind here ", r.seq),
            step_lines(r),
        ),
        None => (" step ".into(), Vec::new()),
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

fn draw_detail(frame: &mut Frame, app: &App, theme: &Theme, area: Rect, seq: u64, scroll: usize) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" step #{seq} · ↑↓ PgUp PgDn scroll · Esc back "));
    let lines: Vec<Line> = match &app.detail {
        Some(d) if d.seq == seq => d
            .lines
            .iter()
            .skip(scroll)
            .map(|l| Line::styled(l.text.clone(), theme.tone(l.tone)))
            .collect(),
        _ => vec![Line::from("reading…")],
    };
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_footer(frame: &mut Frame, app: &App, theme: &Theme, area: Rect) {
    let line = match &app.status {
        Some(s) if s.error => Line::styled(
            format!(" ! {}", s.text),
            theme.fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        Some(s) => Line::from(format!(" {}", s.text)),
        None => {
            Line::from(" ↑↓ move  Enter open  Tab pane  a/d/t answer  r rewind  ? help  q quit")
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A box of `width` x `height` in the middle of `area` (smaller when it does not fit).
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// `path` relative to `cwd` when it lies below it.
fn relative<'a>(path: &'a str, cwd: &str) -> &'a str {
    match path.strip_prefix(cwd) {
        Some(rest) if !cwd.is_empty() && rest.starts_with('/') => &rest[1..],
        _ => path,
    }
}

fn preview_lines(preview: Option<&Result<Preview, String>>, cwd: &str) -> Vec<Line<'static>> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    match preview {
        None => vec![Line::from("reading what it would undo…")],
        Some(Err(e)) => vec![Line::styled(format!("cannot rewind: {e}"), bold)],
        Some(Ok(p)) => {
            let mut out = Vec::new();
            let actions: Vec<String> = p
                .undone
                .iter()
                .map(|u| format!("#{} {}", u.seq, u.primitive))
                .collect();
            out.push(Line::styled(
                format!(
                    "undoes {} action(s) by {}; they become branch {}:",
                    p.undone.len(),
                    p.method,
                    p.branch
                ),
                bold,
            ));
            out.push(Line::from(format!("  {}", actions.join(", "))));
            out.push(Line::styled(
                format!("puts back {} path(s):", p.paths.len()),
                bold,
            ));
            for path in p.paths.iter().take(4) {
                out.push(Line::from(format!("  {}", relative(path, cwd))));
            }
            if p.paths.len() > 4 {
                out.push(Line::from(format!("  and {} more", p.paths.len() - 4)));
            }
            out
        }
    }
}

fn draw_rewind(
    frame: &mut Frame,
    app: &App,
    theme: &Theme,
    target: Target,
    preview: Option<&Result<Preview, String>>,
) {
    let mut lines = vec![Line::from(format!("rewind: {}", target.words()))];
    let cwd = app
        .sessions
        .iter()
        .find(|s| Some(s.id.as_str()) == app.open_session())
        .map_or("", |s| s.cwd.as_str());
    lines.extend(preview_lines(preview, cwd));
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "y rewind   k keep/undo this step   any other key: cancel",
        Style::default().add_modifier(Modifier::BOLD),
    ));
    // Two more rows than the lines, for the borders, and room for a wrapped line or two.
    let area = centered(frame.area(), 74, lines.len() as u16 + 4);
    frame.render_widget(Clear, area);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.fg(Color::Magenta).add_modifier(Modifier::BOLD))
        .title(format!(" rewind session {} ", app.title_session()));
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// The keys, as the help box lists them.
pub const HELP: &[(&str, &str)] = &[
    (
        "↑↓ j k PgUp PgDn",
        "move in the pane (up past the top reads older)",
    ),
    ("Home End", "first, newest (End follows the live tail)"),
    ("Tab", "next pane: sessions, timeline, questions"),
    ("Enter", "open a session; a step in full (its diff)"),
    ("a / d", "approve / deny a confirmation; answer / decline"),
    ("t", "type an answer (a choice by number or text)"),
    ("r", "rewind to the selected step (preview, then y)"),
    ("< >", "previous / next runtime of the fleet"),
    ("q", "quit (Ctrl-C too); Esc leaves a box"),
];

fn draw_help(frame: &mut Frame) {
    let area = centered(frame.area(), 72, HELP.len() as u16 + 4);
    frame.render_widget(Clear, area);
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(keys, what)| Line::from(format!("{keys:<18} {what}")))
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from("any key closes this"));
    let block = Block::default().borders(Borders::ALL).title(" keys ");
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use serde_json::json;

    use super::*;
    use crate::app::{Loaded, Request};
    use crate::client::Via;
    use crate::model::{QuestionText, RuntimeInfo};
    use crate::timeline::tests::{action, outcome};
    use crate::timeline::{Ask, Page};

    const SESSION: &str = "0123456789abcdef0123456789abcdef";

    fn screen(app: &mut App) -> (String, ratatui::buffer::Buffer) {
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        terminal.draw(|f| draw(f, app)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let mut text = String::new();
        for y in 0..buffer.area.height {
            for x in 0..buffer.area.width {
                text.push_str(buffer[(x, y)].symbol());
            }
            text.push('\n');
        }
        (text, buffer)
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    /// An app with one runtime, one session open and its rows.
    fn watching(colour: bool) -> App {
        let mut app = App::new(colour, None);
        app.apply(Loaded::Fleet(Ok(vec![RuntimeInfo {
            url: Some("http://127.0.0.1:7411".into()),
            instance: Some("feedbeefcafe".into()),
            ok: true,
            ..RuntimeInfo::default()
        }])));
        let opened = app.apply(Loaded::Sessions {
            via: Via::Own,
            result: Ok(vec![SessionInfo {
                id: SESSION.into(),
                client: Some("claude".into()),
                cwd: "project".into(),
                records: 9,
                ..SessionInfo::default()
            }]),
        });
        assert_eq!(
            opened,
            [Request::Timeline {
                via: Via::Own,
                session: SESSION.into(),
                ask: Ask::Newest
            }],
            "the newest session an agent drives opens by itself"
        );
        let mut write = outcome(3, 2);
        write.paths = vec!["notes.txt".into()];
        let mut denied = action(4, "read_file");
        denied.verdict = Some("deny".into());
        denied.why = Some("path_outside_walls by walls: /etc/shadow is outside".into());
        let page = Page {
            records: 9,
            shown_from: Some(2),
            rows: vec![
                action(2, "write_file"),
                write,
                denied,
                action(5, "run_command"),
            ],
        };
        app.apply(Loaded::Timeline {
            via: Via::Own,
            session: SESSION.into(),
            ask: Ask::Newest,
            result: Ok(page),
        });
        app
    }

    #[test]
    fn the_timeline_shows_primitive_verdict_duration_and_what_changed_in_80x24() {
        let mut app = watching(true);
        let (text, _) = screen(&mut app);
        assert!(
            text.contains("aido watch │ 127.0.0.1:7411 (feedbeef)"),
            "{text}"
        );
        assert!(text.contains("*01234567     9 claude"), "{text}");
        assert!(
            text.contains("01234567 · 9 records · live ↑ older"),
            "{text}"
        );
        assert!(
            text.contains("2 write_file    ok     3ms notes.txt"),
            "{text}"
        );
        assert!(
            text.contains("4 read_file     deny       path_outside_walls by w"),
            "{text}"
        );
        assert!(
            text.contains(">   5 run_command   …"),
            "the newest row is selected: {text}"
        );
        assert!(text.contains("step #5"), "{text}");
        assert!(text.contains("q quit"), "{text}");
        // The refused step's panel gives its code, gate and reason whole.
        app.focus = Focus::Timeline;
        app.key(key(KeyCode::Up));
        let (text, _) = screen(&mut app);
        assert!(text.contains("#4 read_file deny"), "{text}");
        assert!(
            text.contains("why: path_outside_walls by walls: /etc/shadow is outside"),
            "{text}"
        );
    }

    #[test]
    fn no_color_draws_no_colour_but_keeps_the_marks() {
        let mut app = watching(false);
        let (text, buffer) = screen(&mut app);
        for cell in buffer.content() {
            assert_eq!(cell.fg, Color::Reset, "a coloured cell under NO_COLOR");
            assert_eq!(cell.bg, Color::Reset, "a coloured cell under NO_COLOR");
        }
        assert!(text.contains("deny"), "{text}");
        let mut app = watching(true);
        let (_, buffer) = screen(&mut app);
        assert!(
            buffer.content().iter().any(|c| c.fg == Color::Red),
            "colour when allowed"
        );
    }

    #[test]
    fn a_new_record_of_the_tail_shows_and_the_cursor_follows_it() {
        let mut app = watching(true);
        let polls = app.due(std::time::Instant::now());
        assert!(
            polls.contains(&Request::Timeline {
                via: Via::Own,
                session: SESSION.into(),
                ask: Ask::After(5)
            }),
            "{polls:?}"
        );
        app.apply(Loaded::Timeline {
            via: Via::Own,
            session: SESSION.into(),
            ask: Ask::After(5),
            result: Ok(Page {
                records: 7,
                shown_from: Some(6),
                rows: vec![outcome(6, 5), action(7, "list_dir")],
            }),
        });
        let (text, _) = screen(&mut app);
        assert!(text.contains("5 run_command   ok     3ms"), "{text}");
        assert!(text.contains(">   7 list_dir"), "{text}");
    }

    #[test]
    fn scrolling_up_past_the_top_reads_the_page_before() {
        let mut app = watching(true);
        app.focus = Focus::Timeline;
        let mut asked = Vec::new();
        for _ in 0..4 {
            asked.extend(app.key(key(KeyCode::Up)));
        }
        assert_eq!(
            asked,
            [Request::Timeline {
                via: Via::Own,
                session: SESSION.into(),
                ask: Ask::Before(2)
            }]
        );
        app.apply(Loaded::Timeline {
            via: Via::Own,
            session: SESSION.into(),
            ask: Ask::Before(2),
            result: Ok(Page {
                records: 9,
                shown_from: Some(1),
                rows: vec![Row {
                    seq: 1,
                    kind: "session_started".into(),
                    text: Some("started by claude (aido 0.1.0)".into()),
                    ..Row::default()
                }],
            }),
        });
        let (text, _) = screen(&mut app);
        assert!(text.contains(">   1 ── started by claude"), "{text}");
        assert!(!text.contains("↑ older"), "the start is reached: {text}");
    }

    fn asked_to_confirm(app: &mut App) {
        app.apply(Loaded::Questions {
            via: Via::Own,
            result: Ok(vec![QuestionInfo {
                id: "q-00000000000000aa".into(),
                session: SESSION.into(),
                seq: 8,
                question: QuestionText {
                    kind: "confirm".into(),
                    question: "Deploy to production?".into(),
                    ..QuestionText::default()
                },
                asked_ms: 0,
            }]),
        });
    }

    #[test]
    fn a_waiting_question_is_shown_and_a_approves_it() {
        let mut app = watching(true);
        asked_to_confirm(&mut app);
        let (text, _) = screen(&mut app);
        assert!(text.contains("1 waiting for you"), "{text}");
        assert!(
            text.contains(">01234567 #8 confirm: Deploy to production?"),
            "{text}"
        );
        assert!(text.contains("a approve  d deny  t type"), "{text}");
        let asked = app.key(key(KeyCode::Char('a')));
        assert_eq!(
            asked,
            [Request::Answer {
                via: Via::Own,
                id: "q-00000000000000aa".into(),
                content: json!({"approve": true})
            }]
        );
        let asked = app.key(key(KeyCode::Char('d')));
        assert_eq!(
            asked,
            [Request::Answer {
                via: Via::Own,
                id: "q-00000000000000aa".into(),
                content: json!({"approve": false})
            }]
        );
        app.apply(Loaded::Answered {
            id: "q-00000000000000aa".into(),
            result: Ok("{\"approved\":true}".into()),
        });
        let (text, _) = screen(&mut app);
        assert!(text.contains("answered q-00000000000000aa"), "{text}");
    }

    #[test]
    fn a_typed_answer_picks_a_choice_by_number() {
        let mut app = watching(true);
        app.apply(Loaded::Questions {
            via: Via::Own,
            result: Ok(vec![QuestionInfo {
                id: "q-1".into(),
                session: SESSION.into(),
                seq: 8,
                question: QuestionText {
                    kind: "choice".into(),
                    question: "Which branch?".into(),
                    choices: vec!["main".into(), "release-7".into()],
                    multiple: false,
                },
                asked_ms: 0,
            }]),
        });
        app.key(key(KeyCode::Char('t')));
        app.key(key(KeyCode::Char('2')));
        let (text, _) = screen(&mut app);
        assert!(text.contains("answer> 2█"), "{text}");
        let asked = app.key(key(KeyCode::Enter));
        assert_eq!(
            asked,
            [Request::Answer {
                via: Via::Own,
                id: "q-1".into(),
                content: json!({"choice": "release-7"})
            }]
        );
    }

    #[test]
    fn a_rewind_shows_its_preview_and_runs_only_on_y() {
        let mut app = watching(true);
        app.focus = Focus::Timeline;
        app.key(key(KeyCode::Home));
        let asked = app.key(key(KeyCode::Char('r')));
        let target = Target {
            seq: 2,
            keep: false,
        };
        assert_eq!(
            asked,
            [Request::Preview {
                via: Via::Own,
                session: SESSION.into(),
                target
            }]
        );
        app.apply(Loaded::Preview {
            target,
            result: Ok(Preview {
                cut: 1,
                undone: vec![
                    crate::model::Undone {
                        seq: 2,
                        primitive: "write_file".into(),
                    },
                    crate::model::Undone {
                        seq: 5,
                        primitive: "run_command".into(),
                    },
                ],
                paths: vec!["notes.txt".into()],
                method: "undo".into(),
                branch: 1,
            }),
        });
        let (text, _) = screen(&mut app);
        assert!(
            text.contains("rewind: undo #2 and everything after it"),
            "{text}"
        );
        assert!(
            text.contains("undoes 2 action(s) by undo; they become branch 1:"),
            "{text}"
        );
        assert!(text.contains("#2 write_file, #5 run_command"), "{text}");
        assert!(
            text.contains("│  notes.txt "),
            "relative to the session's directory: {text}"
        );
        let asked = app.key(key(KeyCode::Char('y')));
        assert_eq!(
            asked,
            [Request::Rewind {
                via: Via::Own,
                session: SESSION.into(),
                target
            }]
        );
        // Another key cancels.
        app.key(key(KeyCode::Char('r')));
        assert!(app.key(key(KeyCode::Char('n'))).is_empty());
        assert_eq!(app.mode, Mode::Browse);
        // Done: the timeline is read again (what it abandoned is marked).
        let asked = app.apply(Loaded::Rewound {
            via: Via::Own,
            session: SESSION.into(),
            result: Ok("rewound before #2".into()),
        });
        assert_eq!(
            asked,
            [Request::Timeline {
                via: Via::Own,
                session: SESSION.into(),
                ask: Ask::Newest
            }]
        );
    }

    #[test]
    fn y_before_the_preview_was_read_rewinds_nothing() {
        let mut app = watching(true);
        app.key(key(KeyCode::Char('r')));
        assert!(app.key(key(KeyCode::Char('y'))).is_empty());
        let (text, _) = screen(&mut app);
        assert!(
            text.contains("nothing rewound: the rewind had no preview"),
            "{text}"
        );
        // A preview the runtime refused cannot be confirmed either.
        let asked = app.key(key(KeyCode::Char('r')));
        let Request::Preview { target, .. } = asked[0].clone() else {
            panic!("{asked:?}");
        };
        app.apply(Loaded::Preview {
            target,
            result: Err("[watch_refused] [rewind_target_abandoned] #5 was abandoned".into()),
        });
        let (text, _) = screen(&mut app);
        assert!(
            text.contains("cannot rewind: [watch_refused] [rewind_target_abandoned]"),
            "{text}"
        );
        assert!(app.key(key(KeyCode::Char('y'))).is_empty());
    }

    #[test]
    fn a_typed_answer_goes_to_the_question_it_was_typed_for() {
        let mut app = watching(true);
        asked_to_confirm(&mut app);
        app.key(key(KeyCode::Char('t')));
        app.key(key(KeyCode::Char('y')));
        // Meanwhile it was answered elsewhere and another came.
        app.apply(Loaded::Questions {
            via: Via::Own,
            result: Ok(vec![QuestionInfo {
                id: "q-other".into(),
                question: QuestionText {
                    kind: "confirm".into(),
                    question: "Delete everything?".into(),
                    ..QuestionText::default()
                },
                ..QuestionInfo::default()
            }]),
        });
        assert!(
            app.key(key(KeyCode::Enter)).is_empty(),
            "not sent to another question"
        );
        let (text, _) = screen(&mut app);
        assert!(
            text.contains("q-00000000000000aa is no longer waiting"),
            "{text}"
        );
    }

    #[test]
    fn abandoned_rows_and_rewinds_are_marked() {
        let mut app = watching(false);
        let mut gone = action(2, "write_file");
        gone.abandoned_by_branch = Some(1);
        let rewound = Row {
            seq: 6,
            kind: "rewound".into(),
            text: Some("rewound before #2 (undo): #2–#5 are now branch 1".into()),
            branch: Some(1),
            ..Row::default()
        };
        app.apply(Loaded::Timeline {
            via: Via::Own,
            session: SESSION.into(),
            ask: Ask::Newest,
            result: Ok(Page {
                records: 6,
                shown_from: Some(2),
                rows: vec![gone, rewound],
            }),
        });
        let (text, _) = screen(&mut app);
        assert!(text.contains("2~write_file"), "{text}");
        assert!(text.contains(">   6 ── rewound before #2 (undo)"), "{text}");
        assert!(
            text.contains("│rewound before #2 (undo): #2–#5 are now branch 1"),
            "{text}"
        );
    }

    #[test]
    fn a_step_in_full_shows_its_diff_and_q_quits() {
        let mut app = watching(true);
        app.focus = Focus::Timeline;
        app.key(key(KeyCode::Home));
        let asked = app.key(key(KeyCode::Enter));
        assert_eq!(
            asked,
            [Request::Step {
                via: Via::Own,
                session: SESSION.into(),
                seq: 2
            }]
        );
        let step = json!({
            "record": {"seq": 2, "event": "action_proposed",
                "action": {"type": "write_file", "path": "notes.txt", "content": "hi\n"},
                "verdict": {"verdict": "allow"}},
            "outcome": {"seq": 3, "event": "action_completed", "duration_ms": 3, "outcome": {"text": "wrote"}},
            "files": [{"path": "notes.txt", "effect": "file_written",
                "before": "hello\n", "after": "hi\n"}],
        });
        app.apply(Loaded::Step {
            via: Via::Own,
            seq: 2,
            result: Ok(crate::detail::of_step(&step)),
        });
        let (text, _) = screen(&mut app);
        assert!(
            text.contains("step #2 · ↑↓ PgUp PgDn scroll · Esc back"),
            "{text}"
        );
        assert!(text.contains("-hello"), "{text}");
        assert!(text.contains("+hi"), "{text}");
        app.key(key(KeyCode::Esc));
        assert_eq!(app.mode, Mode::Browse);
        app.key(key(KeyCode::Char('q')));
        assert!(app.quit);
    }

    #[test]
    fn every_box_draws_on_a_tiny_terminal_without_panicking() {
        let mut app = watching(true);
        asked_to_confirm(&mut app);
        let modes = [
            Mode::Browse,
            Mode::Help,
            Mode::Typing {
                id: "q-00000000000000aa".into(),
                text: "yes".into(),
            },
            Mode::Detail { seq: 2, scroll: 0 },
            Mode::Rewind {
                target: Target { seq: 2, keep: true },
                preview: None,
            },
        ];
        for (width, height) in [(1, 1), (20, 6), (40, 12), (200, 60)] {
            for mode in &modes {
                app.mode = mode.clone();
                let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
                terminal.draw(|f| draw(f, &mut app)).unwrap();
            }
        }
    }

    #[test]
    fn the_help_lists_every_key() {
        let mut app = watching(true);
        app.key(key(KeyCode::Char('?')));
        let (text, _) = screen(&mut app);
        for (keys, _) in HELP {
            assert!(text.contains(keys), "{keys} missing: {text}");
        }
    }
}
