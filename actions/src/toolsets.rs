//! Toolsets: named groups of primitives an MCP client is given, in the manner of
//! github-mcp-server's `--toolsets`, so an agent loads only the tools its work needs. Every
//! primitive is in exactly one toolset; a profile names several (`coding`), `all` names every
//! one.

/// Each toolset: its name, what it is for, and its primitives.
pub const TOOLSETS: &[(&str, &str, &[&str])] = &[
    (
        "files",
        "read, write, edit, patch, stat, diff and trash files",
        &[
            "read_file",
            "read_files",
            "write_file",
            "edit_file",
            "apply_patch",
            "patch_set",
            "stat_files",
            "file_info",
            "checksum",
            "move_to_trash",
            "restore_from_trash",
            "validate",
            "diff",
            "render_template",
        ],
    ),
    (
        "process",
        "run commands, background commands and their handles",
        &[
            "run_command",
            "check_handle",
            "write_stdin",
            "stop_handle",
            "list_handles",
            "list_processes",
        ],
    ),
    ("search", "search code", &["search_code", "search_and_read"]),
    (
        "safety",
        "run several steps as one, check before acting",
        &[
            "pipeline",
            "try",
            "if",
            "assert",
            "safe_change",
            "simulate",
            "policy_check",
        ],
    ),
    (
        "history",
        "the session's own record and rewind",
        &["session_history", "rewind", "read_logs"],
    ),
    (
        "snapshots",
        "workspace snapshots",
        &[
            "create_snapshot",
            "restore_snapshot",
            "list_snapshots",
            "delete_snapshot",
        ],
    ),
    (
        "memory",
        "remember across sessions",
        &["remember", "recall", "forget", "list_memory"],
    ),
    (
        "human",
        "ask a person",
        &[
            "ask_human",
            "confirm",
            "ask_multiple_choice",
            "check_answer",
        ],
    ),
    (
        "net",
        "HTTP, DNS and ports",
        &["http_request", "fetch_url", "port_check", "dns_lookup"],
    ),
    (
        "llm",
        "call a model",
        &["llm_call", "ollama_chat", "ollama_api"],
    ),
    (
        "script",
        "define and call functions and custom primitives",
        &[
            "define_function",
            "call_function",
            "list_functions",
            "delete_function",
            "define_primitive",
            "call_primitive",
            "list_custom_primitives",
            "delete_primitive",
            "random_bytes",
        ],
    ),
    (
        "artifacts",
        "create and serve artifacts",
        &[
            "artifact_create",
            "artifact_list",
            "artifact_serve",
            "artifact_save",
            "artifact_stop",
            "artifact_destroy",
        ],
    ),
    (
        "events",
        "file-change subscriptions and reactions",
        &[
            "subscribe",
            "unsubscribe",
            "list_subscriptions",
            "watch_and_react",
        ],
    ),
    (
        "remote",
        "ssh and containers",
        &["ssh_exec", "run_in_sandbox", "run_container_group"],
    ),
    (
        "grants",
        "capability grants",
        &["grant_mint", "grant_revoke", "grant_list"],
    ),
    (
        "vm",
        "virtual machines",
        &[
            "vm_start",
            "vm_shutdown",
            "vm_list",
            "vm_info",
            "vm_screenshot",
            "vm_type",
            "vm_key",
            "vm_click",
            "vm_find_text",
            "vm_wait_for_text",
            "vm_click_text",
            "vm_snapshot_create",
            "vm_snapshot_restore",
            "vm_snapshot_list",
            "vm_snapshot_delete",
            "vm_force_off",
            "vm_reboot",
            "vm_move",
            "vm_triple_click",
            "vm_drag",
            "vm_scroll",
            "vm_cursor_position",
            "vm_wait",
            "vm_clone",
            "vm_destroy_clone",
            "vm_pool_acquire",
            "vm_pool_release",
            "vm_pool_status",
            "vm_pool_shutdown",
        ],
    ),
    (
        "computer",
        "a machine driven as one computer-use tool",
        &["computer", "computer_toolset"],
    ),
    (
        "desktop",
        "the owned desktop",
        &[
            "screenshot",
            "click",
            "double_click",
            "move_mouse",
            "scroll",
            "type_text",
            "press_key",
            "press_key_combination",
            "focus_window",
            "get_window_tree",
            "get_focused_window",
            "get_clipboard",
            "set_clipboard",
            "send_notification",
            "find_text",
            "wait_for_text",
            "click_text",
            "desktop_computer",
            "desktop_computer_toolset",
        ],
    ),
    (
        "browser",
        "a headless browser, every request through the egress proxy",
        &[
            "browser_navigate",
            "browser_back",
            "browser_forward",
            "browser_tabs",
            "browser_switch_tab",
            "browser_close_tab",
            "browser_click",
            "browser_type",
            "browser_press",
            "browser_scroll",
            "browser_fill",
            "browser_select",
            "browser_wait_for",
            "browser_snapshot",
            "browser_text",
            "browser_screenshot",
            "browser_evaluate",
            "browser_close",
            "browser_toolset",
        ],
    ),
    (
        "gateway",
        "tools of downstream MCP servers ([[downstream]]), listed under their own namespaced names",
        &["downstream_call"],
    ),
];

