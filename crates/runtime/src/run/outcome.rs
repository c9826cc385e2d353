//! What a drive ended in, turned into the model's result: [`Driven`],
//! the failures and completions of a burst, the telemetry of the run, the
//! snapshot stored for a waiting run, and the trajectory record of each
//! exec and wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_sandbox::{
    Failure, FailureKind, OutputItem, SandboxError, Snapshot, SnapshotError, Vm,
};
use codemode_transform::Transformed;
use serde_json::Value;

use crate::catalog::Catalog;
use crate::config::Language;
use crate::executor::RunContext;
use crate::result::{
    CodeModeResult, ErrorCode, Output, PendingToolCall, Receipts, SnapshotEvent, Telemetry,
    WaitReason,
};
use crate::run::calls::Cancel;
use crate::run::env::{DriveCtx, RunEnv};
use crate::run::live::{LiveRun, LiveSnapshot, StoreError};
use crate::run::record::Store;
use crate::run::state::{RunInfo, RunState};
use crate::trajectory::TrajectoryEvent;

/// What a drive of the VM ended in.
pub(crate) enum Driven {
    Done(Box<CodeModeResult>),
    Suspend {
        vm: Box<Vm>,
        reason: WaitReason,
        output: Vec<Output>,
    },
    /// The cell only awaits nested calls and gives its VM slot up while it
    /// does ([`crate::slots`]); its exec or wait goes on.
    Park {
        vm: Box<Vm>,
        output: Vec<Output>,
        ticket: crate::slots::ParkTicket,
    },
    /// The cell only awaits nested calls: its exec or wait awaits them on
    /// the async executor, keeping its VM and slot, and goes on
    /// ([`crate::run::park::Idle`]).
    Idle {
        vm: Box<Vm>,
        output: Vec<Output>,
    },
    /// A parked cell's exec or wait ends while the cell has no VM: the
    /// run suspends from the snapshot it was parked in.
    Suspended {
        snapshot: Box<Snapshot>,
        memory_bytes: u64,
        reason: WaitReason,
        output: Vec<Output>,
    },
}

impl Driven {
    pub(crate) fn done(result: CodeModeResult) -> Driven {
        Driven::Done(Box::new(result))
    }
}

/// Puts an exec's or wait's outcome on its trace span.
pub(crate) fn record_span(span: &tracing::Span, result: &CodeModeResult) {
    span.record("status", result.status());
    if let Some(code) = result.code() {
        span.record("code", code.as_str());
    }
    if let CodeModeResult::Waiting { run_id, .. } = result {
        span.record("run_id", run_id.as_str());
    }
}

pub(crate) fn aborted_failure() -> CodeModeResult {
    CodeModeResult::failure(
        ErrorCode::Aborted,
        "the run was aborted (its agent run or session was cancelled); nested calls were cancelled and nothing more will run",
        Telemetry::default(),
    )
}

pub(crate) fn record_call(
    env: &RunEnv,
    call_id: &str,
    tool: &'static str,
    result: CodeModeResult,
) -> CodeModeResult {
    record_call_run(env, call_id, tool, None, result)
}

pub(crate) fn record_call_run(
    env: &RunEnv,
    call_id: &str,
    tool: &'static str,
    run_id: Option<&str>,
    result: CodeModeResult,
) -> CodeModeResult {
    let run_id = match &result {
        CodeModeResult::Waiting { run_id, .. } => Some(run_id.clone()),
        _ => run_id.map(str::to_owned),
    };
    let language = &result.telemetry().language;
    env.trajectory.record(TrajectoryEvent::CodeModeCall {
        call_id: call_id.to_owned(),
        tool,
        tool_kind: if tool == "exec" {
            "code_mode_exec"
        } else {
            "code_mode_wait"
        },
        tool_input_kind: (tool == "exec").then_some(if language == "typescript" {
            "typescript"
        } else {
            "javascript"
        }),
        run_id,
        status: result.status(),
        code: result.code().map(ErrorCode::as_str),
        duration_ms: result.telemetry().duration_ms,
    });
    result
}

