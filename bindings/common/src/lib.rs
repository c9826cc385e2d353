//! What the Node and Python packages share. A package's native module is
//! a thin layer over this crate: it turns its language's functions into a
//! [`Host`] (one way to send a request to the language's side) and calls
//! [`open`]; the language's side answers each request by [`complete`].
//!
//! The wire between the two is JSON text, one request per tool call,
//! approval or hook, each with a `token` and a `kind`:
//!
//! | kind | request | answer |
//! |---|---|---|
//! | `tool` | `{ tool, toolId, input, callId, parentCallId, context }` | `{ ok: value }`, `{}` (no value), or `{ error: message }` |
//! | `approve` | `{ callId, parentCallId, toolId, tool, reason, inputSummary, context }` | `{ decision: "approve" \| "deny" \| "later", reason? }` |
//! | `hook` | the [`ToolCallEvent`] | `{ allow: true }`, `{ block: reason }` or `{ rewrite: input }` |
//!
//! Anything else answered, a request that cannot be sent, or a session
//! closed before the answer fails closed: the tool call fails, the
//! approval is denied, the hook blocks.

mod answers;
mod options;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use codemode::tools_file::ToolsFile;
use codemode_mcp::config::parse_config_for_agent;
use codemode_mcp::gateway::local::{LocalSession, with_upstream_tools};
use codemode_mcp::{Gateway, GatewayError, GatewayOptions};
use codemode_runtime::{
    ApprovalFuture, ApprovalRequest, Approver, CallOptions, CodeModeSession, HookFuture,
    NestedCall, ProgressSink, ProgressUpdate, ToolCallError, ToolCallEvent, ToolExecutor,
    ToolFuture, ToolHooks, ToolPolicy,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub use crate::answers::{approval_decision, hook_decision, progress_event, tool_outcome};
pub use crate::options::Options;

/// Why a session could not open, fit to show the user.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The options object (its field is named).
    #[error("{0}")]
    Options(String),
    /// The config document (`tools.codeMode`, `mcpServers`).
    #[error("{0}")]
    Config(String),
    /// The sandbox could not start (`runtime_unavailable`).
    #[error("runtime_unavailable: {0}")]
    Runtime(String),
    /// The gateway (a store that cannot open, ...).
    #[error("{0}")]
    Gateway(String),
    /// The tools do not make a catalog (a duplicate id, a bad name).
    #[error("tools: {0}")]
    Tools(String),
    /// The session's surface is not exactly `exec` and `wait`.
    #[error("{0}")]
    Surface(String),
}

/// The language's side of a session.
pub trait Host: Send + Sync + 'static {
    /// Sends one request (JSON with `token` and `kind`); the answer comes
    /// back by [`complete`]. `false`: it could not be sent (the session
    /// is closing).
    fn send(&self, request: String) -> bool;

    /// Passes one progress event (JSON) on, without waiting.
    fn progress(&self, event: String);
}

/// Requests the language's side has not answered yet, by token. A
/// request's future removes its entry when it ends or is dropped
/// (cancelled), so a late answer finds nothing.
static PENDING: LazyLock<Mutex<HashMap<u64, oneshot::Sender<String>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static TOKENS: AtomicU64 = AtomicU64::new(0);

fn pending() -> std::sync::MutexGuard<'static, HashMap<u64, oneshot::Sender<String>>> {
    PENDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands the answer of request `token` to whoever waits for it; `false`
/// when nobody does (cancelled, answered already, unknown token).
pub fn complete(token: u64, answer: String) -> bool {
    let sender = pending().remove(&token);
    sender.is_some_and(|s| s.send(answer).is_ok())
}

/// Removes a request's entry when its future ends or is dropped.
struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        pending().remove(&self.0);
    }
}

/// Sends `request` (an object) with a fresh token and `kind`, and waits
/// for its answer text. `Err`: why there is none.
async fn ask(host: &dyn Host, kind: &str, mut request: Value) -> Result<String, String> {
    let token = TOKENS.fetch_add(1, Ordering::Relaxed);
    let (sender, receiver) = oneshot::channel();
    pending().insert(token, sender);
    let registered = Registered(token);
    request["token"] = json!(token);
    request["kind"] = json!(kind);
    if !host.send(request.to_string()) {
        return Err("the session is closing".into());
    }
    let answer = receiver
        .await
        .map_err(|_| "the session was closed before it answered".to_owned());
    drop(registered);
    answer
}

/// The user's tools in the host language.
struct HostTools {
    host: Arc<dyn Host>,
}

