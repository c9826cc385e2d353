//! One live VM: a wasmtime store and instance of the base image, the calls
//! into the guest ABI, and the translation of what happened into a [`Step`].

use std::sync::Arc;
use std::time::Instant;

use wasmtime::{Instance, Memory, Store, Trap, TypedFunc, UpdateDeadline};

use crate::host::{HostRequest, HostState, Interrupt, OutputItem};
use crate::{Inner, Limits, SandboxError, abi};

/// What the guest did with the time it was given.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The cell returned; the value went through the guest's JSON adapter and
    /// was re-parsed by the host.
    Completed(serde_json::Value),
    /// The cell waits on host requests (see [`Vm::take_new_requests`] and
    /// [`Vm::outstanding_requests`]). An empty outstanding set means nothing
    /// can ever wake it.
    Pending,
    /// The cell failed. After failures other than
    /// [`FailureKind::Exception`] the VM is dead.
    Failed(Failure),
}

/// Why a cell failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The cell threw (or rejected) and nothing caught it.
    Exception,
    /// The wall-clock deadline passed while the guest was running.
    Timeout,
    /// The guest hit its memory limit.
    MemoryLimit,
    /// The guest recursed past the stack the host allows.
    StackOverflow,
    /// The guest tried to output more than `max_output_bytes`.
    OutputLimit,
    /// The VM's [`crate::CancelFlag`] was set (an abort or cancellation).
    Aborted,
    /// The guest had more host requests outstanding than the hard bound.
    TooManyRequests,
    /// The guest's final value was not valid JSON (a tampered adapter).
    InvalidResult,
    /// The guest trapped or broke the ABI (a bug or a hostile module).
    Crashed,
}

/// A failed cell, described with guest-side names only: never a host type,
/// stack or panic text.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What kind of failure it was.
    pub kind: FailureKind,
    /// The JavaScript error name (`TypeError`, ...), for exceptions.
    pub name: Option<String>,
    /// A message fit for the model.
    pub message: String,
    /// 1-based line in the cell source, when known.
    pub line: Option<u32>,
    /// 1-based column, when known.
    pub column: Option<u32>,
    /// The code of a host rejection the cell did not catch (see
    /// [`Settlement::Reject`]); `None` for errors the cell made itself.
    pub code: Option<String>,
}

impl Failure {
    fn host(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            name: None,
            message: message.into(),
            line: None,
            column: None,
            code: None,
        }
    }
}

/// How the host answers a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// Resolve the guest's promise with this value.
    Resolve(serde_json::Value),
    /// Resolve it with JSON text the host already serialized (never text
    /// that came from a guest: the guest parses it as trusted JSON).
    ResolveJson(String),
    /// Reject it with a plain `Error` carrying this message and, when set,
    /// a `code` property (`nested_tool_failed`, ...). An uncaught error
    /// made this way reports its code in [`Failure::code`].
    Reject {
        /// What went wrong, for the model.
        message: String,
        /// A contract error code, if one applies.
        code: Option<String>,
    },
}

impl Settlement {
    /// A rejection without a code.
    pub fn reject(message: impl Into<String>) -> Settlement {
        Settlement::Reject {
            message: message.into(),
            code: None,
        }
    }

    /// A rejection carrying a contract error code.
    pub fn reject_with_code(message: impl Into<String>, code: &str) -> Settlement {
        Settlement::Reject {
            message: message.into(),
            code: Some(code.to_owned()),
        }
    }
}

/// `cm_run(code_ptr, code_len, context_ptr, context_len, memory_limit,
/// seed_lo, seed_hi)`.
type RunParams = (u32, u32, u32, u32, u32, u32, u32);

#[derive(Clone)]
pub(crate) struct Funcs {
    pub(crate) alloc: TypedFunc<u32, u32>,
    pub(crate) free: TypedFunc<(u32, u32), ()>,
    pub(crate) run: TypedFunc<RunParams, i32>,
    pub(crate) settle: TypedFunc<(u32, u32, u32, u32), i32>,
}

