//! The Rhai engine aido runs scripts in, with every limit set.
//!
//! `Engine::new_raw()` plus only the packages a script needs (arithmetic, logic, strings,
//! arrays, maps, iterators, math, bit fields): no module loading (rhai's `no_module`), no
//! `eval`, no clock (`no_time`) and no `sleep` (the language-core package is left out);
//! `print` and `debug` go to the call's log (bounded), never to stdout. Operations, call
//! depth, expression depth, string, array and map sizes, variables and functions are all
//! bounded; `on_progress` stops the script at its deadline or when the agent cancels.
//!
//! The only way out is `run(primitive, #{args})`: the host call is sent to the async side,
//! which runs it as a child action (judged by the policy and journaled on its own), and the
//! script's thread waits on a std channel, bounded by the deadline. The engine never touches
//! tokio: it runs on a blocking thread, so nothing here can block a runtime worker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aido_actions::script::Object;
use aido_actions::{Action, Body};
use rhai::packages::{
    ArithmeticPackage, BasicArrayPackage, BasicIteratorPackage, BasicMapPackage, BasicMathPackage,
    BasicStringPackage, BitFieldPackage, LogicPackage, MoreStringPackage, Package,
};
use rhai::{Dynamic, Engine, EvalAltResult, Position, Scope, Shared};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::error::ScriptError;

/// The bounds every script runs within.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most operations one run may take (script_operations_max).
    pub operations_max: u64,
    /// Deepest nesting of function calls (script_call_levels_max).
    pub call_levels_max: usize,
    /// Deepest expression at the top level and inside functions.
    pub expr_depth_max: usize,
    /// Deepest expression inside a function.
    pub fn_expr_depth_max: usize,
    /// Longest string, in bytes.
    pub string_bytes_max: usize,
    /// Most items of an array.
    pub array_items_max: usize,
    /// Most entries of a map.
    pub map_items_max: usize,
    /// Most variables in scope (script_variables_max).
    pub variables_max: usize,
    /// Most functions a script may define.
    pub functions_max: usize,
    /// Most host calls one run may make (script_host_calls_max).
    pub host_calls_max: usize,
    /// Most lines `print` and `debug` keep.
    pub log_lines_max: usize,
    /// Longest line kept, in bytes.
    pub log_line_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            operations_max: 1_000_000,
            call_levels_max: 32,
            expr_depth_max: 64,
            fn_expr_depth_max: 32,
            string_bytes_max: 1 << 20,
            array_items_max: 10_000,
            map_items_max: 10_000,
            variables_max: 1_000,
            functions_max: 256,
            host_calls_max: 256,
            log_lines_max: 100,
            log_line_bytes_max: 1_000,
        }
    }
}

/// When a run must stop.
#[derive(Clone, Debug)]
pub struct Stop {
    /// The instant the call's deadline passes.
    pub deadline: Instant,
    /// The deadline as configured (for the error).
    pub timeout_ms: u64,
    /// The agent's cancellation.
    pub cancel: CancellationToken,
}

/// A host call on its way to the async side.
pub struct HostCall {
    /// The child action.
    pub action: Action,
    /// Where its answer goes.
    pub reply: SyncSender<HostAnswer>,
}

/// What a host call returned: the child's seq and output, or how it failed.
pub type HostAnswer = Result<(u64, Value), ChildFailed>;

/// A child action that was refused or failed.
#[derive(Clone, Debug)]
pub struct ChildFailed {
    /// Its proposal's seq, when it was journaled.
    pub seq: Option<u64>,
    /// Its code.
    pub code: String,
    /// Its message.
    pub message: String,
}

/// A finished run.
#[derive(Debug)]
pub struct Ran {
    /// The script's value, as JSON.
    pub result: Value,
    /// What it printed.
    pub log: Vec<String>,
}

/// The packages, built once per process.
fn packages() -> &'static [Shared<rhai::Module>] {
    static PACKAGES: OnceLock<Vec<Shared<rhai::Module>>> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        vec![
            ArithmeticPackage::new().as_shared_module(),
            LogicPackage::new().as_shared_module(),
            BasicStringPackage::new().as_shared_module(),
            MoreStringPackage::new().as_shared_module(),
            BasicIteratorPackage::new().as_shared_module(),
            BasicArrayPackage::new().as_shared_module(),
            BasicMapPackage::new().as_shared_module(),
            BasicMathPackage::new().as_shared_module(),
            BitFieldPackage::new().as_shared_module(),
        ]
    })
}