/// Fills the run-wide telemetry fields, keeping what the drive measured.
pub(crate) fn with_telemetry(
    mut result: CodeModeResult,
    info: &RunInfo,
    catalog: &Catalog,
    started: Instant,
    events: Vec<SnapshotEvent>,
) -> CodeModeResult {
    let telemetry = match &mut result {
        CodeModeResult::Completed { telemetry, .. }
        | CodeModeResult::Waiting { telemetry, .. }
        | CodeModeResult::Failed { telemetry, .. } => telemetry,
    };
    let measured = std::mem::take(telemetry);
    *telemetry = Telemetry {
        language: info
            .language
            .unwrap_or(Language::JavaScript)
            .as_str()
            .into(),
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        exec_count: info.exec_count,
        wait_count: info.wait_count,
        vm_memory_bytes: measured.vm_memory_bytes,
        output_bytes: measured.output_bytes,
        limit_failure: measured.limit_failure,
        snapshot_events: events,
        visible_tools: vec!["exec".into(), "wait".into()],
        catalog_size: catalog.len() as u32,
        catalog_by_source: catalog.count_by_source(),
        nested_search_count: info.search_count,
        nested_describe_count: info.describe_count,
        nested_api_count: info.api_count,
        nested_call_count: info.call_count,
        nested_tool_ids: info.tool_ids.clone(),
        cancelled_tool_calls: info.cancelled,
    };
    result
}

/// Turns a drive into a result, storing the snapshot of a waiting run.
pub(crate) fn finish(
    ctx: &DriveCtx,
    resumed: Option<&str>,
    driven: Driven,
    mut state: RunState,
    started: Instant,
    events: &mut Vec<SnapshotEvent>,
) -> CodeModeResult {
    // Nobody follows the run once this exec/wait returns.
    state.calls.follow(None);
    let end = |state: &mut RunState, result, why, events: &mut Vec<SnapshotEvent>| {
        end_run(ctx, resumed, state, result, why, started, events)
    };
    let (vm, reason, output) = match driven {
        Driven::Done(result) => return end(&mut state, *result, Cancel::RunEnded, events),
        Driven::Suspend { vm, reason, output } => (Ok(vm), reason, output),
        // Not parked after all (its caller suspends instead).
        Driven::Park { vm, output, .. } | Driven::Idle { vm, output } => {
            (Ok(vm), WaitReason::PendingTools, output)
        }
        Driven::Suspended {
            snapshot,
            memory_bytes,
            reason,
            output,
        } => (Err((snapshot, memory_bytes)), reason, output),
    };
    let memory_bytes = match &vm {
        Ok(vm) => vm.memory_bytes() as u64,
        Err((_, bytes)) => *bytes,
    };
    let mut telemetry = Telemetry {
        vm_memory_bytes: Some(memory_bytes),
        output_bytes: output.iter().map(|o| o.size_bytes() as u64).sum(),
        ..Telemetry::default()
    };
    if ctx.scope.is_aborted() {
        return end(&mut state, aborted_failure(), Cancel::Aborted, events);
    }
    let suspend_started = Instant::now();
    let suspended = match vm {
        Ok(vm) => vm.suspend(),
        Err((snapshot, _)) => Ok(*snapshot),
    };
    let snapshot = match suspended {
        Ok(snapshot) => snapshot,
        Err(e) => {
            let mut failed = host_failure(&e);
            if let CodeModeResult::Failed {
                output: o,
                telemetry: t,
                ..
            } = &mut failed
            {
                *o = output;
                telemetry.limit_failure = Some(ErrorCode::SnapshotLimitExceeded);
                *t = telemetry;
            }
            return end(&mut state, failed, Cancel::RunEnded, events);
        }
    };
    let run_id = resumed.map_or_else(crate::run::live::new_run_id, str::to_owned);
    let store = &ctx.host.store;
    if carry_arrived(ctx, store, &mut state, &run_id) {
        return end(&mut state, aborted_failure(), Cancel::Aborted, events);
    }
    let generation = match write_record(ctx, store, &state, &snapshot, &run_id) {
        Ok(generation) => generation,
        Err((code, message)) => {
            state.calls.sink().stop();
            telemetry.limit_failure = (code == ErrorCode::SnapshotLimitExceeded).then_some(code);
            let failed = CodeModeResult::Failed {
                error: message,
                code: Some(code),
                output,
                receipts: Receipts::default(),
                telemetry,
            };
            return end(&mut state, failed, Cancel::RunEnded, events);
        }
    };
    events.push(SnapshotEvent {
        event: "suspended".into(),
        bytes: Some(snapshot.size_bytes() as u64),
        micros: Some(suspend_started.elapsed().as_micros() as u64),
    });
    let waiting = Waiting {
        pending_tool_calls: pending_tool_calls(&state),
        reason: wait_reason(reason, &state),
        output,
        telemetry,
    };
    let receipts = state.calls.take_receipts();
    let info = state.info.clone();
    let catalog = Arc::clone(&state.catalog);
    let result = hold(ctx, resumed, run_id, snapshot, state, generation, waiting);
    let mut result = with_telemetry(result, &info, &catalog, started, std::mem::take(events));
    // Calls that ended before the suspend happened, whatever became of the
    // run: the model must learn of their effects.
    *result.receipts_mut() = receipts;
    result
}

