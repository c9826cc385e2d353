//! `codemode exec` as users run it: stdin or a file in, one JSON result out,
//! exit 0 for completed or waiting, 1 for failed, 2 for bad usage.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn codemode(args: &[&str], stdin: &str) -> Output {
    codemode_with(args, stdin, &[])
}

/// `codemode` with `args`, `stdin` and more environment variables. Its
/// data directory (the default run store) is this test process's.
fn codemode_with(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(args)
        .env("CODEMODE_DATA_DIR", common::data_dir())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codemode runs");
    // A process that exits before reading stdin (bad usage) closes the pipe;
    // that is not a test failure.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn results(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("codemode-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `codemode` with `args`, then the path of a temp file `name` holding `text`.
fn codemode_on(args: &[&str], (name, text): (&str, &str), stdin: &str) -> Output {
    let path = write_temp(name, text);
    codemode(&[args, &[path.to_str().unwrap()]].concat(), stdin)
}

/// `codemode` with `args` and `stdin`, asserted to exit 0; its first result.
fn first_result_exit_zero(args: &[&str], stdin: &str) -> serde_json::Value {
    let out = codemode(args, stdin);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    results(&out).swap_remove(0)
}

/// Asserts that `out` exited with `code` and that its stderr says each of
/// `parts`.
fn assert_stderr(out: &Output, code: i32, parts: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    for part in parts {
        assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
    }
}

/// `codemode check-config` on a temp file `name` holding `config`: its exit
/// code and report.
fn check_config(name: &str, config: &str) -> (Option<i32>, String) {
    let out = codemode_on(&["check-config", "--offline"], (name, config), "");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code(), report)
}

#[test]
fn completed_cells_exit_zero_with_one_result() {
    let out = codemode(&["exec"], "text('hi'); return 1 + 1");
    assert_eq!(out.status.code(), Some(0));
    let r = results(&out);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["status"], "completed");
    assert_eq!(r[0]["value"], 2);
    assert_eq!(r[0]["output"][0]["text"], "hi");
}

