//! Approvals in the gateway: a nested call that needs approval is put to
//! the human at the MCP client through elicitation ("allow once", "allow
//! this tool for this session", "deny"). A client without elicitation gets
//! a denial that says how to configure approvals (fail closed), unless the
//! operator endpoint is on: then the call waits for an operator.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use codemode_runtime::{ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver};
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, EnumSchema};
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
    mode: ApprovalMode,
}

impl ClientApprover {
    pub(crate) fn new(operator: bool, mode: ApprovalMode) -> ClientApprover {
        ClientApprover {
            peer: Arc::new(OnceLock::new()),
            allowed: Arc::default(),
            asking: Arc::new(tokio::sync::Semaphore::new(1)),
            operator,
            mode,
        }
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
            let params = match elicitation(&request) {
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
            let decision = match result.action {
                ElicitationAction::Accept => {
                    let choice = result
                        .content
                        .as_ref()
                        .and_then(|c| c.get("decision"))
                        .and_then(Value::as_str);
                    match choice {
                        Some(ALLOW_ONCE) => ApprovalDecision::Approve,
                        Some(ALLOW_SESSION) => {
                            allowed
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(tool_id.clone());
                            ApprovalDecision::Approve
                        }
                        Some(DENY) => ApprovalDecision::Deny {
                            reason: "the user denied it".into(),
                        },
                        _ => ApprovalDecision::Deny {
                            reason: format!(
                                "the client's answer was not one of {ALLOW_ONCE}, {ALLOW_SESSION}, {DENY}"
                            ),
                        },
                    }
                }
                ElicitationAction::Decline => ApprovalDecision::Deny {
                    reason: "the user declined".into(),
                },
                _ => ApprovalDecision::Deny {
                    reason: "the user cancelled the approval request".into(),
                },
            };
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

/// The elicitation request for one call: server, tool, annotations, input.
fn elicitation(request: &ApprovalRequest) -> Result<ElicitRequestParams, String> {
    let tool = &request.tool;
    let message = format!(
        "Code mode wants to call tool \"{}\" of MCP server \"{}\".\nWhy you are asked: {}\nAnnotations: {}\nInput: {}",
        clip(&tool.name, 128),
        clip(&tool.source_name, 64),
        codemode_runtime::approval_reason(tool),
        annotations(&tool.annotations),
        request.input_summary
    );
    let choice = EnumSchema::builder(vec![
        ALLOW_ONCE.to_owned(),
        ALLOW_SESSION.to_owned(),
        DENY.to_owned(),
    ])
    .enum_titles(vec![
        "Allow once".to_owned(),
        "Allow this tool for this session".to_owned(),
        "Deny".to_owned(),
    ])?
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
mod tests {
    use super::*;
    use serde_json::json;

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
        assert!(shown.contains("destructiveHint: true"), "{shown}");
        assert!(shown.contains("readOnlyHint: false"), "{shown}");
        assert!(!shown.contains("vendorBlob"), "{shown}");
        assert_eq!(annotations(&json!(null)), "none");
        assert_eq!(annotations(&json!({"other": 1})), "none");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }
}