impl ToolExecutor for HostTools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let host = Arc::clone(&self.host);
        let request = json!({
            "tool": call.tool.name,
            "toolId": call.tool.id,
            "input": call.input,
            "callId": call.call_id,
            "parentCallId": call.parent_call_id,
            "context": *call.context,
        });
        // The first poll (on the thread that starts the call) sends it.
        Box::pin(async move {
            let text = ask(host.as_ref(), "tool", request)
                .await
                .map_err(|why| ToolCallError::new(format!("the tool could not answer: {why}")))?;
            tool_outcome(&text)
        })
    }
}

/// Approvals decided in the host language.
struct HostApprover {
    host: Arc<dyn Host>,
}

impl Approver for HostApprover {
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture {
        let host = Arc::clone(&self.host);
        let reason = request
            .tool
            .gate
            .approval
            .as_ref()
            .map(|r| r.describe())
            .unwrap_or_default();
        let request = json!({
            "callId": request.call_id,
            "parentCallId": request.parent_call_id,
            "toolId": request.tool.id,
            "tool": request.tool.name,
            "reason": reason,
            "inputSummary": request.input_summary,
            "context": *request.context,
        });
        Box::pin(async move {
            let answer = ask(host.as_ref(), "approve", request).await;
            approval_decision(answer)
        })
    }
}

/// `beforeToolCall` in the host language.
struct HostHooks {
    host: Arc<dyn Host>,
}

impl ToolHooks for HostHooks {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        let host = Arc::clone(&self.host);
        let request = serde_json::to_value(&event).unwrap_or_else(|_| json!({}));
        Box::pin(async move { hook_decision(ask(host.as_ref(), "hook", request).await) })
    }
}

/// Progress passed to the host language.
struct HostProgress {
    host: Arc<dyn Host>,
}

impl ProgressSink for HostProgress {
    fn report(&self, update: ProgressUpdate) {
        self.host.progress(progress_event(update).to_string());
    }
}

/// Scripted tools (answered by the runtime, no host code) by id; the rest
/// to the host.
struct Routed {
    scripted_ids: HashSet<String>,
    scripted: Arc<dyn ToolExecutor>,
    host: Arc<dyn ToolExecutor>,
}

impl ToolExecutor for Routed {
    fn call(&self, call: NestedCall) -> ToolFuture {
        if self.scripted_ids.contains(&call.tool.id) {
            self.scripted.call(call)
        } else {
            self.host.call(call)
        }
    }
}

/// An open session: a [`Gateway`] (its upstream servers, run store,
/// runtime) and one local session of it.
pub struct Opened {
    gateway: Gateway,
    session: CodeModeSession,
    diagnostics: Vec<String>,
    calls: AtomicU64,
}

/// Which callbacks the host has besides its tools.
#[derive(Debug, Clone, Copy, Default)]
pub struct Callbacks {
    /// It decides approvals (else calls wait for [`Opened::approve`]).
    pub approve: bool,
    /// It has a `beforeToolCall` hook.
    pub hook: bool,
}

