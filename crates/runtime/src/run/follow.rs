//! Calls of a restored run that this process did not start: a call still
//! running in another live process is followed through the run store
//! ([`adopt`]), and a call that was held for approval when the run was
//! stored comes back as its decision says ([`held`]): denied, run here
//! once (approved, never started), followed (its holder lives), or held
//! again and asked again (its holder stopped before anyone decided). A
//! call that never started is never reported as `interrupted`; one that
//! may have started is never run again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::control::{
    ApprovalDecision, Gate, GateState, HeldInput, Published, decode_decision, denied_call,
};
use crate::executor::{NestedCall, ToolCallError, ToolFuture};
use crate::run::bridge::gate_approval;
use crate::run::calls::CallInfo;
use crate::run::env::DriveCtx;
use crate::run::record::{self, PendingCall};
use crate::run::sink;
use crate::run::state::RunState;

/// Stops a blocking wait in the store when the run drops the call.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A call still running in another live process: the run follows it
/// through the store (its result, or `interrupted` when that process
/// dies). Returns its outcome if it is already there.
pub(crate) fn adopt(
    ctx: &DriveCtx,
    state: &mut RunState,
    run_id: &str,
    call: PendingCall,
) -> Option<Result<Value, ToolCallError>> {
    let info = call_info(state, &call, 0, None);
    let request_id = call.request_id;
    let backend = Arc::clone(&ctx.host.store.backend);
    let run_id = run_id.to_owned();
    let future: ToolFuture = Box::pin(async move {
        let stop = StopOnDrop(Arc::default());
        let cancelled = Arc::clone(&stop.0);
        let waited = tokio::task::spawn_blocking(move || {
            record::await_remote(&backend, &run_id, &call, &cancelled)
        })
        .await;
        drop(stop);
        waited.unwrap_or_else(|_| {
            Err(ToolCallError::new(
                "following the call in the run store failed; it may or may not have taken effect",
            ))
        })
    });
    start(ctx, state, request_id, info, future)
}

/// A call that was held for approval when its run was stored, and has no
/// result in the store. Blocks on the store (the drive's thread).
pub(crate) fn held(
    ctx: &DriveCtx,
    state: &mut RunState,
    run_id: &str,
    call: &PendingCall,
    held: HeldInput,
) -> Option<Result<Value, ToolCallError>> {
    let backend = Arc::clone(&ctx.host.store.backend);
    let unreadable = |e: codemode_store::StoreError| {
        Some(Err(ToolCallError::interrupted(format!(
            "the call to {} was held for approval, and what became of it cannot be read from the run store ({e}); it may or may not have taken effect, and it was not run again",
            call.tool_id
        ))))
    };
    let decision = match backend.await_decision(run_id, call.request_id, Duration::ZERO) {
        Ok(decision) => decision.map(|bytes| decode_decision(&bytes)),
        Err(e) => return unreadable(e),
    };
    match decision {
        Some(ApprovalDecision::Deny { reason }) => Some(Err(denied_call(&call.tool_id, &reason))),
        Some(ApprovalDecision::Approve) => match backend.start_held(run_id, call.request_id) {
            // Approved after its holder stopped: it never started; it runs here.
            Ok(Some(starter)) if starter == backend.instance() => {
                let Some(nested) = nested_call(state, call, held.input) else {
                    return Some(Err(gone_from_catalog(&call.tool_id)));
                };
                let info = call_info(state, call, crate::result::json_len(&nested.input), None);
                let executor = Arc::clone(&state.executor);
                start(ctx, state, call.request_id, info, executor.call(nested))
            }
            Ok(Some(starter)) if backend.instance_alive(&starter) => {
                let mut running = call.clone();
                running.instance = starter;
                adopt(ctx, state, run_id, running)
            }
            // The process that started it stopped: it may have run.
            Ok(_) => Some(Err(sink::interrupted_call(&call.tool_id))),
            Err(e) => unreadable(e),
        },
        None => hold_again(ctx, state, run_id, call, held),
    }
}

