//! [`CodeModeRuntime`]: one per process. Owns the sandbox, the run store and
//! the scopes of live sessions; hands out a [`CodeModeSession`] per agent
//! run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use codemode_sandbox::{Sandbox, SandboxConfig, SandboxError};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::config::CodeModeConfig;
use crate::executor::live::{ScopeEnd, ScopeState};
use crate::executor::{NoTools, RunContext, Scope, ToolExecutor};
use crate::result::CodeModeResult;
use crate::run::host::{Host, RuntimeOptions};
use crate::run::live::{LiveLimits, LiveRuns};
use crate::session::CodeModeSession;
use crate::slots::ProcessSlots;

/// The runtime could not be built (`runtime_unavailable`): code mode then
/// fails closed instead of exposing tools directly.
#[derive(Debug, thiserror::Error)]
#[error("code mode runtime unavailable: {0}")]
pub struct RuntimeError(#[from] pub SandboxError);

/// Code mode for one process: build once, share freely (cheap to clone).
///
/// For tools, make a [`CodeModeSession`] per agent run with
/// [`CodeModeRuntime::session`]. [`CodeModeRuntime::exec`] and
/// [`CodeModeRuntime::wait`] run cells without tools.
///
/// ```no_run
/// # async fn demo() -> Result<(), codemode_runtime::RuntimeError> {
/// use codemode_runtime::{CodeModeConfig, CodeModeRuntime};
/// let runtime = CodeModeRuntime::new(CodeModeConfig::default())?;
/// let result = runtime.exec(&serde_json::json!({ "code": "return 6 * 7" })).await;
/// assert_eq!(result.to_json()["value"], 42);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CodeModeRuntime {
    pub(crate) inner: Arc<Host>,
}

