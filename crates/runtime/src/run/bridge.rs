//! The bridge: the host's answer to every request a guest sends
//! (`tools.search/describe/call`, `MCP.<server>.*`, `API.list/read`,
//! `yield_control`).
//!
//! Everything a guest sends is untrusted (a guest can forge any payload):
//! each request is parsed once into a typed [`BridgeRequest`] (every size
//! cap checked there), then checked here against the run's own catalog and
//! limits before anything runs; failures go back as plain rejections.

use std::collections::VecDeque;
use std::sync::Arc;

use codemode_sandbox::{HostRequest, Settlement};
use serde_json::{Map, Value, json};

use crate::catalog::guest_api::{McpOp, Method};
use crate::catalog::{Catalog, CatalogEntry, ToolSource};
use crate::control::{Gate, GateApproval, GateState, Recheck, ToolHooks};
use crate::executor::{McpServerCall, NestedCall, ToolExecutor, ToolFuture};
use crate::result::ErrorCode;
use crate::result::json_len;
use crate::run::calls::{CallInfo, Finished};
use crate::run::env::DriveCtx;
use crate::run::request::{BridgeRequest, MAX_API_READ_BYTES, McpApiError, McpInputError, Refusal};
use crate::run::state::RunState;

/// The settlement delivering a finished nested call to the guest.
pub(crate) fn settlement(
    ctx: &DriveCtx,
    state: &mut RunState,
    done: Finished,
) -> (u32, Settlement) {
    (
        done.request_id,
        outcome_settlement(ctx, &mut state.handles, done.outcome, &done.tool_id),
    )
}

