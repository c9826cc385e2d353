//! The bridge: the host's answer to every request a guest sends
//! (`tools.search/describe/call`, `MCP.<server>.*`, `API.list/read`,
//! `yield_control`).
//!
//! Everything a guest sends is untrusted (a guest can forge any payload):
//! each request is re-validated here against the run's own catalog and
//! limits before anything runs, and failures go back as plain rejections.

use std::collections::VecDeque;
use std::sync::Arc;

use codemode_sandbox::{HostRequest, Settlement};
use serde_json::{Map, Value};

use crate::calls::{CallInfo, Finished, json_len};
use crate::catalog::{Catalog, CatalogEntry, ToolSource};
use crate::drive::{DriveCtx, RunState};
use crate::guest_api::Method;
use crate::result::ErrorCode;
use crate::session::{McpMethod, McpServerCall, NestedCall, ToolFuture};

/// The settlement delivering a finished nested call to the guest.
pub(crate) fn settlement(ctx: &DriveCtx, done: Finished) -> (u32, Settlement) {
    (
        done.request_id,
        outcome_settlement(ctx, done.outcome, &done.tool_id),
    )
}

pub(crate) fn outcome_settlement(
    ctx: &DriveCtx,
    outcome: Result<Value, crate::session::ToolCallError>,
    tool_id: &str,
) -> Settlement {
    let max = ctx.inner.options.max_tool_result_bytes;
    match outcome {
        Ok(value) => {
            let text = value.to_string();
            if text.len() > max {
                Settlement::reject_with_code(
                    format!(
                        "tool {tool_id} returned {} bytes of JSON, more than the bridge carries ({max} bytes); ask the tool for less",
                        text.len()
                    ),
                    ErrorCode::NestedToolFailed.as_str(),
                )
            } else {
                Settlement::ResolveJson(text)
            }
        }
        Err(e) => Settlement::reject_with_code(
            format!(
                "tool {tool_id} failed: {}",
                codemode_sandbox::bounded_text(e.message, codemode_sandbox::MAX_ERROR_BYTES)
            ),
            ErrorCode::NestedToolFailed.as_str(),
        ),
    }
}

/// The longest id, name, query, path or URI a guest request may carry: far
/// above any real one, and small enough that looking it up (suggestions
/// included) is cheap whatever the guest sends.
pub(crate) const MAX_NAME_BYTES: usize = 1024;

/// Params that name something (rather than carry tool input).
const NAME_FIELDS: &[&str] = &[
    "id", "name", "query", "path", "uri", "prefix", "server", "tool",
];

fn oversized_name(params: &Map<String, Value>) -> Option<(&'static str, usize)> {
    NAME_FIELDS
        .iter()
        .find_map(|&field| match params.get(field) {
            Some(Value::String(s)) if s.len() > MAX_NAME_BYTES => Some((field, s.len())),
            _ => None,
        })
}

fn bad_request(message: String) -> Settlement {
    Settlement::reject(message)
}