/// The run ends with `result`: a resumed run leaves the stores, its calls
/// still in flight are cancelled (`why`), and the result gets the run's
/// telemetry and receipts.
fn end_run(
    ctx: &DriveCtx,
    resumed: Option<&str>,
    state: &mut RunState,
    result: CodeModeResult,
    why: Cancel,
    started: Instant,
    events: &mut Vec<SnapshotEvent>,
) -> CodeModeResult {
    if let Some(run_id) = resumed {
        ctx.host.live.finish(run_id);
        forget(ctx, run_id);
    }
    state.info.cancelled += state.calls.cancel_all(why) as u32;
    let mut result = with_telemetry(
        result,
        &state.info,
        &state.catalog,
        started,
        std::mem::take(events),
    );
    *result.receipts_mut() = state.calls.take_receipts();
    result
}

/// A run that ends (or could not wait) leaves the store.
fn forget(ctx: &DriveCtx, run_id: &str) {
    if let Err(e) = ctx.host.store.backend.remove(run_id) {
        tracing::warn!(run_id, error = %e, "a finished run could not be removed from the run store; it expires with its TTL");
    }
}

/// From here on the run's results are written to a store that outlives the
/// process; those that arrived before are kept in the record (carried), so
/// none is lost whichever process resumes the run. Returns whether the run
/// was aborted meanwhile (then nothing is written).
fn carry_arrived(ctx: &DriveCtx, store: &Store, state: &mut RunState, run_id: &str) -> bool {
    if state.durable {
        state.calls.sink().persist_to(&store.backend, run_id);
    }
    // A claim not yet taken is moot: the run waits again.
    state.calls.defer_claim(None);
    let (arrived, aborted) = state.calls.arrived();
    for finished in arrived {
        let settled = crate::run::bridge::settlement(ctx, state, finished);
        state.carried.push_back(settled);
    }
    if aborted {
        state.calls.sink().stop();
    }
    aborted
}

