//! [`CodeModeRuntime`]: `exec` and `wait` on top of the sandbox.
//!
//! Each exec or wait runs its VM on a blocking thread (never on the async
//! executor's workers), drives it until it completes, fails or can make no
//! progress, and turns what happened into a [`CodeModeResult`]. A run that
//! waits is kept as a snapshot in the [`crate::store::RunStore`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_sandbox::{
    Failure, FailureKind, Limits, OutputItem, Sandbox, SandboxConfig, SandboxError, Settlement,
    SnapshotError, Step, Vm,
};
use serde_json::Value;

use crate::config::{CodeModeConfig, Language};
use crate::input::{ExecInput, WaitInput};
use crate::result::{CodeModeResult, ErrorCode, Output, SnapshotEvent, Telemetry, WaitReason};
use crate::store::{RunStore, StoreError, SuspendedRun};

/// Process-level options beyond `tools.codeMode`.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Sandbox engine settings (module cache folder, live VM slots).
    pub sandbox: SandboxConfig,
    /// Suspended runs held at once; `exec` fails clearly when full.
    pub max_suspended_runs: usize,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            sandbox: SandboxConfig::default(),
            max_suspended_runs: 1024,
        }
    }
}

/// The runtime could not be built (`runtime_unavailable`): code mode then
/// fails closed instead of exposing tools directly.
#[derive(Debug, thiserror::Error)]
#[error("code mode runtime unavailable: {0}")]
pub struct RuntimeError(#[from] pub SandboxError);

/// Code mode for one process: build once, share freely (cheap to clone).
///
/// ```no_run
/// # async fn demo() -> Result<(), codemode_runtime::RuntimeError> {
/// use codemode_runtime::{CodeModeConfig, CodeModeRuntime};
/// let runtime = CodeModeRuntime::new(CodeModeConfig::default())?;
/// let result = runtime.exec(&serde_json::json!({ "code": "return 6 * 7" })).await;
/// assert_eq!(result.to_json()["value"], 42);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CodeModeRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    config: CodeModeConfig,
    sandbox: Sandbox,
    store: RunStore,
}

impl std::fmt::Debug for CodeModeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeRuntime")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What a drive of the VM ended in.
enum Driven {
    Done(CodeModeResult),
    Suspend {
        vm: Box<Vm>,
        reason: WaitReason,
        yields: Vec<u32>,
        output: Vec<Output>,
    },
}

/// State carried across the exec and waits of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    pub(crate) language: Language,
    pub(crate) exec_count: u32,
    pub(crate) wait_count: u32,
}

impl CodeModeRuntime {
    /// Builds the runtime with default [`RuntimeOptions`].
    ///
    /// # Errors
    /// [`RuntimeError`] when the sandbox cannot start here.
    pub fn new(config: CodeModeConfig) -> Result<CodeModeRuntime, RuntimeError> {
        CodeModeRuntime::with_options(config, RuntimeOptions::default())
    }

    /// Builds the runtime.
    ///
    /// # Errors
    /// [`RuntimeError`] when the sandbox cannot start here.
    pub fn with_options(
        config: CodeModeConfig,
        options: RuntimeOptions,
    ) -> Result<CodeModeRuntime, RuntimeError> {
        let sandbox = Sandbox::new(options.sandbox)?;
        Ok(CodeModeRuntime {
            inner: Arc::new(Inner {
                config,
                sandbox,
                store: RunStore::new(options.max_suspended_runs),
            }),
        })
    }

    /// The effective `tools.codeMode` settings.
    pub fn config(&self) -> &CodeModeConfig {
        &self.inner.config
    }