/// A bounded engine with no way out but the host calls registered later.
fn engine(limits: &Limits) -> Engine {
    let mut engine = Engine::new_raw();
    for package in packages() {
        engine.register_global_module(package.clone());
    }
    engine
        .set_max_operations(limits.operations_max)
        .set_max_call_levels(limits.call_levels_max)
        .set_max_expr_depths(limits.expr_depth_max, limits.fn_expr_depth_max)
        .set_max_string_size(limits.string_bytes_max)
        .set_max_array_size(limits.array_items_max)
        .set_max_map_size(limits.map_items_max)
        .set_max_variables(limits.variables_max)
        .set_max_functions(limits.functions_max);
    engine.disable_symbol("eval");
    // Nothing reaches stdout (an MCP server over stdio must never print) until `run`
    // captures it.
    engine.on_print(|_| {});
    engine.on_debug(|_, _, _| {});
    engine
}

/// Check that a source compiles within the limits.
pub fn compile(source: &str, limits: &Limits) -> Result<(), ScriptError> {
    engine(limits)
        .compile(source)
        .map(drop)
        .map_err(|e| ScriptError::Parse { why: e.to_string() })
}

/// A host call that was refused or failed, kept to tell an uncaught one from a thrown value.
#[derive(Clone, Debug)]
struct FailedCall {
    index: usize,
    primitive: String,
    seq: Option<u64>,
    code: String,
    message: String,
}

/// What one run's host calls share with the classifier of its errors.
#[derive(Default)]
struct HostState {
    /// Host calls made.
    calls: AtomicUsize,
    /// Failed host calls.
    failures: Mutex<Vec<FailedCall>>,
    /// An error no script may catch, raised in a host call.
    fatal: Mutex<Option<ScriptError>>,
}

/// Run `source` with `args`, sending each host call to `host`.
pub fn run(
    source: &str,
    args: &Object,
    limits: &Limits,
    stop: &Stop,
    host: tokio::sync::mpsc::UnboundedSender<HostCall>,
) -> Result<Ran, ScriptError> {
    let mut engine = engine(limits);
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let keep = {
        let (log, lines, bytes) = (log.clone(), limits.log_lines_max, limits.log_line_bytes_max);
        move |line: &str| {
            if let Ok(mut log) = log.lock()
                && log.len() < lines
            {
                let mut end = line.len().min(bytes);
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                log.push(line[..end].to_owned());
            }
        }
    };
    let keep_debug = keep.clone();
    engine.on_print(keep);
    engine.on_debug(move |line, _, _| keep_debug(line));
    let watch = stop.clone();
    engine.on_progress(move |ops| {
        // Checked every 256 operations: a clock read per operation would cost more than the
        // operation.
        if ops % 256 != 0 {
            return None;
        }
        if watch.cancel.is_cancelled() {
            Some(Dynamic::from("cancelled"))
        } else if Instant::now() >= watch.deadline {
            Some(Dynamic::from("deadline"))
        } else {
            None
        }
    });
    let state = Arc::new(HostState::default());
    {
        let (state, stop, max) = (state.clone(), stop.clone(), limits.host_calls_max);
        let host = host.clone();
        engine.register_fn(
            "run",
            move |primitive: &str, args: rhai::Map| -> Result<Dynamic, Box<EvalAltResult>> {
                host_call(&state, &stop, max, &host, primitive, args)
            },
        );
    }
    {
        let (state, stop, max) = (state.clone(), stop.clone(), limits.host_calls_max);
        engine.register_fn(
            "run",
            move |primitive: &str| -> Result<Dynamic, Box<EvalAltResult>> {
                host_call(&state, &stop, max, &host, primitive, rhai::Map::new())
            },
        );
    }
    let ast = engine
        .compile(source)
        .map_err(|e| ScriptError::Parse { why: e.to_string() })?;
    let mut scope = Scope::new();
    let args = rhai::serde::to_dynamic(args).map_err(|e| ScriptError::Runtime {
        why: format!("the arguments: {e}"),
    })?;
    scope.push_constant("args", args);
    let evaluated = engine.eval_ast_with_scope::<Dynamic>(&mut scope, &ast);
    let value = match evaluated {
        Ok(v) => v,
        Err(e) => return Err(classify(*e, limits, stop, &state)),
    };
    let result: Value = rhai::serde::from_dynamic(&value).map_err(|e| ScriptError::Runtime {
        why: format!("its value is not JSON: {e}"),
    })?;
    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    Ok(Ran { result, log })
}

