//! Driving a run: `exec` and `wait` on a blocking thread, the bridge that
//! answers guest requests (search, describe, call, yield) and the auto-drain
//! loop that delivers nested results until the shared deadline.
//!
//! Everything a guest sends is untrusted: each request is re-validated here
//! against the run's catalog and limits before anything runs.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use codemode_sandbox::{
    Failure, FailureKind, HostRequest, Limits, OutputItem, SandboxError, Settlement, SnapshotError,
    Step, Vm,
};
use serde_json::{Map, Value};

use codemode_transform::Transformed;

use crate::calls::{CallInfo, Calls, Finished, Msg};
use crate::catalog::{Catalog, CatalogEntry, ToolSource};
use crate::config::Language;
use crate::input::{ExecInput, WaitInput};
use crate::prepare::prepare;
use crate::result::{
    CodeModeResult, ErrorCode, Output, PendingToolCall, SnapshotEvent, Telemetry, WaitReason,
};
use crate::runtime::Inner;
use crate::session::{
    CodeModeSession, McpMethod, McpServerCall, NestedCall, RunContext, Scope, ScopeState,
    ToolExecutor,
};
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
    context: Arc<RunContext>,
    catalog: Arc<Catalog>,
    executor: Arc<dyn ToolExecutor>,
    parent_call_id: String,
    info: RunInfo,
    calls: Calls,
    /// Request ids of `yield_control` calls, resolved on resume.
    yields: Vec<u32>,
    /// TypeScript cells: positions in the generated code → the source.
    source_map: Option<Arc<Transformed>>,
    /// Results that arrived too close to a deadline to deliver: the next
    /// `wait` delivers them first.
    carried: VecDeque<(u32, Settlement)>,
}

