//! The codemode sandbox guest: QuickJS (via `rquickjs`) compiled to
//! `wasm32-wasip1`, speaking a tiny, versioned ABI to the host.
//!
//! This crate is deliberately small and dumb. It evaluates JavaScript, runs
//! the job queue and moves strings across the boundary. Every policy decision
//! (limits, what a request means, what the catalog holds, whether output fits)
//! is taken by the host, which trusts nothing that comes out of here.
//!
//! # ABI (version [`ABI_VERSION`])
//! Exports (all integers are `i32`, strings are UTF-8 `(ptr, len)` pairs):
//! - `cm_abi_version() -> version`
//! - `cm_alloc(len) -> ptr`, `cm_free(ptr, len)`: buffers the host writes into.
//! - `cm_init(prelude_ptr, prelude_len) -> status`: creates the QuickJS runtime
//!   and context and evaluates the host's prelude. Run once, before the memory
//!   image is baked.
//! - `cm_run(code_ptr, code_len, context_ptr, context_len, memory_limit,
//!   seed_lo, seed_hi) -> status`: evaluates one cell body inside an async
//!   function and drains jobs. `context` is the host's JSON text for the
//!   prelude (the run's guest-visible catalog); the guest does not read it.
//! - `cm_settle(request_id, ok, payload_ptr, payload_len) -> status`: settles
//!   the promise of an earlier host request with a JSON payload and drains.
//! - `cm_out_ptr()`, `cm_out_len()`: the bytes of the last status' payload.
//!
//! Imports (module `codemode`):
//! - `request(ptr, len) -> id`: starts host work for a JSON request; the host
//!   answers later through `cm_settle`.
//! - `emit(kind, ptr, len)`: appends an output item (0 text, 1 JSON text). The
//!   host may trap here (output limit): the guest cannot catch that.
//!
//! Status codes: see the `STATUS_*` constants (from `codemode-abi`).

use std::cell::RefCell;

use rquickjs::function::Func;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rquickjs::allocator::{Allocator, RustAllocator};
use rquickjs::context::EvalOptions;
use rquickjs::{Context, Ctx, Function, Object, Persistent, Runtime, Value};

/// The ABI's constants have one owner, shared with the host: `codemode-abi`.
pub use codemode_abi::{
    ABI_VERSION, STATUS_ABI_ERROR, STATUS_COMPLETED, STATUS_FAILED, STATUS_OUT_OF_MEMORY,
    STATUS_PENDING,
};

#[link(wasm_import_module = "codemode")]
unsafe extern "C" {
    #[link_name = "request"]
    fn host_request(ptr: *const u8, len: usize) -> i32;
    #[link_name = "emit"]
    fn host_emit(kind: i32, ptr: *const u8, len: usize) -> i32;
}

struct Vm {
    runtime: Runtime,
    context: Context,
    /// The object the prelude returned: `run`, `settle`, `status`.
    hooks: Persistent<Object<'static>>,
    /// `hooks.status`, looked up once: it is called after every burst.
    status: Persistent<Function<'static>>,
}

/// QuickJS's allocator, held to the per-run heap limit. A refusal is
/// remembered so the host can report `memory_limit_exceeded` even when
/// QuickJS could not allocate the error object itself.
struct LimitedAllocator(RustAllocator);

static HEAP_USED: AtomicUsize = AtomicUsize::new(0);
static HEAP_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static HEAP_REFUSED: AtomicBool = AtomicBool::new(false);

fn heap_admits(extra: usize) -> bool {
    let ok = HEAP_USED.load(Ordering::Relaxed).saturating_add(extra)
        <= HEAP_LIMIT.load(Ordering::Relaxed);
    if !ok {
        HEAP_REFUSED.store(true, Ordering::Relaxed);
    }
    ok
}

