//! The body protocol, held by two small bodies under a real supervisor: a serial one (its work
//! in `handle`) and a concurrent one (its work on the blocking pool and on tasks).
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aido_actions::Failure;
use aido_call::{Body, Calls, RESTARTS_MAX, Reply, Restarted, Slot, Supervised, Turn};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

/// A serial body: a counter it owns; `Panic` panics in its handle.
struct Counter {
    count: u32,
}

enum CounterMsg {
    Add(u32, Reply<u32>),
    Panic(Reply<u32>),
}

impl Body for Counter {
    const NAME: &'static str = "counter";
    type Args = u32;
    type Msg = CounterMsg;

    async fn build(start: u32) -> Result<Self, String> {
        Ok(Self { count: start })
    }

    async fn handle(&mut self, msg: CounterMsg, _calls: &Calls) {
        match msg {
            CounterMsg::Add(n, reply) => {
                let Some(reply) = reply.take(true) else {
                    return;
                };
                self.count += n;
                reply.send(Ok(self.count));
            }
            CounterMsg::Panic(reply) => {
                let _held = reply;
                panic!("the counter panics on purpose");
            }
        }
    }
}

/// A concurrent body: each call sleeps on the blocking pool or a task, counted in `ran`.
struct Sleeper {
    ran: Arc<AtomicU32>,
}

enum SleeperMsg {
    Block(u64, Turn, Reply<u64>),
    Task(u64, Reply<u64>),
    PanicInWork(Reply<u64>),
    PanicInTask(Reply<u64>),
}

impl Body for Sleeper {
    const NAME: &'static str = "sleeper";
    type Args = Arc<AtomicU32>;
    type Msg = SleeperMsg;

    async fn build(ran: Arc<AtomicU32>) -> Result<Self, String> {
        Ok(Self { ran })
    }

    async fn handle(&mut self, msg: SleeperMsg, calls: &Calls) {
        let ran = self.ran.clone();
        match msg {
            SleeperMsg::Block(ms, turn, reply) => calls.blocking(reply, turn, false, move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(ms));
                Ok(ms)
            }),
            SleeperMsg::Task(ms, reply) => {
                calls.task(reply, Turn::Shared, true, move |_| async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(ms)
                })
            }
            SleeperMsg::PanicInWork(reply) => calls.blocking(reply, Turn::Shared, true, |_| {
                panic!("the sleeper's blocking work panics")
            }),
            SleeperMsg::PanicInTask(reply) => calls.task(reply, Turn::Shared, true, |_| async {
                panic!("the sleeper's task panics")
            }),
        }
    }
}

/// A concurrent body whose calls share nothing: a panic is only its call's failure.
struct Steady;

impl Body for Steady {
    const NAME: &'static str = "steady";
    const RESTART_AFTER_PANIC: bool = false;
    type Args = ();
    type Msg = (bool, Reply<u32>);

    async fn build((): ()) -> Result<Self, String> {
        Ok(Self)
    }

    async fn handle(&mut self, (panics, reply): (bool, Reply<u32>), calls: &Calls) {
        calls.task(reply, Turn::Shared, false, move |_| async move {
            assert!(!panics, "the steady body's task panics");
            Ok(7)
        });
    }
}

/// The bodies under test and the supervisor's record of what became of them.
struct Table {
    counter: Slot<Counter>,
    sleeper: Slot<Sleeper>,
    steady: Slot<Steady>,
    restarts: std::sync::Mutex<Vec<(&'static str, Restarted, String)>>,
}

impl Table {
    fn all(&self) -> [&dyn Supervised; 3] {
        [&self.counter, &self.sleeper, &self.steady]
    }
}

struct Supervisor;

impl Actor for Supervisor {
    type Msg = ();
    type State = Arc<Table>;
    type Arguments = Arc<Table>;

    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        table: Arc<Table>,
    ) -> Result<Arc<Table>, ActorProcessingErr> {
        for body in table.all() {
            body.start(myself.get_cell()).await?;
        }
        Ok(table)
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: SupervisionEvent,
        table: &mut Arc<Table>,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            let why = error.to_string();
            if let Some(body) = table.all().into_iter().find(|b| b.is(cell.get_id())) {
                let became = body.restart(myself.get_cell(), &why).await;
                if let Ok(mut seen) = table.restarts.lock() {
                    seen.push((body.name(), became, why));
                }
            }
        }
        Ok(())
    }
}

async fn table() -> (Arc<Table>, Arc<AtomicU32>, ActorRef<()>) {
    let ran = Arc::new(AtomicU32::new(0));
    let table = Arc::new(Table {
        counter: Slot::new(10, None),
        sleeper: Slot::new(ran.clone(), None),
        steady: Slot::new((), None),
        restarts: std::sync::Mutex::new(Vec::new()),
    });
    let (supervisor, _) = Actor::spawn(None, Supervisor, table.clone()).await.unwrap();
    (table, ran, supervisor)
}

const LONG: Duration = Duration::from_secs(10);

fn code<T: std::fmt::Debug>(answer: &Result<T, Failure>) -> &str {
    match answer {
        Ok(v) => panic!("answered {v:?}"),
        Err(f) => &f.code,
    }
}

