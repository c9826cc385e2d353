//! The live runs: the copy of each waiting run this process holds (its
//! snapshot, and the state no store can hold: calls in flight, their
//! channels, the session's hooks), beside the run store
//! ([`codemode_store::RunBackend`]) that is the one authority on which
//! runs exist, who may resume them, and which copy is current.
//!
//! A `wait` claims the run in the store first, then takes the live copy
//! here if it is the current generation ([`LiveRuns::begin_resume`]).
//! What is process-local is kept here: the bounds per scope (session) and
//! per owner and on the memory waiting runs hold, and aborts (a run
//! aborted while it is resumed cannot wait again). Dropping a live run
//! cancels its in-flight nested calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use codemode_sandbox::{PackedSnapshot, Snapshot};
use codemode_store::RunBackend;

use crate::executor::Scope;
use crate::run::state::RunState;

/// How long a run waits before its live snapshot is packed: runs resumed
/// at once (a client that waits in a loop) keep the raw pages and resume
/// without decompressing; a run that waits for a model's next turn holds
/// about a third of the memory, and its `wait` pays ~0.14 ms to unpack.
pub(crate) const PACK_AFTER: Duration = Duration::from_secs(1);

/// A waiting run's VM memory as this process holds it: as suspended, then
/// packed once it has waited [`PACK_AFTER`] ([`LiveRuns::pack_idle`]).
pub(crate) enum LiveSnapshot {
    /// Shared only while [`LiveRuns::pack_idle`] compresses it.
    Raw(Arc<Snapshot>),
    Packed(PackedSnapshot),
}

impl LiveSnapshot {
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            LiveSnapshot::Raw(s) => s.size_bytes(),
            LiveSnapshot::Packed(p) => p.size_bytes(),
        }
    }

    /// The snapshot to restore.
    pub(crate) fn into_snapshot(self) -> Result<Snapshot, String> {
        match self {
            LiveSnapshot::Raw(s) => Ok(Arc::try_unwrap(s).unwrap_or_else(|s| (*s).clone())),
            LiveSnapshot::Packed(p) => p.unpack().map_err(|e| e.to_string()),
        }
    }
}

/// A run waiting for `wait`, as this process holds it.
pub(crate) struct LiveRun {
    pub(crate) snapshot: LiveSnapshot,
    pub(crate) state: RunState,
    /// When it began to wait (this time).
    pub(crate) since: Instant,
    pub(crate) expires: Instant,
    /// The run's generation in the store: this live copy is current only
    /// while the store says the same.
    pub(crate) generation: u64,
}

