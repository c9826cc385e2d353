//! Driving a run: the model's `exec` and `wait` on a blocking thread. The
//! run's state is [`crate::run::state`], the drain loop [`crate::run::drain`],
//! and the result (telemetry, snapshot, trajectory) [`crate::run::outcome`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use codemode_sandbox::{Settlement, Step};
use serde_json::Value;

use crate::control::{HookDecision, ToolCallEvent, ToolCallRecord};
use crate::executor::RunContext;
use crate::input::{ExecInput, WaitInput};
use crate::result::{CodeModeResult, ErrorCode, Receipts, SnapshotEvent, Telemetry};
use crate::run::bridge::settlement;
use crate::run::calls::Cancel;
use crate::run::drain::{drive, live};
use crate::run::env::{DriveCtx, RunEnv};
use crate::run::outcome::{
    Driven, aborted_failure, finish, host_failure, record_call, record_call_run, with_telemetry,
};
use crate::run::prepare::prepare;
use crate::run::state::{RunInfo, RunState};
use crate::run::store::StoreError;

/// The model's `exec`.
pub(crate) async fn exec(env: &RunEnv, call_id: &str, raw: &Value) -> CodeModeResult {
    let started = Instant::now();
    let inner = Arc::clone(&env.host);
    let mut info = RunInfo {
        exec_count: 1,
        ..RunInfo::default()
    };
    let parsed = match ExecInput::parse(raw, &inner.config) {
        Ok(input) => exec_hook(env, call_id, raw, input).await,
        Err(e) => Err(CodeModeResult::failure(
            e.code,
            e.message,
            Telemetry::default(),
        )),
    };
    let result = match parsed {
        Err(refused) => refused,
        Ok(_) if env.scope.is_aborted() => aborted_failure(),
        Ok(input) => {
            info.language = Some(input.language);
            let catalog = Arc::clone(&env.catalog);
            let namespace_globals: Vec<String> = inner
                .namespaces
                .visible(&catalog)
                .into_iter()
                .map(|(_, registration)| registration.global_name.clone())
                .collect();
            let prepared = match prepare(&input, &namespace_globals)
                .and_then(|prepared| prepared.check_names(&catalog).map(|()| prepared))
            {
                Ok(prepared) => prepared,
                Err(refused) => {
                    let failed = CodeModeResult::Failed {
                        error: refused.message,
                        code: refused.code,
                        output: Vec::new(),
                        receipts: Receipts::default(),
                        telemetry: Telemetry::default(),
                    };
                    let result = with_telemetry(failed, &info, &env.catalog, started, Vec::new());
                    return record_call(env, call_id, "exec", result);
                }
            };
            let permit = match inner.slots.acquire(&env.scope.vm_slots).await {
                Ok(permit) => permit,
                Err(e) => {
                    let failed = CodeModeResult::failure(
                        ErrorCode::RuntimeUnavailable,
                        e.to_string(),
                        Telemetry::default(),
                    );
                    let result = with_telemetry(failed, &info, &env.catalog, started, Vec::new());
                    return record_call(env, call_id, "exec", result);
                }
            };
            let mut state = env.new_run(call_id, input.language);
            state.source_map = prepared.source_map.clone();
            // The run's plugin namespaces: built and checked before any
            // cell code runs; a refused scope fails the exec.
            let context = match env.run_namespaces(&state) {
                Ok(namespaces) => {
                    if let Some(Err(refused)) = namespaces
                        .as_ref()
                        .map(|n| prepared.check_namespace_names(n))
                    {
                        drop(permit);
                        let failed = CodeModeResult::Failed {
                            error: refused.message,
                            code: refused.code,
                            output: Vec::new(),
                            receipts: Receipts::default(),
                            telemetry: Telemetry::default(),
                        };
                        let result =
                            with_telemetry(failed, &info, &env.catalog, started, Vec::new());
                        return record_call(env, call_id, "exec", result);
                    }
                    let context = crate::catalog::guest_api::with_run_fields(
                        state.catalog.guest_context(),
                        state.handles.nonce(),
                        namespaces.as_ref().map(|n| &n.descriptors),
                    );
                    state.namespaces = namespaces;
                    context
                }
                Err(e) => {
                    drop(permit);
                    let failed = CodeModeResult::failure(
                        ErrorCode::InternalError,
                        e.to_string(),
                        Telemetry::default(),
                    );
                    let result = with_telemetry(failed, &info, &env.catalog, started, Vec::new());
                    return record_call(env, call_id, "exec", result);
                }
            };
            let ctx = DriveCtx::starting_now(env);
            let code = prepared.code;
            let work = move || {
                let mut state = state;
                state.calls.follow(ctx.progress.clone());
                let mut events = Vec::new();
                // Registered before the first burst, so abort and
                // cancellation reach a cell that never yields.
                let driven = live(&ctx, &mut state, |ctx, state| {
                    match ctx
                        .host
                        .sandbox
                        .start_with_context(&code, &context, &ctx.limits)
                    {
                        Ok((vm, step)) => drive(ctx, vm, step, state, VecDeque::new()),
                        Err(e) => Driven::done(host_failure(&e)),
                    }
                });
                finish(&ctx, None, driven, state, started, &mut events)
            };
            let result = blocking(work, started).await;
            drop(permit);
            if let Some(hooks) = &env.hooks {
                hooks.after_tool_call(ToolCallRecord {
                    tool_kind: "code_mode_exec",
                    tool_id: "exec".into(),
                    call_id: call_id.to_owned(),
                    outcome: result.status(),
                    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                    input_bytes: crate::result::json_len(raw),
                    result_bytes: 0,
                });
            }
            return record_call(env, call_id, "exec", result);
        }
    };
    record_call(
        env,
        call_id,
        "exec",
        with_telemetry(result, &info, &env.catalog, started, Vec::new()),
    )
}

