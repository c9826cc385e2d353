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
use crate::run::live::StoreError;
use crate::run::outcome::{
    Driven, aborted_failure, host_failure, record_call, record_call_run, with_telemetry,
};
use crate::run::park::{Stretch, end_stretch, off_executor};
use crate::run::prepare::prepare;
use crate::run::state::{RunInfo, RunState};

/// The model's `exec`.
pub(crate) async fn exec(env: &RunEnv, call_id: &str, raw: &Value) -> CodeModeResult {
    let started = Instant::now();
    let mut info = RunInfo {
        exec_count: 1,
        ..RunInfo::default()
    };
    let result = match run_exec(env, call_id, raw, &mut info, started).await {
        Ok(driven) => driven,
        // Refused before the cell ran: only the counters so far.
        Err(refused) => with_telemetry(refused, &info, &env.catalog, started, Vec::new()),
    };
    record_call(env, call_id, "exec", result)
}

/// An exec from its input to its result; `Err` is a refusal before any
/// cell code ran (input, hook, abort, name check, VM slot, namespaces).
async fn run_exec(
    env: &RunEnv,
    call_id: &str,
    raw: &Value,
    info: &mut RunInfo,
    started: Instant,
) -> Result<CodeModeResult, CodeModeResult> {
    let input = ExecInput::parse(raw, &env.host.config)
        .map_err(|e| CodeModeResult::failure(e.code, e.message, Telemetry::default()))?;
    let input = exec_hook(env, call_id, raw, input).await?;
    if env.scope.is_aborted() {
        return Err(aborted_failure());
    }
    info.language = Some(input.language);
    let namespace_globals: Vec<String> = env
        .host
        .namespaces
        .visible(&env.catalog)
        .into_iter()
        .map(|(_, registration)| registration.global_name.clone())
        .collect();
    let prepared = prepare(&input, &namespace_globals)
        .and_then(|prepared| prepared.check_names(&env.catalog).map(|()| prepared))
        .map_err(refused)?;
    let permit = vm_slot(env, "").await?;
    let mut state = env.new_run(call_id, input.language);
    state.source_map = prepared.source_map.clone();
    let context = guest_context(env, &prepared, &mut state).map_err(|e| *e)?;
    let ctx = DriveCtx::starting_now(env);
    let code = prepared.code;
    let work = move || {
        let mut state = state;
        state.calls.follow(ctx.progress.clone());
        // Registered before the first burst, so abort and
        // cancellation reach a cell that never yields.
        let driven = live(&ctx, &mut state, |ctx, state| {
            match ctx
                .host
                .sandbox
                .start_with_context(&code, &context, &ctx.limits)
            {
                Ok((vm, step)) => drive(ctx, vm, step, state, VecDeque::new(), Vec::new()),
                Err(e) => Driven::done(host_failure(&e)),
            }
        });
        end_stretch(ctx, None, driven, state, started, Vec::new())
    };
    let result = stretches(env, permit, work, started).await;
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
    Ok(result)
}

/// A cell refused before it ran, as a failed result.
fn refused(refused: crate::run::prepare::Refused) -> CodeModeResult {
    CodeModeResult::Failed {
        error: refused.message,
        code: refused.code,
        output: Vec::new(),
        receipts: Receipts::default(),
        telemetry: Telemetry::default(),
    }
}

