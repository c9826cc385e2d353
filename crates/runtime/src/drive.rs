//! Driving a run: `exec` and `wait` on a blocking thread and the
//! auto-drain loop that delivers nested results until the shared deadline.
//! Guest requests are answered by [`crate::bridge`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use codemode_sandbox::{
    Failure, FailureKind, Limits, OutputItem, SandboxError, Settlement, SnapshotError, Step, Vm,
};
use serde_json::Value;

use codemode_transform::Transformed;

use crate::bridge::{handle_request, settlement};
use crate::calls::{Calls, Msg};
use crate::catalog::Catalog;
use crate::config::Language;
use crate::input::{ExecInput, WaitInput};
use crate::prepare::prepare;
use crate::result::{
    CodeModeResult, ErrorCode, Output, PendingToolCall, SnapshotEvent, Telemetry, WaitReason,
};
use crate::runtime::Inner;
use crate::session::{CodeModeSession, RunContext, Scope, ScopeState, ToolExecutor};
use crate::store::{StoreError, SuspendedRun};
use crate::trajectory::TrajectoryEvent;

/// Counters carried across the exec and waits of one run.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunInfo {
    pub(crate) language: Option<Language>,
    pub(crate) exec_count: u32,
    pub(crate) wait_count: u32,
    pub(crate) search_count: u32,
    pub(crate) describe_count: u32,
    pub(crate) api_count: u32,
    pub(crate) call_count: u32,
    pub(crate) tool_ids: Vec<String>,
    pub(crate) cancelled: u32,
}

/// Everything a run needs between its exec and its last wait.
pub(crate) struct RunState {
    pub(crate) scope: Scope,
    pub(crate) context: Arc<RunContext>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) executor: Arc<dyn ToolExecutor>,
    /// The exec call id that started the run (parent of its nested calls).
    pub(crate) parent_call_id: String,
    /// The call id of the exec or wait driving the run now.
    pub(crate) drive_call_id: String,
    pub(crate) info: RunInfo,
    pub(crate) calls: Calls,
    /// Request ids of `yield_control` calls, resolved on resume.
    pub(crate) yields: Vec<u32>,
    /// TypeScript cells: positions in the generated code → the source.
    pub(crate) source_map: Option<Arc<Transformed>>,
    /// Results that arrived too close to a deadline to deliver: the next
    /// `wait` delivers them first.
    pub(crate) carried: VecDeque<(u32, Settlement)>,
}

impl RunState {
    pub(crate) fn new(session: &CodeModeSession, call_id: &str, language: Language) -> RunState {
        RunState {
            scope: session.scope.scope.clone(),
            context: Arc::clone(&session.context),
            catalog: session.catalog(),
            executor: Arc::clone(&session.executor),
            parent_call_id: call_id.to_owned(),
            drive_call_id: call_id.to_owned(),
            info: RunInfo {
                language: Some(language),
                exec_count: 1,
                ..RunInfo::default()
            },
            calls: Calls::new(session.trajectory.clone()),
            yields: Vec::new(),
            source_map: None,
            carried: VecDeque::new(),
        }
    }
}

/// What one drive needs besides the run.
pub(crate) struct DriveCtx {
    pub(crate) inner: Arc<Inner>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) scope: Arc<ScopeState>,
    pub(crate) limits: Limits,
    /// The exec/wait deadline (`timeoutMs` from its start); the VM's own
    /// CPU deadline is the same instant.
    pub(crate) deadline: Instant,
}

impl DriveCtx {
    /// The context of an exec or wait of `session` that starts now: its
    /// deadline is `timeoutMs` from here. Must run inside the tokio runtime.
    fn starting_now(session: &CodeModeSession) -> DriveCtx {
        let inner = Arc::clone(&session.runtime.inner);
        DriveCtx {
            limits: limits_of(&inner),
            deadline: Instant::now() + Duration::from_millis(inner.config.timeout_ms),
            inner,
            handle: tokio::runtime::Handle::current(),
            scope: Arc::clone(&session.scope),
        }
    }

    /// After this, results are no longer delivered in this call but kept
    /// for the next `wait`: a result arriving just before the deadline must
    /// not start guest work that the deadline would kill (losing the run).
    pub(crate) fn delivery_deadline(&self) -> Instant {
        let margin = (self.limits.timeout / 10).min(Duration::from_millis(50));
        self.deadline.checked_sub(margin).unwrap_or(self.deadline)
    }
}