/// The session's `before_tool_call` hook on the outer exec: it may let the
/// exec run, block it (`approval_denied`), or rewrite its input (parsed
/// again like the model's).
async fn exec_hook(
    env: &RunEnv,
    call_id: &str,
    raw: &Value,
    input: ExecInput,
) -> Result<ExecInput, CodeModeResult> {
    let Some(hooks) = &env.hooks else {
        return Ok(input);
    };
    let event = ToolCallEvent {
        tool_kind: "code_mode_exec",
        tool_id: "exec".into(),
        tool_input_kind: Some(input.language.as_str()),
        call_id: call_id.to_owned(),
        parent_call_id: None,
        context: RunContext::clone(&env.context),
        input: raw.clone(),
    };
    match hooks.before_tool_call(event).await {
        HookDecision::Allow => Ok(input),
        HookDecision::Block { reason } => Err(CodeModeResult::failure(
            ErrorCode::ApprovalDenied,
            format!("the exec was blocked by a before_tool_call hook: {reason}"),
            Telemetry::default(),
        )),
        HookDecision::Rewrite { input } => {
            ExecInput::parse(&input, &env.host.config).map_err(|e| {
                CodeModeResult::failure(
                    e.code,
                    format!(
                        "a before_tool_call hook rewrote the exec input into one that is not valid: {}",
                        e.message
                    ),
                    Telemetry::default(),
                )
            })
        }
    }
}

/// The model's `wait`.
pub(crate) async fn wait(env: &RunEnv, call_id: &str, raw: &Value) -> CodeModeResult {
    let started = Instant::now();
    let inner = Arc::clone(&env.host);
    let info = RunInfo {
        wait_count: 1,
        ..RunInfo::default()
    };
    let input = match WaitInput::parse(raw) {
        Ok(input) => input,
        Err(e) => {
            let failed = CodeModeResult::failure(e.code, e.message, Telemetry::default());
            let result = with_telemetry(failed, &info, &env.catalog, started, Vec::new());
            return record_call(env, call_id, "wait", result);
        }
    };
    if env.scope.is_aborted() {
        let result = with_telemetry(aborted_failure(), &info, &env.catalog, started, Vec::new());
        return record_call(env, call_id, "wait", result);
    }
    let permit = match inner.slots.acquire(&env.scope.vm_slots).await {
        Ok(permit) => permit,
        Err(e) => {
            let failed = CodeModeResult::failure(
                ErrorCode::RuntimeUnavailable,
                format!("{e}; the run keeps waiting, call wait again"),
                Telemetry::default(),
            );
            let result = with_telemetry(failed, &info, &env.catalog, started, Vec::new());
            return record_call_run(env, call_id, "wait", Some(&input.run_id), result);
        }
    };
    let ctx = DriveCtx::starting_now(env);
    let taken = off_executor(|| crate::run::resume::take_for_wait(env, &ctx, &input.run_id));
    let taken = match taken {
        Ok(taken) => taken,
        Err(e) => {
            let (code, mut events) = match e {
                StoreError::Expired => (
                    ErrorCode::SnapshotExpired,
                    vec![SnapshotEvent {
                        event: "expired".into(),
                        bytes: None,
                        micros: None,
                    }],
                ),
                StoreError::Aborted => (ErrorCode::Aborted, Vec::new()),
                StoreError::Interrupted | StoreError::Restore(_) => {
                    (ErrorCode::SnapshotRestoreFailed, Vec::new())
                }
                StoreError::Unavailable(_) => (ErrorCode::RuntimeUnavailable, Vec::new()),
                StoreError::Unknown
                | StoreError::Busy
                | StoreError::OtherScope
                | StoreError::Full { .. }
                | StoreError::ScopeFull { .. }
                | StoreError::OwnerFull { .. }
                | StoreError::BytesFull { .. }
                | StoreError::ScopeBytesFull { .. } => (ErrorCode::InvalidInput, Vec::new()),
            };
            let failed =
                CodeModeResult::failure(code, e.message(&input.run_id), Telemetry::default());
            let result = with_telemetry(
                failed,
                &info,
                &env.catalog,
                started,
                std::mem::take(&mut events),
            );
            return record_call_run(env, call_id, "wait", Some(&input.run_id), result);
        }
    };
    let run_id = input.run_id;
    let id_for_record = run_id.clone();
    let wait_call_id = call_id.to_owned();
    let work = move || {
        let crate::run::resume::Taken {
            snapshot,
            mut state,
            ready: restored,
        } = taken;
        state.info.wait_count += 1;
        state.drive_call_id = wait_call_id;
        state.calls.follow(ctx.progress.clone());
        hold_for_decision(&ctx, &mut state);
        let mut events = Vec::new();
        let restore_started = Instant::now();
        let vm = match ctx.host.sandbox.restore(&snapshot, &ctx.limits) {
            Ok(vm) => vm,
            Err(e) => {
                let mut result = host_failure(&e);
                if let CodeModeResult::Failed { code, .. } = &mut result
                    && *code != Some(ErrorCode::SnapshotLimitExceeded)
                {
                    *code = Some(ErrorCode::SnapshotRestoreFailed);
                }
                return finish(
                    &ctx,
                    Some(&run_id),
                    Driven::done(result),
                    state,
                    started,
                    &mut events,
                );
            }
        };
        events.push(SnapshotEvent {
            event: "restored".into(),
            bytes: Some(snapshot.size_bytes() as u64),
            micros: Some(restore_started.elapsed().as_micros() as u64),
        });
        drop(snapshot);
        // Yields resolve on resume: that is all `yield_control` asks for.
        let mut ready: VecDeque<(u32, Settlement)> = state
            .yields
            .drain(..)
            .map(|id| (id, Settlement::Resolve(Value::Null)))
            .collect();
        ready.extend(state.carried.drain(..));
        ready.extend(restored);
        let (arrived, aborted) = state.calls.arrived();
        let driven = if aborted {
            state.info.cancelled += state.calls.cancel_all(Cancel::Aborted) as u32;
            Driven::done(aborted_failure())
        } else {
            for finished in arrived {
                ready.push_back(settlement(&ctx, &mut state, finished));
            }
            live(&ctx, &mut state, |ctx, state| {
                drive(ctx, vm, Step::Pending, state, ready)
            })
        };
        finish(&ctx, Some(&run_id), driven, state, started, &mut events)
    };
    let result = blocking(work, started).await;
    drop(permit);
    record_call_run(env, call_id, "wait", Some(&id_for_record), result)
}