// SAFETY: delegates to `RustAllocator` and only adds bookkeeping.
unsafe impl Allocator for LimitedAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !heap_admits(size) {
            return std::ptr::null_mut();
        }
        let ptr = self.0.alloc(size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just allocated by `RustAllocator`.
            HEAP_USED.fetch_add(
                unsafe { RustAllocator::usable_size(ptr) },
                Ordering::Relaxed,
            );
        }
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        if !heap_admits(count.saturating_mul(size)) {
            return std::ptr::null_mut();
        }
        let ptr = self.0.calloc(count, size);
        if !ptr.is_null() {
            // SAFETY: as in `alloc`.
            HEAP_USED.fetch_add(
                unsafe { RustAllocator::usable_size(ptr) },
                Ordering::Relaxed,
            );
        }
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if !ptr.is_null() {
            // SAFETY: the caller passes a pointer from this allocator.
            let size = unsafe { RustAllocator::usable_size(ptr) };
            HEAP_USED.fetch_sub(
                size.min(HEAP_USED.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        // SAFETY: forwarded contract.
        unsafe { self.0.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a pointer from this allocator.
        let old = if ptr.is_null() {
            0
        } else {
            unsafe { RustAllocator::usable_size(ptr) }
        };
        if new_size > old && !heap_admits(new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded contract.
        let new = unsafe { self.0.realloc(ptr, new_size) };
        if !new.is_null() {
            // SAFETY: `new` was just returned by `RustAllocator`.
            let size = unsafe { RustAllocator::usable_size(new) };
            let used = HEAP_USED.load(Ordering::Relaxed);
            HEAP_USED.store(
                used.saturating_sub(old).saturating_add(size),
                Ordering::Relaxed,
            );
        }
        new
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: forwarded contract.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
    static OUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static RNG: RefCell<u64> = const { RefCell::new(0x9e37_79b9_7f4a_7c15) };
}

fn set_out(bytes: &[u8]) {
    OUT.with(|out| {
        let mut out = out.borrow_mut();
        out.clear();
        out.extend_from_slice(bytes);
    });
}

fn abi_error(message: &str) -> i32 {
    set_out(message.as_bytes());
    STATUS_ABI_ERROR
}

/// SplitMix64: `Math.random` is seeded by the host per run, so that two runs
/// started from the same baked image never share a sequence.
fn next_random() -> f64 {
    RNG.with(|state| {
        let mut s = state.borrow_mut();
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// # Safety
/// `ptr..ptr+len` must be a live allocation of this module (the host only
/// passes buffers it got from `cm_alloc`).
unsafe fn read_str<'a>(ptr: *const u8, len: usize) -> Result<&'a str, std::str::Utf8Error> {
    if len == 0 {
        return Ok("");
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes)
}

#[unsafe(no_mangle)]
pub extern "C" fn cm_abi_version() -> i32 {
    ABI_VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn cm_alloc(len: usize) -> *mut u8 {
    let mut buf = Vec::<u8>::with_capacity(len.max(1));
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr
}

/// # Safety
/// `ptr`/`len` must come from one earlier `cm_alloc(len)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cm_free(ptr: *mut u8, len: usize) {
    // SAFETY: the buffer was made by `cm_alloc` with this capacity.
    drop(unsafe { Vec::from_raw_parts(ptr, 0, len.max(1)) });
}

#[unsafe(no_mangle)]
pub extern "C" fn cm_out_ptr() -> *const u8 {
    OUT.with(|out| out.borrow().as_ptr())
}

#[unsafe(no_mangle)]
pub extern "C" fn cm_out_len() -> usize {
    OUT.with(|out| out.borrow().len())
}

type Settlers = (Persistent<Function<'static>>, Persistent<Function<'static>>);

thread_local! {
    /// Host request id -> the resolve and reject functions of its promise.
    /// Kept in the guest's Rust heap (linear memory), so snapshots keep it.
    static PENDING: RefCell<std::collections::HashMap<i32, Settlers>> =
        RefCell::new(std::collections::HashMap::new());
}

/// Sends a host request and returns the promise `cm_settle` settles.
fn native_request<'js>(ctx: Ctx<'js>, payload: String) -> rquickjs::Result<rquickjs::Promise<'js>> {
    // SAFETY: the host reads `len` bytes from our memory at `ptr` and copies them.
    let id = unsafe { host_request(payload.as_ptr(), payload.len()) };
    let (promise, resolve, reject) = ctx.promise()?;
    let settlers = (
        Persistent::save(&ctx, resolve),
        Persistent::save(&ctx, reject),
    );
    PENDING.with(|p| p.borrow_mut().insert(id, settlers));
    Ok(promise)
}

fn native_emit(kind: i32, payload: String) -> i32 {
    // SAFETY: as for `native_request`.
    unsafe { host_emit(kind, payload.as_ptr(), payload.len()) }
}

/// The prelude's hooks object and its `status` function.
type HookHandles = (Persistent<Object<'static>>, Persistent<Function<'static>>);

/// # Safety
/// `ptr`/`len` must describe a buffer from `cm_alloc` holding the prelude.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cm_init(ptr: *const u8, len: usize) -> i32 {
    // SAFETY: guaranteed by the caller.
    let prelude = match unsafe { read_str(ptr, len) } {
        Ok(s) => s.to_owned(),
        Err(_) => return abi_error("prelude is not UTF-8"),
    };
    let runtime = match Runtime::new_with_alloc(LimitedAllocator(RustAllocator)) {
        Ok(rt) => rt,
        Err(e) => return abi_error(&format!("QuickJS runtime: {e}")),
    };
    let context = match Context::full(&runtime) {
        Ok(cx) => cx,
        Err(e) => return abi_error(&format!("QuickJS context: {e}")),
    };
    let hooks = context.with(|ctx| -> Result<HookHandles, String> {
        let setup: Function = ctx.eval(prelude).map_err(|e| describe_exception(&ctx, e))?;
        let natives = Object::new(ctx.clone()).map_err(|e| e.to_string())?;
        natives
            .set("request", Func::from(native_request))
            .map_err(|e| e.to_string())?;
        natives
            .set("emit", Func::from(native_emit))
            .map_err(|e| e.to_string())?;
        natives
            .set("random", Func::from(next_random))
            .map_err(|e| e.to_string())?;
        natives
            .set("fastJson", Func::from(fast_json))
            .map_err(|e| e.to_string())?;
        let hooks: Object = setup
            .call((natives,))
            .map_err(|e| describe_exception(&ctx, e))?;
        let status: Function = hooks.get("status").map_err(|e| e.to_string())?;
        Ok((
            Persistent::save(&ctx, hooks),
            Persistent::save(&ctx, status),
        ))
    });
    match hooks {
        Ok((hooks, status)) => {
            VM.with(|vm| {
                *vm.borrow_mut() = Some(Vm {
                    runtime,
                    context,
                    hooks,
                    status,
                })
            });
            set_out(b"");
            STATUS_COMPLETED
        }
        Err(message) => abi_error(&message),
    }
}

/// JSON text of `value` when it is made only of primitives, plain objects
/// (prototype `object_proto` or none) and plain arrays (`array_proto`)
/// without `toJSON`, else `undefined`: the prelude's JavaScript adapter then
/// converts it (and reports what is wrong with it). Both give the same text
/// for every value this accepts; this one is an order of magnitude faster,
/// and every tool call input passes here.
fn fast_json<'js>(
    ctx: Ctx<'js>,
    value: Value<'js>,
    object_proto: Object<'js>,
    array_proto: Object<'js>,
) -> rquickjs::Result<Value<'js>> {
    let mut writer = JsonWriter {
        to_json: rquickjs::Atom::from_str(ctx.clone(), "toJSON")?,
        out: String::new(),
        stack: Vec::new(),
        object_proto: object_proto.into_value(),
        array_proto: array_proto.into_value(),
    };
    match writer.value(&value) {
        Ok(Written::Value) => Ok(rquickjs::String::from_str(ctx, &writer.out)?.into_value()),
        Ok(Written::Nothing) => Ok(rquickjs::String::from_str(ctx, "null")?.into_value()),
        Ok(Written::Fallback) => Ok(Value::new_undefined(ctx)),
        // A getter threw: leave it to the adapter, which says where.
        Err(rquickjs::Error::Exception) => {
            let _ = ctx.catch();
            Ok(Value::new_undefined(ctx))
        }
        Err(e) => Err(e),
    }
}

enum Written {
    Value,
    /// `undefined`, a function or a symbol: `null` in arrays, no key in objects.
    Nothing,
    /// Not plain: the JavaScript adapter must convert it.
    Fallback,
}

struct JsonWriter<'js> {
    to_json: rquickjs::Atom<'js>,
    out: String,
    stack: Vec<Value<'js>>,
    object_proto: Value<'js>,
    array_proto: Value<'js>,
}

/// Objects nested deeper than this go to the adapter (which refuses them).
const MAX_FAST_DEPTH: usize = codemode_abi::MAX_JSON_DEPTH;

impl<'js> JsonWriter<'js> {
    fn value(&mut self, value: &Value<'js>) -> rquickjs::Result<Written> {
        use rquickjs::Type;
        match value.type_of() {
            Type::Undefined | Type::Uninitialized | Type::Symbol => Ok(Written::Nothing),
            Type::Function | Type::Constructor => Ok(Written::Nothing),
            Type::Null => {
                self.out.push_str("null");
                Ok(Written::Value)
            }
            Type::Bool => {
                self.out.push_str(if value.as_bool() == Some(true) {
                    "true"
                } else {
                    "false"
                });
                Ok(Written::Value)
            }
            Type::Int => {
                let n = value.as_int().unwrap_or(0);
                self.out.push_str(&n.to_string());
                Ok(Written::Value)
            }
            Type::Float => {
                let f = value.as_float().unwrap_or(f64::NAN);
                if !f.is_finite() {
                    self.out.push_str("null");
                } else if f == 0.0 {
                    self.out.push('0');
                } else {
                    self.out.push_str(&f.to_string());
                }
                Ok(Written::Value)
            }
            Type::String => match value.as_string().map(rquickjs::String::to_string) {
                Some(Ok(s)) => {
                    self.out.push_str(&json_string(&s));
                    Ok(Written::Value)
                }
                // Lone surrogates and the like: the adapter's JSON.stringify.
                _ => Ok(Written::Fallback),
            },
            Type::Array | Type::Object => self.object(value),
            _ => Ok(Written::Fallback),
        }
    }

    fn object(&mut self, value: &Value<'js>) -> rquickjs::Result<Written> {
        let Some(object) = value.as_object() else {
            return Ok(Written::Fallback);
        };
        if value.is_proxy() || self.stack.len() >= MAX_FAST_DEPTH || self.stack.contains(value) {
            return Ok(Written::Fallback);
        }
        let proto = object.get_prototype().map(Object::into_value);
        let is_array = value.is_array();
        let plain = match &proto {
            None => !is_array,
            Some(p) if is_array => *p == self.array_proto,
            Some(p) => *p == self.object_proto,
        };
        if !plain {
            return Ok(Written::Fallback);
        }
        let to_json: Value = object.get(self.to_json.clone())?;
        if !to_json.is_undefined() && !to_json.is_null() {
            return Ok(Written::Fallback);
        }
        self.stack.push(value.clone());
        let written = if is_array {
            self.array(object)?
        } else {
            self.properties(object)?
        };
        self.stack.pop();
        Ok(written)
    }

    fn array(&mut self, array: &Object<'js>) -> rquickjs::Result<Written> {
        let len: u32 = array.get("length")?;
        self.out.push('[');
        for i in 0..len {
            if i > 0 {
                self.out.push(',');
            }
            let item: Value = array.get(i)?;
            match self.value(&item)? {
                Written::Value => {}
                Written::Nothing => self.out.push_str("null"),
                Written::Fallback => return Ok(Written::Fallback),
            }
        }
        self.out.push(']');
        Ok(Written::Value)
    }

    fn properties(&mut self, object: &Object<'js>) -> rquickjs::Result<Written> {
        self.out.push('{');
        let mut first = true;
        for key in object.keys::<rquickjs::Atom>() {
            let key = key?;
            let item: Value = object.get(key.clone())?;
            let mark = self.out.len();
            if !first {
                self.out.push(',');
            }
            self.out.push_str(&json_string(&key.to_string()?));
            self.out.push(':');
            match self.value(&item)? {
                Written::Value => first = false,
                Written::Nothing => self.out.truncate(mark),
                Written::Fallback => return Ok(Written::Fallback),
            }
        }
        self.out.push('}');
        Ok(Written::Value)
    }
}

fn describe_exception(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    if let rquickjs::Error::Exception = error {
        let value = ctx.catch();
        if let Some(ex) = value.as_exception() {
            return format!(
                "{}\n{}",
                ex.message().unwrap_or_default(),
                ex.stack().unwrap_or_default()
            );
        }
        return format!("{value:?}");
    }
    error.to_string()
}

/// Calls `hooks[name](args)` and reports the resulting status.
///
/// The prelude's hooks never throw on guest behaviour (they catch and record);
/// an exception here means the VM itself failed (out of memory, or the guest
/// tampered with intrinsics the hooks rely on), which we report as a failure
/// with what QuickJS said.
fn with_hooks<F>(f: F) -> i32
where
    F: for<'js> FnOnce(&Ctx<'js>, &Object<'js>) -> rquickjs::Result<()>,
{
    HEAP_REFUSED.store(false, Ordering::Relaxed);
    let status = VM.with(|vm| {
        let vm = vm.borrow();
        let Some(vm) = vm.as_ref() else {
            return abi_error("cm_init was not called");
        };
        let early = vm.context.with(|ctx| {
            let hooks = match vm.hooks.clone().restore(&ctx) {
                Ok(h) => h,
                Err(e) => return Some(abi_error(&format!("hooks: {e}"))),
            };
            f(&ctx, &hooks).err().map(|e| report_vm_failure(&ctx, e))
        });
        if let Some(status) = early {
            return status;
        }
        // Jobs run outside `Context::with`: the job loop takes the runtime
        // lock itself.
        drain_jobs(&vm.runtime);
        vm.context.with(|ctx| {
            let status = match vm.status.clone().restore(&ctx) {
                Ok(h) => h,
                Err(e) => return abi_error(&format!("hooks: {e}")),
            };
            match report_status(&ctx, &status) {
                Ok(status) => status,
                Err(e) => report_vm_failure(&ctx, e),
            }
        })
    });
    // A refused allocation ends the cell as out of memory, also when the
    // failure happened inside a promise job (async recursion): the job's
    // error is lost there, and the cell would look like it waits forever.
    if (status == STATUS_FAILED || status == STATUS_PENDING) && HEAP_REFUSED.load(Ordering::Relaxed)
    {
        STATUS_OUT_OF_MEMORY
    } else {
        status
    }
}

fn drain_jobs(runtime: &Runtime) {
    loop {
        match runtime.execute_pending_job() {
            Ok(true) => continue,
            Ok(false) => break,
            // A job that threw outside any promise (cannot normally happen:
            // promise jobs turn throws into rejections). Keep draining.
            Err(_) => continue,
        }
    }
}

fn report_status<'js>(ctx: &Ctx<'js>, status: &Function<'js>) -> rquickjs::Result<i32> {
    let result: Value = status.call(())?;
    // A bare number: a status without payload (pending, the common case).
    if let Some(code) = result.as_int() {
        set_out(b"");
        return Ok(code);
    }
    let result: rquickjs::Array = rquickjs::FromJs::from_js(ctx, result)?;
    let code: i32 = result.get(0)?;
    let payload: Option<String> = result.get(1)?;
    let _ = ctx;
    set_out(payload.as_deref().unwrap_or("").as_bytes());
    Ok(code)
}

