//! The fail-closed payload guard: before a provider request leaves, the
//! tools it carries must be exactly the run's [`ModelSurface`], in the
//! shapes agent runtimes send: OpenAI Chat Completions (`tools[].function`,
//! and the legacy `functions`), OpenAI Responses (`tools[]` with
//! `type: "function"`; built-in tools count as tools), Anthropic Messages
//! (`tools[]` with `input_schema`; server tools count as tools) and an MCP
//! `tools/list` result (bare or as a JSON-RPC response). With code mode
//! active that is exactly `exec` and `wait` with the runtime's own
//! definitions (plus direct-only tools); anything else fails the run
//! (`internal_error`): code mode never silently falls back to showing
//! tools directly.

use std::borrow::Cow;

use serde_json::Value;

use crate::activation::ModelSurface;
use crate::debug::{DebugSwitches, PayloadDebug, redacted_payload};
use crate::result::{CodeModeResult, ErrorCode, Telemetry};

/// The wire format of a provider request (or MCP answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadShape {
    /// `POST /v1/chat/completions`.
    OpenAiChatCompletions,
    /// `POST /v1/responses`.
    OpenAiResponses,
    /// `POST /v1/messages`.
    AnthropicMessages,
    /// The result of MCP `tools/list`.
    McpToolsList,
}

impl PayloadShape {
    fn name(self) -> &'static str {
        match self {
            PayloadShape::OpenAiChatCompletions => "openai-chat-completions",
            PayloadShape::OpenAiResponses => "openai-responses",
            PayloadShape::AnthropicMessages => "anthropic-messages",
            PayloadShape::McpToolsList => "mcp-tools-list",
        }
    }
}

/// The payload does not carry the run's surface: the run fails closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("code mode fails closed: the {shape} payload {problem}")]
pub struct PayloadError {
    /// The payload's shape.
    pub shape: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl PayloadError {
    /// The contract's error code (`internal_error`: the host built a
    /// payload that is not the surface).
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InternalError
    }

    /// The failed result a run reports.
    pub fn to_result(&self) -> CodeModeResult {
        CodeModeResult::failure(self.code(), self.to_string(), Telemetry::default())
    }
}

/// One tool as a payload carries it.
#[derive(Debug)]
struct PayloadTool<'a> {
    name: Cow<'a, str>,
    description: Option<&'a str>,
    schema: Option<&'a Value>,
}

/// One tool as the surface defines it.
struct Expected<'a> {
    name: &'a str,
    description: &'a str,
    schema: &'a Value,
}

impl ModelSurface {
    /// Checks that `payload` carries exactly this surface's tools (see the
    /// module docs).
    ///
    /// ```
    /// use codemode_runtime::{activate, CodeModeConfig, CodeModeRuntime, PayloadShape, RunKind, ToolDefinition, ToolSource};
    /// # fn demo(runtime: &CodeModeRuntime) {
    /// let on = CodeModeConfig { enabled: true, ..CodeModeConfig::default() };
    /// let tools = vec![ToolDefinition::new(ToolSource::Openclaw, "core", "read")];
    /// let surface = activate(&on, Ok(runtime), tools, RunKind::Agent).unwrap();
    /// let leaked = serde_json::json!({ "tools": [{ "name": "read", "input_schema": {} }] });
    /// assert!(surface.check_payload(PayloadShape::AnthropicMessages, &leaked).is_err());
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`PayloadError`] naming what is missing, extra, changed or malformed.
    pub fn check_payload(&self, shape: PayloadShape, payload: &Value) -> Result<(), PayloadError> {
        let checked = self.check_tools(shape, payload);
        let debug = DebugSwitches::current();
        if debug.model_transport {
            tracing::info!(
                target: "codemode::debug",
                shape = shape.name(),
                bytes = payload.to_string().len(),
                verdict = match &checked { Ok(()) => "ok".to_owned(), Err(e) => e.problem.chars().take(300).collect() },
                "model payload checked"
            );
        }
        match debug.model_payload {
            Some(PayloadDebug::Tools) => {
                let names: Vec<String> = tools_of(shape, payload)
                    .map(|tools| {
                        tools
                            .iter()
                            .map(|t| t.name.chars().take(128).collect())
                            .collect()
                    })
                    .unwrap_or_default();
                tracing::info!(target: "codemode::debug", shape = shape.name(), tools = ?names, "model-visible tools");
            }
            Some(PayloadDebug::FullRedacted) => {
                tracing::info!(target: "codemode::debug", shape = shape.name(), payload = %redacted_payload(payload), "model payload (redacted)");
            }
            None => {}
        }
        checked
    }

    fn check_tools(&self, shape: PayloadShape, payload: &Value) -> Result<(), PayloadError> {
        let fail = |problem: String| PayloadError {
            shape: shape.name(),
            problem,
        };
        let found = tools_of(shape, payload).map_err(fail)?;
        let found_names: Vec<&str> = found.iter().map(|t| t.name.as_ref()).collect();
        let listed = || {
            let mut text: String = found_names.join(", ").chars().take(400).collect();
            if text.is_empty() {
                text.push_str("none");
            }
            text
        };
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = found_names.iter().find(|n| !seen.insert(**n)) {
            return Err(fail(format!(
                "names tool `{twice}` twice (found: {})",
                listed()
            )));
        }
        let expected = self.visible_names();
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|n| !found_names.contains(n))
            .collect();
        let extra: Vec<&str> = found_names
            .iter()
            .copied()
            .filter(|n| !expected.contains(n))
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            let want = if expected.is_empty() {
                "no tools".to_owned()
            } else {
                format!("exactly [{}]", expected.join(", "))
            };
            let mut problem = format!("must carry {want}, found [{}]", listed());
            if !extra.is_empty() {
                problem.push_str(&format!(
                    "; not allowed: {}",
                    extra.join(", ").chars().take(400).collect::<String>()
                ));
            }
            if !missing.is_empty() {
                problem.push_str(&format!("; missing: {}", missing.join(", ")));
            }
            return Err(fail(problem));
        }
        // In code mode the definitions must be the runtime's own: a
        // rewritten description or schema could smuggle tools back in.
        let ModelSurface::CodeMode {
            model_tools,
            direct_tools,
            ..
        } = self
        else {
            return Ok(());
        };
        let definitions = model_tools
            .iter()
            .map(|t| Expected {
                name: t.name,
                description: &t.description,
                schema: &t.input_schema,
            })
            .chain(direct_tools.iter().map(|t| Expected {
                name: &t.name,
                description: &t.description,
                schema: &t.parameters,
            }));
        for want in definitions {
            let Some(got) = found.iter().find(|t| t.name == want.name) else {
                continue;
            };
            if got.description.unwrap_or_default() != want.description {
                return Err(fail(format!(
                    "changes the description of `{}`: use the runtime's own definition",
                    want.name
                )));
            }
            if got.schema.unwrap_or(&Value::Null) != want.schema {
                return Err(fail(format!(
                    "changes the input schema of `{}`: use the runtime's own definition",
                    want.name
                )));
            }
        }
        Ok(())
    }
}

