//! The control layer between the bridge and the executor: `before_tool_call`
//! / `after_tool_call` hooks ([`ToolHooks`]) and human approvals
//! ([`Approver`], [`CodeModeSession::approve`](crate::CodeModeSession::approve)).
//!
//! A nested call that has hooks or needs approval runs as one gated future:
//! hook, then approval, then the executor. It is an ordinary call in flight
//! for the drive (cancelled with the run), so a held call never blocks the
//! VM's thread and a decision that arrives while the run is suspended starts
//! the call at once; `wait` then delivers its result. Nothing is replayed: a
//! call runs at most once, after its decision.

use flume::Sender;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use codemode_store::RunBackend;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::entry::CatalogEntry;
use crate::executor::live::Msg;
use crate::executor::{
    McpServerCall, NestedCall, RunContext, Scope, ToolCallError, ToolExecutor, ToolFuture,
};
use crate::result::json_len;

/// What a `before_tool_call` hook sees: one nested call, or the outer
/// `exec` (`toolKind: "code_mode_exec"`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    /// `tool` for a nested tool call, `mcp_request` for an MCP resource or
    /// prompt request, `code_mode_exec` for the model's exec.
    pub tool_kind: &'static str,
    /// The catalog id; `exec` for the outer exec.
    pub tool_id: String,
    /// For the outer exec: `javascript` or `typescript`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input_kind: Option<&'static str>,
    /// The call's id (the model's call id for an exec).
    pub call_id: String,
    /// For a nested call: the exec that started the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_call_id: Option<String>,
    /// Who and where the run is.
    pub context: RunContext,
    /// The input (the exec's `{code, language}` for the outer exec).
    pub input: Value,
}

/// A `before_tool_call` hook's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum HookDecision {
    /// Go on unchanged.
    Allow,
    /// Refuse: the guest's promise rejects with a catchable `Error` (code
    /// `approval_denied`) carrying this reason; a blocked exec fails with
    /// `approval_denied`.
    Block {
        /// Why, shown to the model.
        reason: String,
    },
    /// Go on with this input instead (checked again like the guest's).
    Rewrite {
        /// The new input.
        input: Value,
    },
}

/// What `after_tool_call` records of one call: no input, no result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// As in [`ToolCallEvent::tool_kind`].
    pub tool_kind: &'static str,
    /// The catalog id; `exec` for the outer exec.
    pub tool_id: String,
    /// The call's id.
    pub call_id: String,
    /// `ok`, `failed` for a nested call; the result's status
    /// (`completed`, `waiting`, `failed`) for an exec.
    pub outcome: &'static str,
    /// From the executor's start (after hooks and approval) to its answer.
    pub duration_ms: f64,
    /// Bytes of the input as compact JSON.
    pub input_bytes: u64,
    /// Bytes of the result as compact JSON (0 on failure).
    pub result_bytes: u64,
}

/// What a `before_tool_call` hook returns.
pub type HookFuture = Pin<Box<dyn Future<Output = HookDecision> + Send + 'static>>;

/// Hooks around every nested call and the outer exec. A hook that cannot
/// decide should block (fail closed): a blocked call is safe to retry, a
/// wrongly allowed one may not be undoable.
pub trait ToolHooks: Send + Sync + 'static {
    /// Decides before the call starts (before any approval is asked).
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        drop(event);
        Box::pin(std::future::ready(HookDecision::Allow))
    }

    /// Audits a call that ran (not denied or cancelled ones).
    fn after_tool_call(&self, record: ToolCallRecord) {
        drop(record);
    }
}

/// A human's decision on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Start the call.
    Approve,
    /// Do not start it: the guest's promise rejects with `approval_denied`.
    Deny {
        /// Why, shown to the model.
        reason: String,
    },
}

/// A call that needs approval, as an [`Approver`] is asked about it.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// Who and where the run is.
    pub context: Arc<RunContext>,
    /// The exec that started the run.
    pub parent_call_id: String,
    /// The nested call's id.
    pub call_id: String,
    /// The tool (with its annotations).
    pub tool: Arc<CatalogEntry>,
    /// The input, redacted and bounded ([`input_summary`]).
    pub input_summary: String,
}

/// What an [`Approver`] answers: `None` leaves the call waiting for
/// [`CodeModeSession::approve`](crate::CodeModeSession::approve) /
/// [`deny`](crate::CodeModeSession::deny) (or an operator).
pub type ApprovalFuture = Pin<Box<dyn Future<Output = Option<ApprovalDecision>> + Send + 'static>>;

/// Asks a human about a call that needs approval (the gateway asks its MCP
/// client through elicitation). While it asks, the run keeps waiting; a
/// decision made through the session meanwhile wins.
pub trait Approver: Send + Sync + 'static {
    /// Asks about one call.
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture;
}

/// A call awaiting approval, as listed for an operator.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The waiting run, once the run has suspended (`None` while its exec
    /// or wait is still running).
    pub run_id: Option<String>,
    /// The nested call's id.
    pub call_id: String,
    /// The tool's catalog id.
    pub tool_id: String,
    /// Why the call needs approval ([`crate::ApprovalReason::describe`]).
    pub reason: String,
    /// The input, redacted and bounded.
    pub input_summary: String,
    /// Who and where the run is.
    pub context: RunContext,
}

