//! The gateway as MCP users meet it: the official TypeScript MCP client
//! (pinned in `e2e/package-lock.json`) drives `codemode serve` over stdio
//! and over streamable HTTP, with real upstream servers behind it
//! (server-everything over stdio and HTTP, server-memory, and the
//! misbehaving `e2e/servers/flaky.mjs`). The scenarios and their
//! assertions are in `e2e/gateway.test.mjs`; this test runs them against
//! the binary cargo just built.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

/// Runs one `node --test` suite of `e2e/` against the binary cargo just
/// built; returns the spec reporter's output.
fn node_suite(file: &str) -> String {
    let out = common::node(
        &[
            "--test",
            "--test-concurrency=1",
            "--test-reporter=spec",
            file,
        ],
        &[("CODEMODE_BIN", env!("CARGO_BIN_EXE_codemode"))],
    );
    // The spec reporter's summary: every scenario ran and passed.
    assert!(out.contains("ℹ fail 0"), "{out}");
    assert!(!out.contains("ℹ pass 0"), "{out}");
    out
}

#[test]
fn typescript_mcp_client_against_the_gateway_over_stdio_and_http() {
    node_suite("gateway.test.mjs");
}

/// The control layer (`e2e/control.test.mjs`): approvals through the
/// client's elicitation (allow once, allow for the session, decline), fail
/// closed without elicitation, the operator endpoint driven by
/// `codemode approvals`, and a hook command that blocks, rewrites and times
/// out, against an upstream whose tools carry MCP annotations.
#[test]
fn typescript_mcp_client_meets_approvals_and_hooks() {
    let out = node_suite("control.test.mjs");
    assert!(out.contains("ℹ pass 15"), "every scenario ran: {out}");
}

/// Production HTTP (`e2e/auth.test.mjs`): bearer tokens (missing, wrong,
/// right), sessions bound to their principal, the per-principal limits
/// (running calls, waiting runs over all sessions),
/// `/metrics` parsed by a Prometheus text parser, and the refusal to serve
/// a non-loopback address without auth.
#[test]
fn typescript_mcp_client_with_bearer_tokens_and_metrics() {
    let out = node_suite("auth.test.mjs");
    assert!(out.contains("ℹ pass 7"), "every scenario ran: {out}");
}

/// OAuth (`e2e/oauth.test.mjs`): the gateway as a protected resource
/// against an authorization server the test runs on loopback (its own RSA
/// keys and JWKS): metadata, valid, expired, wrong-audience, wrong-issuer,
/// forged and symmetric tokens, and a key rotation.
#[test]
fn typescript_mcp_client_with_oauth_access_tokens() {
    let out = node_suite("oauth.test.mjs");
    assert!(out.contains("ℹ pass 8"), "every scenario ran: {out}");
}

/// Traces (`e2e/traces.test.mjs`): spans exported over OTLP/HTTP to a
/// receiver the test runs, continuing the client's `traceparent`, with
/// parent/child links request → exec → nested calls.
#[test]
fn typescript_mcp_client_traces_reach_an_otlp_receiver() {
    let out = node_suite("traces.test.mjs");
    assert!(out.contains("ℹ pass 1"), "the scenario ran: {out}");
}

/// OAuth to upstreams (`e2e/upstream-oauth.test.mjs`): client credentials
/// against an MCP server built with the official SDK behind its own
/// authorization server (wrong credentials name the failure, never the
/// secret); `codemode login` with a scripted browser step (dynamic
/// registration and a pre-registered client, PKCE S256, a refused
/// authorization, logout), the gateway using and refreshing the stored
/// token, a 403 `insufficient_scope` on one call (client credentials: a
/// wider token and one retry; a stored login: the call alone fails, the
/// next login asks for the union), and the same against the SDK's own
/// `mcpAuthRouter`.
#[test]
fn upstream_behind_oauth_client_credentials_and_login() {
    let out = node_suite("upstream-oauth.test.mjs");
    assert!(out.contains("ℹ pass 11\n"), "every scenario ran: {out}");
}

/// One copy of each result (`e2e/results.test.mjs`): the default
/// structured form (outputSchema, `structuredContent`, a one-paragraph
/// text), `text` and `both`, the model's short telemetry and the full one
/// in `_meta`, model-visible bytes against one copy of the result; and a
/// 20 MB upstream result read by handle in slices.
#[test]
fn results_reach_the_client_once_in_each_form() {
    let out = node_suite("results.test.mjs");
    assert!(out.contains("ℹ pass 7"), "every scenario ran: {out}");
}

/// Progress (`e2e/progress.test.mjs`): notifications/progress for an exec
/// with a progress token (nested calls, server-everything's long-running
/// operation relayed step by step, the cell's own `progress`), nothing
/// without one and nothing after the answer.
#[test]
fn progress_reaches_a_client_that_asks() {
    let out = node_suite("progress.test.mjs");
    assert!(out.contains("ℹ pass 2"), "every scenario ran: {out}");
}

