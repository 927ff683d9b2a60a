use aido_actions::verdict::DenyCode;
use aido_actions::{Action, Body, NetAction, Routed};
use aido_net::{Admitted, Host, NetError, NetPolicy, Target};

use crate::Config;

/// The target a network action names, judged by the allowlist (host and port) and, for an
/// address literal, by range; `None` for an action that reaches no network. A name's
/// addresses are judged by the net body after it resolves them.
pub fn judge(
    net: &NetPolicy,
    config: &Config,
    action: &Action,
) -> Option<Result<Admitted, NetError>> {
    // Asked of every action: only a network one is copied to be routed. A browser's
    // navigation names its URL; every other request of the page is judged by its proxy.
    if let Action::BrowserNavigate(a) = action {
        return Some(Target::from_url(&a.url).and_then(|(_, t)| net.admit(&t)));
    }
    if action.body() != Body::Net {
        return None;
    }
    let Routed::Net(action) = action.clone().route() else {
        return None;
    };
    Some(match action {
        NetAction::HttpRequest(a) => Target::from_url(&a.url).and_then(|(_, t)| net.admit(&t)),
        NetAction::FetchUrl(a) => Target::from_url(&a.url).and_then(|(_, t)| net.admit(&t)),
        NetAction::PortCheck(a) => Target::tcp(&a.host, a.port).and_then(|t| net.admit(&t)),
        NetAction::DnsLookup(a) => lookup(net, &a.host),
        NetAction::LlmCall(_) => endpoint(net, "[llm] base_url", &config.llm.base_url),
        NetAction::OllamaChat(_) | NetAction::OllamaApi(_) => {
            endpoint(net, "[ollama] base_url", &config.ollama.base_url)
        }
    })
}

/// A model endpoint from the config: judged like any URL, so a server on this machine is
/// reached only because the policy names it.
fn endpoint(net: &NetPolicy, key: &str, base_url: &str) -> Result<Admitted, NetError> {
    if base_url.trim().is_empty() {
        return Err(NetError::UrlInvalid {
            url: String::new(),
            why: format!("{key} is not set"),
        });
    }
    Target::from_url(base_url).and_then(|(_, t)| net.admit(&t))
}

/// A lookup sends nothing to the host, but the question itself leaves the machine (a name
/// can carry data out), so the name must be on the allowlist for some port.
fn lookup(net: &NetPolicy, host: &str) -> Result<Admitted, NetError> {
    let target = Target::tcp(host, 0)?;
    if let Host::Ip(_) = target.host {
        return Err(NetError::UrlInvalid {
            url: host.to_owned(),
            why: "dns_lookup takes a name, not an address".into(),
        });
    }
    net.admit_any_port(&target)
}

/// An origin an artifact's page may connect to (`artifact_serve`'s `connect`): an http(s)
/// URL with nothing but a scheme, a host and a port, judged by the allowlist like any URL.
/// The answer is the origin as the browser serializes it, which is what goes into the page's
/// CSP (so nothing the agent wrote is pasted into the header).
pub fn connect_origin(net: &NetPolicy, text: &str) -> Result<(String, Admitted), NetError> {
    let (url, target) = Target::from_url(text)?;
    if url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(NetError::UrlInvalid {
            url: aido_net::redact::url(&url),
            why: "a connect origin is a scheme, a host and a port, nothing more".into(),
        });
    }
    let admitted = net.admit(&target)?;
    Ok((url.origin().ascii_serialization(), admitted))
}