/// Writes the waiting run's record; its generation, or the code and
/// message of why the run cannot wait.
fn write_record(
    ctx: &DriveCtx,
    store: &Store,
    state: &RunState,
    snapshot: &Snapshot,
    run_id: &str,
) -> Result<u64, (ErrorCode, String)> {
    let backend = &store.backend;
    let record = if state.durable {
        crate::run::record::encode(state, &snapshot.to_bytes(), backend.instance())
    } else {
        crate::run::record::LIVE_ONLY.to_vec()
    };
    let ttl = Duration::from_secs(ctx.host.config.snapshot_ttl_seconds);
    let generation = backend
        .put(run_id, &state.owner_key, &record, ttl, store.bounds)
        .map_err(|e| match &e {
            codemode_store::StoreError::Full { limit } => (
                ErrorCode::SnapshotLimitExceeded,
                format!(
                    "too many suspended runs are held at once (limit {limit}, maxSuspendedRuns, over every process sharing the store); finish or abandon some before starting more"
                ),
            ),
            codemode_store::StoreError::BytesFull { .. } => (
                ErrorCode::SnapshotLimitExceeded,
                format!(
                    "the run could not wait: {e} (maxSuspendedRuns / maxStoreBytes over every process sharing the store); finish or abandon waiting runs, or keep less data alive across awaits"
                ),
            ),
            _ => (
                ErrorCode::RuntimeBusy,
                format!(
                    "the run could not wait: {e}; it ended and its nested calls were cancelled (they may or may not have taken effect); run it again when the store is back"
                ),
            ),
        })?;
    if state.durable {
        publish_held(state, backend, run_id);
    }
    Ok(generation)
}

/// Lists the run's calls held for approval in the run store, so that every
/// process sharing it lists and decides them, and a restarted one asks
/// again. A call that cannot be listed is still decided here.
fn publish_held(state: &RunState, backend: &Arc<dyn codemode_store::RunBackend>, run_id: &str) {
    let run_id: Arc<str> = Arc::from(run_id);
    for (request_id, call) in state.calls.pending_by_request() {
        let Some(gate) = call.info.gate.as_ref().filter(|g| g.awaiting_approval()) else {
            continue;
        };
        let Some(held) = gate.held() else { continue };
        let entry = crate::control::StoredApproval {
            call_id: call.info.call_id.clone(),
            tool_id: call.info.tool_id.clone(),
            reason: held.reason.clone(),
            input_summary: held.summary.clone(),
            context: RunContext::clone(&state.context),
            owner_key: state.owner_key.to_string(),
        };
        let entry = serde_json::to_vec(&entry).unwrap_or_default();
        match backend.put_held(&run_id, request_id, &entry) {
            Ok(()) => gate.publish(crate::control::Published {
                backend: Arc::clone(backend),
                run_id: Arc::clone(&run_id),
                request_id,
            }),
            Err(e) => {
                tracing::warn!(run_id = %run_id, call_id = %call.info.call_id, error = %e, "a held call could not be listed in the run store; only this process can decide it");
            }
        }
    }
}

/// The calls the model is told are still pending.
fn pending_tool_calls(state: &RunState) -> Vec<PendingToolCall> {
    state
        .calls
        .iter()
        .map(|c| {
            let awaiting = c.info.awaiting_approval();
            PendingToolCall {
                id: c.info.call_id.clone(),
                tool_id: c.info.tool_id.clone(),
                method: c.info.method.into(),
                awaiting_approval: awaiting,
                input_summary: c
                    .info
                    .gate
                    .as_ref()
                    .filter(|_| awaiting)
                    .and_then(|g| g.summary()),
            }
        })
        .collect()
}

/// Suspended at the deadline while only approvals were pending: the model
/// should know a human has to act. And the other way: a decision that
/// landed since the drive decided to suspend makes the call a running one.
fn wait_reason(reason: WaitReason, state: &RunState) -> WaitReason {
    let only_approvals = state.calls.only_approvals_pending();
    match reason {
        WaitReason::PendingTools if only_approvals => WaitReason::Approval,
        WaitReason::Approval if !only_approvals => WaitReason::PendingTools,
        other => other,
    }
}

