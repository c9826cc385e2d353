//! The embedding surface for one agent run: its context, its catalog, the
//! executor that runs nested calls, and the model-visible `exec` / `wait`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::{Catalog, CatalogEntry};
use crate::control::{ApprovalDecision, ApprovalError, Approver, PendingApproval, ToolHooks};
use crate::result::CodeModeResult;
use crate::runtime::{CodeModeRuntime, Inner};
use crate::surface::{self, ModelTool};
use crate::trajectory::Trajectory;

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

/// What an MCP server is asked besides tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum McpMethod {
    /// `resources/list` (params: optional `cursor`).
    ResourcesList,
    /// `resources/read` (params: `uri`).
    ResourcesRead,
    /// `resources/templates/list` (params: optional `cursor`).
    ResourceTemplatesList,
    /// `prompts/list` (params: optional `cursor`).
    PromptsList,
    /// `prompts/get` (params: `name`, optional `arguments`).
    PromptsGet,
}

impl McpMethod {
    /// The MCP method name, e.g. `resources/read`.
    pub fn as_str(self) -> &'static str {
        match self {
            McpMethod::ResourcesList => "resources/list",
            McpMethod::ResourcesRead => "resources/read",
            McpMethod::ResourceTemplatesList => "resources/templates/list",
            McpMethod::PromptsList => "prompts/list",
            McpMethod::PromptsGet => "prompts/get",
        }
    }
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

/// Abort state of one scope, shared by its sessions and live drives.
pub(crate) struct ScopeState {
    pub(crate) scope: Scope,
    aborted: AtomicBool,
    /// Live drives to wake on abort.
    live: Mutex<LiveDrives>,
    /// This scope's share of the process's live VMs.
    pub(crate) vm_slots: crate::slots::ScopeSlots,
    runtime: Weak<Inner>,
}

impl ScopeState {
    pub(crate) fn new(
        scope: Scope,
        vm_slots: crate::slots::ScopeSlots,
        runtime: Weak<Inner>,
    ) -> ScopeState {
        ScopeState {
            scope,
            aborted: AtomicBool::new(false),
            live: Mutex::new(LiveDrives::default()),
            vm_slots,
            runtime,
        }
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Marks the scope aborted and stops its live drives: a running guest
    /// is interrupted at its next epoch tick, an idle drive is woken.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        for drive in live.drives.iter() {
            drive.stop();
        }
    }

    /// Stops the live drive of the exec or wait with model call id
    /// `call_id` (a client cancelled that call). The scope stays usable.
    /// A call cancelled before its drive started (still queued, or still
    /// checking its source) is remembered and stopped when it registers.
    pub(crate) fn cancel_call(&self, call_id: &str) -> bool {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let mut found = false;
        for drive in live.drives.iter().filter(|d| d.call_id == call_id) {
            drive.stop();
            found = true;
        }
        if !found {
            if live.cancelled_early.len() >= MAX_EARLY_CANCELS {
                live.cancelled_early.clear();
            }
            live.cancelled_early.insert(call_id.to_owned());
        }
        found
    }

    pub(crate) fn register(&self, drive: LiveDrive) {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if live.cancelled_early.remove(&drive.call_id) {
            drive.stop();
        }
        live.drives.push(drive);
    }

    pub(crate) fn unregister(&self, key: u64) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drives
            .retain(|d| d.key != key);
    }
}

/// Cancellations remembered for calls whose drive has not started: a
/// bound, so cancelling calls that never run cannot grow it.
const MAX_EARLY_CANCELS: usize = 1024;

#[derive(Default)]
pub(crate) struct LiveDrives {
    drives: Vec<LiveDrive>,
    cancelled_early: std::collections::HashSet<String>,
}

/// A drive (an exec or wait running now) that abort and cancellation reach.
pub(crate) struct LiveDrive {
    pub(crate) key: u64,
    /// The model's call id of the exec or wait.
    pub(crate) call_id: String,
    /// Wakes the drive when it waits for nested results.
    pub(crate) wake: std::sync::mpsc::Sender<crate::calls::Msg>,
    /// Interrupts its guest and refuses new nested calls.
    pub(crate) cancel: codemode_sandbox::CancelFlag,
}

impl LiveDrive {
    fn stop(&self) {
        self.cancel.cancel();
        let _ = self.wake.send(crate::calls::Msg::Abort);
    }
}

