//! The process's shared parts ([`Host`]) and the options that size them
//! ([`RuntimeOptions`]). Below the run machinery, above the stores it
//! holds; the public facade ([`crate::CodeModeRuntime`]) wraps it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use codemode_sandbox::{Limits, Sandbox, SandboxConfig};

use crate::catalog::Catalog;
use crate::config::CodeModeConfig;
use crate::executor::Scope;
use crate::executor::live::{ScopeEnd, ScopeState};
use crate::run::live::LiveRuns;
use crate::slots::ProcessSlots;

/// Process-level options beyond `tools.codeMode`.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Sandbox engine settings (module cache folder, live VM slots). Its
    /// `guest_api` is ignored: the runtime always builds its sandbox with
    /// its own guest API ([`crate::guest_api()`]), which its bridge answers.
    pub sandbox: SandboxConfig,
    /// Suspended runs held at once; a run that would exceed it fails with
    /// `snapshot_limit_exceeded` and a message saying so.
    pub max_suspended_runs: usize,
    /// Suspended runs one scope (session / agent run) may hold at once, so
    /// one client cannot fill the process's store; past it the exec fails
    /// with `snapshot_limit_exceeded`.
    pub max_suspended_runs_per_scope: usize,
    /// Snapshot bytes all suspended runs may hold together
    /// (`maxStoreBytes`); a suspend past it fails with
    /// `snapshot_limit_exceeded` naming the limit.
    pub max_store_bytes: usize,
    /// Snapshot bytes one scope's suspended runs may hold together.
    pub max_store_bytes_per_scope: usize,
    /// Live VMs (running execs and waits) one scope may hold at once
    /// (`maxLiveVmsPerSession`), out of the sandbox's `max_live_vms`.
    pub max_live_vms_per_scope: usize,
    /// How long an exec or wait queues for a live-VM slot (its scope's
    /// share, then the process's) before failing with
    /// `runtime_busy`.
    pub vm_queue_timeout: Duration,
    /// Cells parked at once: cells awaiting nested calls whose VM was
    /// suspended into memory and its slot freed ([`crate::slots`]). Past
    /// it an idle cell keeps its VM.
    pub max_parked_cells: usize,
    /// Parked cells one scope may hold at once.
    pub max_parked_cells_per_scope: usize,
    /// The largest nested tool result (as JSON) the bridge delivers into a
    /// VM as a value; larger results reject the call with a clear message
    /// (unless they are held as handles, see below).
    pub max_tool_result_bytes: usize,
    /// Nested results whose JSON is larger than this enter the VM as a
    /// handle (`bytes`, `text(start, end)`, `find`, `json()`) and stay on
    /// the host.
    pub result_handle_bytes: usize,
    /// Bytes of results one run may hold as handles (released with the
    /// run); past it a large result rejects its call.
    pub max_held_result_bytes: usize,
    /// Where waiting runs are stored, beyond this process's memory: the
    /// embedded file store or Redis ([`codemode_store::open`]). `None`
    /// (the default): a [`codemode_store::MemoryBackend`], runs end with
    /// the process.
    pub durable_store: Option<DurableStore>,
}

/// A durable run store for [`RuntimeOptions::durable_store`].
#[derive(Clone)]
pub struct DurableStore(pub Arc<dyn codemode_store::RunBackend>);

impl std::fmt::Debug for DurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DurableStore")
            .field(&self.0.describe())
            .finish()
    }
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            sandbox: SandboxConfig::default(),
            max_suspended_runs: 1024,
            max_suspended_runs_per_scope: 256,
            max_store_bytes: 1 << 30,
            max_store_bytes_per_scope: 256 << 20,
            max_live_vms_per_scope: 16,
            vm_queue_timeout: Duration::from_secs(5),
            max_parked_cells: 4096,
            max_parked_cells_per_scope: 512,
            max_tool_result_bytes: 4 << 20,
            result_handle_bytes: 1 << 20,
            max_held_result_bytes: 128 << 20,
            durable_store: None,
        }
    }
}

/// What the process shares between all its sessions and runs: the
/// settings, the sandbox, the run stores, the live-VM slots, the scopes of
/// live sessions, approvals and plugin namespaces. Built once by
/// [`crate::CodeModeRuntime`]; the run machinery reaches the process only
/// through it.
pub(crate) struct Host {
    pub(crate) config: CodeModeConfig,
    pub(crate) options: RuntimeOptions,
    pub(crate) sandbox: Sandbox,
    /// The live copies of waiting runs this process holds.
    pub(crate) live: LiveRuns,
    /// Where waiting runs are stored: this process's memory unless
    /// [`RuntimeOptions::durable_store`] names a durable store.
    pub(crate) store: crate::run::record::Store,
    pub(crate) slots: ProcessSlots,
    pub(crate) scopes: Mutex<HashMap<Scope, Weak<ScopeState>>>,
    /// The scope of [`crate::CodeModeRuntime::exec`] / [`crate::CodeModeRuntime::wait`].
    pub(crate) default_scope: Arc<ScopeState>,
    pub(crate) empty_catalog: Arc<Catalog>,
    /// Calls awaiting approval, in every scope.
    pub(crate) approvals: Arc<crate::control::ApprovalRegistry>,
    /// Plugin namespaces.
    pub(crate) namespaces: crate::catalog::namespaces::NamespaceRegistry,
}

impl Host {
    /// Drops the map entry of a scope whose last session is gone.
    pub(crate) fn forget_scope(&self, scope: &Scope) {
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        if scopes.get(scope).is_some_and(|w| w.strong_count() == 0) {
            scopes.remove(scope);
        }
    }

    /// The sandbox limits of one exec or wait under the process's settings.
    pub(crate) fn limits(&self) -> Limits {
        let c = &self.config;
        Limits {
            timeout: Duration::from_millis(c.timeout_ms),
            memory_limit_bytes: c.memory_limit_bytes as usize,
            max_output_bytes: c.max_output_bytes as usize,
            max_snapshot_bytes: c.max_snapshot_bytes as usize,
            // Every queued call is an outstanding guest request: room for
            // all of them beside the sandbox's usual bound.
            max_outstanding_requests: Limits::default().max_outstanding_requests
                + (c.max_pending_tool_calls + c.max_queued_tool_calls) as usize,
            ..Limits::default()
        }
    }
}

impl ScopeEnd for Host {
    fn scope_ended(&self, scope: &Scope) {
        self.live.discard_scope(scope);
        self.forget_scope(scope);
    }
}