/// Durable runs (`e2e/durable.test.mjs`): a waiting run survives SIGKILL
/// of the gateway on the embedded file store (finished calls delivered,
/// dead ones `interrupted`, none run twice), and two gateways share runs on
/// one real redis-server (a call still running on the first is delivered
/// on the second; killing the first mid-call gives `interrupted`); a `wait`
/// sent right after a restart, before the upstream has started, still
/// resumes a run that calls that upstream again; stdio gateways of one
/// user share the default store (another window's gateway resumes a run,
/// the next gateway a SIGKILLed one's); calls held for approval outlive
/// the gateway (listed and approved on the next one, asked again of a
/// reconnected client) and are approved through another replica's
/// operator endpoint.
#[test]
fn waiting_runs_survive_restarts_and_move_between_replicas() {
    let out = node_suite("durable.test.mjs");
    assert!(out.contains("ℹ pass 8\n"), "every scenario ran: {out}");
}

/// Stateless MCP (`e2e/stateless.test.mjs`): the official TypeScript SDK
/// 2.x pinned to 2026-07-28 (no handshake, no session) lists exactly exec
/// and wait and resumes a run from another request by its id, next to a
/// 2025 session client whose runs stay its own; approvals are asked in the
/// result (`input_required`), answered through the SDK's elicitation
/// handler, and the run goes on with its whole output; an upstream's
/// elicitation mid-call is asked the same way, its answer reaches the tool.
#[test]
fn a_stateless_2026_client_resumes_runs_across_requests() {
    let out = node_suite("stateless.test.mjs");
    assert!(out.contains("ℹ pass 8"), "every scenario ran: {out}");
}

/// The official Python SDK's `Client` in its default mode (2026-07-28,
/// no session; `e2e/python/approvals.py`) over stdio and HTTP: a call
/// needing approval is asked about in the result and runs once allowed; a
/// decline denies it.
#[test]
fn python_sdk_client_in_its_default_mode_answers_approvals() {
    let out = common::python(
        "python/approvals.py",
        &[("CODEMODE_BIN", env!("CARGO_BIN_EXE_codemode"))],
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        4,
        "{out}"
    );
}

/// An upstream built with the official Python SDK whose tool elicits
/// mid-call (`e2e/python/upstream_elicits.py`): the gateway speaks to it
/// as the official clients do by default (a session), so its question
/// reaches the client that made the call, and the answer the tool: a
/// client with a session by `elicitation/create`, the SDK's default
/// stateless client in the exec's result (`input_required`).
#[test]
fn a_python_sdk_upstream_that_elicits_works_behind_the_gateway() {
    let out = common::python(
        "python/upstream_elicits.py",
        &[("CODEMODE_BIN", env!("CARGO_BIN_EXE_codemode"))],
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        4,
        "{out}"
    );
}

/// Elicitation relayed (`e2e/elicitation.test.mjs`): server-everything
/// asks its user mid-call; the client whose run made the call answers; a
/// client without elicitation, and `codemode exec` (no client at all), get
/// the upstream `-32601` at once.
#[test]
fn upstream_elicitation_reaches_the_client_that_made_the_call() {
    let out = node_suite("elicitation.test.mjs");
    assert!(out.contains("ℹ pass 3\n"), "every scenario ran: {out}");
}

/// Debug switches (`e2e/debug.test.mjs`): `OPENCLAW_DEBUG_*` and
/// `CODEMODE_DEBUG_*` make the gateway log its model-visible tools, the
/// checked payload (redacted) and activation, bounded.
#[test]
fn debug_switches_log_the_model_surface() {
    let out = node_suite("debug.test.mjs");
    assert!(out.contains("ℹ pass 2"), "every scenario ran: {out}");
}

/// `codemode catalog --config FILE`, which must exit with `code` (1 when
/// a configured server is down): its JSON lines and its stderr.
fn catalog(config: &str, code: i32) -> (Vec<serde_json::Value>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["catalog", "--config", config])
        .output()
        .expect("codemode runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{err}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    (lines, err)
}

#[test]
fn catalog_lists_every_upstream_tool_with_its_call() {
    let dir = common::ensure_npm_installed();
    let server = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let config =
        std::env::temp_dir().join(format!("codemode-catalog-{}.json5", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "{{ mcpServers: {{ everything: {{ command: \"node\", args: [{:?}] }}, ghost: {{ command: \"/nonexistent/server\" }} }} }}",
            server.to_string_lossy()
        ),
    )
    .expect("write config");
    // The ghost is down: the others' tools are listed, and the exit says so.
    let (lines, err) = catalog(config.to_str().expect("utf-8 path"), 1);
    let sum = lines
        .iter()
        .find(|l| l["id"] == "mcp:everything:get-sum")
        .expect("get-sum is listed");
    assert_eq!(sum["call"], "MCP.everything.getSum");
    assert!(lines.len() >= 10, "{lines:?}");
    assert!(
        err.contains("MCP server `ghost`"),
        "the server that cannot start is reported: {err}"
    );
}