/// What a `waiting` result says besides the run id.
struct Waiting {
    pending_tool_calls: Vec<PendingToolCall>,
    reason: WaitReason,
    output: Vec<Output>,
    telemetry: Telemetry,
}

/// Keeps the live copy of the stored run: `waiting`, or why it cannot
/// wait.
fn hold(
    ctx: &DriveCtx,
    resumed: Option<&str>,
    run_id: String,
    snapshot: Snapshot,
    state: RunState,
    generation: u64,
    waiting: Waiting,
) -> CodeModeResult {
    let Waiting {
        pending_tool_calls,
        reason,
        output,
        mut telemetry,
    } = waiting;
    let run_tag = Arc::clone(&state.run_tag);
    let ttl = Duration::from_secs(ctx.host.config.snapshot_ttl_seconds);
    let inserted = ctx.host.live.insert(
        &run_id,
        resumed.is_some(),
        LiveRun {
            snapshot: LiveSnapshot::Raw(Arc::new(snapshot)),
            state,
            since: Instant::now(),
            expires: Instant::now() + ttl,
            generation,
        },
    );
    if inserted.is_err() {
        forget(ctx, &run_id);
    }
    match inserted {
        Ok(run_id) => {
            // Pending approvals can be named by this id from now on.
            let _ = run_tag.set(run_id.clone());
            if ctx.scope.is_aborted() {
                // Aborted between the check in `finish` and the insert.
                ctx.host.live.abort_run(&run_id, &ctx.scope.scope);
                aborted_failure()
            } else {
                CodeModeResult::Waiting {
                    run_id,
                    reason,
                    pending_tool_calls,
                    output,
                    receipts: Receipts::default(),
                    telemetry,
                }
            }
        }
        Err(StoreError::Aborted) => aborted_failure(),
        Err(e) => {
            telemetry.limit_failure = Some(ErrorCode::SnapshotLimitExceeded);
            CodeModeResult::Failed {
                error: e.message(""),
                code: Some(ErrorCode::SnapshotLimitExceeded),
                output,
                receipts: Receipts::default(),
                telemetry,
            }
        }
    }
}

pub(crate) fn host_failure(error: &SandboxError) -> CodeModeResult {
    let code = match error {
        SandboxError::Snapshot(SnapshotError::TooLarge { .. }) => ErrorCode::SnapshotLimitExceeded,
        SandboxError::Snapshot(_) => ErrorCode::SnapshotRestoreFailed,
        SandboxError::PoolExhausted { .. }
        | SandboxError::Engine(_)
        | SandboxError::Abi(_)
        | SandboxError::Cache { .. } => ErrorCode::RuntimeUnavailable,
        SandboxError::VmDead | SandboxError::UnknownRequest(_) => ErrorCode::InternalError,
    };
    CodeModeResult::failure(code, error.to_string(), Telemetry::default())
}

pub(crate) fn convert_output(items: Vec<OutputItem>) -> Vec<Output> {
    items
        .into_iter()
        .map(|item| match item {
            OutputItem::Text(text) => Output::Text { text },
            OutputItem::Json(value) => Output::Json { value },
        })
        .collect()
}

/// The deadline passed while the host answered the guest's requests.
pub(crate) fn deadline_failure(vm: &Vm, output: Vec<Output>) -> CodeModeResult {
    let mut telemetry = vm_telemetry(vm, Some(ErrorCode::Timeout));
    telemetry.output_bytes = output.iter().map(|o| o.size_bytes() as u64).sum();
    CodeModeResult::Failed {
        error: format!(
            "the cell ran longer than timeoutMs ({} ms) and was stopped (while the host answered its requests)",
            vm.limits().timeout.as_millis()
        ),
        code: Some(ErrorCode::Timeout),
        output,
        receipts: Receipts::default(),
        telemetry,
    }
}