impl Drop for ScopeState {
    /// The last session of the scope is gone: the agent run ended, so its
    /// suspended runs (and their in-flight calls) go too.
    fn drop(&mut self) {
        if let Some(inner) = self.runtime.upgrade() {
            inner.store.discard_scope(&self.scope);
            inner.forget_scope(&self.scope);
        }
    }
}

/// Cancels calls of one session; see [`CodeModeSession::canceller`].
#[derive(Clone)]
pub struct CallCanceller {
    scope: Arc<ScopeState>,
}

impl std::fmt::Debug for CallCanceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallCanceller").finish_non_exhaustive()
    }
}

impl CallCanceller {
    /// As [`CodeModeSession::cancel_call`].
    pub fn cancel_call(&self, call_id: &str) -> bool {
        self.scope.cancel_call(call_id)
    }
}

/// Code mode for one agent run (the [`RunContext::agent_run_id`] of its
/// context): the model's `exec` and `wait` calls of that run, its catalog
/// and its executor. Made by [`CodeModeRuntime::session`]. Each `exec` that
/// waits becomes a suspended code mode run (the result's `runId`) inside
/// this agent run.
///
/// Dropping the last session of a scope ends the agent run: its suspended
/// runs are discarded and their nested calls cancelled.
pub struct CodeModeSession {
    pub(crate) runtime: CodeModeRuntime,
    pub(crate) scope: Arc<ScopeState>,
    pub(crate) context: Arc<RunContext>,
    /// New runs use the catalog current at their exec; a run keeps the
    /// one it started with across its waits.
    catalog: RwLock<Arc<Catalog>>,
    pub(crate) executor: Arc<dyn ToolExecutor>,
    pub(crate) trajectory: Trajectory,
    exec_counter: AtomicU64,
    pub(crate) hooks: Option<Arc<dyn ToolHooks>>,
    pub(crate) approver: Option<Arc<dyn Approver>>,
    /// Who the session's runs belong to across sessions (a principal),
    /// with that owner's bound on suspended runs; set once.
    pub(crate) owner: std::sync::OnceLock<crate::store::Owner>,
    /// Runs of this session may be resumed by whoever holds their id.
    runs_by_id: AtomicBool,
}

impl std::fmt::Debug for CodeModeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeSession")
            .field("context", &self.context)
            .field("catalog_size", &self.catalog().len())
            .finish_non_exhaustive()
    }
}

impl CodeModeSession {
    pub(crate) fn new(
        runtime: CodeModeRuntime,
        scope: Arc<ScopeState>,
        context: RunContext,
        catalog: Arc<Catalog>,
        executor: Arc<dyn ToolExecutor>,
    ) -> CodeModeSession {
        CodeModeSession {
            runtime,
            scope,
            context: Arc::new(context),
            catalog: RwLock::new(catalog),
            executor,
            trajectory: Trajectory::default(),
            exec_counter: AtomicU64::new(0),
            hooks: None,
            approver: None,
            owner: std::sync::OnceLock::new(),
            runs_by_id: AtomicBool::new(false),
        }
    }

    /// Lets whoever holds a run id resume the run, from any session (and,
    /// with a durable store, any process): for requests that carry no
    /// identity (stateless MCP without authentication), where the run id —
    /// 128 random bits — is the capability. A session bound to an owner
    /// ([`CodeModeSession::bind_owner`]) keeps its runs to that owner.
    pub fn with_runs_resumable_by_id(self) -> CodeModeSession {
        self.resume_runs_by_id();
        self
    }

    /// [`Self::with_runs_resumable_by_id`] on a session already in use
    /// (runs started from now on).
    pub fn resume_runs_by_id(&self) {
        self.runs_by_id.store(true, Ordering::SeqCst);
    }

    /// Who may resume the runs this session starts: its owner (principal)
    /// if bound, anyone with the id if [`Self::with_runs_resumable_by_id`],
    /// else this scope alone.
    pub(crate) fn owner_key(&self) -> Arc<str> {
        if let Some(owner) = self.owner.get() {
            Arc::from(format!("principal:{}", owner.name))
        } else if self.runs_by_id.load(Ordering::SeqCst) {
            Arc::from(codemode_store::ANY_OWNER)
        } else {
            Arc::from(self.scope.scope.owner_key())
        }
    }

