//! The model-visible result union (`docs/results-and-errors.md`) and its wire
//! form.
//!
//! Field names are exactly the contract's: `status`, `value`, `output`,
//! `telemetry`, `runId`, `reason`, `pendingToolCalls`, `error`, `code`, plus
//! the effect receipts `nestedCalls` / `nestedCallsOmitted`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The error codes of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(
    missing_docs,
    reason = "each variant is the contract's code of the same name"
)]
pub enum ErrorCode {
    RuntimeUnavailable,
    /// The runtime works but is at a capacity limit right now: no live-VM
    /// slot freed within the queue timeout, the principal is at
    /// `auth.maxConcurrentExecs`, or the durable run store cannot be
    /// reached. Nothing was started (a waiting run keeps waiting): retry
    /// shortly. `runtime_unavailable` keeps the reference's meaning (the
    /// sandbox cannot run at all), which retrying does not fix.
    RuntimeBusy,
    InvalidConfig,
    InvalidInput,
    UnsupportedLanguage,
    TypescriptTransformFailed,
    ModuleAccessDenied,
    Timeout,
    MemoryLimitExceeded,
    OutputLimitExceeded,
    SnapshotLimitExceeded,
    SnapshotExpired,
    SnapshotRestoreFailed,
    TooManyPendingToolCalls,
    NestedToolFailed,
    /// A nested call was denied (by a human, the approval policy or a
    /// `before_tool_call` hook), or an exec was blocked by a hook. Guests
    /// see it on the rejected promise; an uncaught denial fails the cell
    /// with `nested_tool_failed`.
    ApprovalDenied,
    /// A nested call's process died before it answered (a durable run
    /// resumed after a restart or on another replica): it may or may not
    /// have taken effect, and it is never re-run. Guests see it on the
    /// rejected promise; uncaught, it fails the cell with
    /// `nested_tool_failed`.
    Interrupted,
    Aborted,
    InternalError,
}

impl ErrorCode {
    /// Parses a wire name.
    pub fn from_wire(text: &str) -> Option<ErrorCode> {
        serde_json::from_value(Value::String(text.to_owned())).ok()
    }

    /// The wire name, e.g. `memory_limit_exceeded`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::RuntimeUnavailable => "runtime_unavailable",
            ErrorCode::RuntimeBusy => "runtime_busy",
            ErrorCode::InvalidConfig => "invalid_config",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::UnsupportedLanguage => "unsupported_language",
            ErrorCode::TypescriptTransformFailed => "typescript_transform_failed",
            ErrorCode::ModuleAccessDenied => "module_access_denied",
            ErrorCode::Timeout => "timeout",
            ErrorCode::MemoryLimitExceeded => "memory_limit_exceeded",
            ErrorCode::OutputLimitExceeded => "output_limit_exceeded",
            ErrorCode::SnapshotLimitExceeded => "snapshot_limit_exceeded",
            ErrorCode::SnapshotExpired => "snapshot_expired",
            ErrorCode::SnapshotRestoreFailed => "snapshot_restore_failed",
            ErrorCode::TooManyPendingToolCalls => "too_many_pending_tool_calls",
            ErrorCode::NestedToolFailed => "nested_tool_failed",
            ErrorCode::ApprovalDenied => "approval_denied",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::Aborted => "aborted",
            ErrorCode::InternalError => "internal_error",
        }
    }
}

/// One output item, in guest call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Output {
    /// From `text(...)`.
    Text {
        /// The text.
        text: String,
    },
    /// From `json(...)`.
    Json {
        /// The JSON value.
        value: Value,
    },
}

impl Output {
    /// Bytes this item counts against `maxOutputBytes`.
    pub fn size_bytes(&self) -> usize {
        match self {
            Output::Text { text } => text.len(),
            Output::Json { value } => value.to_string().len(),
        }
    }
}

/// Why a run waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Nested calls are still running.
    PendingTools,
    /// The guest called `yield_control(...)`.
    Yield,
    /// Nested calls wait for a human's approval (their
    /// `pendingToolCalls` entries say `awaitingApproval`), and nothing
    /// else runs.
    Approval,
}

/// A nested call the suspended run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingToolCall {
    /// The nested call's id.
    pub id: String,
    /// The catalog id of the tool.
    pub tool_id: String,
    /// The bridge method (`call`, ...).
    pub method: String,
    /// The call waits for approval: it has not started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_approval: bool,
    /// For a call awaiting approval: its input, redacted (secret-looking
    /// keys masked) and bounded, for the human who decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_summary: Option<String>,
}

/// What became of a nested call (an effect receipt): ids, no input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallReceipt {
    /// The nested call's id.
    pub id: String,
    /// The catalog id of the tool (`mcp:<server>:<method>` for resource
    /// and prompt requests).
    pub tool_id: String,
    /// How it ended.
    pub outcome: CallOutcome,
}

