//! What one exec or wait runs with. [`RunEnv`]: the session's side (its
//! host, scope, context, catalog, executor, hooks, approver, owner), built
//! by the facade for each call, so the run machinery never sees the
//! facade. [`DriveCtx`]: what one drive needs besides the run (deadline,
//! limits, where progress goes).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_sandbox::Limits;

use crate::catalog::Catalog;
use crate::catalog::namespaces::{NamespaceError, RunNamespaces, ScopeContext};
use crate::config::Language;
use crate::control::{Approver, RunTag, ToolHooks};
use crate::executor::live::ScopeState;
use crate::executor::{Owner, RunContext, ToolExecutor};
use crate::run::calls::Calls;
use crate::run::host::Host;
use crate::run::state::{RunInfo, RunState};
use crate::trajectory::Trajectory;

/// The session's side of an exec or wait.
pub(crate) struct RunEnv {
    pub(crate) host: Arc<Host>,
    /// Where this exec/wait reports progress, if anyone follows it.
    pub(crate) progress: Option<Arc<dyn crate::progress::ProgressSink>>,
    pub(crate) scope: Arc<ScopeState>,
    pub(crate) context: Arc<RunContext>,
    /// The catalog new runs start with (a run keeps its own across waits).
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) executor: Arc<dyn ToolExecutor>,
    pub(crate) trajectory: Trajectory,
    pub(crate) hooks: Option<Arc<dyn ToolHooks>>,
    pub(crate) approver: Option<Arc<dyn Approver>>,
    /// The session's owner, if bound.
    pub(crate) owner: Option<Owner>,
    /// Who may resume the runs this session starts: its owner (principal)
    /// if bound, anyone with the id if the session says so, else the scope.
    pub(crate) owner_key: Arc<str>,
    /// Whether its runs' snapshots and results go to the durable store
    /// (else only a marker record: the live copy is the run).
    pub(crate) durable: bool,
}

impl RunEnv {
    /// The state of a new run of this session, started by call `call_id`.
    pub(crate) fn new_run(&self, call_id: &str, language: Language) -> RunState {
        RunState {
            scope: self.scope.scope.clone(),
            context: Arc::clone(&self.context),
            catalog: Arc::clone(&self.catalog),
            executor: Arc::clone(&self.executor),
            parent_call_id: call_id.to_owned(),
            drive_call_id: call_id.to_owned(),
            info: RunInfo {
                language: Some(language),
                exec_count: 1,
                ..RunInfo::default()
            },
            calls: Calls::new(self.trajectory.clone()),
            yields: Vec::new(),
            source_map: None,
            carried: VecDeque::new(),
            hooks: self.hooks.clone(),
            approver: self.approver.clone(),
            run_tag: RunTag::default(),
            owner: self.owner.clone(),
            namespaces: None,
            handles: Default::default(),
            owner_key: Arc::clone(&self.owner_key),
            returned: None,
            durable: self.durable,
        }
    }

    /// The plugin namespaces visible to a run starting now, serialized.
    pub(crate) fn run_namespaces(
        &self,
        state: &RunState,
    ) -> Result<Option<Arc<RunNamespaces>>, NamespaceError> {
        let context = &self.context;
        self.host.namespaces.for_run(
            &state.catalog,
            &ScopeContext {
                agent_id: context.agent_id.clone(),
                session_key: context.session_key.clone(),
                session_id: context.session_id.clone(),
                run_id: context.agent_run_id.clone(),
                config: self.host.config.clone(),
                aborted: self.scope.is_aborted(),
            },
        )
    }
}

/// What one drive needs besides the run.
pub(crate) struct DriveCtx {
    /// Where this exec/wait reports progress.
    pub(crate) progress: Option<Arc<dyn crate::progress::ProgressSink>>,
    pub(crate) host: Arc<Host>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) scope: Arc<ScopeState>,
    pub(crate) limits: Limits,
    /// The exec/wait deadline (`timeoutMs` from its start); the VM's own
    /// CPU deadline is the same instant.
    pub(crate) deadline: Instant,
    /// An idle drive (only nested calls in flight) awaits them on the async
    /// executor instead of blocking its thread (a multi-thread runtime: the
    /// cell then goes on on the worker that ran the calls' I/O).
    pub(crate) await_idle: bool,
}

impl DriveCtx {
    /// The context of an exec or wait in `env` that starts now: its
    /// deadline is `timeoutMs` from here. Must run inside the tokio runtime.
    pub(crate) fn starting_now(env: &RunEnv) -> DriveCtx {
        let host = Arc::clone(&env.host);
        let handle = tokio::runtime::Handle::current();
        DriveCtx {
            await_idle: handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread,
            progress: env.progress.clone(),
            limits: host.limits(),
            deadline: Instant::now() + Duration::from_millis(host.config.timeout_ms),
            host,
            handle,
            scope: Arc::clone(&env.scope),
        }
    }

    /// After this, results are no longer delivered in this call but kept
    /// for the next `wait`: a result arriving just before the deadline must
    /// not start guest work that the deadline would kill (losing the run).
    pub(crate) fn delivery_deadline(&self) -> Instant {
        let margin = (self.limits.timeout / 10).min(Duration::from_millis(50));
        self.deadline.checked_sub(margin).unwrap_or(self.deadline)
    }
}