/// A decision that found no call to decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// No such call awaits approval in this scope.
    #[error(
        "no call {call_id} of run {run_id} awaits approval here (it was decided already, the run ended, or it belongs to another session)"
    )]
    NotPending {
        /// The run named.
        run_id: String,
        /// The call named.
        call_id: String,
    },
    /// The call is held in the run store, which could not record the
    /// decision.
    #[error(
        "the decision could not be recorded in the run store ({reason}); nothing was decided: decide again once the store is back"
    )]
    Store {
        /// What the store said.
        reason: String,
    },
}

/// The id a run gets when it first suspends, shared by its gated calls
/// (so a pending approval can be named by run id).
pub(crate) type RunTag = Arc<OnceLock<String>>;

/// Where a gated call is: shared by its future and the drive.
pub(crate) struct GateState {
    stage: AtomicU8,
    /// What the call holds for its decision, once it is held.
    held: OnceLock<HeldInput>,
    /// Where the call is listed in the run store, once its run waits there.
    published: OnceLock<Published>,
    /// Told when `published` is set.
    on_publish: tokio::sync::Notify,
}

/// What of a call held for approval is stored with its run, so that
/// another process can ask again and run it once approved.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeldInput {
    /// The input the call runs with (after hooks).
    pub(crate) input: Value,
    /// Why it needs approval.
    pub(crate) reason: String,
    /// The input as approvers see it.
    pub(crate) summary: String,
}

/// A held call listed in a run store every process sharing it can decide
/// it in ([`RunBackend::put_held`]).
#[derive(Clone)]
pub(crate) struct Published {
    pub(crate) backend: Arc<dyn RunBackend>,
    pub(crate) run_id: Arc<str>,
    pub(crate) request_id: u32,
}

/// What the run store keeps of a held call for whoever lists or decides it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredApproval {
    pub(crate) call_id: String,
    pub(crate) tool_id: String,
    pub(crate) reason: String,
    pub(crate) input_summary: String,
    pub(crate) context: RunContext,
    pub(crate) owner_key: String,
}

/// A decision as the run store keeps it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum StoredDecision {
    Approve,
    Deny { reason: String },
}

impl From<&ApprovalDecision> for StoredDecision {
    fn from(d: &ApprovalDecision) -> StoredDecision {
        match d {
            ApprovalDecision::Approve => StoredDecision::Approve,
            ApprovalDecision::Deny { reason } => StoredDecision::Deny {
                reason: reason.clone(),
            },
        }
    }
}

/// Encodes a decision for the run store.
fn encode_decision(decision: &ApprovalDecision) -> Vec<u8> {
    serde_json::to_vec(&StoredDecision::from(decision)).unwrap_or_default()
}

/// A decision read from the run store; bytes that are no decision deny
/// (fail closed: nothing starts on a damaged record).
pub(crate) fn decode_decision(bytes: &[u8]) -> ApprovalDecision {
    match serde_json::from_slice(bytes) {
        Ok(StoredDecision::Approve) => ApprovalDecision::Approve,
        Ok(StoredDecision::Deny { reason }) => ApprovalDecision::Deny { reason },
        Err(_) => ApprovalDecision::Deny {
            reason: "the decision stored for this call cannot be read".into(),
        },
    }
}

/// The error a denied call rejects with.
pub(crate) fn denied_call(tool_id: &str, reason: &str) -> ToolCallError {
    ToolCallError::denied(format!(
        "the call of {tool_id} was denied approval: {reason}"
    ))
}

const STAGE_GATING: u8 = 0;
const STAGE_ASKING: u8 = 1;
const STAGE_AWAITING: u8 = 2;
const STAGE_RUNNING: u8 = 3;
/// Cancelled with its run: no decision applies any more.
const STAGE_CANCELLED: u8 = 4;

impl GateState {
    pub(crate) fn new() -> Arc<GateState> {
        Arc::new(GateState {
            stage: AtomicU8::new(STAGE_GATING),
            held: OnceLock::new(),
            published: OnceLock::new(),
            on_publish: tokio::sync::Notify::new(),
        })
    }

    /// A call held for approval when its run was stored, brought back by
    /// the process that restored the run: listed in the run store already,
    /// and awaiting a decision from the start.
    pub(crate) fn held_in_store(published: Published, held: HeldInput) -> Arc<GateState> {
        let state = GateState::new();
        let _ = state.held.set(held);
        state.set(STAGE_AWAITING);
        state.publish(published);
        state
    }

    /// Decided elsewhere (the call runs, here or in another process): no
    /// longer awaiting approval. `false` when its run cancelled it.
    pub(crate) fn decided(&self) -> bool {
        self.try_start()
    }

    /// The call is listed in the run store: decisions made there reach it.
    pub(crate) fn publish(&self, published: Published) {
        if self.published.set(published).is_ok() {
            self.on_publish.notify_one();
        }
    }

    /// What the call holds, once held for approval.
    pub(crate) fn held(&self) -> Option<&HeldInput> {
        self.held.get()
    }