impl RunState {
    fn new(session: &CodeModeSession, call_id: &str, language: Language) -> RunState {
        RunState {
            scope: session.scope.scope.clone(),
            context: Arc::clone(&session.context),
            catalog: session.catalog(),
            executor: Arc::clone(&session.executor),
            parent_call_id: call_id.to_owned(),
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
struct DriveCtx {
    inner: Arc<Inner>,
    handle: tokio::runtime::Handle,
    scope: Arc<ScopeState>,
    limits: Limits,
    /// The exec/wait deadline (`timeoutMs` from its start); the VM's own
    /// CPU deadline is the same instant.
    deadline: Instant,
}

impl DriveCtx {
    /// After this, results are no longer delivered in this call but kept
    /// for the next `wait`: a result arriving just before the deadline must
    /// not start guest work that the deadline would kill (losing the run).
    fn delivery_deadline(&self) -> Instant {
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

fn aborted_failure() -> CodeModeResult {
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
                    let failed = CodeModeResult::failure(
                        refused.code,
                        refused.message,
                        Telemetry::default(),
                    );
                    let result =
                        with_telemetry(failed, &info, &session.catalog(), started, Vec::new());
                    return record_call(session, call_id, "exec", result);
                }
            };
            let mut state = RunState::new(session, call_id, input.language);
            state.source_map = prepared.source_map;
            let ctx = DriveCtx {
                limits: limits_of(&inner),
                deadline: Instant::now() + Duration::from_millis(inner.config.timeout_ms),
                inner: Arc::clone(&inner),
                handle: tokio::runtime::Handle::current(),
                scope: Arc::clone(&session.scope),
            };
            let code = prepared.code;
            let work = move || {
                let mut state = state;
                let mut events = Vec::new();
                let driven = match ctx.inner.sandbox.start_with_context(
                    &code,
                    state.catalog.guest_context(),
                    &ctx.limits,
                ) {
                    Ok((vm, step)) => live(&ctx, &mut state, |ctx, state| {
                        drive(ctx, vm, step, state, VecDeque::new())
                    }),
                    Err(e) => Driven::done(host_failure(&e)),
                };
                finish(&ctx, None, driven, state, started, &mut events)
            };
            return record_call(session, call_id, "exec", blocking(work, started).await);
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
                | StoreError::Full { .. } => (ErrorCode::InvalidInput, Vec::new()),
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
    let ctx = DriveCtx {
        limits: limits_of(&inner),
        deadline: Instant::now() + Duration::from_millis(inner.config.timeout_ms),
        inner: Arc::clone(&inner),
        handle: tokio::runtime::Handle::current(),
        scope: Arc::clone(&session.scope),
    };
    let run_id = input.run_id;
    let id_for_record = run_id.clone();
    let work = move || {
        let SuspendedRun {
            snapshot,
            mut state,
            ..
        } = run;
        state.info.wait_count += 1;
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
    record_call_run(session, call_id, "wait", Some(&id_for_record), result)
}

/// Runs `f` with the run registered as live in its scope, so an abort
/// wakes the drive.
fn live<F>(ctx: &DriveCtx, state: &mut RunState, f: F) -> Driven
where
    F: FnOnce(&DriveCtx, &mut RunState) -> Driven,
{
    let key = codemode_sandbox::random_u64();
    ctx.scope.register(key, state.calls.sender());
    let driven = if ctx.scope.is_aborted() {
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
            Step::Failed(failure) => {
                return Driven::done(failed(&vm, &failure, output, state.source_map.as_deref()));
            }
            Step::Pending => {}
        }
        for request in vm.take_new_requests() {
            handle_request(ctx, state, request, &mut ready);
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

/// The settlement delivering a finished nested call to the guest.
fn settlement(ctx: &DriveCtx, done: Finished) -> (u32, Settlement) {
    (
        done.request_id,
        outcome_settlement(ctx, done.outcome, &done.tool_id),
    )
}

fn outcome_settlement(
    ctx: &DriveCtx,
    outcome: Result<Value, crate::session::ToolCallError>,
    tool_id: &str,
) -> Settlement {
    let max = ctx.inner.options.max_tool_result_bytes;
    match outcome {
        Ok(value) => {
            let text = value.to_string();
            if text.len() > max {
                Settlement::reject_with_code(
                    format!(
                        "tool {tool_id} returned {} bytes of JSON, more than the bridge carries ({max} bytes); ask the tool for less",
                        text.len()
                    ),
                    ErrorCode::NestedToolFailed.as_str(),
                )
            } else {
                Settlement::ResolveJson(text)
            }
        }
        Err(e) => Settlement::reject_with_code(
            format!("tool {tool_id} failed: {}", e.message),
            ErrorCode::NestedToolFailed.as_str(),
        ),
    }
}

fn bad_request(message: String) -> Settlement {
    Settlement::reject(message)
}

/// Answers one guest request, or starts the nested call it asks for.
fn handle_request(
    ctx: &DriveCtx,
    state: &mut RunState,
    request: HostRequest,
    ready: &mut VecDeque<(u32, Settlement)>,
) {
    let HostRequest { id, payload } = request;
    let method = payload.get("method").and_then(Value::as_str).unwrap_or("");
    let empty = Map::new();
    let params = match payload.get("params") {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => &empty,
        Some(_) => {
            ready.push_back((
                id,
                bad_request(format!(
                    "bridge request `{method}`: params must be an object"
                )),
            ));
            return;
        }
    };
    let reply = match method {
        "yield" => {
            state.yields.push(id);
            return;
        }
        "search" => {
            state.info.search_count += 1;
            search(ctx, state, params)
        }
        "describe" => {
            state.info.describe_count += 1;
            describe(state, params)
        }
        "call" => match call(ctx, state, id, params) {
            Some(reply) => reply,
            None => return,
        },
        "mcp.call" => match mcp_call(ctx, state, id, params) {
            Some(reply) => reply,
            None => return,
        },
        "mcp.request" => match mcp_request(ctx, state, id, params) {
            Some(reply) => reply,
            None => return,
        },
        "mcp.api" => {
            state.info.api_count += 1;
            mcp_api(state, params)
        }
        "api.list" => {
            state.info.api_count += 1;
            api_list(state, params)
        }
        "api.read" => {
            state.info.api_count += 1;
            api_read(state, params)
        }
        other => bad_request(format!(
            "unknown bridge method `{other}`; the guest API is tools.search, tools.describe, tools.call, MCP.<server>.*, API.list, API.read and yield_control"
        )),
    };
    ready.push_back((id, reply));
}

fn search(ctx: &DriveCtx, state: &RunState, params: &Map<String, Value>) -> Settlement {
    let config = &ctx.inner.config;
    let query = match params.get("query") {
        Some(Value::String(q)) if !q.trim().is_empty() && q.len() <= 1024 => q,
        Some(Value::String(q)) if q.len() > 1024 => {
            return bad_request(
                "tools.search: the query is longer than 1024 bytes; use a few keywords".into(),
            );
        }
        Some(Value::String(_)) => {
            return bad_request("tools.search: the query is empty; pass keywords, or read ALL_TOOLS for the whole catalog".into());
        }
        _ => {
            return bad_request(
                "tools.search(query, options?): query must be a string of keywords".into(),
            );
        }
    };
    let mut limit = config.search_default_limit.min(config.max_search_limit) as usize;
    match params.get("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(options)) => {
            if let Some(key) = options.keys().find(|k| k.as_str() != "limit") {
                return bad_request(format!(
                    "tools.search: unknown option `{key}`; the only option is `limit`"
                ));
            }
            match options.get("limit") {
                None => {}
                Some(v) => match v
                    .as_u64()
                    .filter(|&n| n >= 1 && n <= config.max_search_limit)
                {
                    Some(n) => limit = n as usize,
                    None => {
                        return bad_request(format!(
                            "tools.search: options.limit must be an integer from 1 to {} (maxSearchLimit), got {v}",
                            config.max_search_limit
                        ));
                    }
                },
            }
        }
        Some(_) => {
            return bad_request("tools.search: options must be an object like { limit: 5 }".into());
        }
    }
    let hits: Vec<Value> = state
        .catalog
        .search(query, limit)
        .into_iter()
        .map(|e| e.compact_json())
        .collect();
    Settlement::Resolve(Value::Array(hits))
}

fn describe(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let Some(Value::String(id)) = params.get("id") else {
        return bad_request(
            "tools.describe(id): id must be a catalog id or tool name (a string)".into(),
        );
    };
    match state.catalog.describe(id) {
        Ok(entry) => Settlement::Resolve(entry.described_json()),
        Err(message) => bad_request(format!("tools.describe: {message}")),
    }
}

fn nested_failure(message: String) -> Option<Settlement> {
    Some(Settlement::reject_with_code(
        message,
        ErrorCode::NestedToolFailed.as_str(),
    ))
}

/// `maxPendingToolCalls` reached: the rejection for one more call.
fn over_pending_limit(ctx: &DriveCtx, state: &RunState) -> Option<Settlement> {
    let max_pending = ctx.inner.config.max_pending_tool_calls as usize;
    (state.calls.in_flight() >= max_pending).then(|| {
        Settlement::reject_with_code(
            format!(
                "too many nested tool calls in flight: at most {max_pending} (maxPendingToolCalls) may run at once; await some before starting more"
            ),
            ErrorCode::TooManyPendingToolCalls.as_str(),
        )
    })
}

/// Starts a nested call of a catalog entry (checked by the caller);
/// `None` when it is now in flight.
fn start_tool_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    entry: &Arc<CatalogEntry>,
    input: Value,
) -> Option<Settlement> {
    if let Some(refused) = over_pending_limit(ctx, state) {
        return Some(refused);
    }
    state.info.call_count += 1;
    if !state.info.tool_ids.contains(&entry.id) {
        state.info.tool_ids.push(entry.id.clone());
    }
    let call_id = state.calls.next_call_id(&state.parent_call_id);
    let info = CallInfo {
        call_id: call_id.clone(),
        tool_id: entry.id.clone(),
        method: "call",
        parent_call_id: state.parent_call_id.clone(),
        input_bytes: input.to_string().len() as u64,
    };
    let future = state.executor.call(NestedCall {
        context: Arc::clone(&state.context),
        parent_call_id: state.parent_call_id.clone(),
        call_id,
        tool: Arc::clone(entry),
        input,
    });
    state
        .calls
        .start(&ctx.handle, request_id, info, future)
        .map(|outcome| outcome_settlement(ctx, outcome, &entry.id))
}

/// `tools.call(id, input)`; `None` when the call is now in flight.
fn call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    params: &Map<String, Value>,
) -> Option<Settlement> {
    let Some(Value::String(id)) = params.get("id") else {
        return nested_failure("tools.call(id, input): id must be a catalog id string".into());
    };
    let entry = match state.catalog.callable(id) {
        Ok(entry) => Arc::clone(entry),
        Err(message) => return nested_failure(format!("tools.call: {message}")),
    };
    let input = match params.get("input") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v.clone(),
    };
    start_tool_call(ctx, state, request_id, &entry, input)
}

/// The `MCP.<server>.<tool>` label of an MCP catalog entry, for messages.
fn mcp_label(catalog: &Catalog, entry: &CatalogEntry) -> String {
    catalog
        .mcp()
        .servers()
        .iter()
        .find_map(|s| {
            s.tools
                .iter()
                .find(|t| t.entry.id == entry.id)
                .map(|t| format!("MCP.{}.{}", s.js_name, t.js_name))
        })
        .unwrap_or_else(|| entry.id.clone())
}

/// `MCP.<server>.<tool>(input)`: resolved to the exact MCP catalog id, its
/// input checked against the schema's top level; `None` when in flight.
fn mcp_call(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    params: &Map<String, Value>,
) -> Option<Settlement> {
    let Some(Value::String(id)) = params.get("id") else {
        return nested_failure("MCP call: the tool id must be a string".into());
    };
    let entry = match state.catalog.get(id) {
        Some(entry) if entry.source == ToolSource::Mcp => Arc::clone(entry),
        _ => {
            return nested_failure(format!(
                "no MCP tool \"{id}\" in this run; see API.list(\"mcp\") for the servers and tools"
            ));
        }
    };
    let label = mcp_label(&state.catalog, &entry);
    let input = params.get("input").cloned().unwrap_or(Value::Null);
    let input = match crate::mcp::prepare_input(&label, &entry.parameters, input) {
        Ok(input) => input,
        Err(message) => return nested_failure(message),
    };
    start_tool_call(ctx, state, request_id, &entry, input)
}

/// `MCP.<server>.resources.*` / `.prompts.*`; `None` when in flight.
fn mcp_request(
    ctx: &DriveCtx,
    state: &mut RunState,
    request_id: u32,
    params: &Map<String, Value>,
) -> Option<Settlement> {
    let server_name = params.get("server").and_then(Value::as_str).unwrap_or("");
    let Some(server) = state.catalog.mcp().server(server_name) else {
        return nested_failure(format!(
            "no MCP server `{server_name}` in this run; see API.list(\"mcp\")"
        ));
    };
    let op = params.get("op").and_then(Value::as_str).unwrap_or("");
    let (method, offered) = match op {
        "resources.list" => (McpMethod::ResourcesList, server.info.resources),
        "resources.read" => (McpMethod::ResourcesRead, server.info.resources),
        "resources.templates" => (McpMethod::ResourceTemplatesList, server.info.resources),
        "prompts.list" => (McpMethod::PromptsList, server.info.prompts),
        "prompts.get" => (McpMethod::PromptsGet, server.info.prompts),
        _ => return nested_failure(format!("unknown MCP request `{op}`")),
    };
    let label = format!("MCP.{}.{op}", server.js_name);
    if !offered {
        return nested_failure(format!(
            "{label}: MCP server \"{}\" offers no {}",
            server.info.name,
            if op.starts_with("resources") { "resources" } else { "prompts" }
        ));
    }
    let input = match params.get("input") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => {
            return nested_failure(format!(
                "{label} takes one object argument like {{ uri: \"...\" }}"
            ));
        }
    };
    let string_field = |key: &str| match input.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(format!("{label}: `{key}` must be a non-empty string")),
    };
    let mut checked = Map::new();
    let result = (|| {
        match method {
            McpMethod::ResourcesList | McpMethod::ResourceTemplatesList | McpMethod::PromptsList => {
                if let Some(cursor) = string_field("cursor")? {
                    checked.insert("cursor".into(), Value::String(cursor));
                }
            }
            McpMethod::ResourcesRead => match string_field("uri")? {
                Some(uri) => {
                    checked.insert("uri".into(), Value::String(uri));
                }
                None => return Err(format!("{label}({{ uri }}): `uri` is required")),
            },
            McpMethod::PromptsGet => {
                match string_field("name")? {
                    Some(name) => checked.insert("name".into(), Value::String(name)),
                    None => return Err(format!("{label}({{ name, arguments }}): `name` is required")),
                };
                match input.get("arguments") {
                    None | Some(Value::Null) => {}
                    Some(Value::Object(args)) => {
                        let mut strings = Map::new();
                        for (k, v) in args {
                            let text = match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            strings.insert(k.clone(), Value::String(text));
                        }
                        checked.insert("arguments".into(), Value::Object(strings));
                    }
                    Some(_) => {
                        return Err(format!(
                            "{label}: `arguments` must be an object of strings"
                        ));
                    }
                }
            }
        }
        Ok(())
    })();
    if let Err(message) = result {
        return nested_failure(message);
    }
    if let Some(refused) = over_pending_limit(ctx, state) {
        return Some(refused);
    }
    let server_name = server.info.name.clone();
    let tool_id = format!("mcp:{server_name}:{}", method.as_str());
    state.info.call_count += 1;
    if !state.info.tool_ids.contains(&tool_id) {
        state.info.tool_ids.push(tool_id.clone());
    }
    let params = Value::Object(checked);
    let call_id = state.calls.next_call_id(&state.parent_call_id);
    let info = CallInfo {
        call_id: call_id.clone(),
        tool_id: tool_id.clone(),
        method: method.as_str(),
        parent_call_id: state.parent_call_id.clone(),
        input_bytes: params.to_string().len() as u64,
    };
    let future = state.executor.mcp_request(McpServerCall {
        context: Arc::clone(&state.context),
        parent_call_id: state.parent_call_id.clone(),
        call_id,
        server: server_name,
        method,
        params,
    });
    state
        .calls
        .start(&ctx.handle, request_id, info, future)
        .map(|outcome| outcome_settlement(ctx, outcome, &tool_id))
}