/// What a drive of the VM ended in.
enum Driven {
    Done(Box<CodeModeResult>),
    Suspend {
        vm: Box<Vm>,
        reason: WaitReason,
        output: Vec<Output>,
    },
}

impl Driven {
    fn done(result: CodeModeResult) -> Driven {
        Driven::Done(Box::new(result))
    }
}

fn limits_of(inner: &Inner) -> Limits {
    let c = &inner.config;
    Limits {
        timeout: Duration::from_millis(c.timeout_ms),
        memory_limit_bytes: c.memory_limit_bytes as usize,
        max_output_bytes: c.max_output_bytes as usize,
        max_snapshot_bytes: c.max_snapshot_bytes as usize,
        ..Limits::default()
    }
}

pub(crate) fn aborted_failure() -> CodeModeResult {
    CodeModeResult::failure(
        ErrorCode::Aborted,
        "the run was aborted (its agent run or session was cancelled); nested calls were cancelled and nothing more will run",
        Telemetry::default(),
    )
}

/// The model's `exec`.
pub(crate) async fn exec(session: &CodeModeSession, call_id: &str, raw: &Value) -> CodeModeResult {
    let started = Instant::now();
    let inner = Arc::clone(&session.runtime.inner);
    let mut info = RunInfo {
        exec_count: 1,
        ..RunInfo::default()
    };
    let result = match ExecInput::parse(raw, &inner.config) {
        Err(e) => CodeModeResult::failure(e.code, e.message, Telemetry::default()),
        Ok(_) if session.scope.is_aborted() => aborted_failure(),
        Ok(input) => {
            info.language = Some(input.language);
            let prepared = match prepare(&input) {
                Ok(prepared) => prepared,
                Err(refused) => {
                    let failed = CodeModeResult::Failed {
                        error: refused.message,
                        code: refused.code,
                        output: Vec::new(),
                        telemetry: Telemetry::default(),
                    };
                    let result =
                        with_telemetry(failed, &info, &session.catalog(), started, Vec::new());
                    return record_call(session, call_id, "exec", result);
                }
            };
            let permit = match inner.slots.acquire(&session.scope.vm_slots).await {
                Ok(permit) => permit,
                Err(e) => {
                    let failed = CodeModeResult::failure(
                        ErrorCode::RuntimeUnavailable,
                        e.to_string(),
                        Telemetry::default(),
                    );
                    let result =
                        with_telemetry(failed, &info, &session.catalog(), started, Vec::new());
                    return record_call(session, call_id, "exec", result);
                }
            };
            let mut state = RunState::new(session, call_id, input.language);
            state.source_map = prepared.source_map;
            let ctx = DriveCtx::starting_now(session);
            let code = prepared.code;
            let work = move || {
                let mut state = state;
                let mut events = Vec::new();
                // Registered before the first burst, so abort and
                // cancellation reach a cell that never yields.
                let driven = live(&ctx, &mut state, |ctx, state| {
                    match ctx.inner.sandbox.start_with_context(
                        &code,
                        state.catalog.guest_context(),
                        &ctx.limits,
                    ) {
                        Ok((vm, step)) => drive(ctx, vm, step, state, VecDeque::new()),
                        Err(e) => Driven::done(host_failure(&e)),
                    }
                });
                finish(&ctx, None, driven, state, started, &mut events)
            };
            let result = blocking(work, started).await;
            drop(permit);
            return record_call(session, call_id, "exec", result);
        }
    };
    record_call(
        session,
        call_id,
        "exec",
        with_telemetry(result, &info, &session.catalog(), started, Vec::new()),
    )
}

