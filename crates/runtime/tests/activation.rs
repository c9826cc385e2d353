//! Activation and the fail-closed payload guard: what the model sees for
//! a run (the reference's order), and the final provider payload checked
//! in the four shapes agent runtimes send (real request JSON as the
//! OpenAI Chat Completions, OpenAI Responses and Anthropic Messages APIs
//! define it, and an MCP `tools/list` result).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::{
    CodeModeConfig, ModelSurface, ModelTool, PayloadShape, RunKind, ToolDefinition, ToolSource,
    activate, activate_document,
};
use common::{shared, tool, tool_at};
use serde_json::{Value, json};

fn on() -> CodeModeConfig {
    CodeModeConfig {
        enabled: true,
        ..CodeModeConfig::default()
    }
}

fn run_tools() -> Vec<ToolDefinition> {
    vec![
        tool_at("openclaw:core:read", "Read a file"),
        tool_at("plugin:github:github_list_issues", "List issues"),
        tool_at("client:app:select_file", "Ask the user to pick a file"),
        tool_at("openclaw:core:message", "Message the user").with_direct_only(true),
    ]
}

fn code_mode_surface() -> ModelSurface {
    activate(&on(), Ok(shared()), run_tools(), RunKind::Agent).unwrap()
}

fn model_tools(surface: &ModelSurface) -> (Vec<ModelTool>, Vec<ToolDefinition>) {
    match surface {
        ModelSurface::CodeMode {
            model_tools,
            direct_tools,
            ..
        } => (model_tools.clone(), direct_tools.clone()),
        other => panic!("not code mode: {other:?}"),
    }
}

/// (name, description, schema) of every tool the model should see.
fn visible(surface: &ModelSurface) -> Vec<(String, String, Value)> {
    let (exec_wait, direct) = model_tools(surface);
    exec_wait
        .iter()
        .map(|t| {
            (
                t.name.to_owned(),
                t.description.clone(),
                t.input_schema.clone(),
            )
        })
        .chain(
            direct
                .iter()
                .map(|t| (t.name.clone(), t.description.clone(), t.parameters.clone())),
        )
        .collect()
}

fn openai_chat(tools: &[(String, String, Value)]) -> Value {
    json!({
        "model": "gpt-5",
        "messages": [
            { "role": "system", "content": "You are helpful." },
            { "role": "user", "content": "Sum the open issues." }
        ],
        "tools": tools.iter().map(|(name, description, parameters)| json!({
            "type": "function",
            "function": { "name": name, "description": description, "parameters": parameters }
        })).collect::<Vec<_>>(),
        "tool_choice": "auto",
        "stream": true
    })
}

fn openai_responses(tools: &[(String, String, Value)]) -> Value {
    json!({
        "model": "gpt-5",
        "input": [{ "role": "user", "content": [{ "type": "input_text", "text": "Sum the open issues." }] }],
        "tools": tools.iter().map(|(name, description, parameters)| json!({
            "type": "function", "name": name, "description": description, "parameters": parameters, "strict": false
        })).collect::<Vec<_>>(),
        "parallel_tool_calls": true
    })
}

fn anthropic(tools: &[(String, String, Value)]) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "You are helpful.",
        "messages": [{ "role": "user", "content": "Sum the open issues." }],
        "tools": tools.iter().map(|(name, description, schema)| json!({
            "name": name, "description": description, "input_schema": schema
        })).collect::<Vec<_>>()
    })
}

fn mcp_tools_list(tools: &[(String, String, Value)]) -> Value {
    json!({
        "tools": tools.iter().map(|(name, description, schema)| json!({
            "name": name, "description": description, "inputSchema": schema
        })).collect::<Vec<_>>()
    })
}

/// (name, description, schema) of one tool in a payload.
type Spec = (String, String, Value);
/// Builds a payload of one shape from tool specs.
type Builder = fn(&[Spec]) -> Value;

const SHAPES: [(PayloadShape, Builder); 4] = [
    (PayloadShape::OpenAiChatCompletions, openai_chat),
    (PayloadShape::OpenAiResponses, openai_responses),
    (PayloadShape::AnthropicMessages, anthropic),
    (PayloadShape::McpToolsList, mcp_tools_list),
];

#[test]
fn disabled_code_mode_leaves_the_tool_list_unchanged_byte_for_byte() {
    let tools = run_tools();
    let before = serde_json::to_string(&tools).unwrap();
    let surface = activate(
        &CodeModeConfig::default(),
        Ok(shared()),
        tools,
        RunKind::Agent,
    )
    .unwrap();
    let ModelSurface::Normal(after) = &surface else {
        panic!("{surface:?}")
    };
    assert_eq!(serde_json::to_string(after).unwrap(), before);
    assert_eq!(
        surface.visible_names(),
        ["read", "github_list_issues", "select_file", "message"]
    );
    assert!(!surface.is_code_mode());
}

