//! The drain loop: drives a VM burst by burst, answering its requests
//! (through [`crate::run::bridge`]) and delivering nested results as they
//! arrive, until the cell is done, fails, yields, or the deadline comes.

use flume::RecvTimeoutError;
use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use codemode_sandbox::{FailureKind, Settlement, Step, Vm};
use serde_json::Value;

use crate::executor::live::Msg;
use crate::result::{CodeModeResult, ErrorCode, Output, Receipts, WaitReason};
use crate::run::bridge::{handle_request, settlement};
use crate::run::calls::Cancel;
use crate::run::env::DriveCtx;
use crate::run::outcome::{
    Driven, aborted_failure, completed, convert_output, deadline_failure, failed, host_failure,
    vm_telemetry,
};
use crate::run::state::RunState;

/// How long a cell idles (only nested calls in flight) before it parks
/// ([`crate::run::park`]), or, when it cannot, between checks for a queued
/// exec or wait that needs its VM.
const YIELD_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs `f` with the run registered as live in its scope, so an abort
/// wakes the drive.
pub(crate) fn live<F>(ctx: &DriveCtx, state: &mut RunState, f: F) -> Driven
where
    F: FnOnce(&DriveCtx, &mut RunState) -> Driven,
{
    let key = register_live(ctx, state);
    let driven = if ctx.scope.is_aborted() || ctx.limits.cancel.is_cancelled() {
        Driven::done(aborted_failure())
    } else {
        f(ctx, state)
    };
    ctx.scope.unregister(key);
    driven
}

/// Registers the run as live in its scope (abort and cancellation reach
/// it through its channel); returns the key to unregister with.
pub(crate) fn register_live(ctx: &DriveCtx, state: &RunState) -> u64 {
    let key = codemode_sandbox::random_u64();
    ctx.scope.register(crate::executor::live::LiveDrive {
        key,
        call_id: state.drive_call_id.clone(),
        wake: state.calls.sender(),
        cancel: ctx.limits.cancel.clone(),
    });
    key
}

/// The run was aborted: its calls are cancelled.
fn aborted(state: &mut RunState) -> Driven {
    state.info.cancelled += state.calls.cancel_all(Cancel::Aborted) as u32;
    Driven::done(aborted_failure())
}

/// The drive stops with calls still open: the run suspends for `reason`.
/// A cell that already returned keeps its value for the `wait` that sees
/// its last call settle: `completed` means the VM has no pending work, so
/// its fire-and-forget calls are neither cancelled nor lost.
fn stop_open(
    vm: Vm,
    output: Vec<Output>,
    state: &mut RunState,
    finished: Option<Value>,
    reason: WaitReason,
) -> Driven {
    state.returned = finished;
    Driven::Suspend {
        vm: Box::new(vm),
        reason,
        output,
    }
}

/// The cell awaits something nothing will settle.
fn never_settles(vm: &Vm, output: Vec<Output>) -> CodeModeResult {
    CodeModeResult::Failed {
        error: "the cell is waiting on a promise that nothing will ever settle (no tool calls are pending and there are no timers); \
                make sure every awaited promise is resolved"
            .into(),
        code: None,
        output,
        receipts: Receipts::default(),
        telemetry: vm_telemetry(vm, None),
    }
}

/// Whether a cell may park now: the process and its scope have room for
/// one more, and its VM surely fits in a snapshot (a cell that could not
/// be suspended keeps its VM instead of failing).
fn park_ticket(ctx: &DriveCtx, vm: &Vm) -> Option<crate::slots::ParkTicket> {
    if vm.memory_bytes() + PARK_SNAPSHOT_SLACK > ctx.limits.max_snapshot_bytes {
        return None;
    }
    ctx.host.slots.try_park(&ctx.scope.vm_slots)
}

/// A snapshot's bytes besides the memory pages (page indices, globals).
const PARK_SNAPSHOT_SLACK: usize = 64 << 10;

/// Drives a VM: answers requests, delivers ready settlements and nested
/// results as they arrive, and stops when the cell is done, fails, yields,
/// parks, or still waits on calls at the deadline. `output` is what the
/// cell printed before (in an earlier stretch of the same exec or wait).
pub(crate) fn drive(
    ctx: &DriveCtx,
    vm: Vm,
    step: Step,
    state: &mut RunState,
    ready: VecDeque<(u32, Settlement)>,
    output: Vec<Output>,
) -> Driven {
    drive_from(ctx, vm, step, state, ready, output, None)
}

/// What ended the wait of a drive that went idle ([`Driven::Idle`]).
pub(crate) enum Woke {
    Message(Msg),
    /// [`YIELD_CHECK`] passed with the delivery deadline still ahead.
    YieldCheck,
    /// The delivery deadline came, or the run's channel closed.
    Deadline,
}

/// How long an idle drive waits before it looks at parking or yielding
/// its VM, given `left` until the delivery deadline, and what a timeout
/// of that wait means.
pub(crate) fn idle_wait(left: std::time::Duration) -> (std::time::Duration, Woke) {
    if left > YIELD_CHECK {
        (YIELD_CHECK, Woke::YieldCheck)
    } else {
        (left, Woke::Deadline)
    }
}