/// A live guest VM. Not `Sync`; move it between threads freely.
///
/// Created by [`crate::Sandbox::start`] or [`crate::Sandbox::restore`]; turned
/// into bytes with [`Vm::suspend`].
pub struct Vm {
    pub(crate) inner: Arc<Inner>,
    pub(crate) store: Store<HostState>,
    pub(crate) instance: Instance,
    pub(crate) memory: Memory,
    pub(crate) funcs: Funcs,
    pub(crate) dead: bool,
    pub(crate) limits: Limits,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("dead", &self.dead)
            .field("outstanding", &self.store.data().outstanding)
            .finish_non_exhaustive()
    }
}

/// Reads the guest's out buffer (`cm_out_ptr`, `cm_out_len`).
pub(crate) fn read_out(store: &mut Store<HostState>, instance: &Instance) -> Option<Vec<u8>> {
    // Two trivial getters after the guest's burst: a deadline that passed
    // meanwhile must not interrupt them (that turned a finished cell's
    // result into an internal error). The next burst sets its own deadline.
    store.set_epoch_deadline(1 << 40);
    let ptr = instance
        .get_typed_func::<(), u32>(&mut *store, "cm_out_ptr")
        .ok()?
        .call(&mut *store, ())
        .ok()?;
    let len = instance
        .get_typed_func::<(), u32>(&mut *store, "cm_out_len")
        .ok()?
        .call(&mut *store, ())
        .ok()?;
    let memory = instance.get_memory(&mut *store, "memory")?;
    let start = ptr as usize;
    memory
        .data(&*store)
        .get(start..start.checked_add(len as usize)?)
        .map(<[u8]>::to_vec)
}