/// Opens a session: parses the options and the config document, starts
/// the MCP servers (waiting until each answered or failed) and joins their
/// tools with the host's and the scripted ones. Call it inside a tokio
/// runtime; the session's calls run on it.
///
/// # Errors
/// [`OpenError`] naming the option, config key or part that is wrong.
pub async fn open(
    options: &str,
    host: Arc<dyn Host>,
    callbacks: Callbacks,
) -> Result<Opened, OpenError> {
    let Options {
        document,
        mut tools,
        scripted,
        store,
        context,
        owner,
    } = Options::parse(options)?;
    let environment = |name: &str| std::env::var(name).ok();
    let (mut config, diagnostics) =
        parse_config_for_agent(&document, &environment, None).map_err(|problems| {
            OpenError::Config(
                problems
                    .errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
    // The in-process API runs cells whatever `enabled` says: calling exec
    // is the opt-in.
    config.code_mode.enabled = true;
    let policy = config.tool_policy(&ToolPolicy::default());
    let gateway = Gateway::start(
        config,
        GatewayOptions {
            store: Some(store),
            ..GatewayOptions::default()
        },
    )
    .map_err(|e| match e {
        GatewayError::Runtime(e) => OpenError::Runtime(e.to_string()),
        other => OpenError::Gateway(other.to_string()),
    })?;
    gateway.wait_ready().await;
    let mut diagnostics: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
    for server in gateway.upstreams().servers() {
        if let Some(reason) = server.down_reason() {
            diagnostics.push(reason);
        }
    }
    let executor = routed(&host, &mut tools, &scripted);
    let joined = with_upstream_tools(gateway.upstreams(), tools, executor, &policy)
        .map_err(|e| OpenError::Tools(e.to_string()))?;
    let approver = callbacks.approve.then(|| {
        Arc::new(HostApprover {
            host: Arc::clone(&host),
        }) as Arc<dyn Approver>
    });
    let mut session = gateway
        .local_session(LocalSession {
            context,
            tools: Some(joined),
            approver,
            owner: Some(owner),
        })
        .map_err(|e| OpenError::Surface(e.to_string()))?;
    if callbacks.hook {
        session = session.with_hooks(Arc::new(HostHooks {
            host: Arc::clone(&host),
        }));
    }
    Ok(Opened {
        gateway,
        session,
        diagnostics,
        calls: AtomicU64::new(0),
    })
}

/// The host's tools and the scripted ones behind one executor; the
/// scripted definitions join `tools`.
fn routed(
    host: &Arc<dyn Host>,
    tools: &mut Vec<codemode_runtime::ToolDefinition>,
    scripted: &ToolsFile,
) -> Arc<dyn ToolExecutor> {
    let scripted_ids = scripted
        .definitions()
        .iter()
        .filter_map(|d| d.id().ok())
        .collect();
    tools.extend(scripted.definitions());
    Arc::new(Routed {
        scripted_ids,
        scripted: scripted.executor(),
        host: Arc::new(HostTools {
            host: Arc::clone(host),
        }),
    })
}

/// Which of `exec` and `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Runs a cell.
    Exec,
    /// Resumes a waiting run.
    Wait,
}

impl Opened {
    /// Runs `exec` or `wait` with its JSON input; the result union as
    /// JSON. `call_id`: the model's tool-call id (default: generated).
    /// `progress`: where this call's progress goes.
    ///
    /// # Errors
    /// The input is not JSON (the result union covers everything else).
    pub async fn call(
        &self,
        control: Control,
        input: &str,
        call_id: Option<String>,
        progress: Option<Arc<dyn Host>>,
    ) -> Result<String, String> {
        let input: Value = serde_json::from_str(input).map_err(|e| format!("input: {e}"))?;
        let kind = match control {
            Control::Exec => "exec",
            Control::Wait => "wait",
        };
        let call_id = call_id
            .unwrap_or_else(|| format!("{kind}_{}", self.calls.fetch_add(1, Ordering::Relaxed)));
        let options = match progress {
            Some(host) => CallOptions::default().with_progress(Arc::new(HostProgress { host })),
            None => CallOptions::default(),
        };
        let result = match control {
            Control::Exec => self.session.exec_call(&call_id, &input, options).await,
            Control::Wait => self.session.wait_call(&call_id, &input, options).await,
        };
        serde_json::to_string(&result).map_err(|e| e.to_string())
    }

    /// The model-visible tools, `exec` and `wait`: `[{ name, description,
    /// inputSchema }]` as JSON.
    pub fn surface(&self) -> String {
        let tools: Vec<Value> = self
            .session
            .model_tools()
            .into_iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "inputSchema": t.input_schema }))
            .collect();
        Value::Array(tools).to_string()
    }

    /// The hidden catalog's ids, for the embedder (never the model).
    pub fn catalog_ids(&self) -> Vec<String> {
        self.session
            .catalog()
            .entries()
            .iter()
            .map(|e| e.id.clone())
            .collect()
    }

    /// Config warnings and MCP servers that did not start.
    pub fn diagnostics(&self) -> Vec<String> {
        self.diagnostics.clone()
    }

    /// Calls awaiting approval, as JSON.
    pub fn pending_approvals(&self) -> String {
        serde_json::to_string(&self.session.pending_approvals()).unwrap_or_else(|_| "[]".into())
    }

    /// Approves a waiting call: it starts now.
    ///
    /// # Errors
    /// Why it cannot be decided (unknown, decided already, another scope).
    pub fn approve(&self, run_id: &str, call_id: &str) -> Result<(), String> {
        self.session
            .approve(run_id, call_id)
            .map_err(|e| e.to_string())
    }

    /// Denies a waiting call: the guest sees `approval_denied`.
    ///
    /// # Errors
    /// As [`Opened::approve`].
    pub fn deny(&self, run_id: &str, call_id: &str, reason: &str) -> Result<(), String> {
        self.session
            .deny(run_id, call_id, reason)
            .map_err(|e| e.to_string())
    }

    /// Ends the session: running cells are aborted, MCP servers stopped.
    pub fn close(&self) {
        self.session.close();
        self.gateway.shutdown();
    }
}
