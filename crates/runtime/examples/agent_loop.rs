//! An agent loop with code mode, end to end, against a scripted provider.
//!
//! `cargo run -p codemode-runtime --example agent_loop`
//!
//! What an agent runtime does for one agent run:
//!
//! 1. **Activate** code mode from its whole config document (a
//!    reference-style JSON5 config: `tools.codeMode` with the agent's block
//!    of `agents.list[]` merged over it) and the run's effective tools:
//!    [`activate_document`] gives the model surface (`exec`, `wait` and the
//!    direct-only tools) and the hidden catalog for the run's session.
//! 2. Before **every** provider request, build the real request body (here
//!    an Anthropic Messages request: `model`, `system`, `messages`, `tools`)
//!    from the transcript and the session's own tool definitions, and run
//!    the **payload guard** on it ([`ModelSurface::check_payload`]): the
//!    request must carry exactly the surface, with the runtime's own
//!    descriptions and schemas, or the run fails closed.
//! 3. Answer the model's `exec` and `wait` calls with
//!    [`CodeModeSession::exec_call`] / [`CodeModeSession::wait_call`] under
//!    the model's tool-call ids, until the model gives its final answer.
//! 4. **Export the trajectory** (JSON lines) and read it back as a tree:
//!    every nested tool call under the `exec` call that started its run
//!    (`parentCallId`), each `wait` under the `exec` whose run it resumed
//!    (`runId`), and each nested call marked with the control call it ended
//!    in.
//!
//! The "model" is a script of turns: an `exec` whose cell calls two hidden
//! tools (a fast `read` and a slow `select_file` that waits for the user, so
//! the run suspends and the exec returns `waiting`), a `wait` with the
//! `runId` it read from that result, and a final text answer built from the
//! value the run returned. Anything unexpected is an error: the example
//! exits non-zero. `crates/runtime/tests/agent_loop_example.rs` runs it in
//! CI.
#![allow(clippy::print_stdout, reason = "an example prints")]

use std::error::Error;
use std::sync::Arc;

use codemode_runtime::{
    CallOptions, CodeModeConfig, CodeModeResult, CodeModeRuntime, CodeModeSession, ModelSurface,
    NestedCall, PayloadShape, RunContext, RunKind, ToolCallError, ToolDefinition, ToolExecutor,
    ToolFuture, ToolSource, activate_document,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Errors of the example: any of them makes it exit non-zero.
pub type Failure = Box<dyn Error + Send + Sync>;

/// The agent runtime's whole config (JSON5): code mode's keys sit among
/// the runtime's own, which code mode leaves alone.
pub const CONFIG: &str = r#"{
  // The agent runtime's own settings: not code mode's business.
  models: { default: "anthropic/claude-sonnet-4-5" },
  tools: {
    profile: "coding",
    codeMode: { enabled: true, timeoutMs: 10000 },
  },
  agents: {
    list: [
      // This agent keeps the global switch and shortens the exec/wait limit.
      { id: "main", default: true, tools: { codeMode: { timeoutMs: 1000 } } },
      { id: "plain", tools: { codeMode: false } },
    ],
  },
}"#;

/// The agent this run is for.
const AGENT: &str = "main";

/// The cell the scripted model sends: two hidden tools at once; `read`
/// answers at once, `select_file` only when the user has picked.
const CELL: &str = r#"
const [readme, picked] = await Promise.all([
  tools.read({ path: "README.md" }),
  tools.select_file({ prompt: "Which notes should I summarise?" }),
]);
const notes = picked.path;
return { readme: readme.text.length, notes };
"#;

/// Your tool path (policy, approvals, hooks and audit would go here):
/// `read` answers at once; `select_file` is an interactive client tool that
/// answers when the user has picked.
struct AppTools {
    user_picked: Arc<Notify>,
}

impl ToolExecutor for AppTools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let user_picked = Arc::clone(&self.user_picked);
        Box::pin(async move {
            match call.tool.id.as_str() {
                "openclaw:core:read" => {
                    let path = call.input["path"].as_str().unwrap_or("?").to_owned();
                    Ok(json!({ "path": path, "text": format!("contents of {path}") }))
                }
                "client:app:select_file" => {
                    user_picked.notified().await;
                    Ok(json!({ "path": "notes.md" }))
                }
                other => Err(ToolCallError::new(format!(
                    "{other} is not implemented here"
                ))),
            }
        })
    }
}