pub(crate) fn outcome_settlement(
    ctx: &DriveCtx,
    handles: &mut crate::handles::ResultHandles,
    outcome: Result<Value, crate::executor::ToolCallError>,
    tool_id: &str,
) -> Settlement {
    let options = &ctx.host.options;
    let max = options.max_tool_result_bytes;
    match outcome {
        Ok(value) => {
            let text = value.to_string();
            if text.len() > options.result_handle_bytes {
                // Too large to be worth a copy in the VM: a handle.
                let bytes = text.len();
                match handles.hold(value, text, options.max_held_result_bytes) {
                    Ok(descriptor) => Settlement::ResolveJson(descriptor.to_string()),
                    Err(crate::handles::HoldError::Full { held, needed }) => {
                        Settlement::reject_with_code(
                            format!(
                                "tool {tool_id} returned {bytes} bytes of JSON; this run already holds {held} bytes of large results and this one needs {needed} more, past the run's bound ({} bytes); ask the tool for less",
                                options.max_held_result_bytes
                            ),
                            ErrorCode::NestedToolFailed.as_str(),
                        )
                    }
                }
            } else if text.len() > max {
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
        // A denied call never ran: the guest can tell it apart by its code.
        Err(e) if e.denied => Settlement::reject_with_code(
            codemode_sandbox::bounded_text(e.message, codemode_sandbox::MAX_ERROR_BYTES),
            ErrorCode::ApprovalDenied.as_str(),
        ),
        // Never re-run: the guest decides (its code says the effect is
        // unknown).
        Err(e) if e.interrupted => Settlement::reject_with_code(
            codemode_sandbox::bounded_text(e.message, codemode_sandbox::MAX_ERROR_BYTES),
            ErrorCode::Interrupted.as_str(),
        ),
        Err(e) => Settlement::reject_with_code(
            format!(
                "tool {tool_id} failed: {}",
                codemode_sandbox::bounded_text(e.message, codemode_sandbox::MAX_ERROR_BYTES)
            ),
            ErrorCode::NestedToolFailed.as_str(),
        ),
    }
}

fn bad_request(message: String) -> Settlement {
    Settlement::reject(message)
}

/// Answers one guest request, or starts the nested call it asks for. The
/// request is parsed (and every cap checked) once, by
/// [`BridgeRequest::parse`]; the handlers below only consult the run.
pub(crate) fn handle_request(
    ctx: &DriveCtx,
    state: &mut RunState,
    request: HostRequest,
    ready: &mut VecDeque<(u32, Settlement)>,
) {
    let HostRequest { id, payload } = request;
    let parsed = BridgeRequest::envelope(payload).and_then(|(method, params)| {
        // Counted once the method is known, even when its params are
        // refused: the telemetry counts what the cell asked for.
        match method {
            Method::Search | Method::ApiSearch => state.info.search_count += 1,
            Method::Describe => state.info.describe_count += 1,
            Method::McpApi | Method::ApiList | Method::ApiRead => state.info.api_count += 1,
            Method::Yield
            | Method::Call
            | Method::McpCall
            | Method::McpRequest
            | Method::McpMissing
            | Method::NsCall
            | Method::Progress
            | Method::HandleText
            | Method::HandleFind
            | Method::HandleJson => {}
        }
        BridgeRequest::parse_params(method, &params, &ctx.host.config)
    });
    let request = match parsed {
        Ok(request) => request,
        Err(refused) => {
            ready.push_back((id, refused.into_settlement()));
            return;
        }
    };
    let reply = match request {
        BridgeRequest::Yield => {
            state.yields.push(id);
            return;
        }
        BridgeRequest::Search { query, limit } => search(state, &query, limit),
        BridgeRequest::Describe { id: tool } => describe(state, &tool),
        BridgeRequest::Call { id: tool, input } => {
            match call(ctx, state, id, (Via::Tools, &tool), input) {
                Some(reply) => reply,
                None => return,
            }
        }
        BridgeRequest::McpCall { id: tool, input } => {
            match call(ctx, state, id, (Via::Mcp, &tool), input) {
                Some(reply) => reply,
                None => return,
            }
        }
        BridgeRequest::McpRequest { server, op, params } => {
            match mcp_request(ctx, state, id, &server, op, params) {
                Some(reply) => reply,
                None => return,
            }
        }
        BridgeRequest::McpApi {
            server,
            tool,
            schema,
        } => mcp_api(state, &server, tool, schema),
        BridgeRequest::NsCall { ns, path, args } => {
            match namespace_call(ctx, state, id, &ns, &path, &args) {
                Some(reply) => reply,
                None => return,
            }
        }
        BridgeRequest::Progress {
            value,
            total,
            message,
        } => {
            state
                .calls
                .progress_slot()
                .report(crate::progress::ProgressUpdate::Cell {
                    value,
                    total,
                    message,
                });
            Settlement::Resolve(Value::Null)
        }
        BridgeRequest::HandleText { id, start, end } => match state.handles.text(id, start, end) {
            Ok(text) => Settlement::Resolve(Value::String(text)),
            Err(message) => bad_request(message),
        },
        BridgeRequest::HandleFind { id, needle, from } => {
            match state.handles.find(id, &needle, from) {
                Ok(at) => Settlement::Resolve(Value::from(at)),
                Err(message) => bad_request(message),
            }
        }
        BridgeRequest::HandleJson { id } => {
            match state
                .handles
                .json(id, ctx.host.options.max_tool_result_bytes)
            {
                Ok(json) => Settlement::ResolveJson(json),
                Err(message) => bad_request(message),
            }
        }
        BridgeRequest::ApiList { prefix } => api_list(state, prefix.as_deref()),
        BridgeRequest::ApiSearch {
            query,
            limit,
            server,
        } => api_search(state, &query, limit, server.as_deref()),
        BridgeRequest::McpMissing { server, tool } => {
            let namespace = state.catalog.mcp();
            let message = match (namespace.server(&server), tool) {
                (Some(view), Some(tool)) => view.unknown_tool_message(&tool, namespace.servers()),
                _ => namespace.unknown_server_message(&server),
            };
            Settlement::reject_with_code(message, ErrorCode::NestedToolFailed.as_str())
        }
        BridgeRequest::ApiRead { path, range } => api_read(state, &path, range),
    };
    ready.push_back((id, reply));
}

fn search(state: &RunState, query: &str, limit: usize) -> Settlement {
    let hits: Vec<Value> = state
        .catalog
        .search(query, limit)
        .into_iter()
        .map(|e| e.compact_json())
        .collect();
    Settlement::Resolve(Value::Array(hits))
}

fn describe(state: &RunState, id: &str) -> Settlement {
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

/// Input bytes the host holds for the calls of one run waiting for a slot:
/// past it, one more call that would wait is refused like one past
/// `maxQueuedToolCalls` (each input may be up to 1 MiB).
pub(crate) const MAX_QUEUED_INPUT_BYTES: usize = 32 << 20;

/// `maxPendingToolCalls` in flight and `maxQueuedToolCalls` (or
/// [`MAX_QUEUED_INPUT_BYTES`]) waiting for a slot: the rejection for one
/// more call of `input_bytes`.
fn over_pending_limit(ctx: &DriveCtx, state: &RunState, input_bytes: usize) -> Option<Settlement> {
    let config = &ctx.host.config;
    let max_pending = config.max_pending_tool_calls as usize;
    let max_queued = config.max_queued_tool_calls as usize;
    let in_flight = state.calls.in_flight();
    let message = if max_queued == 0 && in_flight >= max_pending {
        format!(
            "too many nested tool calls in flight: at most {max_pending} (maxPendingToolCalls) may run at once; await some before starting more"
        )
    } else if in_flight >= max_pending + max_queued {
        format!(
            "too many nested tool calls started: {max_pending} (maxPendingToolCalls) run at once and {max_queued} more (maxQueuedToolCalls) wait for a slot; await some before starting more, or work in batches"
        )
    } else if in_flight >= max_pending
        && state.calls.queued_input_bytes() + input_bytes > MAX_QUEUED_INPUT_BYTES
    {
        format!(
            "too many nested tool calls started: {max_pending} (maxPendingToolCalls) run at once and the inputs of those waiting for a slot pass {} MiB; await some before starting more, or work in batches",
            MAX_QUEUED_INPUT_BYTES >> 20
        )
    } else {
        return None;
    };
    Some(Settlement::reject_with_code(
        message,
        ErrorCode::TooManyPendingToolCalls.as_str(),
    ))
}

/// What asks the executor for one nested call, once the call holds a
/// slot (at once, or after earlier calls finished).
enum Launch {
    Call(Arc<dyn ToolExecutor>, NestedCall),
    Gated(Box<Gate>, NestedCall, Arc<dyn ToolExecutor>),
    Request(
        Option<Arc<dyn ToolHooks>>,
        McpServerCall,
        Arc<dyn ToolExecutor>,
    ),
}

impl Launch {
    fn run(self) -> ToolFuture {
        match self {
            Launch::Call(executor, call) => executor.call(call),
            Launch::Gated(gate, call, executor) => crate::control::gated(*gate, call, executor),
            Launch::Request(None, request, executor) => executor.mcp_request(request),
            Launch::Request(Some(hooks), request, executor) => {
                crate::control::hooked_request(hooks, request, executor)
            }
        }
    }
}

/// Counts and starts one nested call (a tool call, or an MCP resource or
/// prompt request) under `maxPendingToolCalls` (past it, the call waits
/// for a slot, up to `maxQueuedToolCalls`); `start` prepares the request
/// and returns what asks the executor once the call has a slot. `None`
/// when the call is now in flight.
fn start_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    (tool_id, method): (String, &'static str),
    input: Value,
    gate: Option<Arc<GateState>>,
    start: impl FnOnce(&RunState, String, Value) -> Launch,
) -> Option<Settlement> {
    if ctx.limits.cancel.is_cancelled() || ctx.scope.is_aborted() {
        // Nothing new starts after an abort or cancellation.
        return Some(Settlement::reject_with_code(
            "the run was aborted: no more nested calls start",
            ErrorCode::Aborted.as_str(),
        ));
    }
    let input_bytes = json_len(&input);
    if let Some(refused) = over_pending_limit(ctx, state, input_bytes as usize) {
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
        input_bytes,
        gate,
        span: tracing::info_span!(
            target: "codemode::trace",
            "code_mode.nested_call",
            tool_id = %tool_id,
            call_id = %call_id,
            method,
            outcome = tracing::field::Empty,
        ),
        queued: None,
    };
    let launch = start(state, call_id, input);
    let max_pending = ctx.host.config.max_pending_tool_calls as usize;
    state
        .calls
        .start(&ctx.handle, request_id, info, max_pending, move || {
            launch.run()
        })
        .map(|outcome| outcome_settlement(ctx, &mut state.handles, outcome, &tool_id))
}

/// Starts a nested call of a catalog entry (checked by the caller). A
/// call with hooks or one that needs approval goes through the gate
/// ([`crate::control`]) first.
fn start_tool_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    entry: &Arc<CatalogEntry>,
    input: Value,
) -> Option<Settlement> {
    let key = (entry.id.clone(), "call");
    let gated = state.hooks.is_some() || entry.gate.needs_approval();
    let gate_state = gated.then(GateState::new);
    let gate = gate_state.clone();
    start_call(
        ctx,
        state,
        request_id,
        key,
        input,
        gate_state,
        |state, call_id, input| {
            let progress = crate::progress::CallProgress::new(
                state.calls.progress_slot(),
                &call_id,
                &entry.id,
            );
            let call = NestedCall {
                context: Arc::clone(&state.context),
                parent_call_id: state.parent_call_id.clone(),
                call_id,
                tool: Arc::clone(entry),
                input,
                progress,
            };
            let executor = Arc::clone(&state.executor);
            let Some(gate_state) = gate else {
                return Launch::Call(executor, call);
            };
            let recheck = (entry.source == ToolSource::Mcp).then(|| {
                let label = mcp_label(&state.catalog, entry);
                let schema = entry.parameters.clone();
                Box::new(move |input: Value| {
                    crate::catalog::mcp::prepare_input(|| label.clone(), &schema, input)
                }) as Recheck
            });
            let approval = entry
                .gate
                .needs_approval()
                .then(|| gate_approval(ctx, state, &gate_state));
            let gate = Gate {
                state: gate_state,
                hooks: state.hooks.clone(),
                approval,
                recheck,
            };
            Launch::Gated(Box::new(gate), call, executor)
        },
    )
}

/// How a call of `state`'s run whose gate is `gate` is approved: this
/// run's approver, the runtime's registry, the run's scope and owner.
pub(crate) fn gate_approval(
    ctx: &DriveCtx,
    state: &RunState,
    gate: &Arc<GateState>,
) -> GateApproval {
    GateApproval {
        approver: state.approver.clone(),
        registry: Arc::clone(&ctx.host.approvals),
        scope: state.scope.clone(),
        owner_key: Arc::clone(&state.owner_key),
        run: Arc::clone(&state.run_tag),
        state: Arc::clone(gate),
        wake: state.calls.sender(),
    }
}

/// `<Namespace>.<path>(...args)`: the host resolves the namespace id and
/// path the guest sent against this run's namespaces (a forged one is
/// refused), maps the arguments to the input, and runs the catalog tool
/// like `tools.call`; `None` when in flight.
fn namespace_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    ns: &str,
    path: &str,
    args: &[Value],
) -> Option<Settlement> {
    let callable = state
        .namespaces
        .as_ref()
        .and_then(|namespaces| namespaces.resolve(ns, path))
        .cloned();
    let Some(callable) = callable else {
        return nested_failure(format!(
            "no namespace function `{}` in namespace `{}` of this run",
            codemode_sandbox::bounded_text(path.to_owned(), 128),
            codemode_sandbox::bounded_text(ns.to_owned(), 128),
        ));
    };
    let input = callable.input(args);
    if !input.is_object() {
        return nested_failure(format!(
            "{}: its input must be an object, got {}",
            callable.label,
            crate::catalog::mcp::json_kind(&input)
        ));
    }
    start_tool_call(ctx, state, request_id, &callable.entry, input)
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

/// How the guest named a catalog tool.
#[derive(Clone, Copy)]
enum Via {
    /// `tools.call(id, input)` (or a convenience function).
    Tools,
    /// `MCP.<server>.<tool>(input)`: resolved by the guest to the exact MCP
    /// catalog id; the input is checked against the schema's top level.
    Mcp,
}

/// A call of catalog tool `id`; `None` when the call is now in flight.
fn call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    (via, id): (Via, &str),
    input: Value,
) -> Option<Settlement> {
    let entry = match via {
        Via::Tools => match state.catalog.callable(id) {
            Ok(entry) => Arc::clone(entry),
            Err(message) => return nested_failure(format!("tools.call: {message}")),
        },
        Via::Mcp => match state.catalog.get(id) {
            Some(entry) if entry.source == ToolSource::Mcp => Arc::clone(entry),
            _ => {
                return nested_failure(format!(
                    "no MCP tool \"{id}\" in this run; see API.list(\"mcp\") for the servers and tools"
                ));
            }
        },
    };
    let input = match via {
        Via::Tools => input,
        Via::Mcp => match crate::catalog::mcp::prepare_input(
            || mcp_label(&state.catalog, &entry),
            &entry.parameters,
            input,
        ) {
            Ok(input) => input,
            Err(message) => return nested_failure(message),
        },
    };
    start_tool_call(ctx, state, request_id, &entry, input)
}

/// `MCP.<server>.resources.*` / `.prompts.*`; `None` when in flight.
/// Reports, in this order: an unknown server, an unknown operation, one the
/// server does not offer, then a bad input.
fn mcp_request(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    server_name: &str,
    op: Result<McpOp, String>,
    params: Result<Map<String, Value>, McpInputError>,
) -> Option<Settlement> {
    let Some(server) = state.catalog.mcp().server(server_name) else {
        return nested_failure(format!(
            "no MCP server `{server_name}` in this run; see API.list(\"mcp\")"
        ));
    };
    let op = match op {
        Ok(op) => op,
        Err(unknown) => return nested_failure(format!("unknown MCP request `{unknown}`")),
    };
    let offered = if op.is_resources() {
        server.info.resources
    } else {
        server.info.prompts
    };
    let label = format!("MCP.{}.{}", server.js_name, op.as_str());
    if !offered {
        return nested_failure(format!(
            "{label}: MCP server \"{}\" offers no {}",
            server.info.name,
            if op.is_resources() {
                "resources"
            } else {
                "prompts"
            }
        ));
    }
    let checked = match params {
        Ok(checked) => checked,
        Err(e) => return nested_failure(e.message(&label)),
    };
    let method = op.method();
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
        None,
        |state, call_id, params| {
            let request = McpServerCall {
                context: Arc::clone(&state.context),
                parent_call_id: state.parent_call_id.clone(),
                call_id,
                server: server_name,
                method,
                params,
            };
            Launch::Request(state.hooks.clone(), request, Arc::clone(&state.executor))
        },
    )
}