/// How a nested call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallOutcome {
    /// It answered with a result: its effect happened.
    Ok,
    /// It answered with an error.
    Failed,
    /// It was denied (approval or hook) and never started: no effect.
    Denied,
    /// It was cancelled by an abort or cancellation while running: it may
    /// or may not have taken effect.
    Cancelled,
    /// The run ended (returned, failed or timed out) while it was still
    /// running, and it was cancelled then: it may or may not have taken
    /// effect.
    Unknown,
}

/// Longest list of receipts in one result; the rest are counted.
pub const MAX_CALL_RECEIPTS: usize = 64;

/// The nested calls that ended during one `exec` or `wait`, in the order
/// they ended (calls still running are the `pendingToolCalls` of a
/// waiting result). After a failed cell the model can see which effects
/// already happened instead of re-running them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipts {
    /// The first [`MAX_CALL_RECEIPTS`] of them.
    #[serde(rename = "nestedCalls", skip_serializing_if = "Vec::is_empty", default)]
    pub calls: Vec<CallReceipt>,
    /// How many more ended without a receipt in `calls`.
    #[serde(
        rename = "nestedCallsOmitted",
        skip_serializing_if = "is_zero",
        default
    )]
    pub omitted: u32,
}

impl Receipts {
    /// Records one; past the cap only counts it.
    pub(crate) fn push(&mut self, receipt: CallReceipt) {
        if self.calls.len() < MAX_CALL_RECEIPTS {
            self.calls.push(receipt);
        } else {
            self.omitted = self.omitted.saturating_add(1);
        }
    }
}

/// A snapshot lifecycle event, for telemetry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotEvent {
    /// `suspended`, `restored`, `discarded` or `expired`.
    pub event: String,
    /// Snapshot bytes held in memory, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// How long the operation took, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micros: Option<u64>,
}

/// What a result reports about how it was produced. Never holds secrets or
/// tool inputs. The default is what a result refused before anything ran
/// reports: language `javascript`, visible tools `exec` and `wait`, no
/// counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Telemetry {
    /// The cell language.
    pub language: String,
    /// Wall time of this exec or wait, in milliseconds (to the
    /// microsecond on the wire).
    #[serde(serialize_with = "rounded_ms")]
    pub duration_ms: f64,
    /// Exec calls of this run so far (1 for a fresh exec).
    pub exec_count: u32,
    /// Wait calls of this run so far.
    pub wait_count: u32,
    /// Linear memory of the VM when it stopped, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_memory_bytes: Option<u64>,
    /// Bytes of output (text, json and value) in this result.
    pub output_bytes: u64,
    /// Which limit stopped the cell, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_failure: Option<ErrorCode>,
    /// Snapshot lifecycle events of this call.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub snapshot_events: Vec<SnapshotEvent>,
    /// The tool names the model sees (`exec`, `wait`).
    #[serde(default)]
    pub visible_tools: Vec<String>,
    /// Entries in the run's hidden catalog (MCP included).
    #[serde(default)]
    pub catalog_size: u32,
    /// Catalog entries by source.
    #[serde(default)]
    pub catalog_by_source: std::collections::BTreeMap<String, u32>,
    /// `tools.search` requests of this run so far.
    #[serde(default)]
    pub nested_search_count: u32,
    /// `tools.describe` requests of this run so far.
    #[serde(default)]
    pub nested_describe_count: u32,
    /// `API.list`, `API.read` and `MCP.<server>.$api` requests of this run
    /// so far (answered by the host, not tool calls).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nested_api_count: u32,
    /// Nested tool calls of this run so far (MCP tool, resource and prompt
    /// requests included).
    #[serde(default)]
    pub nested_call_count: u32,
    /// Catalog ids called so far, in first-call order.
    #[serde(default)]
    pub nested_tool_ids: Vec<String>,
    /// Nested calls cancelled (abort, failure, or still running when the
    /// run ended).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled_tool_calls: u32,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            language: "javascript".into(),
            duration_ms: 0.0,
            exec_count: 0,
            wait_count: 0,
            vm_memory_bytes: None,
            output_bytes: 0,
            limit_failure: None,
            snapshot_events: Vec::new(),
            visible_tools: vec!["exec".into(), "wait".into()],
            catalog_size: 0,
            catalog_by_source: Default::default(),
            nested_search_count: 0,
            nested_describe_count: 0,
            nested_api_count: 0,
            nested_call_count: 0,
            nested_tool_ids: Vec::new(),
            cancelled_tool_calls: 0,
        }
    }
}

