use aido_actions::{Action, SideEffectClass};
use aido_walk::process::is_secret_name;
use serde_json::{Value, json};

/// The action as its proposal is journaled: every `run_command` in the tree has the values of
/// its secret-looking environment variables replaced by their blake3, and every
/// `http_request` and `fetch_url` its secret headers and URL credentials replaced by markers,
/// so the journal never holds them (the action ran with the real values; playback renders its
/// result from the recorded answer and never needs them). Anything else is returned unchanged.
pub(crate) fn journaled(action: Action) -> Action {
    let may_hold = matches!(
        action.primitive(),
        "run_command" | "run_in_sandbox" | "run_container_group" | "http_request" | "fetch_url"
    ) || action.class() == SideEffectClass::Composite;
    if !may_hold {
        return action;
    }
    let Ok(mut tree) = serde_json::to_value(&action) else {
        return action;
    };
    if !redact(&mut tree) {
        return action;
    }
    serde_json::from_value(tree).unwrap_or(action)
}

/// Redact in place; true when anything changed.
fn redact(value: &mut Value) -> bool {
    let mut changed = false;
    match value {
        Value::Object(map) => {
            let hash_env = |env: &mut serde_json::Map<String, Value>| {
                let mut changed = false;
                for (name, value) in env.iter_mut() {
                    if let Value::String(text) = value
                        && is_secret_name(name)
                    {
                        *value =
                            json!(format!("blake3:{}", blake3::hash(text.as_bytes()).to_hex()));
                        changed = true;
                    }
                }
                changed
            };
            match map.get("type").and_then(Value::as_str) {
                Some("run_command" | "run_in_sandbox") => {
                    if let Some(Value::Object(env)) = map.get_mut("env") {
                        changed |= hash_env(env);
                    }
                }
                // A group's containers are not tagged: each one's env, here.
                Some("run_container_group") => {
                    if let Some(Value::Array(containers)) = map.get_mut("containers") {
                        for container in containers {
                            if let Some(Value::Object(env)) = container.get_mut("env") {
                                changed |= hash_env(env);
                            }
                        }
                    }
                }
                _ => {}
            }
            // A request's secret headers and its URL's userinfo and secret query values (the
            // request went out with them; the exchange recorded is redacted the same way).
            if matches!(
                map.get("type").and_then(Value::as_str),
                Some("http_request" | "fetch_url")
            ) {
                if let Some(Value::String(url)) = map.get_mut("url") {
                    let kept = aido_net::redact::url_text(url);
                    if kept != *url {
                        *url = kept;
                        changed = true;
                    }
                }
                if let Some(Value::Object(headers)) = map.get_mut("headers") {
                    for (name, value) in headers.iter_mut() {
                        if let Value::String(text) = value
                            && aido_net::redact::is_secret_header(name)
                        {
                            *value = json!(aido_net::redact::marker(text));
                            changed = true;
                        }
                    }
                }
            }
            for child in map.values_mut() {
                changed |= redact(child);
            }
        }
        Value::Array(items) => {
            for child in items {
                changed |= redact(child);
            }
        }
        _ => {}
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