/// Holds an undecided call again: while the process that held it lives,
/// its result is followed (a decision made anywhere reaches that process,
/// which runs it); once that process is gone without a result, the call
/// is held here (this process's approver asked again, decisions made
/// anywhere followed) and runs here once approved.
fn hold_again(
    ctx: &DriveCtx,
    state: &mut RunState,
    run_id: &str,
    call: &PendingCall,
    held: HeldInput,
) -> Option<Result<Value, ToolCallError>> {
    let Some(nested) = nested_call(state, call, held.input.clone()) else {
        return Some(Err(gone_from_catalog(&call.tool_id)));
    };
    let backend = Arc::clone(&ctx.host.store.backend);
    let published = Published {
        backend: Arc::clone(&backend),
        run_id: Arc::from(run_id),
        request_id: call.request_id,
    };
    let gate_state = GateState::held_in_store(published.clone(), held);
    let gate = Gate {
        state: Arc::clone(&gate_state),
        // It passed the hooks where it was first started.
        hooks: None,
        approval: Some(gate_approval(ctx, state, &gate_state)),
        recheck: None,
    };
    let info = call_info(
        state,
        call,
        crate::result::json_len(&nested.input),
        Some(Arc::clone(&gate_state)),
    );
    let executor = Arc::clone(&state.executor);
    let holder = call.instance.clone();
    let tool_id = call.tool_id.clone();
    let future: ToolFuture = Box::pin(async move {
        if backend.instance_alive(&holder) {
            if let Some(outcome) = follow_holder(&published, &holder, &gate_state).await {
                return outcome;
            }
            // The holder stopped without a result: decided meanwhile?
            let p = published.clone();
            let decided = tokio::task::spawn_blocking(move || {
                p.backend
                    .await_decision(&p.run_id, p.request_id, Duration::ZERO)
            })
            .await;
            match decided {
                Ok(Ok(Some(bytes))) => {
                    return match decode_decision(&bytes) {
                        ApprovalDecision::Deny { reason } => Err(denied_call(&tool_id, &reason)),
                        // Started by the holder (interrupted) or not yet
                        // (it runs here, once).
                        ApprovalDecision::Approve => {
                            crate::control::start_once(&published, &tool_id).await?;
                            executor.call(nested).await
                        }
                    };
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    return Err(ToolCallError::interrupted(format!(
                        "the call to {tool_id} was held for approval, and whether it was decided cannot be read ({e}); it was not run"
                    )));
                }
                Err(_) => {
                    return Err(ToolCallError::new(format!(
                        "the call to {tool_id} could not be held again; it was not run"
                    )));
                }
            }
        }
        crate::control::gated(gate, nested, executor).await
    });
    start(ctx, state, call.request_id, info, future)
}

/// Follows the result of a held call while `holder` lives; meanwhile a
/// decision to approve it, made anywhere, moves it on from awaiting
/// approval (the holder runs it). `None` once the holder is gone without
/// a result.
async fn follow_holder(
    published: &Published,
    holder: &str,
    gate: &GateState,
) -> Option<Result<Value, ToolCallError>> {
    let stop = StopOnDrop(Arc::default());
    let following = {
        let cancelled = Arc::clone(&stop.0);
        let (backend, run_id, holder) = (
            Arc::clone(&published.backend),
            Arc::clone(&published.run_id),
            holder.to_owned(),
        );
        let request_id = published.request_id;
        tokio::task::spawn_blocking(move || {
            record::follow(&backend, &run_id, request_id, &holder, &cancelled)
        })
    };
    let watch = async {
        if crate::control::stored_decision(published).await == ApprovalDecision::Approve {
            gate.decided();
        }
        std::future::pending::<()>().await
    };
    let outcome = tokio::select! {
        followed = following => followed.unwrap_or_else(|_| {
            Some(Err(ToolCallError::new(
                "following the call in the run store failed; it may or may not have taken effect",
            )))
        }),
        () = watch => None,
    };
    drop(stop);
    outcome
}

/// The nested call a restored call runs as; `None` when the run's catalog
/// no longer has its tool.
fn nested_call(state: &RunState, call: &PendingCall, input: Value) -> Option<NestedCall> {
    // By id, MCP tools included (the guest named it by its path).
    let tool = Arc::clone(state.catalog.get(&call.tool_id)?);
    Some(NestedCall {
        context: Arc::clone(&state.context),
        parent_call_id: state.parent_call_id.clone(),
        call_id: call.call_id.clone(),
        tool,
        input,
        progress: crate::progress::CallProgress::new(
            state.calls.progress_slot(),
            &call.call_id,
            &call.tool_id,
        ),
    })
}

fn gone_from_catalog(tool_id: &str) -> ToolCallError {
    ToolCallError::denied(format!(
        "the call to {tool_id} was held for approval and was not started: the tool is no longer in this run's catalog"
    ))
}

fn call_info(
    state: &RunState,
    call: &PendingCall,
    input_bytes: u64,
    gate: Option<Arc<GateState>>,
) -> CallInfo {
    CallInfo {
        call_id: call.call_id.clone(),
        tool_id: call.tool_id.clone(),
        method: record::static_method(&call.method),
        parent_call_id: state.parent_call_id.clone(),
        input_bytes,
        gate,
        span: tracing::Span::none(),
        queued: None,
    }
}

/// Starts a restored call; it holds a slot here as it did in the process
/// that started it.
fn start(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    info: CallInfo,
    future: ToolFuture,
) -> Option<Result<Value, ToolCallError>> {
    let max_pending = ctx.host.config.max_pending_tool_calls as usize;
    state
        .calls
        .start(&ctx.handle, request_id, info, max_pending, move || future)
}
