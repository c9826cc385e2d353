//! Nested calls in flight for one run.
//!
//! A call's future is polled once on the VM's thread: a fast in-process tool
//! answers right there, without a thread hop. A call that is not ready is
//! spawned on the tokio runtime and reports through the run's channel, so it
//! keeps running while the run is suspended. Dropping [`Calls`] cancels
//! every call still in flight (abort, expiry, timeout, run end).

use flume::{Receiver, Sender};
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use serde_json::Value;

use crate::control::GateState;
use crate::executor::live::Msg;
use crate::executor::{ToolCallError, ToolFuture};
use crate::result::{CallOutcome, CallReceipt, Receipts, json_len};
use crate::trajectory::{Trajectory, TrajectoryEvent};

/// What the run records of a call: ids and sizes, never the input.
pub(crate) struct CallInfo {
    pub(crate) call_id: String,
    /// The catalog id, or `mcp:<server>:<method>` for resource and prompt
    /// requests.
    pub(crate) tool_id: String,
    /// `call`, or the MCP method (`resources/read`, ...).
    pub(crate) method: &'static str,
    pub(crate) parent_call_id: String,
    pub(crate) input_bytes: u64,
    /// Where a gated call (hooks, approval) is; `None` for plain calls.
    pub(crate) gate: Option<Arc<GateState>>,
    /// Its trace span (a child of the exec or wait that started it).
    pub(crate) span: tracing::Span,
    /// Set while the call waits for one of the run's `maxPendingToolCalls`
    /// slots (`None`: it had one at once).
    pub(crate) queued: Option<Arc<AtomicBool>>,
}

impl CallInfo {
    /// Held for approval: not started.
    pub(crate) fn awaiting_approval(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.awaiting_approval())
    }

    /// Waiting for a slot: the executor has not been asked yet.
    pub(crate) fn is_queued(&self) -> bool {
        self.queued
            .as_ref()
            .is_some_and(|q| q.load(Ordering::Acquire))
    }
}

/// One call in flight.
pub(crate) struct InFlight {
    pub(crate) info: CallInfo,
    pub(crate) started: Instant,
    handle: tokio::task::AbortHandle,
}

/// A finished call, ready to be delivered to the guest.
pub(crate) struct Finished {
    pub(crate) request_id: u32,
    pub(crate) tool_id: String,
    pub(crate) outcome: Result<Value, ToolCallError>,
}

/// Why the calls in flight are cancelled: what their receipts say.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cancel {
    /// An abort or cancellation of the run.
    Aborted,
    /// The run ended (returned, failed, timed out) with calls running.
    RunEnded,
}

/// The calls of one run, and the channel their results come back on.
pub(crate) struct Calls {
    inflight: BTreeMap<u32, InFlight>,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    next: u64,
    trajectory: Trajectory,
    /// Calls that ended since the current exec/wait began.
    receipts: Receipts,
    /// Where progress goes while an exec/wait drives the run.
    progress: crate::progress::ProgressSlot,
    /// Where results go while the run waits in a durable store.
    sink: crate::run::sink::ResultSink,
    /// Taken before the next call starts (see [`crate::run::sink::DeferredClaim`]).
    deferred_claim: Option<crate::run::sink::DeferredClaim>,
    /// `maxPendingToolCalls` slots: a call runs while it holds one; a call
    /// started when none is free waits for one in start order (the
    /// semaphore is fair), also while the run is suspended.
    slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Input bytes of the calls waiting for a slot (the host holds them).
    queued_bytes: Arc<AtomicUsize>,
}

impl Calls {
    pub(crate) fn new(trajectory: Trajectory) -> Calls {
        let (tx, rx) = flume::unbounded();
        Calls {
            inflight: BTreeMap::new(),
            tx,
            rx,
            next: 0,
            trajectory,
            receipts: Receipts::default(),
            progress: crate::progress::ProgressSlot::default(),
            sink: crate::run::sink::ResultSink::default(),
            deferred_claim: None,
            slots: None,
            queued_bytes: Arc::default(),
        }
    }

    /// Sets (or, with `None`, drops) the claim to take before the next
    /// call starts.
    pub(crate) fn defer_claim(&mut self, claim: Option<crate::run::sink::DeferredClaim>) {
        self.deferred_claim = claim;
    }