fn host_call(
    state: &HostState,
    stop: &Stop,
    max: usize,
    host: &tokio::sync::mpsc::UnboundedSender<HostCall>,
    primitive: &str,
    args: rhai::Map,
) -> Result<Dynamic, Box<EvalAltResult>> {
    let fatal = |e: ScriptError| -> Box<EvalAltResult> {
        if let Ok(mut f) = state.fatal.lock() {
            f.get_or_insert(e);
        }
        Box::new(EvalAltResult::ErrorTerminated(
            Dynamic::UNIT,
            Position::NONE,
        ))
    };
    let index = state.calls.fetch_add(1, Ordering::SeqCst);
    if index >= max {
        return Err(fatal(ScriptError::HostCallsExceeded { max }));
    }
    if Action::body_of(primitive) == Some(Body::Script) {
        return Err(fatal(ScriptError::HostCallRefused {
            primitive: primitive.to_owned(),
        }));
    }
    let failed = |seq: Option<u64>, code: String, message: String| -> Box<EvalAltResult> {
        let thrown = json!({
            "host_call": index, "primitive": primitive, "seq": seq,
            "code": code, "message": message,
        });
        if let Ok(mut f) = state.failures.lock() {
            f.push(FailedCall {
                index,
                primitive: primitive.to_owned(),
                seq,
                code,
                message,
            });
        }
        let value = rhai::serde::to_dynamic(thrown).unwrap_or_default();
        Box::new(EvalAltResult::ErrorRuntime(value, Position::NONE))
    };
    let arguments: Value = rhai::serde::from_dynamic(&Dynamic::from_map(args))
        .map_err(|e| failed(None, "invalid_arguments".into(), e.to_string()))?;
    let action = Action::from_tool_call(primitive, arguments)
        .map_err(|e| failed(None, e.code().into(), e.to_string()))?;
    let (reply, answer) = std::sync::mpsc::sync_channel(1);
    host.send(HostCall { action, reply })
        .map_err(|_| fatal(ScriptError::Cancelled))?;
    let wait = stop.deadline.saturating_duration_since(Instant::now());
    match answer.recv_timeout(wait.max(Duration::from_millis(1))) {
        Ok(Ok((_, output))) => rhai::serde::to_dynamic(output).map_err(|e| {
            fatal(ScriptError::Runtime {
                why: format!("a host call's output: {e}"),
            })
        }),
        Ok(Err(child)) => Err(failed(child.seq, child.code, child.message)),
        Err(RecvTimeoutError::Timeout) => Err(fatal(ScriptError::DeadlineExceeded {
            timeout_ms: stop.timeout_ms,
        })),
        Err(RecvTimeoutError::Disconnected) => Err(fatal(ScriptError::Cancelled)),
    }
}