/// `MCP.<server>.$api(toolName?, { schema? })`, answered by the host.
fn mcp_api(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let server_name = params.get("server").and_then(Value::as_str).unwrap_or("");
    let Some(server) = state.catalog.mcp().server(server_name) else {
        return bad_request(format!("no MCP server `{server_name}` in this run"));
    };
    let tool = match params.get("tool") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => match server.tool(name) {
            Some(tool) => Some(tool),
            None => {
                let names: Vec<&str> = server.tools.iter().map(|t| t.js_name.as_str()).collect();
                return bad_request(format!(
                    "MCP.{}.$api: no tool \"{name}\"; its tools are {}",
                    server.js_name,
                    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                ));
            }
        },
        Some(_) => {
            return bad_request(format!(
                "MCP.{}.$api(toolName?, options?): toolName must be a string",
                server.js_name
            ));
        }
    };
    let schema = match params.get("options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => {
            if let Some(key) = options.keys().find(|k| k.as_str() != "schema") {
                return bad_request(format!(
                    "MCP.{}.$api: unknown option `{key}`; the only option is `schema`",
                    server.js_name
                ));
            }
            match options.get("schema") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return bad_request(format!(
                        "MCP.{}.$api: options.schema must be a boolean",
                        server.js_name
                    ));
                }
            }
        }
        Some(_) => {
            return bad_request(format!(
                "MCP.{}.$api: options must be an object like {{ schema: true }}",
                server.js_name
            ));
        }
    };
    Settlement::Resolve(crate::declarations::api_header(server, tool, schema))
}