    /// Where this run's results are written while it waits in a durable
    /// store (shared with the tasks of its calls).
    pub(crate) fn sink(&self) -> &crate::run::sink::ResultSink {
        &self.sink
    }

    /// Forgets the calls in flight without cancelling them: their tasks
    /// keep running and write their results to the durable store, where
    /// the process that resumed the run reads them.
    pub(crate) fn detach_all(&mut self) {
        self.inflight.clear();
    }

    /// Reports to `sink` from now on (`None` while the run is suspended).
    pub(crate) fn follow(&self, sink: Option<std::sync::Arc<dyn crate::progress::ProgressSink>>) {
        self.progress.set(sink);
    }

    /// The slot nested calls report their own progress through.
    pub(crate) fn progress_slot(&self) -> crate::progress::ProgressSlot {
        self.progress.clone()
    }

    fn report_finished(&self, info: &CallInfo, outcome: &Result<Value, ToolCallError>) {
        self.progress
            .report(crate::progress::ProgressUpdate::CallFinished {
                call_id: info.call_id.clone(),
                tool_id: info.tool_id.clone(),
                ok: outcome.is_ok(),
            });
    }

    /// The receipts of the calls that ended since the last take (one
    /// exec/wait's worth).
    pub(crate) fn take_receipts(&mut self) -> Receipts {
        std::mem::take(&mut self.receipts)
    }

    fn receipt(&mut self, info: &CallInfo, outcome: CallOutcome) {
        self.receipts.push(CallReceipt {
            id: info.call_id.clone(),
            tool_id: info.tool_id.clone(),
            outcome,
        });
    }

    pub(crate) fn sender(&self) -> Sender<Msg> {
        self.tx.clone()
    }

    pub(crate) fn receiver(&self) -> &Receiver<Msg> {
        &self.rx
    }

    /// A fresh call id under `parent`.
    pub(crate) fn next_call_id(&mut self, parent: &str) -> String {
        self.next += 1;
        format!("{parent}.{}", self.next)
    }