    fn published(&self) -> Option<&Published> {
        self.published.get()
    }

    /// Moves on to `stage`, unless the run cancelled the call (that is final).
    fn set(&self, stage: u8) {
        let _ = self
            .stage
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                (now != STAGE_CANCELLED).then_some(stage)
            });
    }

    /// The call's run cancelled it (its future goes soon after).
    pub(crate) fn cancel(&self) {
        self.stage.store(STAGE_CANCELLED, Ordering::SeqCst);
    }

    /// Moves a call that is not cancelled on to running (decided, or about
    /// to call the executor); `false` when its run cancelled it: nothing
    /// may start then.
    fn try_start(&self) -> bool {
        let mut stage = self.stage.load(Ordering::SeqCst);
        loop {
            if stage == STAGE_CANCELLED {
                return false;
            }
            match self.stage.compare_exchange(
                stage,
                STAGE_RUNNING,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => stage = now,
            }
        }
    }

    fn cancelled(&self) -> bool {
        self.stage.load(Ordering::SeqCst) == STAGE_CANCELLED
    }

    /// Held for a decision that only `approve` / `deny` will bring.
    pub(crate) fn awaiting_decision(&self) -> bool {
        self.stage.load(Ordering::SeqCst) == STAGE_AWAITING
    }

    /// Held for approval (asked, or awaiting a decision): not started.
    pub(crate) fn awaiting_approval(&self) -> bool {
        matches!(
            self.stage.load(Ordering::SeqCst),
            STAGE_ASKING | STAGE_AWAITING
        )
    }

    /// Not started yet (hooks or approval still deciding).
    pub(crate) fn not_started(&self) -> bool {
        !matches!(
            self.stage.load(Ordering::SeqCst),
            STAGE_RUNNING | STAGE_CANCELLED
        )
    }

    pub(crate) fn summary(&self) -> Option<String> {
        self.held.get().map(|h| h.summary.clone())
    }
}

struct Pending {
    gate: Arc<GateState>,
    scope: Scope,
    /// Who may resume the run ([`crate::run::env::RunEnv::owner_key`]).
    owner_key: Arc<str>,
    run: RunTag,
    call_id: String,
    tool_id: String,
    reason: String,
    summary: String,
    context: Arc<RunContext>,
    decide: tokio::sync::oneshot::Sender<ApprovalDecision>,
}

/// Every call awaiting approval in the process, so that a session (scoped)
/// or an operator (any scope) can decide it; and, with a run store that
/// outlives the process, the held calls of every process sharing it.
#[derive(Default)]
pub(crate) struct ApprovalRegistry {
    pending: Mutex<HashMap<u64, Pending>>,
    /// The run store when it outlives the process: held calls of waiting
    /// runs are listed and decided there too (any replica, any restart).
    store: Option<Arc<dyn RunBackend>>,
}

