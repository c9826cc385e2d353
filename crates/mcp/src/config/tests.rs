//! The gateway config, section by section.

use std::time::Duration;

use super::*;
use crate::config::reader::expand;
use crate::config::servers::is_loopback_http;
use codemode_runtime::OwnerPolicy;

/// What `policy` says of tool `name` of server `server`: `None` when it
/// is not catalogued, else whether its calls need approval.
fn gate(policy: &ToolPolicy, server: &str, name: &str, annotations: &Value) -> Option<bool> {
    let tool = codemode_runtime::ToolDefinition::new(ToolSource::Mcp, server, name)
        .with_annotations(annotations.clone());
    match policy.decide(&tool, &tool.id().unwrap()) {
        codemode_runtime::Decision::Admitted(gate) => Some(gate.needs_approval()),
        codemode_runtime::Decision::Refused(_) => None,
    }
}

fn env(name: &str) -> Option<String> {
    match name {
        "TOKEN" => Some("s3cret".into()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<(GatewayConfig, Vec<Diagnostic>), ConfigProblems> {
    parse_config(text, &env)
}

#[test]
fn approvals_and_hooks_parse_with_their_defaults() {
    let (config, diagnostics) = parse(
        r#"{
          approvals: { mode: "writes" },
          hooks: { beforeToolCall: { command: ["./check", "--strict"], timeoutMs: 800 } },
          mcpServers: { fs: { command: "fs", approveTools: ["write_*"] } },
        }"#,
    )
    .unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(config.approvals, ApprovalMode::Writes);
    assert_eq!(
        config.before_tool_call,
        Some(HookConfig {
            target: HookTarget::Command(vec!["./check".into(), "--strict".into()]),
            timeout: Duration::from_millis(800),
        })
    );
    assert_eq!(config.servers[0].tools.approve, ["write_*"]);
    // approveTools wins over read-only annotations; the mode decides the rest.
    let policy = config.tool_policy(&ToolPolicy::default());
    let read_only = serde_json::json!({"readOnlyHint": true});
    assert_eq!(gate(&policy, "fs", "write_file", &read_only), Some(true));
    assert_eq!(gate(&policy, "fs", "read_file", &read_only), Some(false));
    assert_eq!(gate(&policy, "fs", "move_file", &Value::Null), Some(true));

    let (config, _) =
        parse(r#"{ hooks: { beforeToolCall: { url: "http://127.0.0.1:9/h" } } }"#).unwrap();
    assert_eq!(
        config.approvals,
        ApprovalMode::Destructive,
        "the default mode"
    );
    let hook = config.before_tool_call.unwrap();
    assert_eq!(hook.target, HookTarget::Url("http://127.0.0.1:9/h".into()));
    assert_eq!(hook.timeout, Duration::from_secs(5));
}

#[test]
fn bearer_tokens_parse_with_names_and_are_never_echoed() {
    let (config, _) = parse(
        r#"{ auth: { bearerTokens: ["${TOKEN}-0123456789", { name: "ci", token: "ci-token-0123456789" }], maxConcurrentExecs: 4, maxSuspendedRuns: 9 } }"#,
    )
    .unwrap();
    let auth = config.auth.unwrap();
    assert_eq!(auth.max_concurrent_execs, 4);
    assert_eq!(auth.max_suspended_runs, 9);
    let names: Vec<&str> = auth.bearer_tokens.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["token-1", "ci"]);
    assert_eq!(auth.bearer_tokens[0].token.expose(), "s3cret-0123456789");
    assert!(!format!("{auth:?}").contains("s3cret"));

    let err = parse(
        r#"{ auth: { bearerTokens: ["${TOKEN}", { name: "a", token: "aaaaaaaaaaaaaaaaaaaa" }, { name: "a", token: "bbbbbbbbbbbbbbbbbbbbb" }, 7] } }"#,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("auth.bearerTokens[0]") && text.contains("shorter than 16 bytes"),
        "{text}"
    );
    assert!(
        text.contains("auth.bearerTokens[2]") && text.contains("used by another token"),
        "{text}"
    );
    assert!(text.contains("auth.bearerTokens[3]"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    let err = parse(r#"{ auth: { bearerTokens: [] } }"#).unwrap_err();
    assert!(err.to_string().contains("nobody could connect"), "{err}");
}

#[test]
fn oauth_parses_alone_or_beside_tokens() {
    let (config, _) = parse(
        r#"{ auth: { oauth: { issuer: "https://auth.example.com", resource: "https://gw.example.com/mcp" } } }"#,
    )
    .unwrap();
    let auth = config.auth.unwrap();
    assert!(auth.bearer_tokens.is_empty());
    let oauth = auth.oauth.unwrap();
    assert_eq!(oauth.issuer, "https://auth.example.com");
    assert_eq!(oauth.resource, "https://gw.example.com/mcp");
    assert_eq!(oauth.jwks_uri, None);
    assert!(is_loopback_http("http://127.0.0.1:8080/x"));
    assert!(is_loopback_http("http://[::1]:9/"));
    assert!(is_loopback_http("http://localhost"));
    assert!(!is_loopback_http("http://auth.example.com"));
    assert!(!is_loopback_http("http://127.0.0.1.evil.test/"));
    let err =
        parse(r#"{ auth: { oauth: { issuer: "http://auth.example.com", jwksUri: "ftp://x" } } }"#)
            .unwrap_err()
            .to_string();
    for path in [
        "auth.oauth.issuer",
        "auth.oauth.resource",
        "auth.oauth.jwksUri",
    ] {
        assert!(err.contains(path), "{path}: {err}");
    }
}

#[test]
fn upstream_oauth_client_credentials_parse_and_keep_the_secret_secret() {
    let (config, _) = parse(
        r#"{ mcpServers: { crm: { url: "https://crm.example.com/mcp", oauth: { clientCredentials: { clientId: "gw", clientSecret: "${TOKEN}", scopes: ["read"] } } } } }"#,
    )
    .unwrap();
    match &config.servers[0].transport {
        Transport::Http {
            oauth:
                Some(UpstreamOAuth::ClientCredentials {
                    client_id,
                    authentication: ClientAuthentication::Secret(client_secret),
                    scopes,
                }),
            ..
        } => {
            assert_eq!(client_id, "gw");
            assert_eq!(client_secret.expose(), "s3cret");
            assert_eq!(scopes, &["read"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(!format!("{config:?}").contains("s3cret"));
    let err = parse(
        r#"{ mcpServers: { a: { url: "https://a.example.com/mcp", oauth: { clientCredentials: { clientId: "" } } }, b: { command: "x", oauth: {} } } }"#,
    )
    .unwrap_err()
    .to_string();
    for needle in [
        "mcpServers.a.oauth.clientCredentials.clientId",
        "mcpServers.a.oauth.clientCredentials.clientSecret",
        "mcpServers.b.oauth: only HTTP servers",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // private_key_jwt: a PEM key instead of the secret, an algorithm from
    // the list; not both ways at once.
    let (config, _) = parse(
        r#"{ mcpServers: { crm: { url: "https://crm.example.com/mcp", oauth: { clientCredentials: { clientId: "gw", privateKey: "${TOKEN}", signingAlgorithm: "ES256" } } } } }"#,
    )
    .unwrap();
    match &config.servers[0].transport {
        Transport::Http {
            oauth:
                Some(UpstreamOAuth::ClientCredentials {
                    authentication:
                        ClientAuthentication::PrivateKeyJwt {
                            private_key,
                            algorithm,
                        },
                    ..
                }),
            ..
        } => {
            assert_eq!(private_key.expose(), "s3cret");
            assert_eq!(algorithm.as_deref(), Some("ES256"));
        }
        other => panic!("{other:?}"),
    }
    let err = parse(
        r#"{ mcpServers: {
             a: { url: "https://a.example.com/mcp", oauth: { clientCredentials: { clientId: "x", clientSecret: "s", privateKey: "k" } } },
             b: { url: "https://a.example.com/mcp", oauth: { clientCredentials: { clientId: "x", privateKey: "k", signingAlgorithm: "HS256" } } },
             c: { url: "https://a.example.com/mcp", oauth: { clientCredentials: { clientId: "x", clientSecret: "s", signingAlgorithm: "RS256" } } },
           } }"#,
    )
    .unwrap_err()
    .to_string();
    for needle in [
        "mcpServers.a.oauth.clientCredentials.privateKey: give either",
        "mcpServers.b.oauth.clientCredentials.signingAlgorithm: expected one of RS256",
        "mcpServers.c.oauth.clientCredentials.signingAlgorithm: belongs to `privateKey`",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn upstream_oauth_authorization_code_parses_and_names_bad_fields() {
    let (config, diagnostics) = parse(
        r#"{ mcpServers: {
             dyn: { url: "https://a.example.com/mcp", oauth: { authorizationCode: {} } },
             pre: { url: "https://b.example.com/mcp", oauth: { authorizationCode: { clientId: "app", clientSecret: "${TOKEN}", scopes: ["read"], redirectPort: 8976, extra: 1 } } },
             cimd: { url: "https://b.example.com/mcp", oauth: { authorizationCode: { clientMetadataUrl: "https://app.example.com/codemode/client.json" } } },
           } }"#,
    )
    .unwrap();
    let oauth = |name: &str| match &config
        .servers
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .transport
    {
        Transport::Http { oauth, .. } => oauth.clone(),
        Transport::Stdio { .. } => None,
    };
    assert_eq!(
        oauth("dyn"),
        Some(UpstreamOAuth::AuthorizationCode {
            client_id: None,
            client_secret: None,
            scopes: vec![],
            redirect_port: None,
            client_metadata_url: None,
        })
    );
    assert_eq!(
        oauth("pre"),
        Some(UpstreamOAuth::AuthorizationCode {
            client_id: Some("app".into()),
            client_secret: Some(Secret::new("s3cret")),
            scopes: vec!["read".into()],
            redirect_port: Some(8976),
            client_metadata_url: None,
        })
    );
    assert_eq!(
        oauth("cimd"),
        Some(UpstreamOAuth::AuthorizationCode {
            client_id: None,
            client_secret: None,
            scopes: vec![],
            redirect_port: None,
            client_metadata_url: Some("https://app.example.com/codemode/client.json".into()),
        })
    );
    assert!(
        diagnostics
            .iter()
            .any(|d| d.path == "mcpServers.pre.oauth.authorizationCode.extra"),
        "{diagnostics:?}"
    );
    let err = parse(
        r#"{ mcpServers: {
             a: { url: "https://a.example.com/mcp", oauth: { authorizationCode: { redirectPort: 70000 } } },
             b: { url: "https://a.example.com/mcp", oauth: { authorizationCode: { clientSecret: "x" } } },
             c: { url: "https://a.example.com/mcp", oauth: { authorizationCode: {}, clientCredentials: {} } },
             d: { url: "https://a.example.com/mcp", oauth: { password: {} } },
             e: { url: "https://a.example.com/mcp", oauth: { authorizationCode: { clientMetadataUrl: "http://a.example.com/client.json" } } },
             f: { url: "https://a.example.com/mcp", oauth: { authorizationCode: { clientMetadataUrl: "https://a.example.com/" } } },
           } }"#,
    )
    .unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    for path in [
        "mcpServers.a.oauth.authorizationCode.redirectPort",
        "mcpServers.b.oauth.authorizationCode.clientSecret",
        "mcpServers.c.oauth",
        "mcpServers.d.oauth",
        "mcpServers.e.oauth.authorizationCode.clientMetadataUrl",
        "mcpServers.f.oauth.authorizationCode.clientMetadataUrl",
    ] {
        assert!(paths.contains(&path), "{path}: {paths:?}");
    }
}

#[test]
fn the_store_setting_parses_and_names_bad_values() {
    for (text, want) in [
        ("memory", StoreSetting::Memory),
        (
            "file:/tmp/runs.db",
            StoreSetting::File("/tmp/runs.db".into()),
        ),
        (
            "redis://127.0.0.1:6379/0",
            StoreSetting::Redis("redis://127.0.0.1:6379/0".into()),
        ),
    ] {
        let (config, _) = parse(&format!("{{ store: {text:?} }}")).unwrap();
        assert_eq!(config.store, Some(want));
    }
    assert_eq!(parse("{}").unwrap().0.store, None);
    for bad in [r#""file:""#, r#""postgres://x""#, "42"] {
        let problems = parse(&format!("{{ store: {bad} }}")).unwrap_err();
        assert_eq!(problems.errors[0].path, "store", "{bad}");
    }
}

#[test]
fn results_form_and_handle_bytes_parse_and_name_bad_values() {
    let (config, _) = parse(r#"{ results: { form: "text", handleBytes: 65536 } }"#).unwrap();
    assert_eq!(config.result_form, ResultForm::Text);
    assert_eq!(config.result_handle_bytes, Some(65536));
    let (config, _) = parse("{}").unwrap();
    assert_eq!(config.result_form, ResultForm::Structured);
    assert_eq!(config.result_handle_bytes, None);
    let err = parse(r#"{ results: { form: "xml", handleBytes: 5 } }"#).unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["results.form", "results.handleBytes"]);
}

#[test]
fn bad_approvals_and_hooks_are_named() {
    let err = parse(
        r#"{
          approvals: { mode: "sometimes" },
          hooks: { beforeToolCall: { command: "check.sh", timeoutMs: 0 } },
          mcpServers: { fs: { command: "fs", approveTools: [""] } },
        }"#,
    )
    .unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    for path in [
        "approvals.mode",
        "hooks.beforeToolCall.timeoutMs",
        "hooks.beforeToolCall.command",
        "mcpServers.fs.approveTools[0]",
    ] {
        assert!(paths.contains(&path), "{path} in {paths:?}");
    }
    assert!(
        err.to_string().contains("\"destructive\" (the default)"),
        "{err}"
    );
    let err =
        parse(r#"{ hooks: { beforeToolCall: { command: ["x"], url: "http://h" } } }"#).unwrap_err();
    assert!(err.to_string().contains("not both"), "{err}");
    let err = parse(r#"{ hooks: { beforeToolCall: {} } }"#).unwrap_err();
    assert!(err.to_string().contains("needs `command`"), "{err}");
}

#[test]
fn the_upstream_protocol_is_auto_by_default_and_chosen_per_server() {
    use crate::config::UpstreamProtocol;
    let (config, _) = parse(
        r#"{ mcpServers: {
          a: { command: "x" },
          b: { command: "x", protocol: "2025-11-25" },
          c: { url: "https://example.com/mcp", protocol: "2026-07-28" },
          d: { command: "x", protocol: "auto" },
        } }"#,
    )
    .unwrap();
    let chosen: Vec<UpstreamProtocol> = config.servers.iter().map(|s| s.protocol).collect();
    assert_eq!(
        chosen,
        [
            UpstreamProtocol::Auto,
            UpstreamProtocol::Session,
            UpstreamProtocol::Stateless,
            UpstreamProtocol::Auto
        ]
    );
    let problems =
        parse(r#"{ mcpServers: { a: { command: "x", protocol: "2024-11-05" } } }"#).unwrap_err();
    let text = problems.to_string();
    assert!(text.contains("mcpServers.a.protocol"), "{text}");
    assert!(text.contains("unknown protocol \"2024-11-05\""), "{text}");
}

#[test]
fn stdio_and_http_servers() {
    let (config, diagnostics) = parse(
        r#"{
          tools: { codeMode: { enabled: true, timeoutMs: 2000 } },
          mcpServers: {
            memory: { command: "npx", args: ["-y", "server-memory"], env: { MEMORY_FILE_PATH: "/tmp/m.json" }, cwd: "/tmp" },
            remote: { url: "https://example.com/mcp", headers: { Authorization: "Bearer ${TOKEN}" }, timeoutMs: 5000 },
            off: { command: "x", disabled: true },
          },
        }"#,
    )
    .unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert!(config.code_mode.enabled && config.code_mode_given);
    assert_eq!(config.code_mode.timeout_ms, 2000);
    assert_eq!(config.servers.len(), 2);
    let memory = &config.servers[0];
    assert_eq!(memory.name, "memory");
    assert_eq!(memory.call_timeout, Duration::from_secs(60));
    match &memory.transport {
        Transport::Stdio {
            command, args, env, ..
        } => {
            assert_eq!(command, "npx");
            assert_eq!(args, &["-y", "server-memory"]);
            assert_eq!(env["MEMORY_FILE_PATH"].expose(), "/tmp/m.json");
        }
        other => panic!("{other:?}"),
    }
    let remote = &config.servers[1];
    assert_eq!(remote.call_timeout, Duration::from_secs(5));
    match &remote.transport {
        Transport::Http { url, headers, .. } => {
            assert_eq!(url, "https://example.com/mcp");
            assert_eq!(headers["Authorization"].expose(), "Bearer s3cret");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn secrets_never_show_in_debug_or_errors() {
    let (config, _) = parse(
        r#"{ mcpServers: { a: { command: "x", env: { KEY: "${TOKEN}" } }, b: { url: "http://h/", headers: { X: "hidden-value" } } } }"#,
    )
    .unwrap();
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("hidden-value"),
        "{shown}"
    );
    assert!(shown.contains("<redacted>"));
    let err = parse(r#"{ mcpServers: { a: { command: "x", env: { KEY: ["hidden-value"] } } } }"#)
        .unwrap_err();
    assert!(!err.to_string().contains("hidden-value"), "{err}");
}

#[test]
fn every_problem_is_reported_with_its_path() {
    let err = parse(
        r#"{
          tools: { codeMode: { enabled: "yes", timeoutMs: "soon" } },
          mcpServers: {
            "bad:name": { command: "x" },
            nothing: {},
            both: { command: "x", url: "https://h/" },
            web: { url: "ftp://h/", headers: { A: 1 } },
            args: { command: "x", args: [1, "ok"], env: { A: "${MISSING}" }, timeoutMs: -5 },
            legacy: { type: "sse", url: "https://h/sse" },
          },
        }"#,
    )
    .unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "tools.codeMode.enabled",
            "tools.codeMode.timeoutMs",
            "mcpServers.args.timeoutMs",
            "mcpServers.args.args[0]",
            "mcpServers.args.env.A",
            "mcpServers[\"bad:name\"]",
            "mcpServers.both.url",
            "mcpServers.legacy.type",
            "mcpServers.nothing",
            "mcpServers.web.url",
        ],
        "{err}"
    );
    assert!(err.to_string().contains("MISSING is not set"), "{err}");
}

#[test]
fn misspelt_keys_in_sections_that_guard_access_are_errors() {
    let err = parse(
        r#"{ approvals: { mod: "always" }, hooks: { beforeToolcall: { url: "http://127.0.0.1:9/h" } },
             auth: { bearerToken: ["${TOKEN}"] } }"#,
    )
    .unwrap_err();
    let found: Vec<(&str, &str)> = err
        .errors
        .iter()
        .map(|e| (e.path.as_str(), e.message.as_str()))
        .collect();
    assert!(
        found.contains(&("approvals.mod", "unknown field; did you mean `mode`?")),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            "hooks.beforeToolcall",
            "unknown field; did you mean `beforeToolCall`?"
        )),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(path, message)| *path == "auth.bearerToken"
                && message.contains("did you mean `bearerTokens`?")),
        "{found:?}"
    );
}

#[test]
fn whole_numbers_read_alike_everywhere() {
    let (config, _) = parse(
        r#"{ mcpServers: { a: { command: "x", timeoutMs: 2e3 } }, results: { handleBytes: 4096.0 } }"#,
    )
    .unwrap();
    assert_eq!(config.servers[0].call_timeout, Duration::from_millis(2000));
    assert_eq!(config.result_handle_bytes, Some(4096));
    let err = parse(r#"{ mcpServers: { a: { command: "x", timeoutMs: 1.5 } } }"#).unwrap_err();
    assert_eq!(err.errors[0].path, "mcpServers.a.timeoutMs");
    assert_eq!(
        err.errors[0].message,
        "expected milliseconds from 1 to 3600000"
    );
}

#[test]
fn unknown_fields_are_diagnostics() {
    let (_, diagnostics) =
        parse(r#"{ extra: 1, mcpServers: { a: { command: "x", autoApprove: [] } } }"#).unwrap();
    let paths: Vec<&str> = diagnostics.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(paths, ["extra", "mcpServers.a.autoApprove"]);
}

#[test]
fn tool_policy_globs_per_server_and_for_all() {
    let (config, diagnostics) = parse(
        r#"{
          tools: { allow: ["mcp:fs:*", "lookup"], deny: ["*delete*"] },
          mcpServers: {
            fs: { command: "fs", allowTools: ["read_*", "list_*"], denyTools: ["read_secret*"] },
            open: { command: "open" },
          },
        }"#,
    )
    .unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(
        config.policy,
        ToolPolicy {
            allow: Some(vec!["mcp:fs:*".into(), "lookup".into()]),
            deny: vec!["*delete*".into()],
            ..ToolPolicy::default()
        }
    );
    assert_eq!(config.servers[1].tools, OwnerPolicy::default());
    let policy = config.tool_policy(&ToolPolicy::default());
    let kept = |server: &str, name: &str| gate(&policy, server, name, &Value::Null).is_some();
    assert!(kept("fs", "read_file"));
    assert!(kept("fs", "list_dir"));
    assert!(!kept("fs", "read_secrets"), "the server's denyTools");
    assert!(!kept("fs", "write_file"), "not in the server's allowTools");
    assert!(!kept("fs", "list_delete"), "the global deny");
    assert!(!kept("open", "read_file"), "not in the global allow");
    // The command line's allow list replaces the file's; its deny adds.
    let policy = config.tool_policy(&ToolPolicy {
        allow: Some(vec!["mcp:open:*".into()]),
        deny: vec!["*drop*".into()],
        ..ToolPolicy::default()
    });
    let kept = |server: &str, name: &str| gate(&policy, server, name, &Value::Null).is_some();
    assert!(kept("open", "read_file"));
    assert!(!kept("open", "drop_table"));
    assert!(!kept("open", "delete_row"));

    let problems = parse(
        r#"{ tools: { deny: "x" }, mcpServers: { fs: { command: "fs", allowTools: ["", 3], denyTools: {} } } }"#,
    )
    .unwrap_err();
    let paths: Vec<_> = problems.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "tools.deny",
            "mcpServers.fs.allowTools[1]",
            "mcpServers.fs.allowTools[0]",
            "mcpServers.fs.denyTools"
        ],
        "{problems}"
    );
}

#[test]
fn expansion() {
    assert_eq!(expand("a${TOKEN}b", &env).unwrap(), "as3cretb");
    assert_eq!(expand("${NOPE:-fallback}", &env).unwrap(), "fallback");
    assert_eq!(expand("cost $$5 and $x", &env).unwrap(), "cost $5 and $x");
    assert!(
        expand("${NOPE}", &env)
            .unwrap_err()
            .contains("NOPE is not set")
    );
    assert!(expand("${1x}", &env).is_err());
    assert!(expand("${OPEN", &env).is_err());
}

#[test]
fn bearer_tokens_and_names_that_could_never_work_are_refused() {
    let env = |name: &str| match name {
        "SPACES" => Some(" ".repeat(16)),
        "PADDED" => Some("  a-token-long-enough-0123  ".into()),
        "NEWLINE" => Some("a-token-long-enough\n0123".into()),
        _ => Some("a-token-long-enough-0123456789".into()),
    };
    let text = r#"{ auth: { bearerTokens: [
        "${SPACES}", "${PADDED}", "${NEWLINE}",
        { name: "oauth:alice", token: "${OK}" },
        { name: "bob\nINFO forged line", token: "${OK}" },
        { name: " carol", token: "${OK}" },
    ] } }"#;
    let err = parse_config(text, &env).unwrap_err();
    let found: Vec<(&str, &str)> = err
        .errors
        .iter()
        .map(|e| (e.path.as_str(), e.message.as_str()))
        .collect();
    let expect = [
        ("auth.bearerTokens[0]", "has whitespace"),
        ("auth.bearerTokens[1]", "has whitespace"),
        ("auth.bearerTokens[2]", "has control characters"),
        ("auth.bearerTokens[3].name", "has `:`"),
        ("auth.bearerTokens[4].name", "control characters"),
        ("auth.bearerTokens[5].name", "whitespace"),
    ];
    assert_eq!(found.len(), expect.len(), "{found:?}");
    for ((path, message), (want_path, want)) in found.iter().zip(expect) {
        assert_eq!(*path, want_path, "{found:?}");
        assert!(message.contains(want), "{path}: {message}");
        assert!(
            !message.contains("a-token-long-enough"),
            "never echo a token: {message}"
        );
    }
    // A well-formed token and name still load.
    let (config, _) = parse_config(
        r#"{ auth: { bearerTokens: [{ name: "ci-bot", token: "${OK}" }] } }"#,
        &env,
    )
    .unwrap();
    assert_eq!(config.auth.unwrap().bearer_tokens[0].name, "ci-bot");
}