#[test]
fn failed_cells_exit_one() {
    let out = codemode(&["exec", "-"], "throw new TypeError('nope')");
    assert_eq!(out.status.code(), Some(1));
    let r = results(&out);
    assert_eq!(r[0]["status"], "failed");
    assert!(
        r[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("TypeError: nope (line 1, column "),
        "{}",
        r[0]
    );
}

#[test]
fn config_limits_apply_and_codes_are_reported() {
    let config = write_temp(
        "limits.json5",
        "// JSON5 comments are fine\n{ tools: { codeMode: { enabled: true, timeoutMs: 200, memoryLimitBytes: 8388608, } } }",
    );
    // The memory cell gets a long timeout: on a loaded machine 200 ms can
    // pass before 8 MiB are filled, and the cell must fail on memory.
    let roomy = write_temp(
        "limits-memory.json5",
        "{ tools: { codeMode: { enabled: true, timeoutMs: 20000, memoryLimitBytes: 8388608 } } }",
    );
    for (config, cell, code) in [
        (&config, "while(true){}", "timeout"),
        (
            &roomy,
            "const a = []; for (;;) a.push('x'.repeat(1 << 20) + Math.random())",
            "memory_limit_exceeded",
        ),
    ] {
        let config = config.to_str().unwrap();
        let out = codemode(&["exec", "--config", config], cell);
        assert_eq!(out.status.code(), Some(1), "{cell}");
        assert_eq!(results(&out)[0]["code"], code, "{cell}");
    }
}

#[test]
fn cells_can_come_from_a_file() {
    let out = codemode_on(
        &["exec"],
        (
            "cell.js",
            "const xs = [1, 2, 3];\nreturn xs.reduce((a, b) => a + b, 0);\n",
        ),
        "",
    );
    assert_eq!(results(&out)[0]["value"], 6);
}

#[test]
fn waiting_exits_zero_and_follow_prints_every_result() {
    let out = codemode(&["exec"], "await yield_control('x'); return 'resumed'");
    assert_eq!(out.status.code(), Some(0));
    let r = results(&out);
    assert_eq!((r.len(), r[0]["status"].as_str()), (1, Some("waiting")));
    assert!(r[0]["runId"].as_str().unwrap().starts_with("run_"));

    let out = codemode(
        &["exec", "--follow"],
        "await yield_control('x'); await yield_control('y'); return 'resumed'",
    );
    let r = results(&out);
    let statuses: Vec<&str> = r.iter().map(|v| v["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["waiting", "waiting", "completed"]);
    assert_eq!(r[2]["value"], "resumed");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn bad_usage_exits_two() {
    assert_eq!(
        codemode(&["exec", "--language", "cobol"], "").status.code(),
        Some(2)
    );
    assert_eq!(codemode(&["frobnicate"], "").status.code(), Some(2));
    assert_eq!(
        codemode(&["exec", "/no/such/cell.js"], "").status.code(),
        Some(2)
    );
    // A wrong config is the run's failure: invalid_config naming the field.
    let bad = (
        "bad.json5",
        "{ tools: { codeMode: { timeoutMs: 'soon' } } }",
    );
    let out = codemode_on(&["exec", "--config"], bad, "return 1");
    assert_eq!(out.status.code(), Some(1));
    let result = &results(&out)[0];
    assert_eq!(result["status"], "failed");
    assert_eq!(result["code"], "invalid_config");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("tools.codeMode.timeoutMs"),
        "{result}"
    );
    // Refused before the cell ran, the telemetry still says what the
    // contract promises: the requested language and the model's two tools.
    assert_eq!(result["telemetry"]["language"], "javascript", "{result}");
    assert_eq!(
        result["telemetry"]["visibleTools"],
        serde_json::json!(["exec", "wait"]),
        "{result}"
    );
    let out = codemode_on(
        &["exec", "--language", "typescript", "--config"],
        bad,
        "return 1",
    );
    assert_eq!(out.status.code(), Some(1));
    let result = &results(&out)[0];
    assert_eq!(result["code"], "invalid_config");
    assert_eq!(result["telemetry"]["language"], "typescript", "{result}");
    assert_eq!(
        result["telemetry"]["visibleTools"],
        serde_json::json!(["exec", "wait"]),
        "{result}"
    );
}

#[test]
fn check_config_reports_every_problem_with_its_path() {
    let (code, text) = check_config(
        "check.json5",
        "{ tools: { codeMode: { enabled: true, timeoutMs: 1, maxOutputBytes: 1e9, bogus: 1 } } }",
    );
    for path in [
        "tools.codeMode.timeoutMs",
        "tools.codeMode.maxOutputBytes",
        "tools.codeMode.bogus",
    ] {
        assert!(text.contains(path), "{path} missing from:\n{text}");
    }
    assert_eq!(code, Some(0));
}

#[test]
fn check_config_reports_every_mcp_server_problem_and_exits_one() {
    let (code, text) = check_config(
        "check-mcp.json5",
        r#"{
          tools: { codeMode: { enabled: "yes", timeoutMs: "soon" } },
          mcpServers: {
            ok: { command: "node", args: ["server.js"], env: { TOKEN: "very-secret-value" } },
            "bad name": { command: "x" },
            both: { command: "x", url: "https://example.com/mcp" },
            web: { url: "ftp://example.com", headers: { Authorization: ["very-secret-value"] } },
          },
        }"#,
    );
    for path in [
        "tools.codeMode.enabled",
        "tools.codeMode.timeoutMs",
        "mcpServers[\"bad name\"]",
        "mcpServers.both.url",
        "mcpServers.web.headers.Authorization",
        "mcpServers.web.url",
    ] {
        assert!(text.contains(path), "{path} missing from:\n{text}");
    }
    assert!(!text.contains("very-secret-value"), "{text}");
    assert_eq!(code, Some(1));
}

#[test]
fn the_example_gateway_config_checks_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args([
            "check-config",
            "--offline",
            root.join("examples/gateway.json5").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with(": ok (2 MCP servers)\n"), "{text}");
    assert_eq!(out.status.code(), Some(0));
}

/// `check-config` starts the servers and counts what each approval mode
/// gates; an unannotated tool counts as possibly destructive (the MCP
/// specification's defaults), and a server that does not start fails the
/// check.
#[test]
fn check_config_counts_the_tools_each_approval_mode_gates() {
    let e2e = common::ensure_npm_installed();
    let annotated = e2e.join("servers/annotated.mjs");
    let config = serde_json::json!({
        "mcpServers": { "annotated": { "command": "node", "args": [annotated] } },
    })
    .to_string();
    let out = codemode_on(&["check-config"], ("gateway.json", &config), "");
    let report = String::from_utf8_lossy(&out.stdout);
    // peek, echo, blocked, runs: read-only; note: a write, not destructive;
    // touch: no annotations; drop: destructive.
    assert!(
        report.contains(
            "of 7 MCP tools (1 without readOnlyHint/destructiveHint, which count as possibly destructive), each approvals.mode would ask before calls of: never 0, destructive 2 (configured), writes 3, always 7"
        ),
        "{report}"
    );
    assert_eq!(out.status.code(), Some(0), "{report}");

    let down = serde_json::json!({
        "mcpServers": { "gone": { "command": "/nonexistent/codemode-test-server" } },
    })
    .to_string();
    let out = codemode_on(&["check-config"], ("gateway.json", &down), "");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("gone"));
}

#[test]
fn serve_refuses_a_config_that_turns_code_mode_off() {
    let off = (
        "off.json5",
        "{ tools: { codeMode: false }, mcpServers: {} }",
    );
    let out = codemode_on(&["serve", "--config"], off, "");
    assert_stderr(&out, 2, &["code mode is disabled"]);
    assert!(out.stdout.is_empty(), "nothing on the MCP channel");
}

/// A gateway config with one server that never starts: it has a tool
/// source (a config with none is refused), and the cells need none.
const GHOST_SERVER: &str =
    r#"{ mcpServers: { ghost: { command: "/nonexistent/codemode-test-server" } } }"#;

#[test]
fn serve_addresses_take_localhost_and_a_taken_port_is_named_once() {
    let config = ("serve.json5", GHOST_SERVER);
    let out = codemode_on(
        &["serve", "--http", "localhost:nope", "--config"],
        config,
        "",
    );
    assert_stderr(&out, 2, &["localhost:PORT", "--allow-host"]);
    // A port another socket holds: the error names the address, once.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let port = at.rsplit(':').next().unwrap().to_owned();
    let out = codemode_on(
        &["serve", "--http", &format!("localhost:{port}"), "--config"],
        config,
        "",
    );
    assert_stderr(
        &out,
        2,
        &[&format!("cannot listen on {at}"), "another process"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("Address already in use").count(),
        1,
        "the system's words once: {stderr}"
    );
}

#[test]
fn an_upstream_that_cannot_start_is_reported_and_leaves_the_cell_running() {
    let ghost = r#"{ mcpServers: { ghost: { command: "/nonexistent/codemode-test-server" } } }"#;
    let out = codemode_on(
        &["exec", "--config"],
        ("broken-upstream.json5", ghost),
        "return Object.keys(MCP)",
    );
    assert_stderr(
        &out,
        0,
        &["MCP server `ghost`", "/nonexistent/codemode-test-server"],
    );
    assert_eq!(results(&out)[0]["value"], serde_json::json!([]));
    // `catalog` is about the servers: one that is down fails it.
    let out = codemode_on(
        &["catalog", "--config"],
        ("broken-upstream.json5", ghost),
        "",
    );
    assert_stderr(&out, 1, &["MCP server `ghost`"]);
}

#[test]
fn a_tool_nesting_too_deeply_is_left_out_and_its_server_stays() {
    // One tool's inputSchema nests past what the MCP SDK reads in one
    // message: the whole tools/list reply was refused, taking the server's
    // other tools with it.
    let e2e = common::ensure_npm_installed();
    let config = serde_json::json!({
        "mcpServers": { "d": { "command": "node", "args": [e2e.join("servers/deep-schema.mjs")] } },
    })
    .to_string();
    let out = codemode_on(
        &["exec", "--config"],
        ("deep-schema.json", &config),
        "return [Object.keys(MCP.d).filter(k => !k.startsWith('$')).sort(), (await MCP.d.fine({})).content[0].text]",
    );
    assert_stderr(&out, 0, &["tool left out", "deep"]);
    assert_eq!(
        results(&out)[0]["value"],
        serde_json::json!([["fine", "shallow"], "fine"])
    );
}

#[test]
fn a_server_that_dies_at_start_is_reported_with_what_it_said() {
    // As npx does for a mistyped package: the reason is on its stderr only.
    let typo = r#"{ mcpServers: { typo: { command: "sh", args: ["-c", "echo 'npm error 404 Not Found - GET https://registry.npmjs.org/server-evrything' >&2; exit 1"] } } }"#;
    let out = codemode_on(&["catalog", "--config"], ("typo-upstream.json5", typo), "");
    assert_stderr(
        &out,
        1,
        &[
            "MCP server `typo`",
            "it wrote on stderr: npm error 404 Not Found",
        ],
    );
}

#[test]
fn json_log_mode_writes_only_json_lines_on_stderr() {
    // A diagnostic, an upstream that is down and the cell's own logs: every
    // stderr line is one JSON object with a level and a message.
    let config =
        r#"{ extra: 1, mcpServers: { ghost: { command: "/nonexistent/codemode-test-server" } } }"#;
    let out = codemode_on(
        &["exec", "--log-format", "json", "--config"],
        ("json-logs.json5", config),
        "return 1",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let said = |part: &str| {
        lines.iter().any(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(part))
        })
    };
    assert!(said("config: extra: unknown field"), "{stderr}");
    assert!(said("MCP server `ghost`"), "{stderr}");
    assert!(lines.iter().all(|l| l["level"].is_string()), "{stderr}");
    assert_eq!(results(&out)[0]["value"], 1);
}

fn tools_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tools.json5")
}

