//! Parked cells: an exec or wait whose cell only awaits nested calls gives
//! its VM slot up ([`crate::slots`]) and awaits the next result without a
//! thread; then it takes a slot again and resumes the cell from its
//! snapshot, within the same exec or wait and before its deadline. So a
//! process's live VMs serve thousands of cells awaiting slow tools.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use codemode_sandbox::{PackedSnapshot, Snapshot, SnapshotError, Step};

use crate::executor::live::Msg;
use crate::result::{CodeModeResult, ErrorCode, Output, SnapshotEvent, Telemetry, WaitReason};
use crate::run::bridge::settlement;
use crate::run::calls::{Cancel, Finished};
use crate::run::drain::{Woke, drive, drive_woken, idle_wait, live, register_live};
use crate::run::env::DriveCtx;
use crate::run::outcome::{Driven, aborted_failure, finish, host_failure};
use crate::run::state::RunState;
use crate::slots::ParkTicket;

/// A cell parked this long has its snapshot packed (zstd, about 0.3 ms for
/// a fresh cell's heap, a third of the bytes): one resumed sooner does not
/// pay for it.
const PACK_AFTER: Duration = Duration::from_secs(1);

/// What one stretch of a drive ended in.
pub(crate) enum Stretch {
    Result(Box<CodeModeResult>),
    Parked(Box<Parked>),
    Idle(Box<Idle>),
}

/// A parked cell's VM, as a snapshot (packed once it waited a while).
enum ParkedVm {
    Raw(Snapshot),
    Packed(PackedSnapshot),
}

impl ParkedVm {
    fn into_snapshot(self) -> Result<Snapshot, SnapshotError> {
        match self {
            ParkedVm::Raw(snapshot) => Ok(snapshot),
            ParkedVm::Packed(packed) => packed.unpack(),
        }
    }
}

/// Everything a parked cell's exec or wait needs to go on.
pub(crate) struct Parked {
    ctx: DriveCtx,
    /// The run id of a wait (`None` for an exec).
    resumed: Option<String>,
    state: RunState,
    vm: ParkedVm,
    memory_bytes: u64,
    /// What the cell printed so far in this exec or wait.
    output: Vec<Output>,
    events: Vec<SnapshotEvent>,
    started: Instant,
    /// Results taken off the run's channel while parked.
    arrived: Vec<Finished>,
    _ticket: ParkTicket,
}

/// What ends a parked cell's wait for news.
enum News {
    /// A result arrived: resume the cell.
    Arrived,
    Aborted,
    /// The deadline came, or only a human's decision can move the cell on:
    /// the run suspends as `waiting` for this reason.
    Suspend(WaitReason),
}

/// The end of one stretch of a drive: a cell that parks becomes a
/// snapshot, anything else the exec's or wait's result.
pub(crate) fn end_stretch(
    ctx: DriveCtx,
    resumed: Option<String>,
    driven: Driven,
    state: RunState,
    started: Instant,
    mut events: Vec<SnapshotEvent>,
) -> Stretch {
    let (vm, output, ticket) = match driven {
        Driven::Park { vm, output, ticket } => (vm, output, ticket),
        Driven::Idle { vm, output } => {
            return Stretch::Idle(Box::new(Idle {
                ctx,
                resumed,
                state,
                vm,
                output,
                events,
                started,
            }));
        }
        driven => {
            let result = finish(
                &ctx,
                resumed.as_deref(),
                driven,
                state,
                started,
                &mut events,
            );
            return Stretch::Result(Box::new(result));
        }
    };
    let memory_bytes = vm.memory_bytes() as u64;
    match vm.suspend() {
        Ok(snapshot) => Stretch::Parked(Box::new(Parked {
            ctx,
            resumed,
            state,
            vm: ParkedVm::Raw(snapshot),
            memory_bytes,
            output,
            events,
            started,
            arrived: Vec::new(),
            _ticket: ticket,
        })),
        Err(e) => {
            let failed = Driven::done(host_failure(&e));
            Stretch::Result(Box::new(finish(
                &ctx,
                resumed.as_deref(),
                failed,
                state,
                started,
                &mut events,
            )))
        }
    }
}

/// A drive that went idle: its cell only awaits nested calls. It keeps
/// its live VM and slot and awaits the next news on the async executor
/// (registered as live), then goes on in the task, on the worker that ran
/// the calls' I/O: no thread wakes another to start a call or to hand
/// its result back. After [`crate::run::drain::idle_wait`]'s spell without
/// news the drive looks at parking, as a blocking one does.
pub(crate) struct Idle {
    ctx: DriveCtx,
    /// The run id of a wait (`None` for an exec).
    resumed: Option<String>,
    state: RunState,
    vm: Box<codemode_sandbox::Vm>,
    output: Vec<Output>,
    events: Vec<SnapshotEvent>,
    started: Instant,
}

