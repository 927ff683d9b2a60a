//! `aido init CLIENT` puts aido under the agent a person already uses, and `aido hook
//! claude-code` is the Claude Code hook it installs.
//!
//! `init` writes the client's own project config (merged into what is there, nothing else
//! touched): the aido MCP server entry with the `coding` toolset profile, and for Claude Code a
//! `PreToolUse` hook on its native `Bash` tool. The hook rewrites each command (the hook
//! contract's `updatedInput`) into `aido exec --timeout-ms T -- /bin/sh -c COMMAND`, so what
//! the agent runs with its own shell tool is judged, confined and journaled by aido, and
//! `aido replay rewind` undoes its file changes. The same hook judges the path of each call of
//! Claude Code's file tools (Edit, Write, MultiEdit, NotebookEdit) by aido's policy, as a
//! `write_file` there (a refusal goes back to the model with its code), keeps what the file
//! held, and after the tool wrote makes the write again through aido, journaled (see
//! `crate::adopt`). Codex has no hook that can reroute its shell tool: only its MCP
//! server entry is written (`$CODEX_HOME/config.toml`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The clients `aido init` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Client {
    /// Claude Code: `.mcp.json` and a Bash hook in `.claude/settings.json`.
    ClaudeCode,
    /// Codex: `[mcp_servers.aido]` in `$CODEX_HOME/config.toml` (default `~/.codex`).
    Codex,
    /// Cursor: `.cursor/mcp.json`.
    Cursor,
    /// VS Code: `.vscode/mcp.json`.
    Vscode,
}

/// What the server entry runs.
struct Entry {
    command: String,
    args: Vec<String>,
    env: serde_json::Map<String, Value>,
}

fn entry(aido: &Path, toolsets: &str) -> Entry {
    let mut env = serde_json::Map::new();
    if let Some(home) = std::env::var_os("AIDO_HOME") {
        env.insert("AIDO_HOME".into(), json!(home.to_string_lossy()));
    }
    Entry {
        command: aido.display().to_string(),
        args: vec!["mcp".into(), "--toolsets".into(), toolsets.into()],
        env,
    }
}

/// A JSON file's object, or an empty one when the file is not there.
fn read_object(path: &Path) -> Result<serde_json::Map<String, Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(serde_json::Map::new()),
        Ok(text) => match serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?
        {
            Value::Object(map) => Ok(map),
            _ => bail!("{} is not a JSON object", path.display()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(serde_json::Map::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_object(path: &Path, map: serde_json::Map<String, Value>) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(&Value::Object(map))? + "\n";
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The object at `key` in `map`, made when missing; an error when it is something else.
fn object_at<'a>(
    map: &'a mut serde_json::Map<String, Value>,
    key: &str,
    file: &Path,
) -> Result<&'a mut serde_json::Map<String, Value>> {
    map.entry(key)
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .with_context(|| format!("{}: `{key}` is not an object", file.display()))
}

/// Writes `client`'s config for `project`; returns the files written.
pub(crate) fn init(
    client: Client,
    project: &Path,
    aido: &Path,
    toolsets: &str,
    codex_home: &Path,
) -> Result<Vec<PathBuf>> {
    let server = entry(aido, toolsets);
    let mut written = Vec::new();
    match client {
        Client::ClaudeCode | Client::Cursor => {
            let file = match client {
                Client::ClaudeCode => project.join(".mcp.json"),
                _ => project.join(".cursor").join("mcp.json"),
            };
            let mut config = read_object(&file)?;
            object_at(&mut config, "mcpServers", &file)?.insert(
                "aido".into(),
                json!({"command": server.command, "args": server.args, "env": server.env}),
            );
            write_object(&file, config)?;
            written.push(file);
            if client == Client::ClaudeCode {
                written.push(claude_hook(project, aido)?);
            }
        }
        Client::Vscode => {
            let file = project.join(".vscode").join("mcp.json");
            let mut config = read_object(&file)?;
            object_at(&mut config, "servers", &file)?.insert(
                "aido".into(),
                json!({"type": "stdio", "command": server.command, "args": server.args, "env": server.env}),
            );
            write_object(&file, config)?;
            written.push(file);
        }
        Client::Codex => {
            let file = codex_home.join("config.toml");
            let text = match std::fs::read_to_string(&file) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
            };
            let mut doc: toml_edit::DocumentMut = text
                .parse()
                .with_context(|| format!("{} is not TOML", file.display()))?;
            let mut table = toml_edit::Table::new();
            table.insert("command", toml_edit::value(server.command.clone()));
            let mut args = toml_edit::Array::new();
            for arg in &server.args {
                args.push(arg.as_str());
            }
            table.insert("args", toml_edit::value(args));
            if !server.env.is_empty() {
                let mut env = toml_edit::InlineTable::new();
                for (name, value) in &server.env {
                    env.insert(name, value.as_str().unwrap_or_default().into());
                }
                table.insert("env", toml_edit::value(env));
            }
            let servers = doc
                .entry("mcp_servers")
                .or_insert_with(|| {
                    let mut servers = toml_edit::Table::new();
                    servers.set_implicit(true);
                    toml_edit::Item::Table(servers)
                })
                .as_table_mut()
                .with_context(|| format!("{}: mcp_servers is not a table", file.display()))?;
            servers.insert("aido", toml_edit::Item::Table(table));
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, doc.to_string())
                .with_context(|| format!("writing {}", file.display()))?;
            written.push(file);
        }
    }
    Ok(written)
}

