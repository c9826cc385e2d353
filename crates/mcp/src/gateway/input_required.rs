//! Questions for clients without a session (2026-07-28 stateless
//! requests): such a request cannot carry a server request back, so the
//! question rides in the tool result (MCP's multi-round-trip requests).
//! Two kinds:
//!
//! **An upstream's elicitation** during a nested call: the request's work
//! (its exec or wait) runs in a task; when an upstream asks its user, the
//! request answers `input_required` with the question and parks the work
//! ([`Parked`]) under a random token in `requestState`. The client's next
//! request brings the answer, which goes to the upstream, and takes the
//! work up again (in this process: a token another process wrote is
//! refused with what to do).
//!
//! **Approvals:**
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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use codemode_runtime::{
    ApprovalDecision, CodeModeResult, CodeModeSession, ErrorCode, Output, Receipts, Telemetry,
    WaitReason,
};
use rmcp::model::{
    ElicitRequest, ElicitResult, InputRequest, InputRequests, InputRequiredResult, InputResponses,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use crate::relay::{Question, Questions};

/// Marks a `requestState` naming parked work (an upstream's question).
const PARKED_PREFIX: &str = "codemode.parked.v1:";

/// How long parked work waits for its client's answer.
const PARKED_FOR: Duration = Duration::from_secs(600);

/// Parked work held at once; past it the oldest is let go (its question
/// then fails for the upstream, and its run goes on without the answer).
const MAX_PARKED: usize = 1024;

/// The request's work on a run while its client is asked in results.
pub(super) struct Conversation {
    work: JoinHandle<CodeModeResult>,
    questions: Questions,
    /// Questions asked and not answered yet, by their key.
    asked: BTreeMap<String, oneshot::Sender<ElicitResult>>,
    /// Questions asked so far (for fresh keys).
    count: u64,
    /// What the client was shown of the run before (approvals).
    earlier: Option<Earlier>,
}

/// What a turn of a [`Conversation`] gives the client.
pub(super) enum Turn {
    /// The exec's or wait's result.
    Done(CodeModeResult),
    /// Questions, with the work parked until the answers come.
    Ask(InputRequiredResult),
}

impl Conversation {
    /// `work` (an exec or wait running), taking the questions upstreams
    /// put to this client.
    pub(super) fn start(
        work: JoinHandle<CodeModeResult>,
        questions: Questions,
        earlier: Option<Earlier>,
    ) -> Conversation {
        Conversation {
            work,
            questions,
            asked: BTreeMap::new(),
            count: 0,
            earlier,
        }
    }

    /// Hands the client's answers to the upstreams that asked.
    pub(super) fn answer(&mut self, responses: Option<&InputResponses>) {
        for (key, response) in responses.into_iter().flatten() {
            let Some(waiting) = self.asked.remove(key) else {
                debug!(%key, "an answer to no open question");
                continue;
            };
            let answer = serde_json::from_value::<ElicitResult>(response.clone())
                .unwrap_or_else(|_| ElicitResult::new(rmcp::model::ElicitationAction::Decline));
            let _ = waiting.send(answer);
        }
    }

    /// Runs until the work ends or an upstream asks something.
    pub(super) async fn next(mut self, parked: &Parked) -> Turn {
        tokio::select! {
            done = &mut self.work => {
                let result = done.unwrap_or_else(|e| CodeModeResult::failure(
                    ErrorCode::InternalError,
                    format!("the run's work ended abnormally: {e}"),
                    Telemetry::default(),
                ));
                Turn::Done(match self.earlier.take() {
                    Some(earlier) => earlier.before(result),
                    None => result,
                })
            }
            Some(question) = self.questions.incoming.recv() => {
                let mut requests = InputRequests::new();
                self.ask(question, &mut requests);
                while let Ok(more) = self.questions.incoming.try_recv() {
                    self.ask(more, &mut requests);
                }
                let token = parked.park(self);
                info!(questions = requests.len(), "an upstream's question asked in the result (input_required)");
                Turn::Ask(InputRequiredResult::new(
                    Some(requests),
                    Some(format!("{PARKED_PREFIX}{token}")),
                ))
            }
        }
    }

    fn ask(&mut self, question: Question, requests: &mut InputRequests) {
        self.count += 1;
        let key = format!("elicitation-{}", self.count);
        requests.insert(
            key.clone(),
            InputRequest::Elicitation(ElicitRequest::new(question.params)),
        );
        self.asked.insert(key, question.answer);
    }
}

/// Conversations waiting for their client's next request, by token.
#[derive(Default)]
pub(in crate::gateway) struct Parked {
    waiting: Mutex<HashMap<String, (Instant, Conversation)>>,
}

impl Parked {
    fn park(&self, conversation: Conversation) -> String {
        let token = format!(
            "{:016x}{:016x}",
            super::session_nonce(),
            super::session_nonce()
        );
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        waiting.retain(|_, (until, _)| *until > now);
        if waiting.len() >= MAX_PARKED
            && let Some(oldest) = waiting
                .iter()
                .min_by_key(|(_, (until, _))| *until)
                .map(|(token, _)| token.clone())
        {
            waiting.remove(&oldest);
        }
        waiting.insert(token.clone(), (now + PARKED_FOR, conversation));
        token
    }

    /// The conversation `state` names, if it is a parked one: `None` when
    /// `state` is not of this kind, `Some(Err)` when it names none here.
    pub(super) fn take(&self, state: &str) -> Option<Result<Conversation, String>> {
        let token = state.strip_prefix(PARKED_PREFIX)?;
        let taken = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token)
            .filter(|(until, _)| *until > Instant::now())
            .map(|(_, conversation)| conversation);
        Some(taken.ok_or_else(|| {
            format!(
                "no question of that requestState is open in this gateway: it was answered already, waited more than {} minutes, or was asked by another gateway process; run the cell again (calls that already ran show in its receipts)",
                PARKED_FOR.as_secs() / 60
            )
        }))
    }
}

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

