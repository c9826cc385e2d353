//! The run store: suspended runs held in process memory, bounded in count
//! and by TTL (bytes per run are bounded by the sandbox's snapshot limit).
//!
//! A run is *taken* out of the store while it is resumed, so two concurrent
//! `wait`s on one run cannot both restore it: the second sees it as busy.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use codemode_sandbox::Snapshot;

use crate::runtime::RunInfo;

/// A run waiting for `wait`.
pub(crate) struct SuspendedRun {
    pub(crate) snapshot: Snapshot,
    /// Request ids of `yield_control` calls, resolved on resume.
    pub(crate) yields: Vec<u32>,
    pub(crate) info: RunInfo,
    pub(crate) expires: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreError {
    Unknown,
    Expired,
    Busy,
    Full { limit: usize },
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
            StoreError::Full { limit } => format!(
                "too many suspended runs are held at once (limit {limit}); finish or abandon some before starting more"
            ),
        }
    }
}

enum Slot {
    Waiting(Box<SuspendedRun>),
    /// Taken by a `wait` that is running now.
    Resuming,
    Expired,
}

pub(crate) struct RunStore {
    runs: Mutex<HashMap<String, Slot>>,
    max_runs: usize,
}

impl RunStore {
    pub(crate) fn new(max_runs: usize) -> RunStore {
        RunStore {
            runs: Mutex::new(HashMap::new()),
            max_runs,
        }
    }

    pub(crate) fn len(&self) -> usize {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        runs.values()
            .filter(|s| !matches!(s, Slot::Expired))
            .count()
    }

    /// Drops expired snapshots, remembering their ids so that a late `wait`
    /// says "expired" rather than "unknown".
    fn sweep(runs: &mut HashMap<String, Slot>, now: Instant) {
        for slot in runs.values_mut() {
            if let Slot::Waiting(run) = slot
                && run.expires <= now
            {
                *slot = Slot::Expired;
            }
        }
    }

    /// Stores a suspended run under `run_id` (a run waiting again keeps its
    /// id) or a new id.
    pub(crate) fn insert(
        &self,
        run_id: Option<&str>,
        run: SuspendedRun,
    ) -> Result<String, StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        RunStore::sweep(&mut runs, Instant::now());
        if let Some(id) = run_id
            && matches!(runs.get(id), Some(Slot::Resuming))
        {
            runs.insert(id.to_owned(), Slot::Waiting(Box::new(run)));
            return Ok(id.to_owned());
        }
        let live = runs
            .values()
            .filter(|s| !matches!(s, Slot::Expired))
            .count();
        if live >= self.max_runs {
            return Err(StoreError::Full {
                limit: self.max_runs,
            });
        }
        // Tombstones are bounded too.
        if runs.len() >= self.max_runs.saturating_mul(4) {
            runs.retain(|_, slot| !matches!(slot, Slot::Expired));
        }
        let id = format!(
            "run_{:016x}{:016x}",
            codemode_sandbox::random_u64(),
            codemode_sandbox::random_u64()
        );
        runs.insert(id.clone(), Slot::Waiting(Box::new(run)));
        Ok(id)
    }

    /// Forgets a run that was taken for resuming and did not wait again.
    pub(crate) fn finish(&self, run_id: &str) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(runs.get(run_id), Some(Slot::Resuming)) {
            runs.remove(run_id);
        }
    }

    pub(crate) fn take(&self, run_id: &str) -> Result<SuspendedRun, StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        RunStore::sweep(&mut runs, Instant::now());
        match runs.get(run_id) {
            Some(Slot::Waiting(_)) => match runs.insert(run_id.to_owned(), Slot::Resuming) {
                Some(Slot::Waiting(run)) => Ok(*run),
                _ => Err(StoreError::Unknown),
            },
            Some(Slot::Resuming) => Err(StoreError::Busy),
            Some(Slot::Expired) => Err(StoreError::Expired),
            None => Err(StoreError::Unknown),
        }
    }
}