/// Answers one guest request, or starts the nested call it asks for.
pub(crate) fn handle_request(
    ctx: &DriveCtx,
    state: &mut RunState,
    request: HostRequest,
    ready: &mut VecDeque<(u32, Settlement)>,
) {
    let HostRequest { id, payload } = request;
    let payload = match payload {
        Ok(payload) => payload,
        Err(e) => {
            ready.push_back((id, bad_request(format!("bridge request refused: {e}"))));
            return;
        }
    };
    let method = payload.get("method").and_then(Value::as_str).unwrap_or("");
    let empty = Map::new();
    let params = match payload.get("params") {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => &empty,
        Some(_) => {
            ready.push_back((
                id,
                bad_request(format!(
                    "bridge request `{method}`: params must be an object"
                )),
            ));
            return;
        }
    };
    if let Some((field, bytes)) = oversized_name(params) {
        ready.push_back((
            id,
            bad_request(format!(
                "bridge request `{}`: `{field}` is {bytes} bytes; ids, names, queries, paths and URIs are at most {MAX_NAME_BYTES} bytes",
                codemode_sandbox::bounded_text(method.to_owned(), 64)
            )),
        ));
        return;
    }
    let reply = match Method::from_wire(method) {
        Some(Method::Yield) => {
            state.yields.push(id);
            return;
        }
        Some(Method::Search) => {
            state.info.search_count += 1;
            search(ctx, state, params)
        }
        Some(Method::Describe) => {
            state.info.describe_count += 1;
            describe(state, params)
        }
        Some(Method::Call) => match call(ctx, state, id, params) {
            Some(reply) => reply,
            None => return,
        },
        Some(Method::McpCall) => match mcp_call(ctx, state, id, params) {
            Some(reply) => reply,
            None => return,
        },
        Some(Method::McpRequest) => match mcp_request(ctx, state, id, params) {
            Some(reply) => reply,
            None => return,
        },
        Some(Method::McpApi) => {
            state.info.api_count += 1;
            mcp_api(state, params)
        }
        Some(Method::ApiList) => {
            state.info.api_count += 1;
            api_list(state, params)
        }
        Some(Method::ApiRead) => {
            state.info.api_count += 1;
            api_read(state, params)
        }
        None => bad_request(format!(
            "unknown bridge method `{method}`; the guest API is tools.search, tools.describe, tools.call, MCP.<server>.*, API.list, API.read and yield_control"
        )),
    };
    ready.push_back((id, reply));
}

fn search(ctx: &DriveCtx, state: &RunState, params: &Map<String, Value>) -> Settlement {
    let config = &ctx.inner.config;
    let query = match params.get("query") {
        Some(Value::String(q)) if !q.trim().is_empty() && q.len() <= 1024 => q,
        Some(Value::String(q)) if q.len() > 1024 => {
            return bad_request(
                "tools.search: the query is longer than 1024 bytes; use a few keywords".into(),
            );
        }
        Some(Value::String(_)) => {
            return bad_request("tools.search: the query is empty; pass keywords, or read ALL_TOOLS for the whole catalog".into());
        }
        _ => {
            return bad_request(
                "tools.search(query, options?): query must be a string of keywords".into(),
            );
        }
    };
    let mut limit = config.search_default_limit.min(config.max_search_limit) as usize;
    match params.get("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(options)) => {
            if let Some(key) = options.keys().find(|k| k.as_str() != "limit") {
                return bad_request(format!(
                    "tools.search: unknown option `{key}`; the only option is `limit`"
                ));
            }
            match options.get("limit") {
                None => {}
                Some(v) => match v
                    .as_u64()
                    .filter(|&n| n >= 1 && n <= config.max_search_limit)
                {
                    Some(n) => limit = n as usize,
                    None => {
                        return bad_request(format!(
                            "tools.search: options.limit must be an integer from 1 to {} (maxSearchLimit), got {v}",
                            config.max_search_limit
                        ));
                    }
                },
            }
        }
        Some(_) => {
            return bad_request("tools.search: options must be an object like { limit: 5 }".into());
        }
    }
    let hits: Vec<Value> = state
        .catalog
        .search(query, limit)
        .into_iter()
        .map(|e| e.compact_json())
        .collect();
    Settlement::Resolve(Value::Array(hits))
}

fn describe(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let Some(Value::String(id)) = params.get("id") else {
        return bad_request(
            "tools.describe(id): id must be a catalog id or tool name (a string)".into(),
        );
    };
    match state.catalog.describe(id) {
        Ok(entry) => Settlement::Resolve(entry.described_json()),
        Err(message) => bad_request(format!("tools.describe: {message}")),
    }
}

fn nested_failure(message: String) -> Option<Settlement> {
    Some(Settlement::reject_with_code(
        message,
        ErrorCode::NestedToolFailed.as_str(),
    ))
}

/// `maxPendingToolCalls` reached: the rejection for one more call.
fn over_pending_limit(ctx: &DriveCtx, state: &RunState) -> Option<Settlement> {
    let max_pending = ctx.inner.config.max_pending_tool_calls as usize;
    (state.calls.in_flight() >= max_pending).then(|| {
        Settlement::reject_with_code(
            format!(
                "too many nested tool calls in flight: at most {max_pending} (maxPendingToolCalls) may run at once; await some before starting more"
            ),
            ErrorCode::TooManyPendingToolCalls.as_str(),
        )
    })
}

