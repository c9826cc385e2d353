//! Where suspended code-mode runs are kept: the [`RunBackend`] interface,
//! this process's memory ([`MemoryBackend`], the default) and the durable
//! backends, an embedded file ([`FileBackend`], redb) and Redis
//! ([`RedisBackend`]).
//!
//! A backend stores opaque bytes. It knows who owns a run (an owner key
//! the runtime makes), whether the run waits or is being resumed and by
//! which process, when it expires, and the results of its nested calls
//! that arrived while it waited. It knows nothing of snapshots, calls or
//! the result union: the runtime (`codemode-runtime`) encodes those.
//!
//! Every backend keeps the same contract, pinned by one test suite run
//! against each (`tests/contract.rs`):
//! - a run is claimed for resuming by at most one process at a time
//!   ([`RunBackend::claim`] is atomic); a claim by a process that died is
//!   reported as [`StoreError::Interrupted`], never handed out again (the
//!   resume may have started nested calls: replaying it could repeat them);
//! - bounds on the number of runs and their bytes hold over everything the
//!   backend holds ([`Bounds`]), and a run past its TTL is gone
//!   ([`StoreError::Expired`]);
//! - a result written with [`RunBackend::put_result`] wakes every process
//!   waiting for it in [`RunBackend::await_result`], without polling.

use std::time::Duration;

#[cfg(feature = "file")]
mod file;
mod memory;
#[cfg(any(feature = "file", feature = "redis"))]
mod notify;
#[cfg(feature = "redis")]
mod redis_backend;
#[doc(hidden)]
pub mod testing;

#[cfg(feature = "file")]
pub use file::FileBackend;
pub use memory::MemoryBackend;
#[cfg(feature = "redis")]
pub use redis_backend::RedisBackend;

/// The owner key that lets anyone holding the run id resume the run
/// (stateless requests without authentication: the id is the capability).
pub const ANY_OWNER: &str = "*";

/// Why the store refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No such run (it finished, was removed, or never existed).
    #[error("no such run")]
    Unknown,
    /// The run outlived its TTL.
    #[error("the run expired")]
    Expired,
    /// Another `wait` (in `instance`) is resuming the run now.
    #[error("the run is being resumed by {instance}")]
    Busy {
        /// The process resuming it.
        instance: String,
    },
    /// The process that was resuming the run died: what it did since
    /// is unknown, so the run cannot be resumed again.
    #[error("the process resuming the run ({instance}) stopped before it finished")]
    Interrupted {
        /// The process that died.
        instance: String,
    },
    /// The run belongs to another owner.
    #[error("the run belongs to another owner")]
    OtherOwner,
    /// The store holds `limit` runs.
    #[error("the store holds its maximum of {limit} runs")]
    Full {
        /// The bound.
        limit: usize,
    },
    /// The store's bytes would pass `limit`.
    #[error("the store holds {held} bytes and this run needs {needed} more, past {limit}")]
    BytesFull {
        /// The bound.
        limit: u64,
        /// Bytes held now.
        held: u64,
        /// Bytes this run adds.
        needed: u64,
    },
    /// The run is in the store but its record cannot be read (damaged,
    /// or written there by something else): it cannot be resumed.
    #[error("the run's record in the run store ({store}) cannot be read: {reason}")]
    Unreadable {
        /// Which store.
        store: String,
        /// What is wrong with the record.
        reason: String,
    },
    /// No such run, and the store lost what it held since this process
    /// opened it (a Redis restart without persistence, a flush): runs
    /// stored before that are gone.
    #[error("no such run, and the run store ({store}) lost its data since this process opened it")]
    Lost {
        /// Which store.
        store: String,
    },
    /// The store cannot be reached or failed (I/O, network, corruption).
    #[error("the run store ({store}) is unavailable: {reason}")]
    Unavailable {
        /// Which store (`file:PATH`, `redis://HOST:PORT/DB`).
        store: String,
        /// What went wrong.
        reason: String,
    },
}

/// Bounds that hold over everything one backend holds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Runs held at once (waiting or being resumed).
    pub max_runs: usize,
    /// Bytes of run records held at once.
    pub max_bytes: u64,
}

/// A run taken for resuming.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The record the runtime stored (empty when the claim named its
    /// generation as known).
    pub record: Vec<u8>,
    /// Bumped by every [`RunBackend::put`] of the run: a process holding
    /// the run's live state from generation `g` may use it only when the
    /// claim returns `g`.
    pub generation: u64,
    /// Nested-call results that arrived for the run, by request id.
    pub results: Vec<(u32, Vec<u8>)>,
}

