//! Taking a waiting run for `wait`: claimed in the run store, then resumed
//! from this process's live copy when it is the current one, or rebuilt
//! from its record (after a restart, on another replica, or when another
//! process resumed it since).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use codemode_sandbox::{Settlement, Snapshot};

use crate::config::Language;
use crate::run::bridge::settlement;
use crate::run::calls::Finished;
use crate::run::env::{DriveCtx, RunEnv};
use crate::run::follow;
use crate::run::live::StoreError;
use crate::run::record;
use crate::run::sink::{self, DeferredClaim};
use crate::run::state::RunState;

/// A run taken for a `wait`.
pub(crate) struct Taken {
    pub(crate) snapshot: Snapshot,
    pub(crate) state: RunState,
    /// What the restore settled at once: results other processes stored,
    /// calls whose process died (`interrupted`).
    pub(crate) ready: VecDeque<(u32, Settlement)>,
}

/// Takes `run_id` for a `wait` of `session`. Blocks on the store.
pub(crate) fn take_for_wait(
    env: &RunEnv,
    ctx: &DriveCtx,
    run_id: &str,
) -> Result<Taken, StoreError> {
    let host = &ctx.host;
    let backend = &host.store.backend;
    let key = Arc::clone(&env.owner_key);
    // The store decides; a live copy of the generation it names is current.
    let claimed = backend
        .claim_deferred(run_id, &key, host.live.generation(run_id))
        .map_err(|e| host.live.refusal(run_id, e))?;
    let owner = env.owner.as_ref().map(|o| Arc::clone(&o.name));
    let live = host.live.begin_resume(
        run_id,
        &env.scope.scope,
        owner,
        Arc::clone(&key),
        claimed.generation,
    );
    let mut taken = match live {
        Ok(Some(run)) => match run.snapshot.into_snapshot() {
            Ok(snapshot) => rehome(env, snapshot, run.state),
            Err(reason) => {
                host.live.finish(run_id);
                forget(backend, run_id);
                return Err(StoreError::Restore(reason));
            }
        },
        Ok(None) => restore(env, ctx, run_id, claimed)?,
        Err(aborted) => {
            forget(backend, run_id);
            return Err(aborted);
        }
    };
    // Results reach the live run through its calls' channels again, and
    // the claim lasts before the run's first new nested call.
    taken.state.calls.sink().stop();
    taken.state.calls.defer_claim(Some(DeferredClaim {
        backend: Arc::clone(backend),
        run_id: run_id.to_owned(),
    }));
    Ok(taken)
}

fn forget(backend: &Arc<dyn codemode_store::RunBackend>, run_id: &str) {
    if let Err(e) = backend.remove(run_id) {
        tracing::warn!(run_id, error = %e, "a run could not be removed from the run store; it expires with its TTL");
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

/// Rebuilds a run from its record.
fn restore(
    env: &RunEnv,
    ctx: &DriveCtx,
    run_id: &str,
    claimed: codemode_store::Claimed,
) -> Result<Taken, StoreError> {
    let inner = &ctx.host;
    let backend = &inner.store.backend;
    let refuse = |reason: String| {
        inner.live.finish(run_id);
        forget(backend, run_id);
        StoreError::Restore(reason)
    };
    let (mut record, snapshot_bytes) = record::decode(&claimed.record).map_err(refuse)?;
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
    state.returned = record.returned.take();
    // It was in the store: whoever may resume it may do so elsewhere.
    state.durable = true;
    state.source_map = record
        .typescript
        .as_deref()
        .and_then(|source| codemode_transform::transform_typescript(source).ok())
        .map(Arc::new);
    state.namespaces = env.run_namespaces(&state).unwrap_or(None);
    let _ = state.run_tag.set(run_id.to_owned());
    let results: HashMap<u32, Vec<u8>> = claimed.results.into_iter().collect();
    let mut ready = VecDeque::new();
    for mut call in record.pending {
        let outcome = match (results.get(&call.request_id), call.held.take()) {
            (Some(bytes), _) => Some(sink::decode_outcome(bytes)),
            (None, Some(held)) => follow::held(ctx, &mut state, run_id, &call, held),
            (None, None) if backend.instance_alive(&call.instance) => {
                follow::adopt(ctx, &mut state, run_id, call.clone())
            }
            (None, None) => Some(Err(sink::interrupted_call(&call.tool_id))),
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
