//! Runs untrusted JavaScript cells in QuickJS compiled to WebAssembly, hosted
//! by wasmtime, with hard limits and snapshots.
//!
//! ```no_run
//! use codemode_sandbox::{GuestApi, Limits, Sandbox, SandboxConfig, Settlement, Step};
//!
//! # fn main() -> Result<(), codemode_sandbox::SandboxError> {
//! // The embedder's guest API: the globals cells see besides `text`/`json`.
//! let guest_api = GuestApi::new(
//!     "(function (bridge) {
//!        bridge.defineGlobal('yield_control', (reason) =>
//!          bridge.hostRequest('yield', { reason: reason === undefined ? null : String(reason) }));
//!        return function install(context) {};
//!      })",
//! );
//! // Once per process: compiles (or loads from the cache) the base image.
//! let sandbox = Sandbox::new(SandboxConfig { guest_api, ..SandboxConfig::default() })?;
//! let limits = Limits::default();
//!
//! // A cell that waits on the host: it becomes a snapshot ...
//! let (mut vm, step) = sandbox.start("await yield_control('later'); return 40 + 2", &limits)?;
//! assert_eq!(step, Step::Pending);
//! let request = vm.take_new_requests().remove(0);
//! let snapshot = vm.suspend()?;
//! let bytes = snapshot.to_bytes(); // persist it anywhere
//!
//! // ... and continues in a brand-new VM.
//! let snapshot = codemode_sandbox::Snapshot::from_bytes(&bytes, &sandbox.build_id(), limits.max_snapshot_bytes)?;
//! let mut vm = sandbox.restore(&snapshot, &limits)?;
//! let step = vm.settle(request.id, Settlement::Resolve(serde_json::Value::Null))?;
//! assert_eq!(step, Step::Completed(serde_json::json!(42)));
//! # Ok(()) }
//! ```
//!
//! # Concepts
//! - [`Sandbox`]: one per process. Owns the wasmtime `Engine` (pooling
//!   allocator, copy-on-write memory images, epoch interruption), the base
//!   image and the epoch ticker thread. Cheap to clone and share.
//! - [`Vm`]: one live guest. Runs on the calling thread; call it from a
//!   blocking thread, never from an async executor's worker.
//! - [`Step`]: what a burst of guest execution ended in.
//! - [`Snapshot`]: a suspended VM as data.
//! - [`GuestApi`]: the embedder's globals and request methods, given as
//!   configuration. The sandbox owns only the engine (JSON adapter, output,
//!   host requests, limits, snapshots): it knows no request method, catalog
//!   or run-context schema.
//!
//! # Hostile guests
//! Every limit in [`Limits`] is enforced by the host: the deadline by epoch
//! interruption, memory by a store limiter (and QuickJS's allocator limit),
//! output and requests in the host imports. A guest cannot catch any of
//! them. A trap kills only that VM; the host never panics on guest input.
//! The guest imports nothing but the `codemode` calls and a handful of WASI
//! stubs that expose no files, network, environment or arguments.

#![deny(unsafe_op_in_unsafe_fn)]

mod abi;
mod error;
mod guest_json;
mod host;
mod image;
mod limits;
mod prelude;
mod priority;
mod snapshot;
mod ticker;
mod vm;

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use wasmtime::{Engine, InstancePre, Linker, Mutability};

pub use error::{SandboxError, SnapshotError};
pub use guest_json::{
    GuestJsonError, MAX_ERROR_BYTES, MAX_JSON_DEPTH, bounded_text, parse_guest_json,
};
pub use host::{HostRequest, OUTPUT_ITEM_COST, OutputItem};
pub use image::default_cache_dir;
pub use limits::{CancelFlag, Limits};
pub use prelude::{GuestApi, PRELUDE_GLOBALS};
pub use priority::{LEAVE_TASK_AFTER, burst, burst_checkpoint, burst_in_task};
pub use snapshot::{PackedSnapshot, Snapshot};
pub use vm::{Failure, FailureKind, Settlement, Step, Vm};

/// Process-wide settings of a [`Sandbox`].
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Folder for the compiled base image. `None` compiles in memory at every
    /// start (about 1–3 s). The folder must be writable only by this user:
    /// its artifacts are loaded as native code.
    pub cache_dir: Option<PathBuf>,
    /// VMs that may be alive at once (the pooling allocator's slots). Waiting
    /// runs are snapshots and hold no slot.
    pub max_live_vms: u32,
    /// The largest linear memory any VM may have (the pool's slot size).
    pub max_memory_bytes: usize,
    /// The globals cells see besides the engine's `text` and `json`, and
    /// the requests they send (see [`GuestApi`]). Baked into the base image.
    pub guest_api: GuestApi,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            cache_dir: default_cache_dir(),
            max_live_vms: 128,
            max_memory_bytes: (1 << 30) + (256 << 20),
            guest_api: GuestApi::default(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) pre: InstancePre<host::HostState>,
    pub(crate) base: image::BaseImage,
    pub(crate) ticker: ticker::Ticker,
    pub(crate) mutable_globals: Vec<String>,
    pub(crate) config: SandboxConfig,
}

