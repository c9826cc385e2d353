//! The model-visible surface: the `exec` and `wait` definitions, and the
//! fail-closed check that a provider payload holds exactly those two.

use serde::Serialize;
use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::config::{CodeModeConfig, Language};

/// A tool definition for a provider payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelTool {
    /// `exec` or `wait`.
    pub name: &'static str,
    /// What the model is told about it.
    pub description: String,
    /// The JSON Schema of its input.
    pub input_schema: Value,
}

/// The two model-visible tools for a run with `catalog` (and no plugin
/// namespace: see [`crate::CodeModeSession::model_tools`] for a session's).
pub fn model_tools(config: &CodeModeConfig, catalog: &Catalog) -> Vec<ModelTool> {
    model_tools_with(config, catalog, "")
}

/// [`model_tools`] whose exec description also tells of the run's visible
/// plugin namespaces (`namespaces`: their descriptions and prompts).
pub(crate) fn model_tools_with(
    config: &CodeModeConfig,
    catalog: &Catalog,
    namespaces: &str,
) -> Vec<ModelTool> {
    let languages: Vec<&str> = config.languages.iter().map(|l| l.as_str()).collect();
    vec![
        ModelTool {
            name: "exec",
            description: exec_description(config, catalog, namespaces),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "code": { "type": "string", "description": "The program body. Top-level await and return work; the returned value is the result." },
                    "command": { "type": "string", "description": "Alias of code (must equal code when both are sent)." },
                    "language": { "type": "string", "enum": languages, "default": "javascript" }
                },
                "additionalProperties": false
            }),
        },
        ModelTool {
            name: "wait",
            description: "Resume a code-mode run that exec (or an earlier wait) returned as \"waiting\". \
                          Returns the same result shape as exec: completed, failed, or waiting again."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "runId": { "type": "string", "description": "The runId of the waiting result." } },
                "required": ["runId"],
                "additionalProperties": false
            }),
        },
    ]
}

/// Bytes of the exec description spent on MCP server names at most: the
/// model-visible tool list stays small whatever the upstream catalog.
const MAX_SERVER_LIST_BYTES: usize = 1200;
/// With more servers than this, the list names them without tool counts.
const COMPACT_SERVER_LIST_FROM: usize = 24;

fn exec_description(config: &CodeModeConfig, catalog: &Catalog, namespaces: &str) -> String {
    let mut sources: Vec<String> = catalog
        .count_by_source()
        .into_iter()
        .filter(|(source, _)| source != "mcp")
        .map(|(source, n)| format!("{n} {source}"))
        .collect();
    if sources.is_empty() {
        sources.push("none".into());
    }
    let ts = if config.languages.contains(&Language::TypeScript) {
        " or TypeScript (language: \"typescript\")"
    } else {
        ""
    };
    let mut text = format!(
        "Run a small JavaScript{ts} program in a sandbox (no filesystem, network, modules or \
         environment) that finds and calls this run's tools. Globals: \
         ALL_TOOLS (array of {{id, name, description, source}}; catalog: {}); \
         await tools.search(query, {{limit}}) ranks those tools; \
         await tools.describe(id) returns an entry with its JSON-schema `parameters`; \
         await tools.call(id, input) calls a tool (tools.<name>(input) for unambiguous names); \
         text(value) and json(value) add output; await yield_control(reason) pauses. ",
        sources.join(", "),
    );
    let servers = catalog.mcp().servers();
    if !servers.is_empty() {
        text.push_str(
            "MCP tools are not in ALL_TOOLS or tools.search: find them with \
             await API.search(query, {limit, server}), which ranks MCP tools across all servers and returns \
             {server, tool, path, description, signature} per hit; call them as \
             await MCP.<server>.<tool>({ ...input }) with one object argument (the path of a hit); \
             each call resolves to the raw MCP result {content, structuredContent?, isError?}. \
             Typed signatures: await API.read(\"mcp/<server>.d.ts\") or MCP.<server>.$api(toolName?). \
             MCP servers: ",
        );
        let mut listed = String::new();
        let mut shown = 0;
        // Many servers: names only, so more of them fit.
        let compact = servers.len() > COMPACT_SERVER_LIST_FROM;
        for server in servers {
            if compact {
                if listed.len() + server.js_name.len() + 2 > MAX_SERVER_LIST_BYTES {
                    break;
                }
                if !listed.is_empty() {
                    listed.push_str(", ");
                }
                listed.push_str(&server.js_name);
                shown += 1;
                continue;
            }
            let mut item = format!("{} ({} tools", server.js_name, server.tools.len());
            if server.info.resources {
                item.push_str(", resources");
            }
            if server.info.prompts {
                item.push_str(", prompts");
            }
            item.push(')');
            if listed.len() + item.len() > MAX_SERVER_LIST_BYTES {
                break;
            }
            if !listed.is_empty() {
                listed.push_str(", ");
            }
            listed.push_str(&item);
            shown += 1;
        }
        if shown < servers.len() {
            listed.push_str(&format!(
                " and {} more; API.search finds tools across all servers",
                servers.len() - shown
            ));
        }
        text.push_str(&listed);
        text.push_str(". ");
    }
    if !namespaces.is_empty() {
        text.push_str("Plugin namespaces (globals; their calls are tool calls): ");
        text.push_str(namespaces);
    }
    text.push_str(&format!(
        "Use loops, Promise.all and filtering in code, and return a small result. \
         Slow calls make exec return {{status: \"waiting\", runId}}; then call wait({{runId}}). \
         Limits: {} ms per call, {} bytes of output.",
        config.timeout_ms, config.max_output_bytes
    ));
    text
}