/// Counts and starts one nested call (a tool call, or an MCP resource or
/// prompt request) under `maxPendingToolCalls`; `start` asks the executor.
/// `None` when the call is now in flight.
fn start_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    (tool_id, method): (String, &'static str),
    input: Value,
    start: impl FnOnce(&RunState, String, Value) -> ToolFuture,
) -> Option<Settlement> {
    if ctx.limits.cancel.is_cancelled() || ctx.scope.is_aborted() {
        // Nothing new starts after an abort or cancellation.
        return Some(Settlement::reject_with_code(
            "the run was aborted: no more nested calls start",
            ErrorCode::Aborted.as_str(),
        ));
    }
    if let Some(refused) = over_pending_limit(ctx, state) {
        return Some(refused);
    }
    state.info.call_count += 1;
    if !state.info.tool_ids.contains(&tool_id) {
        state.info.tool_ids.push(tool_id.clone());
    }
    let call_id = state.calls.next_call_id(&state.parent_call_id);
    let info = CallInfo {
        call_id: call_id.clone(),
        tool_id: tool_id.clone(),
        method,
        parent_call_id: state.parent_call_id.clone(),
        input_bytes: json_len(&input),
    };
    let future = start(state, call_id, input);
    state
        .calls
        .start(&ctx.handle, request_id, info, future)
        .map(|outcome| outcome_settlement(ctx, outcome, &tool_id))
}

/// Starts a nested call of a catalog entry (checked by the caller).
fn start_tool_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    entry: &Arc<CatalogEntry>,
    input: Value,
) -> Option<Settlement> {
    let key = (entry.id.clone(), "call");
    start_call(
        ctx,
        state,
        request_id,
        key,
        input,
        |state, call_id, input| {
            state.executor.call(NestedCall {
                context: Arc::clone(&state.context),
                parent_call_id: state.parent_call_id.clone(),
                call_id,
                tool: Arc::clone(entry),
                input,
            })
        },
    )
}

/// `tools.call(id, input)`; `None` when the call is now in flight.
fn call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    params: &Map<String, Value>,
) -> Option<Settlement> {
    let Some(Value::String(id)) = params.get("id") else {
        return nested_failure("tools.call(id, input): id must be a catalog id string".into());
    };
    let entry = match state.catalog.callable(id) {
        Ok(entry) => Arc::clone(entry),
        Err(message) => return nested_failure(format!("tools.call: {message}")),
    };
    let input = match params.get("input") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v.clone(),
    };
    start_tool_call(ctx, state, request_id, &entry, input)
}

/// The `MCP.<server>.<tool>` label of an MCP catalog entry, for error
/// messages only (it scans the namespace).
fn mcp_label(catalog: &Catalog, entry: &CatalogEntry) -> String {
    catalog
        .mcp()
        .servers()
        .iter()
        .find_map(|s| {
            s.tools
                .iter()
                .find(|t| t.entry.id == entry.id)
                .map(|t| format!("MCP.{}.{}", s.js_name, t.js_name))
        })
        .unwrap_or_else(|| entry.id.clone())
}

/// `MCP.<server>.<tool>(input)`: resolved to the exact MCP catalog id, its
/// input checked against the schema's top level; `None` when in flight.
fn mcp_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    params: &Map<String, Value>,
) -> Option<Settlement> {
    let Some(Value::String(id)) = params.get("id") else {
        return nested_failure("MCP call: the tool id must be a string".into());
    };
    let entry = match state.catalog.get(id) {
        Some(entry) if entry.source == ToolSource::Mcp => Arc::clone(entry),
        _ => {
            return nested_failure(format!(
                "no MCP tool \"{id}\" in this run; see API.list(\"mcp\") for the servers and tools"
            ));
        }
    };
    let input = params.get("input").cloned().unwrap_or(Value::Null);
    let input = match crate::mcp::prepare_input(
        || mcp_label(&state.catalog, &entry),
        &entry.parameters,
        input,
    ) {
        Ok(input) => input,
        Err(message) => return nested_failure(message),
    };
    start_tool_call(ctx, state, request_id, &entry, input)
}