/// `MCP.<server>.$api(toolName?, { schema? })`, answered by the host.
fn mcp_api(
    state: &RunState,
    server_name: &str,
    tool: Result<Option<String>, McpApiError>,
    schema: Result<bool, McpApiError>,
) -> Settlement {
    let Some(server) = state.catalog.mcp().server(server_name) else {
        return bad_request(format!("no MCP server `{server_name}` in this run"));
    };
    let tool = match tool {
        Ok(None) => None,
        Ok(Some(name)) => match server.tool(&name) {
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
        Err(e) => return bad_request(e.message(&server.js_name)),
    };
    let schema = match schema {
        Ok(schema) => schema,
        Err(e) => return bad_request(e.message(&server.js_name)),
    };
    Settlement::Resolve(crate::catalog::declarations::api_header(
        server, tool, schema,
    ))
}

/// `API.search(query, { limit?, server? })`: ranked MCP tools, each with
/// what it takes to call it.
fn api_search(state: &RunState, query: &str, limit: usize, server: Option<&str>) -> Settlement {
    match state.catalog.search_mcp(query, limit, server) {
        Ok(hits) => Settlement::Resolve(Value::Array(
            hits.into_iter()
                .map(|(server, tool)| {
                    json!({
                        "server": server.js_name,
                        "tool": tool.entry.name,
                        "path": format!("MCP.{}.{}", server.js_name, tool.js_name),
                        "description": crate::catalog::declarations::summary_line(&tool.entry.description, 200),
                        "signature": crate::catalog::declarations::short_signature(tool),
                    })
                })
                .collect(),
        )),
        Err(message) => bad_request(format!("API.search: {message}")),
    }
}

fn api_list(state: &RunState, prefix: Option<&str>) -> Settlement {
    match state.catalog.api_files().list(prefix) {
        Ok(files) => Settlement::Resolve(Value::Array(
            files.iter().map(|f| f.metadata_json()).collect(),
        )),
        Err(e) => bad_request(e.to_string()),
    }
}

/// `API.read(path, options?)`: an unknown path is reported before bad
/// options.
fn api_read(
    state: &RunState,
    path: &str,
    range: Result<Option<(usize, usize)>, Refusal>,
) -> Settlement {
    let files = state.catalog.api_files();
    let text = match files.read(path) {
        Ok(text) => text,
        Err(e) => return bad_request(e.to_string()),
    };
    let (offset, length) = match range {
        Ok(Some(range)) => range,
        Ok(None) => {
            if text.len() > MAX_API_READ_BYTES {
                return bad_request(format!(
                    "API.read: \"{path}\" is {} bytes, more than one read returns ({MAX_API_READ_BYTES}); read it in pieces with API.read(path, {{ offset, length }}) (length at most {MAX_API_READ_BYTES}), or one tool's types with MCP.<server>.$api(\"tool\")",
                    text.len()
                ));
            }
            return Settlement::Resolve(Value::String(text.to_owned()));
        }
        Err(refused) => return refused.into_settlement(),
    };
    match files.read_range(path, offset, length) {
        Ok(piece) => Settlement::Resolve(Value::String(piece.to_owned())),
        Err(e) => bad_request(e.to_string()),
    }
}

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
    use crate::executor::{ToolExecutor, ToolFuture};
    use crate::runtime::CodeModeRuntime;
    use crate::session::CodeModeSession;

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
        let env = f.session.env(Default::default());
        let ctx = DriveCtx {
            progress: None,
            limits: Default::default(),
            deadline: Instant::now() + Duration::from_secs(10),
            await_idle: false,
            handle: f._tokio.handle().clone(),
            scope: Arc::clone(&env.scope),
            host: Arc::clone(&env.host),
        };
        let mut state = env.new_run("exec_1", Language::JavaScript);
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
