//! What an embedder plugs in and what a nested call carries: the run's
//! context and scope, the executor trait, its calls and errors. The bottom
//! of the run machinery: it knows catalog entries, nothing that runs.

pub(crate) mod live;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::entry::CatalogEntry;
use crate::catalog::mcp::McpMethod;

/// Who and where a run is: carried into every nested call, and the scope
/// that suspended runs are bound to (a `wait` from another agent, session
/// or run is refused).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunContext {
    /// The active agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The session key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The agent run this session serves (the host's id for one run of the
    /// agent: one [`CodeModeSession`]). Not the `runId` of a waiting code
    /// mode run ([`crate::CodeModeResult::Waiting`]), which names one
    /// suspended exec inside it. Serialized as `runId` (the contract's name).
    #[serde(default, rename = "runId", skip_serializing_if = "Option::is_none")]
    pub agent_run_id: Option<String>,
    /// The sender, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// The channel, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

/// The part of a [`RunContext`] that scopes runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Scope {
    agent_id: Option<String>,
    session_id: Option<String>,
    session_key: Option<String>,
    agent_run_id: Option<String>,
}

impl Scope {
    pub(crate) fn of(context: &RunContext) -> Scope {
        Scope {
            agent_id: context.agent_id.clone(),
            session_id: context.session_id.clone(),
            session_key: context.session_key.clone(),
            agent_run_id: context.agent_run_id.clone(),
        }
    }

    /// The owner key of runs only this scope may resume.
    pub(crate) fn owner_key(&self) -> String {
        let part = |p: &Option<String>| p.as_deref().unwrap_or("").replace('|', "||");
        format!(
            "scope:{}|{}|{}|{}",
            part(&self.agent_id),
            part(&self.session_id),
            part(&self.session_key),
            part(&self.agent_run_id)
        )
    }

    pub(crate) fn in_session(&self, session: &str) -> bool {
        self.session_id.as_deref() == Some(session) || self.session_key.as_deref() == Some(session)
    }
}

/// One nested call, as the executor receives it.
#[derive(Debug, Clone)]
pub struct NestedCall {
    /// The run's context (agent, session, sender, channel).
    pub context: Arc<RunContext>,
    /// The model's tool-call id of the outer `exec` that started the run.
    pub parent_call_id: String,
    /// This nested call's id (unique within the run).
    pub call_id: String,
    /// The catalog entry being called.
    pub tool: Arc<CatalogEntry>,
    /// The input: JSON the guest sent, re-parsed by the host.
    pub input: Value,
    /// Reports this call's own progress (e.g. its MCP server's) to
    /// whoever follows the run.
    pub progress: crate::progress::CallProgress,
}

/// A resource or prompt request of `MCP.<server>.resources.*` /
/// `MCP.<server>.prompts.*`, as the executor receives it.
#[derive(Debug, Clone)]
pub struct McpServerCall {
    /// The run's context.
    pub context: Arc<RunContext>,
    /// The model's tool-call id of the outer `exec`.
    pub parent_call_id: String,
    /// This call's id (unique within the run).
    pub call_id: String,
    /// The server's name (as in the catalog ids).
    pub server: String,
    /// What is asked.
    pub method: McpMethod,
    /// The request params, checked by the host (`uri`, `name`, ...).
    pub params: Value,
}

/// A nested call failed; the guest sees a plain `Error` with this message
/// (and `code`: `nested_tool_failed`, or `approval_denied` for a denial).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolCallError {
    /// What went wrong, fit for the model (no secrets).
    pub message: String,
    /// Whether the call was denied before it started (by a human, the
    /// approval policy or a hook): it had no effect.
    pub denied: bool,
    /// The process running the call died before it finished (a durable
    /// run resumed elsewhere): it may or may not have taken effect.
    pub(crate) interrupted: bool,
}

impl ToolCallError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> ToolCallError {
        ToolCallError {
            message: message.into(),
            denied: false,
            interrupted: false,
        }
    }

    /// The call's process died before it answered (`interrupted`).
    pub(crate) fn interrupted(message: impl Into<String>) -> ToolCallError {
        ToolCallError {
            message: message.into(),
            denied: false,
            interrupted: true,
        }
    }

    /// Whether the call's process died before it answered.
    pub fn is_interrupted(&self) -> bool {
        self.interrupted
    }

    /// A denial: the call never started.
    pub fn denied(message: impl Into<String>) -> ToolCallError {
        ToolCallError {
            message: message.into(),
            denied: true,
            interrupted: false,
        }
    }
}

/// What an executor returns for one call.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolCallError>> + Send + 'static>>;

/// Runs nested calls through the agent's normal tool path (policy,
/// approvals, hooks, audit). Calls may run concurrently.
///
/// Cancellation (abort, timeout of a finished run, expiry) drops the
/// future. A closure `Fn(NestedCall) -> ToolFuture` is an executor.
pub trait ToolExecutor: Send + Sync + 'static {
    /// Starts one call.
    fn call(&self, call: NestedCall) -> ToolFuture;

    /// Starts a resource or prompt request to an MCP server of the run
    /// (only servers the catalog says offer them). The default fails: an
    /// embedder without MCP servers never gets one.
    fn mcp_request(&self, request: McpServerCall) -> ToolFuture {
        let message = format!(
            "{} of MCP server {} is not available here",
            request.method.as_str(),
            request.server
        );
        Box::pin(async move { Err(ToolCallError::new(message)) })
    }
}

impl<F> ToolExecutor for F
where
    F: Fn(NestedCall) -> ToolFuture + Send + Sync + 'static,
{
    fn call(&self, call: NestedCall) -> ToolFuture {
        self(call)
    }
}

/// An executor for runs without tools: every call fails.
pub(crate) struct NoTools;

impl ToolExecutor for NoTools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let id = call.tool.id.clone();
        Box::pin(async move { Err(ToolCallError::new(format!("no executor for {id}"))) })
    }
}

/// Who a run belongs to beyond its session, and how many suspended runs
/// that owner may hold in all.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub(crate) name: Arc<str>,
    pub(crate) max_suspended_runs: usize,
}
