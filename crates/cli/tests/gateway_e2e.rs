//! The gateway as MCP users meet it: the official TypeScript MCP client
//! (pinned in `e2e/package-lock.json`) drives `codemode serve` over stdio
//! and over streamable HTTP, with real upstream servers behind it
//! (server-everything over stdio and HTTP, server-memory, and the
//! misbehaving `e2e/servers/flaky.mjs`). The scenarios and their
//! assertions are in `e2e/gateway.test.mjs`; this test runs them against
//! the binary cargo just built.

mod common;

#[test]
fn typescript_mcp_client_against_the_gateway_over_stdio_and_http() {
    let out = common::node(
        &[
            "--test",
            "--test-concurrency=1",
            "--test-reporter=spec",
            "gateway.test.mjs",
        ],
        &[("CODEMODE_BIN", env!("CARGO_BIN_EXE_codemode"))],
    );
    // The spec reporter's summary: every scenario ran and passed.
    assert!(out.contains("ℹ fail 0"), "{out}");
    assert!(!out.contains("ℹ pass 0"), "{out}");
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
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["catalog", "--config", config.to_str().expect("utf-8 path")])
        .output()
        .expect("codemode runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let sum = lines
        .iter()
        .find(|l| l["id"] == "mcp:everything:get-sum")
        .expect("get-sum is listed");
    assert_eq!(sum["call"], "MCP.everything.getSum");
    assert!(lines.len() >= 10, "{lines:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MCP server `ghost`"),
        "the server that cannot start is reported: {err}"
    );
}