#[test]
fn tool_policy_removes_tools_from_every_view_of_the_catalog() {
    let dir = common::ensure_npm_installed();
    let server = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let config = std::env::temp_dir().join(format!("codemode-policy-{}.json5", std::process::id()));
    // Per server: only echo and get-*, but nothing with "sum"; for every
    // server: not echo (by its id).
    std::fs::write(
        &config,
        format!(
            r#"{{
              tools: {{ deny: ["mcp:everything:echo"] }},
              mcpServers: {{ everything: {{ command: "node", args: [{:?}], allowTools: ["echo", "get-*"], denyTools: ["*sum*"] }} }},
            }}"#,
            server.to_string_lossy()
        ),
    )
    .expect("write config");
    let config = config.to_str().expect("utf-8 path");

    let ids: Vec<String> = catalog(config, 0)
        .0
        .iter()
        .map(|line| line["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!ids.is_empty(), "some get-* tools stay");
    for id in &ids {
        assert!(
            id.starts_with("mcp:everything:get-"),
            "{id} is not allowed: {ids:?}"
        );
        assert!(!id.contains("sum"), "{id} is denied: {ids:?}");
    }

    let cell = r#"
        const names = Object.keys(MCP.everything).filter((k) => typeof MCP.everything[k] === "function" && k !== "$api");
        const dts = await API.read("mcp/everything.d.ts");
        const found = await tools.search("sum echo", { limit: 50 });
        return {
          names,
          getSum: "getSum" in MCP.everything,
          echo: "echo" in MCP.everything,
          // A denied tool is no tool of the run: its name is only a
          // placeholder whose call is refused with a code.
          getSumCall: await MCP.everything.getSum({ a: 1, b: 2 }).then(() => "called", (e) => e.code),
          dtsMentions: ["getSum", "echo(", "get-sum"].filter((w) => dts.includes(w)),
          searchIds: JSON.stringify(found).match(/mcp:everything:[a-z-]+/g) ?? [],
        };
    "#;
    let result = exec_cell(config, cell);
    assert_eq!(result["status"], "completed", "{result}");
    let value = &result["value"];
    assert_eq!(value["getSum"], false, "{value}");
    assert_eq!(value["echo"], false, "{value}");
    assert_eq!(value["getSumCall"], "nested_tool_failed", "{value}");
    assert_eq!(value["dtsMentions"], serde_json::json!([]), "{value}");
    let names = value["names"].as_array().expect("names");
    assert_eq!(
        names.len(),
        ids.len(),
        "MCP.everything holds exactly the catalog: {value}"
    );
    for id in value["searchIds"].as_array().expect("search ids") {
        let id = id.as_str().unwrap_or_default();
        assert!(
            ids.iter().any(|kept| kept == id),
            "search found a removed tool {id}"
        );
    }
}

/// `codemode exec --config FILE -` with `cell` on stdin: the one JSON result.
fn exec_cell(config: &str, cell: &str) -> serde_json::Value {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["exec", "--config", config, "-"])
        .env("CODEMODE_DATA_DIR", common::data_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("codemode runs");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(cell.as_bytes()).expect("write the cell");
    }
    let out = child.wait_with_output().expect("codemode exits");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "not one JSON result ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn api_search_and_the_name_check_through_codemode_exec() {
    let dir = common::ensure_npm_installed();
    let server = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let config = std::env::temp_dir().join(format!("codemode-search-{}.json5", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "{{ mcpServers: {{ everything: {{ command: \"node\", args: [{:?}] }} }} }}",
            server.to_string_lossy()
        ),
    )
    .expect("write config");
    let config = config.to_str().expect("utf-8 path");

    let found = exec_cell(
        config,
        "const [hit] = await API.search('echo a message back'); return { hit, sum: (await MCP.everything.getSum({ a: 2, b: 3 })).content[0].text };",
    );
    assert_eq!(found["status"], "completed", "{found}");
    assert_eq!(
        found["value"]["hit"]["path"], "MCP.everything.echo",
        "{found}"
    );
    assert_eq!(found["value"]["hit"]["server"], "everything");
    assert_eq!(found["value"]["sum"], "The sum of 2 and 3 is 5.");

    let refused = exec_cell(
        config,
        "await MCP.everything.echo({ message: 'first' });\nawait MCP.everything.getSums({ a: 1 });",
    );
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(refused["code"], "invalid_input", "{refused}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("line 2, column 7: MCP.everything.getSums is not a tool of MCP.everything; did you mean MCP.everything.getSum?"),
        "{error}"
    );
    assert_eq!(
        refused["telemetry"]["nestedCallCount"], 0,
        "nothing ran: {refused}"
    );
}
