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
//! a task whose Redis store goes away for good ends when its run expires
//! (it does not poll forever); a task whose cell yields forever is paced
//! (the gateway does not spin a core on it) and aborted at the runs' TTL;
//! and a stateless client that did not declare
//! tasks keeps `waiting` + `wait` across requests (the run id is the
//! capability).
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

type Client = RunningService<RoleClient, ClientConfig>;

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
    start_gateway_with(json!({ "timeoutMs": 400 }), None)
}

/// A gateway with these `tools.codeMode` settings and run store (`None`:
/// the default file store in its data directory).
fn start_gateway_with(code_mode: Value, store: Option<String>) -> Gateway {
    start_gateway_limited(code_mode, store, None)
}

/// [`start_gateway_with`], and `auth.maxConcurrentExecs` when given.
fn start_gateway_limited(
    code_mode: Value,
    store: Option<String>,
    max_execs: Option<u64>,
) -> Gateway {
    let e2e = common::ensure_npm_installed();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.json");
    let mut code_mode = code_mode;
    code_mode["enabled"] = json!(true);
    let mut settings = json!({
        "tools": { "codeMode": code_mode },
        "auth": { "bearerTokens": [{ "name": "alice", "token": ALICE }, { "name": "bob", "token": BOB }] },
        "mcpServers": {
            "slow": { "command": "node", "args": [e2e.join("servers/slow.mjs")] },
            "annotated": { "command": "node", "args": [e2e.join("servers/annotated.mjs")] },
        },
    });
    if let Some(store) = store {
        settings["store"] = json!(store);
    }
    if let Some(max) = max_execs {
        settings["auth"]["maxConcurrentExecs"] = json!(max);
    }
    std::fs::write(&config, settings.to_string()).unwrap();
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
async fn client(gateway: &Gateway, token: &str, tasks: bool) -> Client {
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

fn wait_for(run_id: &Value) -> CallToolRequestParams {
    CallToolRequestParams::new("wait")
        .with_arguments(serde_json::from_value(json!({ "runId": run_id })).unwrap())
}

/// Calls a tool that must answer in place (no task); its code-mode result.
async fn call_plain(client: &Client, params: CallToolRequestParams) -> Value {
    let response = client.call_tool_once(params).await.unwrap();
    let CallToolResponse::Complete(result) = response else {
        panic!("expected a plain result, got {response:?}");
    };
    result_of(&result)
}

/// Runs `code` as an exec that must answer a task; the task it created.
async fn start_task(client: &Client, code: &str) -> rmcp::model::Task {
    let response = client.call_tool_once(exec(code)).await.unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("expected a task, got {response:?}");
    };
    created.task
}

/// `tasks/get` of `id` by `client`.
async fn get_task(client: &Client, id: &str) -> rmcp::model::DetailedTask {
    client
        .peer()
        .get_task(GetTaskParams::new(id.to_owned()))
        .await
        .unwrap()
        .task
}

/// Polls `tasks/get` until the task ends: the statuses seen on the way and
/// the tool result it completed with (panics on any other end).
async fn completed_task(client: &Client, id: &str) -> (Vec<TaskStatus>, Value) {
    let mut statuses = Vec::new();
    let finished = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let task = get_task(client, id).await;
        statuses.push(task.status());
        if task.status().is_terminal() {
            break task;
        }
        assert!(
            statuses.len() < 100,
            "the task never finished: {statuses:?}"
        );
    };
    let TaskPayload::Completed { result } = finished.payload else {
        panic!("expected completed, got {:?}", finished.payload);
    };
    let tool_result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    (statuses, result_of(&tool_result))
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

    let created = start_task(
        &alice,
        r#"return (await MCP.slow.sleep({ ms: 1500, tag: "task" })).content[0].text;"#,
    )
    .await;
    let task_id = created.task_id.clone();
    assert!(task_id.starts_with("run_"), "{task_id}");
    assert_eq!(created.status, TaskStatus::Working);

    // Another principal does not see it.
    let bob = client(&gateway, BOB, true).await;
    assert!(
        bob.peer()
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .is_err()
    );

    let (statuses, model) = completed_task(&alice, &task_id).await;
    assert!(statuses.contains(&TaskStatus::Working), "{statuses:?}");
    assert_eq!(model["status"], "completed", "{model}");
    assert_eq!(model["value"], "slept task");

    // Cancelling a task aborts its run.
    let id = start_task(
        &alice,
        r#"return (await MCP.slow.sleep({ ms: 600000, tag: "cancel-me" })).content[0].text;"#,
    )
    .await
    .task_id;
    alice
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let task = get_task(&alice, &id).await;
    assert_eq!(task.status(), TaskStatus::Cancelled);
    // The run is gone: a plain wait on it is refused.
    let waited = call_plain(&alice, wait_for(&json!(id))).await;
    assert_eq!(waited["status"], "failed", "{waited}");
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_client_without_tasks_keeps_waiting_and_wait_across_requests() {
    let gateway = start_gateway();
    let alice = client(&gateway, ALICE, false).await;
    let started = call_plain(
        &alice,
        exec(r#"return (await MCP.slow.sleep({ ms: 1200, tag: "plain" })).content[0].text;"#),
    )
    .await;
    assert_eq!(started["status"], "waiting", "{started}");
    // Every request of a stateless client is a new handler on the gateway:
    // the run is found again by its owner (the principal).
    let mut result = started.clone();
    for _ in 0..20 {
        result = call_plain(&alice, wait_for(&started["runId"])).await;
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
    let created = start_task(
        &alice,
        r#"return (await MCP.annotated.drop({ table: "logs" })).content[0].text;"#,
    )
    .await;
    let id = created.task_id.clone();
    assert_eq!(created.status, TaskStatus::InputRequired, "{created:?}");
    let task = get_task(&alice, &id).await;
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
    let (_, model) = completed_task(&alice, &id).await;
    assert_eq!(model["value"], "dropped logs", "{model}");
    alice.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_store_stays_unreachable_ends_when_its_run_expires() {
    let mut redis = codemode_store::testing::RedisServer::start();
    let gateway = start_gateway_with(
        json!({ "timeoutMs": 300, "snapshotTtlSeconds": 3 }),
        Some(redis.url()),
    );
    let alice = client(&gateway, ALICE, true).await;
    let id = start_task(
        &alice,
        r#"return (await MCP.slow.sleep({ ms: 600000, tag: "stranded" })).content[0].text;"#,
    )
    .await
    .task_id;
    // The store goes away for good while the run waits: the task keeps
    // trying (each `wait` is `runtime_busy`) only for the runs' TTL,
    // then ends as the run does, instead of polling forever.
    redis.kill();
    let (statuses, model) = completed_task(&alice, &id).await;
    assert_eq!(model["status"], "failed", "{model}");
    assert_eq!(model["code"], "snapshot_expired", "{model}");
    assert!(statuses.len() > 5, "ended before the TTL: {statuses:?}");
    alice.cancel().await.unwrap();
}

/// CPU seconds the process `pid` has used (user + system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (which may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / per_second.max(1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_driven_waits_count_against_its_principals_concurrent_calls() {
    let gateway = start_gateway_limited(json!({ "timeoutMs": 3000 }), None, Some(1));
    let alice = client(&gateway, ALICE, true).await;
    let id = start_task(
        &alice,
        r#"return (await MCP.slow.sleep({ ms: 6000, tag: "driven" })).content[0].text;"#,
    )
    .await
    .task_id;
    // The gateway's wait on the task's run now holds alice's one call.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let refused = call_plain(&alice, exec("return 1")).await;
    assert_eq!(refused["code"], "runtime_busy", "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("auth.maxConcurrentExecs"),
        "{refused}"
    );
    let (_, model) = completed_task(&alice, &id).await;
    assert_eq!(model["value"], "slept driven", "{model}");
    alice.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_cell_yields_forever_is_paced_and_ends_at_the_ttl() {
    let gateway = start_gateway_with(json!({ "timeoutMs": 400, "snapshotTtlSeconds": 4 }), None);
    let alice = client(&gateway, ALICE, true).await;
    let id = start_task(&alice, "for (;;) { await yield_control('again'); }")
        .await
        .task_id;
    let before = cpu_seconds(gateway.child.id());
    let started = std::time::Instant::now();
    let (statuses, model) = completed_task(&alice, &id).await;
    let spent = cpu_seconds(gateway.child.id()) - before;
    let took = started.elapsed().as_secs_f64();
    assert_eq!(model["status"], "failed", "{model}");
    assert_eq!(model["code"], "snapshot_expired", "{model}");
    assert!(
        model["error"].as_str().unwrap().contains("kept yielding"),
        "{model}"
    );
    assert!(statuses.len() > 5, "ended before the TTL: {statuses:?}");
    // Resumed without a pause it would take a whole core for the TTL; paced
    // it is a few resumes a second.
    assert!(
        spent < took * 0.5,
        "the gateway spent {spent:.2} s of CPU in {took:.2} s driving one yielding task"
    );
    // The run was aborted: a plain wait on it is refused.
    let waited = call_plain(&alice, wait_for(&json!(id))).await;
    assert_eq!(waited["status"], "failed", "{waited}");
    alice.cancel().await.unwrap();
}