    /// Calls started and not finished: running, held by a gate, or
    /// waiting for a slot.
    pub(crate) fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Input bytes of the calls waiting for a slot.
    pub(crate) fn queued_input_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Acquire)
    }

    /// The calls in flight with their request ids.
    pub(crate) fn pending_by_request(&self) -> impl Iterator<Item = (u32, &InFlight)> {
        self.inflight.iter().map(|(id, c)| (*id, c))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &InFlight> {
        self.inflight.values()
    }

    /// Every call in flight waits for a decision only `approve` / `deny`
    /// bring: nothing else can move the cell on.
    /// Calls still queued for a slot wait on these, so they do not count.
    pub(crate) fn all_awaiting_decision(&self) -> bool {
        let mut holding = self.inflight.values().filter(|c| !c.info.is_queued());
        let mut any = false;
        let all = holding.all(|c| {
            any = true;
            c.info.gate.as_ref().is_some_and(|g| g.awaiting_decision())
        });
        any && all
    }

    /// Calls are held for approval and none is running (queued calls wait
    /// for the held ones' slots).
    pub(crate) fn only_approvals_pending(&self) -> bool {
        let mut holding = self.inflight.values().filter(|c| !c.info.is_queued());
        let mut any = false;
        let all = holding.all(|c| {
            any = true;
            c.info.awaiting_approval()
        });
        any && all
    }

    /// Starts a call: `launch` asks the executor once the call holds one
    /// of the run's `max_pending` slots. With a slot free now, a call the
    /// executor answers on the first poll returns its outcome at once;
    /// otherwise the call is spawned on `handle` (to wait for a slot, or to
    /// finish) and reports through the run's channel.
    pub(crate) fn start<L>(
        &mut self,
        handle: &tokio::runtime::Handle,
        request_id: u32,
        mut info: CallInfo,
        max_pending: usize,
        launch: L,
    ) -> Option<Result<Value, ToolCallError>>
    where
        L: FnOnce() -> ToolFuture + Send + 'static,
    {
        // The first effect of a resumed run: the store records the claim
        // first, or the call does not start.
        if let Some(claim) = self.deferred_claim.take()
            && let Err(e) = claim.take()
        {
            return Some(Err(e));
        }
        let slots = Arc::clone(
            self.slots
                .get_or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(max_pending.max(1)))),
        );
        let started = Instant::now();
        self.progress
            .report(crate::progress::ProgressUpdate::CallStarted {
                call_id: info.call_id.clone(),
                tool_id: info.tool_id.clone(),
            });
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Every slot is taken: wait for one in a task, in start order.
            let queued = Arc::new(AtomicBool::new(true));
            info.queued = Some(Arc::clone(&queued));
            let held = QueuedBytes::hold(&self.queued_bytes, info.input_bytes as usize);
            // Take a place in the semaphore's queue now, on this thread, so
            // calls get slots in the order the cell started them (spawned
            // tasks are first polled in no particular order).
            let mut acquire = Box::pin(slots.acquire_owned());
            let now = match acquire
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
            {
                // A slot came free just now.
                Poll::Ready(slot) => Some(slot),
                Poll::Pending => None,
            };
            let future: ToolFuture = Box::pin(async move {
                let slot = match now {
                    Some(slot) => slot,
                    None => acquire.await,
                };
                let Ok(_slot) = slot else {
                    return Err(ToolCallError::new("the run ended before the call started"));
                };
                queued.store(false, Ordering::Release);
                drop(held);
                match std::panic::catch_unwind(AssertUnwindSafe(launch)) {
                    Ok(future) => CatchPanic(future).await,
                    Err(_) => Err(ToolCallError::new(
                        "the tool's executor panicked; the call did not complete",
                    )),
                }
            });
            let future = instrumented(future, &info.span);
            self.spawn(handle, (request_id, info, started), future, None);
            return None;
        };
        let future = instrumented(launch(), &info.span);
        let mut future = CatchPanic(future);
        let first = {
            let _entered = handle.enter();
            let mut cx = Context::from_waker(Waker::noop());
            Pin::new(&mut future).poll(&mut cx)
        };
        match first {
            Poll::Ready(outcome) => {
                drop(slot);
                self.report_finished(&info, &outcome);
                self.trajectory.record(event(&info, &outcome, started));
                self.receipt(&info, outcome_of(&outcome));
                info.span.record("outcome", outcome_name(&outcome));
                Some(outcome)
            }
            Poll::Pending => {
                self.spawn(handle, (request_id, info, started), future, Some(slot));
                None
            }
        }
    }

    /// Runs `future` on `handle` as call `request_id`; its outcome comes
    /// back through the run's channel (and the durable sink). `slot` is
    /// given back when the call ends.
    fn spawn<F>(
        &mut self,
        handle: &tokio::runtime::Handle,
        (request_id, info, started): (u32, CallInfo, Instant),
        future: F,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) where
        F: Future<Output = Result<Value, ToolCallError>> + Send + 'static,
    {
        let tx = self.tx.clone();
        let sink = self.sink.clone();
        let task = handle.spawn(async move {
            let outcome = future.await;
            drop(slot);
            sink.record(request_id, &outcome).await;
            let _ = tx.send(Msg::Done {
                request_id,
                outcome,
            });
        });
        self.inflight.insert(
            request_id,
            InFlight {
                info,
                started,
                handle: task.abort_handle(),
            },
        );
    }

    /// Accepts a `Done` message for a call of this run.
    pub(crate) fn finish(
        &mut self,
        request_id: u32,
        outcome: Result<Value, ToolCallError>,
    ) -> Option<Finished> {
        let record = self.inflight.remove(&request_id)?;
        self.report_finished(&record.info, &outcome);
        self.trajectory
            .record(event(&record.info, &outcome, record.started));
        self.receipt(&record.info, outcome_of(&outcome));
        record.info.span.record("outcome", outcome_name(&outcome));
        Some(Finished {
            request_id,
            tool_id: record.info.tool_id,
            outcome,
        })
    }

    /// Results that already arrived, without blocking.
    pub(crate) fn arrived(&mut self) -> (Vec<Finished>, bool) {
        let mut done = Vec::new();
        let mut aborted = false;
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Done {
                    request_id,
                    outcome,
                } => done.extend(self.finish(request_id, outcome)),
                Msg::Abort => aborted = true,
                Msg::AwaitingApproval => {}
            }
        }
        (done, aborted)
    }

    /// Cancels every call in flight; returns how many there were.
    pub(crate) fn cancel_all(&mut self, why: Cancel) -> usize {
        let n = self.inflight.len();
        for (_, call) in std::mem::take(&mut self.inflight) {
            call.handle.abort();
            let started =
                !call.info.is_queued() && call.info.gate.as_ref().is_none_or(|g| !g.not_started());
            if let Some(gate) = &call.info.gate {
                gate.cancel();
            }
            let outcome = match why {
                // Queued, or held by hooks or approval: it never ran.
                _ if !started => CallOutcome::Cancelled,
                Cancel::Aborted => CallOutcome::Cancelled,
                Cancel::RunEnded => CallOutcome::Unknown,
            };
            self.receipt(&call.info, outcome);
            call.info.span.record(
                "outcome",
                match outcome {
                    CallOutcome::Unknown => "unknown",
                    _ => "cancelled",
                },
            );
            self.trajectory.record(TrajectoryEvent::NestedToolCall {
                parent_call_id: call.info.parent_call_id,
                call_id: call.info.call_id,
                tool_id: call.info.tool_id,
                status: "cancelled",
                error: None,
                input_bytes: call.info.input_bytes,
                result_bytes: 0,
                duration_ms: millis(call.started),
            });
        }
        n
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        // Expiry or a dropped scope: no result carries these receipts.
        self.cancel_all(Cancel::Aborted);
    }
}