impl LiveRun {
    /// Memory the waiting run holds: its snapshot and the large results
    /// it keeps as handles (both count against the store's byte bounds).
    pub(crate) fn held_bytes(&self) -> usize {
        self.snapshot.size_bytes() + self.state.handles.bytes()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreError {
    Unknown,
    Expired,
    Busy,
    Aborted,
    OtherScope,
    /// The process that was resuming the run died mid-way (durable store).
    Interrupted,
    /// The durable store cannot be reached.
    Unavailable(String),
    /// The durable record cannot be restored (another guest build, damage).
    Restore(String),
    /// Not in the store, which lost its data since this process opened it
    /// (the named store).
    Lost(String),
    ScopeFull {
        limit: usize,
    },
    /// The run's owner (over all its sessions) holds its maximum.
    OwnerFull {
        owner: Arc<str>,
        limit: usize,
    },
    /// Snapshot bytes held by the process would pass `maxStoreBytes`.
    BytesFull {
        limit: usize,
        held: usize,
        needed: usize,
    },
    /// Snapshot bytes held by this scope would pass its share.
    ScopeBytesFull {
        limit: usize,
        held: usize,
        needed: usize,
    },
}

impl StoreError {
    pub(crate) fn message(&self, run_id: &str) -> String {
        match self {
            StoreError::Unknown => format!(
                "no waiting run has runId \"{run_id}\" (it finished, failed, or never existed); start a new exec"
            ),
            StoreError::Expired => format!(
                "the run \"{run_id}\" waited longer than snapshotTtlSeconds and was discarded; start a new exec"
            ),
            StoreError::Busy => {
                format!("the run \"{run_id}\" is already being resumed by another wait call")
            }
            StoreError::Aborted => format!(
                "the run \"{run_id}\" was aborted (its run or session was cancelled); its nested calls were cancelled and it cannot be resumed"
            ),
            StoreError::OtherScope => format!(
                "the run \"{run_id}\" belongs to another owner (agent, session, agent run or principal); wait can only resume your own runs"
            ),
            StoreError::Interrupted => format!(
                "the run \"{run_id}\" was being resumed by a process that stopped before it finished; what it did since is unknown, so the run cannot be resumed safely; start a new exec"
            ),
            StoreError::Lost(store) => format!(
                "no waiting run has runId \"{run_id}\": the run store ({store}) lost its data since this gateway started (a Redis restart without persistence, or a flush), which removed every run stored before; start a new exec"
            ),
            StoreError::Restore(reason) => {
                format!("the run \"{run_id}\" cannot be restored: {reason}; start a new exec")
            }
            StoreError::Unavailable(reason) => format!(
                "{reason}; the run \"{run_id}\" is not lost: call wait again when the store is back"
            ),
            StoreError::ScopeFull { limit } => format!(
                "this session already holds {limit} suspended runs (the limit per session); resume them with wait or let them expire before starting more"
            ),
            StoreError::OwnerFull { owner, limit } => format!(
                "`{owner}` already holds {limit} suspended runs over all its sessions (its limit); resume them with wait or let them expire before starting more"
            ),
            StoreError::BytesFull {
                limit,
                held,
                needed,
            } => format!(
                "the process's suspended runs hold {held} snapshot bytes and this one needs {needed} more, past maxStoreBytes ({limit}); finish or abandon waiting runs, or keep less data alive across awaits"
            ),
            StoreError::ScopeBytesFull {
                limit,
                held,
                needed,
            } => format!(
                "this session's suspended runs hold {held} snapshot bytes and this one needs {needed} more, past the per-session share ({limit} bytes); resume them with wait, or keep less data alive across awaits"
            ),
        }
    }
}

enum Slot {
    Waiting(Box<LiveRun>),
    /// Taken by a `wait` that is running now.
    Resuming {
        scope: Scope,
        owner: Option<Arc<str>>,
        /// Who may resume it ([`RunState::owner_key`]).
        owner_key: Arc<str>,
        abort: bool,
    },
    /// So a later `wait` hears "aborted", not "unknown".
    Aborted,
    /// So a later `wait` hears "expired" even when the store cannot be
    /// reached.
    Expired,
}

impl Slot {
    fn resuming(scope: &Scope, owner: Option<Arc<str>>, owner_key: Arc<str>) -> Slot {
        Slot::Resuming {
            scope: scope.clone(),
            owner,
            owner_key,
            abort: false,
        }
    }

    fn is_live(&self) -> bool {
        matches!(self, Slot::Waiting(_) | Slot::Resuming { .. })
    }
}

/// The bounds on live runs (the store bounds their number).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveLimits {
    /// Bounds the tombstones.
    pub(crate) max_runs: usize,
    /// So one session (one MCP client, one agent run) cannot take every
    /// slot of the process from the others.
    pub(crate) max_runs_per_scope: usize,
    /// Snapshot bytes held by all waiting runs.
    pub(crate) max_bytes: usize,
    /// Snapshot bytes held by one scope's waiting runs.
    pub(crate) max_bytes_per_scope: usize,
}

pub(crate) struct LiveRuns {
    runs: Mutex<HashMap<String, Slot>>,
    limits: LiveLimits,
    /// The store: aborted and discarded runs are removed there too.
    backend: Arc<dyn RunBackend>,
}

/// A fresh run id: `run_` and 128 random bits.
pub(crate) fn new_run_id() -> String {
    format!(
        "run_{:016x}{:016x}",
        codemode_sandbox::random_u64(),
        codemode_sandbox::random_u64()
    )
}

impl LiveRuns {
    pub(crate) fn new(limits: LiveLimits, backend: Arc<dyn RunBackend>) -> LiveRuns {
        LiveRuns {
            runs: Mutex::new(HashMap::new()),
            limits,
            backend,
        }
    }

