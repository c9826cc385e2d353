//! The trajectory of a session: the outer `exec`/`wait` control calls and
//! every nested tool call, each naming its parent code-mode call, in the
//! order they ended. Exportable as JSON lines for support bundles.
//!
//! Records hold ids, names, sizes and outcomes, never tool inputs or
//! results (no unredacted inputs; see `docs/results-and-errors.md`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

/// One trajectory record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TrajectoryEvent {
    /// An outer `exec` or `wait` call the model made.
    CodeModeCall {
        /// The model's tool-call id for it.
        #[serde(rename = "callId")]
        call_id: String,
        /// `exec` or `wait`.
        tool: &'static str,
        /// `code_mode_exec` or `code_mode_wait` (what hooks see).
        #[serde(rename = "toolKind")]
        tool_kind: &'static str,
        /// For exec: `javascript` or `typescript`.
        #[serde(rename = "toolInputKind", skip_serializing_if = "Option::is_none")]
        tool_input_kind: Option<&'static str>,
        /// The code-mode run it belongs to, once it has one.
        #[serde(rename = "runId", skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        /// `completed`, `waiting` or `failed`.
        status: &'static str,
        /// The error code of a failure.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'static str>,
        /// Wall time, in milliseconds.
        #[serde(rename = "durationMs")]
        duration_ms: f64,
    },
    /// A nested tool call made by guest code.
    NestedToolCall {
        /// The outer `exec` call that started the run.
        #[serde(rename = "parentCallId")]
        parent_call_id: String,
        /// This call's id (also in `pendingToolCalls`).
        #[serde(rename = "callId")]
        call_id: String,
        /// The catalog id of the tool.
        #[serde(rename = "toolId")]
        tool_id: String,
        /// `ok`, `error` or `cancelled`.
        status: &'static str,
        /// The failure message, for `error`.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Size of the JSON input, in bytes.
        #[serde(rename = "inputBytes")]
        input_bytes: u64,
        /// Size of the JSON result, in bytes (0 unless `ok`).
        #[serde(rename = "resultBytes")]
        result_bytes: u64,
        /// Wall time from start to end, in milliseconds.
        #[serde(rename = "durationMs")]
        duration_ms: f64,
    },
}

/// A shared, append-only trajectory (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Trajectory {
    events: Arc<Mutex<VecDeque<TrajectoryEvent>>>,
}

/// Records kept per trajectory; older ones are dropped first (a long-lived
/// session must not grow without bound).
const MAX_EVENTS: usize = 10_000;

impl Trajectory {
    /// Appends a record (and logs it at debug level).
    pub fn record(&self, event: TrajectoryEvent) {
        tracing::debug!(target: "codemode::trajectory", event = ?event);
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(event);
    }

    /// A copy of all records so far.
    pub fn events(&self) -> Vec<TrajectoryEvent> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// All records as JSON lines (one object per line).
    pub fn to_json_lines(&self) -> String {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for event in events.iter() {
            if let Ok(line) = serde_json::to_string(event) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }
}
