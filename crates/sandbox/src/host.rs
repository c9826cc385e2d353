//! What the host gives the guest: the `codemode` imports and exactly the WASI
//! calls the guest links against, as stateless stubs.
//!
//! Architecture invariant: the guest gets no filesystem, network, process,
//! environment or arguments. The stubs answer "nothing there" (no variables,
//! no arguments, `EBADF` for every file) and the only state they keep lives in
//! [`HostState`], which a snapshot records.

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use wasmtime::{Caller, Linker, Memory, ResourceLimiter};

use crate::SandboxError;
use crate::abi;

/// Why the host stopped the guest (set just before it traps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    Timeout,
    Cancelled,
    OutputLimit,
    TooManyRequests,
    ProcExit,
}

/// An output item the guest produced with `text(...)` or `json(...)`.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputItem {
    /// Human-readable text.
    Text(String),
    /// A JSON value (already through the guest's JSON adapter, re-parsed here).
    Json(serde_json::Value),
}

/// A request the guest made; the host answers it with [`crate::Vm::settle`].
#[derive(Debug, Clone, PartialEq)]
pub struct HostRequest {
    /// Id the guest waits on.
    pub id: u32,
    /// The request as the guest sent it: untrusted JSON, typically
    /// `{"method": "...", "params": ...}`, or why its text was refused
    /// (not JSON, nested too deeply: only a tampered guest sends either).
    /// Validate before acting on it.
    pub payload: Result<serde_json::Value, crate::GuestJsonError>,
}

/// Memory limiter that remembers whether it ever said no.
pub(crate) struct MemoryLimiter {
    pub(crate) max_bytes: usize,
    pub(crate) denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= abi::MAX_TABLE_ELEMENTS)
    }
}

/// Per-VM host state, owned by the wasmtime `Store`.
pub(crate) struct HostState {
    pub(crate) limiter: MemoryLimiter,
    pub(crate) memory: Option<Memory>,
    pub(crate) deadline: Instant,
    pub(crate) cancel: crate::CancelFlag,
    pub(crate) interrupt: Option<Interrupt>,
    pub(crate) output: Vec<OutputItem>,
    pub(crate) output_bytes: usize,
    pub(crate) max_output_bytes: usize,
    pub(crate) new_requests: Vec<HostRequest>,
    pub(crate) outstanding: BTreeSet<u32>,
    pub(crate) next_request_id: u32,
    pub(crate) max_outstanding_requests: usize,
    pub(crate) max_request_bytes: usize,
    /// Deterministic mode (pre-initialisation): fixed clock and randomness so
    /// the baked image is the same on every machine.
    pub(crate) deterministic: bool,
    pub(crate) random_state: u64,
    /// Epoch ticks (about milliseconds of guest CPU) in the current guest
    /// call.
    pub(crate) guest_ticks: u32,
    /// Set while a long guest call runs at a lower thread priority.
    pub(crate) demoted: Option<crate::priority::Demoted>,
}

impl HostState {
    pub(crate) fn new(deterministic: bool) -> HostState {
        HostState {
            limiter: MemoryLimiter {
                max_bytes: usize::MAX,
                denied: false,
            },
            memory: None,
            deadline: Instant::now() + std::time::Duration::from_secs(3600),
            cancel: crate::CancelFlag::new(),
            interrupt: None,
            output: Vec::new(),
            output_bytes: 0,
            max_output_bytes: usize::MAX,
            new_requests: Vec::new(),
            outstanding: BTreeSet::new(),
            next_request_id: 1,
            max_outstanding_requests: 1024,
            max_request_bytes: 1 << 20,
            deterministic,
            guest_ticks: 0,
            demoted: None,
            random_state: if deterministic {
                0x5eed
            } else {
                crate::random_u64()
            },
        }
    }

