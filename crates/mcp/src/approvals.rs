//! Approvals in the gateway: a nested call that needs approval is put to
//! the human at the MCP client through elicitation ("allow once", "allow
//! this tool for this session", "deny"). A client without elicitation gets
//! a denial that says how to configure approvals (fail closed), unless the
//! operator endpoint is on: then the call waits for an operator.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use codemode_runtime::{ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver, CatalogEntry};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, EnumSchema,
};
use rmcp::service::{ElicitationMode, Peer};
use serde_json::Value;
use tracing::{info, warn};

use crate::config::ApprovalMode;

/// The choices put to the user, as `decision` values.
const ALLOW_ONCE: &str = "allow_once";
const ALLOW_SESSION: &str = "allow_session";
const DENY: &str = "deny";

/// Asks one MCP client session's user about its calls.
pub(crate) struct ClientApprover {
    /// The client, known from its first tool call on.
    pub(crate) peer: Arc<OnceLock<Peer<RoleServer>>>,
    /// Tools the user allowed for this client session.
    allowed: Arc<Mutex<HashSet<String>>>,
    /// One question at a time per client session: a cell that starts many
    /// calls needing approval cannot flood the user with dialogs.
    asking: Arc<tokio::sync::Semaphore>,
    /// Undecided calls wait for the operator endpoint instead of failing.
    operator: bool,
    /// The client is asked in the tool result (2026-07-28 stateless
    /// `input_required`), not by a request of its own: calls are left
    /// waiting, and the exec's answer carries the question.
    asked_in_result: AtomicBool,
    mode: ApprovalMode,
}

impl ClientApprover {
    pub(crate) fn new(operator: bool, mode: ApprovalMode) -> ClientApprover {
        ClientApprover {
            peer: Arc::new(OnceLock::new()),
            allowed: Arc::default(),
            asking: Arc::new(tokio::sync::Semaphore::new(1)),
            operator,
            asked_in_result: AtomicBool::new(false),
            mode,
        }
    }

    /// From now on the client is asked in results (see `asked_in_result`).
    pub(crate) fn ask_in_results(&self) {
        self.asked_in_result.store(true, Ordering::SeqCst);
    }

    /// The answer when the user cannot be asked.
    fn unaskable(&self, tool: &str, why: &str) -> Option<ApprovalDecision> {
        if self.operator {
            info!(%tool, %why, "call awaits an operator's approval");
            return None;
        }
        Some(ApprovalDecision::Deny {
            reason: format!(
                "approval required: calls of {tool} need a human's approval (approvals.mode \"{}\" or approveTools in the gateway config), and {why}; use an MCP client that supports elicitation, run the gateway with the operator endpoint (--admin-listen) to approve from outside, or change approvals.mode / approveTools",
                self.mode.as_str()
            ),
        })
    }
}

impl Approver for ClientApprover {
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture {
        let tool_id = request.tool.id.clone();
        let allowed_before = self
            .allowed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&tool_id);
        if allowed_before {
            return Box::pin(std::future::ready(Some(ApprovalDecision::Approve)));
        }
        if self.asked_in_result.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(None));
        }
        let Some(peer) = self.peer.get().cloned() else {
            let answer = self.unaskable(&tool_id, "the gateway has no client to ask");
            return Box::pin(std::future::ready(answer));
        };
        if !peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            let answer = self.unaskable(&tool_id, "this MCP client does not support elicitation");
            return Box::pin(std::future::ready(answer));
        }
        let fallback = self.unaskable(&tool_id, "asking the MCP client failed");
        let allowed = Arc::clone(&self.allowed);
        let asking = Arc::clone(&self.asking);
        Box::pin(async move {
            let Ok(_turn) = asking.acquire().await else {
                return fallback;
            };
            // Allowed for the session while this call queued for its turn.
            if allowed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&tool_id)
            {
                return Some(ApprovalDecision::Approve);
            }
            let params = match question(&request.tool, &request.input_summary, true) {
                Ok(params) => params,
                Err(e) => {
                    warn!(error = %e, "approval request could not be built");
                    return fallback;
                }
            };
            let result = match peer.create_elicitation(params).await {
                Ok(result) => result,
                Err(e) => {
                    warn!(tool = %tool_id, error = %e, "elicitation failed");
                    return fallback;
                }
            };
            let (decision, for_session) = decision_of(&result);
            if for_session {
                allowed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(tool_id.clone());
            }
            info!(tool = %tool_id, ?decision, "approval answered by the client");
            Some(decision)
        })
    }
}

