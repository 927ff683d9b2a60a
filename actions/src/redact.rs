//! Secrets out of an action before its proposal is journaled, as a typed step that cannot
//! fail open.
//!
//! An action runs with the values the agent gave; the journal keeps it with every secret it
//! holds replaced (playback renders results from recorded answers and never needs them).
//! Which fields can hold a secret is said here, by type: every primitive's argument type
//! implements [`Redact`] (the `actions!` table's [`crate::Action::redact`] calls it for each
//! variant, so a new primitive does not compile until it says what it holds), composites
//! recurse into their children, and the replacement is done in place on the typed fields. No
//! conversion runs, so there is nothing that can fail and leave the action as it was. The
//! fields that are JSON by design (a script's arguments, a reaction's, a template's context)
//! are walked in place by [`redact_json`] for objects shaped like such actions.
//!
//! What counts as a secret and what replaces it are the [`Secrets`] of the caller: the
//! runtime passes its rules (secret-looking environment names hashed, secret headers and URL
//! credentials marked), which live with the network and process code that also apply them to
//! recorded answers.
//!
//! ```
//! use aido_actions::redact::Secrets;
//! use aido_actions::Action;
//!
//! struct Hide;
//! impl Secrets for Hide {
//!     fn env_value(&self, name: &str, _value: &str) -> Option<String> {
//!         name.contains("KEY").then(|| "hidden".into())
//!     }
//!     fn url(&self, url: &str) -> String {
//!         url.to_owned()
//!     }
//!     fn header_value(&self, _name: &str, _value: &str) -> Option<String> {
//!         None
//!     }
//! }
//!
//! let mut action = Action::from_tool_call(
//!     "pipeline",
//!     serde_json::json!({"steps": [{"type": "run_command", "argv": ["true"], "env": {"API_KEY": "k"}}]}),
//! )
//! .unwrap();
//! action.redact(&Hide);
//! assert!(!serde_json::to_string(&action).unwrap().contains("\"k\""));
//! ```

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::{
    artifact, browser, computer, desktop, downstream, events, fs, human, memory, meta, net,
    process, remote, safety, script, search, snapshot, tools, vm,
};

/// What is secret and what the journal keeps instead.
pub trait Secrets {
    /// What the journal keeps of environment variable `name` = `value`: `Some(stand-in)` when
    /// the name looks secret, `None` to keep the value.
    fn env_value(&self, name: &str, value: &str) -> Option<String>;
    /// `url` with its credentials (userinfo, secret query values) replaced.
    fn url(&self, url: &str) -> String;
    /// What the journal keeps of header `name` = `value`: `Some(stand-in)` when it is a
    /// secret header, `None` to keep it.
    fn header_value(&self, name: &str, value: &str) -> Option<String>;
}

/// Implemented by every primitive's argument type: replace every secret it holds, in its
/// children too (a composite's steps, the action a simulate names).
pub trait Redact {
    /// Replace in place every secret `self` holds by what `secrets` says.
    fn redact(&mut self, secrets: &dyn Secrets);
}

/// Every secret-looking variable of `env` replaced.
fn redact_env(env: &mut BTreeMap<String, String>, secrets: &dyn Secrets) {
    for (name, value) in env.iter_mut() {
        if let Some(kept) = secrets.env_value(name, value) {
            *value = kept;
        }
    }
}

impl Redact for process::RunCommand {
    fn redact(&mut self, secrets: &dyn Secrets) {
        redact_env(&mut self.env, secrets);
    }
}

/// A container alone (run_in_sandbox) and each of a group's.
impl Redact for remote::Container {
    fn redact(&mut self, secrets: &dyn Secrets) {
        redact_env(&mut self.env, secrets);
    }
}

impl Redact for remote::RunContainerGroup {
    fn redact(&mut self, secrets: &dyn Secrets) {
        for container in &mut self.containers {
            container.redact(secrets);
        }
    }
}

impl Redact for net::HttpRequest {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.url = secrets.url(&self.url);
        for (name, value) in self.headers.iter_mut() {
            if let Some(kept) = secrets.header_value(name, value) {
                *value = kept;
            }
        }
    }
}