impl std::fmt::Debug for CodeModeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeRuntime")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl CodeModeRuntime {
    /// Builds the runtime with default [`RuntimeOptions`].
    ///
    /// # Errors
    /// [`RuntimeError`] when the sandbox cannot start here.
    pub fn new(config: CodeModeConfig) -> Result<CodeModeRuntime, RuntimeError> {
        CodeModeRuntime::with_options(config, RuntimeOptions::default())
    }

    /// Builds the runtime.
    ///
    /// # Errors
    /// [`RuntimeError`] when the sandbox cannot start here.
    pub fn with_options(
        config: CodeModeConfig,
        options: RuntimeOptions,
    ) -> Result<CodeModeRuntime, RuntimeError> {
        let sandbox = Sandbox::new(SandboxConfig {
            guest_api: crate::catalog::guest_api::guest_api(),
            ..options.sandbox.clone()
        })?;
        let slots = ProcessSlots::new(
            options.sandbox.max_live_vms as usize,
            options.max_live_vms_per_scope,
            options.vm_queue_timeout,
            (options.max_parked_cells, options.max_parked_cells_per_scope),
        );
        let default_slots = slots.scope_slots();
        let backend: Arc<dyn codemode_store::RunBackend> = match &options.durable_store {
            Some(store) => Arc::clone(&store.0),
            None => Arc::new(codemode_store::MemoryBackend::new()),
        };
        // Held calls are listed in a store other processes (or this one
        // after a restart) read; a memory store only has this process's.
        let approvals = crate::control::ApprovalRegistry::new(
            backend.outlives_process().then(|| Arc::clone(&backend)),
        );
        let inner = Arc::new_cyclic(|weak: &Weak<Host>| Host {
            config,
            sandbox,
            live: LiveRuns::new(
                LiveLimits {
                    max_runs: options.max_suspended_runs,
                    max_runs_per_scope: options.max_suspended_runs_per_scope,
                    max_bytes: options.max_store_bytes,
                    max_bytes_per_scope: options.max_store_bytes_per_scope,
                },
                Arc::clone(&backend),
            ),
            store: crate::run::record::Store {
                backend,
                bounds: codemode_store::Bounds {
                    max_runs: options.max_suspended_runs,
                    max_bytes: options.max_store_bytes as u64,
                },
            },
            slots,
            options,
            scopes: Mutex::new(HashMap::new()),
            default_scope: Arc::new(ScopeState::new(
                Scope::of(&RunContext::default()),
                default_slots,
                weak.clone() as Weak<dyn ScopeEnd>,
            )),
            empty_catalog: Arc::new(Catalog::empty()),
            approvals: Arc::new(approvals),
            namespaces: crate::catalog::namespaces::NamespaceRegistry::default(),
        });
        start_reaper(Arc::downgrade(&inner));
        Ok(CodeModeRuntime { inner })
    }

    /// The plugin namespaces of this runtime: register them from trusted
    /// plugin code; runs see those whose tools they have.
    pub fn namespaces(&self) -> &crate::catalog::namespaces::NamespaceRegistry {
        &self.inner.namespaces
    }

    /// The effective `tools.codeMode` settings.
    pub fn config(&self) -> &CodeModeConfig {
        &self.inner.config
    }

    /// The sandbox engine (for embedders that need snapshots directly).
    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }

    /// Suspended runs currently held (waiting or being resumed).
    pub fn suspended_runs(&self) -> usize {
        self.inner.live.len()
    }

    /// Snapshot bytes held in memory by waiting runs.
    pub fn suspended_bytes(&self) -> usize {
        self.inner.live.bytes_held()
    }

    /// The durable store (`file:PATH`, `redis://HOST:PORT/DB`) and what it
    /// holds now, if runs outlive the process; `Err` when it cannot be
    /// reached.
    pub fn durable_store_stats(
        &self,
    ) -> Option<(
        String,
        Result<codemode_store::StoreStats, codemode_store::StoreError>,
    )> {
        let backend = &self.inner.store.backend;
        backend
            .outlives_process()
            .then(|| (backend.describe(), backend.stats()))
    }

    /// Code mode for one agent run: `context` scopes its runs and reaches
    /// every nested call, `catalog` is its hidden catalog (see
    /// [`Catalog::build`]), `executor` runs its nested calls.
    ///
    /// Sessions with equal scope (agent, session id and key, agent run id)
    /// share runs and abort state; the scope ends when its last session is
    /// dropped, discarding its suspended runs.
    pub fn session(
        &self,
        context: RunContext,
        catalog: impl Into<Arc<Catalog>>,
        executor: Arc<dyn ToolExecutor>,
    ) -> CodeModeSession {
        let scope_key = Scope::of(&context);
        let scope = {
            let mut scopes = self
                .inner
                .scopes
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match scopes.get(&scope_key).and_then(Weak::upgrade) {
                Some(scope) => scope,
                None => {
                    let scope = Arc::new(ScopeState::new(
                        scope_key.clone(),
                        self.inner.slots.scope_slots(),
                        Arc::downgrade(&self.inner) as Weak<dyn ScopeEnd>,
                    ));
                    scopes.insert(scope_key, Arc::downgrade(&scope));
                    scope
                }
            }
        };
        CodeModeSession::new(
            Arc::clone(&self.inner),
            scope,
            context,
            catalog.into(),
            executor,
        )
    }

    /// Every call awaiting approval in this process, in every session (for
    /// an operator; a session lists its own with
    /// [`CodeModeSession::pending_approvals`]), and with a durable store
    /// the held calls of every process sharing it (also of processes that
    /// stopped). Reads the store: call it off async workers.
    pub fn pending_approvals(&self) -> Vec<crate::PendingApproval> {
        self.inner.approvals.list(None)
    }

    /// Decides a call awaiting approval in any session (for an operator;
    /// a session decides its own with [`CodeModeSession::approve`] /
    /// [`CodeModeSession::deny`]); with a durable store, also a call held
    /// by another process sharing it (the first decision anywhere wins).
    /// May write to the store: call it off async workers.
    ///
    /// # Errors
    /// [`crate::ApprovalError`] when no such call awaits approval, or the
    /// store could not record the decision.
    pub fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        decision: crate::ApprovalDecision,
    ) -> Result<(), crate::ApprovalError> {
        self.inner.approvals.decide(None, run_id, call_id, decision)
    }

    /// Aborts every run of a session (matched by session id or key): live
    /// drives stop with `aborted`, nested calls are cancelled, snapshots
    /// discarded, and later calls of its sessions fail with `aborted`.
    pub fn abort_session(&self, session: &str) {
        let scopes = self.live_scopes();
        for scope in scopes.iter().filter(|s| s.scope.in_session(session)) {
            scope.abort();
        }
        drop(scopes);
        self.inner.live.abort_session(session);
    }

    /// Every scope with a live session. Upgraded under the lock but used
    /// (and dropped) after it: dropping the last handle of a scope takes
    /// this lock again, so filtering inside it could deadlock.
    fn live_scopes(&self) -> Vec<Arc<ScopeState>> {
        self.inner
            .scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Live VMs in use now (running execs and waits).
    pub fn live_vms(&self) -> usize {
        self.inner.slots.in_use()
    }

    /// Cells parked now: awaiting nested calls inside their exec or wait,
    /// their VM suspended into memory and its slot free.
    pub fn parked_cells(&self) -> usize {
        self.inner.slots.parked()
    }

    /// Process shutdown: running cells stop, and every suspended run's
    /// local copy is dropped with its calls cancelled. A durable store
    /// keeps the runs' records (a restart resumes them; the cancelled
    /// calls are `interrupted` then); without one they are gone.
    pub fn shutdown(&self) {
        // Running cells stop now, not at their timeouts.
        let scopes = self.live_scopes();
        for scope in &scopes {
            scope.abort();
        }
        self.inner.default_scope.abort();
        drop(scopes);
        self.inner.live.clear();
    }

    fn default_session(&self) -> CodeModeSession {
        CodeModeSession::new(
            Arc::clone(&self.inner),
            Arc::clone(&self.inner.default_scope),
            RunContext::default(),
            Arc::clone(&self.inner.empty_catalog),
            Arc::new(NoTools),
        )
    }

    /// Runs the model's `exec` input without tools.
    pub async fn exec(&self, raw_input: &Value) -> CodeModeResult {
        self.default_session().exec(raw_input).await
    }

    /// Resumes a waiting run started by [`CodeModeRuntime::exec`].
    pub async fn wait(&self, raw_input: &Value) -> CodeModeResult {
        self.default_session().wait(raw_input).await
    }
}