pub(crate) fn vm_telemetry(vm: &Vm, limit: Option<ErrorCode>) -> Telemetry {
    Telemetry {
        vm_memory_bytes: Some(vm.memory_bytes() as u64),
        limit_failure: limit,
        ..Telemetry::default()
    }
}

pub(crate) fn completed(vm: &Vm, value: Value, output: Vec<Output>) -> CodeModeResult {
    let output_bytes: usize = output.iter().map(Output::size_bytes).sum();
    let value_bytes = crate::result::json_len(&value) as usize;
    let limit = vm.limits().max_output_bytes;
    // One budget for everything this exec or wait returns: output items
    // (with their per-item cost) and the value.
    let used = vm.output_budget_used();
    if used.saturating_add(value_bytes) > limit {
        let mut telemetry = vm_telemetry(vm, Some(ErrorCode::OutputLimitExceeded));
        telemetry.output_bytes = output_bytes as u64;
        return CodeModeResult::Failed {
            error: format!(
                "output limit exceeded: the returned value is {value_bytes} bytes of JSON and the output before it used {used}, more than maxOutputBytes ({limit}) for one exec or wait; return a smaller summary"
            ),
            code: Some(ErrorCode::OutputLimitExceeded),
            output,
            receipts: Receipts::default(),
            telemetry,
        };
    }
    let mut telemetry = vm_telemetry(vm, None);
    telemetry.output_bytes = (output_bytes + value_bytes) as u64;
    CodeModeResult::Completed {
        value,
        output,
        receipts: Receipts::default(),
        telemetry,
    }
}

pub(crate) fn failed(
    vm: &Vm,
    failure: &Failure,
    output: Vec<Output>,
    source_map: Option<&Transformed>,
) -> CodeModeResult {
    let host_code = failure
        .code
        .as_deref()
        .and_then(ErrorCode::from_wire)
        // An uncaught denial fails the cell as a failed nested call; its
        // message says it was denied.
        .map(|code| match code {
            ErrorCode::ApprovalDenied | ErrorCode::Interrupted => ErrorCode::NestedToolFailed,
            other => other,
        });
    let code = match failure.kind {
        FailureKind::Exception => host_code,
        FailureKind::StackOverflow => None,
        FailureKind::Timeout => Some(ErrorCode::Timeout),
        FailureKind::MemoryLimit => Some(ErrorCode::MemoryLimitExceeded),
        FailureKind::OutputLimit => Some(ErrorCode::OutputLimitExceeded),
        FailureKind::TooManyRequests => Some(ErrorCode::TooManyPendingToolCalls),
        FailureKind::InvalidResult | FailureKind::Crashed => Some(ErrorCode::InternalError),
        FailureKind::Aborted => Some(ErrorCode::Aborted),
    };
    let mut error = match (&failure.name, failure.kind) {
        (Some(name), FailureKind::Exception) => format!("{name}: {}", failure.message),
        _ => failure.message.clone(),
    };
    match (failure.line, failure.column, source_map) {
        (Some(line), column, Some(map)) => {
            // The model wrote TypeScript: name its line, not the generated one.
            let (line, column) = map.original_position(line, column.unwrap_or(1));
            error.push_str(&format!(" (line {line}, column {column})"));
        }
        (Some(line), Some(column), None) => {
            error.push_str(&format!(" (line {line}, column {column})"));
        }
        (Some(line), None, None) => error.push_str(&format!(" (line {line})")),
        _ => {}
    }
    let limit = match failure.kind {
        FailureKind::Timeout
        | FailureKind::MemoryLimit
        | FailureKind::OutputLimit
        | FailureKind::TooManyRequests => code,
        _ => None,
    };
    let mut telemetry = vm_telemetry(vm, limit);
    telemetry.output_bytes = output.iter().map(|o| o.size_bytes() as u64).sum();
    CodeModeResult::Failed {
        error,
        code,
        output,
        receipts: Receipts::default(),
        telemetry,
    }
}