    /// Binds this session to `owner` (e.g. an authenticated principal):
    /// the suspended runs of all sessions bound to the same owner count
    /// together against `max_suspended_runs`, on top of the per-session
    /// and per-process bounds. The first binding holds; a later call with
    /// another owner returns `false` and changes nothing.
    pub fn bind_owner(&self, owner: &str, max_suspended_runs: usize) -> bool {
        let bound = self.owner.get_or_init(|| crate::store::Owner {
            name: Arc::from(owner),
            max_suspended_runs,
        });
        &*bound.name == owner
    }

    /// Runs `hooks` around every nested call and every exec of this
    /// session (runs already started keep what they started with).
    pub fn with_hooks(mut self, hooks: Arc<dyn ToolHooks>) -> CodeModeSession {
        self.hooks = Some(hooks);
        self
    }

    /// Asks `approver` about calls that need approval. Without one, such a
    /// call waits (the run suspends with `reason: "approval"`) until
    /// [`CodeModeSession::approve`] or [`CodeModeSession::deny`].
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> CodeModeSession {
        self.approver = Some(approver);
        self
    }

    /// Approves call `call_id` of waiting run `run_id` (a `pendingToolCalls`
    /// entry with `awaitingApproval`): it starts now, and `wait` continues
    /// with its result. Only runs of this session's scope.
    ///
    /// # Errors
    /// [`ApprovalError`] when no such call awaits approval in this scope.
    pub fn approve(&self, run_id: &str, call_id: &str) -> Result<(), ApprovalError> {
        self.runtime.inner.approvals.decide(
            Some(&self.scope.scope),
            run_id,
            call_id,
            ApprovalDecision::Approve,
        )
    }

    /// Denies call `call_id` of waiting run `run_id`: it never starts, and
    /// the guest's promise rejects with `code: "approval_denied"` and
    /// `reason`. Earlier calls of the cell are not re-run.
    ///
    /// # Errors
    /// [`ApprovalError`] when no such call awaits approval in this scope.
    pub fn deny(&self, run_id: &str, call_id: &str, reason: &str) -> Result<(), ApprovalError> {
        self.runtime.inner.approvals.decide(
            Some(&self.scope.scope),
            run_id,
            call_id,
            ApprovalDecision::Deny {
                reason: reason.to_owned(),
            },
        )
    }

    /// The calls of this scope awaiting approval.
    pub fn pending_approvals(&self) -> Vec<PendingApproval> {
        self.runtime.inner.approvals.list(Some(&self.scope.scope))
    }

    /// The model-visible tools: exactly `exec` and `wait`, with
    /// descriptions and JSON schemas, ready for a provider payload.
    pub fn model_tools(&self) -> Vec<ModelTool> {
        let catalog = self.catalog();
        self.model_tools_for(&catalog)
    }

    /// The model tools over `catalog`, with the plugin namespaces it makes
    /// visible in the exec description.
    fn model_tools_for(&self, catalog: &Catalog) -> Vec<ModelTool> {
        let visible = self.runtime.inner.namespaces.visible(catalog);
        let namespaces = crate::namespaces::describe_for_model(&visible);
        surface::model_tools_with(self.runtime.config(), catalog, &namespaces)
    }

    /// The model-visible surface of this session (`exec` and `wait` over
    /// its catalog), e.g. to check a payload with
    /// [`crate::ModelSurface::check_payload`] before it leaves.
    pub fn surface(&self) -> crate::ModelSurface {
        let catalog = self.catalog();
        crate::ModelSurface::CodeMode {
            model_tools: self.model_tools_for(&catalog),
            direct_tools: Vec::new(),
            catalog,
        }
    }