/// The JSON Schema of an `exec`/`wait` result as the model sees it
/// ([`crate::CodeModeResult::to_model_json`]): the `outputSchema` of both
/// tools where results go out as structured content.
pub fn result_schema() -> Value {
    // Small on purpose: it is part of the model-visible tool list. Fields
    // not named here (value, output, pendingToolCalls, nestedCalls,
    // telemetry) are allowed as they are.
    json!({
        "type": "object",
        "properties": {
            "status": { "enum": ["completed", "waiting", "failed"] },
            "runId": { "type": "string" },
            "error": { "type": "string" },
            "code": { "type": "string" }
        },
        "required": ["status"]
    })
}

/// The final provider payload does not hold exactly `exec` and `wait`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "code mode fails closed: the model-visible tools must be exactly exec and wait, found [{found}]"
)]
pub struct SurfaceError {
    /// The names found, comma-separated.
    pub found: String,
}

/// Checks a provider payload's tool names: code mode never silently falls
/// back to exposing tools directly.
///
/// ```
/// assert!(codemode_runtime::check_model_tools(&["wait", "exec"]).is_ok());
/// assert!(codemode_runtime::check_model_tools(&["exec", "wait", "read"]).is_err());
/// ```
///
/// # Errors
/// [`SurfaceError`] for any other set of names.
pub fn check_model_tools(names: &[&str]) -> Result<(), SurfaceError> {
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    if sorted == ["exec", "wait"] {
        Ok(())
    } else {
        Err(SurfaceError {
            found: names.join(", "),
        })
    }
}

/// What hooks and policies see of an outer `exec` call: its kind and the
/// cell's language (from the raw input, before validation; a missing or
/// unknown language counts as `javascript`, which exec then refuses or runs).
///
/// ```
/// let meta = codemode_runtime::exec_hook_metadata(&serde_json::json!({"code": "let x: number = 1", "language": "typescript"}));
/// assert_eq!(meta.to_json(), serde_json::json!({"toolKind": "code_mode_exec", "toolInputKind": "typescript"}));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecHookMetadata {
    /// Always `code_mode_exec`.
    pub tool_kind: &'static str,
    /// `javascript` or `typescript`.
    pub tool_input_kind: &'static str,
}

impl ExecHookMetadata {
    /// The metadata as a JSON object (`toolKind`, `toolInputKind`).
    pub fn to_json(&self) -> Value {
        json!({ "toolKind": self.tool_kind, "toolInputKind": self.tool_input_kind })
    }
}

/// The hook metadata of an `exec` input (see [`ExecHookMetadata`]).
pub fn exec_hook_metadata(raw_input: &Value) -> ExecHookMetadata {
    let language = raw_input.get("language").and_then(Value::as_str);
    ExecHookMetadata {
        tool_kind: "code_mode_exec",
        tool_input_kind: match language.and_then(Language::parse) {
            Some(Language::TypeScript) => "typescript",
            _ => "javascript",
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::catalog::{ToolDefinition, ToolPolicy, ToolSource};

    #[test]
    fn the_model_visible_list_stays_small_whatever_the_catalog() {
        let mut tools = Vec::new();
        for server in 0..400 {
            for tool in 0..25 {
                tools.push(
                    ToolDefinition::new(
                        ToolSource::Mcp,
                        &format!("server-number-{server}"),
                        &format!("tool_{tool}"),
                    )
                    .with_description(&"a long description ".repeat(20))
                    .with_parameters(
                        json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                    ),
                );
            }
        }
        for tool in 0..500 {
            tools.push(ToolDefinition::new(
                ToolSource::Plugin,
                "p",
                &format!("t{tool}"),
            ));
        }
        let catalog = Catalog::build(tools, &ToolPolicy::default()).unwrap();
        let config = CodeModeConfig::default();
        let listed = serde_json::to_string(&model_tools(&config, &catalog)).unwrap();
        assert!(listed.len() < 4096, "{} bytes", listed.len());
        // 500 servers: names only, as many as fit, then a pointer to the
        // search that sees them all.
        assert!(
            listed.contains("MCP servers: serverNumber0, serverNumber1,"),
            "{listed}"
        );
        assert!(
            listed.contains("more; API.search finds tools across all servers"),
            "{listed}"
        );
        let names: Vec<&str> = model_tools(&config, &catalog)
            .iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["exec", "wait"]);
    }
}