/// Profiles: names for several toolsets and single tools at once. `coding` is what a coding
/// agent needs every day, small enough for a client's tool budget (under 8,000 tokens).
pub const PROFILES: &[(&str, &[&str])] = &[(
    "coding",
    &[
        "read_file",
        "read_files",
        "write_file",
        "edit_file",
        "apply_patch",
        "patch_set",
        "stat_files",
        "file_info",
        "move_to_trash",
        "restore_from_trash",
        "validate",
        "diff",
        "process",
        "search_code",
        "pipeline",
        "safe_change",
        "simulate",
        "session_history",
        "rewind",
    ],
)];

/// The toolset `primitive` is in.
pub fn toolset_of(primitive: &str) -> Option<&'static str> {
    TOOLSETS
        .iter()
        .find(|(_, _, members)| members.contains(&primitive))
        .map(|(name, _, _)| *name)
}

/// The primitives of a toolset, a profile or a single tool (`all` is every one); `None` for
/// an unknown name.
pub fn members(name: &str) -> Option<Vec<&'static str>> {
    if name == "all" {
        return Some(crate::action::PRIMITIVE_NAMES.to_vec());
    }
    if let Some((_, _, members)) = TOOLSETS.iter().find(|(known, _, _)| *known == name) {
        return Some(members.to_vec());
    }
    if let Some(primitive) = crate::action::PRIMITIVE_NAMES
        .iter()
        .find(|primitive| **primitive == name)
    {
        return Some(vec![primitive]);
    }
    let (_, sets) = PROFILES.iter().find(|(known, _)| *known == name)?;
    Some(
        sets.iter()
            .filter_map(|set| members(set))
            .flatten()
            .collect(),
    )
}

/// The primitives of every name in `names` ([`members`]), or why one is unknown (the names
/// that are known listed).
pub fn resolve<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<std::collections::BTreeSet<&'static str>, String> {
    let mut out = std::collections::BTreeSet::new();
    for name in names {
        out.extend(members(name).ok_or_else(|| {
            format!(
                "{name:?} is not a toolset or profile; they are: {}",
                self::names().join(", ")
            )
        })?);
    }
    Ok(out)
}

/// Every name `members` knows, for an error that lists them.
pub fn names() -> Vec<&'static str> {
    std::iter::once("all")
        .chain(PROFILES.iter().map(|(name, _)| *name))
        .chain(TOOLSETS.iter().map(|(name, _, _)| *name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_primitive_is_in_exactly_one_toolset() {
        for name in crate::action::PRIMITIVE_NAMES {
            let homes: Vec<_> = TOOLSETS
                .iter()
                .filter(|(_, _, members)| members.contains(name))
                .map(|(set, _, _)| *set)
                .collect();
            assert_eq!(homes.len(), 1, "{name} is in {homes:?}");
        }
        let listed: usize = TOOLSETS.iter().map(|(_, _, members)| members.len()).sum();
        assert_eq!(
            listed,
            crate::action::PRIMITIVE_NAMES.len(),
            "a toolset names a primitive that is not one"
        );
    }

    #[test]
    fn the_coding_profile_is_small() {
        let coding = members("coding").unwrap();
        assert!(coding.len() <= 35, "{}", coding.len());
        assert!(coding.contains(&"run_command") && coding.contains(&"edit_file"));
        assert!(members("nope").is_none());
        assert_eq!(
            members("all").unwrap().len(),
            crate::action::PRIMITIVE_NAMES.len()
        );
    }
}