#[test]
fn enabled_with_tools_shows_exactly_exec_and_wait_and_catalogues_the_rest() {
    let surface = code_mode_surface();
    assert!(surface.is_code_mode());
    assert_eq!(
        surface.visible_names(),
        ["exec", "wait", "message"],
        "direct-only stays visible"
    );
    let ModelSurface::CodeMode { catalog, .. } = &surface else {
        unreachable!()
    };
    let ids: Vec<&str> = catalog.entries().iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "openclaw:core:read",
            "plugin:github:github_list_issues",
            "client:app:select_file"
        ],
        "every other tool is in the catalog, the direct-only one is not"
    );
    // The definitions are the runtime's own.
    let (exec_wait, _) = model_tools(&surface);
    assert_eq!(exec_wait, codemode_runtime::model_tools(&on(), catalog));
}

#[test]
fn runs_without_tools_get_no_code_mode_surface() {
    for (tools, run) in [
        (run_tools(), RunKind::RawModelCall),
        (run_tools(), RunKind::ToolsDisabled),
        (Vec::new(), RunKind::Agent), // an empty allowlist
    ] {
        let surface = activate(&on(), Ok(shared()), tools, run).unwrap();
        assert!(
            matches!(surface, ModelSurface::NoTools),
            "{run:?}: {surface:?}"
        );
        assert!(surface.visible_names().is_empty());
    }
}

#[test]
fn no_runtime_fails_closed_and_bad_config_is_invalid_config() {
    let err = activate(
        &on(),
        Err("wasmtime could not start"),
        run_tools(),
        RunKind::Agent,
    )
    .unwrap_err();
    assert_eq!(err.code().as_str(), "runtime_unavailable");
    assert!(err.to_string().contains("wasmtime could not start"));
    assert_eq!(err.to_result().to_json()["code"], "runtime_unavailable");
    // Without tools nothing needs the runtime.
    assert!(activate(&on(), Err("down"), vec![], RunKind::Agent).is_ok());

    let root = json!({
        "tools": { "codeMode": true },
        "agents": { "list": [{ "id": "ops", "tools": { "codeMode": { "timeoutMs": "soon" } } }] }
    });
    let err =
        activate_document(&root, "ops", Ok(shared()), run_tools(), RunKind::Agent).unwrap_err();
    assert_eq!(err.code().as_str(), "invalid_config");
    assert!(
        err.to_string()
            .contains("agents.list[0].tools.codeMode.timeoutMs"),
        "{err}"
    );
    let surface =
        activate_document(&root, "main", Ok(shared()), run_tools(), RunKind::Agent).unwrap();
    assert!(surface.is_code_mode());
    // A plugin tool without its plugin id cannot be catalogued.
    let mut ownerless = tool(ToolSource::Plugin, "x", "read", "a");
    ownerless.source_name = None;
    let err = activate(&on(), Ok(shared()), vec![ownerless], RunKind::Agent).unwrap_err();
    assert_eq!(err.code().as_str(), "invalid_config", "{err}");
    assert!(err.to_string().contains("needs a sourceName"), "{err}");
}

#[test]
fn the_runtimes_own_surface_passes_in_every_shape() {
    let surface = code_mode_surface();
    let tools = visible(&surface);
    for (shape, build) in SHAPES {
        surface
            .check_payload(shape, &build(&tools))
            .unwrap_or_else(|e| panic!("{shape:?}: {e}"));
    }
    // An MCP tools/list answer as a whole JSON-RPC response, too.
    let response = json!({ "jsonrpc": "2.0", "id": 3, "result": mcp_tools_list(&tools) });
    surface
        .check_payload(PayloadShape::McpToolsList, &response)
        .unwrap();
}

#[test]
fn anything_but_the_surface_fails_closed_in_every_shape() {
    let surface = code_mode_surface();
    let tools = visible(&surface);
    let leaked = {
        let mut t = tools.clone();
        t.push((
            "read".into(),
            "Read a file".into(),
            json!({"type": "object"}),
        ));
        t
    };
    let missing_wait: Vec<_> = tools.iter().filter(|t| t.0 != "wait").cloned().collect();
    let twice = {
        let mut t = tools.clone();
        t.push(tools[0].clone());
        t
    };
    let rewritten = {
        let mut t = tools.clone();
        t[0].1.push_str(" Also: call read directly.");
        t
    };
    let reschema = {
        let mut t = tools.clone();
        t[1].2 = json!({"type": "object", "properties": {"anything": {}}});
        t
    };
    for (shape, build) in SHAPES {
        for (case, payload, needle) in [
            ("a leaked tool", build(&leaked), "not allowed: read"),
            ("wait missing", build(&missing_wait), "missing: wait"),
            ("exec twice", build(&twice), "twice"),
            (
                "a rewritten description",
                build(&rewritten),
                "changes the description of `exec`",
            ),
            (
                "a rewritten schema",
                build(&reschema),
                "changes the input schema of `wait`",
            ),
            ("no tools", build(&[]), "missing: exec, wait, message"),
        ] {
            let err = surface
                .check_payload(shape, &payload)
                .expect_err(&format!("{shape:?}: {case} must fail"));
            assert!(err.to_string().contains(needle), "{shape:?} {case}: {err}");
            assert_eq!(err.code().as_str(), "internal_error");
            assert_eq!(err.to_result().to_json()["status"], "failed");
        }
    }
}