    /// This run's hidden catalog (as new execs will see it).
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the catalog for execs started from now on (e.g. after an
    /// MCP server's tool list changed). Runs already started, waiting or
    /// not, keep the catalog they started with.
    pub fn replace_catalog(&self, catalog: impl Into<Arc<Catalog>>) {
        *self.catalog.write().unwrap_or_else(PoisonError::into_inner) = catalog.into();
    }

    /// The run context.
    pub fn context(&self) -> &RunContext {
        &self.context
    }

    /// Control calls and nested calls of this session so far.
    pub fn trajectory(&self) -> &Trajectory {
        &self.trajectory
    }

    /// Runs the model's `exec` input under a generated call id.
    pub async fn exec(&self, input: &Value) -> CodeModeResult {
        let n = self.exec_counter.fetch_add(1, Ordering::Relaxed) + 1;
        self.exec_call(&format!("exec_{n}"), input).await
    }

    /// [`CodeModeSession::exec_call`], reporting its progress to `sink`
    /// while it runs (nested calls started and finished, their own
    /// progress, the cell's `progress(...)`).
    pub async fn exec_call_with_progress(
        &self,
        call_id: &str,
        input: &Value,
        sink: Arc<dyn crate::progress::ProgressSink>,
    ) -> CodeModeResult {
        crate::run_state::PROGRESS
            .scope(Some(sink), self.exec_call(call_id, input))
            .await
    }

    /// [`CodeModeSession::wait_call`], reporting its progress to `sink`.
    pub async fn wait_call_with_progress(
        &self,
        call_id: &str,
        input: &Value,
        sink: Arc<dyn crate::progress::ProgressSink>,
    ) -> CodeModeResult {
        crate::run_state::PROGRESS
            .scope(Some(sink), self.wait_call(call_id, input))
            .await
    }

    /// Runs the model's `exec` input; `call_id` is the model's tool-call id
    /// (nested calls name it as their parent).
    pub async fn exec_call(&self, call_id: &str, input: &Value) -> CodeModeResult {
        // The trace span of the exec: nested calls are its children. Ids
        // and outcome only, never the code.
        let span = tracing::info_span!(
            target: "codemode::trace",
            "code_mode.exec",
            call_id = %call_id,
            status = tracing::field::Empty,
            code = tracing::field::Empty,
            run_id = tracing::field::Empty,
        );
        let result =
            tracing::Instrument::instrument(crate::drive::exec(self, call_id, input), span.clone())
                .await;
        crate::outcome::record_span(&span, &result);
        result
    }

    /// Resumes a waiting run (the model's `wait` input).
    pub async fn wait(&self, input: &Value) -> CodeModeResult {
        let n = self.exec_counter.fetch_add(1, Ordering::Relaxed) + 1;
        self.wait_call(&format!("wait_{n}"), input).await
    }

    /// Resumes a waiting run; `call_id` is the model's tool-call id.
    pub async fn wait_call(&self, call_id: &str, input: &Value) -> CodeModeResult {
        let span = tracing::info_span!(
            target: "codemode::trace",
            "code_mode.wait",
            call_id = %call_id,
            status = tracing::field::Empty,
            code = tracing::field::Empty,
            run_id = tracing::field::Empty,
        );
        let result =
            tracing::Instrument::instrument(crate::drive::wait(self, call_id, input), span.clone())
                .await;
        crate::outcome::record_span(&span, &result);
        result
    }

    /// Aborts every run of this scope: live drives stop with `aborted`,
    /// nested calls are cancelled, snapshots discarded; later `exec` and
    /// `wait` calls in this scope fail with `aborted`.
    pub fn abort(&self) {
        self.scope.abort();
        self.runtime.inner.store.abort_scope(&self.scope.scope);
    }

    /// The session's client is gone: its live drives stop (`aborted`) and
    /// the runs only it may resume are aborted, but runs owned by a
    /// principal or by their id keep waiting for a `wait` from another
    /// session (or, with a durable store, another process).
    pub fn close(&self) {
        self.scope.abort();
        let key = self.scope.scope.owner_key();
        self.runtime
            .inner
            .store
            .close_scope(&self.scope.scope, &key);
    }

    /// Cancels the exec or wait running now with model call id `call_id`
    /// (an MCP client's `notifications/cancelled`): its guest stops within
    /// milliseconds, its nested calls are cancelled, no new one starts, and
    /// it ends `aborted` (a resumed run is discarded). Other runs of the
    /// scope go on. Returns whether such a call was running.
    pub fn cancel_call(&self, call_id: &str) -> bool {
        self.scope.cancel_call(call_id)
    }

    /// A handle that cancels this session's calls from another task (an
    /// exec blocks the task that awaits it, so a cancellation watcher must
    /// run beside it).
    pub fn canceller(&self) -> CallCanceller {
        CallCanceller {
            scope: Arc::clone(&self.scope),
        }
    }

    /// Aborts one suspended run of this scope (its calls are cancelled and
    /// its snapshot discarded; `wait` then says `aborted`). Returns whether
    /// such a run was waiting.
    pub fn abort_run(&self, run_id: &str) -> bool {
        self.runtime
            .inner
            .store
            .abort_run(run_id, &self.scope.scope)
    }
}
