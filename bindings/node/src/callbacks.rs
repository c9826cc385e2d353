//! The JavaScript side of a session: the user's tools, approvals, hooks
//! and progress, each a JS function the runtime calls from its threads
//! through a thread-safe function (Node's event loop is never blocked).
//!
//! Every callback takes one JSON string and (but progress) answers a
//! promise of one JSON string; `index.js` turns them into the friendly
//! JS API. A callback that throws, rejects or answers something else
//! fails closed: a tool call fails, an approval is denied, a hook blocks.

use std::sync::Arc;

use codemode_runtime::{
    ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver, HookDecision, HookFuture,
    NestedCall, ProgressSink, ProgressUpdate, ToolCallError, ToolCallEvent, ToolExecutor,
    ToolFuture, ToolHooks,
};
use napi::Status;
use napi::bindgen_prelude::{Promise, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use serde_json::{Value, json};

/// A JS `async (json: string) => string`, unref'd: it does not keep Node
/// alive by itself (a pending `exec` does).
pub(crate) type JsAsync = ThreadsafeFunction<String, Promise<String>, String, Status, false, true>;

/// A JS `(json: string) => void`, called without waiting.
pub(crate) type JsNotify =
    ThreadsafeFunction<String, Unknown<'static>, String, Status, false, true>;

/// Calls `callback` with `argument` and parses its JSON answer; `Err` says
/// what went wrong, fit for the model.
async fn ask(callback: &JsAsync, argument: String) -> Result<Value, String> {
    let promise = callback
        .call_async(argument)
        .await
        .map_err(|e| format!("the JavaScript callback could not be called: {e}"))?;
    let text = promise.await.map_err(|e| e.reason.clone())?;
    serde_json::from_str(&text)
        .map_err(|e| format!("the JavaScript callback answered no JSON: {e}"))
}

/// Runs the user's JS tools: `{ tool, input, callId, parentCallId,
/// context }` in, `{ ok: value }` or `{ error: message }` out.
pub(crate) struct JsTools {
    pub(crate) dispatch: Arc<JsAsync>,
}

impl ToolExecutor for JsTools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let dispatch = Arc::clone(&self.dispatch);
        let argument = json!({
            "tool": call.tool.name,
            "toolId": call.tool.id,
            "input": call.input,
            "callId": call.call_id,
            "parentCallId": call.parent_call_id,
            "context": *call.context,
        })
        .to_string();
        Box::pin(async move {
            let answer = ask(&dispatch, argument).await.map_err(ToolCallError::new)?;
            match answer {
                Value::Object(mut map) => {
                    if let Some(error) = map.remove("error") {
                        let message = match error {
                            Value::String(s) => s,
                            other => other.to_string(),
                        };
                        return Err(ToolCallError::new(message));
                    }
                    // `undefined` from a tool arrives as no `ok` at all.
                    Ok(map.remove("ok").unwrap_or(Value::Null))
                }
                other => Err(ToolCallError::new(format!(
                    "the tool bridge answered {other} instead of {{ ok }} or {{ error }}"
                ))),
            }
        })
    }
}

/// Asks the JS `approve` callback: `{ decision: "approve" }`, `{ decision:
/// "deny", reason }`, or `{ decision: "later" }` (the call waits for
/// `approve()`/`deny()` on the session).
pub(crate) struct JsApprover {
    pub(crate) callback: Arc<JsAsync>,
}

impl Approver for JsApprover {
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture {
        let callback = Arc::clone(&self.callback);
        let reason = request
            .tool
            .gate
            .approval
            .as_ref()
            .map(|r| r.describe())
            .unwrap_or_default();
        let argument = json!({
            "callId": request.call_id,
            "parentCallId": request.parent_call_id,
            "toolId": request.tool.id,
            "tool": request.tool.name,
            "reason": reason,
            "inputSummary": request.input_summary,
            "context": *request.context,
        })
        .to_string();
        Box::pin(async move {
            let answer = match ask(&callback, argument).await {
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
                    reason: format!(
                        "the approval callback answered {answer}: expected true, false, {{ deny: reason }} or undefined"
                    ),
                }),
            }
        })
    }
}

/// The JS `beforeToolCall` hook: `{ allow: true }`, `{ block: reason }` or
/// `{ rewrite: input }`.
pub(crate) struct JsHooks {
    pub(crate) before: Arc<JsAsync>,
}

impl ToolHooks for JsHooks {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        let before = Arc::clone(&self.before);
        let argument = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
        Box::pin(async move {
            let answer = match ask(&before, argument).await {
                Ok(answer) => answer,
                // Fail closed: a hook that cannot decide blocks.
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
            match answer.get("allow") {
                Some(Value::Bool(true)) => HookDecision::Allow,
                _ => HookDecision::Block {
                    reason: format!(
                        "the beforeToolCall hook answered {answer}: expected undefined, {{ block: reason }} or {{ input }}"
                    ),
                },
            }
        })
    }
}

/// Passes progress to the JS `onProgress` callback without waiting.
pub(crate) struct JsProgress {
    pub(crate) callback: Arc<JsNotify>,
}

impl ProgressSink for JsProgress {
    fn report(&self, update: ProgressUpdate) {
        let event = match update {
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
        };
        // A full queue or a closing environment loses one update, never the run.
        let _ = self
            .callback
            .call(event.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
    }
}
