//! Approvals for clients without a session (2026-07-28 stateless
//! requests): such a request cannot carry a server request back, so the
//! question rides in the tool result (MCP's multi-round-trip requests).
//!
//! When an `exec` or `wait` of a client that declares form elicitation
//! ends waiting only for approvals, its answer is an `input_required`
//! result: one form per call awaiting approval, keyed by the call id, and
//! a `requestState` naming the run. The client answers and sends the same
//! request again with `inputResponses` and the echoed `requestState`; the
//! gateway decides the calls as the run's resumer (the state is never
//! trusted alone: ownership is checked as `wait` checks it) and goes on
//! with the run as `wait` does. Output and receipts of the parts answered
//! with questions ride in the state, so the final result shows the whole
//! run once.

use codemode_runtime::{
    ApprovalDecision, CodeModeResult, CodeModeSession, Output, Receipts, WaitReason,
};
use rmcp::model::{
    ElicitRequest, ElicitResult, InputRequest, InputRequests, InputRequiredResult, InputResponses,
};
use serde::{Deserialize, Serialize};
use tracing::{debug, info};

/// Marks a `requestState` this gateway wrote (and its format).
const STATE_PREFIX: &str = "codemode.approvals.v1:";

/// The largest `requestState` read back: the run's output and receipts
/// are bounded far below it.
const MAX_STATE_BYTES: usize = 8 << 20;

/// What the client echoes back.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Earlier {
    run_id: String,
    #[serde(default)]
    output: Vec<Output>,
    #[serde(default)]
    receipts: Receipts,
}

impl Earlier {
    /// The run the client answers about.
    pub(super) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// `result`, preceded by the parts of the run answered with questions.
    pub(super) fn before(self, result: CodeModeResult) -> CodeModeResult {
        result.after_earlier(self.output, self.receipts)
    }
}

/// The questions for `result` when it waits only for approvals; any other
/// result is given back.
pub(super) fn questions(
    session: &CodeModeSession,
    result: CodeModeResult,
) -> Result<InputRequiredResult, CodeModeResult> {
    let CodeModeResult::Waiting {
        run_id,
        reason: WaitReason::Approval,
        pending_tool_calls,
        output,
        receipts,
        ..
    } = &result
    else {
        return Err(result);
    };
    let catalog = session.catalog();
    let mut requests = InputRequests::new();
    for call in pending_tool_calls.iter().filter(|c| c.awaiting_approval) {
        let Some(entry) = catalog.get(&call.tool_id) else {
            return Err(result);
        };
        let summary = call.input_summary.as_deref().unwrap_or("(not shown)");
        match crate::approvals::question(entry, summary, false) {
            Ok(params) => {
                requests.insert(
                    call.id.clone(),
                    InputRequest::Elicitation(ElicitRequest::new(params)),
                );
            }
            Err(e) => {
                debug!(error = %e, "approval question could not be built");
                return Err(result);
            }
        }
    }
    if requests.is_empty() {
        return Err(result);
    }
    let state = Earlier {
        run_id: run_id.clone(),
        output: output.clone(),
        receipts: receipts.clone(),
    };
    let Ok(state) = serde_json::to_string(&state) else {
        return Err(result);
    };
    info!(run = %run_id, calls = requests.len(), "approval asked in the result (input_required)");
    Ok(InputRequiredResult::new(
        Some(requests),
        Some(format!("{STATE_PREFIX}{state}")),
    ))
}

/// Reads the client's answers to [`questions`] and decides the calls as
/// `session` (whoever may resume the run); what it echoed of the run.
///
/// # Errors
/// A message for the model when the state is not one this gateway wrote.
pub(super) fn answer(
    session: &CodeModeSession,
    state: &str,
    responses: Option<&InputResponses>,
) -> Result<Earlier, String> {
    let earlier = parse_state(state)?;
    for (call_id, response) in responses.into_iter().flatten() {
        let decision = match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(result) => crate::approvals::decision_of(&result).0,
            Err(_) => ApprovalDecision::Deny {
                reason: "the client's answer to the approval question could not be read".into(),
            },
        };
        info!(run = %earlier.run_id, call = %call_id, ?decision, "approval answered in a request (input_required)");
        // Decided already, or not this client's: the run's state says so.
        if let Err(e) = session.decide_as_resumer(&earlier.run_id, call_id, decision) {
            debug!(error = %e, "approval answer not applied");
        }
    }
    Ok(earlier)
}

fn parse_state(state: &str) -> Result<Earlier, String> {
    state
        .strip_prefix(STATE_PREFIX)
        .filter(|json| json.len() <= MAX_STATE_BYTES)
        .and_then(|json| serde_json::from_str::<Earlier>(json).ok())
        .ok_or_else(|| {
            "the requestState sent back is not one this gateway wrote (send it back unchanged, or call wait with the runId)"
                .to_owned()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_round_trips_and_foreign_states_are_refused() {
        let earlier = Earlier {
            run_id: "run-1".into(),
            output: vec![Output::Text {
                text: "before".into(),
            }],
            receipts: Receipts::default(),
        };
        let state = format!("{STATE_PREFIX}{}", serde_json::to_string(&earlier).unwrap());
        let back = parse_state(&state).unwrap();
        assert_eq!(back.run_id(), "run-1");
        assert_eq!(back.output.len(), 1);
        for bad in [
            "",
            "run-1",
            "codemode.approvals.v1:{",
            "codemode.approvals.v2:{}",
        ] {
            let refused = parse_state(bad).unwrap_err();
            assert!(refused.contains("not one this gateway wrote"), "{refused}");
        }
    }
}
