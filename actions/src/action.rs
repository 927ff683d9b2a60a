use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};
use crate::class::SideEffectClass;
use crate::{
    artifact, browser, computer, desktop, downstream, events, fs, human, memory, meta, net,
    process, remote, safety, script, search, snapshot, tools, vm,
};

/// A primitive as the surfaces see it: its name, class, description and argument schema.
#[derive(Clone, Debug)]
pub struct PrimitiveSpec {
    /// The MCP tool name (`write_file`).
    pub name: &'static str,
    /// The side-effect class.
    pub class: SideEffectClass,
    /// One paragraph for the agent.
    pub description: String,
    /// The JSON schema of the arguments (an object schema).
    pub input_schema: serde_json::Value,
}

/// Why a tool call could not be turned into an [`Action`].
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// No primitive has this name.
    #[error("no primitive is named {name:?}")]
    UnknownPrimitive {
        /// The name asked for.
        name: String,
    },
    /// The arguments do not match the primitive's schema.
    #[error("invalid arguments for {primitive}{}: {source}", at(path))]
    InvalidArguments {
        /// The primitive.
        primitive: &'static str,
        /// Where in the arguments (`steps[2].path`), empty at the top.
        path: String,
        /// What serde found wrong.
        source: serde_json::Error,
    },
    /// Composites nest deeper than [`Action::DEPTH_MAX`].
    #[error("the action tree nests deeper than {max} levels")]
    TooDeep {
        /// The bound.
        max: usize,
    },
    /// A composite holds more leaves than [`Action::LEAVES_MAX`].
    #[error("the action tree has more than {max} leaves")]
    TooManyLeaves {
        /// The bound.
        max: usize,
    },
}

crate::coded!(ParseError {
    UnknownPrimitive => "unknown_primitive",
    InvalidArguments => "invalid_arguments",
    TooDeep => "action_tree_too_deep",
    TooManyLeaves => "action_tree_too_large",
});

