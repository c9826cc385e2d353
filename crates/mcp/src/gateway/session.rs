//! One MCP client session ([`GatewaySession`]): the server handler that
//! lists exactly `exec` and `wait`, runs them in the runtime session, and
//! answers tasks.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use codemode_runtime::{CodeModeResult, CodeModeSession};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{INSTRUCTIONS, Shared, input_required};
use crate::auth::Principal;
use crate::config::ResultForm;

/// Session ids only need to be unique and unguessable enough within this
/// process: std's randomly keyed hasher gives 64 fresh bits.
pub(super) fn session_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// One MCP client session of the gateway.
pub struct GatewaySession {
    pub(super) shared: Arc<Shared>,
    pub(super) id: String,
    /// Shared with the tasks this session started (they drive its runs
    /// after the request, or the whole session, is gone).
    pub(super) session: Arc<CodeModeSession>,
    /// The client, for approval requests (set at its first tool call).
    pub(super) peer: Arc<OnceLock<Peer<RoleServer>>>,
    /// Asks the client about calls needing approval.
    pub(super) approver: Arc<crate::approvals::ClientApprover>,
    /// The upstream catalog version the session's catalog was built from.
    /// A lock, not an atomic: a concurrent exec must not see the new
    /// version before the new catalog is in place (it would run with the
    /// old one — on a session opened before the servers started, none).
    pub(super) catalog_version: Mutex<u64>,
    /// Cancelled when the session ends: stops its list-changed watcher.
    pub(super) ended: CancellationToken,
}

impl Drop for GatewaySession {
    /// The client is gone: its running cells stop now (their nested calls
    /// are cancelled) instead of running to their timeouts.
    fn drop(&mut self) {
        self.ended.cancel();
        self.shared.upstreams.clients().remove(&self.id);
        // Runs owned by a principal or by their id outlive the session; a
        // task still driving one of its runs keeps the rest alive.
        if Arc::strong_count(&self.session) == 1 {
            self.session.close();
        }
        self.shared.open_sessions.fetch_sub(1, Ordering::SeqCst);
        info!(session = %self.id, "MCP client session ended");
    }
}

