//! Per-principal admission: `auth.maxConcurrentExecs` running calls.

use std::sync::{Arc, PoisonError};

use codemode_runtime::CodeModeResult;

use super::{GatewaySession, Shared};
use crate::auth::Principal;

/// One running `exec`/`wait` of a principal, counted until dropped.
pub(super) struct Running {
    shared: Arc<Shared>,
    principal: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self
            .shared
            .running_by_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = running.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.principal);
            }
        }
    }
}

impl GatewaySession {
    /// Counts one more running call for `principal` under
    /// `auth.maxConcurrentExecs`; the refusal is a `runtime_busy`
    /// result naming the limit.
    pub(super) fn admit(
        &self,
        principal: Option<&Principal>,
    ) -> Result<Option<Running>, Box<CodeModeResult>> {
        let (Some(principal), Some(auth)) = (principal, &self.shared.auth) else {
            return Ok(None);
        };
        // The session's runs count against its principal's bound on
        // suspended runs (a session belongs to one principal: see `auth`).
        self.session
            .bind_owner(&principal.0, auth.max_suspended_runs);
        count_running(&self.shared, &principal.0).map(Some)
    }
}

/// Counts one more running call of `principal` (also for the Tasks driver's
/// waits: a task's run counts like the client's own calls), or the
/// `runtime_busy` refusal naming the limit.
pub(super) fn count_running(
    shared: &Arc<Shared>,
    principal: &str,
) -> Result<Running, Box<CodeModeResult>> {
    let max = shared
        .auth
        .as_ref()
        .map_or(usize::MAX, |auth| auth.max_concurrent_execs);
    let mut running = shared
        .running_by_principal
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let n = running.entry(principal.to_owned()).or_insert(0);
    if *n >= max {
        return Err(Box::new(CodeModeResult::failure(
            codemode_runtime::ErrorCode::RuntimeBusy,
            format!(
                "principal `{principal}` already has {max} exec/wait calls running (auth.maxConcurrentExecs); wait for one to finish"
            ),
            codemode_runtime::Telemetry::default(),
        )));
    }
    *n += 1;
    Ok(Running {
        shared: Arc::clone(shared),
        principal: principal.to_owned(),
    })
}
