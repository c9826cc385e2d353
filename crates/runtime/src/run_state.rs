//! The state of one run between its exec and its last wait ([`RunState`],
//! [`RunInfo`]), and what one drive (an exec or a wait) needs besides it
//! ([`DriveCtx`]). Shared by the bridge, the drain loop and the outcome:
//! it imports none of them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_sandbox::{Limits, Settlement};
use codemode_transform::Transformed;

use crate::calls::Calls;
use crate::catalog::Catalog;
use crate::config::Language;
use crate::control::{Approver, RunTag, ToolHooks};
use crate::runtime::Inner;
use crate::session::{CodeModeSession, RunContext, Scope, ScopeState, ToolExecutor};

/// Counters carried across the exec and waits of one run (a durable run's
/// record keeps them; the language is kept beside them there).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct RunInfo {
    #[serde(skip)]
    pub(crate) language: Option<Language>,
    pub(crate) exec_count: u32,
    pub(crate) wait_count: u32,
    pub(crate) search_count: u32,
    pub(crate) describe_count: u32,
    pub(crate) api_count: u32,
    pub(crate) call_count: u32,
    pub(crate) tool_ids: Vec<String>,
    pub(crate) cancelled: u32,
}

/// Everything a run needs between its exec and its last wait.
pub(crate) struct RunState {
    pub(crate) scope: Scope,
    pub(crate) context: Arc<RunContext>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) executor: Arc<dyn ToolExecutor>,
    /// The exec call id that started the run (parent of its nested calls).
    pub(crate) parent_call_id: String,
    /// The call id of the exec or wait driving the run now.
    pub(crate) drive_call_id: String,
    pub(crate) info: RunInfo,
    pub(crate) calls: Calls,
    /// Request ids of `yield_control` calls, resolved on resume.
    pub(crate) yields: Vec<u32>,
    /// TypeScript cells: positions in the generated code → the source.
    pub(crate) source_map: Option<Arc<Transformed>>,
    /// Results that arrived too close to a deadline to deliver: the next
    /// `wait` delivers them first.
    pub(crate) carried: VecDeque<(u32, Settlement)>,
    /// Hooks around each nested call.
    pub(crate) hooks: Option<Arc<dyn ToolHooks>>,
    /// Who is asked about calls that need approval.
    pub(crate) approver: Option<Arc<dyn Approver>>,
    /// The run's id once it first suspends (names pending approvals).
    pub(crate) run_tag: RunTag,
    /// The session's owner, if bound (bounds suspended runs across
    /// sessions).
    pub(crate) owner: Option<crate::store::Owner>,
    /// The run's plugin namespaces (what their guest calls resolve to).
    pub(crate) namespaces: Option<Arc<crate::namespaces::RunNamespaces>>,
    /// Large nested results held on the host for the guest's handles.
    pub(crate) handles: crate::handles::ResultHandles,
    /// Who may resume the run ([`CodeModeSession::owner_key`]).
    pub(crate) owner_key: Arc<str>,
}

impl RunState {
    pub(crate) fn new(session: &CodeModeSession, call_id: &str, language: Language) -> RunState {
        RunState {
            scope: session.scope.scope.clone(),
            context: Arc::clone(&session.context),
            catalog: session.catalog(),
            executor: Arc::clone(&session.executor),
            parent_call_id: call_id.to_owned(),
            drive_call_id: call_id.to_owned(),
            info: RunInfo {
                language: Some(language),
                exec_count: 1,
                ..RunInfo::default()
            },
            calls: Calls::new(session.trajectory.clone()),
            yields: Vec::new(),
            source_map: None,
            carried: VecDeque::new(),
            hooks: session.hooks.clone(),
            approver: session.approver.clone(),
            run_tag: RunTag::default(),
            owner: session.owner.get().cloned(),
            namespaces: None,
            handles: Default::default(),
            owner_key: session.owner_key(),
        }
    }
}

tokio::task_local! {
    /// The progress sink of the `exec`/`wait` being awaited, if its host
    /// asked for progress.
    pub(crate) static PROGRESS: Option<Arc<dyn crate::progress::ProgressSink>>;
}

/// What one drive needs besides the run.
pub(crate) struct DriveCtx {
    /// Where this exec/wait reports progress.
    pub(crate) progress: Option<Arc<dyn crate::progress::ProgressSink>>,
    pub(crate) inner: Arc<Inner>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) scope: Arc<ScopeState>,
    pub(crate) limits: Limits,
    /// The exec/wait deadline (`timeoutMs` from its start); the VM's own
    /// CPU deadline is the same instant.
    pub(crate) deadline: Instant,
}

impl DriveCtx {
    /// The context of an exec or wait of `session` that starts now: its
    /// deadline is `timeoutMs` from here. Must run inside the tokio runtime.
    pub(crate) fn starting_now(session: &CodeModeSession) -> DriveCtx {
        let inner = Arc::clone(&session.runtime.inner);
        DriveCtx {
            progress: PROGRESS.try_with(Clone::clone).ok().flatten(),
            limits: limits_of(&inner),
            deadline: Instant::now() + Duration::from_millis(inner.config.timeout_ms),
            inner,
            handle: tokio::runtime::Handle::current(),
            scope: Arc::clone(&session.scope),
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

pub(crate) fn limits_of(inner: &Inner) -> Limits {
    let c = &inner.config;
    Limits {
        timeout: Duration::from_millis(c.timeout_ms),
        memory_limit_bytes: c.memory_limit_bytes as usize,
        max_output_bytes: c.max_output_bytes as usize,
        max_snapshot_bytes: c.max_snapshot_bytes as usize,
        ..Limits::default()
    }
}