impl GatewaySession {
    /// Brings the session's catalog up to date with the upstream servers
    /// (waiting for servers still starting).
    async fn refresh_catalog(&self) {
        self.shared.upstreams.started().await;
        let mut held = self
            .catalog_version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The version before the catalog (a newer catalog under an older
        // version only costs one more refresh).
        let version = self.shared.upstreams.version();
        if *held != version {
            self.session
                .replace_catalog(self.shared.upstreams.catalog());
            *held = version;
        }
    }

    fn model_tools(&self) -> Vec<Tool> {
        // With structured results the tools say what they return.
        let output_schema = match self.shared.result_form {
            ResultForm::Text => None,
            ResultForm::Structured | ResultForm::Both => match codemode_runtime::result_schema() {
                Value::Object(map) => Some(Arc::new(map)),
                _ => None,
            },
        };
        self.session
            .model_tools()
            .into_iter()
            .map(|t| {
                let schema = match t.input_schema {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let mut tool = Tool::new(t.name, t.description, Arc::new(schema));
                tool.output_schema = output_schema.clone();
                tool
            })
            .collect()
    }

    /// The result union as an MCP tool result, once (`results.form`): the
    /// model's view of the result (short telemetry) as `structuredContent`
    /// with a one-paragraph text, or as JSON text only, or both in full;
    /// `isError` when it failed; the full telemetry (numbers rounded) in
    /// `_meta["codemode/telemetry"]` for operators and tools, not the model.
    fn tool_result(&self, result: &CodeModeResult) -> CallToolResult {
        tool_result(self.shared.result_form, result)
    }
}

/// [`GatewaySession::tool_result`] for a given `results.form`.
fn tool_result(form: ResultForm, result: &CodeModeResult) -> CallToolResult {
    let model = result.to_model_json();
    let json_text = || serde_json::to_string(&model).unwrap_or_else(|_| model.to_string());
    let (text, structured) = match form {
        ResultForm::Structured => (result.summary_text(), Some(model.clone())),
        ResultForm::Text => (json_text(), None),
        ResultForm::Both => (json_text(), Some(model.clone())),
    };
    let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
    out.is_error = Some(matches!(result, CodeModeResult::Failed { .. }));
    out.structured_content = structured;
    let mut meta = rmcp::model::MetaObject::new();
    if let Ok(telemetry) = serde_json::to_value(result.telemetry()) {
        meta.insert("codemode/telemetry".into(), telemetry);
    }
    out.meta = Some(meta);
    out
}

impl ServerHandler for GatewaySession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("codemode", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// Every version the SDK knows: up to 2025-11-25 with a session
    /// (`initialize`), 2026-07-28 stateless (a new handler per request; its
    /// runs belong to the principal, or to whoever holds the run id).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let principal = principal_of(&context);
        self.shared
            .tasks
            .get(&request.task_id, principal.as_ref().map(|p| p.0.as_str()))
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = principal_of(&context);
        self.shared
            .tasks
            .cancel(&request.task_id, principal.as_ref().map(|p| p.0.as_str()))
    }

    /// Watches the upstream servers for this session: when what the exec
    /// description says changes (servers, tool counts), the client is told
    /// `notifications/tools/list_changed`.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let peer = context.peer;
        let upstreams = Arc::clone(&self.shared.upstreams);
        let runtime = self.shared.runtime.clone();
        let ended = self.ended.clone();
        let mut versions = upstreams.watch_version();
        let described = move || {
            let catalog = upstreams.catalog();
            codemode_runtime::model_tools(runtime.config(), &catalog)
                .into_iter()
                .map(|t| t.description)
                .collect::<Vec<_>>()
        };
        let mut last = described();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = ended.cancelled() => break,
                    changed = versions.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
                let now = described();
                if now != last {
                    last = now;
                    if peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.refresh_catalog().await;
        let result = ListToolsResult::with_all_items(self.model_tools());
        // Fail closed: the answer must be exactly the runtime's exec and
        // wait (this also feeds the OPENCLAW_DEBUG_MODEL_* logs).
        let payload = serde_json::to_value(&result).unwrap_or(Value::Null);
        if let Err(e) = self
            .session
            .surface()
            .check_payload(codemode_runtime::PayloadShape::McpToolsList, &payload)
        {
            tracing::error!(error = %e, "tools/list refused");
            return Err(ErrorData::internal_error(e.to_string(), None));
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let call_id = format!("{}:{}", self.id, context.id);
        // One peer per client session: approvals are asked through it.
        let _ = self.peer.set(context.peer.clone());
        // `notifications/cancelled` (or the session closing) cancels the
        // request's token. The exec blocks this task while its VM runs, so
        // the watcher runs beside it.
        let watcher = {
            let canceller = self.session.canceller();
            let call_id = call_id.clone();
            let ct = context.ct.clone();
            tokio::spawn(async move {
                ct.cancelled().await;
                info!(call = %call_id, "client cancelled the call");
                canceller.cancel_call(&call_id);
            })
        };
        let _stop_watcher = AbortOnDrop(watcher);
        let principal = principal_of(&context);
        let holder = holder_of(&context, principal.as_ref());
        // A stateless request (2026-07-28: no session) without
        // authentication: the run id is the capability to resume the run.
        // Each such request is a fresh session, so its runs count against
        // its client's address: one client cannot take every slot.
        let stateless = context
            .meta
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        if stateless && principal.is_none() {
            self.session.resume_runs_by_id();
            self.session.bind_owner(&holder, STATELESS_RUNS_PER_ADDRESS);
            tracing::debug!(%holder, "stateless request without a principal: its runs count against its address");
        }
        // Without a session the client cannot be sent a request of ours:
        // a client that can answer forms is asked in the result instead.
        let modes = if stateless {
            elicitation_modes(context.client_capabilities())
        } else {
            std::collections::HashSet::new()
        };
        let asks_in_result = !modes.is_empty();
        if modes.contains(&rmcp::service::ElicitationMode::Form) {
            self.approver.ask_in_results();
        }
        let answered = request.request_state.take();
        let answers = request.input_responses.take();
        let wants_task = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        // A metrics label from a fixed set: the client names the tool.
        let tool = match request.name.as_ref() {
            "exec" => "exec",
            "wait" => "wait",
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool `{}`: this server has exactly two tools, exec and wait",
                        other.chars().take(64).collect::<String>()
                    ),
                    None,
                ));
            }
        };
        let _running = match self.admit(principal.as_ref()) {
            Ok(running) => running,
            Err(refused) => {
                crate::metrics::record_call(tool, &refused, 0.0);
                return Ok(self.tool_result(&refused).into());
            }
        };
        let started = std::time::Instant::now();
        // The request's trace span, continuing the client's W3C
        // `traceparent` when it sent one; the exec/wait span is its child.
        let span = tracing::info_span!(target: "codemode::trace", "mcp.tools_call", tool);
        #[cfg(feature = "otel")]
        if let Some(parts) = context.extensions.get::<http::request::Parts>() {
            let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
                propagator.extract(&Headers(&parts.headers))
            });
            let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
        }
        // A progress token asks for notifications/progress while it runs.
        let (progress, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (sink, forwarder) =
                    crate::progress::ClientProgress::start(context.peer.clone(), token);
                (
                    Some(sink as Arc<dyn codemode_runtime::ProgressSink>),
                    Some(forwarder),
                )
            }
            None => (None, None),
        };
        let result = tracing::Instrument::instrument(
            async {
                let mut options = codemode_runtime::CallOptions::default();
                if let Some(sink) = progress {
                    options = options.with_progress(sink);
                }
                if asks_in_result || answered.is_some() {
                    let work = Work {
                        tool,
                        call_id: &call_id,
                        input,
                        options,
                    };
                    return self.converse(work, modes, answered, answers).await;
                }
                // `wait` too: a run rebuilt from the store after a restart
                // takes the session's catalog, which must hold the servers
                // once they started.
                self.refresh_catalog().await;
                Ok(if tool == "exec" {
                    self.session.exec_call(&call_id, &input, options).await
                } else {
                    self.session.wait_call(&call_id, &input, options).await
                })
            },
            span,
        )
        .await;
        if let Some(forwarder) = forwarder {
            forwarder.finish().await;
        }
        let result = match result {
            Ok(result) => result,
            Err(asked) => return Ok(CallToolResponse::InputRequired(asked)),
        };
        crate::metrics::record_call(tool, &result, started.elapsed().as_secs_f64());
        if wants_task && let CodeModeResult::Waiting { run_id, .. } = &result {
            let form = self.shared.result_form;
            let ttl =
                std::time::Duration::from_secs(self.shared.runtime.config().snapshot_ttl_seconds);
            if let Some(task) = self.shared.tasks.start(
                run_id,
                &result,
                crate::tasks::Requester {
                    admit: {
                        let shared = Arc::clone(&self.shared);
                        let principal = principal.as_ref().map(|p| p.0.clone());
                        Arc::new(move || match &principal {
                            Some(p) => super::admission::count_running(&shared, p)
                                .ok()
                                .map(|running| Box::new(running) as Box<dyn Send>),
                            None => Some(Box::new(()) as Box<dyn Send>),
                        })
                    },
                    principal: principal.map(|p| p.0),
                    holder,
                },
                Arc::clone(&self.session),
                ttl,
                move |r| tool_result(form, r),
            ) {
                info!(task = %run_id, "exec/wait answered as a task");
                return Ok(CallToolResponse::Task(task));
            }
        }
        Ok(self.tool_result(&result).into())
    }
}

