//! Taking a waiting run for `wait`: from this process's memory, or — with a
//! durable store — claimed there and rebuilt from its record when this
//! process has no current live copy (after a restart, on another replica,
//! or when another process resumed it since).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use codemode_sandbox::{Settlement, Snapshot};

use crate::config::Language;
use crate::executor::{ToolCallError, ToolFuture};
use crate::run::bridge::settlement;
use crate::run::calls::{CallInfo, Finished};
use crate::run::durable::{self, Durable, PendingCall};
use crate::run::env::{DriveCtx, RunEnv};
use crate::run::sink::{self, DeferredClaim};
use crate::run::state::RunState;
use crate::run::store::StoreError;

/// A run taken for a `wait`.
pub(crate) struct Taken {
    pub(crate) snapshot: Snapshot,
    pub(crate) state: RunState,
    /// What the restore settled at once: results other processes stored,
    /// calls whose process died (`interrupted`).
    pub(crate) ready: VecDeque<(u32, Settlement)>,
}

fn from_store(e: codemode_store::StoreError) -> StoreError {
    use codemode_store::StoreError as E;
    match e {
        E::Unknown => StoreError::Unknown,
        E::Expired => StoreError::Expired,
        E::Busy { .. } => StoreError::Busy,
        E::Interrupted { .. } => StoreError::Interrupted,
        E::OtherOwner => StoreError::OtherScope,
        E::Unavailable { .. } | E::Full { .. } | E::BytesFull { .. } => {
            StoreError::Unavailable(e.to_string())
        }
    }
}

/// Takes `run_id` for a `wait` of `session`. Blocks on the durable store.
pub(crate) fn take_for_wait(
    env: &RunEnv,
    ctx: &DriveCtx,
    run_id: &str,
) -> Result<Taken, StoreError> {
    let inner = &ctx.host;
    let key = Arc::clone(&env.owner_key);
    let local = inner.store.take(run_id, &env.scope.scope, &key);
    let Some(durable) = &inner.durable else {
        return local.map(|run| rehome(env, run.snapshot, run.state));
    };
    match local {
        Ok(mut run) if durable.backend.exclusive() => {
            // Only this process uses the store: its live copy is current,
            // and the claim waits for the run's first new call.
            run.state.calls.sink().stop();
            let claim = run.generation.map(|generation| DeferredClaim {
                backend: Arc::clone(&durable.backend),
                run_id: run_id.to_owned(),
                owner_key: Arc::clone(&key),
                generation,
            });
            run.state.calls.defer_claim(claim);
            Ok(rehome(env, run.snapshot, run.state))
        }
        Ok(mut run) => match durable.backend.claim(run_id, &key, run.generation) {
            Ok(claimed) if Some(claimed.generation) == run.generation => {
                // This process's live copy is current: no decoding, and its
                // calls deliver through their channel.
                run.state.calls.sink().stop();
                Ok(rehome(env, run.snapshot, run.state))
            }
            Ok(claimed) => {
                // Another process resumed and stored the run since: the
                // live copy is stale. Its calls keep running and write
                // their results to the store.
                run.state.calls.detach_all();
                drop(run);
                restore(env, ctx, durable, run_id, claimed)
            }
            Err(e @ codemode_store::StoreError::Unavailable { .. }) => {
                // The run keeps waiting here; the caller may retry.
                let message = e.to_string();
                if inner.store.insert(run_id, true, run).is_err() {
                    tracing::warn!(run_id, "a run could not be put back after a store error");
                }
                Err(StoreError::Unavailable(message))
            }
            Err(e) => {
                run.state.calls.detach_all();
                drop(run);
                inner.store.finish(run_id);
                Err(from_store(e))
            }
        },
        Err(StoreError::Unknown) => {
            let claimed = durable
                .backend
                .claim(run_id, &key, None)
                .map_err(from_store)?;
            inner.store.insert_resuming(
                run_id,
                &env.scope.scope,
                env.owner.as_ref().map(|o| Arc::clone(&o.name)),
                Arc::clone(&key),
            );
            restore(env, ctx, durable, run_id, claimed)
        }
        Err(e) => Err(e),
    }
}

/// The run is driven by `session` now: its nested calls carry this
/// session's context (relays reach this client) and its aborts reach it.
fn rehome(env: &RunEnv, snapshot: Snapshot, mut state: RunState) -> Taken {
    state.scope = env.scope.scope.clone();
    state.context = Arc::clone(&env.context);
    Taken {
        snapshot,
        state,
        ready: VecDeque::new(),
    }
}