/// The upstream's annotations as the user sees them: the MCP hints and a
/// title only, bounded (the upstream controls them).
fn annotations(value: &serde_json::Value) -> String {
    const SHOWN: [&str; 5] = [
        "title",
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    ];
    let Some(object) = value.as_object() else {
        return "none".to_owned();
    };
    let shown: Vec<String> = SHOWN
        .iter()
        .filter_map(|key| {
            let value = object.get(*key)?;
            let text = match value {
                serde_json::Value::String(s) => format!("{:?}", clip(s, 120)),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some(format!("{key}: {text}"))
        })
        .collect();
    if shown.is_empty() {
        "none".to_owned()
    } else {
        shown.join(", ")
    }
}

/// At most `max` characters of `text`, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// What the user answered: the decision, and whether it holds for the
/// rest of the client session.
pub(crate) fn decision_of(result: &ElicitResult) -> (ApprovalDecision, bool) {
    match result.action {
        ElicitationAction::Accept => {
            let choice = result
                .content
                .as_ref()
                .and_then(|c| c.get("decision"))
                .and_then(Value::as_str);
            match choice {
                Some(ALLOW_ONCE) => (ApprovalDecision::Approve, false),
                Some(ALLOW_SESSION) => (ApprovalDecision::Approve, true),
                Some(DENY) => (
                    ApprovalDecision::Deny {
                        reason: "the user denied it".into(),
                    },
                    false,
                ),
                _ => (
                    ApprovalDecision::Deny {
                        reason: format!(
                            "the client's answer was not one of {ALLOW_ONCE}, {ALLOW_SESSION}, {DENY}"
                        ),
                    },
                    false,
                ),
            }
        }
        ElicitationAction::Decline => (
            ApprovalDecision::Deny {
                reason: "the user declined".into(),
            },
            false,
        ),
        _ => (
            ApprovalDecision::Deny {
                reason: "the user cancelled the approval request".into(),
            },
            false,
        ),
    }
}

/// The elicitation request for one call of `tool`: server, tool, why,
/// annotations, input. `for_session` offers "allow this tool for this
/// session" (a client without a session gets allow once / deny only).
pub(crate) fn question(
    tool: &CatalogEntry,
    input_summary: &str,
    for_session: bool,
) -> Result<ElicitRequestParams, String> {
    let message = format!(
        "Code mode wants to call tool \"{}\" of MCP server \"{}\".\nWhy you are asked: {}\nAnnotations: {}\nInput: {}",
        clip(&tool.name, 128),
        clip(&tool.source_name, 64),
        codemode_runtime::approval_reason(tool),
        annotations(&tool.annotations),
        input_summary
    );
    let mut choices = vec![(ALLOW_ONCE, "Allow once")];
    if for_session {
        choices.push((ALLOW_SESSION, "Allow this tool for this session"));
    }
    choices.push((DENY, "Deny"));
    let choice = EnumSchema::builder(choices.iter().map(|(v, _)| (*v).to_owned()).collect())
        .enum_titles(choices.iter().map(|(_, t)| (*t).to_owned()).collect())?
        .description("Whether the call may run")
        .build();
    let schema = ElicitationSchema::builder()
        .required_enum_schema("decision", choice)
        .build()
        .map_err(str::to_owned)?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    })
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use codemode_runtime::{ApprovalReason, GatePolicy, RunContext, ToolSource};
    use serde_json::json;

    fn entry() -> CatalogEntry {
        CatalogEntry {
            id: "mcp:files:remove".into(),
            name: "remove".into(),
            label: None,
            description: "Deletes a file".into(),
            source: ToolSource::Mcp,
            source_name: "files".into(),
            parameters: json!({"type": "object"}),
            gate: GatePolicy {
                approval: Some(ApprovalReason::Listed("files.*".into())),
            },
            annotations: json!({"destructiveHint": true}),
            output_schema: Value::Null,
        }
    }

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            context: Arc::new(RunContext::default()),
            parent_call_id: "exec-1".into(),
            call_id: "call-1".into(),
            tool: Arc::new(entry()),
            input_summary: "{\"path\":\"/tmp/x\"}".into(),
        }
    }

    fn answered(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let mut result = ElicitResult::new(action);
        result.content = content;
        result
    }

    fn denial(decision: Option<ApprovalDecision>) -> String {
        match decision {
            Some(ApprovalDecision::Deny { reason }) => reason,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn each_answer_of_the_user_is_its_decision_and_anything_else_denies() {
        let accept = |choice: Value| {
            decision_of(&answered(
                ElicitationAction::Accept,
                Some(json!({ "decision": choice })),
            ))
        };
        assert_eq!(
            accept(json!(ALLOW_ONCE)),
            (ApprovalDecision::Approve, false)
        );
        assert_eq!(
            accept(json!(ALLOW_SESSION)),
            (ApprovalDecision::Approve, true)
        );
        let (deny, session) = accept(json!(DENY));
        assert_eq!(denial(Some(deny)), "the user denied it");
        assert!(!session);
        for odd in [json!("allow"), json!(true), json!(null)] {
            let (decision, session) = accept(odd);
            assert!(denial(Some(decision)).contains("was not one of"));
            assert!(!session);
        }
        let (decision, _) = decision_of(&answered(ElicitationAction::Accept, None));
        assert!(denial(Some(decision)).contains("was not one of"));
        let (decision, session) = decision_of(&answered(
            ElicitationAction::Decline,
            Some(json!({ "decision": ALLOW_SESSION })),
        ));
        assert_eq!(denial(Some(decision)), "the user declined");
        assert!(!session);
        let (decision, session) = decision_of(&answered(
            ElicitationAction::Cancel,
            Some(json!({ "decision": ALLOW_ONCE })),
        ));
        assert_eq!(
            denial(Some(decision)),
            "the user cancelled the approval request"
        );
        assert!(!session);
    }

    #[test]
    fn the_question_names_tool_server_reason_annotations_and_input_and_offers_the_session_only_when_asked()
     {
        let choices = |for_session: bool| {
            let ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } = question(&entry(), "{\"path\":\"/tmp/x\"}", for_session).expect("builds")
            else {
                panic!("a form")
            };
            let schema = serde_json::to_value(&requested_schema).unwrap();
            assert_eq!(schema["required"], json!(["decision"]), "{schema}");
            (message, schema.to_string())
        };
        let (message, schema) = choices(true);
        assert!(
            message.contains("tool \"remove\" of MCP server \"files\""),
            "{message}"
        );
        assert!(message.contains("pattern \"files.*\""), "{message}");
        assert!(message.contains("destructiveHint: true"), "{message}");
        assert!(message.contains("/tmp/x"), "{message}");
        for choice in [ALLOW_ONCE, ALLOW_SESSION, DENY] {
            assert!(schema.contains(choice), "{schema}");
        }
        let (_, schema) = choices(false);
        assert!(
            schema.contains(ALLOW_ONCE) && schema.contains(DENY),
            "{schema}"
        );
        assert!(!schema.contains(ALLOW_SESSION), "{schema}");
    }

    #[tokio::test]
    async fn without_a_client_to_ask_a_call_is_denied_with_what_to_do_or_left_to_the_operator() {
        let approver = ClientApprover::new(false, ApprovalMode::Writes);
        let reason = denial(approver.ask(request()).await);
        assert!(reason.contains("mcp:files:remove"), "{reason}");
        assert!(reason.contains("approvals.mode \"writes\""), "{reason}");
        assert!(
            reason.contains("the gateway has no client to ask"),
            "{reason}"
        );

        let operator = ClientApprover::new(true, ApprovalMode::Writes);
        assert_eq!(
            operator.ask(request()).await,
            None,
            "waits for the operator"
        );
    }

    #[tokio::test]
    async fn a_tool_allowed_for_the_session_runs_unasked_and_results_ask_leave_calls_waiting() {
        let approver = ClientApprover::new(false, ApprovalMode::Destructive);
        approver
            .allowed
            .lock()
            .unwrap()
            .insert("mcp:files:remove".into());
        assert_eq!(
            approver.ask(request()).await,
            Some(ApprovalDecision::Approve)
        );

        let in_results = ClientApprover::new(false, ApprovalMode::Destructive);
        in_results.ask_in_results();
        assert_eq!(in_results.ask(request()).await, None, "asked in the result");
    }

    #[test]
    fn annotations_shown_to_the_user_are_the_hints_and_bounded() {
        let long = "x".repeat(10_000);
        let shown = annotations(&json!({
            "title": long,
            "destructiveHint": true,
            "readOnlyHint": false,
            "vendorBlob": long,
        }));
        assert!(shown.len() < 200, "{shown}");
        assert!(
            shown.starts_with(&format!("title: \"{}…\"", "x".repeat(120))),
            "{shown}"
        );
        assert!(shown.contains("destructiveHint: true"), "{shown}");
        assert!(shown.contains("readOnlyHint: false"), "{shown}");
        assert!(!shown.contains("vendorBlob"), "{shown}");
        assert_eq!(annotations(&json!(null)), "none");
        assert_eq!(annotations(&json!({"other": 1})), "none");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }
}