impl Vm {
    /// Creates a fresh instance of the base image under `limits`.
    pub(crate) fn instantiate(inner: &Arc<Inner>, limits: &Limits) -> Result<Vm, SandboxError> {
        let mut state = HostState::new(false);
        state.limiter.max_bytes = inner
            .base
            .memory
            .len()
            .saturating_add(limits.memory_limit_bytes)
            .saturating_add(limits.memory_limit_bytes / 8)
            .saturating_add(1 << 20);
        state.max_output_bytes = limits.max_output_bytes;
        state.max_outstanding_requests = limits.max_outstanding_requests;
        state.max_request_bytes = limits.max_request_bytes;
        state.deadline = limits.deadline_from_now();
        state.cancel = limits.cancel.clone();
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(|mut ctx| {
            if ctx.data().cancel.is_cancelled() {
                ctx.data_mut().interrupt = Some(Interrupt::Cancelled);
                Err(wasmtime::Error::msg("cancelled"))
            } else if Instant::now() >= ctx.data().deadline {
                ctx.data_mut().interrupt = Some(Interrupt::Timeout);
                Err(wasmtime::Error::msg("deadline reached"))
            } else {
                // A long burst in an async task gives the task's thread up.
                crate::priority::leave_task_if_long();
                let data = ctx.data_mut();
                data.guest_ticks = data.guest_ticks.saturating_add(1);
                if u128::from(data.guest_ticks) == crate::priority::DEMOTE_AFTER.as_millis()
                    && data.demoted.is_none()
                {
                    data.demoted = crate::priority::demote_current_thread();
                }
                Ok(UpdateDeadline::Continue(1))
            }
        });
        let instance = inner.pre.instantiate(&mut store).map_err(|e| {
            let text = format!("{e:#}");
            if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
            {
                SandboxError::PoolExhausted {
                    limit: inner.config.max_live_vms,
                }
            } else {
                SandboxError::Engine(format!("instantiating a VM: {text}"))
            }
        })?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| SandboxError::Abi("no memory export".into()))?;
        store.data_mut().memory = Some(memory);
        let abi_err = |e: wasmtime::Error| SandboxError::Abi(format!("{e:#}"));
        let funcs = Funcs {
            alloc: instance
                .get_typed_func(&mut store, "cm_alloc")
                .map_err(abi_err)?,
            free: instance
                .get_typed_func(&mut store, "cm_free")
                .map_err(abi_err)?,
            run: instance
                .get_typed_func(&mut store, "cm_run")
                .map_err(abi_err)?,
            settle: instance
                .get_typed_func(&mut store, "cm_settle")
                .map_err(abi_err)?,
        };
        Ok(Vm {
            inner: Arc::clone(inner),
            store,
            instance,
            memory,
            funcs,
            dead: false,
            limits: limits.clone(),
        })
    }

    /// Sets the wall-clock deadline for the next guest burst.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.store.data_mut().deadline = deadline;
    }

    /// The limits this VM runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Output items produced since the last call. Taking them does not
    /// refill the budget: `max_output_bytes` holds over the VM's life.
    pub fn take_output(&mut self) -> Vec<OutputItem> {
        std::mem::take(&mut self.store.data_mut().output)
    }

    /// Bytes of the output budget used so far (each item's bytes plus
    /// [`crate::OUTPUT_ITEM_COST`]).
    pub fn output_budget_used(&self) -> usize {
        self.store.data().output_bytes
    }

    /// Requests the guest made since the last call.
    pub fn take_new_requests(&mut self) -> Vec<HostRequest> {
        std::mem::take(&mut self.store.data_mut().new_requests)
    }

    /// Ids of requests the guest still waits on, in issue order.
    pub fn outstanding_requests(&self) -> Vec<u32> {
        self.store.data().outstanding.iter().copied().collect()
    }

    /// Whether the VM can still run (a trap or hard limit kills it).
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Bytes of linear memory the guest currently has.
    pub fn memory_bytes(&self) -> usize {
        self.memory.data_size(&self.store)
    }

    /// Copies `bytes` into a fresh guest buffer.
    fn write_buffer(&mut self, bytes: &[u8]) -> Result<(u32, u32), wasmtime::Error> {
        let len =
            u32::try_from(bytes.len()).map_err(|_| wasmtime::Error::msg("buffer too large"))?;
        let ptr = self.funcs.alloc.call(&mut self.store, len)?;
        self.memory
            .write(&mut self.store, ptr as usize, bytes)
            .map_err(|_| wasmtime::Error::msg("guest allocation lies outside its memory"))?;
        Ok((ptr, len))
    }

    /// Runs one cell body with its run context (the JSON the guest API's
    /// `install` receives). Called once, right after instantiation.
    pub(crate) fn run_cell(&mut self, code: &str, context: &str) -> Result<Step, SandboxError> {
        let seed = crate::random_u64();
        let memory_limit = u32::try_from(self.limits.memory_limit_bytes).unwrap_or(u32::MAX);
        let code = code.as_bytes().to_vec();
        let context = context.as_bytes().to_vec();
        self.enter(move |vm| {
            let (code_ptr, code_len) = vm.write_buffer(&code)?;
            let (context_ptr, context_len) = vm.write_buffer(&context)?;
            let status = vm.funcs.run.call(
                &mut vm.store,
                (
                    code_ptr,
                    code_len,
                    context_ptr,
                    context_len,
                    memory_limit,
                    seed as u32,
                    (seed >> 32) as u32,
                ),
            )?;
            vm.funcs.free.call(&mut vm.store, (code_ptr, code_len))?;
            vm.funcs
                .free
                .call(&mut vm.store, (context_ptr, context_len))?;
            Ok(status)
        })
    }

    /// Delivers the answer to request `id` and lets the guest run on.
    ///
    /// # Errors
    /// [`SandboxError::UnknownRequest`] when the guest is not waiting on `id`,
    /// [`SandboxError::VmDead`] after a fatal failure.
    pub fn settle(&mut self, id: u32, settlement: Settlement) -> Result<Step, SandboxError> {
        if self.dead {
            return Err(SandboxError::VmDead);
        }
        if !self.store.data_mut().outstanding.remove(&id) {
            return Err(SandboxError::UnknownRequest(id));
        }
        let (ok, payload) = match settlement {
            Settlement::Resolve(value) => (1u32, value.to_string()),
            Settlement::ResolveJson(text) => (1u32, text),
            Settlement::Reject { message, code } => (
                0u32,
                serde_json::json!({ "message": message, "code": code }).to_string(),
            ),
        };
        self.enter(move |vm| {
            let (ptr, len) = vm.write_buffer(payload.as_bytes())?;
            let status = vm.funcs.settle.call(&mut vm.store, (id, ok, ptr, len))?;
            vm.funcs.free.call(&mut vm.store, (ptr, len))?;
            Ok(status)
        })
    }

    fn enter<F>(&mut self, f: F) -> Result<Step, SandboxError>
    where
        F: FnOnce(&mut Vm) -> Result<i32, wasmtime::Error>,
    {
        if self.dead {
            return Err(SandboxError::VmDead);
        }
        self.store.data_mut().interrupt = None;
        if self.limits.cancel.is_cancelled() {
            self.dead = true;
            return Ok(Step::Failed(cancelled_failure()));
        }
        if Instant::now() >= self.store.data().deadline {
            self.dead = true;
            return Ok(Step::Failed(timeout_failure(&self.limits)));
        }
        let inner = Arc::clone(&self.inner);
        let outcome = {
            let _running = inner.ticker.running();
            self.store.data_mut().guest_ticks = 0;
            self.store.set_epoch_deadline(1);
            let outcome = f(self);
            // The thread goes back to the pool at its own priority.
            self.store.data_mut().demoted = None;
            outcome
        };
        match outcome {
            Ok(status) => Ok(self.interpret(status)),
            Err(error) => {
                self.dead = true;
                Ok(Step::Failed(self.classify_trap(&error)))
            }
        }
    }

    fn interpret(&mut self, status: i32) -> Step {
        match status {
            abi::STATUS_PENDING => Step::Pending,
            abi::STATUS_COMPLETED => {
                let out = read_out(&mut self.store, &self.instance).unwrap_or_default();
                match crate::parse_guest_json(&out) {
                    Ok(value) => Step::Completed(value),
                    Err(e) => Step::Failed(Failure::host(
                        FailureKind::InvalidResult,
                        format!("the cell's value could not be converted to JSON: {e}"),
                    )),
                }
            }
            abi::STATUS_FAILED => {
                let out = read_out(&mut self.store, &self.instance).unwrap_or_default();
                Step::Failed(self.exception(&out, false))
            }
            abi::STATUS_OUT_OF_MEMORY => {
                let out = read_out(&mut self.store, &self.instance).unwrap_or_default();
                Step::Failed(self.exception(&out, true))
            }
            // STATUS_ABI_ERROR or an unknown status: the guest broke the ABI.
            _ => {
                self.dead = true;
                let out = read_out(&mut self.store, &self.instance).unwrap_or_default();
                Step::Failed(Failure::host(
                    FailureKind::Crashed,
                    format!(
                        "the sandbox guest broke its ABI: {}",
                        String::from_utf8_lossy(&out)
                    ),
                ))
            }
        }
    }

    fn exception(&mut self, payload: &[u8], heap_refused: bool) -> Failure {
        #[derive(serde::Deserialize)]
        struct Info {
            name: Option<String>,
            message: Option<String>,
            line: Option<u32>,
            column: Option<u32>,
            code: Option<String>,
        }
        let payload = crate::guest_json::replace_lone_surrogates(payload);
        let info: Info = serde_json::from_slice(&payload).unwrap_or(Info {
            name: Some("Error".into()),
            message: Some("the cell failed with an error that could not be described".into()),
            line: None,
            column: None,
            code: None,
        });
        let name = crate::bounded_text(info.name.unwrap_or_else(|| "Error".into()), 256);
        let message = crate::bounded_text(info.message.unwrap_or_default(), crate::MAX_ERROR_BYTES);
        let column = match (info.line, info.column) {
            (Some(1), Some(c)) if c > abi::CELL_PREFIX_COLUMNS => {
                Some(c - abi::CELL_PREFIX_COLUMNS)
            }
            (_, c) => c,
        };
        let out_of_memory = name == "InternalError" && message == "out of memory";
        if heap_refused || out_of_memory || self.store.data().limiter.denied {
            // The heap is full: whatever runs next in this VM would fail too.
            self.dead = true;
            return Failure {
                kind: FailureKind::MemoryLimit,
                name: Some(name),
                message: memory_message(&self.limits),
                line: info.line,
                column,
                code: None,
            };
        }
        Failure {
            kind: FailureKind::Exception,
            name: Some(name),
            message,
            line: info.line,
            column,
            code: info.code,
        }
    }

    fn classify_trap(&self, error: &wasmtime::Error) -> Failure {
        let limits = &self.limits;
        match self.store.data().interrupt {
            Some(Interrupt::Timeout) => return timeout_failure(limits),
            Some(Interrupt::Cancelled) => return cancelled_failure(),
            Some(Interrupt::OutputLimit) => {
                return Failure::host(
                    FailureKind::OutputLimit,
                    format!(
                        "output limit exceeded: text() and json() may produce at most {} bytes in one exec or wait (maxOutputBytes; each item counts {} bytes more); return a smaller summary instead",
                        limits.max_output_bytes,
                        crate::OUTPUT_ITEM_COST
                    ),
                );
            }
            Some(Interrupt::TooManyRequests) => {
                return Failure::host(
                    FailureKind::TooManyRequests,
                    format!(
                        "too many host requests outstanding at once (limit {}); await some before starting more",
                        limits.max_outstanding_requests
                    ),
                );
            }
            Some(Interrupt::ProcExit) => {
                return Failure::host(FailureKind::Crashed, "the sandbox guest tried to exit");
            }
            None => {}
        }
        if self.store.data().limiter.denied {
            return Failure::host(FailureKind::MemoryLimit, memory_message(limits));
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::StackOverflow) => Failure::host(
                FailureKind::StackOverflow,
                "RangeError: Maximum call stack size exceeded (the cell recursed too deeply; use a loop or less nesting)",
            ),
            Some(Trap::Interrupt) => timeout_failure(limits),
            Some(Trap::MemoryOutOfBounds) => Failure::host(
                FailureKind::StackOverflow,
                "RangeError: Maximum call stack size exceeded (the cell recursed too deeply; use a loop or less nesting)",
            ),
            Some(trap) => {
                tracing::warn!(%trap, "sandbox guest trapped");
                Failure::host(
                    FailureKind::Crashed,
                    format!("the sandbox VM crashed ({trap}); the cell cannot continue"),
                )
            }
            None => {
                tracing::warn!(error = %format!("{error:#}"), "sandbox guest call failed");
                Failure::host(
                    FailureKind::Crashed,
                    "the sandbox VM failed; the cell cannot continue",
                )
            }
        }
    }
}

fn cancelled_failure() -> Failure {
    Failure::host(FailureKind::Aborted, "the run was aborted and stopped")
}

fn timeout_failure(limits: &Limits) -> Failure {
    Failure::host(
        FailureKind::Timeout,
        format!(
            "the cell ran longer than timeoutMs ({} ms) and was stopped",
            limits.timeout.as_millis()
        ),
    )
}

fn memory_message(limits: &Limits) -> String {
    format!(
        "out of memory: the cell used more than memoryLimitBytes ({} bytes); process data in smaller pieces",
        limits.memory_limit_bytes
    )
}