/// `MCP.<server>.resources.*` / `.prompts.*`; `None` when in flight.
fn mcp_request(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    params: &Map<String, Value>,
) -> Option<Settlement> {
    let server_name = params.get("server").and_then(Value::as_str).unwrap_or("");
    let Some(server) = state.catalog.mcp().server(server_name) else {
        return nested_failure(format!(
            "no MCP server `{server_name}` in this run; see API.list(\"mcp\")"
        ));
    };
    let op = params.get("op").and_then(Value::as_str).unwrap_or("");
    let (method, offered) = match op {
        "resources.list" => (McpMethod::ResourcesList, server.info.resources),
        "resources.read" => (McpMethod::ResourcesRead, server.info.resources),
        "resources.templates" => (McpMethod::ResourceTemplatesList, server.info.resources),
        "prompts.list" => (McpMethod::PromptsList, server.info.prompts),
        "prompts.get" => (McpMethod::PromptsGet, server.info.prompts),
        _ => return nested_failure(format!("unknown MCP request `{op}`")),
    };
    let label = format!("MCP.{}.{op}", server.js_name);
    if !offered {
        return nested_failure(format!(
            "{label}: MCP server \"{}\" offers no {}",
            server.info.name,
            if op.starts_with("resources") {
                "resources"
            } else {
                "prompts"
            }
        ));
    }
    let input = match params.get("input") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => {
            return nested_failure(format!(
                "{label} takes one object argument like {{ uri: \"...\" }}"
            ));
        }
    };
    let string_field = |key: &str| match input.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(format!("{label}: `{key}` must be a non-empty string")),
    };
    let mut checked = Map::new();
    let result = (|| {
        match method {
            McpMethod::ResourcesList
            | McpMethod::ResourceTemplatesList
            | McpMethod::PromptsList => {
                if let Some(cursor) = string_field("cursor")? {
                    checked.insert("cursor".into(), Value::String(cursor));
                }
            }
            McpMethod::ResourcesRead => match string_field("uri")? {
                Some(uri) => {
                    checked.insert("uri".into(), Value::String(uri));
                }
                None => return Err(format!("{label}({{ uri }}): `uri` is required")),
            },
            McpMethod::PromptsGet => {
                match string_field("name")? {
                    Some(name) => checked.insert("name".into(), Value::String(name)),
                    None => {
                        return Err(format!(
                            "{label}({{ name, arguments }}): `name` is required"
                        ));
                    }
                };
                match input.get("arguments") {
                    None | Some(Value::Null) => {}
                    Some(Value::Object(args)) => {
                        let mut strings = Map::new();
                        for (k, v) in args {
                            let text = match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            strings.insert(k.clone(), Value::String(text));
                        }
                        checked.insert("arguments".into(), Value::Object(strings));
                    }
                    Some(_) => {
                        return Err(format!("{label}: `arguments` must be an object of strings"));
                    }
                }
            }
        }
        Ok(())
    })();
    if let Err(message) = result {
        return nested_failure(message);
    }
    let server_name = server.info.name.clone();
    let key = (
        format!("mcp:{server_name}:{}", method.as_str()),
        method.as_str(),
    );
    start_call(
        ctx,
        state,
        request_id,
        key,
        Value::Object(checked),
        |state, call_id, params| {
            state.executor.mcp_request(McpServerCall {
                context: Arc::clone(&state.context),
                parent_call_id: state.parent_call_id.clone(),
                call_id,
                server: server_name,
                method,
                params,
            })
        },
    )
}