/// Hands the allocator's free pages back to the OS. Packed and expired
/// snapshots free hundreds of KB each in the middle of glibc's heaps,
/// which it would otherwise keep resident (a process holding 100 packed
/// runs kept the RSS of 100 raw ones).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only takes the allocator's own locks and
    // madvises pages that hold no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Expires suspended runs on a timer, so an expired run's snapshot and
/// in-flight calls are released when its TTL passes, not at the next store
/// access. The thread ends with the runtime.
fn start_reaper(inner: Weak<Host>) {
    const TICK: Duration = Duration::from_millis(500);
    let spawned = std::thread::Builder::new()
        .name("codemode-reaper".into())
        .spawn(move || {
            let mut ticks = 0u64;
            loop {
                std::thread::sleep(TICK);
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let expired = inner.live.expire_now();
                let packed = inner.live.pack_idle(crate::run::live::PACK_AFTER);
                if expired + packed > 0 {
                    release_free_memory();
                }
                ticks += 1;
                // The store's own expiry is exact on claim; this only
                // frees its space (every 10 s).
                if ticks.is_multiple_of(20)
                    && let Err(e) = inner.store.backend.expire()
                {
                    tracing::warn!(error = %e, "the run store could not drop expired runs");
                }
            }
        });
    if let Err(e) = spawned {
        // Expiry still happens on every store access.
        tracing::warn!(error = %e, "could not start the run store's reaper thread");
    }
}