/// The denial code of a refusal.
pub fn deny_code(refusal: &NetError) -> DenyCode {
    match refusal {
        NetError::HostDenied { .. } => DenyCode::NetDenied,
        NetError::AddressRefused { .. } => DenyCode::NetAddressRefused,
        NetError::SchemeRefused { .. } => DenyCode::NetSchemeRefused,
        NetError::UrlInvalid { .. } | NetError::AllowInvalid { .. } => DenyCode::NetUrlInvalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Environment, FsResolver, Layered, PolicyEngine, SessionContext, Source};
    use aido_actions::Verdict;
    use serde_json::json;

    fn engine_of(toml: &str) -> PolicyEngine {
        let layered = Layered::from_layers(&[(Source::File("t".into()), toml)]).unwrap();
        let env = Environment {
            home: std::env::temp_dir(),
            aido_home: std::env::temp_dir().join("aido-home-net-test"),
        };
        PolicyEngine::new(&layered.config, &env, &FsResolver).unwrap()
    }

    fn code(engine: &PolicyEngine, primitive: &str, args: serde_json::Value) -> &'static str {
        let action = Action::from_tool_call(primitive, args).unwrap();
        let ctx = SessionContext::new(std::env::temp_dir());
        match engine.evaluate(&action, &ctx, &FsResolver) {
            Verdict::Allow => "allow",
            Verdict::Deny { code, .. } => code.code(),
            Verdict::Confirm { .. } => "confirm",
        }
    }

    #[test]
    fn an_artifact_page_connects_only_to_origins_the_allowlist_admits() {
        let id = "0123456789abcdef0123456789abcdef";
        let serve = |connect: &[&str]| json!({"id": id, "connect": connect});
        let none = engine_of("");
        assert_eq!(code(&none, "artifact_serve", serve(&[])), "allow");
        assert_eq!(
            code(&none, "artifact_serve", serve(&["https://api.example.com"])),
            "net_denied"
        );
        let some = engine_of("[net]\nallow = [\"api.example.com\"]\n");
        assert_eq!(
            code(&some, "artifact_serve", serve(&["https://api.example.com"])),
            "allow"
        );
        for bad in [
            "https://api.example.com/path",
            "https://api.example.com/?q",
            "https://user@api.example.com",
            "ftp://api.example.com",
            "https://api.example.com; script-src *",
        ] {
            assert_ne!(
                code(&some, "artifact_serve", serve(&[bad])),
                "allow",
                "{bad}"
            );
        }
        let (origin, _) = connect_origin(some.net(), "HTTPS://API.Example.com:443/").unwrap();
        assert_eq!(origin, "https://api.example.com");
        let off = engine_of("[artifacts]\nenabled = false\n");
        assert_eq!(code(&off, "artifact_list", json!({})), "artifacts_disabled");
    }

    /// A downstream entry's path and URL arguments are judged as aido's own paths and URLs:
    /// a read-only tool's path is read, any other's written; a URL by `[net]`.
    #[test]
    fn downstream_path_and_url_arguments_are_judged() {
        let engine = engine_of(
            "[net]\nallow = [\"api.example.com\"]\n\
             [[downstream]]\nname = \"git\"\ncommand = \"mcp-server-git\"\n\
             path_arguments = [\"repo_path\"]\nurl_arguments = [\"remote\"]\n",
        );
        let call = |args: serde_json::Value| json!({"tool": "git__git_status", "arguments": args});
        let inside = std::env::temp_dir().join("repo").display().to_string();
        assert_eq!(
            code(
                &engine,
                "downstream_call",
                call(json!({"repo_path": inside}))
            ),
            "allow"
        );
        assert_eq!(
            code(
                &engine,
                "downstream_call",
                call(json!({"repo_path": "/etc"}))
            ),
            "path_outside_walls"
        );
        assert_eq!(
            code(
                &engine,
                "downstream_call",
                call(json!({"remote": "https://api.example.com/x"}))
            ),
            "allow"
        );
        assert_eq!(
            code(
                &engine,
                "downstream_call",
                call(json!({"remote": "https://evil.example/x"}))
            ),
            "net_denied"
        );
        assert_eq!(
            code(
                &engine,
                "downstream_call",
                call(json!({"remote": "http://169.254.169.254/"}))
            ),
            "net_denied"
        );
    }

    #[test]
    fn the_default_policy_refuses_all_network() {
        let engine = PolicyEngine::new(
            &crate::Config::default(),
            &Environment {
                home: std::env::temp_dir(),
                aido_home: std::env::temp_dir().join("aido-home-net-test"),
            },
            &FsResolver,
        )
        .unwrap();
        for (primitive, args) in [
            ("fetch_url", json!({"url": "http://127.0.0.1:8080/"})),
            ("http_request", json!({"url": "https://example.com/"})),
            ("port_check", json!({"host": "localhost", "port": 22})),
            ("dns_lookup", json!({"host": "example.com"})),
        ] {
            assert_eq!(code(&engine, primitive, args), "net_denied", "{primitive}");
        }
    }

    /// (primitive, arguments, code) under `[net] allow = ["localhost:*", "127.0.0.1:8080",
    /// "*.example.com"]`.
    fn host_port_and_literal_cases() -> Vec<(&'static str, serde_json::Value, &'static str)> {
        vec![
            (
                "fetch_url",
                json!({"url": "http://127.0.0.1:8080/x"}),
                "allow",
            ),
            (
                "fetch_url",
                json!({"url": "http://2130706433:8080/x"}),
                "allow",
            ),
            (
                "fetch_url",
                json!({"url": "http://127.0.0.1:8081/x"}),
                "net_denied",
            ),
            ("fetch_url", json!({"url": "http://localhost:9/x"}), "allow"),
            (
                "http_request",
                json!({"url": "https://api.example.com/"}),
                "allow",
            ),
            (
                "http_request",
                json!({"url": "ftp://api.example.com/"}),
                "net_scheme_refused",
            ),
            (
                "http_request",
                json!({"url": "http://[::1"}),
                "net_url_invalid",
            ),
            (
                "http_request",
                json!({"url": "http://169.254.169.254/"}),
                "net_denied",
            ),
            (
                "port_check",
                json!({"host": "localhost", "port": 5432}),
                "allow",
            ),
            (
                "port_check",
                json!({"host": "10.0.0.1", "port": 22}),
                "net_denied",
            ),
            ("dns_lookup", json!({"host": "www.example.com"}), "allow"),
            ("dns_lookup", json!({"host": "example.org"}), "net_denied"),
            (
                "dns_lookup",
                json!({"host": "127.0.0.1"}),
                "net_url_invalid",
            ),
        ]
    }

    /// A wide entry admits the host, but an address literal is still judged by range; inside
    /// a pipeline the leaf is judged.
    fn wide_entries_judge_address_literals_by_range() {
        let wide = engine_of("[net]\nallow = [\"*.example.com:*\", \"169.254.169.254:*\"]\n");
        assert_eq!(
            code(
                &wide,
                "fetch_url",
                json!({"url": "http://169.254.169.254/"})
            ),
            "allow",
            "an entry that is the address names it"
        );
        let ranges = engine_of("[net]\nallow = [\"[::ffff:169.254.169.254]:*\"]\n");
        assert_eq!(
            code(
                &ranges,
                "fetch_url",
                json!({"url": "http://[::ffff:a9fe:a9fe]/"})
            ),
            "allow"
        );
        assert_eq!(
            code(
                &wide,
                "pipeline",
                json!({"steps": [{"type": "fetch_url", "url": "http://10.0.0.1/"}]})
            ),
            "net_denied"
        );
    }

    /// Model endpoints are judged by the config's base URL.
    fn model_endpoints_are_judged_by_their_base_url() {
        let models = engine_of(
            "[net]\nallow = [\"127.0.0.1:11434\"]\n[llm]\nbase_url = \"http://127.0.0.1:8080/v1\"\n",
        );
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let call = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(code(&models, "ollama_chat", chat.clone()), "allow");
        assert_eq!(
            code(&models, "ollama_api", json!({"endpoint": "tags"})),
            "allow"
        );
        assert_eq!(code(&models, "llm_call", call.clone()), "net_denied");
        let unset = engine_of("[net]\nallow = [\"*:*\"]\n");
        assert_eq!(code(&unset, "llm_call", call), "net_url_invalid");
        // The default Ollama address is loopback: refused unless the policy names it.
        assert_eq!(code(&unset, "ollama_chat", chat), "net_address_refused");
    }

    #[test]
    fn the_gate_judges_host_port_and_address_literals() {
        let engine =
            engine_of("[net]\nallow = [\"localhost:*\", \"127.0.0.1:8080\", \"*.example.com\"]\n");
        for (primitive, args, expected) in host_port_and_literal_cases() {
            assert_eq!(
                code(&engine, primitive, args.clone()),
                expected,
                "{primitive} {args}"
            );
        }
        wide_entries_judge_address_literals_by_range();
        model_endpoints_are_judged_by_their_base_url();
    }

    #[test]
    fn bad_allow_entries_are_config_errors() {
        let layered = Layered::from_layers(&[(
            Source::File("t".into()),
            "[net]\nallow = [\"http://x.com\"]\n",
        )])
        .unwrap();
        let env = Environment {
            home: std::env::temp_dir(),
            aido_home: std::env::temp_dir().join("aido-home-net-test"),
        };
        let err = PolicyEngine::new(&layered.config, &env, &FsResolver).unwrap_err();
        assert_eq!(err.code(), "config_value");
    }
}