impl Idle {
    /// Awaits a result, an abort or cancellation, the spell after which
    /// the cell may park, or the delivery deadline.
    pub(crate) async fn news(&self) -> Woke {
        if self.ctx.scope.is_aborted() || self.ctx.limits.cancel.is_cancelled() {
            return Woke::Message(Msg::Abort);
        }
        let key = register_live(&self.ctx, &self.state);
        let left = self
            .ctx
            .delivery_deadline()
            .saturating_duration_since(Instant::now());
        let (wait, on_timeout) = idle_wait(left);
        let receiver = self.state.calls.receiver();
        let woke = match tokio::time::timeout(wait, receiver.recv_async()).await {
            Ok(Ok(message)) => Woke::Message(message),
            Err(_) => on_timeout,
            // The run's own sender is alive as long as it is.
            Ok(Err(_)) => Woke::Deadline,
        };
        self.ctx.scope.unregister(key);
        woke
    }

    /// The cell goes on with what woke it: its next burst, and so on until
    /// it is idle again or its exec or wait ends. The end (which may write
    /// to the run store) runs off the executor.
    pub(crate) fn resume(self: Box<Self>, woke: Woke) -> Stretch {
        let Idle {
            ctx,
            resumed,
            mut state,
            vm,
            output,
            events,
            started,
        } = *self;
        // Registered as live while it runs, like any drive; an abort that
        // came meanwhile cancels the calls in flight.
        let key = register_live(&ctx, &state);
        let woke = if ctx.scope.is_aborted() || ctx.limits.cancel.is_cancelled() {
            Woke::Message(Msg::Abort)
        } else {
            woke
        };
        let driven = drive_woken(&ctx, *vm, &mut state, output, woke);
        ctx.scope.unregister(key);
        if matches!(driven, Driven::Idle { .. }) {
            return end_stretch(ctx, resumed, driven, state, started, events);
        }
        off_executor(move || end_stretch(ctx, resumed, driven, state, started, events))
    }
}

impl Parked {
    /// Awaits (without a VM or a thread) what moves the cell on, then
    /// either resumes it in a VM slot of its scope or ends its exec or
    /// wait. Runs on the async executor; the stretches it resumes run off
    /// it through `blocking`.
    pub(crate) async fn go_on(
        mut self: Box<Self>,
        env: &crate::run::env::RunEnv,
    ) -> Result<(crate::slots::VmPermit, Box<Parked>), CodeModeResult> {
        match self.news().await {
            News::Arrived => {}
            News::Aborted => return Err(off_executor(move || self.end(End::Aborted))),
            News::Suspend(reason) => {
                return Err(off_executor(move || self.end(End::Suspend(reason))));
            }
        }
        let deadline = tokio::time::Instant::from_std(self.ctx.delivery_deadline());
        let slot =
            tokio::time::timeout_at(deadline, env.host.slots.acquire(&env.scope.vm_slots)).await;
        match slot {
            Ok(Ok(permit)) => Ok((permit, self)),
            // No VM in time: the run waits for the next `wait`, its
            // results kept.
            _ => Err(off_executor(move || {
                self.end(End::Suspend(WaitReason::PendingTools))
            })),
        }
    }

    /// Waits for a result, an abort, the deadline, or for only approvals
    /// to be left; registered as live meanwhile, so an abort or a client's
    /// cancellation reaches it.
    async fn news(&mut self) -> News {
        let key = register_live(&self.ctx, &self.state);
        let deadline = tokio::time::Instant::from_std(self.ctx.delivery_deadline());
        let pack_at = tokio::time::Instant::now() + PACK_AFTER;
        let news = loop {
            if self.ctx.scope.is_aborted() || self.ctx.limits.cancel.is_cancelled() {
                break News::Aborted;
            }
            if self.state.calls.all_awaiting_decision() {
                break News::Suspend(WaitReason::Approval);
            }
            let packed = matches!(self.vm, ParkedVm::Packed(_));
            let receiver = self.state.calls.receiver().clone();
            tokio::select! {
                message = receiver.recv_async() => match message {
                    Ok(Msg::Done { request_id, outcome }) => {
                        if let Some(done) = self.state.calls.finish(request_id, outcome) {
                            self.arrived.push(done);
                            break News::Arrived;
                        }
                    }
                    Ok(Msg::Abort) => break News::Aborted,
                    // Re-checked at the top of the loop.
                    Ok(Msg::AwaitingApproval) => {}
                    // The run's own sender is alive as long as it is.
                    Err(_) => break News::Suspend(WaitReason::PendingTools),
                },
                () = tokio::time::sleep_until(deadline) => {
                    break News::Suspend(WaitReason::PendingTools);
                }
                () = tokio::time::sleep_until(pack_at), if !packed => self.pack(),
            }
        };
        self.ctx.scope.unregister(key);
        news
    }