/// The run's effective tools, after the runtime's own allow/deny policy.
fn effective_tools() -> Vec<ToolDefinition> {
    let object = |properties: Value| json!({ "type": "object", "properties": properties });
    vec![
        ToolDefinition::new(ToolSource::Openclaw, "core", "read")
            .with_description("Read a file")
            .with_parameters(object(json!({ "path": { "type": "string" } }))),
        ToolDefinition::new(ToolSource::Client, "app", "select_file")
            .with_description("Ask the user to pick a file")
            .with_parameters(object(json!({ "prompt": { "type": "string" } }))),
        // Stays beside exec and wait (the model calls it directly).
        ToolDefinition::new(ToolSource::Openclaw, "core", "message")
            .with_description("Message the user")
            .with_parameters(object(json!({ "text": { "type": "string" } })))
            .with_direct_only(true),
    ]
}

/// One scripted model turn.
#[derive(Debug, Clone)]
enum Turn {
    /// Call `exec` with this cell.
    Exec(&'static str),
    /// Call `wait` with the `runId` of the last tool result (again while it
    /// is still `waiting`).
    Wait,
    /// Answer in text, built from the value of the last tool result.
    Final,
}

/// The fake provider: answers a request with the next scripted assistant
/// message (Anthropic Messages content blocks), reading what it needs from
/// the request like a model would.
struct ScriptedModel {
    turns: Vec<Turn>,
    next: usize,
    tool_calls: usize,
}

impl ScriptedModel {
    fn reply(&mut self, request: &Value) -> Result<Value, Failure> {
        let last_result = last_tool_result(request);
        // Stay on `wait` while the run is still waiting.
        let still_waiting = last_result
            .as_ref()
            .is_some_and(|r| r["status"] == "waiting");
        if !(self.next > 0 && matches!(self.turns[self.next - 1], Turn::Wait) && still_waiting) {
            self.next += 1;
        }
        let turn = self
            .turns
            .get(self.next - 1)
            .ok_or("the script has no more turns")?
            .clone();
        let mut tool_use = |name: &str, input: Value| {
            self.tool_calls += 1;
            json!({ "type": "tool_use", "id": format!("toolu_{:02}", self.tool_calls), "name": name, "input": input })
        };
        let content = match turn {
            Turn::Exec(code) => json!([
                { "type": "text", "text": "I'll read the README and ask you for the notes at once." },
                tool_use("exec", json!({ "code": code })),
            ]),
            Turn::Wait => {
                let result = last_result.ok_or("wait with no tool result to read")?;
                let run_id = result["runId"].as_str().ok_or("no runId to wait on")?;
                json!([tool_use("wait", json!({ "runId": run_id }))])
            }
            Turn::Final => {
                let result = last_result.ok_or("a final answer with no tool result")?;
                if result["status"] != "completed" {
                    return Err(format!("the run did not complete: {result}").into());
                }
                let value = &result["value"];
                json!([{ "type": "text", "text": format!(
                    "You picked {}; the README is {} characters long.",
                    value["notes"].as_str().unwrap_or("?"), value["readme"]
                ) }])
            }
        };
        Ok(json!({ "role": "assistant", "content": content }))
    }
}

/// The parsed `tool_result` content of the request's last user message.
fn last_tool_result(request: &Value) -> Option<Value> {
    let last = request["messages"].as_array()?.last()?;
    let block = last["content"]
        .as_array()?
        .iter()
        .find(|b| b["type"] == "tool_result")?;
    serde_json::from_str(block["content"].as_str()?).ok()
}

/// The tools of a provider request: the session's own `exec` and `wait`
/// definitions, then the direct-only tools, as Anthropic Messages defines
/// tools.
fn request_tools(session: &CodeModeSession, surface: &ModelSurface) -> Vec<Value> {
    let direct = match surface {
        ModelSurface::CodeMode { direct_tools, .. } => direct_tools.as_slice(),
        _ => &[],
    };
    session
        .model_tools()
        .iter()
        .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.input_schema }))
        .chain(direct.iter().map(|t| {
            json!({ "name": t.name, "description": t.description, "input_schema": t.parameters })
        }))
        .collect()
}

/// What the loop saw, for callers that check more.
#[derive(Debug)]
pub struct Report {
    /// The model's final answer.
    pub answer: String,
    /// Provider requests sent (each checked by the payload guard).
    pub requests: usize,
    /// The trajectory as JSON lines, as exported.
    pub trajectory_json_lines: String,
    /// The trajectory as a tree (see [`trajectory_tree`]).
    pub tree: Value,
}