/// Declares every primitive once, grouped by the body that runs it: the enum variant, its
/// argument type, its MCP name and its class. `classify`, the tool list, the parser, the
/// schema and the routing all come from this table, so a new primitive is one line here plus
/// its argument struct, and its body does not compile until it handles it: each group becomes
/// an owned enum of that body's actions ([`FsAction`], [`VmAction`], ...), which the body
/// matches without a wildcard, and [`Action::route`] hands each action to exactly one of them.
macro_rules! actions {
    ($(
        $(#[doc = $bdoc:literal])*
        $body:ident => $group:ident {
            $( $(#[doc = $doc:literal])* $variant:ident($ty:ty) = $name:literal, $class:ident; )*
        }
    )*) => {
        /// One typed request from an agent. Serialized with its primitive name in `type`.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(tag = "type")]
        pub enum Action {
            $($( $(#[doc = $doc])* #[serde(rename = $name)] $variant($ty), )*)*
        }

        /// Which part of aido runs an action: one variant per group of the `actions!` table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Body {
            $( $(#[doc = $bdoc])* $body, )*
        }

        impl Body {
            /// Every body, in table order.
            pub const ALL: &'static [Body] = &[ $( Body::$body ),* ];

            /// Its primitives' MCP names, in table order.
            pub fn primitives(self) -> &'static [&'static str] {
                match self { $( Body::$body => &[ $( $name ),* ], )* }
            }
        }

        /// An action handed to the part of aido that runs it.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Routed {
            $( $(#[doc = $bdoc])* $body($group), )*
        }

        $(
            $(#[doc = $bdoc])*
            #[doc = ""]
            #[doc = "The actions of this body, owned: the body matches them without a wildcard."]
            #[derive(Clone, Debug, PartialEq)]
            pub enum $group {
                $( $(#[doc = $doc])* $variant($ty), )*
            }

            impl $group {
                /// The primitive's MCP name.
                pub fn primitive(&self) -> &'static str {
                    match self { $( Self::$variant(_) => $name, )* }
                }

                /// The side-effect class.
                pub fn class(&self) -> SideEffectClass {
                    match self { $( Self::$variant(_) => SideEffectClass::$class, )* }
                }
            }

            impl From<$group> for Action {
                fn from(a: $group) -> Action {
                    match a { $( $group::$variant(x) => Action::$variant(x), )* }
                }
            }
        )*

        impl Action {
            /// The primitive's MCP name.
            pub fn primitive(&self) -> &'static str {
                match self { $($( Self::$variant(_) => $name, )*)* }
            }

            /// The side-effect class (the `classify()` of the design).
            pub fn class(&self) -> SideEffectClass {
                match self { $($( Self::$variant(_) => SideEffectClass::$class, )*)* }
            }

            /// Which body runs this action (its group in the table).
            pub fn body(&self) -> Body {
                match self { $($( Self::$variant(_) => Body::$body, )*)* }
            }

            /// Hand the action to the body that runs it.
            pub fn route(self) -> Routed {
                match self { $($( Self::$variant(a) => Routed::$body($group::$variant(a)), )*)* }
            }

            /// The paths this action touches by itself, not counting children.
            pub fn touches(&self) -> Vec<Access> {
                let mut out = Vec::new();
                match self { $($( Self::$variant(a) => a.touches(&mut out), )*)* }
                out
            }

            /// Replace every secret the action holds, its children's included, by what
            /// `secrets` says (see [`crate::redact`]): in place, on the typed fields, so it
            /// cannot fail and leave a secret behind.
            pub fn redact(&mut self, secrets: &dyn crate::redact::Secrets) {
                match self { $($( Self::$variant(a) => crate::redact::Redact::redact(a, secrets), )*)* }
            }

            /// Parse an MCP tool call. The tree's depth and size are bounded.
            pub fn from_tool_call(name: &str, arguments: serde_json::Value) -> Result<Action, ParseError> {
                let action = match name {
                    $($( $name => serde_path_to_error::deserialize::<_, $ty>(arguments)
                        .map(Action::$variant)
                        .map_err(|error| ParseError::InvalidArguments {
                            primitive: $name,
                            path: path_of(&error),
                            source: error.into_inner(),
                        })?, )*)*
                    _ => return Err(ParseError::UnknownPrimitive { name: name.to_owned() }),
                };
                action.check_bounds()?;
                Ok(action)
            }

            /// The class of a primitive by name.
            pub fn class_of(name: &str) -> Option<SideEffectClass> {
                match name { $($( $name => Some(SideEffectClass::$class), )*)* _ => None }
            }

            /// The body of a primitive by name.
            pub fn body_of(name: &str) -> Option<Body> {
                match name { $($( $name => Some(Body::$body), )*)* _ => None }
            }
        }

        /// Every primitive, in table order.
        pub fn primitives() -> Vec<PrimitiveSpec> {
            vec![ $($( PrimitiveSpec {
                name: $name,
                class: SideEffectClass::$class,
                description: doc_text(&[$($doc),*]),
                input_schema: compact_steps(
                    serde_json::to_value(schemars::schema_for!($ty)).unwrap_or_default(),
                ),
            }, )*)* ]
        }

        /// Every primitive name, in table order.
        pub const PRIMITIVE_NAMES: &[&str] = &[ $($( $name ),*),* ];
    };
}

/// ` at PATH` for an error inside the arguments, nothing at their top.
fn at(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" at {path}")
    }
}

fn path_of(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    if path == "." { String::new() } else { path }
}

/// A composite's steps (`steps`, `action`, `then`, ...) in the tool list: one compact schema
/// naming the tool and leaving its arguments to that tool's own schema, instead of every
/// primitive's schema embedded again in each composite (which made the list 700 KB). Each
/// step is still checked whole against its tool's schema when the call arrives, an error
/// naming the step's path (`steps[2]`).
fn compact_steps(mut schema: serde_json::Value) -> serde_json::Value {
    use serde_json::{Value, json};
    // What a client never needs: the dialect (MCP says 2020-12) and the Rust type's name.
    if let Some(root) = schema.as_object_mut() {
        root.remove("$schema");
        root.remove("title");
    }
    let Some(defs) = schema.get_mut("$defs").and_then(Value::as_object_mut) else {
        return schema;
    };
    if !defs.contains_key("Action") {
        return schema;
    }
    defs.insert(
        "Action".into(),
        json!({
            "type": "object",
            "description": "One step: {\"type\": TOOL, ...that tool's own arguments}, e.g. {\"type\": \"write_file\", \"path\": \"a.txt\", \"content\": \"x\"}. TOOL is any tool this server lists; the step is checked against its schema when the call arrives, an error naming the step's path.",
            "required": ["type"],
            "properties": {"type": {"type": "string"}},
            "additionalProperties": true,
        }),
    );
    // Only the definitions still referenced stay.
    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    match (key.as_str(), inner) {
                        ("$ref", Value::String(target)) => {
                            if let Some(name) = target.strip_prefix("#/$defs/") {
                                out.push(name.to_owned());
                            }
                        }
                        ("$defs", _) => {}
                        _ => refs(inner, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| refs(item, out)),
            _ => {}
        }
    }
    let mut wanted = Vec::new();
    refs(&schema, &mut wanted);
    let Some(defs) = schema.get("$defs").and_then(Value::as_object) else {
        return schema;
    };
    let mut kept = std::collections::BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if kept.insert(name.clone())
            && let Some(def) = defs.get(&name)
        {
            refs(def, &mut wanted);
        }
    }
    if let Some(defs) = schema.get_mut("$defs").and_then(Value::as_object_mut) {
        defs.retain(|name, _| kept.contains(name));
    }
    schema
}

fn doc_text(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_owned()
}

actions! {
    /// The filesystem body: the agent's files, opened under checked roots.
    Filesystem => FsAction {
        /// Read a text file, or a window of its lines.
        ReadFile(fs::ReadFile) = "read_file", ReadOnly;
        /// Read several text files; each succeeds or fails on its own.
        ReadFiles(fs::ReadFiles) = "read_files", ReadOnly;
        /// Create or replace a file atomically; the old contents stay in the journal.
        WriteFile(fs::WriteFile) = "write_file", FsWrite;
        /// Replace an exact string in a file, or preview the change with dry_run.
        EditFile(fs::EditFile) = "edit_file", FsWrite;
        /// Apply a unified diff to one file.
        ApplyPatch(fs::ApplyPatch) = "apply_patch", FsWrite;
        /// Apply unified diffs to several files, all or nothing.
        PatchSet(fs::PatchSet) = "patch_set", FsWrite;
        /// Existence, kind, size, mode and mtime of several paths.
        StatFiles(fs::StatFiles) = "stat_files", ReadOnly;
        /// Size, lines, text or binary, media type and blake3 of a file.
        FileInfo(fs::FileInfo) = "file_info", ReadOnly;
        /// Hash a file with blake3 or sha256.
        Checksum(fs::Checksum) = "checksum", ReadOnly;
        /// Move a file or directory to the freedesktop trash, restorable.
        MoveToTrash(fs::MoveToTrash) = "move_to_trash", Destructive;
        /// Bring a trashed item back to its original path.
        RestoreFromTrash(fs::RestoreFromTrash) = "restore_from_trash", FsWrite;
        /// Check that a file parses as JSON, TOML or UTF-8.
        Validate(safety::Validate) = "validate", ReadOnly;
        /// Compare two files, or a file with a text, as a unified diff within a line budget.
        Diff(tools::Diff) = "diff", ReadOnly;
        /// Render a MiniJinja template sandboxed: includes only inside the walls, bounded fuel and output.
        RenderTemplate(tools::RenderTemplate) = "render_template", ReadOnly;
    }
    /// The VM body: contained QEMU machines.
    Machine => VmAction {
        /// Boot a contained machine (QEMU) for the agent.
        VmStart(vm::VmStart) = "vm_start", ProcessSpawn;
        /// Shut a machine down.
        VmShutdown(vm::VmShutdown) = "vm_shutdown", Destructive;
        /// The running machines.
        VmList(vm::VmList) = "vm_list", Meta;
        /// A machine's accelerator, boot time and screen.
        VmInfo(vm::VmInfo) = "vm_info", ReadOnly;
        /// A PNG of the machine's screen, and its text.
        VmScreenshot(vm::VmScreenshot) = "vm_screenshot", ReadOnly;
        /// Type text on the machine.
        VmType(vm::VmType) = "vm_type", Desktop;
        /// Press a key or chord on the machine.
        VmKey(vm::VmKey) = "vm_key", Desktop;
        /// Click a point of the machine's screen.
        VmClick(vm::VmClick) = "vm_click", Desktop;
        /// Find text on the machine's screen, with boxes.
        VmFindText(vm::VmFindText) = "vm_find_text", ReadOnly;
        /// Wait until text appears on the machine's screen.
        VmWaitForText(vm::VmWaitForText) = "vm_wait_for_text", ReadOnly;
        /// Find text on the machine's screen and click it.
        VmClickText(vm::VmClickText) = "vm_click_text", Desktop;
        /// Save a machine's disk and memory. The machine runs on unchanged.
        VmSnapshotCreate(vm::VmSnapshotCreate) = "vm_snapshot_create", ReadOnly;
        /// Return a machine to a saved snapshot.
        VmSnapshotRestore(vm::VmSnapshotRestore) = "vm_snapshot_restore", Destructive;
        /// A machine's snapshots.
        VmSnapshotList(vm::VmTarget) = "vm_snapshot_list", ReadOnly;
        /// Delete a machine snapshot.
        VmSnapshotDelete(vm::VmSnapshotDelete) = "vm_snapshot_delete", Destructive;
        /// Pull a machine's plug.
        VmForceOff(vm::VmTarget) = "vm_force_off", Destructive;
        /// Reset a machine and wait until it is up.
        VmReboot(vm::VmTarget) = "vm_reboot", Destructive;
        /// Move the pointer.
        VmMove(vm::VmPoint) = "vm_move", Desktop;
        /// Triple-click (select a line).
        VmTripleClick(vm::VmPoint) = "vm_triple_click", Desktop;
        /// Drag with the left button held.
        VmDrag(vm::VmDrag) = "vm_drag", Desktop;
        /// Scroll the wheel at a point.
        VmScroll(vm::VmScroll) = "vm_scroll", Desktop;
        /// Where the pointer is.
        VmCursorPosition(vm::VmTarget) = "vm_cursor_position", ReadOnly;
        /// Wait a while.
        VmWait(vm::VmWait) = "vm_wait", ReadOnly;
        /// Clone a running machine into a new one.
        VmClone(vm::VmClone) = "vm_clone", ProcessSpawn;
        /// Destroy a machine made by vm_clone.
        VmDestroyClone(vm::VmTarget) = "vm_destroy_clone", Destructive;
        /// Take a warm clone from the pool.
        VmPoolAcquire(vm::VmPoolAcquire) = "vm_pool_acquire", ProcessSpawn;
        /// Give a pooled clone back (it is destroyed; the pool warms a new one).
        VmPoolRelease(vm::VmTarget) = "vm_pool_release", Destructive;
        /// The warm pool's state.
        VmPoolStatus(vm::VmPoolStatus) = "vm_pool_status", Meta;
        /// Stop the pool's warm clones.
        VmPoolShutdown(vm::VmPoolStatus) = "vm_pool_shutdown", Destructive;
        /// Anthropic's computer-use tool (computer_20250124 / computer_20251124) on a machine; a screenshot follows each action.
        Computer(vm::Computer) = "computer", Desktop;
        /// Anthropic's computer_toolset_20260801 on a machine: a turn's member calls run in order, stopping at the first failure.
        ComputerToolset(vm::ComputerToolset) = "computer_toolset", Desktop;
    }
    /// The process body: commands confined in aido's sandbox.
    Process => ProcessAction {
        /// Run a command confined in aido's sandbox (argv or an explicit shell string).
        RunCommand(process::RunCommand) = "run_command", ProcessSpawn;
        /// Read a background command's output frames from a cursor, waiting a bounded while for new ones.
        CheckHandle(process::CheckHandle) = "check_handle", ReadOnly;
        /// Write text to a background command's standard input or terminal, optionally closing it.
        WriteStdin(process::WriteStdin) = "write_stdin", ProcessSpawn;
        /// Stop a background command's whole tree (TERM, then KILL after a grace) and apply its file changes as journaled effects.
        StopHandle(process::StopHandle) = "stop_handle", ProcessSpawn;
        /// The background commands of this aido, and those lost with an earlier aido process.
        ListHandles(process::ListHandles) = "list_handles", ReadOnly;
        /// Run a command on a host named in [[ssh.hosts]] over SSH: the pinned host key or nothing, the policy's key, never ~/.ssh; the exit status passes through.
        SshExec(remote::SshExec) = "ssh_exec", Network;
        /// Run a command in an allowed OCI image through podman: no network, read-only root, no capabilities, no-new-privileges, pids and memory limits, the workspace mounted as the walls allow; always removed.
        RunInSandbox(remote::RunInSandbox) = "run_in_sandbox", ProcessSpawn;
        /// Run several containers at once in one podman pod that has only its own loopback; one result per container; the pod is always removed.
        RunContainerGroup(remote::RunContainerGroup) = "run_container_group", ProcessSpawn;
        /// The processes aido started (pid, argv, state, start time), and with host the host's own from /proc when the policy allows (fields as it says, environments never).
        ListProcesses(events::ListProcesses) = "list_processes", ReadOnly;
        /// Subscribe to file changes under the walls (paths, globs, kinds): coalesced batches come to this client as notifications/message (logger aido/events), each journaled; denied paths never.
        Subscribe(events::Subscribe) = "subscribe", ReadOnly;
        /// End a subscription or a reaction.
        Unsubscribe(events::Unsubscribe) = "unsubscribe", ReadOnly;
        /// This session's subscriptions and reactions with their counts.
        ListSubscriptions(events::ListSubscriptions) = "list_subscriptions", ReadOnly;
        /// Run a primitive on each matching file change: every firing a child action judged and journaled like any call, rate-limited, bounded in count and time, never fed its own changes.
        WatchAndReact(events::WatchAndReact) = "watch_and_react", Composite;
    }
    /// The runtime itself: the policy's answers, the journal, snapshots, rewinds, recorded randomness.
    Runtime => RuntimeAction {
        /// Judge and project an action tree without running it.
        Simulate(safety::Simulate) = "simulate", Meta;
        /// The policy's verdict on an action, without running it.
        PolicyCheck(safety::PolicyCheck) = "policy_check", Meta;
        /// This session's recent actions from the journal.
        SessionHistory(meta::SessionHistory) = "session_history", Meta;
        /// Snapshot the workspace, tied to this seq. The workspace is untouched.
        CreateSnapshot(snapshot::CreateSnapshot) = "create_snapshot", ReadOnly;
        /// Make the workspace equal to a snapshot.
        RestoreSnapshot(snapshot::RestoreSnapshot) = "restore_snapshot", Destructive;
        /// The workspace's snapshots.
        ListSnapshots(snapshot::ListSnapshots) = "list_snapshots", Meta;
        /// Delete a snapshot.
        DeleteSnapshot(snapshot::DeleteSnapshot) = "delete_snapshot", Destructive;
        /// Rewind files and session to any earlier seq; the later records become a branch.
        Rewind(snapshot::Rewind) = "rewind", Destructive;
        /// Random bytes, recorded for replay.
        RandomBytes(snapshot::RandomBytes) = "random_bytes", ReadOnly;
        /// Read aido's own log, this session's activity, or a file the policy allows: tail, since, grep, caps, secrets redacted.
        ReadLogs(tools::ReadLogs) = "read_logs", ReadOnly;
        /// Mint a capability grant narrower than this session's own (primitives, paths, hosts; expiry, uses, rate); the token is shown once and never journaled.
        GrantMint(meta::GrantMint) = "grant_mint", Meta;
        /// Revoke a grant this session minted (or one narrowed from it), and every grant narrowed from it.
        GrantRevoke(meta::GrantRevoke) = "grant_revoke", Meta;
        /// The grants this session minted and those narrowed from them, with their uses (never their tokens).
        GrantList(meta::GrantList) = "grant_list", Meta;
    }
    /// The memory body: what agents learned, in AIDO_HOME/memory.sqlite, shared by every
    /// session and process of this AIDO_HOME.
    Memory => MemoryAction {
        /// Remember a text (scope global, project or session; tags; expiry), with where it came from. Undone by forget, not by rewind.
        Remember(memory::Remember) = "remember", FsWrite;
        /// Recall the memories best matching a query (bm25), within a limit and a character budget.
        Recall(memory::Recall) = "recall", ReadOnly;
        /// Forget a memory by id, or every memory a filter matches.
        Forget(memory::Forget) = "forget", Destructive;
        /// List memories newest first, a page at a time.
        ListMemory(memory::ListMemory) = "list_memory", ReadOnly;
    }
    /// The search body: code search over the walls on aido-search, each file judged before it is opened.
    Search => SearchAction {
        /// Search files for several regexes at once (.gitignore-aware, modes files_with_matches / content / count, context, limit, byte budget).
        SearchCode(search::SearchCode) = "search_code", ReadOnly;
        /// Each hit's enclosing definition and up to N call sites with theirs, within a character budget.
        SearchAndRead(search::SearchAndRead) = "search_and_read", ReadOnly;
    }
    /// The net body: HTTP and TCP to allowlisted hosts, every resolved address and redirect
    /// hop judged, responses recorded for playback.
    Net => NetAction {
        /// Send an HTTP request to an allowlisted host (method, headers, body, timeout, size cap, redirects judged hop by hop); secrets redacted in the journal.
        HttpRequest(net::HttpRequest) = "http_request", Network;
        /// Fetch a page as markdown or text, a window at a time (offset, length); redirects judged hop by hop.
        FetchUrl(net::FetchUrl) = "fetch_url", Network;
        /// Whether a TCP port of an allowlisted host accepts connections (rate limited).
        PortCheck(net::PortCheck) = "port_check", Network;
        /// The addresses an allowlisted name resolves to, each with the refused range it is in.
        DnsLookup(net::DnsLookup) = "dns_lookup", Network;
        /// Call the configured model ([llm]: OpenAI-compatible chat completions or Anthropic messages) with a conversation; the key comes from aido's config or environment and is never journaled.
        LlmCall(net::LlmCall) = "llm_call", Network;
        /// Chat with a model on the configured Ollama server (/api/chat), streamed and assembled.
        OllamaChat(net::OllamaChat) = "ollama_chat", Network;
        /// Call Ollama's /api/chat, /api/generate, /api/tags or /api/show on the configured server.
        OllamaApi(net::OllamaApi) = "ollama_api", Network;
    }
    /// The desktop body: a host display (an owned headless session by default), behind
    /// desktop.enabled and the app rules. Nothing it does can be rewound.
    Desktop => DesktopAction {
        /// A PNG of the screen with deny-listed windows blacked out.
        Screenshot(desktop::Screenshot) = "screenshot", ReadOnly;
        /// Click a point of the screen.
        Click(desktop::Click) = "click", Desktop;
        /// Double-click a point of the screen.
        DoubleClick(desktop::Click) = "double_click", Desktop;
        /// Move the pointer to a point.
        MoveMouse(desktop::Point) = "move_mouse", Desktop;
        /// Scroll the wheel at a point.
        ScrollMouse(desktop::ScrollAt) = "scroll", Desktop;
        /// Type Unicode text into the focused window; into a terminal it is judged as a command.
        TypeText(desktop::TypeText) = "type_text", Desktop;
        /// Press a key or chord (`Return`, `ctrl+c`); VT-switch and compositor-exit chords are refused.
        PressKey(desktop::PressKey) = "press_key", Desktop;
        /// Hold keys in order and release them in reverse.
        PressKeyCombination(desktop::PressKeyCombination) = "press_key_combination", Desktop;
        /// Give a window the focus.
        FocusWindow(desktop::FocusWindow) = "focus_window", Desktop;
        /// The top-level windows: id, class, title, pid, rect, focus.
        GetWindowTree(desktop::NoArgs) = "get_window_tree", ReadOnly;
        /// The window with the input focus.
        GetFocusedWindow(desktop::NoArgs) = "get_focused_window", ReadOnly;
        /// The clipboard's text (size-capped).
        GetClipboard(desktop::NoArgs) = "get_clipboard", ReadOnly;
        /// Put text on the clipboard (size-capped).
        SetClipboard(desktop::SetClipboard) = "set_clipboard", Desktop;
        /// Show a desktop notification as app "aido".
        SendNotification(desktop::SendNotification) = "send_notification", Desktop;
        /// Find text on the screen by OCR (deny-listed windows blacked out first): every match with its box and center.
        FindText(desktop::FindText) = "find_text", ReadOnly;
        /// Wait (bounded) until text is on the screen by OCR, then say where.
        WaitForText(desktop::WaitForText) = "wait_for_text", ReadOnly;
        /// Find text on the screen by OCR and click its center (judged like click).
        ClickText(desktop::ClickText) = "click_text", Desktop;
        /// Anthropic's computer-use tool (computer_20250124 / computer_20251124) on the host desktop, behind the desktop gates; a screenshot follows each action.
        DesktopComputer(computer::Computer) = "desktop_computer", Desktop;
        /// Anthropic's computer_toolset_20260801 on the host desktop: a turn's member calls run in order, stopping at the first failure.
        DesktopComputerToolset(computer::ComputerToolset) = "desktop_computer_toolset", Desktop;
    }
    /// The browser body: one headless Chromium per session, every request through aido's
    /// egress proxy and judged by `[net]`. What a page did on a server cannot be rewound.
    Browser => BrowserAction {
        /// Open an http(s) URL (judged by [net]) in the session's browser, started on first use with a private profile; every request it makes goes through aido's egress proxy.
        BrowserNavigate(browser::Navigate) = "browser_navigate", Network;
        /// Go back one entry in the current tab's history.
        BrowserBack(browser::NoArgs) = "browser_back", Network;
        /// Go forward one entry in the current tab's history.
        BrowserForward(browser::NoArgs) = "browser_forward", Network;
        /// The browser's tabs: id, URL, title, which is current.
        BrowserTabs(browser::NoArgs) = "browser_tabs", ReadOnly;
        /// Make a tab the current one.
        BrowserSwitchTab(browser::Tab) = "browser_switch_tab", ReadOnly;
        /// Close a tab.
        BrowserCloseTab(browser::Tab) = "browser_close_tab", Network;
        /// Click an element by its snapshot reference (`ref`) or a point (`x`, `y`).
        BrowserClick(browser::Click) = "browser_click", Network;
        /// Type text into the focused element as key presses.
        BrowserType(browser::TypeText) = "browser_type", Network;
        /// Press a key (`Enter`, `Tab`, `Escape`, `ArrowDown`, a character).
        BrowserPress(browser::Press) = "browser_press", Network;
        /// Scroll the page by CSS pixels.
        BrowserScroll(browser::Scroll) = "browser_scroll", Network;
        /// Set a form field's value by its snapshot reference.
        BrowserFill(browser::Fill) = "browser_fill", Network;
        /// Choose an option of a select element by its value or text.
        BrowserSelect(browser::Select) = "browser_select", Network;
        /// Wait (bounded) until the page shows a text or an element matches a CSS selector.
        BrowserWaitFor(browser::WaitFor) = "browser_wait_for", ReadOnly;
        /// The page as an accessibility tree: role, name, value, states, and a `ref` for each element to act on.
        BrowserSnapshot(browser::NoArgs) = "browser_snapshot", ReadOnly;
        /// The page's visible text (size-capped).
        BrowserText(browser::NoArgs) = "browser_text", ReadOnly;
        /// A PNG of the current tab's viewport.
        BrowserScreenshot(browser::NoArgs) = "browser_screenshot", ReadOnly;
        /// Run JavaScript in the page; refused unless [browser] allow_script is true.
        BrowserEvaluate(browser::Evaluate) = "browser_evaluate", Network;
        /// Close the session's browser (its profile goes with it).
        BrowserClose(browser::NoArgs) = "browser_close", Network;
        /// Anthropic's browser_toolset_20260801 on the session's browser: a turn's member calls run in order, stopping at the first failure.
        BrowserToolset(browser::BrowserToolset) = "browser_toolset", Network;
    }
    /// The gateway: other MCP servers (`[[downstream]]`), each started in aido's sandbox.
    /// What a downstream did cannot be rewound.
    Gateway => GatewayAction {
        /// Call a downstream MCP server's tool by its namespaced name (`server__tool`) with its own arguments; the tool list names each such tool, judged and journaled like aido's own.
        DownstreamCall(downstream::DownstreamCall) = "downstream_call", Network;
    }
    /// A person, asked through the client's elicitation (form mode), or out of band with
    /// `aido answer` when the client cannot ask.
    Human => HumanAction {
        /// Ask a person a question and wait (bounded) for a free-text answer; without a client that can ask, needs_human with an id for `aido answer`. Never ask for secrets.
        AskHuman(human::AskHuman) = "ask_human", ReadOnly;
        /// Ask a person to confirm: approved only on an explicit yes (no, decline, cancel and timeout are all no, with the reason).
        Confirm(human::Confirm) = "confirm", ReadOnly;
        /// Ask a person to pick one of 2 to 10 choices (or several, with multiple).
        AskMultipleChoice(human::AskMultipleChoice) = "ask_multiple_choice", ReadOnly;
        /// Collect the answer a person gave with `aido answer` to a question that came back needs_human, waiting up to wait_ms.
        CheckAnswer(human::CheckAnswer) = "check_answer", ReadOnly;
    }
    /// Composite functions: Rhai scripts defined at run time (AIDO_HOME/scripts), each host
    /// call a child action judged and journaled on its own.
    Script => ScriptAction {
        /// Define or replace a function: a Rhai script that reads `args` and calls primitives with `call(name, #{...})`, each call judged and journaled as a child action; it becomes an MCP tool of its own.
        DefineFunction(script::DefineFunction) = "define_function", FsWrite;
        /// Run a defined function with an object of arguments, within the script limits and the call's deadline.
        CallFunction(script::CallDefinition) = "call_function", Composite;
        /// The defined functions: name, description, hash.
        ListFunctions(script::ListDefinitions) = "list_functions", ReadOnly;
        /// Delete a defined function (and its MCP tool).
        DeleteFunction(script::DefinitionName) = "delete_function", Destructive;
        /// Define or replace a custom primitive: a named tool with an argument schema, built from existing primitives by a Rhai script.
        DefinePrimitive(script::DefinePrimitive) = "define_primitive", FsWrite;
        /// Run a custom primitive; its arguments are checked against its schema first.
        CallPrimitive(script::CallDefinition) = "call_primitive", Composite;
        /// The custom primitives: name, description, schema, hash.
        ListCustomPrimitives(script::ListDefinitions) = "list_custom_primitives", ReadOnly;
        /// Delete a custom primitive (and its MCP tool).
        DeletePrimitive(script::DefinitionName) = "delete_primitive", Destructive;
    }
    /// The artifact body: pages and small web apps the agent made, in AIDO_HOME/artifacts,
    /// served on 127.0.0.1 under unguessable ids behind a sandboxing CSP.
    Artifact => ArtifactAction {
        /// Make an artifact (an HTML page, a canvas, a small web app) from inline files or files the walls allow; answers its id and content hashes. Kept in AIDO_HOME; undone by artifact_destroy, not by rewind.
        ArtifactCreate(artifact::ArtifactCreate) = "artifact_create", FsWrite;
        /// The artifacts of this AIDO_HOME: id, title, files, size, and until when each is served here.
        ArtifactList(artifact::ArtifactList) = "artifact_list", ReadOnly;
        /// Serve an artifact on 127.0.0.1 under /a/<id>/ for a lifetime (sandboxing CSP, no network from the page unless connect names origins [net] allows); answers the URL.
        ArtifactServe(artifact::ArtifactServe) = "artifact_serve", Network;
        /// Copy an artifact's files into a directory the walls allow, as journaled file writes (a rewind undoes them).
        ArtifactSave(artifact::ArtifactSave) = "artifact_save", FsWrite;
        /// Stop serving an artifact (it is kept).
        ArtifactStop(artifact::ArtifactTarget) = "artifact_stop", Network;
        /// Stop serving an artifact and delete it.
        ArtifactDestroy(artifact::ArtifactTarget) = "artifact_destroy", Destructive;
    }
    /// Composites (and assert's condition): walked by the executor, their leaves routed on.
    Tree => TreeAction {
        /// Run steps in order, judged whole before the first runs.
        Pipeline(safety::Pipeline) = "pipeline", Composite;
        /// Run an action and fall back to another if it fails.
        Try(safety::Try) = "try", Composite;
        /// Run one of two actions depending on a condition.
        If(safety::If) = "if", Composite;
        /// Fail unless a condition holds.
        Assert(safety::Assert) = "assert", ReadOnly;
        /// Snapshot, change, validate, and restore on any failure.
        SafeChange(safety::SafeChange) = "safe_change", Composite;
    }
}

impl Action {
    /// Whether the action changes something no rewind can take back (the host desktop: a
    /// keystroke, a click or a notification cannot be undone; a browser: what a page did on
    /// a server). Simulate says so per leaf.
    pub fn irreversible(&self) -> bool {
        matches!(self.body(), Body::Desktop | Body::Browser | Body::Gateway)
            && self.class().mutates()
    }

    /// How deeply composites may nest.
    pub const DEPTH_MAX: usize = 16;
    /// Most leaves one action tree may hold.
    pub const LEAVES_MAX: usize = 1024;

    /// The actions this one runs, with a label for each (`steps[2]`, `then`, ...). Simulate and
    /// policy_check name an action but never run it, so they have no children.
    pub fn children(&self) -> Vec<(String, &Action)> {
        match self {
            Action::Pipeline(p) => p
                .steps
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("steps[{i}]"), a))
                .collect(),
            Action::Try(t) => {
                let mut out = vec![("action".to_owned(), t.action.as_ref())];
                if let Some(f) = &t.fallback {
                    out.push(("fallback".to_owned(), f.as_ref()));
                }
                out
            }
            Action::SafeChange(c) => c
                .steps
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("steps[{i}]"), a))
                .chain(
                    c.validate
                        .iter()
                        .enumerate()
                        .map(|(i, a)| (format!("validate[{i}]"), a)),
                )
                .collect(),
            Action::If(i) => {
                let mut out = vec![("then".to_owned(), i.then.as_ref())];
                if let Some(e) = &i.otherwise {
                    out.push(("else".to_owned(), e.as_ref()));
                }
                out
            }
            _ => Vec::new(),
        }
    }

    /// Every leaf (non-composite action) with its path in the tree, depth first.
    pub fn leaves(&self) -> Vec<(String, &Action)> {
        let mut out = Vec::new();
        self.collect_leaves(String::new(), &mut out);
        out
    }

    fn collect_leaves<'a>(&'a self, path: String, out: &mut Vec<(String, &'a Action)>) {
        let children = self.children();
        if children.is_empty() && self.class() != SideEffectClass::Composite {
            out.push((path, self));
            return;
        }
        // A composite's own touches (an if's condition) count as a leaf of their own.
        if !self.touches().is_empty() {
            out.push((join(&path, "condition"), self));
        }
        for (label, child) in children {
            child.collect_leaves(join(&path, &label), out);
        }
    }

    /// Refuse trees deeper than [`Self::DEPTH_MAX`] or wider than [`Self::LEAVES_MAX`].
    pub fn check_bounds(&self) -> Result<(), ParseError> {
        fn walk(a: &Action, depth: usize, leaves: &mut usize) -> Result<(), ParseError> {
            if depth > Action::DEPTH_MAX {
                return Err(ParseError::TooDeep {
                    max: Action::DEPTH_MAX,
                });
            }
            let inner: Vec<&Action> = match a {
                Action::Simulate(s) => vec![s.action.as_ref()],
                Action::PolicyCheck(p) => vec![p.action.as_ref()],
                _ => a.children().into_iter().map(|(_, c)| c).collect(),
            };
            if inner.is_empty() {
                *leaves += 1;
                if *leaves > Action::LEAVES_MAX {
                    return Err(ParseError::TooManyLeaves {
                        max: Action::LEAVES_MAX,
                    });
                }
            }
            inner
                .into_iter()
                .try_for_each(|c| walk(c, depth + 1, leaves))
        }
        walk(self, 1, &mut 0)
    }
}