    /// The sandbox engine (for embedders that need snapshots directly).
    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }

    /// Suspended runs currently held.
    pub fn suspended_runs(&self) -> usize {
        self.inner.store.len()
    }

    fn limits(&self) -> Limits {
        let c = &self.inner.config;
        Limits {
            timeout: Duration::from_millis(c.timeout_ms),
            memory_limit_bytes: c.memory_limit_bytes as usize,
            max_output_bytes: c.max_output_bytes as usize,
            max_snapshot_bytes: c.max_snapshot_bytes as usize,
            ..Limits::default()
        }
    }

    /// Runs the model's `exec` input and returns the result union.
    pub async fn exec(&self, raw_input: &Value) -> CodeModeResult {
        let started = Instant::now();
        let input = match ExecInput::parse(raw_input, &self.inner.config) {
            Ok(input) => input,
            Err(e) => {
                return CodeModeResult::failure(
                    e.code,
                    e.message,
                    telemetry_for(Language::JavaScript, started, 1, 0),
                );
            }
        };
        let info = RunInfo {
            language: input.language,
            exec_count: 1,
            wait_count: 0,
        };
        if input.language == Language::TypeScript {
            return CodeModeResult::failure(
                ErrorCode::UnsupportedLanguage,
                "TypeScript cells are not available in this build yet; send the cell as JavaScript",
                telemetry_for(input.language, started, 1, 0),
            );
        }
        let this = self.clone();
        let limits = self.limits();
        let code = input.code;
        self.blocking(info.clone(), started, move || {
            let mut events = Vec::new();
            let (vm, step) = match this.inner.sandbox.start(&code, &limits) {
                Ok(started) => started,
                Err(e) => return (host_failure(&e), events),
            };
            let driven = drive(vm, step, Vec::new());
            (
                this.finish(None, driven, &info, started, &mut events),
                events,
            )
        })
        .await
    }

    /// Resumes a waiting run (the model's `wait` input).
    pub async fn wait(&self, raw_input: &Value) -> CodeModeResult {
        let started = Instant::now();
        let input = match WaitInput::parse(raw_input) {
            Ok(input) => input,
            Err(e) => {
                return CodeModeResult::failure(
                    e.code,
                    e.message,
                    telemetry_for(Language::JavaScript, started, 0, 1),
                );
            }
        };
        let run = match self.inner.store.take(&input.run_id) {
            Ok(run) => run,
            Err(e) => {
                let code = match e {
                    StoreError::Expired => ErrorCode::SnapshotExpired,
                    StoreError::Unknown | StoreError::Busy | StoreError::Full { .. } => {
                        ErrorCode::InvalidInput
                    }
                };
                let mut telemetry = telemetry_for(Language::JavaScript, started, 0, 1);
                if e == StoreError::Expired {
                    telemetry.snapshot_events.push(SnapshotEvent {
                        event: "expired".into(),
                        bytes: None,
                        micros: None,
                    });
                }
                return CodeModeResult::failure(code, e.message(&input.run_id), telemetry);
            }
        };
        let mut info = run.info.clone();
        info.wait_count += 1;
        let this = self.clone();
        let limits = self.limits();
        let run_id = input.run_id;
        self.blocking(info.clone(), started, move || {
            let mut events = Vec::new();
            let restore_started = Instant::now();
            let vm = match this.inner.sandbox.restore(&run.snapshot, &limits) {
                Ok(vm) => vm,
                Err(e) => {
                    this.inner.store.finish(&run_id);
                    let mut result = host_failure(&e);
                    if let CodeModeResult::Failed { code, .. } = &mut result
                        && *code != Some(ErrorCode::SnapshotLimitExceeded)
                    {
                        *code = Some(ErrorCode::SnapshotRestoreFailed);
                    }
                    return (result, events);
                }
            };
            events.push(SnapshotEvent {
                event: "restored".into(),
                bytes: Some(run.snapshot.size_bytes() as u64),
                micros: Some(restore_started.elapsed().as_micros() as u64),
            });
            // Yields resolve on resume: that is all `yield_control` asks for.
            let settle: Vec<(u32, Settlement)> = run
                .yields
                .iter()
                .map(|&id| (id, Settlement::Resolve(Value::Null)))
                .collect();
            let driven = drive(vm, Step::Pending, settle);
            (
                this.finish(Some(&run_id), driven, &info, started, &mut events),
                events,
            )
        })
        .await
    }

    async fn blocking<F>(&self, info: RunInfo, started: Instant, work: F) -> CodeModeResult
    where
        F: FnOnce() -> (CodeModeResult, Vec<SnapshotEvent>) + Send + 'static,
    {
        match tokio::task::spawn_blocking(work).await {
            Ok((mut result, events)) => {
                let telemetry = match &mut result {
                    CodeModeResult::Completed { telemetry, .. }
                    | CodeModeResult::Waiting { telemetry, .. }
                    | CodeModeResult::Failed { telemetry, .. } => telemetry,
                };
                let mut base =
                    telemetry_for(info.language, started, info.exec_count, info.wait_count);
                base.vm_memory_bytes = telemetry.vm_memory_bytes;
                base.output_bytes = telemetry.output_bytes;
                base.limit_failure = telemetry.limit_failure;
                base.snapshot_events = events;
                *telemetry = base;
                result
            }
            Err(e) => CodeModeResult::failure(
                ErrorCode::InternalError,
                format!("the sandbox thread failed: {e}"),
                telemetry_for(info.language, started, info.exec_count, info.wait_count),
            ),
        }
    }

    /// Turns a drive into a result, storing the snapshot of a waiting run.
    fn finish(
        &self,
        resumed: Option<&str>,
        driven: Driven,
        info: &RunInfo,
        started: Instant,
        events: &mut Vec<SnapshotEvent>,
    ) -> CodeModeResult {
        let (vm, reason, yields, output) = match driven {
            Driven::Done(result) => {
                if let Some(run_id) = resumed {
                    self.inner.store.finish(run_id);
                }
                return result;
            }
            Driven::Suspend {
                vm,
                reason,
                yields,
                output,
            } => (vm, reason, yields, output),
        };
        let mut telemetry = telemetry_for(info.language, started, info.exec_count, info.wait_count);
        telemetry.vm_memory_bytes = Some(vm.memory_bytes() as u64);
        telemetry.output_bytes = output.iter().map(|o| o.size_bytes() as u64).sum();
        let suspend_started = Instant::now();
        let snapshot = match vm.suspend() {
            Ok(snapshot) => snapshot,
            Err(e) => {
                if let Some(run_id) = resumed {
                    self.inner.store.finish(run_id);
                }
                let mut failed = host_failure(&e);
                if let CodeModeResult::Failed {
                    output: o,
                    telemetry: t,
                    ..
                } = &mut failed
                {
                    *o = output;
                    *t = telemetry;
                    t.limit_failure = Some(ErrorCode::SnapshotLimitExceeded);
                }
                return failed;
            }
        };
        events.push(SnapshotEvent {
            event: "suspended".into(),
            bytes: Some(snapshot.size_bytes() as u64),
            micros: Some(suspend_started.elapsed().as_micros() as u64),
        });
        let ttl = Duration::from_secs(self.inner.config.snapshot_ttl_seconds);
        match self.inner.store.insert(
            resumed,
            SuspendedRun {
                snapshot,
                yields,
                info: info.clone(),
                expires: Instant::now() + ttl,
            },
        ) {
            Ok(run_id) => CodeModeResult::Waiting {
                run_id,
                reason,
                pending_tool_calls: Vec::new(),
                output,
                telemetry,
            },
            Err(e) => CodeModeResult::Failed {
                error: e.message(""),
                code: Some(ErrorCode::SnapshotLimitExceeded),
                output,
                telemetry,
            },
        }
    }
}