/// Rebuilds a run from its durable record.
fn restore(
    env: &RunEnv,
    ctx: &DriveCtx,
    durable: &Durable,
    run_id: &str,
    claimed: codemode_store::Claimed,
) -> Result<Taken, StoreError> {
    let inner = &ctx.host;
    let backend = &durable.backend;
    let refuse = |reason: String| {
        inner.store.finish(run_id);
        if let Err(e) = backend.remove(run_id) {
            tracing::warn!(run_id, error = %e, "an unrestorable run could not be removed from the run store");
        }
        StoreError::Restore(reason)
    };
    let (mut record, snapshot_bytes) = durable::decode(&claimed.record).map_err(refuse)?;
    let snapshot = Snapshot::from_bytes(
        snapshot_bytes,
        &inner.sandbox.build_id(),
        inner.config.max_snapshot_bytes as usize,
    )
    .map_err(|e| refuse(e.to_string()))?;
    let language = record
        .language
        .as_deref()
        .and_then(Language::parse)
        .unwrap_or(Language::JavaScript);
    let mut state = env.new_run(&record.parent_call_id, language);
    state.info = record.run_info();
    state.yields = std::mem::take(&mut record.yields);
    state.carried = record.carried().collect();
    state.handles = crate::handles::ResultHandles::import(
        std::mem::take(&mut record.handle_nonce),
        std::mem::take(&mut record.handles),
    );
    state.owner_key = Arc::from(record.owner_key.as_str());
    state.source_map = record
        .typescript
        .as_deref()
        .and_then(|source| codemode_transform::transform_typescript(source).ok())
        .map(Arc::new);
    state.namespaces = env.run_namespaces(&state).unwrap_or(None);
    let _ = state.run_tag.set(run_id.to_owned());
    let results: HashMap<u32, Vec<u8>> = claimed.results.into_iter().collect();
    let mut ready = VecDeque::new();
    for call in record.pending {
        let outcome = match results.get(&call.request_id) {
            Some(bytes) => Some(sink::decode_outcome(bytes)),
            None if backend.instance_alive(&call.instance) => {
                adopt(ctx, &mut state, backend, run_id, call.clone())
            }
            None => Some(Err(sink::interrupted_call(&call.tool_id))),
        };
        if let Some(outcome) = outcome {
            ready.push_back(settlement(
                ctx,
                &mut state,
                Finished {
                    request_id: call.request_id,
                    tool_id: call.tool_id,
                    outcome,
                },
            ));
        }
    }
    tracing::info!(
        run_id,
        store = %backend.describe(),
        generation = claimed.generation,
        settled = ready.len(),
        following = state.calls.in_flight(),
        "a waiting run was restored from the run store"
    );
    Ok(Taken {
        snapshot,
        state,
        ready,
    })
}

/// A call still running in another live process: the run follows it
/// through the store (its result, or `interrupted` when that process
/// dies). Returns its outcome if it is already there.
fn adopt(
    ctx: &DriveCtx,
    state: &mut RunState,
    backend: &Arc<dyn codemode_store::RunBackend>,
    run_id: &str,
    call: PendingCall,
) -> Option<Result<serde_json::Value, ToolCallError>> {
    let info = CallInfo {
        call_id: call.call_id.clone(),
        tool_id: call.tool_id.clone(),
        method: durable::static_method(&call.method),
        parent_call_id: state.parent_call_id.clone(),
        input_bytes: 0,
        gate: None,
        span: tracing::Span::none(),
    };
    let request_id = call.request_id;
    let backend = Arc::clone(backend);
    let run_id = run_id.to_owned();
    let future: ToolFuture = Box::pin(async move {
        /// Stops the blocking wait when the run drops the call.
        struct StopOnDrop(Arc<AtomicBool>);
        impl Drop for StopOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop = StopOnDrop(Arc::default());
        let cancelled = Arc::clone(&stop.0);
        let waited = tokio::task::spawn_blocking(move || {
            durable::await_remote(&backend, &run_id, &call, &cancelled)
        })
        .await;
        drop(stop);
        waited.unwrap_or_else(|_| {
            Err(ToolCallError::new(
                "following the call in the run store failed; it may or may not have taken effect",
            ))
        })
    });
    state.calls.start(&ctx.handle, request_id, info, future)
}