fn join(path: &str, label: &str) -> String {
    if path.is_empty() {
        label.to_owned()
    } else {
        format!("{path}.{label}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The whole tool list an agent loads: the composites take their steps in one compact
    /// schema (the tool's name; its arguments checked by that tool's own schema), not every
    /// primitive's schema again, so all the schemas together stay within the budget.
    #[test]
    fn composites_name_their_steps_compactly_and_the_list_fits_the_budget() {
        let specs = primitives();
        let pipeline = specs.iter().find(|spec| spec.name == "pipeline").unwrap();
        let defs = pipeline.input_schema["$defs"].as_object().unwrap();
        assert_eq!(defs.keys().collect::<Vec<_>>(), ["Action"], "{defs:?}");
        assert_eq!(defs["Action"]["required"], json!(["type"]));
        assert_eq!(
            defs["Action"]["properties"]["type"],
            json!({"type": "string"})
        );
        assert!(pipeline.input_schema.get("$schema").is_none());
        // A composite's other definitions stay (its condition, say).
        let branch = specs.iter().find(|spec| spec.name == "if").unwrap();
        assert!(branch.input_schema["$defs"].as_object().unwrap().len() > 1);
        let bytes: usize = specs
            .iter()
            .map(|spec| spec.input_schema.to_string().len() + spec.description.len())
            .sum();
        // 60,000 tokens at 4 bytes each, with room for the names and annotations.
        assert!(bytes < 200_000, "{bytes} bytes of schemas and descriptions");
        for spec in &specs {
            assert!(
                spec.description.len() < 1024,
                "{}: {}",
                spec.name,
                spec.description
            );
        }
    }

    /// A step that does not fit its tool's schema is refused naming where it is.
    #[test]
    fn a_bad_step_is_refused_naming_its_path() {
        let refused = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "read_file", "path": "a"},
                {"type": "write_file", "path": "b"},
            ]}),
        )
        .unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("at steps[1]"), "{message}");
        assert!(message.contains("content"), "{message}");
        let unknown =
            Action::from_tool_call("pipeline", json!({"steps": [{"type": "no_such_tool"}]}))
                .unwrap_err();
        assert!(unknown.to_string().contains("at steps[0]"), "{unknown}");
    }

    /// The class of every primitive, pinned. A new primitive must be added here on purpose.
    #[test]
    #[allow(clippy::too_many_lines)]
    fn classify_table() {
        let table: &[(&str, SideEffectClass)] = &[
            ("read_file", SideEffectClass::ReadOnly),
            ("read_files", SideEffectClass::ReadOnly),
            ("write_file", SideEffectClass::FsWrite),
            ("edit_file", SideEffectClass::FsWrite),
            ("apply_patch", SideEffectClass::FsWrite),
            ("patch_set", SideEffectClass::FsWrite),
            ("stat_files", SideEffectClass::ReadOnly),
            ("file_info", SideEffectClass::ReadOnly),
            ("checksum", SideEffectClass::ReadOnly),
            ("move_to_trash", SideEffectClass::Destructive),
            ("restore_from_trash", SideEffectClass::FsWrite),
            ("simulate", SideEffectClass::Meta),
            ("policy_check", SideEffectClass::Meta),
            ("pipeline", SideEffectClass::Composite),
            ("try", SideEffectClass::Composite),
            ("if", SideEffectClass::Composite),
            ("assert", SideEffectClass::ReadOnly),
            ("validate", SideEffectClass::ReadOnly),
            ("session_history", SideEffectClass::Meta),
            ("create_snapshot", SideEffectClass::ReadOnly),
            ("restore_snapshot", SideEffectClass::Destructive),
            ("list_snapshots", SideEffectClass::Meta),
            ("delete_snapshot", SideEffectClass::Destructive),
            ("rewind", SideEffectClass::Destructive),
            ("safe_change", SideEffectClass::Composite),
            ("random_bytes", SideEffectClass::ReadOnly),
            ("grant_mint", SideEffectClass::Meta),
            ("grant_revoke", SideEffectClass::Meta),
            ("grant_list", SideEffectClass::Meta),
            ("run_command", SideEffectClass::ProcessSpawn),
            ("check_handle", SideEffectClass::ReadOnly),
            ("write_stdin", SideEffectClass::ProcessSpawn),
            ("stop_handle", SideEffectClass::ProcessSpawn),
            ("list_handles", SideEffectClass::ReadOnly),
            ("ssh_exec", SideEffectClass::Network),
            ("run_in_sandbox", SideEffectClass::ProcessSpawn),
            ("run_container_group", SideEffectClass::ProcessSpawn),
            ("list_processes", SideEffectClass::ReadOnly),
            ("subscribe", SideEffectClass::ReadOnly),
            ("unsubscribe", SideEffectClass::ReadOnly),
            ("list_subscriptions", SideEffectClass::ReadOnly),
            ("watch_and_react", SideEffectClass::Composite),
            ("vm_start", SideEffectClass::ProcessSpawn),
            ("vm_shutdown", SideEffectClass::Destructive),
            ("vm_list", SideEffectClass::Meta),
            ("vm_info", SideEffectClass::ReadOnly),
            ("vm_screenshot", SideEffectClass::ReadOnly),
            ("vm_type", SideEffectClass::Desktop),
            ("vm_key", SideEffectClass::Desktop),
            ("vm_click", SideEffectClass::Desktop),
            ("vm_find_text", SideEffectClass::ReadOnly),
            ("vm_wait_for_text", SideEffectClass::ReadOnly),
            ("vm_click_text", SideEffectClass::Desktop),
            ("vm_snapshot_create", SideEffectClass::ReadOnly),
            ("vm_snapshot_restore", SideEffectClass::Destructive),
            ("vm_snapshot_list", SideEffectClass::ReadOnly),
            ("vm_snapshot_delete", SideEffectClass::Destructive),
            ("vm_force_off", SideEffectClass::Destructive),
            ("vm_reboot", SideEffectClass::Destructive),
            ("vm_move", SideEffectClass::Desktop),
            ("vm_triple_click", SideEffectClass::Desktop),
            ("vm_drag", SideEffectClass::Desktop),
            ("vm_scroll", SideEffectClass::Desktop),
            ("vm_cursor_position", SideEffectClass::ReadOnly),
            ("vm_wait", SideEffectClass::ReadOnly),
            ("computer", SideEffectClass::Desktop),
            ("computer_toolset", SideEffectClass::Desktop),
            ("vm_clone", SideEffectClass::ProcessSpawn),
            ("vm_destroy_clone", SideEffectClass::Destructive),
            ("vm_pool_acquire", SideEffectClass::ProcessSpawn),
            ("vm_pool_release", SideEffectClass::Destructive),
            ("vm_pool_status", SideEffectClass::Meta),
            ("vm_pool_shutdown", SideEffectClass::Destructive),
            ("remember", SideEffectClass::FsWrite),
            ("recall", SideEffectClass::ReadOnly),
            ("forget", SideEffectClass::Destructive),
            ("list_memory", SideEffectClass::ReadOnly),
            ("search_code", SideEffectClass::ReadOnly),
            ("search_and_read", SideEffectClass::ReadOnly),
            ("ask_human", SideEffectClass::ReadOnly),
            ("confirm", SideEffectClass::ReadOnly),
            ("ask_multiple_choice", SideEffectClass::ReadOnly),
            ("check_answer", SideEffectClass::ReadOnly),
            ("diff", SideEffectClass::ReadOnly),
            ("render_template", SideEffectClass::ReadOnly),
            ("read_logs", SideEffectClass::ReadOnly),
            ("http_request", SideEffectClass::Network),
            ("fetch_url", SideEffectClass::Network),
            ("port_check", SideEffectClass::Network),
            ("dns_lookup", SideEffectClass::Network),
            ("llm_call", SideEffectClass::Network),
            ("ollama_chat", SideEffectClass::Network),
            ("ollama_api", SideEffectClass::Network),
            ("screenshot", SideEffectClass::ReadOnly),
            ("click", SideEffectClass::Desktop),
            ("double_click", SideEffectClass::Desktop),
            ("move_mouse", SideEffectClass::Desktop),
            ("scroll", SideEffectClass::Desktop),
            ("type_text", SideEffectClass::Desktop),
            ("press_key", SideEffectClass::Desktop),
            ("press_key_combination", SideEffectClass::Desktop),
            ("focus_window", SideEffectClass::Desktop),
            ("get_window_tree", SideEffectClass::ReadOnly),
            ("get_focused_window", SideEffectClass::ReadOnly),
            ("get_clipboard", SideEffectClass::ReadOnly),
            ("set_clipboard", SideEffectClass::Desktop),
            ("send_notification", SideEffectClass::Desktop),
            ("find_text", SideEffectClass::ReadOnly),
            ("wait_for_text", SideEffectClass::ReadOnly),
            ("click_text", SideEffectClass::Desktop),
            ("define_function", SideEffectClass::FsWrite),
            ("call_function", SideEffectClass::Composite),
            ("list_functions", SideEffectClass::ReadOnly),
            ("delete_function", SideEffectClass::Destructive),
            ("define_primitive", SideEffectClass::FsWrite),
            ("call_primitive", SideEffectClass::Composite),
            ("list_custom_primitives", SideEffectClass::ReadOnly),
            ("delete_primitive", SideEffectClass::Destructive),
            ("desktop_computer", SideEffectClass::Desktop),
            ("desktop_computer_toolset", SideEffectClass::Desktop),
            ("artifact_create", SideEffectClass::FsWrite),
            ("artifact_list", SideEffectClass::ReadOnly),
            ("artifact_serve", SideEffectClass::Network),
            ("artifact_save", SideEffectClass::FsWrite),
            ("artifact_stop", SideEffectClass::Network),
            ("artifact_destroy", SideEffectClass::Destructive),
            ("browser_navigate", SideEffectClass::Network),
            ("browser_back", SideEffectClass::Network),
            ("browser_forward", SideEffectClass::Network),
            ("browser_tabs", SideEffectClass::ReadOnly),
            ("browser_switch_tab", SideEffectClass::ReadOnly),
            ("browser_close_tab", SideEffectClass::Network),
            ("browser_click", SideEffectClass::Network),
            ("browser_type", SideEffectClass::Network),
            ("browser_press", SideEffectClass::Network),
            ("browser_scroll", SideEffectClass::Network),
            ("browser_fill", SideEffectClass::Network),
            ("browser_select", SideEffectClass::Network),
            ("browser_wait_for", SideEffectClass::ReadOnly),
            ("browser_snapshot", SideEffectClass::ReadOnly),
            ("browser_text", SideEffectClass::ReadOnly),
            ("browser_screenshot", SideEffectClass::ReadOnly),
            ("browser_evaluate", SideEffectClass::Network),
            ("browser_close", SideEffectClass::Network),
            ("browser_toolset", SideEffectClass::Network),
            ("downstream_call", SideEffectClass::Network),
        ];
        assert_eq!(
            table.len(),
            PRIMITIVE_NAMES.len(),
            "every primitive is in the table"
        );
        for (name, class) in table {
            assert_eq!(Action::class_of(name), Some(*class), "{name}");
        }
        let specs = primitives();
        for spec in &specs {
            assert_eq!(Action::class_of(spec.name), Some(spec.class));
            assert!(
                !spec.description.is_empty(),
                "{} has a description",
                spec.name
            );
            assert_eq!(
                spec.input_schema["type"], "object",
                "{} schema is an object",
                spec.name
            );
        }
    }

    #[test]
    fn parses_and_classifies_a_value() {
        let a = Action::from_tool_call("write_file", json!({"path": "a.txt", "content": "hi"}))
            .unwrap();
        assert_eq!(a.class(), SideEffectClass::FsWrite);
        assert_eq!(a.touches(), vec![Access::write("a.txt")]);
        // Round trip through the tagged form the journal stores.
        let tagged = serde_json::to_value(&a).unwrap();
        assert_eq!(tagged["type"], "write_file");
        assert_eq!(serde_json::from_value::<Action>(tagged).unwrap(), a);
    }

    #[test]
    fn parse_errors_are_coded() {
        let unknown = Action::from_tool_call("rm_rf", json!({})).unwrap_err();
        assert_eq!(unknown.code(), "unknown_primitive");
        let missing = Action::from_tool_call("read_file", json!({})).unwrap_err();
        assert_eq!(missing.code(), "invalid_arguments");
        let extra = Action::from_tool_call("read_file", json!({"path": "a", "x": 1})).unwrap_err();
        assert_eq!(extra.code(), "invalid_arguments");
        let wrong_type = Action::from_tool_call("read_file", json!({"path": 7})).unwrap_err();
        assert_eq!(wrong_type.code(), "invalid_arguments");
    }

    #[test]
    fn deep_trees_are_refused() {
        let mut v = json!({"type": "read_file", "path": "a"});
        for _ in 0..Action::DEPTH_MAX + 2 {
            v = json!({"type": "pipeline", "steps": [v]});
        }
        let err = Action::from_tool_call("pipeline", json!({"steps": [v]})).unwrap_err();
        assert_eq!(err.code(), "action_tree_too_deep");
    }

    #[test]
    fn wide_trees_are_refused() {
        let steps: Vec<_> = (0..Action::LEAVES_MAX + 1)
            .map(|i| json!({"type": "read_file", "path": format!("f{i}")}))
            .collect();
        let err = Action::from_tool_call("pipeline", json!({"steps": steps})).unwrap_err();
        assert_eq!(err.code(), "action_tree_too_large");
    }

    #[test]
    fn leaves_are_labelled_by_their_place_in_the_tree() {
        let a = Action::from_tool_call(
            "pipeline",
            json!({"steps": [
                {"type": "read_file", "path": "a"},
                {"type": "if", "condition": {"kind": "file_exists", "path": "c"},
                 "then": {"type": "write_file", "path": "b", "content": ""}},
            ]}),
        )
        .unwrap();
        let labels: Vec<_> = a
            .leaves()
            .into_iter()
            .map(|(l, a)| (l, a.primitive()))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("steps[0]".to_owned(), "read_file"),
                ("steps[1].condition".to_owned(), "if"),
                ("steps[1].then".to_owned(), "write_file"),
            ]
        );
    }
}
