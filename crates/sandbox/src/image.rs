//! The base image: the guest module with QuickJS's runtime, context and the
//! prelude already initialised (baked into its data segments, wizer-style),
//! compiled for this engine and cached on disk.
//!
//! Pre-initialisation runs with a fixed clock and fixed randomness, so the
//! baked image is byte-for-byte the same on every machine with the same guest
//! and prelude (engine prelude and guest API); its SHA-256 is the *build id* every snapshot carries.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Instance, Linker, Module, Store};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use crate::SandboxError;
use crate::abi;
use crate::host::HostState;

/// The shipped guest module (rebuilt by `cargo xtask build-guest`).
pub(crate) const GUEST_WASM: &[u8] = include_bytes!("../../../guest/dist/codemode-guest.wasm");

/// A compiled, pre-initialised module plus what snapshots are measured against.
pub(crate) struct BaseImage {
    pub(crate) module: Module,
    /// SHA-256 of the pre-initialised wasm.
    pub(crate) build_id: [u8; 32],
    /// The pristine linear memory of a fresh instance.
    pub(crate) memory: Vec<u8>,
    /// Whether the shadow stack sits below all data (so the part of it below
    /// the stack pointer is dead between calls and need not be snapshotted).
    pub(crate) stack_first: bool,
}

/// Where the compiled base image is cached when the caller names no folder:
/// `$CODEMODE_CACHE_DIR`, else `$XDG_CACHE_HOME/codemode`, else
/// `$HOME/.cache/codemode`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CODEMODE_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("codemode"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/codemode"))
}

fn engine_error(context: &str) -> impl Fn(wasmtime::Error) -> SandboxError + '_ {
    move |e| SandboxError::Engine(format!("{context}: {e:#}"))
}

/// `prelude` is the composed prelude (engine and guest API): a change to
/// either is a new image.
fn cache_key(engine: &Engine, prelude: &str) -> String {
    let mut compat = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let mut hasher = Sha256::new();
    hasher.update(GUEST_WASM);
    hasher.update(prelude.as_bytes());
    hasher.update(abi::ABI_VERSION.to_le_bytes());
    hasher.update(compat.finish().to_le_bytes());
    hex(&hasher.finalize()[..16])
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Loads the base image from the cache or builds (and caches) it.
pub(crate) fn load(
    engine: &Engine,
    linker: &Linker<HostState>,
    cache_dir: Option<&Path>,
    prelude: &str,
) -> Result<BaseImage, SandboxError> {
    let key = cache_key(engine, prelude);
    let cached = cache_dir.and_then(|dir| match load_cached(engine, dir, &key) {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "ignoring unusable module cache entry");
            None
        }
    });
    let (module, build_id) = match cached {
        Some(found) => found,
        None => {
            let started = std::time::Instant::now();
            let baked = bake(engine, linker, prelude)?;
            let build_id: [u8; 32] = Sha256::digest(&baked).into();
            let module =
                Module::new(engine, &baked).map_err(engine_error("compiling the base image"))?;
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "built the sandbox base image"
            );
            if let Some(dir) = cache_dir
                && let Err(e) = store_cached(&module, dir, &key, &build_id)
            {
                tracing::warn!(error = %e, "could not cache the compiled base image");
            }
            (module, build_id)
        }
    };
    abi::validate_exports(&module)?;
    let memory = pristine_memory(engine, linker, &module)?;
    Ok(BaseImage {
        module,
        build_id,
        memory,
        stack_first: stack_is_first(GUEST_WASM),
    })
}