fn outcome_name(outcome: &Result<Value, ToolCallError>) -> &'static str {
    match outcome {
        Ok(_) => "ok",
        Err(e) if e.denied => "denied",
        Err(_) => "failed",
    }
}

fn outcome_of(outcome: &Result<Value, ToolCallError>) -> CallOutcome {
    match outcome {
        Ok(_) => CallOutcome::Ok,
        Err(e) if e.denied => CallOutcome::Denied,
        Err(_) => CallOutcome::Failed,
    }
}

fn millis(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn event(
    info: &CallInfo,
    outcome: &Result<Value, ToolCallError>,
    started: Instant,
) -> TrajectoryEvent {
    let (status, error, result_bytes) = match outcome {
        Ok(value) => ("ok", None, json_len(value)),
        Err(e) if e.denied => ("denied", Some(trajectory_error(&e.message)), 0),
        // Tool messages are the executor's text: bounded, and only the
        // first line (stack traces and dumps stay out of the trajectory).
        Err(e) => ("error", Some(trajectory_error(&e.message)), 0),
    };
    TrajectoryEvent::NestedToolCall {
        parent_call_id: info.parent_call_id.clone(),
        call_id: info.call_id.clone(),
        tool_id: info.tool_id.clone(),
        status,
        error,
        input_bytes: info.input_bytes,
        result_bytes,
        duration_ms: millis(started),
    }
}

/// Counts a queued call's input bytes until it gets a slot or is dropped
/// (cancelled while queued).
struct QueuedBytes {
    counter: Arc<AtomicUsize>,
    bytes: usize,
}

impl QueuedBytes {
    fn hold(counter: &Arc<AtomicUsize>, bytes: usize) -> QueuedBytes {
        counter.fetch_add(bytes, Ordering::AcqRel);
        QueuedBytes {
            counter: Arc::clone(counter),
            bytes,
        }
    }
}

impl Drop for QueuedBytes {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// `future` inside the call's trace span; no wrapper (and no second
/// allocation on this hot path) when no subscriber wants the span, the
/// usual case without OTLP.
fn instrumented(future: ToolFuture, span: &tracing::Span) -> ToolFuture {
    if span.is_disabled() {
        future
    } else {
        Box::pin(tracing::Instrument::instrument(future, span.clone()))
    }
}

/// Turns a panicking executor future into a failed call instead of taking
/// the VM's thread (or a tokio worker) down with it.
struct CatchPanic(ToolFuture);

impl Future for CatchPanic {
    type Output = Result<Value, ToolCallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(_) => Poll::Ready(Err(ToolCallError::new(
                "the tool's executor panicked; the call did not complete",
            ))),
        }
    }
}

/// The longest tool error kept in a trajectory record.
const MAX_TRAJECTORY_ERROR_BYTES: usize = 512;

fn trajectory_error(message: &str) -> String {
    let first_line = message.lines().next().unwrap_or("");
    codemode_sandbox::bounded_text(first_line.to_owned(), MAX_TRAJECTORY_ERROR_BYTES)
}