/// The tools of a payload of `shape`, or what is malformed about them.
fn tools_of(shape: PayloadShape, payload: &Value) -> Result<Vec<PayloadTool<'_>>, String> {
    let Some(payload) = payload.as_object() else {
        return Err("is not a JSON object".into());
    };
    let mut tools = Vec::new();
    match shape {
        PayloadShape::OpenAiChatCompletions => {
            for (i, item) in list(payload.get("tools"), "tools")?.into_iter().enumerate() {
                let path = format!("tools[{i}]");
                let kind = item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("function");
                if kind == "function" {
                    let function = item
                        .get("function")
                        .ok_or_else(|| format!("has `{path}` without `function`"))?;
                    tools.push(named(function, &format!("{path}.function"), "parameters")?);
                } else {
                    tools.push(builtin(item, kind));
                }
            }
            for (i, item) in list(payload.get("functions"), "functions")?
                .into_iter()
                .enumerate()
            {
                tools.push(named(item, &format!("functions[{i}]"), "parameters")?);
            }
        }
        PayloadShape::OpenAiResponses => {
            for (i, item) in list(payload.get("tools"), "tools")?.into_iter().enumerate() {
                let path = format!("tools[{i}]");
                match item.get("type").and_then(Value::as_str) {
                    Some("function") => tools.push(named(item, &path, "parameters")?),
                    Some(kind) => tools.push(builtin(item, kind)),
                    None => return Err(format!("has `{path}` without a `type`")),
                }
            }
        }
        PayloadShape::AnthropicMessages => {
            for (i, item) in list(payload.get("tools"), "tools")?.into_iter().enumerate() {
                let path = format!("tools[{i}]");
                match item.get("type").and_then(Value::as_str) {
                    None | Some("custom") => tools.push(named(item, &path, "input_schema")?),
                    Some(kind) => tools.push(builtin(item, kind)),
                }
            }
        }
        PayloadShape::McpToolsList => {
            let result = match payload.get("result") {
                Some(Value::Object(result)) if payload.contains_key("jsonrpc") => result,
                _ => payload,
            };
            for (i, item) in list(result.get("tools"), "tools")?.into_iter().enumerate() {
                tools.push(named(item, &format!("tools[{i}]"), "inputSchema")?);
            }
        }
    }
    Ok(tools)
}

/// The items of an array field (none when absent or null).
fn list<'a>(value: Option<&'a Value>, path: &str) -> Result<Vec<&'a Value>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.iter().collect()),
        Some(_) => Err(format!("has `{path}` that is not an array")),
    }
}

/// A tool with `name`, `description` and its schema under `schema_key`.
fn named<'a>(item: &'a Value, path: &str, schema_key: &str) -> Result<PayloadTool<'a>, String> {
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("has `{path}` without a string `name`"))?;
    Ok(PayloadTool {
        name: Cow::Borrowed(name),
        description: item.get("description").and_then(Value::as_str),
        schema: item.get(schema_key),
    })
}

/// A provider's built-in tool (web search, code interpreter, ...): a tool
/// the model sees all the same, named after its type (and name, if any).
fn builtin<'a>(item: &'a Value, kind: &str) -> PayloadTool<'a> {
    let name = match item.get("name").and_then(Value::as_str) {
        Some(name) => format!("{name} (built-in {kind})"),
        None => format!("{kind} (built-in)"),
    };
    PayloadTool {
        name: Cow::Owned(name),
        description: None,
        schema: None,
    }
}