/// The run's guest context: its catalog view, handle nonce and plugin
/// namespaces, built and checked before any cell code runs (a refused
/// scope or namespace name fails the exec).
fn guest_context(
    env: &RunEnv,
    prepared: &crate::run::prepare::PreparedCell,
    state: &mut RunState,
) -> Result<String, Box<CodeModeResult>> {
    let namespaces = env.run_namespaces(state).map_err(|e| {
        CodeModeResult::failure(
            ErrorCode::InternalError,
            e.to_string(),
            Telemetry::default(),
        )
    })?;
    if let Some(namespaces) = &namespaces {
        prepared
            .check_namespace_names(namespaces)
            .map_err(|e| Box::new(refused(e)))?;
    }
    let context = crate::catalog::guest_api::with_run_fields(
        state.catalog.guest_context(),
        state.handles.nonce(),
        namespaces.as_ref().map(|n| &n.descriptors),
    );
    state.namespaces = namespaces;
    Ok(context)
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
    let info = RunInfo {
        wait_count: 1,
        ..RunInfo::default()
    };
    let refused = |failed, events| with_telemetry(failed, &info, &env.catalog, started, events);
    let input = match WaitInput::parse(raw) {
        Ok(input) => input,
        Err(e) => {
            let failed = CodeModeResult::failure(e.code, e.message, Telemetry::default());
            return record_call(env, call_id, "wait", refused(failed, Vec::new()));
        }
    };
    if env.scope.is_aborted() {
        return record_call(env, call_id, "wait", refused(aborted_failure(), Vec::new()));
    }
    let result = match run_wait(env, call_id, &input.run_id, started).await {
        Ok(result) => result,
        Err((failed, events)) => refused(failed, events),
    };
    record_call_run(env, call_id, "wait", Some(&input.run_id), result)
}

/// A wait from its slot to its result; `Err` is a refusal before the run
/// was restored (no VM slot, or the store would not hand the run over),
/// with the snapshot events it reports.
async fn run_wait(
    env: &RunEnv,
    call_id: &str,
    run_id: &str,
    started: Instant,
) -> Result<CodeModeResult, (CodeModeResult, Vec<SnapshotEvent>)> {
    let permit = vm_slot(env, "; the run keeps waiting, call wait again")
        .await
        .map_err(|failed| (failed, Vec::new()))?;
    let ctx = DriveCtx::starting_now(env);
    let taken = off_executor(|| crate::run::resume::take_for_wait(env, &ctx, run_id))
        .map_err(|e| store_refusal(&e, run_id))?;
    let run_id = run_id.to_owned();
    let wait_call_id = call_id.to_owned();
    let work = move || resume_and_drive(ctx, taken, run_id, wait_call_id, started);
    Ok(stretches(env, permit, work, started).await)
}

/// Drives a run to its exec's or wait's result: `first` is its first
/// stretch on a VM; each time the cell parks, its VM slot is given back
/// until news arrives, then taken again for the next stretch
/// ([`crate::run::park`]).
async fn stretches<F>(
    env: &RunEnv,
    permit: crate::slots::VmPermit,
    first: F,
    started: Instant,
) -> CodeModeResult
where
    F: FnOnce() -> Stretch + Send + 'static,
{
    let mut stretch = blocking(first, started).await;
    let mut permit = permit;
    loop {
        let parked = match stretch {
            Stretch::Result(result) => return *result,
            Stretch::Idle(idle) => {
                let woke = idle.news().await;
                stretch = in_task(move || idle.resume(woke), started).await;
                continue;
            }
            Stretch::Parked(parked) => parked,
        };
        drop(permit);
        tracing::trace!("a cell parks: its VM slot is free until a result arrives");
        let parked = match parked.go_on(env).await {
            Ok((again, parked)) => {
                permit = again;
                parked
            }
            Err(result) => return result,
        };
        stretch = blocking(move || parked.resume(), started).await;
    }
}

/// A VM slot of the run's scope, or `runtime_busy` (its message followed
/// by `advice`) when none frees in time.
async fn vm_slot(env: &RunEnv, advice: &str) -> Result<crate::slots::VmPermit, CodeModeResult> {
    env.host
        .slots
        .acquire(&env.scope.vm_slots)
        .await
        .map_err(|e| {
            CodeModeResult::failure(
                ErrorCode::RuntimeBusy,
                format!("{e}{advice}"),
                Telemetry::default(),
            )
        })
}

