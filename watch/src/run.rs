//! The terminal: taken (raw mode, the alternate screen) after the runtime answered once,
//! given back when `aido watch` quits, fails or panics (ratatui's panic hook restores it
//! before the panic is printed). The loop draws, hands the worker what the app asks for and
//! the app what the worker read, and reads keys.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyEventKind};

use crate::app::{App, Loaded, Request};
use crate::client::{Client, Endpoint, Via};
use crate::error::WatchError;
use crate::{ui, worker};

/// How long the loop waits for a key before it looks at the answers and timers again.
pub const FRAME_WAIT: Duration = Duration::from_millis(50);

/// What `aido watch` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The runtime to watch.
    pub endpoint: Endpoint,
    /// A session to open first (an id or a unique prefix).
    pub session: Option<String>,
    /// Draw in colour.
    pub colour: bool,
}

/// Whether colour is wanted: not when `NO_COLOR` is set to anything but empty
/// (<https://no-color.org>).
pub fn colour_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Watch until the person quits.
pub fn run(options: Options) -> Result<(), WatchError> {
    let client = Client::new(&options.endpoint)?;
    // A runtime that is not there is said plainly, before the screen is taken.
    client.get(Via::Own, "runtime")?;
    let (requests, to_worker) = mpsc::sync_channel::<Request>(worker::QUEUE_MAX);
    let (answers, from_worker) = mpsc::channel::<Loaded>();
    std::thread::Builder::new()
        .name("aido-watch-worker".into())
        .spawn(move || worker::serve(client, to_worker, answers))?;
    let mut app = App::new(options.colour, options.session);
    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, &mut app, &requests, &from_worker);
    ratatui::restore();
    result
}

fn send(app: &mut App, requests: &SyncSender<Request>, asked: Vec<Request>) {
    for request in asked {
        match requests.try_send(request) {
            Ok(()) => {}
            Err(TrySendError::Full(request) | TrySendError::Disconnected(request)) => {
                app.dropped(&request);
            }
        }
    }
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    app: &mut App,
    requests: &SyncSender<Request>,
    answers: &Receiver<Loaded>,
) -> Result<(), WatchError> {
    loop {
        terminal.draw(|frame| ui::draw(frame, app))?;
        if app.quit {
            return Ok(());
        }
        loop {
            match answers.try_recv() {
                Ok(loaded) => {
                    let asked = app.apply(loaded);
                    send(app, requests, asked);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    return Err(WatchError::Terminal(std::io::Error::other(
                        "the worker that asks the runtime stopped",
                    )));
                }
            }
        }
        let asked = app.due(Instant::now());
        send(app, requests, asked);
        if event::poll(FRAME_WAIT)?
            && let Event::Key(key) = event::read()?
            && key.kind == KeyEventKind::Press
        {
            let asked = app.key(key);
            send(app, requests, asked);
        }
    }
}