/// The hook command `init` installs.
fn hook_command(aido: &Path) -> String {
    format!(
        "{} hook claude-code",
        shell_quote(&aido.display().to_string())
    )
}

/// Claude Code's tools that write files: the hook has aido's policy judge each one's path, and
/// journals what its write did (see `crate::adopt`).
const FILE_TOOLS: &str = "Edit|Write|MultiEdit|NotebookEdit";

/// Adds the hooks to `.claude/settings.json` (once each): Bash, and the file tools.
fn claude_hook(project: &Path, aido: &Path) -> Result<PathBuf> {
    let file = project.join(".claude").join("settings.json");
    let mut settings = read_object(&file)?;
    let hooks = object_at(&mut settings, "hooks", &file)?;
    let pre = hooks
        .entry("PreToolUse")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .with_context(|| format!("{}: hooks.PreToolUse is not a list", file.display()))?;
    let command = hook_command(aido);
    add_hook(pre, "Bash", &command);
    add_hook(pre, FILE_TOOLS, &command);
    let post = hooks
        .entry("PostToolUse")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .with_context(|| format!("{}: hooks.PostToolUse is not a list", file.display()))?;
    add_hook(post, FILE_TOOLS, &command);
    write_object(&file, settings)?;
    Ok(file)
}

/// Adds `{matcher: tools, hooks: [command]}` to a hook event's list, once.
fn add_hook(list: &mut Vec<Value>, tools: &str, command: &str) {
    let present = list.iter().any(|matcher| {
        matcher["matcher"] == json!(tools)
            && matcher["hooks"]
                .as_array()
                .is_some_and(|hooks| hooks.iter().any(|hook| hook["command"] == json!(command)))
    });
    if !present {
        list.push(json!({
            "matcher": tools,
            "hooks": [{"type": "command", "command": command}],
        }));
    }
}

/// What the hook needs of aido: the policy's verdict, and the file tools' writes kept and
/// journaled (see `crate::adopt`).
pub(crate) trait Host {
    /// The policy's verdict on `action`.
    fn judge(&self, action: &aido_actions::Action) -> Result<aido_actions::Verdict>;
    /// Keep what `path` holds before call `tool_use_id` writes it.
    fn keep(&self, tool_use_id: &str, path: &Path) -> Result<()>;
    /// Make call `tool_use_id`'s write again through aido, journaled; `Some(why)` when it was
    /// refused or could not be journaled (the file is then as it was before the call).
    fn journal(&self, tool_use_id: &str) -> Result<Option<String>>;
}

/// What names one tool call in both its events: Claude Code's `tool_use_id`, or (from a
/// Claude Code that sends none) a digest of the session and the file.
fn call_id(event: &Value) -> String {
    if let Some(id) = event["tool_use_id"].as_str().filter(|id| !id.is_empty()) {
        return id.to_owned();
    }
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    event["session_id"]
        .as_str()
        .unwrap_or_default()
        .hash(&mut hasher);
    file_of(event).unwrap_or_default().hash(&mut hasher);
    format!("call-{:016x}", hasher.finish())
}

/// The file a file tool's call names.
fn file_of(event: &Value) -> Option<&str> {
    let input = &event["tool_input"];
    input["file_path"]
        .as_str()
        .or_else(|| input["notebook_path"].as_str())
}