fn report_vm_failure(ctx: &Ctx<'_>, error: rquickjs::Error) -> i32 {
    let (name, message) = match error {
        rquickjs::Error::Exception => {
            let value: Value = ctx.catch();
            match value.as_exception() {
                Some(ex) => {
                    let name: String = ex.get("name").unwrap_or_else(|_| "Error".into());
                    (name, ex.message().unwrap_or_default())
                }
                None => (
                    "Error".to_owned(),
                    "the VM threw a non-error value".to_owned(),
                ),
            }
        }
        other => ("InternalError".to_owned(), other.to_string()),
    };
    let payload = format!(
        "{{\"name\":{},\"message\":{}}}",
        json_string(&name),
        json_string(&message)
    );
    set_out(payload.as_bytes());
    STATUS_FAILED
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// # Safety
/// `code_ptr`/`code_len` must describe a buffer from `cm_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cm_run(
    code_ptr: *const u8,
    code_len: usize,
    context_ptr: *const u8,
    context_len: usize,
    memory_limit: u32,
    seed_lo: u32,
    seed_hi: u32,
) -> i32 {
    // SAFETY: guaranteed by the caller.
    let code = match unsafe { read_str(code_ptr, code_len) } {
        Ok(s) => s.to_owned(),
        Err(_) => return abi_error("cell source is not UTF-8"),
    };
    // SAFETY: guaranteed by the caller.
    let run_context = match unsafe { read_str(context_ptr, context_len) } {
        Ok(s) => s.to_owned(),
        Err(_) => return abi_error("run context is not UTF-8"),
    };
    RNG.with(|s| *s.borrow_mut() = (u64::from(seed_hi) << 32) | u64::from(seed_lo));
    HEAP_LIMIT.store(memory_limit as usize, Ordering::Relaxed);
    with_hooks(move |ctx, hooks| {
        let run: Function = hooks.get("run")?;
        // The wrapper keeps the cell's first line on line 1, so QuickJS's line
        // numbers are the model's line numbers. Each cell is its own function
        // scope: no redeclaration errors across cells, `return` and top-level
        // `await` just work.
        let mut source = String::with_capacity(code.len() + 32);
        source.push_str(codemode_abi::CELL_PREFIX);
        source.push_str(&code);
        source.push_str(codemode_abi::CELL_SUFFIX);
        let mut options = EvalOptions::default();
        options.global = true;
        options.strict = false;
        options.filename = Some("cell.js".to_owned());
        match ctx.eval_with_options::<Value, _>(source, options) {
            Ok(cell) => run.call::<_, ()>((cell, Value::new_undefined(ctx.clone()), run_context)),
            Err(rquickjs::Error::Exception) => {
                let error = ctx.catch();
                run.call::<_, ()>((Value::new_undefined(ctx.clone()), error, run_context))
            }
            Err(other) => Err(other),
        }
    })
}

/// # Safety
/// `ptr`/`len` must describe a buffer from `cm_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cm_settle(request_id: i32, ok: i32, ptr: *const u8, len: usize) -> i32 {
    // SAFETY: guaranteed by the caller.
    let payload = match unsafe { read_str(ptr, len) } {
        Ok(s) => s.to_owned(),
        Err(_) => return abi_error("settle payload is not UTF-8"),
    };
    with_hooks(move |ctx, hooks| {
        let Some((resolve, reject)) = PENDING.with(|p| p.borrow_mut().remove(&request_id)) else {
            // Not ours (the host checks ids first): nothing to settle.
            return Ok(());
        };
        if ok != 0 {
            // The host's JSON text: parsed natively, no prelude frame.
            let value = ctx.json_parse(payload)?;
            resolve.restore(ctx)?.call::<_, ()>((value,))
        } else {
            // Rejections build a plain Error with a code in the prelude.
            let make_error: Function = hooks.get("reject")?;
            make_error.call::<_, ()>((reject.restore(ctx)?, payload))
        }
    })
}