impl ApprovalRegistry {
    /// A registry that also lists and decides the held calls `store` keeps.
    pub(crate) fn new(store: Option<Arc<dyn RunBackend>>) -> ApprovalRegistry {
        ApprovalRegistry {
            pending: Mutex::default(),
            store,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(self: &Arc<Self>, pending: Pending) -> PendingGuard {
        let key = codemode_sandbox::random_u64();
        self.lock().insert(key, pending);
        PendingGuard {
            registry: Arc::clone(self),
            key,
        }
    }

    /// Decides a pending call: in `scope` only, or anywhere for `None`.
    pub(crate) fn decide(
        &self,
        scope: Option<&Scope>,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), ApprovalError> {
        self.decide_where(run_id, call_id, decision, |s, _| {
            scope.is_none_or(|mine| mine == s)
        })
    }

    /// Decides a pending call of a run that `owner_key` may resume (its
    /// owner, or anyone when the run is resumable by its id): how a
    /// stateless client answers the approval question it was given in a
    /// result, from another request than the one that started the run.
    pub(crate) fn decide_as_resumer(
        &self,
        owner_key: &str,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), ApprovalError> {
        self.decide_where(run_id, call_id, decision, |_, owner| {
            owner == owner_key || owner == codemode_store::ANY_OWNER
        })
    }

    /// `allowed` is asked with the call's scope and its run's owner key.
    fn decide_where(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        allowed: impl Fn(&Scope, &str) -> bool,
    ) -> Result<(), ApprovalError> {
        let local = self.lock().iter().find_map(|(key, p)| {
            (p.call_id == call_id
                && !p.gate.cancelled()
                && p.run.get().map(String::as_str) == Some(run_id)
                && allowed(&p.scope, &p.owner_key))
            .then_some(*key)
        });
        match local {
            Some(key) => self.decide_entry(key, decision),
            None => self.decide_stored(run_id, call_id, decision, allowed),
        }
    }

    /// Decides the entry `key`: in the run store first when the call is
    /// listed there (the first decision anywhere wins, and it is kept
    /// before the call starts), then here.
    fn decide_entry(&self, key: u64, decision: ApprovalDecision) -> Result<(), ApprovalError> {
        let Some((published, run_id, call_id)) = self.lock().get(&key).map(|p| {
            (
                p.gate.published().cloned(),
                p.run.get().cloned().unwrap_or_default(),
                p.call_id.clone(),
            )
        }) else {
            return Err(ApprovalError::NotPending {
                run_id: String::new(),
                call_id: String::new(),
            });
        };
        let not_pending = || ApprovalError::NotPending {
            run_id: run_id.clone(),
            call_id: call_id.clone(),
        };
        if let Some(p) = &published {
            match p
                .backend
                .decide_held(&p.run_id, p.request_id, &encode_decision(&decision))
            {
                Ok(true) => {}
                Ok(false) => return Err(not_pending()),
                Err(e) => return Err(store_error(&e)),
            }
        }
        // Listed in the store, the decision is made once it is kept there
        // (the call's watch delivers it if this process lost the entry).
        if self.deliver(key, decision) || published.is_some() {
            Ok(())
        } else {
            Err(not_pending())
        }
    }

    /// Hands `decision` to the call of entry `key`; `false` when another
    /// decision took the entry first, or its run cancelled the call.
    fn deliver(&self, key: u64, decision: ApprovalDecision) -> bool {
        // Whoever removes the entry decides: never two.
        self.lock().remove(&key).is_some_and(|p| {
            // Decided now, not when the call's task next runs: a `wait`
            // right after this must wait for the call, not suspend again.
            p.gate.try_start() && p.decide.send(decision).is_ok()
        })
    }

    /// Decides a call held by another process (or by one that stopped),
    /// as the run store lists it.
    fn decide_stored(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        allowed: impl Fn(&Scope, &str) -> bool,
    ) -> Result<(), ApprovalError> {
        let not_pending = || ApprovalError::NotPending {
            run_id: run_id.to_owned(),
            call_id: call_id.to_owned(),
        };
        let Some(store) = &self.store else {
            return Err(not_pending());
        };
        let held = store.list_held().map_err(|e| store_error(&e))?;
        let found = held.into_iter().find_map(|h| {
            let entry: StoredApproval = serde_json::from_slice(&h.entry).ok()?;
            (h.run_id == run_id
                && entry.call_id == call_id
                && allowed(&Scope::of(&entry.context), &entry.owner_key))
            .then_some(h.request_id)
        });
        let request_id = found.ok_or_else(not_pending)?;
        match store.decide_held(run_id, request_id, &encode_decision(&decision)) {
            Ok(true) => Ok(()),
            Ok(false) => Err(not_pending()),
            Err(e) => Err(store_error(&e)),
        }
    }

    /// The calls awaiting approval (in `scope`, or everywhere): this
    /// process's, and those the run store lists.
    pub(crate) fn list(&self, scope: Option<&Scope>) -> Vec<PendingApproval> {
        let mut list: Vec<PendingApproval> = self
            .lock()
            .values()
            .filter(|p| !p.gate.cancelled() && scope.is_none_or(|s| *s == p.scope))
            .map(|p| PendingApproval {
                run_id: p.run.get().cloned(),
                call_id: p.call_id.clone(),
                tool_id: p.tool_id.clone(),
                reason: p.reason.clone(),
                input_summary: p.summary.clone(),
                context: RunContext::clone(&p.context),
            })
            .collect();
        if let Some(store) = &self.store {
            match store.list_held() {
                Ok(held) => {
                    for h in held {
                        let Ok(entry) = serde_json::from_slice::<StoredApproval>(&h.entry) else {
                            continue;
                        };
                        let listed = list.iter().any(|p| {
                            p.run_id.as_deref() == Some(h.run_id.as_str())
                                && p.call_id == entry.call_id
                        });
                        if listed || scope.is_some_and(|s| *s != Scope::of(&entry.context)) {
                            continue;
                        }
                        list.push(PendingApproval {
                            run_id: Some(h.run_id),
                            call_id: entry.call_id,
                            tool_id: entry.tool_id,
                            reason: entry.reason,
                            input_summary: entry.input_summary,
                            context: entry.context,
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "held calls in the run store cannot be listed; only this process's are shown");
                }
            }
        }
        list.sort_by(|a, b| (&a.run_id, &a.call_id).cmp(&(&b.run_id, &b.call_id)));
        list
    }
}

fn store_error(e: &codemode_store::StoreError) -> ApprovalError {
    ApprovalError::Store {
        reason: e.to_string(),
    }
}

/// Removes a pending entry when its call is decided or dropped.
struct PendingGuard {
    registry: Arc<ApprovalRegistry>,
    key: u64,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.key);
    }
}

/// Checks a rewritten input; the error says what is wrong with it.
pub(crate) type Recheck = Box<dyn FnOnce(Value) -> Result<Value, String> + Send>;

/// What gates one nested call.
pub(crate) struct Gate {
    /// Where the call is (shared with the drive).
    pub(crate) state: Arc<GateState>,
    pub(crate) hooks: Option<Arc<dyn ToolHooks>>,
    pub(crate) approval: Option<GateApproval>,
    /// Checks a rewritten input as the guest's was checked (MCP tools).
    pub(crate) recheck: Option<Recheck>,
}

/// How one call is approved.
pub(crate) struct GateApproval {
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) registry: Arc<ApprovalRegistry>,
    pub(crate) scope: Scope,
    pub(crate) owner_key: Arc<str>,
    pub(crate) run: RunTag,
    pub(crate) state: Arc<GateState>,
    /// Wakes the drive when the call starts waiting for a decision.
    pub(crate) wake: Sender<Msg>,
}

/// What a hook is told of a nested call or request.
fn nested_event(
    tool_kind: &'static str,
    tool_id: &str,
    (call_id, parent_call_id): (&str, &str),
    context: &RunContext,
    input: &Value,
) -> ToolCallEvent {
    ToolCallEvent {
        tool_kind,
        tool_id: tool_id.to_owned(),
        tool_input_kind: None,
        call_id: call_id.to_owned(),
        parent_call_id: Some(parent_call_id.to_owned()),
        context: context.clone(),
        input: input.clone(),
    }
}

/// The `after_tool_call` record of a call that ran.
fn audit(
    hooks: &dyn ToolHooks,
    tool_kind: &'static str,
    tool_id: String,
    call_id: String,
    (started, input_bytes): (Instant, u64),
    outcome: &Result<Value, ToolCallError>,
) {
    hooks.after_tool_call(ToolCallRecord {
        tool_kind,
        tool_id,
        call_id,
        outcome: if outcome.is_ok() { "ok" } else { "failed" },
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        input_bytes,
        result_bytes: outcome.as_ref().map_or(0, json_len),
    });
}

/// The call as one future: hooks, approval, then the executor.
pub(crate) fn gated(gate: Gate, call: NestedCall, executor: Arc<dyn ToolExecutor>) -> ToolFuture {
    Box::pin(run_gated(gate, call, executor))
}

async fn run_gated(
    gate: Gate,
    mut call: NestedCall,
    executor: Arc<dyn ToolExecutor>,
) -> Result<Value, ToolCallError> {
    let tool_id = call.tool.id.clone();
    if let Some(hooks) = &gate.hooks {
        let event = nested_event(
            "tool",
            &tool_id,
            (&call.call_id, &call.parent_call_id),
            &call.context,
            &call.input,
        );
        match hooks.before_tool_call(event).await {
            HookDecision::Allow => {}
            HookDecision::Block { reason } => {
                return Err(ToolCallError::denied(format!(
                    "the call of {tool_id} was blocked by a before_tool_call hook: {reason}"
                )));
            }
            HookDecision::Rewrite { input } => {
                call.input = match gate.recheck {
                    Some(recheck) => recheck(input).map_err(|e| {
                        ToolCallError::denied(format!(
                            "a before_tool_call hook rewrote the input of {tool_id} into one the tool does not accept: {e}"
                        ))
                    })?,
                    None => input,
                };
            }
        }
    }
    if let Some(approval) = gate.approval {
        approve(approval, &call).await?;
    }
    if let Some(published) = gate.state.published() {
        start_once(published, &tool_id).await?;
    }
    if !gate.state.try_start() {
        return Err(ToolCallError::denied(format!(
            "the call of {tool_id} was not started: its run ended first"
        )));
    }
    let started = Instant::now();
    let input_bytes = gate.hooks.as_ref().map_or(0, |_| json_len(&call.input));
    let call_id = call.call_id.clone();
    let outcome = executor.call(call).await;
    if let Some(hooks) = &gate.hooks {
        audit(
            &**hooks,
            "tool",
            tool_id,
            call_id,
            (started, input_bytes),
            &outcome,
        );
    }
    outcome
}

/// A resource or prompt request (`MCP.<server>.resources.*` /
/// `.prompts.*`) through the hooks: `toolKind: "mcp_request"`, the tool id
/// `mcp:<server>:<method>`.
pub(crate) fn hooked_request(
    hooks: Arc<dyn ToolHooks>,
    mut request: McpServerCall,
    executor: Arc<dyn ToolExecutor>,
) -> ToolFuture {
    Box::pin(async move {
        let tool_id = format!("mcp:{}:{}", request.server, request.method.as_str());
        let event = nested_event(
            "mcp_request",
            &tool_id,
            (&request.call_id, &request.parent_call_id),
            &request.context,
            &request.params,
        );
        match hooks.before_tool_call(event).await {
            HookDecision::Allow => {}
            HookDecision::Block { reason } => {
                return Err(ToolCallError::denied(format!(
                    "the request {tool_id} was blocked by a before_tool_call hook: {reason}"
                )));
            }
            HookDecision::Rewrite {
                input: Value::Object(params),
            } => {
                request.params = Value::Object(params);
            }
            HookDecision::Rewrite { .. } => {
                return Err(ToolCallError::denied(format!(
                    "a before_tool_call hook rewrote the params of {tool_id} into something that is not an object"
                )));
            }
        }
        let started = Instant::now();
        let input_bytes = json_len(&request.params);
        let call_id = request.call_id.clone();
        let outcome = executor.mcp_request(request).await;
        audit(
            &*hooks,
            "mcp_request",
            tool_id,
            call_id,
            (started, input_bytes),
            &outcome,
        );
        outcome
    })
}

/// Why `tool`'s calls need approval, in one line.
pub fn approval_reason(tool: &CatalogEntry) -> String {
    tool.gate.approval.as_ref().map_or_else(
        || "the run's hooks hold it".into(),
        crate::catalog::gate::ApprovalReason::describe,
    )
}

/// Holds the call until it is decided; `Err` when denied. A decision
/// comes from the registry (a session, an operator), from the approver's
/// answer, or, once the run waits in a store other processes share, from
/// that store (a replica's operator, a process that resumed the run).
async fn approve(approval: GateApproval, call: &NestedCall) -> Result<(), ToolCallError> {
    let summary = input_summary(&call.input);
    let reason = approval_reason(&call.tool);
    let _ = approval.state.held.set(HeldInput {
        input: call.input.clone(),
        reason: reason.clone(),
        summary: summary.clone(),
    });
    let (decide, decided) = tokio::sync::oneshot::channel();
    let pending = approval.registry.insert(Pending {
        gate: Arc::clone(&approval.state),
        scope: approval.scope.clone(),
        owner_key: Arc::clone(&approval.owner_key),
        run: Arc::clone(&approval.run),
        call_id: call.call_id.clone(),
        tool_id: call.tool.id.clone(),
        reason,
        summary: summary.clone(),
        context: Arc::clone(&call.context),
        decide,
    });
    let key = pending.key;
    let ask = async {
        if let Some(approver) = &approval.approver {
            approval.state.set(STAGE_ASKING);
            let answer = approver
                .ask(ApprovalRequest {
                    context: Arc::clone(&call.context),
                    parent_call_id: call.parent_call_id.clone(),
                    call_id: call.call_id.clone(),
                    tool: Arc::clone(&call.tool),
                    input_summary: summary,
                })
                .await;
            if let Some(decision) = answer {
                // Decided like any other decision (it counts only if none
                // was made meanwhile); the store may be written.
                let registry = Arc::clone(&approval.registry);
                let _ =
                    tokio::task::spawn_blocking(move || registry.decide_entry(key, decision)).await;
                return std::future::pending().await;
            }
        }
        approval.state.set(STAGE_AWAITING);
        let _ = approval.wake.send(Msg::AwaitingApproval);
        std::future::pending::<()>().await
    };
    let watch = watch_store(&approval.registry, &approval.state, key);
    let decision = tokio::select! {
        decided = decided => decided.ok(),
        () = ask => None,
        () = watch => None,
    };
    drop(pending);
    match decision.unwrap_or_else(|| ApprovalDecision::Deny {
        reason: "no decision can arrive any more".into(),
    }) {
        ApprovalDecision::Approve => Ok(()),
        ApprovalDecision::Deny { reason } => Err(denied_call(&call.tool.id, &reason)),
    }
}

/// A held call listed in the run store starts at most once over every
/// process sharing it: the store records who starts it before it starts,
/// so a process that restores the run after this one died knows whether
/// the call may have run.
///
/// # Errors
/// When another process started it, or the store cannot record the start
/// (then the call is not started).
pub(crate) async fn start_once(published: &Published, tool_id: &str) -> Result<(), ToolCallError> {
    let p = published.clone();
    let started =
        tokio::task::spawn_blocking(move || p.backend.start_held(&p.run_id, p.request_id)).await;
    match started {
        Ok(Ok(Some(instance))) if instance == published.backend.instance() => Ok(()),
        // The run left the store: no other process can start the call.
        Ok(Ok(None)) => Ok(()),
        Ok(Ok(Some(other))) => Err(ToolCallError::interrupted(format!(
            "the call to {tool_id} was started by another process ({other}) that resumed the run; it was not started again here"
        ))),
        Ok(Err(e)) => Err(ToolCallError::new(format!(
            "the run store could not record that the call to {tool_id} starts ({e}); it was not started"
        ))),
        Err(_) => Err(ToolCallError::new(format!(
            "recording that the call to {tool_id} starts failed; it was not started"
        ))),
    }
}

/// Once the call is listed in the run store, waits there for a decision
/// made by another process and hands it to the call. Never ends.
async fn watch_store(registry: &Arc<ApprovalRegistry>, state: &Arc<GateState>, key: u64) {
    let published = loop {
        if let Some(p) = state.published() {
            break p.clone();
        }
        state.on_publish.notified().await;
    };
    registry.deliver(key, stored_decision(&published).await);
    std::future::pending().await
}

/// The decision on a call listed in the run store, once one is made there
/// (by any process); waits as long as it takes, off the async workers.
pub(crate) async fn stored_decision(published: &Published) -> ApprovalDecision {
    loop {
        let p = published.clone();
        let read = tokio::task::spawn_blocking(move || {
            p.backend
                .await_decision(&p.run_id, p.request_id, Duration::from_secs(2))
        })
        .await;
        match read {
            Ok(Ok(Some(bytes))) => return decode_decision(&bytes),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the run store cannot be read for a decision; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// The longest input summary shown to whoever approves.
pub const MAX_INPUT_SUMMARY_BYTES: usize = 1024;

/// The longest string value kept in a summary.
const MAX_SUMMARY_STRING: usize = 200;

/// Keys whose values are masked in summaries.
const SECRET_KEYS: [&str; 9] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "auth",
    "cookie",
    "credential",
];

/// The input of a call as shown to whoever approves it: values under
/// secret-looking keys masked, long strings cut, nesting below 4 levels
/// elided, at most [`MAX_INPUT_SUMMARY_BYTES`] of compact JSON.
pub fn input_summary(input: &Value) -> String {
    redacted_json(
        input,
        Bounds {
            depth: 4,
            string: MAX_SUMMARY_STRING,
            bytes: MAX_INPUT_SUMMARY_BYTES,
        },
        "the input",
    )
}

/// How much of a value [`redacted_json`] keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Objects and arrays this deep are elided.
    pub(crate) depth: usize,
    /// Longer strings are cut.
    pub(crate) string: usize,
    /// The whole text, note included.
    pub(crate) bytes: usize,
}

/// `value` as compact JSON for people (approvers, debug logs): values under
/// secret-looking keys masked, long strings cut, deep nesting elided, at
/// most `bounds.bytes`, with a note naming `what` when anything was left
/// out.
pub(crate) fn redacted_json(value: &Value, bounds: Bounds, what: &str) -> String {
    /// `cut` is set when something is left out (not when masked).
    fn redact(value: &Value, depth: usize, bounds: Bounds, cut: &mut bool) -> Value {
        match value {
            Value::Object(map) if depth >= bounds.depth => {
                *cut = true;
                Value::String(format!("{{…{} keys}}", map.len()))
            }
            Value::Array(items) if depth >= bounds.depth => {
                *cut = true;
                Value::String(format!("[…{} items]", items.len()))
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let lower = k.to_ascii_lowercase();
                        let v = if SECRET_KEYS.iter().any(|s| lower.contains(s)) {
                            Value::String("[redacted]".into())
                        } else {
                            redact(v, depth + 1, bounds, cut)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| redact(v, depth + 1, bounds, cut))
                    .collect(),
            ),
            Value::String(s) if s.len() > bounds.string => {
                *cut = true;
                Value::String(codemode_sandbox::bounded_text(s.clone(), bounds.string))
            }
            other => other.clone(),
        }
    }
    let mut cut = false;
    let text = redact(value, 0, bounds, &mut cut).to_string();
    if text.len() <= bounds.bytes && !cut {
        return text;
    }
    // Whoever reads it must know they do not see everything.
    let note = format!(
        " … [summary: {what} is {} bytes; long strings, deep nesting or the rest are not shown]",
        crate::result::json_len(value)
    );
    let mut end = text.len().min(bounds.bytes.saturating_sub(note.len()));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

#[cfg(test)]
mod gate_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_mask_secrets_and_stay_bounded() {
        let summary = input_summary(&json!({
            "path": "/tmp/x",
            "apiToken": "sk-123",
            "nested": {"Password": "hunter2", "ok": 1},
        }));
        assert!(summary.contains("/tmp/x"), "{summary}");
        assert!(!summary.contains("sk-123"), "{summary}");
        assert!(!summary.contains("hunter2"), "{summary}");
        assert_eq!(summary.matches("[redacted]").count(), 2, "{summary}");
        let long = input_summary(&json!({ "items": vec!["x".repeat(150); 40] }));
        assert!(long.len() <= MAX_INPUT_SUMMARY_BYTES, "{}", long.len());
        assert!(long.contains("not shown"), "{long}");
        // A long string cut in the middle is said to be cut, even when the
        // summary is short.
        let padded = input_summary(&json!({ "cmd": format!("{} ; rm -rf ~", "x".repeat(300)) }));
        assert!(!padded.contains("rm -rf"), "{padded}");
        assert!(padded.contains("the input is"), "{padded}");
        let deep = input_summary(&json!({"a": {"b": {"c": {"d": {"e": 1}}}}}));
        assert!(deep.contains("{…1 keys}"), "{deep}");
    }

    #[test]
    fn a_decision_needs_the_right_scope_run_and_call() {
        let registry = Arc::new(ApprovalRegistry::default());
        let scope = Scope::of(&RunContext {
            session_id: Some("a".into()),
            ..RunContext::default()
        });
        let other = Scope::of(&RunContext::default());
        let run: RunTag = Arc::new(OnceLock::new());
        let (decide, mut decided) = tokio::sync::oneshot::channel();
        let guard = registry.insert(Pending {
            gate: GateState::new(),
            scope: scope.clone(),
            owner_key: Arc::from("principal:alice"),
            run: Arc::clone(&run),
            call_id: "exec_1.1".into(),
            tool_id: "client:x:y".into(),
            reason: "the tool's definition asks for approval".into(),
            summary: "{}".into(),
            context: Arc::new(RunContext::default()),
            decide,
        });
        // Before the run suspends it has no id to be named by.
        assert!(
            registry
                .decide(Some(&scope), "", "exec_1.1", ApprovalDecision::Approve)
                .is_err()
        );
        run.set("run_1".into()).unwrap();
        assert_eq!(registry.list(Some(&other)).len(), 0);
        assert_eq!(registry.list(None)[0].run_id.as_deref(), Some("run_1"));
        let err = registry
            .decide(Some(&other), "run_1", "exec_1.1", ApprovalDecision::Approve)
            .unwrap_err();
        assert!(err.to_string().contains("another session"), "{err}");
        assert!(
            registry
                .decide(Some(&scope), "run_1", "exec_1.2", ApprovalDecision::Approve)
                .is_err()
        );
        registry
            .decide(Some(&scope), "run_1", "exec_1.1", ApprovalDecision::Approve)
            .unwrap();
        assert_eq!(decided.try_recv().unwrap(), ApprovalDecision::Approve);
        // Decided once: a second decision finds nothing.
        assert!(
            registry
                .decide(None, "run_1", "exec_1.1", ApprovalDecision::Approve)
                .is_err()
        );
        drop(guard);
        assert!(registry.list(None).is_empty());
    }

    /// A stateless client answers in a later request, from a new scope:
    /// only the run's owner, or anyone for a run resumable by its id.
    #[test]
    fn a_resumer_decides_only_runs_it_may_resume() {
        let registry = Arc::new(ApprovalRegistry::default());
        let pending = |owner: &str, run: &str| {
            let tag: RunTag = Arc::new(OnceLock::new());
            tag.set(run.into()).unwrap();
            let (decide, decided) = tokio::sync::oneshot::channel();
            let guard = registry.insert(Pending {
                gate: GateState::new(),
                scope: Scope::of(&RunContext::default()),
                owner_key: Arc::from(owner),
                run: tag,
                call_id: "c.1".into(),
                tool_id: "mcp:s:t".into(),
                reason: String::new(),
                summary: "{}".into(),
                context: Arc::new(RunContext::default()),
                decide,
            });
            (guard, decided)
        };
        let (_alice, mut alices) = pending("principal:alice", "run_a");
        let (_anyone, mut anyones) = pending(codemode_store::ANY_OWNER, "run_b");
        let approve = || ApprovalDecision::Approve;
        assert!(
            registry
                .decide_as_resumer("principal:bob", "run_a", "c.1", approve())
                .is_err(),
            "bob cannot decide alice's call"
        );
        registry
            .decide_as_resumer("principal:alice", "run_a", "c.1", approve())
            .unwrap();
        assert_eq!(alices.try_recv().unwrap(), ApprovalDecision::Approve);
        registry
            .decide_as_resumer("principal:bob", "run_b", "c.1", approve())
            .unwrap();
        assert_eq!(anyones.try_recv().unwrap(), ApprovalDecision::Approve);
    }

    /// Held calls another process listed in the run store: listed here
    /// too, and decided only by whoever may decide them there (the run's
    /// scope, its owner, or an operator); the decision lands in the store.
    #[test]
    fn calls_held_in_the_store_keep_their_scope_and_owner() {
        use codemode_store::{MemoryBackend, RunBackend};
        let store: Arc<dyn RunBackend> = Arc::new(MemoryBackend::new());
        let bounds = codemode_store::Bounds {
            max_runs: 10,
            max_bytes: 1 << 20,
        };
        let ttl = std::time::Duration::from_secs(60);
        store
            .put("run_s", "principal:alice", b"rec", ttl, bounds)
            .unwrap();
        let context = RunContext {
            session_id: Some("a".into()),
            ..RunContext::default()
        };
        let entry = StoredApproval {
            call_id: "exec_1.1".into(),
            tool_id: "mcp:notes:delete".into(),
            reason: "approveTools".into(),
            input_summary: "{}".into(),
            context: context.clone(),
            owner_key: "principal:alice".into(),
        };
        store
            .put_held("run_s", 7, &serde_json::to_vec(&entry).unwrap())
            .unwrap();
        let registry = ApprovalRegistry::new(Some(Arc::clone(&store)));
        let mine = Scope::of(&context);
        let other = Scope::of(&RunContext::default());
        assert_eq!(registry.list(None).len(), 1);
        assert_eq!(registry.list(Some(&mine))[0].tool_id, "mcp:notes:delete");
        assert!(registry.list(Some(&other)).is_empty());
        let approve = || ApprovalDecision::Approve;
        assert!(
            registry
                .decide(Some(&other), "run_s", "exec_1.1", approve())
                .is_err()
        );
        assert!(
            registry
                .decide_as_resumer("principal:bob", "run_s", "exec_1.1", approve())
                .is_err()
        );
        assert!(
            registry
                .decide_as_resumer("principal:alice", "run_s", "exec_1.2", approve())
                .is_err()
        );
        registry
            .decide_as_resumer("principal:alice", "run_s", "exec_1.1", approve())
            .unwrap();
        let stored = store
            .await_decision("run_s", 7, std::time::Duration::ZERO)
            .unwrap()
            .unwrap();
        assert_eq!(decode_decision(&stored), ApprovalDecision::Approve);
        assert!(registry.list(None).is_empty());
        // Decided once: an operator finds nothing left to decide.
        assert!(
            registry
                .decide(None, "run_s", "exec_1.1", approve())
                .is_err()
        );
        // Bytes that are no decision deny: nothing starts on them.
        assert!(matches!(
            decode_decision(b"garbage"),
            ApprovalDecision::Deny { .. }
        ));
    }
}