#[test]
fn cells_call_scripted_tools_from_a_tools_file() {
    let tools = tools_file();
    let r = &first_result_exit_zero(
        &["exec", "--tools", tools.to_str().unwrap()],
        "const r = await tools.read({ path: 'README.md' });\nconst e = await tools.call('client:app:echo', { a: [1, 2] });\nlet err; try { await tools.charge({}); } catch (x) { err = x.message; }\nreturn { first: r.text.split('\\n')[0], e, err, n: ALL_TOOLS.length, f: (await tools.forecast({})).sky };",
    );
    assert_eq!(r["value"]["first"], "# codemode");
    assert_eq!(r["value"]["e"], serde_json::json!({"a": [1, 2]}));
    assert_eq!(
        r["value"]["err"],
        "tool plugin:billing:charge failed: billing is offline"
    );
    assert_eq!(r["value"]["n"], 5);
    assert_eq!(r["value"]["f"], "clear");
    assert_eq!(r["telemetry"]["nestedCallCount"], 4);
}

#[test]
fn deny_removes_tools_by_name_or_id() {
    let tools = tools_file();
    let out = codemode(
        &[
            "exec",
            "--tools",
            tools.to_str().unwrap(),
            "--deny",
            "read",
            "--deny",
            "client:app:echo",
        ],
        "let err; try { await tools.call('openclaw:core:read', {}); } catch (e) { err = e.message; }\nreturn { ids: ALL_TOOLS.map(t => t.id), err };",
    );
    let r = &results(&out)[0];
    let ids = r["value"]["ids"].as_array().unwrap();
    assert_eq!(ids.len(), 3, "{r}");
    assert!(!ids.contains(&serde_json::json!("openclaw:core:read")));
    assert!(
        r["value"]["err"].as_str().unwrap().contains("no tool"),
        "{r}"
    );
}