    /// Removes aborted or discarded runs from the store (outside the lock).
    fn forget_stored(&self, ids: &[String]) {
        for id in ids {
            if let Err(e) = self.backend.remove(id) {
                tracing::warn!(run_id = %id, error = %e, "an aborted run could not be removed from the run store; it expires with its TTL");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Live runs (waiting or being resumed).
    pub(crate) fn len(&self) -> usize {
        let (live, expired) = {
            let mut runs = self.lock();
            let expired = self.sweep(&mut runs, Instant::now());
            (runs.values().filter(|s| s.is_live()).count(), expired)
        };
        drop(expired);
        live
    }

    /// Drops every run whose TTL has passed, cancelling its in-flight calls
    /// and releasing its snapshot now (the runtime's reaper calls this on a
    /// timer, so expiry does not wait for the next store access). Returns
    /// how many runs it discarded.
    pub(crate) fn expire_now(&self) -> usize {
        let expired = self.sweep(&mut self.lock(), Instant::now());
        let count = expired.len();
        // Dropped outside the lock: cancelling calls takes other locks.
        drop(expired);
        count
    }

    /// Packs the snapshots of runs that have waited `idle` or longer
    /// (compressed outside the lock; a run resumed meanwhile keeps its raw
    /// copy). Returns how many it packed. The reaper calls this.
    pub(crate) fn pack_idle(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let candidates: Vec<(String, Arc<Snapshot>)> = self
            .lock()
            .iter()
            .filter_map(|(id, slot)| match slot {
                Slot::Waiting(run) if now.duration_since(run.since) >= idle => {
                    match &run.snapshot {
                        LiveSnapshot::Raw(raw) => Some((id.clone(), Arc::clone(raw))),
                        LiveSnapshot::Packed(_) => None,
                    }
                }
                _ => None,
            })
            .collect();
        let mut packed_runs = 0;
        for (id, raw) in candidates {
            let packed = raw.pack();
            let mut runs = self.lock();
            if let Some(Slot::Waiting(run)) = runs.get_mut(&id)
                && let LiveSnapshot::Raw(current) = &run.snapshot
                && Arc::ptr_eq(current, &raw)
            {
                run.snapshot = LiveSnapshot::Packed(packed);
                packed_runs += 1;
            }
            drop(runs);
            // The last reference to the raw pages, dropped outside the lock.
            drop(raw);
        }
        packed_runs
    }

    /// Snapshot bytes held in memory by waiting runs.
    pub(crate) fn bytes_held(&self) -> usize {
        self.lock()
            .values()
            .map(|s| match s {
                Slot::Waiting(run) => run.held_bytes(),
                _ => 0,
            })
            .sum()
    }

    /// Drops expired snapshots (cancelling their calls); the store says
    /// "expired" to a late `wait` (its copy expired first: it was stored
    /// before this one).
    #[must_use = "expired runs must be dropped outside the store's lock"]
    fn sweep(&self, runs: &mut HashMap<String, Slot>, now: Instant) -> Vec<LiveRun> {
        // With a store other processes share, this copy may be stale: the
        // run may be resumed elsewhere and follow its calls through the
        // store. They are left to finish (and write their results) rather
        // than cancelled; the store's own TTL ends the run.
        let shared = !self.backend.exclusive();
        let mut expired = Vec::new();
        for (id, slot) in runs.iter_mut() {
            if let Slot::Waiting(run) = slot
                && run.expires <= now
            {
                // The documented `discarded` snapshot event.
                tracing::info!(
                    event = "discarded",
                    run_id = %id,
                    bytes = run.snapshot.size_bytes(),
                    in_flight_calls = run.state.calls.in_flight(),
                    calls = if shared { "left to finish" } else { "cancelled" },
                    "suspended run expired (snapshotTtlSeconds): snapshot discarded"
                );
                if let Slot::Waiting(mut run) = std::mem::replace(slot, Slot::Expired) {
                    if shared {
                        run.state.calls.detach_all();
                    }
                    expired.push(*run);
                }
            }
        }
        expired
    }

    fn held_bytes<'a>(slots: impl Iterator<Item = &'a Slot>, scope: Option<&Scope>) -> usize {
        slots
            .filter_map(|slot| match slot {
                Slot::Waiting(run) if scope.is_none_or(|s| run.state.scope == *s) => {
                    Some(run.held_bytes())
                }
                _ => None,
            })
            .sum()
    }

    /// Holds the live copy of a run just stored under `run_id` (a run
    /// waiting again keeps its id).
    ///
    /// # Errors
    /// Past a bound of its scope, its owner or the process's memory;
    /// `Aborted` when the run was aborted while it was being resumed.
    pub(crate) fn insert(
        &self,
        run_id: &str,
        resumed: bool,
        run: LiveRun,
    ) -> Result<String, StoreError> {
        let mut runs = self.lock();
        let expired = self.sweep(&mut runs, Instant::now());
        let limits = self.limits;
        let needed = run.held_bytes();
        let scope = run.state.scope.clone();
        let held = LiveRuns::held_bytes(runs.values(), None);
        if held.saturating_add(needed) > limits.max_bytes {
            drop(runs);
            drop(expired);
            return Err(StoreError::BytesFull {
                limit: limits.max_bytes,
                held,
                needed,
            });
        }
        let held_here = LiveRuns::held_bytes(runs.values(), Some(&scope));
        if held_here.saturating_add(needed) > limits.max_bytes_per_scope {
            drop(runs);
            drop(expired);
            return Err(StoreError::ScopeBytesFull {
                limit: limits.max_bytes_per_scope,
                held: held_here,
                needed,
            });
        }
        let result = self.insert_locked(&mut runs, run_id, resumed, run);
        drop(runs);
        drop(expired);
        result
    }

    fn insert_locked(
        &self,
        runs: &mut HashMap<String, Slot>,
        run_id: &str,
        resumed: bool,
        run: LiveRun,
    ) -> Result<String, StoreError> {
        if resumed {
            let id = run_id;
            match runs.get(id) {
                Some(Slot::Resuming { abort: false, .. }) => {
                    runs.insert(id.to_owned(), Slot::Waiting(Box::new(run)));
                    return Ok(id.to_owned());
                }
                Some(Slot::Resuming { abort: true, .. }) => {
                    runs.insert(id.to_owned(), Slot::Aborted);
                    return Err(StoreError::Aborted);
                }
                _ => {}
            }
        }
        let scope = &run.state.scope;
        let in_scope = runs
            .values()
            .filter(|slot| match slot {
                Slot::Waiting(other) => other.state.scope == *scope,
                Slot::Resuming { scope: other, .. } => other == scope,
                Slot::Aborted | Slot::Expired => false,
            })
            .count();
        if in_scope >= self.limits.max_runs_per_scope {
            return Err(StoreError::ScopeFull {
                limit: self.limits.max_runs_per_scope,
            });
        }
        if let Some(owner) = &run.state.owner {
            let owned = runs
                .values()
                .filter(|slot| match slot {
                    Slot::Waiting(other) => other
                        .state
                        .owner
                        .as_ref()
                        .is_some_and(|o| o.name == owner.name),
                    Slot::Resuming { owner: other, .. } => other.as_ref() == Some(&owner.name),
                    Slot::Aborted | Slot::Expired => false,
                })
                .count();
            if owned >= owner.max_suspended_runs {
                return Err(StoreError::OwnerFull {
                    owner: Arc::clone(&owner.name),
                    limit: owner.max_suspended_runs,
                });
            }
        }
        // Tombstones are bounded too.
        if runs.len() >= self.limits.max_runs.saturating_mul(4) {
            runs.retain(|_, slot| slot.is_live());
        }
        runs.insert(run_id.to_owned(), Slot::Waiting(Box::new(run)));
        Ok(run_id.to_owned())
    }

    /// Forgets a run that was taken for resuming and did not wait again.
    pub(crate) fn finish(&self, run_id: &str) {
        let mut runs = self.lock();
        match runs.get(run_id) {
            Some(Slot::Resuming { abort: false, .. }) => {
                runs.remove(run_id);
            }
            Some(Slot::Resuming { abort: true, .. }) => {
                runs.insert(run_id.to_owned(), Slot::Aborted);
            }
            _ => {}
        }
    }

    /// The store generation of the live copy of `run_id`, if this process
    /// holds one waiting.
    pub(crate) fn generation(&self, run_id: &str) -> Option<u64> {
        match self.lock().get(run_id) {
            Some(Slot::Waiting(run)) => Some(run.generation),
            _ => None,
        }
    }

    /// A `wait` of `scope` claimed `run_id` at `generation` in the store:
    /// the run is resumed here now. Returns the live copy if it is that
    /// generation; a stale one (another process resumed the run since) is
    /// dropped, its calls left to finish and write their results to the
    /// store.
    ///
    /// # Errors
    /// `Aborted` when the run was aborted here before the claim.
    pub(crate) fn begin_resume(
        &self,
        run_id: &str,
        scope: &Scope,
        owner: Option<Arc<str>>,
        owner_key: Arc<str>,
        generation: u64,
    ) -> Result<Option<LiveRun>, StoreError> {
        let mut runs = self.lock();
        if matches!(runs.get(run_id), Some(Slot::Aborted)) {
            return Err(StoreError::Aborted);
        }
        let old = runs.insert(run_id.to_owned(), Slot::resuming(scope, owner, owner_key));
        drop(runs);
        match old {
            Some(Slot::Waiting(run)) if run.generation == generation => Ok(Some(*run)),
            Some(Slot::Waiting(mut stale)) => {
                stale.state.calls.detach_all();
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// Why the store refused to hand `run_id` out, as the model hears it:
    /// a run aborted here is gone from the store, but "aborted" says why.
    pub(crate) fn refusal(&self, run_id: &str, e: codemode_store::StoreError) -> StoreError {
        use codemode_store::StoreError as E;
        let tombstone = match self.lock().get(run_id) {
            Some(Slot::Aborted) => Some(StoreError::Aborted),
            Some(Slot::Expired) => Some(StoreError::Expired),
            _ => None,
        };
        match e {
            E::Unknown | E::Unavailable { .. } if tombstone.is_some() => {
                tombstone.unwrap_or(StoreError::Unknown)
            }
            E::Unknown => StoreError::Unknown,
            E::Expired => StoreError::Expired,
            E::Busy { .. } => StoreError::Busy,
            E::Interrupted { .. } => StoreError::Interrupted,
            E::OtherOwner => StoreError::OtherScope,
            E::Unreadable { store, reason } => StoreError::Restore(format!(
                "its record in the run store ({store}) cannot be read ({reason})"
            )),
            E::Lost { store } => StoreError::Lost(store),
            E::Unavailable { .. } | E::Full { .. } | E::BytesFull { .. } => {
                StoreError::Unavailable(e.to_string())
            }
        }
    }

    /// Aborts one run of `scope`; true when it was waiting or resuming.
    pub(crate) fn abort_run(&self, run_id: &str, scope: &Scope) -> bool {
        let mut runs = self.lock();
        match runs.get_mut(run_id) {
            Some(Slot::Waiting(run)) if run.state.scope == *scope => {
                let old = runs.insert(run_id.to_owned(), Slot::Aborted);
                drop(runs);
                drop(old);
                self.forget_stored(&[run_id.to_owned()]);
                true
            }
            Some(Slot::Resuming {
                scope: s, abort, ..
            }) if s == scope => {
                *abort = true;
                true
            }
            _ => false,
        }
    }

    /// Aborts the runs matching `which`, leaving `aborted` tombstones (and
    /// removing them from the durable store).
    fn abort_where(&self, which: impl Fn(&Scope, &str) -> bool) {
        let mut runs = self.lock();
        let mut dropped = Vec::new();
        let mut ids = Vec::new();
        for (id, slot) in runs.iter_mut() {
            match slot {
                Slot::Waiting(run) if which(&run.state.scope, &run.state.owner_key) => {
                    ids.push(id.clone());
                    dropped.push(std::mem::replace(slot, Slot::Aborted));
                }
                Slot::Resuming {
                    scope,
                    abort,
                    owner_key,
                    ..
                } if which(scope, owner_key) => *abort = true,
                _ => {}
            }
        }
        drop(runs);
        // Dropped outside the lock: cancelling calls takes other locks.
        drop(dropped);
        self.forget_stored(&ids);
    }

    /// Aborts every run of `scope`.
    pub(crate) fn abort_scope(&self, scope: &Scope) {
        self.abort_where(|s, _| s == scope);
    }

    /// The scope's session is gone: aborts its runs that only it may
    /// resume; runs owned by a principal or by their id (durable, shared)
    /// keep waiting for a `wait` from another session.
    pub(crate) fn close_scope(&self, scope: &Scope, scope_key: &str) {
        self.abort_where(|s, key| s == scope && key == scope_key);
    }

    /// Aborts every run of every scope in `session` (id or key).
    pub(crate) fn abort_session(&self, session: &str) {
        self.abort_where(|s, _| s.in_session(session));
    }

    /// The agent run ended: its waiting runs are dropped without a trace,
    /// here and in the store (only its scope could resume them).
    pub(crate) fn discard_scope(&self, scope: &Scope) {
        let mut runs = self.lock();
        let key = scope.owner_key();
        let mut ids = Vec::new();
        let mut dropped = Vec::new();
        // Runs owned beyond the scope (a principal, their id) outlive it.
        runs.retain(|id, slot| match slot {
            Slot::Waiting(run) if run.state.scope == *scope && *run.state.owner_key == *key => {
                ids.push(id.clone());
                dropped.push(std::mem::replace(slot, Slot::Aborted));
                false
            }
            _ => true,
        });
        drop(runs);
        // Dropped outside the lock: cancelling calls takes other locks.
        drop(dropped);
        self.forget_stored(&ids);
    }

    /// Drops everything (shutdown).
    pub(crate) fn clear(&self) {
        let drained: Vec<Slot> = self.lock().drain().map(|(_, s)| s).collect();
        // Dropped outside the lock: cancelling calls takes other locks.
        drop(drained);
    }
}
