use aido_actions::Action;
use aido_actions::redact::Secrets;
use aido_walk::process::is_secret_name;

/// The action as its proposal is journaled: every `run_command`, `run_in_sandbox` and
/// `run_container_group` in the tree has the values of its secret-looking environment
/// variables replaced by their blake3, and every `http_request` and `fetch_url` its secret
/// headers and URL credentials replaced by markers, so the journal never holds them (the
/// action ran with the real values; playback renders its result from the recorded answer and
/// never needs them). The replacement is [`Action::redact`], done in place on the typed action:
/// no conversion runs, so nothing can fail and leave a secret in the journal.
pub(crate) fn journaled(mut action: Action) -> Action {
    action.redact(&Journal);
    action
}

/// aido's rules of what a journaled action must not hold: the names
/// [`is_secret_name`] calls secret (the same the process body hashes in a command's record),
/// and the headers and URL parts `aido_net::redact` hides (the same the net body hides in the
/// exchange it records).
struct Journal;

impl Secrets for Journal {
    fn env_value(&self, name: &str, value: &str) -> Option<String> {
        is_secret_name(name).then(|| format!("blake3:{}", blake3::hash(value.as_bytes()).to_hex()))
    }

    fn url(&self, url: &str) -> String {
        aido_net::redact::url_text(url)
    }

    fn header_value(&self, name: &str, value: &str) -> Option<String> {
        aido_net::redact::is_secret_header(name).then(|| aido_net::redact::marker(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_secrets_are_redacted_also_inside_composites() {
        let action: Action = serde_json::from_value(json!({
            "type": "pipeline",
            "steps": [
                {"type": "http_request", "url": "https://u:pw@example.com/?api_key=k1&q=x",
                 "headers": {"Authorization": "Bearer s3cret", "Accept": "text/html"}},
                {"type": "fetch_url", "url": "https://example.com/?token=t0k"}
            ]
        }))
        .unwrap();
        let text = serde_json::to_string(&journaled(action)).unwrap();
        for secret in ["pw@", "k1", "s3cret", "t0k"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("text/html") && text.contains("q=x"), "{text}");
    }

    #[test]
    fn container_secrets_are_hashed_alone_and_in_groups() {
        let action: Action = serde_json::from_value(json!({
            "type": "pipeline",
            "steps": [
                {"type": "run_in_sandbox", "image": "i", "argv": ["true"], "env": {"DB_PASSWORD": "pw1"}},
                {"type": "run_container_group", "containers": [
                    {"image": "i", "argv": ["true"], "env": {"API_TOKEN": "tk2", "MODE": "m"}}
                ]}
            ]
        }))
        .unwrap();
        let text = serde_json::to_string(&journaled(action)).unwrap();
        for secret in ["pw1", "tk2"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(
            text.contains(&format!("blake3:{}", blake3::hash(b"tk2").to_hex())),
            "{text}"
        );
        assert!(text.contains("\"MODE\":\"m\""), "{text}");
    }

    #[test]
    fn secret_values_are_hashed_also_inside_composites() {
        let action: Action = serde_json::from_value(json!({
            "type": "pipeline",
            "steps": [{"type": "run_command", "argv": ["true"], "env": {"API_KEY": "hunter2", "MODE": "x"}}]
        }))
        .unwrap();
        let journaled = serde_json::to_value(journaled(action)).unwrap();
        let env = &journaled["steps"][0]["env"];
        assert_eq!(env["MODE"], "x");
        assert_eq!(
            env["API_KEY"],
            format!("blake3:{}", blake3::hash(b"hunter2").to_hex())
        );
    }

    #[test]
    fn the_action_a_simulate_names_is_redacted_too() {
        let action: Action = serde_json::from_value(json!({
            "type": "simulate",
            "action": {"type": "run_command", "argv": ["true"], "env": {"GITHUB_TOKEN": "gh5"}}
        }))
        .unwrap();
        let text = serde_json::to_string(&journaled(action)).unwrap();
        assert!(!text.contains("gh5"), "{text}");
    }

    #[test]
    fn an_action_without_secrets_is_journaled_as_it_came() {
        let action: Action = serde_json::from_value(json!({
            "type": "run_command", "argv": ["env"], "env": {"MODE": "fast"}
        }))
        .unwrap();
        assert_eq!(journaled(action.clone()), action);
    }

    #[test]
    fn secrets_in_json_an_action_carries_are_redacted_as_the_action_would_be() {
        let action: Action = serde_json::from_value(json!({
            "type": "pipeline",
            "steps": [
                {"type": "call_function", "name": "deploy", "args": {"then": [
                    {"type": "run_command", "argv": ["true"], "env": {"API_KEY": "k9", "MODE": "m"}}
                ]}},
                {"type": "watch_and_react", "paths": ["src"], "reaction": {
                    "tool": "run_command",
                    "arguments": {"argv": ["make"], "env": {"NPM_TOKEN": "n7"}}
                }}
            ]
        }))
        .unwrap();
        let text = serde_json::to_string(&journaled(action)).unwrap();
        for secret in ["k9", "n7"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("\"MODE\":\"m\""), "{text}");
    }
}