    /// Packs the snapshot of a cell that has waited a while.
    fn pack(&mut self) {
        if let ParkedVm::Raw(snapshot) = &self.vm {
            let packed = off_executor(|| snapshot.pack());
            self.vm = ParkedVm::Packed(packed);
        }
    }

    /// On a blocking thread: the cell back in a VM, fed what arrived, and
    /// driven on.
    pub(crate) fn resume(self: Box<Self>) -> Stretch {
        let Parked {
            ctx,
            resumed,
            mut state,
            vm,
            output,
            events,
            started,
            arrived,
            ..
        } = *self;
        let driven = Self::drive_restored(&ctx, &mut state, vm, arrived, output);
        end_stretch(ctx, resumed, driven, state, started, events)
    }

    /// The parked cell restored into a VM and driven on with what arrived.
    fn drive_restored(
        ctx: &DriveCtx,
        state: &mut RunState,
        vm: ParkedVm,
        arrived: Vec<Finished>,
        output: Vec<Output>,
    ) -> Driven {
        let restored = vm
            .into_snapshot()
            .map_err(codemode_sandbox::SandboxError::from)
            .and_then(|snapshot| ctx.host.sandbox.restore(&snapshot, &ctx.limits));
        let mut vm = match restored {
            Ok(vm) => vm,
            Err(e) => {
                let mut failed = host_failure(&e);
                if let CodeModeResult::Failed { code, .. } = &mut failed {
                    *code = Some(ErrorCode::SnapshotRestoreFailed);
                }
                return Driven::done(failed);
            }
        };
        // The exec's or wait's deadline, not a fresh one from now.
        vm.set_deadline(ctx.deadline);
        let mut ready: VecDeque<_> = state.carried.drain(..).collect();
        for done in arrived {
            ready.push_back(settlement(ctx, state, done));
        }
        let (more, aborted) = state.calls.arrived();
        if aborted {
            state.info.cancelled += state.calls.cancel_all(Cancel::Aborted) as u32;
            return Driven::done(aborted_failure());
        }
        for done in more {
            ready.push_back(settlement(ctx, state, done));
        }
        live(ctx, state, |ctx, state| {
            drive(ctx, vm, Step::Pending, state, ready, output)
        })
    }

    /// The exec or wait ends while the cell is parked: on a suspension
    /// the run waits from its snapshot (results that arrived are kept for
    /// `wait`); on an abort (the scope aborted or the call cancelled) its
    /// calls are cancelled and nothing more runs.
    fn end(self: Box<Self>, how: End) -> CodeModeResult {
        let Parked {
            ctx,
            resumed,
            mut state,
            vm,
            memory_bytes,
            output,
            mut events,
            started,
            arrived,
            ..
        } = *self;
        let driven = match how {
            End::Aborted => {
                state.info.cancelled += state.calls.cancel_all(Cancel::Aborted) as u32;
                Driven::done(aborted_failure())
            }
            End::Suspend(reason) => {
                for done in arrived {
                    let settled = settlement(&ctx, &mut state, done);
                    state.carried.push_back(settled);
                }
                match vm.into_snapshot() {
                    Ok(snapshot) => Driven::Suspended {
                        snapshot: Box::new(snapshot),
                        memory_bytes,
                        reason,
                        output,
                    },
                    Err(e) => Driven::done(CodeModeResult::failure(
                        ErrorCode::SnapshotRestoreFailed,
                        format!("the parked cell could not be unpacked: {e}"),
                        Telemetry::default(),
                    )),
                }
            }
        };
        finish(
            &ctx,
            resumed.as_deref(),
            driven,
            state,
            started,
            &mut events,
        )
    }
}

/// How a parked cell's exec or wait ends without resuming it.
enum End {
    Aborted,
    Suspend(WaitReason),
}

/// Runs blocking work (store I/O, packing) without stalling the async
/// executor's other tasks: in place on a multi-thread runtime.
pub(crate) fn off_executor<T>(work: impl FnOnce() -> T) -> T {
    if tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}