/// Why the store would not hand a run over, as the wait's result.
fn store_refusal(e: &StoreError, run_id: &str) -> (CodeModeResult, Vec<SnapshotEvent>) {
    let (code, events) = match e {
        StoreError::Expired => (
            ErrorCode::SnapshotExpired,
            vec![SnapshotEvent {
                event: "expired".into(),
                bytes: None,
                micros: None,
            }],
        ),
        StoreError::Aborted => (ErrorCode::Aborted, Vec::new()),
        StoreError::Interrupted | StoreError::Restore(_) | StoreError::Lost(_) => {
            (ErrorCode::SnapshotRestoreFailed, Vec::new())
        }
        StoreError::Unavailable(_) => (ErrorCode::RuntimeBusy, Vec::new()),
        StoreError::Unknown
        | StoreError::Busy
        | StoreError::OtherScope
        | StoreError::ScopeFull { .. }
        | StoreError::OwnerFull { .. }
        | StoreError::BytesFull { .. }
        | StoreError::ScopeBytesFull { .. } => (ErrorCode::InvalidInput, Vec::new()),
    };
    let failed = CodeModeResult::failure(code, e.message(run_id), Telemetry::default());
    (failed, events)
}

/// On the blocking thread: restore the taken run, deliver what arrived,
/// and drive it to its next result.
fn resume_and_drive(
    ctx: DriveCtx,
    taken: crate::run::resume::Taken,
    run_id: String,
    wait_call_id: String,
    started: Instant,
) -> Stretch {
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
            return end_stretch(
                ctx,
                Some(run_id),
                Driven::done(result),
                state,
                started,
                events,
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
            drive(ctx, vm, Step::Pending, state, ready, Vec::new())
        })
    };
    end_stretch(ctx, Some(run_id), driven, state, started, events)
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

/// Runs the stretch of a cell that was idle, in this task: on a
/// multi-thread runtime on this worker, where the results it was waiting
/// for arrived and where the calls it starts next are sent from, so no
/// thread is woken to pass either on. A burst that turns out long leaves
/// the worker (`block_in_place`, see [`leave_worker`]) after
/// [`codemode_sandbox::LEAVE_TASK_AFTER`]. Elsewhere it runs like
/// [`blocking`].
async fn in_task<F>(work: F, started: Instant) -> Stretch
where
    F: FnOnce() -> Stretch + Send + 'static,
{
    if tokio::runtime::Handle::current().runtime_flavor()
        != tokio::runtime::RuntimeFlavor::MultiThread
    {
        return blocking(work, started).await;
    }
    let run = move || codemode_sandbox::burst_in_task(leave_worker, work);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(stretch) => stretch,
        Err(_) => sandbox_failed("the sandbox thread panicked".to_owned(), started),
    }
}

/// A burst in a task that runs long gives the worker's other tasks to
/// another thread and finishes here. `block_in_place` hands the worker's
/// core over when it is entered; the marker task, queued on this worker
/// before, shows that the worker's queue is served elsewhere (by the new
/// thread, or stolen) before the burst goes on. Bounded: after 5 ms the
/// burst goes on regardless.
fn leave_worker() {
    let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let marker = Arc::clone(&served);
    tokio::spawn(async move { marker.store(true, std::sync::atomic::Ordering::Release) });
    tokio::task::block_in_place(|| {
        let until = Instant::now() + std::time::Duration::from_millis(5);
        while !served.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    });
    tracing::trace!("a long burst left its async worker");
}

/// Runs a VM burst off the async executor: on a multi-thread runtime in
/// place (`block_in_place` hands this worker's other tasks to another
/// thread, and saves two thread hand-offs per exec), on a current-thread
/// runtime on the blocking pool. A panic in `work` becomes `internal_error`.
async fn blocking<F>(work: F, started: Instant) -> Stretch
where
    F: FnOnce() -> Stretch + Send + 'static,
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
        Err(e) => sandbox_failed(e, started),
    }
}

/// A stretch whose thread panicked or failed.
fn sandbox_failed(e: String, started: Instant) -> Stretch {
    let telemetry = Telemetry {
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        ..Telemetry::default()
    };
    Stretch::Result(Box::new(CodeModeResult::failure(
        ErrorCode::InternalError,
        format!("the sandbox thread failed: {e}"),
        telemetry,
    )))
}