/// A nested call held for a human's approval, as every process sharing
/// the store lists it ([`RunBackend::list_held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCall {
    /// The waiting run.
    pub run_id: String,
    /// The call's request id in that run.
    pub request_id: u32,
    /// What the runtime wrote ([`RunBackend::put_held`]): opaque here.
    pub entry: Vec<u8>,
}

/// What a store holds, for operators (`codemode status`, metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Runs waiting for `wait`.
    pub waiting: u64,
    /// Runs being resumed (by this or another process).
    pub resuming: u64,
    /// Bytes of run records.
    pub bytes: u64,
    /// Nested-call results held for waiting runs.
    pub results: u64,
}

/// A place suspended runs are kept. Methods block (file I/O, network):
/// call them off async executors' workers.
pub trait RunBackend: Send + Sync {
    /// Which store this is (`file:PATH`, `redis://HOST:PORT/DB`), for
    /// messages. Never carries a password.
    fn describe(&self) -> String;

    /// This process's instance id (names who runs a nested call or
    /// resumes a run).
    fn instance(&self) -> &str;

    /// Stores a waiting run under `run_id` (new, or suspended again after a
    /// claim), owned by `owner` ([`ANY_OWNER`]: whoever holds the id), for
    /// `ttl`. Returns the run's new generation.
    ///
    /// # Errors
    /// [`StoreError::Full`] / [`StoreError::BytesFull`] past `bounds`
    /// (a run stored again only counts its growth), or `Unavailable`.
    fn put(
        &self,
        run_id: &str,
        owner: &str,
        record: &[u8],
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<u64, StoreError>;

    /// Takes a waiting run for resuming by this process, with the results
    /// that arrived for it. Exactly one concurrent claim succeeds. When the
    /// run's generation is `known` (this process holds that live copy), the
    /// record is not sent back (`Claimed::record` is empty).
    ///
    /// # Errors
    /// `Unknown`, `Expired`, `OtherOwner` (nothing changes), `Busy` or
    /// `Interrupted` (claimed by a live or a dead process), `Unavailable`.
    fn claim(&self, run_id: &str, owner: &str, known: Option<u64>) -> Result<Claimed, StoreError>;

    /// Like [`RunBackend::claim`], but a store one process holds alone
    /// may keep the claim in this process's memory until
    /// [`RunBackend::confirm_claim`]: a crash before that leaves the run
    /// waiting, to be resumed again from its record. The runtime confirms
    /// before the resumed run's first new nested call, so such a replay
    /// repeats no effect, and a resume that only delivers results and
    /// ends costs no write that must reach the disk.
    ///
    /// # Errors
    /// As [`RunBackend::claim`].
    fn claim_deferred(
        &self,
        run_id: &str,
        owner: &str,
        known: Option<u64>,
    ) -> Result<Claimed, StoreError> {
        self.claim(run_id, owner, known)
    }

    /// Makes a [`RunBackend::claim_deferred`] claim as lasting as a
    /// [`RunBackend::claim`] (nothing to do where they are the same).
    ///
    /// # Errors
    /// `Unavailable`, or the claim was lost (the run is gone).
    fn confirm_claim(&self, run_id: &str) -> Result<(), StoreError> {
        let _ = run_id;
        Ok(())
    }

    /// Whether one process holds the store alone (the file store's lock,
    /// this process's memory): then no other process resumes its runs or
    /// follows their calls.
    fn exclusive(&self) -> bool {
        false
    }

    /// Whether the runs stored here outlive this process or reach other
    /// processes. When not ([`MemoryBackend`]), a run is only ever resumed
    /// from the live copy of the process that stored it, so the runtime
    /// stores neither its snapshot nor its calls' results here.
    fn outlives_process(&self) -> bool {
        true
    }

    /// Forgets a run and its results (it ended, or was aborted).
    ///
    /// # Errors
    /// `Unavailable`.
    fn remove(&self, run_id: &str) -> Result<(), StoreError>;

    /// Records the outcome of nested call `request_id` of `run_id` and
    /// wakes whoever waits for it (in any process).
    ///
    /// # Errors
    /// `Unavailable`.
    fn put_result(&self, run_id: &str, request_id: u32, outcome: &[u8]) -> Result<(), StoreError>;

    /// Blocks until the outcome of `request_id` of `run_id` is stored, or
    /// `timeout` passes (`Ok(None)`).
    ///
    /// # Errors
    /// `Unavailable`.
    fn await_result(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// Lists call `request_id` of the stored run `run_id` as held for
    /// approval (`entry`: what an operator is shown), so that every process
    /// sharing the store lists it and may decide it. Replaces the entry of
    /// the same call; a call decided already stays decided; nothing is
    /// listed for a run the store does not have. The entry leaves the
    /// store with its run.
    ///
    /// # Errors
    /// `Unavailable`.
    fn put_held(&self, run_id: &str, request_id: u32, entry: &[u8]) -> Result<(), StoreError>;

    /// The held calls not yet decided, of runs the store still has.
    ///
    /// # Errors
    /// `Unavailable`.
    fn list_held(&self) -> Result<Vec<HeldCall>, StoreError>;

    /// Decides a held call: the first decision wins, is kept with the run
    /// and wakes whoever waits in [`RunBackend::await_decision`] (in any
    /// process). `Ok(false)` when the call is not held undecided (decided
    /// already, never listed, or its run left the store).
    ///
    /// # Errors
    /// `Unavailable`.
    fn decide_held(
        &self,
        run_id: &str,
        request_id: u32,
        decision: &[u8],
    ) -> Result<bool, StoreError>;

    /// Marks decided held call `request_id` of `run_id` as started by this
    /// process, unless a process did already: a call runs at most once,
    /// and whoever resumes the run after a process died can tell whether
    /// that process may have started it. Returns the instance that started
    /// it (this one's when this call marked it); `None` when the store no
    /// longer has the run.
    ///
    /// # Errors
    /// `Unavailable`.
    fn start_held(&self, run_id: &str, request_id: u32) -> Result<Option<String>, StoreError>;

    /// Blocks until the decision on held call `request_id` of `run_id` is
    /// stored, or `timeout` passes (`Ok(None)`).
    ///
    /// # Errors
    /// `Unavailable`.
    fn await_decision(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether process `instance` is still running (its nested calls can
    /// still finish).
    fn instance_alive(&self, instance: &str) -> bool;

    /// What the store holds now.
    ///
    /// # Errors
    /// `Unavailable`.
    fn stats(&self) -> Result<StoreStats, StoreError>;

    /// Drops runs past their TTL; returns how many.
    ///
    /// # Errors
    /// `Unavailable`.
    fn expire(&self) -> Result<usize, StoreError>;
}

/// Opens the store a `store:` setting names: `memory`, `file:PATH` or
/// `redis://HOST:PORT/DB` (`rediss://` for TLS is not built in).
///
/// # Errors
/// A message naming the setting and what to write instead, or why the
/// store could not be opened.
pub fn open(spec: &str) -> Result<Box<dyn RunBackend>, StoreError> {
    if spec == "memory" {
        Ok(Box::new(MemoryBackend::new()))
    } else if let Some(_path) = spec.strip_prefix("file:") {
        #[cfg(feature = "file")]
        return Ok(Box::new(FileBackend::open(std::path::Path::new(_path))?));
        #[cfg(not(feature = "file"))]
        return Err(not_built(spec, "file"));
    } else if spec.starts_with("redis://") {
        #[cfg(feature = "redis")]
        return Ok(Box::new(RedisBackend::open(spec)?));
        #[cfg(not(feature = "redis"))]
        return Err(not_built(spec, "redis"));
    } else {
        Err(StoreError::Unavailable {
            store: spec.to_owned(),
            reason: "unknown store; write \"memory\", \"file:PATH\" or \"redis://HOST:PORT/DB\""
                .into(),
        })
    }
}

/// The store a setting names was left out of this build.
#[cfg(any(not(feature = "file"), not(feature = "redis")))]
fn not_built(spec: &str, feature: &str) -> StoreError {
    StoreError::Unavailable {
        store: spec.to_owned(),
        reason: format!(
            "this build has no {feature} store (built without the `{feature}` feature of codemode-store); use a build with it, or \"memory\""
        ),
    }
}

/// A fresh instance id: the process id and 64 random bits, so two
/// processes (even after a pid is reused) never share one.
pub(crate) fn new_instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{}-{:016x}", std::process::id(), h.finish())
}

/// Milliseconds since the Unix epoch (TTLs outlive processes, so they are
/// wall-clock times).
#[cfg(any(feature = "file", feature = "redis"))]
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
