//! The JavaScript side of a session: the user's tools, approvals, hooks
//! and progress, each a JS function the runtime calls from its threads
//! through a thread-safe function (Node's event loop is never blocked).
//!
//! Every callback takes one JSON string and (but progress) answers a
//! promise of one JSON string; `index.js` turns them into the friendly
//! JS API. A callback that throws, rejects or answers something else
//! fails closed: a tool call fails, an approval is denied, a hook blocks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use codemode_runtime::{
    ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver, HookDecision, HookFuture,
    NestedCall, ProgressSink, ProgressUpdate, ToolCallError, ToolCallEvent, ToolExecutor,
    ToolFuture, ToolHooks,
};
use napi::Status;
use napi::bindgen_prelude::{Promise, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use serde_json::{Value, json};
use tokio::sync::oneshot;

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

/// Tool calls the JS side has not answered yet, by token. A call's
/// future removes its entry when it ends or is dropped (cancelled), so a
/// late `complete` finds nothing and is ignored.
static PENDING: LazyLock<Mutex<HashMap<u64, oneshot::Sender<String>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static TOKENS: AtomicU64 = AtomicU64::new(0);

/// Hands the JS answer of tool call `token` to the waiting call. Called
/// on Node's thread (synchronously from JS): the answer goes straight to
/// the call's future, with no promise to resolve on the way back.
pub(crate) fn complete(token: u64, answer: String) -> bool {
    let sender = PENDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&token);
    sender.is_some_and(|s| s.send(answer).is_ok())
}

/// Removes a call's entry when its future ends or is dropped.
struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        PENDING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.0);
    }
}

/// Runs the user's JS tools: `{ token, tool, toolId, input, callId,
/// parentCallId, context }` goes to the JS dispatcher, which answers
/// `complete(token, '{ "ok": value }' | '{ "error": message }')`.
pub(crate) struct JsTools {
    pub(crate) dispatch: Arc<JsNotify>,
}

impl ToolExecutor for JsTools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let token = TOKENS.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        PENDING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token, sender);
        let registered = Registered(token);
        let argument = json!({
            "token": token,
            "tool": call.tool.name,
            "toolId": call.tool.id,
            "input": call.input,
            "callId": call.call_id,
            "parentCallId": call.parent_call_id,
            "context": *call.context,
        })
        .to_string();
        let status = self
            .dispatch
            .call(argument, ThreadsafeFunctionCallMode::NonBlocking);
        Box::pin(async move {
            let _registered = registered;
            if status != Status::Ok {
                return Err(ToolCallError::new(format!(
                    "the JavaScript tool could not be called ({status}): the CodeMode instance is closing"
                )));
            }
            let text = receiver.await.map_err(|_| {
                ToolCallError::new("the JavaScript tool never answered (its CodeMode was closed)")
            })?;
            let answer: Value = serde_json::from_str(&text).map_err(|e| {
                ToolCallError::new(format!("the tool bridge answered no JSON: {e}"))
            })?;
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
