//! The state of one run between its exec and its last wait ([`RunState`],
//! [`RunInfo`]). Shared by the stores, the bridge, the drain loop and the
//! outcome: it imports none of them.

use std::collections::VecDeque;
use std::sync::Arc;

use codemode_sandbox::Settlement;
use codemode_transform::Transformed;

use crate::catalog::Catalog;
use crate::config::Language;
use crate::control::{Approver, RunTag, ToolHooks};
use crate::executor::{Owner, RunContext, Scope, ToolExecutor};
use crate::run::calls::Calls;

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
    pub(crate) owner: Option<Owner>,
    /// The run's plugin namespaces (what their guest calls resolve to).
    pub(crate) namespaces: Option<Arc<crate::catalog::namespaces::RunNamespaces>>,
    /// Large nested results held on the host for the guest's handles.
    pub(crate) handles: crate::handles::ResultHandles,
    /// Who may resume the run ([`crate::run::env::RunEnv::owner_key`]).
    pub(crate) owner_key: Arc<str>,
    /// The cell's value once it returned while calls it never awaited were
    /// still running: the run completes with it when they have settled.
    pub(crate) returned: Option<serde_json::Value>,
    /// Whether the run's snapshot and results are written to the durable
    /// store ([`crate::run::env::RunEnv::durable`]).
    pub(crate) durable: bool,
}