fn optional_string<'a>(
    params: &'a Map<String, Value>,
    key: &str,
    usage: &str,
) -> Result<Option<&'a str>, Settlement> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad_request(format!("{usage}: {key} must be a string"))),
    }
}

fn api_list(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let prefix = match optional_string(params, "prefix", "API.list(prefix?)") {
        Ok(prefix) => prefix,
        Err(refused) => return refused,
    };
    match state.catalog.api_files().list(prefix) {
        Ok(files) => Settlement::Resolve(Value::Array(
            files.iter().map(|f| f.metadata_json()).collect(),
        )),
        Err(e) => bad_request(e.to_string()),
    }
}

fn api_read(state: &RunState, params: &Map<String, Value>) -> Settlement {
    let path = match optional_string(params, "path", "API.read(path)") {
        Ok(Some(path)) => path,
        Ok(None) => {
            return bad_request(
                "API.read(path): pass a path such as \"mcp/index.d.ts\" (API.list() lists them)"
                    .into(),
            );
        }
        Err(refused) => return refused,
    };
    match state.catalog.api_files().read(path) {
        Ok(text) => Settlement::Resolve(Value::String(text.to_owned())),
        Err(e) => bad_request(e.to_string()),
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
    let value_bytes = value.to_string().len();
    let limit = vm.limits().max_output_bytes;
    if value_bytes > limit {
        let mut telemetry = vm_telemetry(vm, Some(ErrorCode::OutputLimitExceeded));
        telemetry.output_bytes = output_bytes as u64;
        return CodeModeResult::Failed {
            error: format!(
                "output limit exceeded: the returned value is {value_bytes} bytes of JSON, more than maxOutputBytes ({limit}); return a smaller summary"
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
        FailureKind::RequestTooLarge => Some(ErrorCode::InvalidInput),
        FailureKind::InvalidResult | FailureKind::Crashed => Some(ErrorCode::InternalError),
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