/// The sandbox engine. See the [crate docs](crate).
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("build_id", &image::hex(&self.inner.base.build_id[..8]))
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Sandbox {
    /// Builds the engine and loads (or bakes and caches) the base image.
    ///
    /// # Errors
    /// [`SandboxError::Engine`] when wasmtime cannot be set up here,
    /// [`SandboxError::Abi`] when the shipped guest does not match this host.
    /// A broken cache is not an error: it is bypassed and logged.
    pub fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let engine = build_engine(&config)?;
        let mut linker = Linker::new(&engine);
        host::define_imports(&mut linker)?;
        let prelude = prelude::compose(&config.guest_api);
        let base = image::load(&engine, &linker, config.cache_dir.as_deref(), &prelude)?;
        let mutable_globals: Vec<String> = base
            .module
            .exports()
            .filter_map(|e| match e.ty() {
                wasmtime::ExternType::Global(g) if g.mutability() == Mutability::Var => {
                    Some(e.name().to_owned())
                }
                _ => None,
            })
            .collect();
        if !mutable_globals.iter().any(|g| g == abi::STACK_POINTER) {
            return Err(SandboxError::Abi(
                "the stack pointer is not an exported mutable global".into(),
            ));
        }
        let pre = linker.instantiate_pre(&base.module).map_err(|e| {
            SandboxError::Abi(format!(
                "the guest needs imports this host does not provide: {e:#}"
            ))
        })?;
        let ticker = ticker::Ticker::start(engine.clone())
            .map_err(|e| SandboxError::Engine(format!("starting the epoch thread: {e}")))?;
        Ok(Sandbox {
            inner: Arc::new(Inner {
                engine,
                pre,
                base,
                ticker,
                mutable_globals,
                config,
            }),
        })
    }

    /// Identifies the base image; snapshots carry it and are refused by a
    /// sandbox with another id.
    pub fn build_id(&self) -> [u8; 32] {
        self.inner.base.build_id
    }

    /// Size of the pristine base image's linear memory.
    pub fn base_memory_bytes(&self) -> usize {
        self.inner.base.memory.len()
    }

    /// Starts a fresh VM and runs `code` as a cell body (inside an async
    /// function: top-level `await` and `return` work) until it completes,
    /// fails, or waits on host requests.
    ///
    /// # Errors
    /// Host-side problems only ([`SandboxError::PoolExhausted`], ...); guest
    /// failures are [`Step::Failed`].
    pub fn start(&self, code: &str, limits: &Limits) -> Result<(Vm, Step), SandboxError> {
        self.start_with_context(code, "null", limits)
    }

    /// Like [`Sandbox::start`], with a run context: JSON text the guest
    /// API's `install(context)` receives (parsed) before the cell starts;
    /// [`Sandbox::start`] passes `null`. Its schema belongs to the guest
    /// API. It must be produced by the host (it is parsed inside the VM as
    /// trusted JSON).
    ///
    /// # Errors
    /// As [`Sandbox::start`].
    pub fn start_with_context(
        &self,
        code: &str,
        context: &str,
        limits: &Limits,
    ) -> Result<(Vm, Step), SandboxError> {
        let mut vm = Vm::instantiate(&self.inner, limits)?;
        let step = vm.run_cell(code, context)?;
        Ok((vm, step))
    }

    /// Restores a snapshot into a brand-new VM, ready for [`Vm::settle`].
    /// The deadline restarts from now.
    ///
    /// # Errors
    /// [`SnapshotError::Incompatible`] for a snapshot of another build;
    /// [`SnapshotError::TooLarge`] when its memory exceeds `limits`.
    pub fn restore(&self, snapshot: &Snapshot, limits: &Limits) -> Result<Vm, SandboxError> {
        Vm::restore(&self.inner, snapshot, limits)
    }
}

fn build_engine(config: &SandboxConfig) -> Result<Engine, SandboxError> {
    let mut pool = wasmtime::PoolingAllocationConfig::default();
    pool.total_memories(config.max_live_vms)
        .total_tables(config.max_live_vms)
        .total_core_instances(config.max_live_vms)
        .max_memory_size(config.max_memory_bytes)
        .max_unused_warm_slots(config.max_live_vms.min(16))
        // Reset reused slots by memset/pagemap instead of madvise: a fresh VM
        // then starts without page faults on the memory it touches first.
        .linear_memory_keep_resident(4 << 20)
        .table_keep_resident(1 << 20)
        .pagemap_scan(wasmtime::Enabled::Auto);
    let mut wasm = wasmtime::Config::new();
    wasm.epoch_interruption(true)
        .memory_init_cow(true)
        .max_wasm_stack(1 << 20)
        .parallel_compilation(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    if std::env::var_os("CODEMODE_PERF_MAP").is_some_and(|v| v == "1") {
        // For `perf`: name the guest's compiled functions in
        // /tmp/perf-<pid>.map (docs/operations.md, "Profiling").
        wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    Engine::new(&wasm).map_err(|e| SandboxError::Engine(format!("{e:#}")))
}

/// A random `u64` from the standard library's randomly keyed SipHash (keys
/// from the OS), mixed with a counter and the clock. Seeds `Math.random` and
/// `random_get`, and names runs; not meant for cryptographic keys.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish()
}

/// Nanoseconds on a monotonic clock (the guest's `CLOCK_MONOTONIC`).
pub(crate) fn monotonic_nanos() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}
