//! The system prompt: how to answer (one JSON object a turn), where relative paths start,
//! and the tools given, each with its description and the JSON Schema of its arguments, as
//! `aido tools --json` (the MCP `tools/list`) gives them.

use std::fmt::Write as _;
use std::path::Path;

use crate::AgentError;

/// The largest system prompt, in bytes (llm_call's bound on `system`).
pub const SYSTEM_BYTES_MAX: usize = 262_144;

/// The protocol, said once at the top of every system prompt.
const PROTOCOL: &str = "\
You are an agent working inside aido, a runtime that judges every action by a policy, runs \
it and records it in a journal. You reach the world only through the tools listed below.

Reply to every message with exactly one JSON object and nothing else:
- to call a tool: {\"thought\": \"what you will do and why\", \"tool\": \"TOOL_NAME\", \"arguments\": {...}}
- when the goal is reached, or cannot be reached: {\"thought\": \"...\", \"answer\": \"your final report\"}
Call one tool per reply. Its result, or its error with a code in brackets, comes back in the \
next message. A refused call did not run: read its code and message, then change course.";

/// The system prompt for `tools` (primitive names this build may lack: those are left out)
/// with relative paths starting at `cwd`.
pub fn system(tools: &[&str], cwd: &Path) -> Result<String, AgentError> {
    let mut out = String::from(PROTOCOL);
    let _ = write!(
        out,
        "\n\nWorking directory: {} (relative paths start here).\n\nTools (name, what it does, then its arguments as a JSON Schema):\n",
        cwd.display()
    );
    let built = aido_mcp::tools::tools()
        .iter()
        .filter(|tool| tools.contains(&tool.name.as_ref()));
    for tool in built {
        let schema = serde_json::to_string(&tool.input_schema).unwrap_or_default();
        let _ = write!(
            out,
            "\n## {}\n{}\n{schema}\n",
            tool.name,
            tool.description.as_deref().unwrap_or("")
        );
    }
    if out.len() > SYSTEM_BYTES_MAX {
        return Err(AgentError::PromptTooLarge {
            bytes: out.len(),
            max: SYSTEM_BYTES_MAX,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_says_the_protocol_the_workdir_and_each_tools_schema() {
        let prompt = system(&["read_file", "no_such_tool"], Path::new("/w")).unwrap();
        assert!(prompt.starts_with(PROTOCOL));
        assert!(prompt.contains("Working directory: /w "));
        assert!(prompt.contains("\n## read_file\nRead a text file"));
        assert!(prompt.contains("\"required\":[\"path\"]"));
        assert!(!prompt.contains("no_such_tool"));
        assert!(!prompt.contains("## write_file"));
        // Whatever makes it too large (here a workdir, with `all` the composites' schemas).
        let deep = format!("/{}", "d".repeat(SYSTEM_BYTES_MAX));
        assert_eq!(
            system(&["read_file"], Path::new(&deep))
                .err()
                .map(|e| e.code()),
            Some("agent_prompt_too_large")
        );
    }
}
