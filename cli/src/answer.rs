//! `aido answer`: a person answers, out of band, a question an agent's client could not show
//! (it came back `needs_human` with an id). This is the only way to answer a stored question:
//! no MCP tool does it, so an agent can never answer itself (and its commands run in a sandbox
//! that hides AIDO_HOME, where the store lives). The answer names who gave it (`cli` and
//! `$USER`) in the journal; the first answer from any surface wins, and a later one is refused
//! `question_already_answered` (or `question_closed` once the asking call stopped waiting).

use std::path::Path;
use std::process::ExitCode;

use aido_actors::Clock;
use aido_actors::human::{Answerer, HumanError, Kind, QUESTIONS_FILE, Questions, Stored, Surface};
use anyhow::Result;
use serde_json::{Value, json};

/// `aido answer --list`: the questions waiting for an answer.
pub fn list(home: &Path, as_json: bool) -> Result<ExitCode> {
    let pending = open(home)?.pending().map_err(coded)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&pending)?);
        return Ok(ExitCode::SUCCESS);
    }
    if pending.is_empty() {
        println!("no questions are waiting");
    }
    for q in &pending {
        println!("{}  (session {}, seq {})", q.id, q.session, q.seq);
        println!("  {}", q.question.question);
        println!("  answer with: {}", how(q));
    }
    Ok(ExitCode::SUCCESS)
}

/// `aido answer ID WORDS...` (or `--decline`).
pub fn answer(home: &Path, id: &str, words: &[String], decline: bool) -> Result<ExitCode> {
    let stored = open(home)?
        .get(id)
        .map_err(coded)?
        .ok_or_else(|| coded(HumanError::QuestionNotFound { id: id.to_owned() }))?;
    let now_ms = aido_actors::SystemClock::default().now_ms();
    let content = if decline {
        if !words.is_empty() {
            anyhow::bail!("--decline takes no answer");
        }
        None
    } else {
        Some(content(&stored, words).map_err(coded)?)
    };
    // Who answers, for the journal: the command line, and the user it runs as.
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .or_else(|| {
            use std::os::unix::fs::MetadataExt as _;
            let uid = std::fs::metadata("/proc/self").ok()?.uid();
            Some(format!("uid {uid}"))
        });
    let by = Answerer::new(Surface::Cli, user.as_deref());
    let done = aido_actors::human::answer_stored(
        &home.join(QUESTIONS_FILE),
        id,
        content.as_ref(),
        now_ms,
        &by,
    )
    .map_err(coded)?;
    match &done.answer {
        Some(a) => println!("answered {id}: {a}"),
        None => println!("declined {id}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn open(home: &Path) -> Result<Questions> {
    std::fs::create_dir_all(home)?;
    Questions::open(&home.join(QUESTIONS_FILE)).map_err(coded)
}

fn coded(e: HumanError) -> anyhow::Error {
    anyhow::anyhow!("[{}] {e}", e.code())
}

/// What to type for a question.
fn how(q: &Stored) -> String {
    match &q.question.kind {
        Kind::Text => format!("aido answer {} YOUR ANSWER", q.id),
        Kind::Confirm => format!("aido answer {} yes|no", q.id),
        Kind::Choice { choices, multiple } => {
            let listed: Vec<String> = choices
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{}={c:?}", i + 1))
                .collect();
            let many = if *multiple { " (one or more)" } else { "" };
            format!("aido answer {} CHOICE{many}; {}", q.id, listed.join(" "))
        }
    }
}

/// The form content a person's words stand for: the text, an explicit `yes` or `no`, or the
/// choices (by text or by number).
fn content(q: &Stored, words: &[String]) -> Result<Value, HumanError> {
    let invalid = |why: &str| HumanError::AnswerInvalid {
        why: why.to_owned(),
    };
    if words.is_empty() {
        return Err(invalid("give an answer (or --decline)"));
    }
    Ok(match &q.question.kind {
        Kind::Text => json!({"answer": words.join(" ")}),
        // Only the word yes approves; no is no; anything else is refused rather than guessed.
        Kind::Confirm => match words {
            [w] if w.eq_ignore_ascii_case("yes") => json!({"approve": true}),
            [w] if w.eq_ignore_ascii_case("no") => json!({"approve": false}),
            _ => return Err(invalid("a confirmation takes exactly yes or no")),
        },
        Kind::Choice { choices, multiple } => {
            let picked: Vec<&str> = words
                .iter()
                .map(|w| match w.parse::<usize>() {
                    Ok(n) if (1..=choices.len()).contains(&n) => choices[n - 1].as_str(),
                    _ => w.as_str(),
                })
                .collect();
            if *multiple {
                json!({"choices": picked})
            } else if let [one] = picked.as_slice() {
                json!({"choice": one})
            } else {
                return Err(invalid("this question takes one choice"));
            }
        }
    })
}
