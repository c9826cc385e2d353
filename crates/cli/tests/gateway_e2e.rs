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