impl Redact for browser::Navigate {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.url = secrets.url(&self.url);
    }
}

/// A navigation's URL as `browser_navigate`'s: its credentials and secret query values go.
impl Redact for browser::BrowserToolset {
    fn redact(&mut self, secrets: &dyn Secrets) {
        for call in &mut self.actions {
            if let Some(url) = &mut call.input.url {
                *url = secrets.url(url);
            }
        }
    }
}

impl Redact for net::FetchUrl {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.url = secrets.url(&self.url);
    }
}

impl Redact for safety::Pipeline {
    fn redact(&mut self, secrets: &dyn Secrets) {
        for step in &mut self.steps {
            step.redact(secrets);
        }
    }
}

impl Redact for safety::Try {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.action.redact(secrets);
        if let Some(fallback) = &mut self.fallback {
            fallback.redact(secrets);
        }
    }
}

impl Redact for safety::If {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.then.redact(secrets);
        if let Some(otherwise) = &mut self.otherwise {
            otherwise.redact(secrets);
        }
    }
}

impl Redact for safety::SafeChange {
    fn redact(&mut self, secrets: &dyn Secrets) {
        for step in self.steps.iter_mut().chain(self.validate.iter_mut()) {
            step.redact(secrets);
        }
    }
}

/// The action a simulate or a policy_check names is journaled with the call, so its secrets
/// are replaced too (it never runs, and nothing of it needs them).
impl Redact for safety::Simulate {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.action.redact(secrets);
    }
}

impl Redact for safety::PolicyCheck {
    fn redact(&mut self, secrets: &dyn Secrets) {
        self.action.redact(secrets);
    }
}

/// JSON an action carries as data (a script's arguments, a reaction's arguments, a template's
/// context, a request body, a schema): every object in it shaped like an action that holds
/// secrets (`"type": "run_command"` with an `env`, `"type": "http_request"` with `headers`,
/// ...) has them replaced as that action's typed fields would be; `tool` names the primitive
/// the top object is the arguments of, when it is one (a reaction's). In place on the JSON the
/// action already holds, so nothing is converted and nothing can fail.
pub fn redact_json(object: &mut Map<String, Value>, tool: Option<&str>, secrets: &dyn Secrets) {
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .or(tool)
        .map(str::to_owned);
    let env = |env: Option<&mut Value>| {
        if let Some(Value::Object(env)) = env {
            for (name, value) in env.iter_mut() {
                if let Value::String(text) = value
                    && let Some(kept) = secrets.env_value(name, text)
                {
                    *text = kept;
                }
            }
        }
    };
    match kind.as_deref() {
        Some("run_command" | "run_in_sandbox") => env(object.get_mut("env")),
        Some("run_container_group") => {
            if let Some(Value::Array(containers)) = object.get_mut("containers") {
                for container in containers {
                    env(container.get_mut("env"));
                }
            }
        }
        Some("http_request" | "fetch_url") => {
            if let Some(Value::String(url)) = object.get_mut("url") {
                *url = secrets.url(url);
            }
            if let Some(Value::Object(headers)) = object.get_mut("headers") {
                for (name, value) in headers.iter_mut() {
                    if let Value::String(text) = value
                        && let Some(kept) = secrets.header_value(name, text)
                    {
                        *text = kept;
                    }
                }
            }
        }
        _ => {}
    }
    for child in object.values_mut() {
        redact_value(child, secrets);
    }
}

/// [`redact_json`] of every object in `value`.
fn redact_value(value: &mut Value, secrets: &dyn Secrets) {
    match value {
        Value::Object(object) => redact_json(object, None, secrets),
        Value::Array(items) => {
            for item in items {
                redact_value(item, secrets);
            }
        }
        _ => {}
    }
}

/// A reaction is a tool call: its arguments are that primitive's.
impl Redact for events::WatchAndReact {
    fn redact(&mut self, secrets: &dyn Secrets) {
        let reaction = &mut self.reaction;
        redact_json(&mut reaction.arguments, Some(&reaction.tool), secrets);
    }
}

impl Redact for script::CallDefinition {
    fn redact(&mut self, secrets: &dyn Secrets) {
        redact_json(&mut self.args, None, secrets);
    }
}

