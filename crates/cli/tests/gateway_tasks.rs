//! The gateway on the stateless MCP protocol (2026-07-28: no handshake, no
//! session) with the Tasks extension, driven by a real MCP client: rmcp's
//! own (the official Rust SDK), which implements SEP-2663 tasks (the
//! official TypeScript SDK 2.4 refuses task results; its stateless client
//! is tested in `e2e/stateless.test.mjs`). The upstream is the real
//! `e2e/servers/slow.mjs` over stdio.
//!
//! Pinned: an `exec` that would answer `waiting` answers a task whose id
//! is the run id; `tasks/get` reports `working` and then `completed` with
//! the tool result `exec` would have returned; `tasks/cancel` aborts the
//! run (the task says `cancelled`, the run is gone); another principal's
//! task is not found; a task whose call awaits approval is
//! `input_required` until an operator approves it at the operator endpoint;
//! and a stateless client that did not declare tasks
//! keeps `waiting` + `wait` across requests (the run id is the capability).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, GetTaskParams, Implementation, ProtocolVersion, TaskPayload, TaskStatus,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, service::RunningService};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

struct Gateway {
    child: Child,
    url: String,
    /// The operator endpoint (`http://ADDR`), started with every gateway.
    admin: String,
    _dir: tempfile::TempDir,
}