/// The model's `wait`.
pub(crate) async fn wait(session: &CodeModeSession, call_id: &str, raw: &Value) -> CodeModeResult {
    let started = Instant::now();
    let inner = Arc::clone(&session.runtime.inner);
    let info = RunInfo {
        wait_count: 1,
        ..RunInfo::default()
    };
    let input = match WaitInput::parse(raw) {
        Ok(input) => input,
        Err(e) => {
            let failed = CodeModeResult::failure(e.code, e.message, Telemetry::default());
            let result = with_telemetry(failed, &info, &session.catalog(), started, Vec::new());
            return record_call(session, call_id, "wait", result);
        }
    };
    if session.scope.is_aborted() {
        let result = with_telemetry(
            aborted_failure(),
            &info,
            &session.catalog(),
            started,
            Vec::new(),
        );
        return record_call(session, call_id, "wait", result);
    }
    let permit = match inner.slots.acquire(&session.scope.vm_slots).await {
        Ok(permit) => permit,
        Err(e) => {
            let failed = CodeModeResult::failure(
                ErrorCode::RuntimeUnavailable,
                format!("{e}; the run keeps waiting, call wait again"),
                Telemetry::default(),
            );
            let result = with_telemetry(failed, &info, &session.catalog(), started, Vec::new());
            return record_call_run(session, call_id, "wait", Some(&input.run_id), result);
        }
    };
    let run = match inner.store.take(&input.run_id, &session.scope.scope) {
        Ok(run) => run,
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
                StoreError::Unknown
                | StoreError::Busy
                | StoreError::OtherScope
                | StoreError::Full { .. }
                | StoreError::ScopeFull { .. }
                | StoreError::BytesFull { .. }
                | StoreError::ScopeBytesFull { .. } => (ErrorCode::InvalidInput, Vec::new()),
            };
            let failed =
                CodeModeResult::failure(code, e.message(&input.run_id), Telemetry::default());
            let result = with_telemetry(
                failed,
                &info,
                &session.catalog(),
                started,
                std::mem::take(&mut events),
            );
            return record_call_run(session, call_id, "wait", Some(&input.run_id), result);
        }
    };
    let ctx = DriveCtx::starting_now(session);
    let run_id = input.run_id;
    let id_for_record = run_id.clone();
    let wait_call_id = call_id.to_owned();
    let work = move || {
        let SuspendedRun {
            snapshot,
            mut state,
            ..
        } = run;
        state.info.wait_count += 1;
        state.drive_call_id = wait_call_id;
        let mut events = Vec::new();
        let restore_started = Instant::now();
        let vm = match ctx.inner.sandbox.restore(&snapshot, &ctx.limits) {
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
        let (arrived, aborted) = state.calls.arrived();
        let driven = if aborted {
            state.info.cancelled += state.calls.cancel_all() as u32;
            Driven::done(aborted_failure())
        } else {
            ready.extend(arrived.into_iter().map(|f| settlement(&ctx, f)));
            live(&ctx, &mut state, |ctx, state| {
                drive(ctx, vm, Step::Pending, state, ready)
            })
        };
        finish(&ctx, Some(&run_id), driven, state, started, &mut events)
    };
    let result = blocking(work, started).await;
    drop(permit);
    record_call_run(session, call_id, "wait", Some(&id_for_record), result)
}

/// Runs `f` with the run registered as live in its scope, so an abort
/// wakes the drive.
fn live<F>(ctx: &DriveCtx, state: &mut RunState, f: F) -> Driven
where
    F: FnOnce(&DriveCtx, &mut RunState) -> Driven,
{
    let key = codemode_sandbox::random_u64();
    ctx.scope.register(crate::session::LiveDrive {
        key,
        call_id: state.drive_call_id.clone(),
        wake: state.calls.sender(),
        cancel: ctx.limits.cancel.clone(),
    });
    let driven = if ctx.scope.is_aborted() || ctx.limits.cancel.is_cancelled() {
        Driven::done(aborted_failure())
    } else {
        f(ctx, state)
    };
    ctx.scope.unregister(key);
    driven
}