#[test]
fn follow_waits_for_slow_tools_in_the_same_process() {
    let tools = tools_file();
    let config = write_temp(
        "fast.json5",
        "{ tools: { codeMode: { enabled: true, timeoutMs: 1000 } } }",
    );
    let cell = "text('asked');\nconst report = await tools.slow_report();\nreturn report;";
    // `codemode exec [follow] --config <fast> --tools <tools>`: its results.
    let exec = |follow: &[&str]| {
        let files = [
            "--config",
            config.to_str().unwrap(),
            "--tools",
            tools.to_str().unwrap(),
        ];
        results(&codemode(&[&["exec"], follow, &files].concat(), cell))
    };
    let r = exec(&[]);
    assert_eq!(
        r.len(),
        1,
        "without --follow only the first result is printed"
    );
    assert_eq!(r[0]["status"], "waiting", "{r:?}");
    assert_eq!(
        r[0]["pendingToolCalls"][0]["toolId"],
        "client:app:slow_report"
    );

    let r = exec(&["--follow"]);
    let statuses: Vec<&str> = r.iter().map(|v| v["status"].as_str().unwrap()).collect();
    assert!(statuses.len() >= 3, "{statuses:?}");
    assert!(
        statuses[..statuses.len() - 1]
            .iter()
            .all(|s| *s == "waiting"),
        "{statuses:?}"
    );
    assert_eq!(r.last().unwrap()["value"], "report ready", "{r:?}");
    assert_eq!(
        r.last().unwrap()["telemetry"]["waitCount"],
        (statuses.len() - 1) as u64
    );
}

