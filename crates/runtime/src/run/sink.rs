//! Where a waiting run's nested results go while the run is held by a
//! store that outlives the process ([`ResultSink`]), the deferred claim of
//! a resumed run, and
//! the stored form of one call's outcome. Below the calls that write them.

use std::sync::{Arc, Mutex, PoisonError};

use codemode_store::RunBackend;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::executor::ToolCallError;

/// The claim of a resumed run, made lasting before the run's first new
/// nested call ([`RunBackend::confirm_claim`]): a store one process holds
/// alone keeps it in memory until then, so a resume that only delivers
/// results and ends costs no write that must reach the disk.
pub(crate) struct DeferredClaim {
    pub(crate) backend: Arc<dyn RunBackend>,
    pub(crate) run_id: String,
}

impl DeferredClaim {
    /// Makes the claim lasting now.
    ///
    /// # Errors
    /// Why the store could not record it (the call must not start).
    pub(crate) fn take(self) -> Result<(), ToolCallError> {
        self.backend.confirm_claim(&self.run_id).map_err(|e| {
            ToolCallError::new(format!(
                "the run store could not record that this run resumed ({e}); the call was not started"
            ))
        })
    }
}

/// Where a run's nested-call results are written while it waits in a
/// store that outlives the process; shared with the tasks of its calls.
#[derive(Clone, Default)]
pub(crate) struct ResultSink(Arc<Mutex<Option<Target>>>);

#[derive(Clone)]
struct Target {
    backend: Arc<dyn RunBackend>,
    run_id: Arc<str>,
}

impl ResultSink {
    /// From now on results are written under `run_id`.
    pub(crate) fn persist_to(&self, backend: &Arc<dyn RunBackend>, run_id: &str) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Target {
            backend: Arc::clone(backend),
            run_id: Arc::from(run_id),
        });
    }

    /// The run is live in this process again: results only go to it.
    pub(crate) fn stop(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn target(&self) -> Option<Target> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes a finished call's outcome, if the run waits in a store (off
    /// the async workers: the write blocks).
    pub(crate) async fn record(&self, request_id: u32, outcome: &Result<Value, ToolCallError>) {
        let Some(target) = self.target() else {
            return;
        };
        let bytes = encode_outcome(outcome);
        let written = tokio::task::spawn_blocking(move || {
            target
                .backend
                .put_result(&target.run_id, request_id, &bytes)
                .map_err(|e| (target.run_id, e))
        })
        .await;
        if let Ok(Err((run_id, e))) = written {
            // The process still delivers it when the run resumes here.
            tracing::warn!(run_id = %run_id, request_id, error = %e, "a nested call's result could not be written to the run store");
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum StoredOutcome {
    Ok(Value),
    Err {
        message: String,
        denied: bool,
        #[serde(default)]
        interrupted: bool,
    },
}

pub(crate) fn encode_outcome(outcome: &Result<Value, ToolCallError>) -> Vec<u8> {
    let stored = match outcome {
        Ok(v) => StoredOutcome::Ok(v.clone()),
        Err(e) => StoredOutcome::Err {
            message: e.message.clone(),
            denied: e.denied,
            interrupted: e.interrupted,
        },
    };
    serde_json::to_vec(&stored).unwrap_or_default()
}

pub(crate) fn decode_outcome(bytes: &[u8]) -> Result<Value, ToolCallError> {
    match serde_json::from_slice(bytes) {
        Ok(StoredOutcome::Ok(v)) => Ok(v),
        Ok(StoredOutcome::Err {
            message,
            denied,
            interrupted,
        }) => Err(ToolCallError {
            message,
            denied,
            interrupted,
        }),
        Err(_) => Err(ToolCallError::interrupted(
            "the stored result of this call is damaged; the call may or may not have taken effect",
        )),
    }
}

/// The message of a call whose process died.
pub(crate) fn interrupted_call(tool_id: &str) -> ToolCallError {
    ToolCallError::interrupted(format!(
        "the nested call to {tool_id} was interrupted: the process running it stopped before it answered (a gateway restart, or a replica that went away). It may or may not have taken effect; it was not run again. Check its effect before you call it again."
    ))
}