impl Telemetry {
    /// The telemetry of a result refused before a cell in `language` ran.
    pub fn refused(language: &str) -> Self {
        Telemetry {
            language: language.into(),
            ..Telemetry::default()
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Milliseconds to three decimals (a microsecond): `5.048` rather than
/// `5.0481609999999995`.
fn rounded_ms<S: serde::Serializer>(ms: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64((ms * 1000.0).round() / 1000.0)
}

/// The result of `exec` or `wait`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CodeModeResult {
    /// The cell finished.
    Completed {
        /// Its return value (`undefined` becomes `null`).
        value: Value,
        /// `text`/`json` output in call order.
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        output: Vec<Output>,
        /// Nested calls that ended during this exec/wait.
        #[serde(flatten)]
        receipts: Receipts,
        /// How it ran.
        telemetry: Telemetry,
    },
    /// The cell is suspended; call `wait` with `runId`.
    Waiting {
        /// The run to resume.
        #[serde(rename = "runId")]
        run_id: String,
        /// Why it waits.
        reason: WaitReason,
        /// Calls still in flight.
        #[serde(
            rename = "pendingToolCalls",
            skip_serializing_if = "Vec::is_empty",
            default
        )]
        pending_tool_calls: Vec<PendingToolCall>,
        /// Output produced before suspending.
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        output: Vec<Output>,
        /// Nested calls that ended during this exec/wait.
        #[serde(flatten)]
        receipts: Receipts,
        /// How it ran.
        telemetry: Telemetry,
    },
    /// The cell failed.
    Failed {
        /// A message for the model: what went wrong and what to do instead.
        error: String,
        /// A machine-readable code, when one applies.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<ErrorCode>,
        /// Output produced before the failure.
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        output: Vec<Output>,
        /// Nested calls that ended during this exec/wait (which effects
        /// already happened).
        #[serde(flatten)]
        receipts: Receipts,
        /// How it ran.
        telemetry: Telemetry,
    },
}

impl CodeModeResult {
    /// A failure with a code and no output.
    pub fn failure(
        code: ErrorCode,
        error: impl Into<String>,
        telemetry: Telemetry,
    ) -> CodeModeResult {
        CodeModeResult::Failed {
            error: error.into(),
            code: Some(code),
            output: Vec::new(),
            receipts: Receipts::default(),
            telemetry,
        }
    }

    /// The nested calls that ended during this exec/wait.
    pub fn receipts(&self) -> &Receipts {
        match self {
            CodeModeResult::Completed { receipts, .. }
            | CodeModeResult::Waiting { receipts, .. }
            | CodeModeResult::Failed { receipts, .. } => receipts,
        }
    }

    pub(crate) fn receipts_mut(&mut self) -> &mut Receipts {
        match self {
            CodeModeResult::Completed { receipts, .. }
            | CodeModeResult::Waiting { receipts, .. }
            | CodeModeResult::Failed { receipts, .. } => receipts,
        }
    }