#[test]
fn bad_tools_files_name_the_entry_and_field() {
    let tools = "{ tools: [ { source: 'plugin', owner: 'p', name: 'ok', result: 1 }, { source: 'plugin', owner: 'p', name: 'slow', result: 1, delayMs: 'soon' } ] }";
    let out = codemode_on(&["exec", "--tools"], ("bad-tools.json5", tools), "return 1");
    assert_stderr(
        &out,
        2,
        &["tools[1] (`slow`): field `delayMs`: expected milliseconds from 0 to 3600000"],
    );
}

#[test]
fn the_examples_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = codemode(
        &[
            "exec",
            "--tools",
            tools_file().to_str().unwrap(),
            root.join("examples/tools.js").to_str().unwrap(),
        ],
        "",
    );
    let r = &results(&out)[0];
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"]["forecasts"][0], "Berlin: 21°C");
    assert_eq!(
        r["value"]["charge"],
        "tool plugin:billing:charge failed: billing is offline"
    );
}

#[test]
fn typescript_cells_run_with_language_typescript() {
    let r = &first_result_exit_zero(
        &["exec", "--language", "typescript"],
        "interface P { x: number }\nenum E { A = 2 }\nconst p: P = { x: E.A };\nreturn p.x as number;",
    );
    assert_eq!(r["value"], 2, "{r}");
    assert_eq!(r["telemetry"]["language"], "typescript");
    let out = codemode(&["exec"], "import fs from 'fs';\nreturn 1");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(results(&out)[0]["code"], "module_access_denied");
}

