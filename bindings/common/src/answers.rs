//! The host language's answers read into the runtime's decisions, and
//! progress written for it. Every reader fails closed.

use codemode_runtime::{ApprovalDecision, HookDecision, ProgressUpdate, ToolCallError};
use serde_json::{Value, json};

/// A tool's answer: `{ ok: value }`, `{}` (no value: `null`), or `{ error:
/// message }`.
///
/// # Errors
/// The tool's error, or what is wrong with the answer.
pub fn tool_outcome(text: &str) -> Result<Value, ToolCallError> {
    let answer: Value = serde_json::from_str(text)
        .map_err(|e| ToolCallError::new(format!("the tool bridge answered no JSON: {e}")))?;
    match answer {
        Value::Object(mut map) => {
            if let Some(error) = map.remove("error") {
                let message = match error {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                return Err(ToolCallError::new(message));
            }
            Ok(map.remove("ok").unwrap_or(Value::Null))
        }
        other => Err(ToolCallError::new(format!(
            "the tool bridge answered {other} instead of {{ ok }} or {{ error }}"
        ))),
    }
}

fn parsed(answer: Result<String, String>) -> Result<Value, String> {
    let text = answer?;
    serde_json::from_str(&text).map_err(|e| format!("it answered no JSON: {e}"))
}

/// An approval callback's answer: `{ decision: "approve" }`, `{ decision:
/// "deny", reason? }`, `{ decision: "later" }` (`None`: the call waits for
/// approve/deny on the session). Anything else denies.
pub fn approval_decision(answer: Result<String, String>) -> Option<ApprovalDecision> {
    let answer = match parsed(answer) {
        Ok(answer) => answer,
        Err(why) => {
            return Some(ApprovalDecision::Deny {
                reason: format!("the approval callback failed: {why}"),
            });
        }
    };
    match answer.get("decision").and_then(Value::as_str) {
        Some("approve") => Some(ApprovalDecision::Approve),
        Some("later") => None,
        Some("deny") => Some(ApprovalDecision::Deny {
            reason: answer
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("denied by the approval callback")
                .to_owned(),
        }),
        _ => Some(ApprovalDecision::Deny {
            reason: match answer.get("error").and_then(Value::as_str) {
                Some(error) => format!("the approval callback failed: {error}"),
                None => format!(
                    "the approval callback answered {answer}: expected true, false, a denial with a reason, or nothing (decide later)"
                ),
            },
        }),
    }
}

/// A `beforeToolCall` hook's answer: `{ allow: true }`, `{ block: reason }`
/// or `{ rewrite: input }`. Anything else blocks.
pub fn hook_decision(answer: Result<String, String>) -> HookDecision {
    let answer = match parsed(answer) {
        Ok(answer) => answer,
        Err(why) => {
            return HookDecision::Block {
                reason: format!("the beforeToolCall hook failed: {why}"),
            };
        }
    };
    if let Some(input) = answer.get("rewrite") {
        return HookDecision::Rewrite {
            input: input.clone(),
        };
    }
    if let Some(reason) = answer.get("block") {
        return HookDecision::Block {
            reason: reason
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| reason.to_string()),
        };
    }
    match (
        answer.get("allow"),
        answer.get("error").and_then(Value::as_str),
    ) {
        (Some(Value::Bool(true)), _) => HookDecision::Allow,
        (_, Some(error)) => HookDecision::Block {
            reason: format!("the beforeToolCall hook failed: {error}"),
        },
        _ => HookDecision::Block {
            reason: format!(
                "the beforeToolCall hook answered {answer}: expected nothing (allow), a block with a reason, or a new input"
            ),
        },
    }
}

/// One progress update as the host languages see it.
pub fn progress_event(update: ProgressUpdate) -> Value {
    match update {
        ProgressUpdate::CallStarted { call_id, tool_id } => {
            json!({ "kind": "callStarted", "callId": call_id, "toolId": tool_id })
        }
        ProgressUpdate::CallFinished {
            call_id,
            tool_id,
            ok,
        } => json!({ "kind": "callFinished", "callId": call_id, "toolId": tool_id, "ok": ok }),
        ProgressUpdate::Call {
            call_id,
            tool_id,
            progress,
            total,
            message,
        } => json!({
            "kind": "call", "callId": call_id, "toolId": tool_id,
            "progress": progress, "total": total, "message": message,
        }),
        ProgressUpdate::Cell {
            value,
            total,
            message,
        } => json!({ "kind": "cell", "progress": value, "total": total, "message": message }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_answers_a_value_nothing_or_an_error_and_anything_else_fails() {
        assert_eq!(tool_outcome(r#"{"ok":[1,2]}"#), Ok(json!([1, 2])));
        assert_eq!(tool_outcome("{}"), Ok(Value::Null));
        assert_eq!(
            tool_outcome(r#"{"error":"the disk is on fire"}"#).map_err(|e| e.message),
            Err("the disk is on fire".to_owned())
        );
        assert_eq!(
            tool_outcome(r#"{"error":{"code":7}}"#).map_err(|e| e.message),
            Err(r#"{"code":7}"#.to_owned())
        );
        let not_json = tool_outcome("ok").map_err(|e| e.message);
        assert!(not_json.is_err_and(|m| m.contains("no JSON")));
        let not_object = tool_outcome("[1]").map_err(|e| e.message);
        assert!(not_object.is_err_and(|m| m.contains("instead of")));
    }

    #[test]
    fn approvals_deny_whatever_is_not_a_decision() {
        let ok = |s: &str| Ok::<String, String>(s.to_owned());
        assert_eq!(
            approval_decision(ok(r#"{"decision":"approve"}"#)),
            Some(ApprovalDecision::Approve)
        );
        assert_eq!(approval_decision(ok(r#"{"decision":"later"}"#)), None);
        assert_eq!(
            approval_decision(ok(r#"{"decision":"deny","reason":"no"}"#)),
            Some(ApprovalDecision::Deny {
                reason: "no".into()
            })
        );
        for bad in [
            ok(r#"{"decision":"maybe"}"#),
            ok("{}"),
            ok("yes"),
            ok(r#"{"error":"boom"}"#),
            Err("closed".to_owned()),
        ] {
            assert!(
                matches!(
                    approval_decision(bad.clone()),
                    Some(ApprovalDecision::Deny { .. })
                ),
                "{bad:?} must deny"
            );
        }
    }

    #[test]
    fn hooks_block_whatever_is_not_an_allow_or_a_rewrite() {
        let ok = |s: &str| Ok::<String, String>(s.to_owned());
        assert_eq!(hook_decision(ok(r#"{"allow":true}"#)), HookDecision::Allow);
        assert_eq!(
            hook_decision(ok(r#"{"rewrite":{"a":1}}"#)),
            HookDecision::Rewrite {
                input: json!({"a": 1})
            }
        );
        assert_eq!(
            hook_decision(ok(r#"{"block":"unlucky"}"#)),
            HookDecision::Block {
                reason: "unlucky".into()
            }
        );
        for bad in [
            ok(r#"{"allow":"yes"}"#),
            ok("{}"),
            ok("[]"),
            ok(r#"{"error":"crashed"}"#),
            Err("closed".to_owned()),
        ] {
            assert!(
                matches!(hook_decision(bad.clone()), HookDecision::Block { .. }),
                "{bad:?} must block"
            );
        }
    }
}