/// One exec or wait call to run.
struct Work<'a> {
    tool: &'static str,
    call_id: &'a str,
    input: Value,
    options: codemode_runtime::CallOptions,
}

impl GatewaySession {
    /// An exec or wait of a client asked in results (a stateless request
    /// that declared elicitation), or the same request again with the
    /// answers to the questions it got (`requestState`): the result, or
    /// the next questions (`input_required`, see `input_required`).
    async fn converse(
        &self,
        work: Work<'_>,
        modes: std::collections::HashSet<rmcp::service::ElicitationMode>,
        answered: Option<String>,
        answers: Option<rmcp::model::InputResponses>,
    ) -> Result<CodeModeResult, rmcp::model::InputRequiredResult> {
        let refused = |message: String| {
            Ok(CodeModeResult::failure(
                codemode_runtime::ErrorCode::InvalidInput,
                message,
                codemode_runtime::Telemetry::default(),
            ))
        };
        self.refresh_catalog().await;
        let questions = || {
            self.shared
                .upstreams
                .clients()
                .ask_in_results(&self.id, modes.clone())
        };
        let conversation = match answered.as_deref() {
            None => {
                let running = self.spawn(work.tool, work.call_id, work.input, work.options);
                input_required::Conversation::start(running, questions(), None)
            }
            Some(state) => match self.shared.parked.take(state) {
                Some(Ok(mut parked)) => {
                    parked.answer(answers.as_ref());
                    parked
                }
                Some(Err(message)) => return refused(message),
                // Answers to approval questions: decided, the run goes on.
                None => {
                    match input_required::answer(&self.session, state, answers.as_ref()).await {
                        Ok(earlier) => {
                            let run = serde_json::json!({ "runId": earlier.run_id() });
                            let running = self.spawn("wait", work.call_id, run, work.options);
                            input_required::Conversation::start(running, questions(), Some(earlier))
                        }
                        Err(message) => return refused(message),
                    }
                }
            },
        };
        match conversation.next(&self.shared.parked).await {
            input_required::Turn::Ask(asked) => Err(asked),
            input_required::Turn::Done(result) => {
                match input_required::questions(&self.session, &result) {
                    Some(asked) => Err(asked),
                    None => Ok(result),
                }
            }
        }
    }

