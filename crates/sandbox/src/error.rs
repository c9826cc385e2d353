//! Typed errors of the sandbox.

use std::path::PathBuf;

/// Why the sandbox could not do what was asked.
///
/// These are *host-side* failures (the engine, the module, a snapshot). A cell
/// that throws, times out or runs out of memory is not an error here: it is a
/// [`crate::Step::Failed`].
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// wasmtime could not be configured or the module could not be compiled,
    /// pre-initialised or instantiated.
    #[error("the sandbox engine is unavailable: {0}")]
    Engine(String),
    /// The guest module does not speak the ABI this host expects.
    #[error("the guest module is incompatible with this host: {0}")]
    Abi(String),
    /// The on-disk module cache could not be used (it is then bypassed).
    #[error("module cache at {path}: {message}")]
    Cache {
        /// The cache file or folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Too many VMs are alive at once (the instance pool is full).
    #[error("too many sandboxes are running at once (limit {limit}); retry when a cell finishes")]
    PoolExhausted {
        /// The configured number of live VMs.
        limit: u32,
    },
    /// A snapshot was refused or could not be restored.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The VM was used after it failed (a trap leaves it unusable).
    #[error("this VM already failed and cannot run further work")]
    VmDead,
    /// The host asked to settle a request the VM is not waiting for.
    #[error("no pending host request with id {0}")]
    UnknownRequest(u32),
}

/// Why a snapshot could not be taken or restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The VM's state is larger than `maxSnapshotBytes` allows.
    #[error(
        "the suspended VM needs {size} bytes, more than maxSnapshotBytes ({limit}); keep less data alive across awaits"
    )]
    TooLarge {
        /// Bytes the snapshot would need.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The bytes were made by a different guest build or snapshot format.
    #[error("the snapshot was made by a different sandbox build ({0}) and cannot be restored here")]
    Incompatible(String),
    /// The bytes are damaged or not a snapshot at all.
    #[error("the snapshot is damaged: {0}")]
    Corrupt(String),
}