    /// `completed`, `waiting` or `failed`.
    pub fn status(&self) -> &'static str {
        match self {
            CodeModeResult::Completed { .. } => "completed",
            CodeModeResult::Waiting { .. } => "waiting",
            CodeModeResult::Failed { .. } => "failed",
        }
    }

    /// This result of a run, preceded by an earlier part of the same run
    /// that was answered without a result (a 2026-07-28 client was asked
    /// for input instead): the earlier output and receipts come first, so
    /// the model sees the whole run once.
    #[must_use]
    pub fn after_earlier(mut self, output: Vec<Output>, receipts: Receipts) -> CodeModeResult {
        let mut merged = receipts;
        let later = std::mem::take(self.receipts_mut());
        for receipt in later.calls {
            merged.push(receipt);
        }
        merged.omitted = merged.omitted.saturating_add(later.omitted);
        *self.receipts_mut() = merged;
        match &mut self {
            CodeModeResult::Completed { output: now, .. }
            | CodeModeResult::Waiting { output: now, .. }
            | CodeModeResult::Failed { output: now, .. } => {
                let mut all = output;
                all.append(now);
                *now = all;
            }
        }
        self
    }

    /// The error code of a failure.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            CodeModeResult::Failed { code, .. } => *code,
            _ => None,
        }
    }

    /// The telemetry of any result.
    pub fn telemetry(&self) -> &Telemetry {
        match self {
            CodeModeResult::Completed { telemetry, .. }
            | CodeModeResult::Waiting { telemetry, .. }
            | CodeModeResult::Failed { telemetry, .. } => telemetry,
        }
    }

    /// The result as a JSON value with the contract's field names.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| {
            serde_json::json!({ "status": "failed", "error": format!("result could not be serialized: {e}"), "code": "internal_error", "telemetry": {} })
        })
    }

    /// The result as the model should see it: everything it acts on
    /// (status, value, output, error, code, runId, pending calls,
    /// receipts) and a short telemetry summary (`durationMs` to 0.1 ms,
    /// `nestedCallCount`, and `limitFailure` when a limit stopped the
    /// cell). The full telemetry is for operators ([`CodeModeResult::telemetry`]).
    pub fn to_model_json(&self) -> Value {
        let mut value = self.to_json();
        let telemetry = self.telemetry();
        let mut summary = serde_json::Map::new();
        summary.insert(
            "durationMs".into(),
            serde_json::json!((telemetry.duration_ms * 10.0).round() / 10.0),
        );
        summary.insert(
            "nestedCallCount".into(),
            serde_json::json!(telemetry.nested_call_count),
        );
        if let Some(code) = telemetry.limit_failure {
            summary.insert("limitFailure".into(), serde_json::json!(code.as_str()));
        }
        if let Some(object) = value.as_object_mut() {
            object.insert("telemetry".into(), Value::Object(summary));
        }
        value
    }

    /// A one-paragraph text of the result for clients that read only text
    /// beside `structuredContent`: the status, then the bounded value,
    /// error or run id (at most about 600 bytes).
    pub fn summary_text(&self) -> String {
        const VALUE_BYTES: usize = 400;
        let cut = |text: String| {
            let bytes = text.len();
            if bytes <= VALUE_BYTES {
                text
            } else {
                let mut end = VALUE_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                format!(
                    "{}… ({bytes} bytes; the whole result is in structuredContent)",
                    &text[..end]
                )
            }
        };
        let output = |output: &[Output]| match output.len() {
            0 => String::new(),
            1 => "; 1 output item".to_owned(),
            n => format!("; {n} output items"),
        };
        match self {
            CodeModeResult::Completed {
                value, output: out, ..
            } => {
                format!("completed: {}{}", cut(value.to_string()), output(out))
            }
            CodeModeResult::Waiting {
                run_id,
                reason,
                pending_tool_calls,
                output: out,
                ..
            } => format!(
                "waiting ({}): runId {run_id}, {} call{} pending{}; call wait({{ runId: \"{run_id}\" }})",
                serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                pending_tool_calls.len(),
                if pending_tool_calls.len() == 1 {
                    ""
                } else {
                    "s"
                },
                output(out)
            ),
            CodeModeResult::Failed {
                error,
                code,
                output: out,
                ..
            } => format!(
                "failed{}: {}{}",
                code.map(|c| format!(" ({})", c.as_str()))
                    .unwrap_or_default(),
                cut(error.clone()),
                output(out)
            ),
        }
    }
}

/// Bytes of `value` as compact JSON, counted without building the text
/// (this runs twice per nested call: input and result sizes).
pub(crate) fn json_len(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_names_follow_the_contract() {
        let waiting = CodeModeResult::Waiting {
            run_id: "run_1".into(),
            reason: WaitReason::PendingTools,
            pending_tool_calls: vec![PendingToolCall {
                id: "c1".into(),
                tool_id: "openclaw:core:x".into(),
                method: "call".into(),
                awaiting_approval: false,
                input_summary: None,
            }],
            output: vec![Output::Text { text: "hi".into() }],
            receipts: Receipts {
                calls: vec![CallReceipt {
                    id: "c0".into(),
                    tool_id: "openclaw:core:y".into(),
                    outcome: CallOutcome::Ok,
                }],
                omitted: 0,
            },
            telemetry: Telemetry::default(),
        };
        let v = waiting.to_json();
        assert_eq!(v["status"], "waiting");
        assert_eq!(v["runId"], "run_1");
        assert_eq!(v["reason"], "pending_tools");
        assert_eq!(v["pendingToolCalls"][0]["toolId"], "openclaw:core:x");
        assert_eq!(v["output"][0], json!({"type": "text", "text": "hi"}));
        assert_eq!(
            v["nestedCalls"],
            json!([{"id": "c0", "toolId": "openclaw:core:y", "outcome": "ok"}])
        );
        assert!(v.get("nestedCallsOmitted").is_none());
        let back: CodeModeResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, waiting);
        let failed =
            CodeModeResult::failure(ErrorCode::MemoryLimitExceeded, "boom", Telemetry::default())
                .to_json();
        assert_eq!(failed["code"], "memory_limit_exceeded");
        assert_eq!(failed["error"], "boom");
        assert!(failed.get("output").is_none());
        assert!(failed.get("nestedCalls").is_none());
    }

    #[test]
    fn code_names_match_serde() {
        for code in [
            ErrorCode::RuntimeUnavailable,
            ErrorCode::RuntimeBusy,
            ErrorCode::TypescriptTransformFailed,
            ErrorCode::TooManyPendingToolCalls,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        }
    }
}