    /// Runs an exec or wait in its own task (it may outlive this request
    /// while its client answers a question).
    fn spawn(
        &self,
        tool: &str,
        call_id: &str,
        input: Value,
        options: codemode_runtime::CallOptions,
    ) -> tokio::task::JoinHandle<CodeModeResult> {
        let session = Arc::clone(&self.session);
        let call_id = call_id.to_owned();
        let exec = tool == "exec";
        let span = tracing::Span::current();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                if exec {
                    session.exec_call(&call_id, &input, options).await
                } else {
                    session.wait_call(&call_id, &input, options).await
                }
            },
            span,
        ))
    }
}

/// The elicitation modes a stateless request's client declared.
fn elicitation_modes(
    capabilities: Option<rmcp::model::ClientCapabilities>,
) -> std::collections::HashSet<rmcp::service::ElicitationMode> {
    use rmcp::service::ElicitationMode;
    let mut modes = std::collections::HashSet::new();
    if let Some(elicitation) = capabilities.and_then(|c| c.elicitation) {
        // No mode named: form, as the specification says.
        if elicitation.form.is_some() || elicitation.url.is_none() {
            modes.insert(ElicitationMode::Form);
        }
        if elicitation.url.is_some() {
            modes.insert(ElicitationMode::Url);
        }
    }
    modes
}

/// The authenticated principal of an HTTP request, if any.
/// Waiting runs that stateless unauthenticated requests of one client
/// address may hold together (a session's own share).
const STATELESS_RUNS_PER_ADDRESS: usize = 256;

/// Who a request counts against for process-wide tables: its principal,
/// else the client's address (HTTP), else the one stdio client.
fn holder_of(context: &RequestContext<RoleServer>, principal: Option<&Principal>) -> String {
    if let Some(principal) = principal {
        return format!("principal:{}", principal.0);
    }
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| {
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        })
        .map_or_else(
            || "stdio".to_owned(),
            |info| format!("addr:{}", info.0.ip()),
        )
}

fn principal_of(context: &RequestContext<RoleServer>) -> Option<Principal> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
}

/// HTTP headers as an OpenTelemetry carrier (for `traceparent`).
#[cfg(feature = "otel")]
struct Headers<'a>(&'a http::HeaderMap);

#[cfg(feature = "otel")]
impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Aborts a helper task when the request it watches is done.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
