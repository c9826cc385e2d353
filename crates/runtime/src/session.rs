//! The embedding surface for one agent run: its context, its catalog, the
//! executor that runs nested calls, and the model-visible `exec` / `wait`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::Value;

use crate::catalog::Catalog;
use crate::catalog::surface::{self, ModelTool};
use crate::control::{ApprovalDecision, ApprovalError, Approver, PendingApproval, ToolHooks};
use crate::executor::live::{CallCanceller, ScopeState};
use crate::executor::{RunContext, ToolExecutor};
use crate::progress::ProgressSink;
use crate::result::CodeModeResult;
use crate::run::env::RunEnv;
use crate::run::host::Host;
use crate::trajectory::Trajectory;

/// How one `exec` or `wait` runs, beyond the model's input.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct CallOptions {
    /// Where the call reports its progress while it runs (nested calls
    /// started and finished, their own progress, the cell's
    /// `progress(...)`); `None`: nobody follows it.
    pub progress: Option<Arc<dyn ProgressSink>>,
}

impl CallOptions {
    /// Reports progress to `sink`.
    pub fn with_progress(mut self, sink: Arc<dyn ProgressSink>) -> CallOptions {
        self.progress = Some(sink);
        self
    }
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("progress", &self.progress.is_some())
            .finish()
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
    host: Arc<Host>,
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
    owner: std::sync::OnceLock<crate::executor::Owner>,
    /// Runs of this session may be resumed by whoever holds their id.
    runs_by_id: AtomicBool,
    /// Runs only this session's scope may resume stay in this process.
    scoped_runs_in_process: AtomicBool,
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
        host: Arc<Host>,
        scope: Arc<ScopeState>,
        context: RunContext,
        catalog: Arc<Catalog>,
        executor: Arc<dyn ToolExecutor>,
    ) -> CodeModeSession {
        CodeModeSession {
            host,
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
            scoped_runs_in_process: AtomicBool::new(false),
        }
    }

    /// Lets whoever holds a run id resume the run, from any session (and,
    /// with a durable store, any process): for requests that carry no
    /// identity (stateless MCP without authentication), where the run id —
    /// 128 random bits — is the capability. An owner bound to such a
    /// session ([`CodeModeSession::bind_owner`], e.g. the client's
    /// address) bounds how many of its runs wait at once, and does not
    /// keep them to itself.
    pub fn with_runs_resumable_by_id(self) -> CodeModeSession {
        self.resume_runs_by_id();
        self
    }

    /// [`Self::with_runs_resumable_by_id`] on a session already in use
    /// (runs started from now on).
    pub fn resume_runs_by_id(&self) {
        self.runs_by_id.store(true, Ordering::SeqCst);
    }

    /// Keeps runs that only this session's scope may resume (no owner
    /// bound, not resumable by id) out of a durable store: their record
    /// there is a marker, their snapshot and results stay in this process.
    /// For scopes no other process can ever have — a gateway's MCP session
    /// ids die with it — writing VM memory and tool results to disk would
    /// keep private data nobody can use.
    pub fn keep_scoped_runs_in_process(&self) {
        self.scoped_runs_in_process.store(true, Ordering::SeqCst);
    }

    /// Who may resume the runs this session starts: its owner (principal)
    /// if bound, anyone with the id if [`Self::with_runs_resumable_by_id`],
    /// else this scope alone.
    fn owner_key(&self) -> Arc<str> {
        // By id first: an owner bound to such a session only counts its
        // runs (e.g. per client address), it does not keep them.
        if self.runs_by_id.load(Ordering::SeqCst) {
            Arc::from(codemode_store::ANY_OWNER)
        } else if let Some(owner) = self.owner.get() {
            Arc::from(format!("principal:{}", owner.name))
        } else {
            Arc::from(self.scope.scope.owner_key())
        }
    }

    /// What an exec or wait of this session starting now runs with.
    pub(crate) fn env(&self, options: CallOptions) -> RunEnv {
        RunEnv {
            progress: options.progress,
            host: Arc::clone(&self.host),
            scope: Arc::clone(&self.scope),
            context: Arc::clone(&self.context),
            catalog: self.catalog(),
            executor: Arc::clone(&self.executor),
            trajectory: self.trajectory.clone(),
            hooks: self.hooks.clone(),
            approver: self.approver.clone(),
            owner: self.owner.get().cloned(),
            durable: self.host.store.backend.outlives_process()
                && !(self.scoped_runs_in_process.load(Ordering::SeqCst)
                    && self.owner.get().is_none()
                    && !self.runs_by_id.load(Ordering::SeqCst)),
            owner_key: self.owner_key(),
        }
    }

    /// Binds this session to `owner` (e.g. an authenticated principal):
    /// the suspended runs of all sessions bound to the same owner count
    /// together against `max_suspended_runs`, on top of the per-session
    /// and per-process bounds. The first binding holds; a later call with
    /// another owner returns `false` and changes nothing.
    pub fn bind_owner(&self, owner: &str, max_suspended_runs: usize) -> bool {
        let bound = self.owner.get_or_init(|| crate::executor::Owner {
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
        self.host.approvals.decide(
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
        self.host.approvals.decide(
            Some(&self.scope.scope),
            run_id,
            call_id,
            ApprovalDecision::Deny {
                reason: reason.to_owned(),
            },
        )
    }

    /// Decides call `call_id` of waiting run `run_id` as whoever may resume
    /// the run: its owner (principal), or anyone holding the id of a run
    /// resumable by id. For a client that answers an approval question in
    /// a later request than the one that asked it (2026-07-28 stateless
    /// `input_required`), where the session, and so the scope, is new.
    ///
    /// # Errors
    /// [`ApprovalError`] when no such call awaits approval for this owner.
    pub fn decide_as_resumer(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), ApprovalError> {
        self.host
            .approvals
            .decide_as_resumer(&self.owner_key(), run_id, call_id, decision)
    }

    /// The calls of this scope awaiting approval.
    pub fn pending_approvals(&self) -> Vec<PendingApproval> {
        self.host.approvals.list(Some(&self.scope.scope))
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
        let visible = self.host.namespaces.visible(catalog);
        let namespaces = crate::catalog::namespaces::describe_for_model(&visible);
        surface::model_tools_with(&self.host.config, catalog, &namespaces)
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
        self.exec_call(&format!("exec_{n}"), input, CallOptions::default())
            .await
    }

    /// Runs the model's `exec` input; `call_id` is the model's tool-call id
    /// (nested calls name it as their parent).
    pub async fn exec_call(
        &self,
        call_id: &str,
        input: &Value,
        options: CallOptions,
    ) -> CodeModeResult {
        // The trace span of the exec: nested calls are its children. Ids
        // and outcome only, never the code.
        let span = call_span!("code_mode.exec", call_id);
        let env = self.env(options);
        traced(span, crate::run::drive::exec(&env, call_id, input)).await
    }

    /// Resumes a waiting run (the model's `wait` input) under a generated
    /// call id.
    pub async fn wait(&self, input: &Value) -> CodeModeResult {
        let n = self.exec_counter.fetch_add(1, Ordering::Relaxed) + 1;
        self.wait_call(&format!("wait_{n}"), input, CallOptions::default())
            .await
    }

    /// Resumes a waiting run; `call_id` is the model's tool-call id.
    pub async fn wait_call(
        &self,
        call_id: &str,
        input: &Value,
        options: CallOptions,
    ) -> CodeModeResult {
        let span = call_span!("code_mode.wait", call_id);
        let env = self.env(options);
        traced(span, crate::run::drive::wait(&env, call_id, input)).await
    }

    /// Aborts every run of this scope: live drives stop with `aborted`,
    /// nested calls are cancelled, snapshots discarded; later `exec` and
    /// `wait` calls in this scope fail with `aborted`.
    pub fn abort(&self) {
        self.scope.abort();
        self.host.live.abort_scope(&self.scope.scope);
    }

    /// The session's client is gone: its live drives stop (`aborted`) and
    /// the runs only it may resume are aborted, but runs owned by a
    /// principal or by their id keep waiting for a `wait` from another
    /// session (or, with a durable store, another process).
    pub fn close(&self) {
        self.scope.abort();
        let key = self.scope.scope.owner_key();
        self.host.live.close_scope(&self.scope.scope, &key);
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
        self.host.live.abort_run(run_id, &self.scope.scope)
    }
}

/// The trace span of one exec or wait: ids and outcome, never the code.
macro_rules! call_span {
    ($name:literal, $call_id:expr) => {
        tracing::info_span!(
            target: "codemode::trace",
            $name,
            call_id = %$call_id,
            status = tracing::field::Empty,
            code = tracing::field::Empty,
            run_id = tracing::field::Empty,
        )
    };
}
use call_span;

/// Runs `call` inside `span` and records its outcome there.
async fn traced(
    span: tracing::Span,
    call: impl std::future::Future<Output = CodeModeResult>,
) -> CodeModeResult {
    let result = tracing::Instrument::instrument(call, span.clone()).await;
    crate::run::outcome::record_span(&span, &result);
    result
}