const ADMIN_TOKEN: &str = "operator-token-0123456789";

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_gateway() -> Gateway {
    let e2e = common::ensure_npm_installed();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.json");
    std::fs::write(
        &config,
        json!({
            "tools": { "codeMode": { "enabled": true, "timeoutMs": 400 } },
            "auth": { "bearerTokens": [{ "name": "alice", "token": ALICE }, { "name": "bob", "token": BOB }] },
            "mcpServers": {
                "slow": { "command": "node", "args": [e2e.join("servers/slow.mjs")] },
                "annotated": { "command": "node", "args": [e2e.join("servers/annotated.mjs")] },
            },
        })
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--http", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env("CODEMODE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CODEMODE_DATA_DIR", dir.path())
        .env("CODEMODE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut url, mut admin) = (None, None);
    for line in stderr.lines() {
        let line = line.unwrap();
        if let Some(at) = line.strip_prefix("codemode: operator endpoint at ") {
            admin = at.trim().strip_suffix("/approvals").map(str::to_owned);
        }
        if let Some(at) = line.strip_prefix("codemode: serving MCP at ") {
            url = Some(at.trim().to_owned());
            break;
        }
    }
    Gateway {
        child,
        url: url.expect("the gateway reports where it serves"),
        admin: admin.expect("the gateway reports its operator endpoint"),
        _dir: dir,
    }
}

/// A stateless (2026-07-28) client of `token`'s principal; with `tasks` it
/// declares the Tasks extension.
async fn client(
    gateway: &Gateway,
    token: &str,
    tasks: bool,
) -> RunningService<RoleClient, ClientConfig> {
    codemode_mcp::install_tls_provider();
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    ClientConfig::new(capabilities, Implementation::new("tasks-test", "1.0.0"))
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(gateway.url.clone())
                    .auth_header(token.to_owned()),
            ),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 client connects without a handshake")
}

fn exec(code: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("exec")
        .with_arguments(serde_json::from_value(json!({ "code": code })).unwrap())
}

/// The code-mode result inside a tool result.
fn result_of(tool_result: &CallToolResult) -> Value {
    tool_result
        .structured_content
        .clone()
        .expect("structured result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_exec_becomes_a_task_that_completes_and_another_is_cancelled() {
    let gateway = start_gateway();
    let alice = client(&gateway, ALICE, true).await;
    assert_eq!(
        alice.peer().peer_info().map(|i| i.protocol_version.clone()),
        Some(ProtocolVersion::V_2026_07_28)
    );

    let response = alice
        .call_tool_once(exec(
            r#"return (await MCP.slow.sleep({ ms: 1500, tag: "task" })).content[0].text;"#,
        ))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("expected a task, got {response:?}");
    };
    let task_id = created.task.task_id.clone();
    assert!(task_id.starts_with("run_"), "{task_id}");
    assert_eq!(created.task.status, TaskStatus::Working);

    // Another principal does not see it.
    let bob = client(&gateway, BOB, true).await;
    assert!(
        bob.peer()
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .is_err()
    );

    let mut statuses = Vec::new();
    let finished = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let task = alice
            .peer()
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap()
            .task;
        statuses.push(task.status());
        if task.status().is_terminal() {
            break task;
        }
        assert!(
            statuses.len() < 100,
            "the task never finished: {statuses:?}"
        );
    };
    assert!(statuses.contains(&TaskStatus::Working), "{statuses:?}");
    let TaskPayload::Completed { result } = finished.payload else {
        panic!("expected completed, got {:?}", finished.payload);
    };
    let tool_result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    let model = result_of(&tool_result);
    assert_eq!(model["status"], "completed", "{model}");
    assert_eq!(model["value"], "slept task");

    // Cancelling a task aborts its run.
    let response = alice
        .call_tool_once(exec(
            r#"return (await MCP.slow.sleep({ ms: 600000, tag: "cancel-me" })).content[0].text;"#,
        ))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("expected a task, got {response:?}");
    };
    let id = created.task.task_id.clone();
    alice
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let task = alice
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap();
    assert_eq!(task.task.status(), TaskStatus::Cancelled);
    // The run is gone: a plain wait on it is refused.
    let waited = alice
        .call_tool_once(
            CallToolRequestParams::new("wait")
                .with_arguments(serde_json::from_value(json!({ "runId": id })).unwrap()),
        )
        .await
        .unwrap();
    let CallToolResponse::Complete(waited) = waited else {
        panic!("expected a plain result, got {waited:?}");
    };
    assert_eq!(result_of(&waited)["status"], "failed", "{waited:?}");
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_client_without_tasks_keeps_waiting_and_wait_across_requests() {
    let gateway = start_gateway();
    let alice = client(&gateway, ALICE, false).await;
    let response = alice
        .call_tool_once(exec(
            r#"return (await MCP.slow.sleep({ ms: 1200, tag: "plain" })).content[0].text;"#,
        ))
        .await
        .unwrap();
    let CallToolResponse::Complete(started) = response else {
        panic!("expected a plain result, got {response:?}");
    };
    let started = result_of(&started);
    assert_eq!(started["status"], "waiting", "{started}");
    // Every request of a stateless client is a new handler on the gateway:
    // the run is found again by its owner (the principal).
    let mut result = started.clone();
    for _ in 0..20 {
        let waited = alice
            .call_tool_once(CallToolRequestParams::new("wait").with_arguments(
                serde_json::from_value(json!({ "runId": started["runId"] })).unwrap(),
            ))
            .await
            .unwrap();
        let CallToolResponse::Complete(waited) = waited else {
            panic!("expected a plain result, got {waited:?}");
        };
        result = result_of(&waited);
        if result["status"] != "waiting" {
            break;
        }
    }
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], "slept plain");
    alice.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_an_approval_is_input_required_until_an_operator_decides() {
    let gateway = start_gateway();
    let alice = client(&gateway, ALICE, true).await;
    // A destructive tool needs approval; a 2026 client cannot be asked
    // mid-call, so the call waits for the operator endpoint.
    let response = alice
        .call_tool_once(exec(
            r#"return (await MCP.annotated.drop({ table: "logs" })).content[0].text;"#,
        ))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("expected a task, got {response:?}");
    };
    let id = created.task.task_id.clone();
    assert_eq!(
        created.task.status,
        TaskStatus::InputRequired,
        "{created:?}"
    );
    let task = alice
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(task.status(), TaskStatus::InputRequired);
    assert!(
        task.task
            .status_message
            .as_deref()
            .unwrap_or("")
            .contains("operator"),
        "{task:?}"
    );
    // The operator approves it.
    let http = reqwest::Client::new();
    let listed: Value = http
        .get(format!("{}/approvals", gateway.admin))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pending = &listed["pending"][0];
    assert_eq!(pending["runId"], id.as_str(), "{listed}");
    let decided = http
        .post(format!("{}/approvals/approve", gateway.admin))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "runId": id, "callId": pending["callId"] }))
        .send()
        .await
        .unwrap();
    assert!(decided.status().is_success(), "{decided:?}");
    let finished = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let task = alice
            .peer()
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .unwrap()
            .task;
        if task.status().is_terminal() {
            break task;
        }
    };
    let TaskPayload::Completed { result } = finished.payload else {
        panic!("expected completed, got {:?}", finished.payload);
    };
    let tool_result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(result_of(&tool_result)["value"], "dropped logs");
    alice.cancel().await.unwrap();
}