/// Runs the whole loop; `Err` when anything is off.
///
/// # Errors
/// Activation, the payload guard, an unexpected result or trajectory.
pub async fn run() -> Result<Report, Failure> {
    let document: Value = json5::from_str(CONFIG)?;
    // Once per process: the runtime (here with this agent's settings).
    let (config, diagnostics) = CodeModeConfig::for_agent(&document, AGENT)?;
    for d in &diagnostics {
        eprintln!("config: {d}");
    }
    let runtime = CodeModeRuntime::new(config)?;

    // Per agent run: activation from the document and the effective tools.
    let surface = activate_document(
        &document,
        AGENT,
        Ok(&runtime),
        effective_tools(),
        RunKind::Agent,
    )
    .map_err(|e| format!("activation failed ({}): {e}", e.code().as_str()))?;
    let ModelSurface::CodeMode { catalog, .. } = &surface else {
        return Err(format!("code mode is not active: {surface:?}").into());
    };
    println!("model sees: {:?}", surface.visible_names());
    ensure(
        surface.visible_names() == ["exec", "wait", "message"],
        "the model must see exec, wait and the direct-only tool",
    )?;
    let user_picked = Arc::new(Notify::new());
    let session = runtime.session(
        RunContext {
            agent_id: Some(AGENT.into()),
            session_id: Some("session-1".into()),
            agent_run_id: Some("agent-run-1".into()),
            ..RunContext::default()
        },
        Arc::clone(catalog),
        Arc::new(AppTools {
            user_picked: Arc::clone(&user_picked),
        }),
    );

    // The fail-closed guard refuses a request that leaks a hidden tool.
    let mut leaky = request_tools(&session, &surface);
    leaky.push(json!({ "name": "read", "description": "Read a file", "input_schema": { "type": "object" } }));
    let refused = surface
        .check_payload(PayloadShape::AnthropicMessages, &json!({ "tools": leaky }))
        .err()
        .ok_or("the guard let a hidden tool through")?;
    println!("guard refuses a leaked tool: {refused}");

    let mut model = ScriptedModel {
        turns: vec![Turn::Exec(CELL), Turn::Wait, Turn::Final],
        next: 0,
        tool_calls: 0,
    };
    let mut messages = vec![json!({
        "role": "user",
        "content": "Ask me which notes to summarise, and tell me how long the README is."
    })];
    let mut requests = 0;
    // (control call id, nested call id) of every receipt in a result.
    let mut receipts: Vec<(String, String)> = Vec::new();
    let answer = loop {
        // The request exactly as it would go to the provider.
        let request = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "You are a coding agent.",
            "messages": messages,
            "tools": request_tools(&session, &surface),
        });
        surface
            .check_payload(PayloadShape::AnthropicMessages, &request)
            .map_err(|e| format!("request {requests} refused ({}): {e}", e.code().as_str()))?;
        requests += 1;
        ensure(requests <= 8, "the model loop does not end")?;

        let reply = model.reply(&request)?;
        messages.push(reply.clone());
        let blocks = reply["content"].as_array().ok_or("reply without content")?;
        let mut results = Vec::new();
        for call in blocks.iter().filter(|b| b["type"] == "tool_use") {
            let id = call["id"].as_str().ok_or("tool_use without id")?;
            let result = match call["name"].as_str() {
                Some("exec") => {
                    session
                        .exec_call(id, &call["input"], CallOptions::default())
                        .await
                }
                Some("wait") => {
                    session
                        .wait_call(id, &call["input"], CallOptions::default())
                        .await
                }
                other => return Err(format!("the model called {other:?}").into()),
            };
            println!("{} {id} -> {}", call["name"], result.to_model_json());
            // The effect receipts the model saw, to match against the trajectory.
            for receipt in &result.receipts().calls {
                receipts.push((id.to_owned(), receipt.id.clone()));
            }
            if let CodeModeResult::Waiting {
                pending_tool_calls, ..
            } = &result
            {
                // The app shows the picker; the user answers while the run waits.
                if pending_tool_calls
                    .iter()
                    .any(|p| p.tool_id == "client:app:select_file")
                {
                    user_picked.notify_one();
                }
            }
            results.push(json!({
                "type": "tool_result",
                "tool_use_id": id,
                "content": result.to_model_json().to_string(),
                "is_error": matches!(result, CodeModeResult::Failed { .. }),
            }));
        }
        if results.is_empty() {
            let text = blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            break text;
        }
        messages.push(json!({ "role": "user", "content": results }));
    };
    println!("answer: {answer}");
    ensure(
        answer == "You picked notes.md; the README is 21 characters long.",
        "the final answer is not built from the run's value",
    )?;
    ensure(requests == 3, "expected three requests: exec, wait, answer")?;

    // The trajectory, exported as JSON lines and read back as a tree.
    let lines = session.trajectory().to_json_lines();
    let tree = trajectory_tree(&lines)?;
    println!(
        "trajectory:\n{lines}as a tree:\n{}",
        serde_json::to_string_pretty(&tree)?
    );
    check_tree(&tree)?;
    // Each nested call ended in the control call whose result carried its receipt.
    let mut ended_in: Vec<(String, String)> = tree["execs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["nested"].as_array().into_iter().flatten())
        .map(|n| (text(&n["endedIn"]), text(&n["callId"])))
        .collect();
    ended_in.sort();
    receipts.sort();
    ensure(
        ended_in == receipts,
        "the trajectory's nested calls match the receipts in the results",
    )?;
    Ok(Report {
        answer,
        requests,
        trajectory_json_lines: lines,
        tree,
    })
}

