//! The live side of a scope (agent, session, agent run): whether it was
//! aborted, the drives running in it now and how to stop them, and its
//! share of live VMs. Below the run machinery: drives register here, abort
//! and cancellation reach them from here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde_json::Value;

use crate::executor::{Scope, ToolCallError};

/// Told when the last holder of a scope is gone (the agent run ended): its
/// suspended runs and bookkeeping go too. The process's host implements it.
pub(crate) trait ScopeEnd: Send + Sync {
    fn scope_ended(&self, scope: &Scope);
}

/// What reaches a drive through the run's channel.
pub(crate) enum Msg {
    /// A spawned call finished.
    Done {
        request_id: u32,
        outcome: Result<Value, ToolCallError>,
    },
    /// The run's scope was aborted.
    Abort,
    /// A gated call now waits for a decision: the drive re-checks whether
    /// anything else keeps the cell busy.
    AwaitingApproval,
}

/// Abort state of one scope, shared by its sessions and live drives.
pub(crate) struct ScopeState {
    pub(crate) scope: Scope,
    aborted: AtomicBool,
    /// Live drives to wake on abort.
    live: Mutex<LiveDrives>,
    /// This scope's share of the process's live VMs.
    pub(crate) vm_slots: crate::slots::ScopeSlots,
    ended: Weak<dyn ScopeEnd>,
}

impl ScopeState {
    pub(crate) fn new(
        scope: Scope,
        vm_slots: crate::slots::ScopeSlots,
        ended: Weak<dyn ScopeEnd>,
    ) -> ScopeState {
        ScopeState {
            scope,
            aborted: AtomicBool::new(false),
            live: Mutex::new(LiveDrives::default()),
            vm_slots,
            ended,
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
    pub(crate) wake: flume::Sender<Msg>,
    /// Interrupts its guest and refuses new nested calls.
    pub(crate) cancel: codemode_sandbox::CancelFlag,
}

impl LiveDrive {
    fn stop(&self) {
        self.cancel.cancel();
        let _ = self.wake.send(Msg::Abort);
    }
}

impl Drop for ScopeState {
    /// The last session of the scope is gone: the agent run ended, so its
    /// suspended runs (and their in-flight calls) go too.
    fn drop(&mut self) {
        if let Some(ended) = self.ended.upgrade() {
            ended.scope_ended(&self.scope);
        }
    }
}

/// Cancels calls of one session; see [`crate::CodeModeSession::canceller`].
#[derive(Clone)]
pub struct CallCanceller {
    pub(crate) scope: Arc<ScopeState>,
}

impl std::fmt::Debug for CallCanceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallCanceller").finish_non_exhaustive()
    }
}

impl CallCanceller {
    /// As [`crate::CodeModeSession::cancel_call`].
    pub fn cancel_call(&self, call_id: &str) -> bool {
        self.scope.cancel_call(call_id)
    }
}