/// The coded error an uncaught Rhai error is.
fn classify(e: EvalAltResult, limits: &Limits, stop: &Stop, state: &HostState) -> ScriptError {
    match e {
        EvalAltResult::ErrorInFunctionCall(_, _, inner, _) => classify(*inner, limits, stop, state),
        EvalAltResult::ErrorParsing(p, _) => ScriptError::Parse { why: p.to_string() },
        EvalAltResult::ErrorTooManyOperations(_) => ScriptError::OperationsExceeded {
            max: limits.operations_max,
        },
        EvalAltResult::ErrorStackOverflow(_) => ScriptError::CallDepthExceeded {
            max: limits.call_levels_max,
        },
        EvalAltResult::ErrorDataTooLarge(what, _) => ScriptError::DataTooLarge { what },
        EvalAltResult::ErrorTooManyVariables(_) => ScriptError::VariablesExceeded {
            max: limits.variables_max,
        },
        EvalAltResult::ErrorTerminated(why, _) => {
            if let Some(fatal) = state.fatal.lock().ok().and_then(|mut f| f.take()) {
                fatal
            } else if why.clone().into_string().is_ok_and(|w| w == "cancelled") {
                ScriptError::Cancelled
            } else {
                ScriptError::DeadlineExceeded {
                    timeout_ms: stop.timeout_ms,
                }
            }
        }
        EvalAltResult::ErrorRuntime(value, _) => {
            let thrown: Value = rhai::serde::from_dynamic(&value).unwrap_or(Value::Null);
            let index = thrown["host_call"].as_u64().map(|i| i as usize);
            let failure = index.and_then(|i| {
                state
                    .failures
                    .lock()
                    .ok()
                    .and_then(|f| f.iter().find(|c| c.index == i).cloned())
            });
            match failure {
                Some(call) if thrown["code"] == call.code.as_str() => ScriptError::HostCallFailed {
                    index: call.index,
                    primitive: call.primitive,
                    seq: call.seq,
                    code: call.code,
                    message: call.message,
                },
                _ => ScriptError::Thrown {
                    value: serde_json::to_string(&thrown).unwrap_or_default(),
                },
            }
        }
        other => ScriptError::Runtime {
            why: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stop(ms: u64) -> Stop {
        Stop {
            deadline: Instant::now() + Duration::from_millis(ms),
            timeout_ms: ms,
            cancel: CancellationToken::new(),
        }
    }

    /// Run with a host that answers every call with its own arguments (seq 7).
    fn run_echo(source: &str, stop: &Stop) -> Result<Ran, ScriptError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<HostCall>();
        let echo = std::thread::spawn(move || {
            while let Some(call) = rx.blocking_recv() {
                let args = serde_json::to_value(&call.action).unwrap();
                let answer = if args["path"] == "denied" {
                    Err(ChildFailed {
                        seq: Some(9),
                        code: "path_outside_walls".into(),
                        message: "no".into(),
                    })
                } else {
                    Ok((7, args))
                };
                let _ = call.reply.send(answer);
            }
        });
        let ran = run(source, &Object::new(), &Limits::default(), stop, tx);
        echo.join().unwrap();
        ran
    }

    #[test]
    fn every_escape_is_stopped_with_its_code() {
        let cases: &[(&str, &str)] = &[
            ("loop {}", "script_operations_exceeded"),
            (
                "let x = 0; while true { x += 1; }",
                "script_operations_exceeded",
            ),
            ("fn f(n) { f(n + 1) } f(0)", "script_call_depth_exceeded"),
            (
                "let s = \"xxxxxxxx\"; loop { s += s; }",
                "script_data_too_large",
            ),
            ("let a = []; loop { a.push(1); }", "script_data_too_large"),
            ("throw \"no\"", "script_thrown"),
            ("eval(\"1\")", "script_parse_error"),
            ("timestamp()", "script_runtime_error"),
            ("sleep(1)", "script_runtime_error"),
            ("import \"x\" as y; 1", "script_parse_error"),
            (
                "run(\"read_file\", #{path: \"denied\"})",
                "script_host_call_failed",
            ),
            ("run(\"define_function\", #{})", "script_host_call_refused"),
            ("run(\"no_such_primitive\", #{})", "script_host_call_failed"),
            (
                "for i in 0..300 { run(\"read_file\", #{path: \"a\"}); }",
                "script_host_calls_exceeded",
            ),
        ];
        for (source, code) in cases {
            let err = run_echo(source, &stop(60_000)).unwrap_err();
            assert_eq!(err.code(), *code, "{source}: {err}");
        }
    }

    #[test]
    fn a_deep_expression_does_not_compile() {
        let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
        let err = compile(&deep, &Limits::default()).unwrap_err();
        assert_eq!(err.code(), "script_parse_error");
    }

    #[test]
    fn the_deadline_and_the_cancel_stop_a_script() {
        let past = Stop {
            deadline: Instant::now(),
            timeout_ms: 0,
            cancel: CancellationToken::new(),
        };
        let err = run_echo("let x = 0; loop { x += 1; }", &past).unwrap_err();
        assert_eq!(err.code(), "script_deadline_exceeded");
        let cancelled = stop(60_000);
        cancelled.cancel.cancel();
        let err = run_echo("let x = 0; loop { x += 1; }", &cancelled).unwrap_err();
        assert_eq!(err.code(), "script_cancelled");
    }

    #[test]
    fn host_calls_return_outputs_and_a_caught_failure_goes_on() {
        let source = r#"
            print("hello");
            let a = run("read_file", #{path: "a"});
            let caught = "";
            try { run("read_file", #{path: "denied"}); } catch (e) { caught = e.code; }
            #{path: a.path, caught: caught}
        "#;
        let ran = run_echo(source, &stop(60_000)).unwrap();
        assert_eq!(
            ran.result,
            json!({"path": "a", "caught": "path_outside_walls"})
        );
        assert_eq!(ran.log, vec!["hello".to_owned()]);
    }
}