/// Reads exported trajectory JSON lines back as a tree: one node per
/// `exec` call, with `nested` (its nested calls, by `parentCallId`, each
/// with `endedIn`: the control call they ended in, the first one recorded
/// after them) and `waits` (the `wait` calls on its `runId`).
///
/// # Errors
/// A line that is not JSON, a nested call or `wait` without its `exec`.
pub fn trajectory_tree(json_lines: &str) -> Result<Value, Failure> {
    let records = json_lines
        .lines()
        .map(serde_json::from_str::<Value>)
        .collect::<Result<Vec<_>, _>>()?;
    let mut execs: Vec<Value> = Vec::new();
    let mut nested_pending: Vec<Value> = Vec::new();
    for record in records {
        match record["type"].as_str() {
            Some("nested_tool_call") => nested_pending.push(record),
            Some("code_mode_call") => {
                let call_id = record["callId"].clone();
                let mut ended: Vec<Value> = std::mem::take(&mut nested_pending);
                for n in &mut ended {
                    n["endedIn"] = call_id.clone();
                }
                let mut node = json!({
                    "callId": call_id,
                    "tool": record["tool"],
                    "runId": record["runId"],
                    "status": record["status"],
                });
                if record["tool"] == "exec" {
                    node["nested"] = json!([]);
                    node["waits"] = json!([]);
                    execs.push(node);
                } else {
                    let parent = execs
                        .iter_mut()
                        .find(|e| e["runId"] == record["runId"] && !e["runId"].is_null())
                        .ok_or_else(|| format!("wait {call_id} resumes no recorded exec"))?;
                    push(&mut parent["waits"], node);
                }
                for n in ended {
                    let parent = execs
                        .iter_mut()
                        .find(|e| e["callId"] == n["parentCallId"])
                        .ok_or_else(|| format!("nested call {} has no parent exec", n["callId"]))?;
                    push(
                        &mut parent["nested"],
                        json!({
                            "callId": n["callId"],
                            "toolId": n["toolId"],
                            "status": n["status"],
                            "endedIn": n["endedIn"],
                        }),
                    );
                }
            }
            _ => return Err(format!("unknown trajectory record: {record}").into()),
        }
    }
    if !nested_pending.is_empty() {
        return Err(format!("nested calls after the last control call: {nested_pending:?}").into());
    }
    Ok(json!({ "execs": execs }))
}

fn push(array: &mut Value, item: Value) {
    if let Some(items) = array.as_array_mut() {
        items.push(item);
    }
}

/// The tree this run must give: one exec (`toolu_01`, waiting) whose run
/// `toolu_02`'s wait completed; `read` ended in the exec, `select_file` in
/// the wait, both under the exec.
fn check_tree(tree: &Value) -> Result<(), Failure> {
    let execs = tree["execs"].as_array().ok_or("no execs")?;
    ensure(execs.len() == 1, "one exec call")?;
    let exec = &execs[0];
    ensure(
        exec["callId"] == "toolu_01",
        "the exec is the model's first call",
    )?;
    ensure(exec["status"] == "waiting", "the exec suspended")?;
    let run_id = exec["runId"].as_str().ok_or("the exec has no runId")?;
    let waits = exec["waits"].as_array().ok_or("no waits")?;
    ensure(waits.len() == 1, "one wait under the exec")?;
    ensure(
        waits[0]["callId"] == "toolu_02" && waits[0]["runId"] == run_id,
        "the wait is the model's second call, on the exec's run",
    )?;
    ensure(
        waits[0]["status"] == "completed",
        "the wait completed the run",
    )?;
    let nested = exec["nested"].as_array().ok_or("no nested calls")?;
    let find = |tool: &str| nested.iter().find(|n| n["toolId"] == tool);
    let read = find("openclaw:core:read").ok_or("read is not under the exec")?;
    let pick = find("client:app:select_file").ok_or("select_file is not under the exec")?;
    ensure(nested.len() == 2, "exactly two nested calls")?;
    ensure(
        read["status"] == "ok" && read["endedIn"] == "toolu_01",
        "read ended ok during the exec",
    )?;
    ensure(
        pick["status"] == "ok" && pick["endedIn"] == "toolu_02",
        "select_file ended ok during the wait",
    )?;
    Ok(())
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn ensure(ok: bool, what: &str) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let report = run().await?;
    println!(
        "ok: {} requests checked by the payload guard, trajectory exported",
        report.requests
    );
    Ok(())
}