fn load_cached(
    engine: &Engine,
    dir: &Path,
    key: &str,
) -> Result<Option<(Module, [u8; 32])>, SandboxError> {
    let artifact = dir.join(format!("base-{key}.cwasm"));
    let id_file = dir.join(format!("base-{key}.id"));
    if !artifact.exists() || !id_file.exists() {
        return Ok(None);
    }
    let cache_err = |path: &Path, message: String| SandboxError::Cache {
        path: path.to_owned(),
        message,
    };
    let id_hex =
        std::fs::read_to_string(&id_file).map_err(|e| cache_err(&id_file, e.to_string()))?;
    let build_id =
        parse_hex32(id_hex.trim()).ok_or_else(|| cache_err(&id_file, "not a build id".into()))?;
    // SAFETY: the artifact was written by `store_cached` into the user's own
    // cache folder; wasmtime also checks that it matches this engine's
    // version and configuration. A folder writable by others must not be
    // used as the cache (documented on `SandboxConfig::cache_dir`).
    let module = unsafe { Module::deserialize_file(engine, &artifact) }
        .map_err(|e| cache_err(&artifact, format!("{e:#}")))?;
    Ok(Some((module, build_id)))
}

fn store_cached(
    module: &Module,
    dir: &Path,
    key: &str,
    build_id: &[u8; 32],
) -> Result<(), SandboxError> {
    let cache_err = |message: String| SandboxError::Cache {
        path: dir.to_owned(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| cache_err(e.to_string()))?;
    let bytes = module
        .serialize()
        .map_err(|e| cache_err(format!("{e:#}")))?;
    // Write-then-rename so concurrent processes never see half a file.
    let unique = format!("{}-{}", std::process::id(), crate::random_u64());
    for (name, data) in [
        (format!("base-{key}.cwasm"), bytes),
        (format!("base-{key}.id"), hex(build_id).into_bytes()),
    ] {
        let tmp = dir.join(format!(".{name}.{unique}.tmp"));
        std::fs::write(&tmp, &data).map_err(|e| cache_err(e.to_string()))?;
        std::fs::rename(&tmp, dir.join(&name)).map_err(|e| cache_err(e.to_string()))?;
    }
    Ok(())
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

struct WizerState<'a> {
    store: &'a mut Store<HostState>,
    instance: Instance,
}

impl InstanceState for WizerState<'_> {
    async fn global_get(&mut self, name: &str, _type_hint: ValType) -> SnapshotVal {
        match self
            .instance
            .get_global(&mut *self.store, name)
            .map(|g| g.get(&mut *self.store))
        {
            Some(wasmtime::Val::I32(x)) => SnapshotVal::I32(x),
            Some(wasmtime::Val::I64(x)) => SnapshotVal::I64(x),
            Some(wasmtime::Val::F32(x)) => SnapshotVal::F32(x),
            Some(wasmtime::Val::F64(x)) => SnapshotVal::F64(x),
            Some(wasmtime::Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // The guest defines only numeric globals; `instrument` exported
            // them all, so this is unreachable for a valid guest.
            _ => SnapshotVal::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => contents(&[]),
        }
    }
}

/// Runs the guest's initialisation (reactor `_initialize`, then `cm_init`
/// with the prelude) and bakes the resulting state into a new module.
fn bake(
    engine: &Engine,
    linker: &Linker<HostState>,
    prelude: &str,
) -> Result<Vec<u8>, SandboxError> {
    let mut wizer = Wizer::new();
    wizer.init_func("cm_init");
    let (cx, instrumented) = wizer
        .instrument(GUEST_WASM)
        .map_err(engine_error("instrumenting the guest"))?;
    let module = Module::new(engine, &instrumented).map_err(engine_error("compiling the guest"))?;
    abi::validate_exports(&module)?;
    let mut store = Store::new(engine, HostState::new(true));
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = linker
        .instantiate(&mut store, &module)
        .map_err(engine_error("instantiating the guest"))?;
    let memory = instance
        .get_memory(&mut store, "memory")
        .ok_or_else(|| SandboxError::Abi("no memory export".into()))?;
    store.data_mut().memory = Some(memory);
    if let Ok(init) = instance.get_typed_func::<(), ()>(&mut store, "_initialize") {
        init.call(&mut store, ())
            .map_err(engine_error("running _initialize"))?;
    }
    let version = instance
        .get_typed_func::<(), i32>(&mut store, "cm_abi_version")
        .and_then(|f| f.call(&mut store, ()))
        .map_err(engine_error("reading the ABI version"))?;
    if version != abi::ABI_VERSION {
        return Err(SandboxError::Abi(format!(
            "guest speaks ABI {version}, host speaks {}",
            abi::ABI_VERSION
        )));
    }
    let alloc = instance
        .get_typed_func::<u32, u32>(&mut store, "cm_alloc")
        .map_err(engine_error("cm_alloc"))?;
    let init = instance
        .get_typed_func::<(u32, u32), i32>(&mut store, "cm_init")
        .map_err(engine_error("cm_init"))?;
    let len = u32::try_from(prelude.len())
        .map_err(|_| SandboxError::Abi("the prelude is larger than 4 GiB".into()))?;
    let ptr = alloc
        .call(&mut store, len)
        .map_err(engine_error("allocating the prelude"))?;
    memory
        .write(&mut store, ptr as usize, prelude.as_bytes())
        .map_err(|e| SandboxError::Engine(format!("writing the prelude: {e}")))?;
    let status = init
        .call(&mut store, (ptr, len))
        .map_err(engine_error("running cm_init"))?;
    if status != abi::STATUS_COMPLETED {
        let message = crate::vm::read_out(&mut store, &instance).unwrap_or_default();
        return Err(SandboxError::Abi(format!(
            "the guest could not initialise (status {status}): {}",
            String::from_utf8_lossy(&message)
        )));
    }
    let free = instance
        .get_typed_func::<(u32, u32), ()>(&mut store, "cm_free")
        .map_err(engine_error("cm_free"))?;
    free.call(&mut store, (ptr, len))
        .map_err(engine_error("freeing the prelude"))?;
    let mut state = WizerState {
        store: &mut store,
        instance,
    };
    pollster::block_on(wizer.snapshot(&cx, &mut state))
        .map_err(engine_error("baking the base image"))
}

/// Reads the memory of a fresh instance: what every snapshot is diffed against.
fn pristine_memory(
    engine: &Engine,
    linker: &Linker<HostState>,
    module: &Module,
) -> Result<Vec<u8>, SandboxError> {
    let mut store = Store::new(engine, HostState::new(true));
    let instance = linker
        .instantiate(&mut store, module)
        .map_err(engine_error("instantiating the base image"))?;
    let memory = instance
        .get_memory(&mut store, "memory")
        .ok_or_else(|| SandboxError::Abi("no memory export".into()))?;
    Ok(memory.data(&store).to_vec())
}

/// True when the raw guest's shadow stack starts at the bottom of memory
/// (linked with `--stack-first`): its initial stack pointer is at or below
/// every data segment.
pub(crate) fn stack_is_first(wasm: &[u8]) -> bool {
    use wasmparser::{DataKind, Operator, Payload};
    let mut globals: Vec<Option<i64>> = Vec::new();
    let mut sp_index = None;
    let mut min_data = i64::MAX;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { return false };
        match payload {
            Payload::GlobalSection(reader) => {
                for global in reader {
                    let Ok(global) = global else { return false };
                    let mut ops = global.init_expr.get_operators_reader();
                    globals.push(match ops.read() {
                        Ok(Operator::I32Const { value }) => Some(i64::from(value as u32)),
                        _ => None,
                    });
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader.into_iter().flatten() {
                    if export.name == abi::STACK_POINTER
                        && export.kind == wasmparser::ExternalKind::Global
                    {
                        sp_index = Some(export.index as usize);
                    }
                }
            }
            Payload::DataSection(reader) => {
                for data in reader.into_iter().flatten() {
                    if let DataKind::Active { offset_expr, .. } = data.kind
                        && let Ok(Operator::I32Const { value }) =
                            offset_expr.get_operators_reader().read()
                    {
                        min_data = min_data.min(i64::from(value as u32));
                    }
                }
            }
            _ => {}
        }
    }
    match sp_index.and_then(|i| globals.get(i).copied().flatten()) {
        Some(sp) => sp <= min_data,
        None => false,
    }
}
