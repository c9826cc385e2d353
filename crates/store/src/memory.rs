//! The in-memory store (`memory`): runs kept in this process only, ended
//! with it. The default when no durable store is set, and the runtime's
//! store in every embedding that sets none: it keeps the same contract as
//! the file and Redis stores (one claim at a time, generations, owners,
//! TTL, bounds, results that wake their waiters), so the runtime has one
//! path for every store.
//!
//! Another process can never read these runs, so the runtime resumes them
//! only from its live copy ([`RunBackend::outlives_process`] is false) and
//! stores no snapshot here. [`MemoryBackend::another_process`] gives a
//! second view of the same runs under another instance id, so tests can
//! play a second process (and its death: a view's claims are interrupted
//! once it is dropped).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::{
    ANY_OWNER, Bounds, Claimed, HeldCall, RunBackend, StoreError, StoreStats, new_instance_id,
};

/// How many expired run ids are remembered (so a late `wait` hears
/// "expired", not "unknown"), and for how long.
const TOMBSTONES: usize = 65_536;
const TOMBSTONE_AGE: Duration = Duration::from_secs(3600);

/// Runs kept in this process's memory.
pub struct MemoryBackend {
    shared: Arc<Shared>,
    instance: String,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a result is stored.
    arrived: Condvar,
}

#[derive(Default)]
struct State {
    runs: HashMap<String, Entry>,
    bytes: u64,
    /// Run ids that expired, oldest first.
    expired: VecDeque<(String, Instant)>,
    expired_ids: HashSet<String>,
    /// Instance ids of the views not yet dropped.
    alive: HashSet<String>,
}

struct Entry {
    owner: String,
    record: Vec<u8>,
    generation: u64,
    expires: Instant,
    /// The instance resuming it, if claimed.
    resuming: Option<String>,
    results: HashMap<u32, Vec<u8>>,
    /// Calls held for approval, undecided: request id → entry.
    held: HashMap<u32, Vec<u8>>,
    /// Decisions on held calls: request id → decision.
    decided: HashMap<u32, Vec<u8>>,
    /// Decided held calls started: request id → the instance.
    started: HashMap<u32, String>,
}

impl Entry {
    fn size(&self) -> u64 {
        self.record.len() as u64 + self.owner.len() as u64
    }
}

impl State {
    fn remove(&mut self, run_id: &str) -> Option<Entry> {
        let entry = self.runs.remove(run_id)?;
        self.bytes = self.bytes.saturating_sub(entry.size());
        Some(entry)
    }

    /// Drops runs past their TTL, remembering their ids.
    fn expire(&mut self, now: Instant) -> usize {
        let gone: Vec<String> = self
            .runs
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
            if self.expired_ids.insert(id.clone()) {
                self.expired.push_back((id.clone(), now));
            }
        }
        while let Some((id, when)) = self.expired.front()
            && (self.expired.len() > TOMBSTONES || now.duration_since(*when) > TOMBSTONE_AGE)
        {
            self.expired_ids.remove(id);
            self.expired.pop_front();
        }
        gone.len()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        MemoryBackend::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> MemoryBackend {
        MemoryBackend::view(Arc::default())
    }

    fn view(shared: Arc<Shared>) -> MemoryBackend {
        let instance = new_instance_id();
        lock(&shared).alive.insert(instance.clone());
        MemoryBackend { shared, instance }
    }

    /// Another view of the same runs with its own instance id: a second
    /// process, for tests. Dropping it is that process dying.
    pub fn another_process(&self) -> MemoryBackend {
        MemoryBackend::view(Arc::clone(&self.shared))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }

    /// Waits until `find` finds something (a result or a decision is
    /// stored), or `timeout` passes.
    fn wait_for(
        &self,
        timeout: Duration,
        find: impl Fn(&State) -> Option<Vec<u8>>,
    ) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if let Some(bytes) = find(&state) {
                return Some(bytes);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .shared
                .arrived
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for MemoryBackend {
    fn drop(&mut self) {
        self.lock().alive.remove(&self.instance);
    }
}

impl RunBackend for MemoryBackend {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn instance(&self) -> &str {
        &self.instance
    }

    fn outlives_process(&self) -> bool {
        false
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn put(
        &self,
        run_id: &str,
        owner: &str,
        record: &[u8],
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<u64, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.expire(now);
        let (before, previous) = state
            .runs
            .get(run_id)
            .map_or((None, 0), |e| (Some(e.size()), e.generation));
        if before.is_none() && state.runs.len() >= bounds.max_runs {
            return Err(StoreError::Full {
                limit: bounds.max_runs,
            });
        }
        let size = record.len() as u64 + owner.len() as u64;
        let after = state.bytes - before.unwrap_or(0) + size;
        if after > bounds.max_bytes {
            return Err(StoreError::BytesFull {
                limit: bounds.max_bytes,
                held: state.bytes,
                needed: size.saturating_sub(before.unwrap_or(0)),
            });
        }
        let (results, held, decided, started) = state
            .runs
            .remove(run_id)
            .map(|e| (e.results, e.held, e.decided, e.started))
            .unwrap_or_default();
        state.bytes = after;
        state.runs.insert(
            run_id.to_owned(),
            Entry {
                owner: owner.to_owned(),
                record: record.to_vec(),
                generation: previous + 1,
                expires: now + ttl,
                resuming: None,
                results,
                held,
                decided,
                started,
            },
        );
        Ok(previous + 1)
    }

    fn claim(&self, run_id: &str, owner: &str, known: Option<u64>) -> Result<Claimed, StoreError> {
        let mut state = self.lock();
        let now = Instant::now();
        let expired = state.runs.get(run_id).is_some_and(|e| e.expires <= now);
        if expired {
            state.expire(now);
        }
        let State {
            runs,
            expired_ids,
            alive,
            ..
        } = &mut *state;
        let Some(entry) = runs.get_mut(run_id) else {
            return Err(if expired_ids.contains(run_id) {
                StoreError::Expired
            } else {
                StoreError::Unknown
            });
        };
        if entry.owner != ANY_OWNER && entry.owner != owner {
            return Err(StoreError::OtherOwner);
        }
        if let Some(instance) = &entry.resuming {
            let instance = instance.clone();
            return Err(if alive.contains(&instance) {
                StoreError::Busy { instance }
            } else {
                StoreError::Interrupted { instance }
            });
        }
        entry.resuming = Some(self.instance.clone());
        Ok(Claimed {
            record: if known == Some(entry.generation) {
                Vec::new()
            } else {
                entry.record.clone()
            },
            generation: entry.generation,
            results: entry
                .results
                .iter()
                .map(|(id, bytes)| (*id, bytes.clone()))
                .collect(),
        })
    }

    fn remove(&self, run_id: &str) -> Result<(), StoreError> {
        self.lock().remove(run_id);
        Ok(())
    }

    fn put_result(&self, run_id: &str, request_id: u32, outcome: &[u8]) -> Result<(), StoreError> {
        let mut state = self.lock();
        // Only for a run the store still has: a late result of a finished
        // run must not linger.
        if let Some(entry) = state.runs.get_mut(run_id) {
            entry.results.insert(request_id, outcome.to_vec());
            self.shared.arrived.notify_all();
        }
        Ok(())
    }

    fn await_result(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.wait_for(timeout, |state| {
            state.runs.get(run_id)?.results.get(&request_id).cloned()
        }))
    }

    fn put_held(&self, run_id: &str, request_id: u32, entry: &[u8]) -> Result<(), StoreError> {
        if let Some(run) = self.lock().runs.get_mut(run_id)
            && !run.decided.contains_key(&request_id)
        {
            run.held.insert(request_id, entry.to_vec());
        }
        Ok(())
    }

    fn list_held(&self) -> Result<Vec<HeldCall>, StoreError> {
        let mut state = self.lock();
        state.expire(Instant::now());
        Ok(state
            .runs
            .iter()
            .flat_map(|(run_id, run)| {
                run.held.iter().map(|(request_id, entry)| HeldCall {
                    run_id: run_id.clone(),
                    request_id: *request_id,
                    entry: entry.clone(),
                })
            })
            .collect())
    }

    fn decide_held(
        &self,
        run_id: &str,
        request_id: u32,
        decision: &[u8],
    ) -> Result<bool, StoreError> {
        let mut state = self.lock();
        let Some(run) = state.runs.get_mut(run_id) else {
            return Ok(false);
        };
        if run.held.remove(&request_id).is_none() {
            return Ok(false);
        }
        run.decided.insert(request_id, decision.to_vec());
        self.shared.arrived.notify_all();
        Ok(true)
    }

    fn start_held(&self, run_id: &str, request_id: u32) -> Result<Option<String>, StoreError> {
        Ok(self.lock().runs.get_mut(run_id).map(|run| {
            run.started
                .entry(request_id)
                .or_insert_with(|| self.instance.clone())
                .clone()
        }))
    }

    fn await_decision(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.wait_for(timeout, |state| {
            state.runs.get(run_id)?.decided.get(&request_id).cloned()
        }))
    }

    fn instance_alive(&self, instance: &str) -> bool {
        self.lock().alive.contains(instance)
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        let state = self.lock();
        let resuming = state.runs.values().filter(|e| e.resuming.is_some()).count() as u64;
        Ok(StoreStats {
            waiting: state.runs.len() as u64 - resuming,
            resuming,
            bytes: state.bytes,
            results: state.runs.values().map(|e| e.results.len() as u64).sum(),
        })
    }

    fn expire(&self) -> Result<usize, StoreError> {
        Ok(self.lock().expire(Instant::now()))
    }
}