/// Runs a VM burst off the async executor: on a multi-thread runtime in
/// place (`block_in_place` hands this worker's other tasks to another
/// thread, and saves two thread hand-offs per exec), on a current-thread
/// runtime on the blocking pool. A panic in `work` becomes `internal_error`.
async fn blocking<F>(work: F, started: Instant) -> CodeModeResult
where
    F: FnOnce() -> CodeModeResult + Send + 'static,
{
    let joined = if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .map_err(|_| "the sandbox thread panicked".to_owned())
        })
    } else {
        tokio::task::spawn_blocking(work)
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

fn record_call(
    session: &CodeModeSession,
    call_id: &str,
    tool: &'static str,
    result: CodeModeResult,
) -> CodeModeResult {
    record_call_run(session, call_id, tool, None, result)
}

fn record_call_run(
    session: &CodeModeSession,
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
    session.trajectory.record(TrajectoryEvent::CodeModeCall {
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
fn with_telemetry(
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
fn finish(
    ctx: &DriveCtx,
    resumed: Option<&str>,
    driven: Driven,
    mut state: RunState,
    started: Instant,
    events: &mut Vec<SnapshotEvent>,
) -> CodeModeResult {
    let store = &ctx.inner.store;
    let (vm, reason, output) = match driven {
        Driven::Done(result) => {
            if let Some(run_id) = resumed {
                store.finish(run_id);
            }
            state.info.cancelled += state.calls.cancel_all() as u32;
            return with_telemetry(
                *result,
                &state.info,
                &state.catalog,
                started,
                std::mem::take(events),
            );
        }
        Driven::Suspend { vm, reason, output } => (vm, reason, output),
    };
    let mut telemetry = Telemetry {
        vm_memory_bytes: Some(vm.memory_bytes() as u64),
        output_bytes: output.iter().map(|o| o.size_bytes() as u64).sum(),
        ..Telemetry::default()
    };
    let fail = |state: &mut RunState, result: CodeModeResult, events: &mut Vec<SnapshotEvent>| {
        if let Some(run_id) = resumed {
            store.finish(run_id);
        }
        state.info.cancelled += state.calls.cancel_all() as u32;
        with_telemetry(
            result,
            &state.info,
            &state.catalog,
            started,
            std::mem::take(events),
        )
    };
    if ctx.scope.is_aborted() {
        return fail(&mut state, aborted_failure(), events);
    }
    let suspend_started = Instant::now();
    let snapshot = match vm.suspend() {
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
            return fail(&mut state, failed, events);
        }
    };
    events.push(SnapshotEvent {
        event: "suspended".into(),
        bytes: Some(snapshot.size_bytes() as u64),
        micros: Some(suspend_started.elapsed().as_micros() as u64),
    });
    let pending_tool_calls: Vec<PendingToolCall> = state
        .calls
        .iter()
        .map(|c| PendingToolCall {
            id: c.info.call_id.clone(),
            tool_id: c.info.tool_id.clone(),
            method: c.info.method.into(),
        })
        .collect();
    let info = state.info.clone();
    let catalog = Arc::clone(&state.catalog);
    let ttl = Duration::from_secs(ctx.inner.config.snapshot_ttl_seconds);
    let inserted = store.insert(
        resumed,
        SuspendedRun {
            snapshot,
            state,
            expires: Instant::now() + ttl,
        },
    );
    let result = match inserted {
        Ok(run_id) => {
            if ctx.scope.is_aborted() {
                // Aborted between the check above and the insert.
                store.abort_run(&run_id, &ctx.scope.scope);
                aborted_failure()
            } else {
                CodeModeResult::Waiting {
                    run_id,
                    reason,
                    pending_tool_calls,
                    output,
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
                telemetry,
            }
        }
    };
    with_telemetry(result, &info, &catalog, started, std::mem::take(events))
}

fn host_failure(error: &SandboxError) -> CodeModeResult {
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

fn convert_output(items: Vec<OutputItem>) -> Vec<Output> {
    items
        .into_iter()
        .map(|item| match item {
            OutputItem::Text(text) => Output::Text { text },
            OutputItem::Json(value) => Output::Json { value },
        })
        .collect()
}

/// Drives a VM: answers requests, delivers ready settlements and nested
/// results as they arrive, and stops when the cell is done, fails, yields,
/// or still waits on calls at the deadline.
fn drive(
    ctx: &DriveCtx,
    mut vm: Vm,
    mut step: Step,
    state: &mut RunState,
    mut ready: VecDeque<(u32, Settlement)>,
) -> Driven {
    let mut output = Vec::new();
    // The cell's value once it returned while fire-and-forget calls were
    // still running: they are delivered until the deadline, then cancelled.
    let mut finished: Option<Value> = None;
    loop {
        output.extend(convert_output(vm.take_output()));
        match step {
            Step::Completed(value) => finished = Some(value),
            Step::Failed(failure) if failure.kind == FailureKind::Aborted => {
                state.info.cancelled += state.calls.cancel_all() as u32;
                return Driven::done(aborted_failure());
            }
            Step::Failed(failure) => {
                return Driven::done(failed(&vm, &failure, output, state.source_map.as_deref()));
            }
            Step::Pending => {}
        }
        for request in vm.take_new_requests() {
            // Host work a guest asks for counts against its deadline: a
            // burst of requests ends at `timeoutMs`, not after all of them.
            if Instant::now() >= ctx.deadline {
                return Driven::done(deadline_failure(&vm, output));
            }
            handle_request(ctx, state, request, &mut ready);
        }
        if ctx.limits.cancel.is_cancelled() {
            state.info.cancelled += state.calls.cancel_all() as u32;
            return Driven::done(aborted_failure());
        }
        if !ready.is_empty() && Instant::now() >= ctx.delivery_deadline() {
            if let Some(value) = finished {
                // The cell already returned: late fire-and-forget results
                // are dropped with their calls.
                state.info.cancelled += state.calls.cancel_all() as u32;
                return Driven::done(completed(&vm, value, output));
            }
            state.carried.extend(ready.drain(..));
            return Driven::Suspend {
                vm: Box::new(vm),
                reason: WaitReason::PendingTools,
                output,
            };
        }
        if let Some((id, settlement)) = ready.pop_front() {
            step = match vm.settle(id, settlement) {
                Ok(step) => step,
                Err(e) => return Driven::done(host_failure(&e)),
            };
            continue;
        }
        step = Step::Pending;
        // Idle: nothing to deliver right now.
        let outstanding = vm.outstanding_requests();
        if finished.is_none() {
            if outstanding.is_empty() {
                return Driven::done(CodeModeResult::Failed {
                    error: "the cell is waiting on a promise that nothing will ever settle (no tool calls are pending and there are no timers); \
                            make sure every awaited promise is resolved"
                        .into(),
                    code: None,
                    output,
                    telemetry: vm_telemetry(&vm, None),
                });
            }
            if state.yields.iter().any(|id| outstanding.contains(id)) {
                return Driven::Suspend {
                    vm: Box::new(vm),
                    reason: WaitReason::Yield,
                    output,
                };
            }
        }
        if state.calls.in_flight() == 0 {
            if let Some(value) = finished {
                return Driven::done(completed(&vm, value, output));
            }
            return Driven::done(CodeModeResult::failure(
                ErrorCode::InternalError,
                "the cell waits on a host request this runtime does not track",
                vm_telemetry(&vm, None),
            ));
        }
        let left = ctx
            .delivery_deadline()
            .saturating_duration_since(Instant::now());
        match state.calls.receiver().recv_timeout(left) {
            Ok(Msg::Done {
                request_id,
                outcome,
            }) => {
                if let Some(done) = state.calls.finish(request_id, outcome) {
                    ready.push_back(settlement(ctx, done));
                }
            }
            Ok(Msg::Abort) => {
                state.info.cancelled += state.calls.cancel_all() as u32;
                return Driven::done(aborted_failure());
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                if let Some(value) = finished {
                    state.info.cancelled += state.calls.cancel_all() as u32;
                    return Driven::done(completed(&vm, value, output));
                }
                return Driven::Suspend {
                    vm: Box::new(vm),
                    reason: WaitReason::PendingTools,
                    output,
                };
            }
        }
    }
}

/// The deadline passed while the host answered the guest's requests.
fn deadline_failure(vm: &Vm, output: Vec<Output>) -> CodeModeResult {
    let mut telemetry = vm_telemetry(vm, Some(ErrorCode::Timeout));
    telemetry.output_bytes = output.iter().map(|o| o.size_bytes() as u64).sum();
    CodeModeResult::Failed {
        error: format!(
            "the cell ran longer than timeoutMs ({} ms) and was stopped (while the host answered its requests)",
            vm.limits().timeout.as_millis()
        ),
        code: Some(ErrorCode::Timeout),
        output,
        telemetry,
    }
}

fn vm_telemetry(vm: &Vm, limit: Option<ErrorCode>) -> Telemetry {
    Telemetry {
        vm_memory_bytes: Some(vm.memory_bytes() as u64),
        limit_failure: limit,
        ..Telemetry::default()
    }
}

fn completed(vm: &Vm, value: Value, output: Vec<Output>) -> CodeModeResult {
    let output_bytes: usize = output.iter().map(Output::size_bytes).sum();
    let value_bytes = crate::calls::json_len(&value) as usize;
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
            telemetry,
        };
    }
    let mut telemetry = vm_telemetry(vm, None);
    telemetry.output_bytes = (output_bytes + value_bytes) as u64;
    CodeModeResult::Completed {
        value,
        output,
        telemetry,
    }
}

fn failed(
    vm: &Vm,
    failure: &Failure,
    output: Vec<Output>,
    source_map: Option<&Transformed>,
) -> CodeModeResult {
    let host_code = failure.code.as_deref().and_then(ErrorCode::from_wire);
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
        telemetry,
    }
}
