//! Embedding code mode in an agent runtime, end to end.
//!
//! `cargo run -p codemode-runtime --example embed`
//!
//! 1. Build the runtime once per process from a `tools.codeMode` config.
//! 2. Per agent run: build the hidden catalog from the run's effective tools,
//!    give the run context and an executor that runs nested calls through
//!    your normal tool path.
//! 3. Send the model `session.model_tools()` (exactly `exec` and `wait`),
//!    check each provider request with `session.surface().check_payload`,
//!    and answer its `exec` / `wait` calls with `session.exec_call` /
//!    `session.wait_call`.
//!
//! A whole agent loop (activation from a config document, the guard before
//! every turn, the trajectory as a tree) is `examples/agent_loop.rs`.
#![allow(clippy::print_stdout, reason = "an example prints")]

use std::sync::Arc;
use std::time::Duration;

use codemode_runtime::{
    Catalog, CodeModeConfig, CodeModeResult, CodeModeRuntime, NestedCall, PayloadShape, RunContext,
    ToolCallError, ToolDefinition, ToolExecutor, ToolFuture, ToolPolicy, ToolSource,
};
use serde_json::json;

/// Your tool path: policy, approvals, hooks, audit would go here.
struct MyTools;

impl ToolExecutor for MyTools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        Box::pin(async move {
            match call.tool.id.as_str() {
                "openclaw:core:read" => {
                    let path = call.input["path"].as_str().unwrap_or("?").to_owned();
                    Ok(json!({ "path": path, "text": format!("contents of {path}") }))
                }
                "client:app:select_file" => {
                    // A slow, interactive tool: the run suspends and `wait` finishes it.
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    Ok(json!({ "path": "notes.md" }))
                }
                other => Err(ToolCallError::new(format!(
                    "{other} is not implemented here"
                ))),
            }
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (config, diagnostics) =
        CodeModeConfig::from_json5("{ tools: { codeMode: { enabled: true, timeoutMs: 200 } } }")?;
    for d in &diagnostics {
        eprintln!("config: {d}");
    }
    let runtime = CodeModeRuntime::new(config)?;

    // The run's effective tools, after your own allow/deny policy.
    let tools = vec![
        ToolDefinition::new(ToolSource::Openclaw, "core", "read")
            .with_description("Read a file")
            .with_parameters(json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] })),
        ToolDefinition::new(ToolSource::Client, "app", "select_file")
            .with_description("Ask the user to pick a file"),
        ToolDefinition::new(ToolSource::Openclaw, "core", "exec")
            .with_description("Run a shell command"),
    ];
    let policy = ToolPolicy {
        allow: None,
        deny: vec!["exec".into()],
        ..ToolPolicy::default()
    };
    let context = RunContext {
        agent_id: Some("main".into()),
        session_id: Some("session-1".into()),
        agent_run_id: Some("run-1".into()),
        ..RunContext::default()
    };
    let session = runtime.session(context, Catalog::build(tools, &policy)?, Arc::new(MyTools));

    // What the model sees: two tools, whatever the catalog size. Check the
    // whole provider request before it leaves (here OpenAI Chat
    // Completions): exactly `exec` and `wait`, with the runtime's own
    // descriptions and schemas, or the run fails closed.
    let model_tools = session.model_tools();
    let request = json!({
        "model": "gpt-5",
        "messages": [{ "role": "user", "content": "Summarise the file I pick." }],
        "tools": model_tools.iter().map(|t| json!({
            "type": "function",
            "function": { "name": t.name, "description": t.description, "parameters": t.input_schema }
        })).collect::<Vec<_>>(),
    });
    session
        .surface()
        .check_payload(PayloadShape::OpenAiChatCompletions, &request)?;
    let names: Vec<&str> = model_tools.iter().map(|t| t.name).collect();
    println!("model sees: {names:?}");

    // The model's exec call.
    let code = r#"
        const picked = await tools.select_file();
        const file = await tools.read({ path: picked.path });
        return file.text;
    "#;
    let mut result = session
        .exec_call(
            "toolu_01",
            &json!({ "code": code }),
            codemode_runtime::CallOptions::default(),
        )
        .await;
    println!("exec -> {}", result.to_json());
    let mut n = 0;
    while let CodeModeResult::Waiting { run_id, .. } = &result {
        n += 1;
        let input = json!({ "runId": run_id });
        result = session
            .wait_call(
                &format!("toolu_wait_{n}"),
                &input,
                codemode_runtime::CallOptions::default(),
            )
            .await;
        println!("wait -> {}", result.to_json());
    }
    println!("trajectory:\n{}", session.trajectory().to_json_lines());
    Ok(())
}