/// A drive that went idle goes on with what woke it, in the same exec or
/// wait: the VM is the live one it left with, the step `Pending`.
pub(crate) fn drive_woken(
    ctx: &DriveCtx,
    vm: Vm,
    state: &mut RunState,
    output: Vec<Output>,
    woke: Woke,
) -> Driven {
    drive_from(
        ctx,
        vm,
        Step::Pending,
        state,
        VecDeque::new(),
        output,
        Some(woke),
    )
}

fn drive_from(
    ctx: &DriveCtx,
    mut vm: Vm,
    mut step: Step,
    state: &mut RunState,
    mut ready: VecDeque<(u32, Settlement)>,
    mut output: Vec<Output>,
    mut woke: Option<Woke>,
) -> Driven {
    // The cell's value once it returned while fire-and-forget calls were
    // still running (kept across waits until they settle).
    let mut finished: Option<Value> = state.returned.take();
    // Requests whose settlement is a nested call's result (not a host
    // answer such as a search): a deadline with one of them undelivered
    // suspends the run; with only host answers it is a plain timeout.
    let mut results: HashSet<u32> = ready.iter().map(|(id, _)| *id).collect();
    loop {
        if let Some(news) = woke.take() {
            match news {
                Woke::YieldCheck => {
                    if let Some(ticket) = park_ticket(ctx, &vm) {
                        state.returned = finished;
                        return Driven::Park {
                            vm: Box::new(vm),
                            output,
                            ticket,
                        };
                    }
                    if ctx.host.slots.take_yield_request() {
                        tracing::debug!("an idle cell gives its VM to a queued exec or wait");
                        return stop_open(vm, output, state, finished, WaitReason::PendingTools);
                    }
                }
                Woke::Message(Msg::Done {
                    request_id,
                    outcome,
                }) => {
                    if let Some(done) = state.calls.finish(request_id, outcome) {
                        results.insert(request_id);
                        ready.push_back(settlement(ctx, state, done));
                    }
                }
                Woke::Message(Msg::Abort) => return aborted(state),
                // Re-checked below.
                Woke::Message(Msg::AwaitingApproval) => {}
                Woke::Deadline => {
                    return stop_open(vm, output, state, finished, WaitReason::PendingTools);
                }
            }
        }
        codemode_sandbox::burst_checkpoint();
        output.extend(convert_output(vm.take_output()));
        match step {
            Step::Completed(value) => finished = Some(value),
            Step::Failed(failure) if failure.kind == FailureKind::Aborted => {
                return aborted(state);
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
            codemode_sandbox::burst_checkpoint();
        }
        if ctx.limits.cancel.is_cancelled() {
            return aborted(state);
        }
        if !ready.is_empty() && Instant::now() >= ctx.delivery_deadline() {
            if finished.is_none()
                && state.calls.in_flight() == 0
                && !ready.iter().any(|(id, _)| results.contains(id))
            {
                // Only the host's own answers (search, describe, ...)
                // kept the cell busy: that is running out of time, not
                // waiting for tools (a `wait` would repeat it forever).
                return Driven::done(deadline_failure(&vm, output));
            }
            // The rest waits for the next `wait`.
            state.carried.extend(ready.drain(..));
            return stop_open(vm, output, state, finished, WaitReason::PendingTools);
        }
        if let Some((id, settlement)) = ready.pop_front() {
            results.remove(&id);
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
                return Driven::done(never_settles(&vm, output));
            }
            if state.yields.iter().any(|id| outstanding.contains(id)) {
                return Driven::Suspend {
                    vm: Box::new(vm),
                    reason: WaitReason::Yield,
                    output,
                };
            }
        }
        if state.calls.all_awaiting_decision() {
            // Only a human can move the cell on now: suspend at once
            // instead of holding the VM until the deadline.
            return stop_open(vm, output, state, finished, WaitReason::Approval);
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
        // Idle with calls in flight: after a short spell the cell parks
        // (its VM slot freed while it awaits them); one that cannot park
        // looks for a queued exec or wait that needs its VM more than it
        // does (see `crate::slots`).
        if ctx.await_idle {
            // A result already here goes in at once (results of calls
            // started together arrive together).
            if let Ok(message) = state.calls.receiver().try_recv() {
                woke = Some(Woke::Message(message));
                continue;
            }
            // The exec or wait awaits the news on the async executor, on
            // the worker that runs the calls' I/O, and goes on there
            // (`crate::run::park::Idle`).
            state.returned = finished;
            return Driven::Idle {
                vm: Box::new(vm),
                output,
            };
        }
        let left = ctx
            .delivery_deadline()
            .saturating_duration_since(Instant::now());
        let (wait, on_timeout) = idle_wait(left);
        woke = Some(match state.calls.receiver().recv_timeout(wait) {
            Ok(message) => Woke::Message(message),
            Err(RecvTimeoutError::Timeout) => on_timeout,
            Err(RecvTimeoutError::Disconnected) => Woke::Deadline,
        });
    }
}