    fn next_random(&mut self) -> u64 {
        self.random_state = self.random_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.random_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

type HostResult<T> = wasmtime::Result<T>;

/// Copies `len` guest bytes at `ptr`, or fails when the range is outside
/// the guest's memory (a forged pointer).
fn read_guest(caller: &mut Caller<'_, HostState>, ptr: u32, len: u32) -> HostResult<Vec<u8>> {
    let memory = caller
        .data()
        .memory
        .ok_or_else(|| wasmtime::Error::msg("guest memory is not bound"))?;
    let data = memory.data(&*caller);
    let start = ptr as usize;
    let end = start
        .checked_add(len as usize)
        .ok_or_else(|| wasmtime::Error::msg("guest buffer overflows"))?;
    data.get(start..end)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| wasmtime::Error::msg("guest buffer lies outside its memory"))
}

fn write_guest(caller: &mut Caller<'_, HostState>, ptr: u32, bytes: &[u8]) -> HostResult<()> {
    let memory = caller
        .data()
        .memory
        .ok_or_else(|| wasmtime::Error::msg("guest memory is not bound"))?;
    memory
        .write(&mut *caller, ptr as usize, bytes)
        .map_err(|_| wasmtime::Error::msg("guest buffer lies outside its memory"))
}

fn stop(caller: &mut Caller<'_, HostState>, why: Interrupt) -> wasmtime::Error {
    caller.data_mut().interrupt = Some(why);
    wasmtime::Error::msg(format!("guest stopped by host: {why:?}"))
}

/// `codemode.request(ptr, len) -> id`
fn request(mut caller: Caller<'_, HostState>, ptr: u32, len: u32) -> HostResult<i32> {
    if caller.data().outstanding.len() >= caller.data().max_outstanding_requests {
        return Err(stop(&mut caller, Interrupt::TooManyRequests));
    }
    let max = caller.data().max_request_bytes;
    // Too large: not even read. The request still gets an id, so the
    // caller can reject it and the cell can catch that.
    let payload = if len as usize > max {
        Err(crate::GuestJsonError(format!(
            "the request is {len} bytes of JSON, more than the {max} bytes one request may carry (a tool call input, a query, a path); send less, or split the work into several calls"
        )))
    } else {
        crate::parse_guest_json(&read_guest(&mut caller, ptr, len)?)
    };
    let state = caller.data_mut();
    let id = state.next_request_id;
    state.next_request_id = state.next_request_id.wrapping_add(1).max(1);
    state.outstanding.insert(id);
    state.new_requests.push(HostRequest { id, payload });
    Ok(id as i32)
}

/// What one output item costs against `maxOutputBytes` besides its bytes:
/// about its JSON framing (`{"type":"text","text":""}`), so a flood of
/// empty items is bounded like a flood of text.
pub const OUTPUT_ITEM_COST: usize = 32;

/// `codemode.emit(kind, ptr, len)`
///
/// The output budget is the VM's whole life (one exec or one wait), not one
/// burst: output kept between awaited tool calls counts too.
fn emit(mut caller: Caller<'_, HostState>, kind: i32, ptr: u32, len: u32) -> HostResult<i32> {
    let state = caller.data();
    let cost = (len as usize).saturating_add(OUTPUT_ITEM_COST);
    if state.output_bytes.saturating_add(cost) > state.max_output_bytes {
        return Err(stop(&mut caller, Interrupt::OutputLimit));
    }
    let bytes = read_guest(&mut caller, ptr, len)?;
    let item = match kind {
        abi::EMIT_JSON => match crate::parse_guest_json(&bytes) {
            Ok(value) => OutputItem::Json(value),
            Err(_) => OutputItem::Text(String::from_utf8_lossy(&bytes).into_owned()),
        },
        _ => OutputItem::Text(String::from_utf8_lossy(&bytes).into_owned()),
    };
    let state = caller.data_mut();
    state.output_bytes += cost;
    state.output.push(item);
    Ok(0)
}

const WASI_OK: i32 = 0;
const WASI_EBADF: i32 = 8;
const WASI_EINVAL: i32 = 28;

fn clock_time_get(
    mut caller: Caller<'_, HostState>,
    id: i32,
    _precision: i64,
    out: u32,
) -> HostResult<i32> {
    let nanos: u64 = if caller.data().deterministic {
        0
    } else {
        match id {
            // realtime
            0 => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            // monotonic, process and thread cputime: a monotonic clock
            1..=3 => crate::monotonic_nanos(),
            _ => return Ok(WASI_EINVAL),
        }
    };
    write_guest(&mut caller, out, &nanos.to_le_bytes())?;
    Ok(WASI_OK)
}

fn random_get(mut caller: Caller<'_, HostState>, buf: u32, len: u32) -> HostResult<i32> {
    // Filled in bounded pieces so a forged huge length cannot make the host
    // allocate more than 64 KiB at a time.
    let mut done = 0u32;
    while done < len {
        let piece = (len - done).min(1 << 16);
        let mut bytes = vec![0u8; piece as usize];
        for chunk in bytes.chunks_mut(8) {
            let r = caller.data_mut().next_random().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        write_guest(
            &mut caller,
            buf.checked_add(done)
                .ok_or_else(|| wasmtime::Error::msg("guest buffer overflows"))?,
            &bytes,
        )?;
        done += piece;
    }
    Ok(WASI_OK)
}

fn zero_sizes(mut caller: Caller<'_, HostState>, count: u32, size: u32) -> HostResult<i32> {
    write_guest(&mut caller, count, &0u32.to_le_bytes())?;
    write_guest(&mut caller, size, &0u32.to_le_bytes())?;
    Ok(WASI_OK)
}

/// `fd_write`: stdout and stderr are swallowed (the guest has no console;
/// output goes through `text`/`json`), but reported as written so that C code
/// does not loop retrying.
fn fd_write(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    iovs: u32,
    iovs_len: u32,
    written: u32,
) -> HostResult<i32> {
    if fd != 1 && fd != 2 {
        return Ok(WASI_EBADF);
    }
    let table = read_guest(&mut caller, iovs, iovs_len.saturating_mul(8))?;
    let mut total = 0u32;
    for iov in table.chunks_exact(8) {
        let ptr = u32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
        let len = u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
        total = total.saturating_add(len);
        // Guest stderr is only ever QuickJS or Rust runtime diagnostics (a
        // panic message, say): useful when debugging the guest, never shown
        // to the model.
        if tracing::enabled!(tracing::Level::DEBUG) {
            let bytes = read_guest(&mut caller, ptr, len.min(4096))?;
            tracing::debug!(fd, text = %String::from_utf8_lossy(&bytes), "guest wrote to stdio");
        }
    }
    write_guest(&mut caller, written, &total.to_le_bytes())?;
    Ok(WASI_OK)
}

/// Registers every import the guest may use.
///
/// # Errors
/// Fails only if wasmtime rejects a definition (a bug in this file).
pub(crate) fn define_imports(linker: &mut Linker<HostState>) -> Result<(), SandboxError> {
    let engine_err = |e: wasmtime::Error| SandboxError::Engine(format!("defining imports: {e}"));
    /// `module`: `name` => host function, one line per import.
    macro_rules! imports {
        ($($module:expr, $name:literal => $func:expr;)*) => {
            $(linker.func_wrap($module, $name, $func).map_err(engine_err)?;)*
        };
    }
    type Guest<'a> = Caller<'a, HostState>;
    let wasi = "wasi_snapshot_preview1";
    imports! {
        "codemode", "request" => request;
        "codemode", "emit" => emit;
        wasi, "clock_time_get" => clock_time_get;
        wasi, "random_get" => random_get;
        wasi, "environ_sizes_get" => zero_sizes;
        wasi, "args_sizes_get" => zero_sizes;
        wasi, "environ_get" => |_: Guest<'_>, _: u32, _: u32| Ok(WASI_OK);
        wasi, "args_get" => |_: Guest<'_>, _: u32, _: u32| Ok(WASI_OK);
        wasi, "fd_write" => fd_write;
        wasi, "fd_close" => |_: Guest<'_>, _: i32| Ok(WASI_EBADF);
        wasi, "fd_fdstat_get" => |_: Guest<'_>, _: i32, _: u32| Ok(WASI_EBADF);
        wasi, "fd_seek" => |_: Guest<'_>, _: i32, _: i64, _: i32, _: u32| Ok(WASI_EBADF);
        wasi, "fd_prestat_get" => |_: Guest<'_>, _: i32, _: u32| Ok(WASI_EBADF);
        wasi, "fd_prestat_dir_name" => |_: Guest<'_>, _: i32, _: u32, _: u32| Ok(WASI_EBADF);
        wasi, "proc_exit" => |mut caller: Guest<'_>, _: i32| -> HostResult<()> {
            Err(stop(&mut caller, Interrupt::ProcExit))
        };
        wasi, "sched_yield" => |_: Guest<'_>| Ok(WASI_OK);
    }
    Ok(())
}