/// The questions for `result` when it waits only for approvals.
pub(super) fn questions(
    session: &CodeModeSession,
    result: &CodeModeResult,
) -> Option<InputRequiredResult> {
    let CodeModeResult::Waiting {
        run_id,
        reason: WaitReason::Approval,
        pending_tool_calls,
        output,
        receipts,
        ..
    } = result
    else {
        return None;
    };
    let catalog = session.catalog();
    let mut requests = InputRequests::new();
    for call in pending_tool_calls.iter().filter(|c| c.awaiting_approval) {
        let entry = catalog.get(&call.tool_id)?;
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
                return None;
            }
        }
    }
    if requests.is_empty() {
        return None;
    }
    let state = Earlier {
        run_id: run_id.clone(),
        output: output.clone(),
        receipts: receipts.clone(),
    };
    let Ok(state) = serde_json::to_string(&state) else {
        return None;
    };
    info!(run = %run_id, calls = requests.len(), "approval asked in the result (input_required)");
    Some(InputRequiredResult::new(
        Some(requests),
        Some(format!("{STATE_PREFIX}{state}")),
    ))
}

/// Reads the client's answers to [`questions`] and decides the calls as
/// `session` (whoever may resume the run); what it echoed of the run.
///
/// # Errors
/// A message for the model when the state is not one this gateway wrote.
pub(super) async fn answer(
    session: &Arc<CodeModeSession>,
    state: &str,
    responses: Option<&InputResponses>,
) -> Result<Earlier, String> {
    let earlier = parse_state(state)?;
    let decisions: Vec<(String, ApprovalDecision)> = responses
        .into_iter()
        .flatten()
        .map(|(call_id, response)| {
            let decision = match serde_json::from_value::<ElicitResult>(response.clone()) {
                Ok(result) => crate::approvals::decision_of(&result).0,
                Err(_) => ApprovalDecision::Deny {
                    reason: "the client's answer to the approval question could not be read".into(),
                },
            };
            (call_id.clone(), decision)
        })
        .collect();
    let session = Arc::clone(session);
    let run_id = earlier.run_id.clone();
    // A decision on a call held in the run store is written there: off the
    // async workers.
    let decided = tokio::task::spawn_blocking(move || {
        for (call_id, decision) in decisions {
            info!(run = %run_id, call = %call_id, ?decision, "approval answered in a request (input_required)");
            // Decided already, or not this client's: the run's state says so.
            if let Err(e) = session.decide_as_resumer(&run_id, &call_id, decision) {
                debug!(error = %e, "approval answer not applied");
            }
        }
    })
    .await;
    if decided.is_err() {
        debug!("applying approval answers failed");
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