fn telemetry_for(
    language: Language,
    started: Instant,
    exec_count: u32,
    wait_count: u32,
) -> Telemetry {
    Telemetry {
        language: language.as_str().into(),
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        exec_count,
        wait_count,
        ..Telemetry::default()
    }
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

/// Drives a VM: delivers `ready` settlements, answers requests, and stops
/// when the cell completes, fails, or waits on something only `wait` can
/// deliver.
fn drive(mut vm: Vm, mut step: Step, mut ready: Vec<(u32, Settlement)>) -> Driven {
    let mut output = Vec::new();
    let mut yields: Vec<u32> = Vec::new();
    loop {
        output.extend(convert_output(vm.take_output()));
        match step {
            Step::Completed(value) => return Driven::Done(completed(&vm, value, output)),
            Step::Failed(failure) => return Driven::Done(failed(&vm, &failure, output)),
            Step::Pending => {}
        }
        for request in vm.take_new_requests() {
            let method = request
                .payload
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("");
            match method {
                "yield" => yields.push(request.id),
                other => ready.push((
                    request.id,
                    Settlement::Reject(format!(
                        "unknown bridge method `{other}`: no tools are available in this run"
                    )),
                )),
            }
        }
        if let Some((id, settlement)) = (!ready.is_empty()).then(|| ready.remove(0)) {
            step = match vm.settle(id, settlement) {
                Ok(step) => step,
                Err(e) => return Driven::Done(host_failure(&e)),
            };
            continue;
        }
        let outstanding = vm.outstanding_requests();
        if outstanding.is_empty() {
            return Driven::Done(CodeModeResult::Failed {
                error: "the cell is waiting on a promise that nothing will ever settle (no tool calls are pending and there are no timers); \
                        make sure every awaited promise is resolved"
                    .into(),
                code: None,
                output,
                telemetry: vm_telemetry(&vm, None),
            });
        }
        if outstanding.iter().all(|id| yields.contains(id)) {
            return Driven::Suspend {
                vm: Box::new(vm),
                reason: WaitReason::Yield,
                yields,
                output,
            };
        }
        // Only yields and immediately answered requests exist so far, so an
        // outstanding non-yield request cannot happen; fail loudly if it does.
        return Driven::Done(CodeModeResult::failure(
            ErrorCode::InternalError,
            "the cell waits on a host request this runtime does not track",
            vm_telemetry(&vm, None),
        ));
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

fn failed(vm: &Vm, failure: &Failure, output: Vec<Output>) -> CodeModeResult {
    let code = match failure.kind {
        FailureKind::Exception | FailureKind::StackOverflow => None,
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
    match (failure.line, failure.column) {
        (Some(line), Some(column)) => error.push_str(&format!(" (line {line}, column {column})")),
        (Some(line), None) => error.push_str(&format!(" (line {line})")),
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