#[test]
fn serve_exits_on_sigterm_even_while_the_client_says_nothing() {
    let config = write_temp("idle.json5", GHOST_SERVER);
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        // Data (the default run store) of this test process, not the user's.
        .env("CODEMODE_DATA_DIR", common::data_dir())
        .env("CODEMODE_LOG", "error")
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Give it time to start serving; stdin stays open and silent.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("codemode serve did not exit within 10 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

/// A temp file `name` holding `text`, as a path string.
fn temp_path(name: &str, text: &str) -> String {
    write_temp(name, text).to_str().unwrap().to_owned()
}

/// `codemode exec` runs the config's `hooks.beforeToolCall` as `serve`
/// does: the hook blocks one tool, lets the others (and the exec) through,
/// and sees the agent the session runs as.
#[test]
fn exec_runs_the_configured_hook() {
    let seen = std::env::temp_dir().join(format!("codemode-hook-seen-{}", std::process::id()));
    let hook = format!(
        r#"input=$(cat); printf '%s\n' "$input" >> '{}'; case "$input" in *plugin:billing:charge*) echo '{{"decision":"block","reason":"blocked by the test hook"}}';; *) echo '{{"decision":"allow"}}';; esac"#,
        seen.display()
    );
    let config = serde_json::json!({
        "hooks": { "beforeToolCall": { "command": ["sh", "-c", hook] } },
        "agents": { "list": [{ "id": "ops" }] },
    })
    .to_string();
    let config = temp_path("hook.json5", &config);
    let tools = tools_file();
    let r = first_result_exit_zero(
        &[
            "exec",
            "--config",
            &config,
            "--agent",
            "ops",
            "--tools",
            tools.to_str().unwrap(),
        ],
        "const f = await tools.forecast({});\nlet err; try { await tools.charge({}); } catch (e) { err = [e.code, e.message]; }\nreturn { sky: f.sky, err };",
    );
    assert_eq!(r["value"]["sky"], "clear", "{r}");
    assert_eq!(r["value"]["err"][0], "approval_denied", "{r}");
    assert!(
        r["value"]["err"][1]
            .as_str()
            .unwrap()
            .contains("blocked by the test hook"),
        "{r}"
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert!(seen.contains("\"toolKind\":\"code_mode_exec\""), "{seen}");
    assert!(seen.contains("\"agentId\":\"ops\""), "{seen}");
}

/// `results.handleBytes` applies under `exec`: a nested result larger
/// than it reaches the cell as a handle.
#[test]
fn exec_applies_result_handles() {
    let big = "x".repeat(5000);
    let tools = temp_path(
        "big-tools.json5",
        &format!(
            r#"{{ tools: [{{ source: "plugin", owner: "docs", name: "big", result: {{ text: "{big}" }} }}] }}"#
        ),
    );
    let cell = "const r = await tools.big({});\nreturn { handle: typeof r.text === 'function', bytes: r.bytes, head: typeof r.text === 'function' ? await r.text(0, 3) : null };";
    let config = temp_path("handles.json5", "{ results: { handleBytes: 1024 } }");
    let r = first_result_exit_zero(&["exec", "--config", &config, "--tools", &tools], cell);
    assert_eq!(r["value"]["handle"], true, "{r}");
    assert!(r["value"]["bytes"].as_u64().unwrap() > 5000, "{r}");
    // The nested result's JSON text starts as the tool's JSON does.
    assert!(r["value"]["head"].is_string(), "{r}");
    let r = first_result_exit_zero(&["exec", "--tools", &tools], cell);
    assert_eq!(r["value"]["handle"], false, "the default is 1 MiB: {r}");
}

/// A call that needs approval has no one to ask under `exec`: refused
/// with a message saying how to let it run; `--follow --approve` approves.
#[test]
fn exec_refuses_approvals_unless_follow_approve() {
    let tools = temp_path(
        "approve-tools.json5",
        r#"{ tools: [{ source: "plugin", owner: "ops", name: "deploy", result: "deployed", needsApproval: true }] }"#,
    );
    let cell = "try { return await tools.deploy({}); } catch (e) { return [e.code, e.message]; }";
    let r = first_result_exit_zero(&["exec", "--tools", &tools], cell);
    assert_eq!(r["value"][0], "approval_denied", "{r}");
    let message = r["value"][1].as_str().unwrap();
    assert!(
        message.contains("approval required: calls of plugin:ops:deploy")
            && message.contains("--follow --approve"),
        "{message}"
    );
    let out = codemode(&["exec", "--tools", &tools, "--follow", "--approve"], cell);
    let r = results(&out);
    assert_eq!(r[0]["status"], "waiting", "{r:?}");
    assert_eq!(r[0]["reason"], "approval", "{r:?}");
    assert_eq!(r.last().unwrap()["value"], "deployed", "{r:?}");
    assert_eq!(out.status.code(), Some(0));
}

/// The debug switches log under `exec` as under `serve`: the session's
/// surface and the checked tool list.
#[test]
fn debug_switches_log_under_exec() {
    let out = codemode_with(
        &["exec"],
        "return 1",
        &[
            ("OPENCLAW_DEBUG_CODE_MODE", "1"),
            ("OPENCLAW_DEBUG_MODEL_PAYLOAD", "tools"),
        ],
    );
    assert_stderr(
        &out,
        0,
        &[
            "code mode active for a local session",
            "visible=[\"exec\", \"wait\"]",
            "model-visible tools",
        ],
    );
    let out = codemode(&["exec"], "return 1");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("codemode::debug"),
        "off by default"
    );
}

/// A run one `codemode exec` process leaves waiting in the default file
/// store is resumed by `codemode wait` in later processes, against a real
/// MCP server over stdio: a finished call's result is delivered, a call
/// the first process was still running is `interrupted` (never re-run).
#[test]
fn a_later_process_resumes_a_waiting_run_with_codemode_wait() {
    let e2e = common::ensure_npm_installed();
    let log = std::env::temp_dir().join(format!("codemode-slow-log-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let config = serde_json::json!({
        "tools": { "codeMode": { "enabled": true, "timeoutMs": 1500 } },
        "mcpServers": { "slow": {
            "command": "node",
            "args": [e2e.join("servers/slow.mjs")],
            "env": { "SLOW_LOG": log },
        } },
    })
    .to_string();
    let config = temp_path("slow.json5", &config);
    // Its own data directory: the default store file is this test's alone.
    let data = std::env::temp_dir().join(format!("codemode-wait-data-{}", std::process::id()));
    let data = data.to_str().unwrap();
    let env = [("CODEMODE_DATA_DIR", data)];
    let run = |args: &[&str], stdin: &str| {
        let out = codemode_with(args, stdin, &env);
        let r = results(&out);
        assert_eq!(
            r.len(),
            1,
            "{r:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), r[0].clone())
    };
    let (code, r) = run(
        &["exec", "--config", &config],
        "const a = await MCP.slow.sleep({ ms: 10, tag: 'a' });\nawait yield_control('one');\nawait yield_control('two');\nreturn JSON.stringify(a);",
    );
    assert_eq!(
        (code, r["status"].as_str()),
        (Some(0), Some("waiting")),
        "{r}"
    );
    let id = r["runId"].as_str().unwrap().to_owned();
    // Another process: the run goes on and waits again.
    let (code, r) = run(&["wait", &id, "--config", &config], "");
    assert_eq!(
        (code, r["status"].as_str()),
        (Some(0), Some("waiting")),
        "{r}"
    );
    assert_eq!(r["runId"], id.as_str());
    // A third, following it to the end.
    let (code, r) = run(&["wait", &id, "--config", &config, "--follow"], "");
    assert_eq!(
        (code, r["status"].as_str()),
        (Some(0), Some("completed")),
        "{r}"
    );
    assert!(r["value"].as_str().unwrap().contains("slept a"), "{r}");
    // Finished: nothing is left to resume.
    let (code, r) = run(&["wait", &id, "--config", &config], "");
    assert_eq!(
        (code, r["code"].as_str()),
        (Some(1), Some("invalid_input")),
        "{r}"
    );

    // A call still running when exec's process ends is interrupted.
    let (_, r) = run(
        &["exec", "--config", &config],
        "try { return await MCP.slow.sleep({ ms: 20000, tag: 'b' }); } catch (e) { return e.code; }",
    );
    assert_eq!(r["status"], "waiting", "{r}");
    let id = r["runId"].as_str().unwrap().to_owned();
    let (code, r) = run(&["wait", &id, "--config", &config], "");
    assert_eq!(
        (code, &r["value"]),
        (Some(0), &serde_json::json!("interrupted")),
        "{r}"
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log.matches("start b").count(), 1, "never run twice: {log}");
    // Another agent's session is another owner: it cannot take the run.
    let agents = temp_path(
        "slow-agents.json5",
        &std::fs::read_to_string(&config).unwrap().replacen(
            '{',
            r#"{ "agents": { "list": [{ "id": "ops" }] }, "#,
            1,
        ),
    );
    let (_, r) = run(
        &["exec", "--config", &agents],
        "await yield_control('x'); return 1",
    );
    let id = r["runId"].as_str().unwrap().to_owned();
    let (code, r) = run(&["wait", &id, "--config", &agents, "--agent", "ops"], "");
    assert_eq!(code, Some(1), "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("belongs to another owner"),
        "{r}"
    );
    let (code, r) = run(&["wait", &id, "--config", &agents], "");
    assert_eq!((code, &r["value"]), (Some(0), &serde_json::json!(1)), "{r}");
}

/// `--agent ID` selects `agents.list[]`'s block merged over the global
/// one, for `exec`, `serve` and `check-config`; an unknown id names the
/// ones that exist, and an agent's `codeMode: false` keeps its meaning
/// (`serve` refuses it).
#[test]
fn agents_select_their_code_mode_block() {
    let config = temp_path(
        "agents.json5",
        r#"{
          tools: { codeMode: { enabled: true, timeoutMs: 20000 } },
          agents: { list: [
            { id: "quick", model: "m", tools: { codeMode: { timeoutMs: 200 } } },
            { id: "chat", tools: { codeMode: false } },
          ] },
          mcpServers: { ghost: { command: "/nonexistent/codemode-test-server" } },
        }"#,
    );
    let out = codemode(
        &["exec", "--config", &config, "--agent", "quick"],
        "while (true) {}",
    );
    assert_eq!(results(&out)[0]["code"], "timeout");
    assert!(
        results(&out)[0]["telemetry"]["durationMs"]
            .as_f64()
            .unwrap()
            < 10_000.0,
        "the agent's 200 ms, not the global 20 s"
    );
    // An unknown agent: invalid_config naming the agents there are.
    let out = codemode(
        &["exec", "--config", &config, "--agent", "quik"],
        "return 1",
    );
    assert_eq!(out.status.code(), Some(1));
    let error = results(&out)[0]["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains(
            "no agent \"quik\" (did you mean \"quick\"?); the agents are: \"quick\", \"chat\""
        ),
        "{error}"
    );
    let out = codemode(&["serve", "--config", &config, "--agent", "nobody"], "");
    assert_stderr(&out, 2, &["no agent \"nobody\"", "\"quick\", \"chat\""]);
    let out = codemode(&["serve", "--config", &config, "--agent", "chat"], "");
    assert_stderr(&out, 2, &["code mode is disabled for agent \"chat\""]);
    assert!(out.stdout.is_empty());

    let out = codemode(
        &["check-config", "--offline", "--agent", "quick", &config],
        "",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("ok (1 MCP server, as agent \"quick\")"),
        "{report}"
    );
    assert!(
        report.contains("agents.list[0].model: unknown field"),
        "{report}"
    );
    assert_eq!(out.status.code(), Some(0), "{report}");
    let out = codemode(
        &["check-config", "--offline", "--agent", "chat", &config],
        "",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("note: code mode is off"), "{report}");
    let out = codemode(
        &["check-config", "--offline", "--agent", "nobody", &config],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("agents.list: no agent \"nobody\""),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The reference's activation: a run without tools gets no code-mode
/// surface. A config that gives the gateway no tool at all is refused by
/// `serve`, saying why; `check-config` notes it.
#[test]
fn serve_refuses_a_config_with_no_tools() {
    for (config, why) in [
        ("{ mcpServers: {} }", "no MCP server is configured"),
        (
            r#"{ mcpServers: { fs: { command: "fs", disabled: true } } }"#,
            "no MCP server is configured",
        ),
        (
            r#"{ tools: { allow: [] }, mcpServers: { fs: { command: "fs" } } }"#,
            "the tool policy lets no tool through",
        ),
        (
            r#"{ mcpServers: { fs: { command: "fs", allowTools: [] }, db: { command: "db", denyTools: ["*"] } } }"#,
            "every server's allowTools is empty",
        ),
    ] {
        let out = codemode_on(&["serve", "--config"], ("no-tools.json5", config), "");
        assert_stderr(
            &out,
            2,
            &["gives code mode no tools", why, "nothing to serve"],
        );
        assert!(out.stdout.is_empty(), "nothing on the MCP channel");
        let (code, report) = check_config("no-tools.json5", config);
        assert!(report.contains("note: no tools for code mode"), "{report}");
        assert_eq!(code, Some(0), "the file itself is fine: {report}");
    }
    let out = codemode_on(
        &["serve", "--deny", "*", "--config"],
        ("deny-all.json5", GHOST_SERVER),
        "",
    );
    assert_stderr(&out, 2, &["the tool policy lets no tool through"]);
}

/// A receiver that is down loses the spans, and the operator is told so on
/// stderr (the SDK alone drops export errors silently); the run itself is
/// unaffected.
#[test]
fn a_failed_trace_export_is_logged() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = codemode_with(
        &["exec"],
        "return 1",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(results(&out)[0]["status"], "completed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("OpenTelemetry export failed") && stderr.contains(&endpoint),
        "stderr: {stderr}"
    );
}