/// A file tool's call judged as a `write_file` of its path, and what the file holds kept for
/// the journal; fails closed (a refusal) when the path is missing, aido cannot judge, or
/// cannot keep the file.
fn judge_file_tool(event: &Value, host: &dyn Host) -> Result<Option<Value>> {
    let path = file_of(event);
    let verdict = match path {
        None => Err(anyhow::anyhow!("the call names no file_path")),
        Some(path) => serde_json::from_value::<aido_actions::Action>(
            json!({"type": "write_file", "path": path, "content": ""}),
        )
        .map_err(anyhow::Error::from)
        .and_then(|action| host.judge(&action)),
    };
    let (decision, reason) = match verdict {
        Ok(aido_actions::Verdict::Allow) => {
            match host.keep(&call_id(event), Path::new(path.unwrap_or_default())) {
                Ok(()) => return Ok(None),
                Err(e) => (
                    "deny",
                    format!("aido could not keep the file's contents for its journal: {e:#}"),
                ),
            }
        }
        Ok(aido_actions::Verdict::Deny { code, reason, .. }) => (
            "deny",
            format!(
                "aido refused it [{}]: {reason} (setting: {})",
                code.code(),
                code.setting()
            ),
        ),
        Ok(aido_actions::Verdict::Confirm { reason, .. }) => (
            "ask",
            format!("aido's policy asks a person first: {reason}"),
        ),
        Err(e) => ("deny", format!("aido could not judge it: {e:#}")),
    };
    Ok(Some(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    })))
}

/// After a file tool wrote: the write made again through aido and journaled; when aido refused
/// it or could not journal it, the file is as it was and the model is told why.
fn journal_file_tool(event: &Value, host: &dyn Host) -> Result<Option<Value>> {
    let why = match host.journal(&call_id(event)) {
        Ok(None) => return Ok(None),
        Ok(Some(why)) => why,
        Err(e) => format!("aido could not journal it: {e:#}"),
    };
    let reason = format!(
        "{why}; the file was put back as it was before this {} call",
        event["tool_name"].as_str().unwrap_or("file tool")
    );
    Ok(Some(json!({
        "decision": "block",
        "reason": reason,
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": reason},
    })))
}