impl Redact for script::DefinePrimitive {
    fn redact(&mut self, secrets: &dyn Secrets) {
        redact_json(&mut self.input_schema, None, secrets);
    }
}

impl Redact for tools::RenderTemplate {
    fn redact(&mut self, secrets: &dyn Secrets) {
        redact_json(&mut self.context, None, secrets);
    }
}

impl Redact for net::OllamaApi {
    fn redact(&mut self, secrets: &dyn Secrets) {
        if let Some(body) = &mut self.body {
            redact_json(body, None, secrets);
        }
    }
}

/// Argument types that hold no secret this step knows of. A text typed into a window or a
/// message to a model are data the agent chose to send; what the bodies redact of them is in
/// their recorded answers, not here.
macro_rules! holds_no_secret {
    ($($ty:ty),* $(,)?) => {$(
        impl Redact for $ty {
            fn redact(&mut self, _secrets: &dyn Secrets) {}
        }
    )*};
}

holds_no_secret!(
    artifact::ArtifactCreate,
    artifact::ArtifactList,
    artifact::ArtifactSave,
    artifact::ArtifactServe,
    artifact::ArtifactTarget,
    browser::Click,
    browser::Evaluate,
    browser::Fill,
    browser::NoArgs,
    browser::Press,
    browser::Scroll,
    browser::Select,
    browser::Tab,
    browser::TypeText,
    browser::WaitFor,
    computer::Computer,
    downstream::DownstreamCall,
    computer::ComputerToolset,
    desktop::Click,
    desktop::ClickText,
    desktop::FindText,
    desktop::FocusWindow,
    desktop::NoArgs,
    desktop::Point,
    desktop::PressKey,
    desktop::PressKeyCombination,
    desktop::Screenshot,
    desktop::ScrollAt,
    desktop::SendNotification,
    desktop::SetClipboard,
    desktop::TypeText,
    desktop::WaitForText,
    events::ListProcesses,
    events::ListSubscriptions,
    events::Subscribe,
    events::Unsubscribe,
    fs::ApplyPatch,
    fs::Checksum,
    fs::EditFile,
    fs::FileInfo,
    fs::MoveToTrash,
    fs::PatchSet,
    fs::ReadFile,
    fs::ReadFiles,
    fs::RestoreFromTrash,
    fs::StatFiles,
    fs::WriteFile,
    human::AskHuman,
    human::AskMultipleChoice,
    human::CheckAnswer,
    human::Confirm,
    memory::Forget,
    memory::ListMemory,
    memory::Recall,
    memory::Remember,
    meta::GrantList,
    meta::GrantMint,
    meta::GrantRevoke,
    meta::SessionHistory,
    net::DnsLookup,
    net::LlmCall,
    net::OllamaChat,
    net::PortCheck,
    process::CheckHandle,
    process::ListHandles,
    process::StopHandle,
    process::WriteStdin,
    remote::SshExec,
    safety::Assert,
    safety::Validate,
    script::DefineFunction,
    script::DefinitionName,
    script::ListDefinitions,
    search::SearchAndRead,
    search::SearchCode,
    snapshot::CreateSnapshot,
    snapshot::DeleteSnapshot,
    snapshot::ListSnapshots,
    snapshot::RandomBytes,
    snapshot::RestoreSnapshot,
    snapshot::Rewind,
    tools::Diff,
    tools::ReadLogs,
    vm::Computer,
    vm::ComputerToolset,
    vm::VmClick,
    vm::VmClickText,
    vm::VmClone,
    vm::VmDrag,
    vm::VmFindText,
    vm::VmInfo,
    vm::VmKey,
    vm::VmList,
    vm::VmPoint,
    vm::VmPoolAcquire,
    vm::VmPoolStatus,
    vm::VmScreenshot,
    vm::VmScroll,
    vm::VmShutdown,
    vm::VmSnapshotCreate,
    vm::VmSnapshotDelete,
    vm::VmSnapshotRestore,
    vm::VmStart,
    vm::VmTarget,
    vm::VmType,
    vm::VmWait,
    vm::VmWaitForText,
);