/// A run held only for a human's decision: block (cancellable, like a
/// drive) until something arrives on its channel — a decided call's
/// result, an abort — or the deadline nears, before paying for a restore
/// that would only suspend again (a model polling `wait` would spin).
fn hold_for_decision(ctx: &DriveCtx, state: &mut RunState) {
    if !state.carried.is_empty() || !state.yields.is_empty() {
        return;
    }
    let key = crate::run::drain::register_live(ctx, state);
    while state.calls.all_awaiting_decision()
        && !ctx.scope.is_aborted()
        && !ctx.limits.cancel.is_cancelled()
    {
        let left = ctx
            .delivery_deadline()
            .saturating_duration_since(Instant::now());
        match state.calls.receiver().recv_timeout(left) {
            // Still only waiting for a human.
            Ok(crate::executor::live::Msg::AwaitingApproval) => {}
            Ok(msg) => {
                // The drive after the restore reads it.
                let _ = state.calls.sender().send(msg);
                break;
            }
            Err(_) => break,
        }
    }
    ctx.scope.unregister(key);
}

/// Runs blocking work (a durable store's I/O) without stalling the async
/// executor's other tasks: in place on a multi-thread runtime.
fn off_executor<T>(work: impl FnOnce() -> T) -> T {
    if tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Runs a VM burst off the async executor: on a multi-thread runtime in
/// place (`block_in_place` hands this worker's other tasks to another
/// thread, and saves two thread hand-offs per exec), on a current-thread
/// runtime on the blocking pool. A panic in `work` becomes `internal_error`.
async fn blocking<F>(work: F, started: Instant) -> CodeModeResult
where
    F: FnOnce() -> CodeModeResult + Send + 'static,
{
    // A burst that burns CPU yields priority to other sessions' short
    // cells until it ends (codemode_sandbox::burst).
    let work = move || codemode_sandbox::burst(work);
    let joined = if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .map_err(|_| "the sandbox thread panicked".to_owned())
        })
    } else {
        // Another thread: carry the trace span over.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || span.in_scope(work))
            .await
            .map_err(|e| e.to_string())
    };
    match joined {
        Ok(result) => result,
        Err(e) => {
            let telemetry = Telemetry {
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                ..Telemetry::default()
            };
            CodeModeResult::failure(
                ErrorCode::InternalError,
                format!("the sandbox thread failed: {e}"),
                telemetry,
            )
        }
    }
}