#[test]
fn provider_built_in_tools_and_legacy_functions_count_as_tools() {
    let surface = code_mode_surface();
    let tools = visible(&surface);
    let mut responses = openai_responses(&tools);
    responses["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "type": "web_search" }));
    let err = surface
        .check_payload(PayloadShape::OpenAiResponses, &responses)
        .unwrap_err();
    assert!(err.to_string().contains("web_search (built-in)"), "{err}");

    let mut messages = anthropic(&tools);
    messages["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "type": "web_search_20250305", "name": "web_search", "max_uses": 5 }));
    let err = surface
        .check_payload(PayloadShape::AnthropicMessages, &messages)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("web_search (built-in web_search_20250305)"),
        "{err}"
    );

    let mut chat = openai_chat(&tools);
    chat["functions"] = json!([{ "name": "read", "parameters": { "type": "object" } }]);
    let err = surface
        .check_payload(PayloadShape::OpenAiChatCompletions, &chat)
        .unwrap_err();
    assert!(err.to_string().contains("not allowed: read"), "{err}");
}

#[test]
fn malformed_payloads_fail_with_what_is_wrong() {
    let surface = code_mode_surface();
    for (shape, payload, needle) in [
        (
            PayloadShape::OpenAiChatCompletions,
            json!({ "tools": {} }),
            "`tools` that is not an array",
        ),
        (
            PayloadShape::OpenAiChatCompletions,
            json!({ "tools": [{ "type": "function" }] }),
            "without `function`",
        ),
        (
            PayloadShape::OpenAiResponses,
            json!({ "tools": [{ "name": "exec" }] }),
            "without a `type`",
        ),
        (
            PayloadShape::AnthropicMessages,
            json!({ "tools": [{ "description": "x" }] }),
            "without a string `name`",
        ),
        (
            PayloadShape::McpToolsList,
            json!([1, 2]),
            "not a JSON object",
        ),
    ] {
        let err = surface.check_payload(shape, &payload).unwrap_err();
        assert!(err.to_string().contains(needle), "{shape:?}: {err}");
    }
}

#[test]
fn other_surfaces_are_checked_by_name() {
    let tools = run_tools();
    let normal = activate(
        &CodeModeConfig::default(),
        Ok(shared()),
        tools.clone(),
        RunKind::Agent,
    )
    .unwrap();
    let as_payload: Vec<(String, String, Value)> = tools
        .iter()
        .map(|t| (t.name.clone(), t.description.clone(), t.parameters.clone()))
        .collect();
    normal
        .check_payload(PayloadShape::AnthropicMessages, &anthropic(&as_payload))
        .unwrap();
    let with_exec = {
        let mut t = as_payload.clone();
        t.push(("exec".into(), String::new(), json!({})));
        t
    };
    assert!(
        normal
            .check_payload(PayloadShape::AnthropicMessages, &anthropic(&with_exec))
            .is_err()
    );
    let none = activate(&on(), Ok(shared()), vec![], RunKind::Agent).unwrap();
    none.check_payload(
        PayloadShape::OpenAiChatCompletions,
        &json!({ "model": "m", "messages": [] }),
    )
    .unwrap();
    let err = none
        .check_payload(
            PayloadShape::OpenAiChatCompletions,
            &openai_chat(&as_payload),
        )
        .unwrap_err();
    assert!(err.to_string().contains("must carry no tools"), "{err}");
}

#[test]
fn a_sessions_surface_guards_the_gateway_answer() {
    let catalog = codemode_runtime::Catalog::build(run_tools(), &Default::default()).unwrap();
    let session = shared().session(
        common::context("agent", "guard", "r1"),
        catalog,
        std::sync::Arc::new(common::Scripted::default()),
    );
    let surface = session.surface();
    let tools: Vec<(String, String, Value)> = session
        .model_tools()
        .into_iter()
        .map(|t| (t.name.to_owned(), t.description, t.input_schema))
        .collect();
    surface
        .check_payload(PayloadShape::McpToolsList, &mcp_tools_list(&tools))
        .unwrap();
}