/// `MCP.<server>.$api(toolName?, { schema? })`, answered by the host.
fn mcp_api(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let server_name = params.get("server").and_then(Value::as_str).unwrap_or("");
    let Some(server) = state.catalog.mcp().server(server_name) else {
        return bad_request(format!("no MCP server `{server_name}` in this run"));
    };
    let tool = match params.get("tool") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => match server.tool(name) {
            Some(tool) => Some(tool),
            None => {
                let names: Vec<&str> = server.tools.iter().map(|t| t.js_name.as_str()).collect();
                return bad_request(format!(
                    "MCP.{}.$api: no tool \"{name}\"; its tools are {}",
                    server.js_name,
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ));
            }
        },
        Some(_) => {
            return bad_request(format!(
                "MCP.{}.$api(toolName?, options?): toolName must be a string",
                server.js_name
            ));
        }
    };
    let schema = match params.get("options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => {
            if let Some(key) = options.keys().find(|k| k.as_str() != "schema") {
                return bad_request(format!(
                    "MCP.{}.$api: unknown option `{key}`; the only option is `schema`",
                    server.js_name
                ));
            }
            match options.get("schema") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return bad_request(format!(
                        "MCP.{}.$api: options.schema must be a boolean",
                        server.js_name
                    ));
                }
            }
        }
        Some(_) => {
            return bad_request(format!(
                "MCP.{}.$api: options must be an object like {{ schema: true }}",
                server.js_name
            ));
        }
    };
    Settlement::Resolve(crate::declarations::api_header(server, tool, schema))
}

fn optional_string<'a>(
    params: &'a Map<String, Value>,
    key: &str,
    usage: &str,
) -> Result<Option<&'a str>, Settlement> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad_request(format!("{usage}: {key} must be a string"))),
    }
}

fn api_list(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let prefix = match optional_string(params, "prefix", "API.list(prefix?)") {
        Ok(prefix) => prefix,
        Err(refused) => return refused,
    };
    match state.catalog.api_files().list(prefix) {
        Ok(files) => Settlement::Resolve(Value::Array(
            files.iter().map(|f| f.metadata_json()).collect(),
        )),
        Err(e) => bad_request(e.to_string()),
    }
}

fn api_read(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let path = match optional_string(params, "path", "API.read(path)") {
        Ok(Some(path)) => path,
        Ok(None) => {
            return bad_request(
                "API.read(path): pass a path such as \"mcp/index.d.ts\" (API.list() lists them)"
                    .into(),
            );
        }
        Err(refused) => return refused,
    };
    let files = state.catalog.api_files();
    let text = match files.read(path) {
        Ok(text) => text,
        Err(e) => return bad_request(e.to_string()),
    };
    let (offset, length) = match params.get("options") {
        None | Some(Value::Null) => {
            if text.len() > MAX_API_READ_BYTES {
                return bad_request(format!(
                    "API.read: \"{path}\" is {} bytes, more than one read returns ({MAX_API_READ_BYTES}); read it in pieces with API.read(path, {{ offset, length }}) (length at most {MAX_API_READ_BYTES}), or one tool's types with MCP.<server>.$api(\"tool\")",
                    text.len()
                ));
            }
            return Settlement::Resolve(Value::String(text.to_owned()));
        }
        Some(Value::Object(options)) => {
            if let Some(key) = options
                .keys()
                .find(|k| !matches!(k.as_str(), "offset" | "length"))
            {
                return bad_request(format!(
                    "API.read: unknown option `{key}`; the options are `offset` and `length` (bytes)"
                ));
            }
            let number = |key: &str, default: u64| match options.get(key) {
                None | Some(Value::Null) => Some(default),
                Some(v) => v.as_u64(),
            };
            match (
                number("offset", 0),
                number("length", MAX_API_READ_BYTES as u64),
            ) {
                (Some(offset), Some(length)) if length <= MAX_API_READ_BYTES as u64 => {
                    (offset as usize, length as usize)
                }
                _ => {
                    return bad_request(format!(
                        "API.read: options.offset must be a byte offset (an integer from 0) and options.length an integer from 0 to {MAX_API_READ_BYTES}"
                    ));
                }
            }
        }
        Some(_) => {
            return bad_request(
                "API.read(path, options?): options must be an object like { offset: 0, length: 65536 }".into(),
            );
        }
    };
    match files.read_range(path, offset, length) {
        Ok(piece) => Settlement::Resolve(Value::String(piece.to_owned())),
        Err(e) => bad_request(e.to_string()),
    }
}