/// `'text'` for /bin/sh, with every `'` written `'\''`.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `aido hook claude-code`: reads one `PreToolUse` event on stdin and answers on stdout. A
/// `Bash` call is rewritten to run through `aido exec` (allowed without Claude Code's own
/// prompt unless `ask`: aido's policy confines and journals it; Claude Code's deny and ask
/// rules still apply). A file tool's path (Edit, Write, MultiEdit, NotebookEdit) is judged by
/// `judge` as a `write_file` there: refused (the code, the reason and the setting given back
/// to the model) or asked about as aido's policy says, otherwise left to Claude Code's own
/// permission flow (its tool writes the file, so aido neither confines nor journals it). Any
/// other tool is left to Claude Code (no output).
pub(crate) fn hook(input: &str, aido: &Path, ask: bool, host: &dyn Host) -> Result<Option<Value>> {
    let event: Value = serde_json::from_str(input).context("the hook's input is not JSON")?;
    let tool = event["tool_name"].as_str().unwrap_or_default();
    if FILE_TOOLS.split('|').any(|file_tool| file_tool == tool) {
        return match event["hook_event_name"].as_str() {
            Some("PostToolUse") => journal_file_tool(&event, host),
            _ => judge_file_tool(&event, host),
        };
    }
    if event["hook_event_name"] == json!("PostToolUse") {
        return Ok(None);
    }
    if tool != "Bash" {
        return Ok(None);
    }
    let Some(command) = event["tool_input"]["command"].as_str() else {
        bail!("a Bash call without tool_input.command");
    };
    // Already aido's: leave it (a re-run of a rewritten command).
    let prefix = format!("{} exec ", shell_quote(&aido.display().to_string()));
    if command.starts_with(&prefix) {
        return Ok(None);
    }
    let timeout_ms = event["tool_input"]["timeout"].as_u64().unwrap_or(120_000);
    let mut updated = event["tool_input"].clone();
    updated["command"] = json!(format!(
        "{prefix}--timeout-ms {timeout_ms} -- /bin/sh -c {}",
        shell_quote(command)
    ));
    Ok(Some(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": if ask { "ask" } else { "allow" },
            "permissionDecisionReason": "runs through aido: judged by its policy, confined, journaled; `aido replay rewind` undoes its file changes",
            "updatedInput": updated,
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bash_call_is_rewritten_to_run_through_aido_exec_and_other_tools_are_left_alone() {
        let aido = Path::new("/opt/ai do/aido");
        let payload = json!({
            "session_id": "abc", "cwd": "/p", "hook_event_name": "PreToolUse",
            "permission_mode": "default", "tool_name": "Bash", "tool_use_id": "toolu_1",
            "tool_input": {"command": "echo 'hi' > a.txt", "description": "write", "timeout": 5000},
        });
        let judge = Judged(Ok(aido_actions::Verdict::Allow));
        let out = hook(&payload.to_string(), aido, false, &judge)
            .unwrap()
            .unwrap();
        let output = &out["hookSpecificOutput"];
        assert_eq!(output["hookEventName"], "PreToolUse");
        assert_eq!(output["permissionDecision"], "allow");
        assert_eq!(output["updatedInput"]["description"], "write");
        assert_eq!(
            output["updatedInput"]["command"],
            "'/opt/ai do/aido' exec --timeout-ms 5000 -- /bin/sh -c 'echo '\\''hi'\\'' > a.txt'"
        );
        // Rewritten once only; other tools pass.
        let again = json!({"tool_name": "Bash", "tool_input": {"command": output["updatedInput"]["command"]}});
        assert!(
            hook(&again.to_string(), aido, false, &judge)
                .unwrap()
                .is_none()
        );
        let read = json!({"tool_name": "Read", "tool_input": {"file_path": "/p/a"}});
        assert!(
            hook(&read.to_string(), aido, false, &judge)
                .unwrap()
                .is_none()
        );
        assert_eq!(
            hook(&payload.to_string(), aido, true, &judge)
                .unwrap()
                .unwrap()["hookSpecificOutput"]["permissionDecision"],
            "ask"
        );
        assert!(hook("not json", aido, false, &judge).is_err());
    }

    /// A host whose policy answers `.0`; it keeps nothing and journals every call but the one
    /// named `refused`.
    struct Judged(std::result::Result<aido_actions::Verdict, &'static str>);

    impl Host for Judged {
        fn judge(&self, action: &aido_actions::Action) -> Result<aido_actions::Verdict> {
            assert_eq!(action.primitive(), "write_file");
            self.0.clone().map_err(|e| anyhow::anyhow!(e))
        }
        fn keep(&self, _: &str, _: &Path) -> Result<()> {
            Ok(())
        }
        fn journal(&self, id: &str) -> Result<Option<String>> {
            Ok((id == "refused").then(|| "aido refused it [path_protected]: no".to_owned()))
        }
    }

    #[test]
    fn a_file_tools_path_is_judged_and_a_refusal_or_a_question_goes_back_to_claude_code() {
        let aido = Path::new("/usr/bin/aido");
        let write = json!({"tool_name": "Write", "tool_use_id": "t1", "tool_input": {"file_path": "/p/.git/hooks/pre-commit", "content": "x"}});
        let refuse = Judged(Ok(aido_actions::Verdict::deny(
            aido_actions::DenyCode::PathProtected,
            "it is protected",
        )));
        let out = hook(&write.to_string(), aido, false, &refuse)
            .unwrap()
            .unwrap();
        let output = &out["hookSpecificOutput"];
        assert_eq!(output["permissionDecision"], "deny");
        let reason = output["permissionDecisionReason"].as_str().unwrap();
        assert!(
            reason.contains("[path_protected]") && reason.contains("[paths] protect"),
            "{reason}"
        );
        assert!(
            output.get("updatedInput").is_none(),
            "the tool's input is left as it is"
        );
        let allow = Judged(Ok(aido_actions::Verdict::Allow));
        assert!(
            hook(&write.to_string(), aido, false, &allow)
                .unwrap()
                .is_none()
        );
        let broken = Judged(Err("no config"));
        let edit = json!({"tool_name": "Edit", "tool_input": {"file_path": "/p/a", "old_string": "a", "new_string": "b"}});
        let out = hook(&edit.to_string(), aido, false, &broken)
            .unwrap()
            .unwrap();
        assert_eq!(
            out["hookSpecificOutput"]["permissionDecision"], "deny",
            "fails closed"
        );
        let nameless = json!({"tool_name": "Write", "tool_input": {}});
        let out = hook(&nameless.to_string(), aido, false, &allow)
            .unwrap()
            .unwrap();
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
        // After the tool ran: journaled (no answer), or put back and the model told why.
        let post = json!({"hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": "t1", "tool_input": {"file_path": "/p/a"}});
        assert!(
            hook(&post.to_string(), aido, false, &allow)
                .unwrap()
                .is_none()
        );
        let refused = json!({"hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": "refused", "tool_input": {"file_path": "/p/a"}});
        let out = hook(&refused.to_string(), aido, false, &allow)
            .unwrap()
            .unwrap();
        assert_eq!(out["decision"], "block");
        assert!(
            out["reason"].as_str().unwrap().contains("put back"),
            "{out}"
        );
        let bash_post = json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}});
        assert!(
            hook(&bash_post.to_string(), aido, false, &allow)
                .unwrap()
                .is_none()
        );
    }
}
