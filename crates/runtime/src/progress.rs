//! Progress of a running `exec`/`wait`, for hosts that show it (the
//! gateway turns it into MCP `notifications/progress`): nested calls
//! started and finished, a nested call's own progress (an upstream's
//! `notifications/progress`), and the cell's `progress(value, total?,
//! message?)`. Reported only while an `exec`/`wait` with a sink drives the
//! run; nothing is buffered for a suspended run.

use std::sync::{Arc, Mutex, PoisonError};

/// One thing that happened.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressUpdate {
    /// A nested call started.
    CallStarted {
        /// The nested call's id.
        call_id: String,
        /// Its catalog id.
        tool_id: String,
    },
    /// A nested call ended.
    CallFinished {
        /// The nested call's id.
        call_id: String,
        /// Its catalog id.
        tool_id: String,
        /// It returned a result (not an error, denial or cancellation).
        ok: bool,
    },
    /// A nested call's own progress (e.g. its MCP server's).
    Call {
        /// The nested call's id.
        call_id: String,
        /// Its catalog id.
        tool_id: String,
        /// Progress so far.
        progress: f64,
        /// The total, when known.
        total: Option<f64>,
        /// What it is doing (bounded).
        message: Option<String>,
    },
    /// The cell's `progress(value, total?, message?)`.
    Cell {
        /// The value it reported.
        value: f64,
        /// The total, when given.
        total: Option<f64>,
        /// Its message (bounded).
        message: Option<String>,
    },
}

/// Receives the progress of one `exec`/`wait` (see
/// [`crate::CallOptions::progress`]). Called from the
/// runtime's threads: keep it quick (queue, rate-limit, send).
pub trait ProgressSink: Send + Sync {
    /// One update.
    fn report(&self, update: ProgressUpdate);
}

/// The longest progress message passed on.
pub const MAX_PROGRESS_MESSAGE: usize = 256;

/// Where a run's progress goes now: the sink of the `exec`/`wait` driving
/// it, or nowhere while it is suspended.
#[derive(Clone, Default)]
pub(crate) struct ProgressSlot(Arc<Mutex<Option<Arc<dyn ProgressSink>>>>);

impl ProgressSlot {
    pub(crate) fn set(&self, sink: Option<Arc<dyn ProgressSink>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = sink;
    }

    pub(crate) fn report(&self, update: ProgressUpdate) {
        let sink = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(sink) = sink {
            sink.report(update);
        }
    }
}

/// Given to an executor with each nested call: reports that call's own
/// progress to whoever follows the run now.
#[derive(Clone)]
pub struct CallProgress {
    slot: ProgressSlot,
    call_id: String,
    tool_id: String,
}

impl std::fmt::Debug for CallProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallProgress")
            .field("call_id", &self.call_id)
            .finish_non_exhaustive()
    }
}

impl CallProgress {
    pub(crate) fn new(slot: ProgressSlot, call_id: &str, tool_id: &str) -> CallProgress {
        CallProgress {
            slot,
            call_id: call_id.to_owned(),
            tool_id: tool_id.to_owned(),
        }
    }

    /// A reporter that reports nowhere (for tests and harnesses).
    pub fn none() -> CallProgress {
        CallProgress::new(ProgressSlot::default(), "", "")
    }

    /// Reports the call's progress (dropped while nobody follows the run).
    pub fn report(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if !progress.is_finite() {
            return;
        }
        self.slot.report(ProgressUpdate::Call {
            call_id: self.call_id.clone(),
            tool_id: self.tool_id.clone(),
            progress,
            total: total.filter(|t| t.is_finite()),
            message: message.map(bounded_message),
        });
    }
}

/// A message cut to [`MAX_PROGRESS_MESSAGE`] bytes.
pub(crate) fn bounded_message(message: &str) -> String {
    codemode_sandbox::bounded_text(message.to_owned(), MAX_PROGRESS_MESSAGE)
}