/// The most one `API.read` returns: larger files are read in pieces (a
/// whole 11 MB declaration file would fill a cell's heap).
pub(crate) const MAX_API_READ_BYTES: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    //! Forged requests: whatever a guest sends, the host answers from the
    //! run's own catalog and never reaches a tool it should not.
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::config::{CodeModeConfig, Language};
    use crate::runtime::CodeModeRuntime;
    use crate::session::{CodeModeSession, ToolExecutor, ToolFuture};

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<(String, Value)>>,
    }

    impl ToolExecutor for Recorder {
        fn call(&self, call: NestedCall) -> ToolFuture {
            self.calls
                .lock()
                .unwrap()
                .push((call.tool.id.clone(), call.input.clone()));
            Box::pin(async { Ok(json!({ "content": [] })) })
        }

        fn mcp_request(&self, request: McpServerCall) -> ToolFuture {
            self.calls.lock().unwrap().push((
                format!("{}:{}", request.server, request.method.as_str()),
                request.params.clone(),
            ));
            Box::pin(async { Ok(json!({ "contents": [] })) })
        }
    }

    struct Fixture {
        _tokio: tokio::runtime::Runtime,
        session: CodeModeSession,
        recorder: Arc<Recorder>,
    }

    fn fixture() -> Fixture {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let runtime = CodeModeRuntime::new(CodeModeConfig {
            enabled: true,
            ..CodeModeConfig::default()
        })
        .unwrap();
        let catalog = crate::fuzzing::forged_request_catalog();
        let recorder = Arc::new(Recorder::default());
        let session = runtime.session(
            Default::default(),
            catalog,
            Arc::clone(&recorder) as Arc<dyn ToolExecutor>,
        );
        Fixture {
            _tokio: tokio,
            session,
            recorder,
        }
    }

    /// The host's answer to one raw payload.
    fn answer(f: &Fixture, payload: Value) -> Settlement {
        let inner = Arc::clone(&f.session.runtime.inner);
        let ctx = DriveCtx {
            limits: Default::default(),
            deadline: Instant::now() + Duration::from_secs(10),
            handle: f._tokio.handle().clone(),
            scope: Arc::clone(&f.session.scope),
            inner,
        };
        let mut state = RunState::new(&f.session, "exec_1", Language::JavaScript);
        let mut ready = VecDeque::new();
        handle_request(
            &ctx,
            &mut state,
            HostRequest {
                id: 7,
                payload: Ok(payload),
            },
            &mut ready,
        );
        let (id, settlement) = ready.pop_front().expect("answered at once");
        assert_eq!(id, 7);
        settlement
    }

    fn rejected(settlement: &Settlement) -> &str {
        match settlement {
            Settlement::Reject { message, .. } => message,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn mcp_calls_reach_only_mcp_entries_of_the_run() {
        let f = fixture();
        for id in [
            "openclaw:core:read",
            "mcp:calc:secret",
            "mcp:other:add",
            "exec",
        ] {
            let s = answer(
                &f,
                json!({ "method": "mcp.call", "params": { "id": id, "input": { "a": 1 } } }),
            );
            assert!(rejected(&s).contains("no MCP tool"), "{id}: {s:?}");
        }
        let s = answer(
            &f,
            json!({ "method": "call", "params": { "id": "mcp:calc:add", "input": { "a": 1 } } }),
        );
        assert!(rejected(&s).contains("MCP tool"), "{s:?}");
        assert!(f.recorder.calls.lock().unwrap().is_empty());
    }

    #[test]
    fn mcp_inputs_are_objects_with_defaults_and_required_keys() {
        let f = fixture();
        for input in [json!(3), json!("x"), json!([1])] {
            let s = answer(
                &f,
                json!({ "method": "mcp.call", "params": { "id": "mcp:calc:add", "input": input } }),
            );
            assert!(rejected(&s).contains("one object argument"), "{s:?}");
        }
        let s = answer(
            &f,
            json!({ "method": "mcp.call", "params": { "id": "mcp:calc:add", "input": {} } }),
        );
        assert!(
            rejected(&s).contains("MCP.calc.add: missing required key `a`"),
            "{s:?}"
        );
        let s = answer(
            &f,
            json!({ "method": "mcp.call", "params": { "id": "mcp:calc:add", "input": { "a": 1 } } }),
        );
        assert!(matches!(s, Settlement::ResolveJson(_)), "{s:?}");
        assert_eq!(
            f.recorder.calls.lock().unwrap().as_slice(),
            [("mcp:calc:add".to_owned(), json!({ "a": 1, "b": 5 }))]
        );
    }

    #[test]
    fn resource_and_prompt_requests_are_checked() {
        let f = fixture();
        let cases = [
            (
                json!({ "server": "calc", "op": "resources.list" }),
                "offers no resources",
            ),
            (
                json!({ "server": "docs", "op": "prompts.list" }),
                "offers no prompts",
            ),
            (
                json!({ "server": "nope", "op": "resources.list" }),
                "no MCP server `nope`",
            ),
            (
                json!({ "server": "docs", "op": "tools.call" }),
                "unknown MCP request",
            ),
            (
                json!({ "server": "docs", "op": "resources.read", "input": {} }),
                "`uri` is required",
            ),
            (
                json!({ "server": "docs", "op": "resources.read", "input": { "uri": 5 } }),
                "must be a non-empty string",
            ),
            (
                json!({ "server": "docs", "op": "resources.read", "input": [1] }),
                "one object argument",
            ),
        ];
        for (params, expected) in cases {
            let s = answer(&f, json!({ "method": "mcp.request", "params": params }));
            assert!(rejected(&s).contains(expected), "{params}: {s:?}");
        }
        assert!(f.recorder.calls.lock().unwrap().is_empty());
        let s = answer(
            &f,
            json!({ "method": "mcp.request", "params": { "server": "docs", "op": "resources.read", "input": { "uri": "memo://one", "extra": { "x": 1 } } } }),
        );
        assert!(matches!(s, Settlement::ResolveJson(_)), "{s:?}");
        assert_eq!(
            f.recorder.calls.lock().unwrap().as_slice(),
            [(
                "docs:resources/read".to_owned(),
                json!({ "uri": "memo://one" })
            )],
            "only the checked params reach the executor"
        );
    }

    #[test]
    fn api_paths_and_headers_are_validated() {
        let f = fixture();
        for path in [
            json!("../etc/passwd"),
            json!("mcp/../mcp/index.d.ts"),
            json!("mcp//x"),
            json!(""),
            json!("/mcp/index.d.ts"),
            json!("mcp/nope.d.ts"),
            json!(1),
        ] {
            let s = answer(
                &f,
                json!({ "method": "api.read", "params": { "path": path } }),
            );
            rejected(&s);
        }
        let s = answer(
            &f,
            json!({ "method": "api.read", "params": { "path": "mcp/calc.d.ts" } }),
        );
        match s {
            Settlement::Resolve(Value::String(text)) => {
                assert!(text.contains("declare namespace MCP.calc"), "{text}");
                assert!(
                    !text.contains("secret"),
                    "denied tools are not declared: {text}"
                );
            }
            other => panic!("{other:?}"),
        }
        let s = answer(
            &f,
            json!({ "method": "api.list", "params": { "prefix": "mcp" } }),
        );
        match s {
            Settlement::Resolve(Value::Array(files)) => {
                let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
                assert_eq!(paths, ["mcp/calc.d.ts", "mcp/docs.d.ts", "mcp/index.d.ts"]);
            }
            other => panic!("{other:?}"),
        }
        rejected(&answer(
            &f,
            json!({ "method": "api.list", "params": { "prefix": "etc" } }),
        ));
        rejected(&answer(
            &f,
            json!({ "method": "mcp.api", "params": { "server": "calc", "tool": "secret" } }),
        ));
        rejected(&answer(
            &f,
            json!({ "method": "mcp.api", "params": { "server": "calc", "options": { "schema": 1 } } }),
        ));
        rejected(&answer(
            &f,
            json!({ "method": "mcp.api", "params": { "server": "__proto__" } }),
        ));
        rejected(&answer(
            &f,
            json!({ "method": "mcp.call", "params": [1, 2] }),
        ));
        rejected(&answer(&f, json!({ "method": "fs.read", "params": {} })));
    }
}