/// Wait until the supervisor has seen `n` failures.
async fn restarted(table: &Table, n: usize) -> Vec<(&'static str, Restarted, String)> {
    for _ in 0..200 {
        let seen = table.restarts.lock().unwrap().clone();
        if seen.len() >= n {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the supervisor saw fewer than {n} failures");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serial_body_that_panics_answers_with_its_own_panic_and_is_restarted_fresh() {
    let (table, _, supervisor) = table().await;
    assert_eq!(
        table
            .counter
            .ask(LONG, |r| CounterMsg::Add(5, r))
            .await
            .unwrap(),
        15
    );
    let crashed = table.counter.ask(LONG, CounterMsg::Panic).await;
    assert_eq!(code(&crashed), "body_crashed");
    let message = crashed.unwrap_err().message;
    assert!(
        message.contains("the counter panics on purpose"),
        "{message}"
    );
    let seen = restarted(&table, 1).await;
    assert_eq!((seen[0].0, &seen[0].1), ("counter", &Restarted::Again));
    // Rebuilt from its arguments: the state it had is gone, the body serves again.
    let mut after = table.counter.ask(LONG, |r| CounterMsg::Add(1, r)).await;
    for _ in 0..100 {
        if after.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        after = table.counter.ask(LONG, |r| CounterMsg::Add(1, r)).await;
    }
    assert_eq!(after.unwrap(), 11);
    supervisor.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_concurrent_work_is_that_calls_failure_and_the_others_finish() {
    let (table, ran, supervisor) = table().await;
    // A slow call in flight while another call of the same body panics on the blocking pool.
    let slow = {
        let table = table.clone();
        tokio::spawn(async move {
            table
                .sleeper
                .ask(LONG, |r| SleeperMsg::Block(300, Turn::Shared, r))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let crashed = table.sleeper.ask(LONG, SleeperMsg::PanicInWork).await;
    assert_eq!(code(&crashed), "body_crashed");
    assert!(
        crashed
            .unwrap_err()
            .message
            .contains("blocking work panics"),
        "its own panic"
    );
    assert_eq!(
        slow.await.unwrap().unwrap(),
        300,
        "the call in flight finished"
    );
    let seen = restarted(&table, 1).await;
    assert_eq!(seen[0].0, "sleeper");
    // A panic on a task is its call's own too, and never reported for another body.
    let crashed = table.sleeper.ask(LONG, SleeperMsg::PanicInTask).await;
    let message = crashed.unwrap_err().message;
    assert!(message.contains("the sleeper's task panics"), "{message}");
    // A call sent before the restart may find the old body gone ("try again"): the next one
    // goes after it.
    restarted(&table, 2).await;
    assert_eq!(
        table
            .counter
            .ask(LONG, |r| CounterMsg::Add(1, r))
            .await
            .unwrap(),
        11
    );
    assert_eq!(
        table
            .sleeper
            .ask(LONG, |r| SleeperMsg::Task(1, r))
            .await
            .unwrap(),
        1
    );
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    supervisor.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_turn_comes_after_its_deadline_never_runs() {
    let (table, ran, supervisor) = table().await;
    let holder = {
        let table = table.clone();
        tokio::spawn(async move {
            table
                .sleeper
                .ask(LONG, |r| SleeperMsg::Block(400, Turn::Exclusive, r))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let late = table
        .sleeper
        .ask(Duration::from_millis(100), |r| {
            SleeperMsg::Block(0, Turn::Shared, r)
        })
        .await;
    assert_eq!(code(&late), "body_timeout");
    assert_eq!(holder.await.unwrap().unwrap(), 400);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the late call never ran");
    supervisor.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_its_restart_budget_answers_body_failed() {
    let (table, _, supervisor) = table().await;
    for n in 1..=RESTARTS_MAX as usize + 1 {
        let mut crashed = table.counter.ask(LONG, CounterMsg::Panic).await;
        for _ in 0..100 {
            // Between a crash and its restart the body is down: the call is refused as crashed.
            if crashed
                .as_ref()
                .err()
                .is_some_and(|f| f.message.contains("on purpose"))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            crashed = table.counter.ask(LONG, CounterMsg::Panic).await;
        }
        assert_eq!(code(&crashed), "body_crashed");
        restarted(&table, n).await;
    }
    let seen = restarted(&table, RESTARTS_MAX as usize + 1).await;
    assert!(
        matches!(seen.last().unwrap().1, Restarted::Failed { restarts, .. } if restarts == RESTARTS_MAX),
        "{:?}",
        seen.last()
    );
    let refused = table.counter.ask(LONG, |r| CounterMsg::Add(1, r)).await;
    assert_eq!(code(&refused), "body_failed");
    // The other body is untouched.
    assert_eq!(
        table
            .sleeper
            .ask(LONG, |r| SleeperMsg::Task(1, r))
            .await
            .unwrap(),
        1
    );
    supervisor.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_goes_on_after_a_panic_serves_the_very_next_call() {
    let (table, _, supervisor) = table().await;
    for _ in 0..(RESTARTS_MAX + 2) {
        let crashed = table.steady.ask(LONG, |r| (true, r)).await;
        assert!(
            crashed
                .unwrap_err()
                .message
                .contains("steady body's task panics"),
            "its own panic"
        );
        assert_eq!(table.steady.ask(LONG, |r| (false, r)).await.unwrap(), 7);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(table.restarts.lock().unwrap().is_empty(), "never restarted");
    supervisor.stop(None);
}
