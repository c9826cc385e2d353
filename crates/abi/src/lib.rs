//! The contract between the guest (`guest/`, QuickJS compiled to
//! `wasm32-wasip1`) and its host (`codemode-sandbox`), and the cell wrapper
//! the source checks (`codemode-transform`) must agree with. One owner for
//! each constant: the guest, the host and the checks import them from here,
//! so they cannot drift apart. Constants only and `no_std`, so the guest
//! takes nothing else with them.
//!
//! Changing a value here changes the guest: run `cargo xtask build-guest`
//! (the guest's source hash covers this crate).
#![no_std]

/// Bumped whenever an export, import or status code changes meaning. The
/// guest's `cm_abi_version()` returns it; the host refuses any other.
pub const ABI_VERSION: i32 = 2;

/// The cell finished; the payload is the JSON text of its value.
pub const STATUS_COMPLETED: i32 = 0;
/// The cell threw; the payload is JSON `{name, message, line?, column?}`.
pub const STATUS_FAILED: i32 = 1;
/// The cell waits on host requests; no payload.
pub const STATUS_PENDING: i32 = 2;
/// The ABI was misused (bad UTF-8, call before init, ...); payload is text.
pub const STATUS_ABI_ERROR: i32 = 3;
/// Like [`STATUS_FAILED`], but an allocation was refused by the heap limit
/// during this call: the failure is (most likely) the memory limit's doing.
pub const STATUS_OUT_OF_MEMORY: i32 = 4;

/// `emit` kind: plain text.
pub const EMIT_TEXT: i32 = 0;
/// `emit` kind: JSON text.
pub const EMIT_JSON: i32 = 1;

/// What the guest puts before a cell: each cell is the body of its own
/// async function (`return` and top-level `await` just work). No newline,
/// so the cell's first line stays line 1.
pub const CELL_PREFIX: &str = "(async function () {";
/// What the guest puts after a cell (on a line of its own, so a trailing
/// `//` comment cannot swallow it).
pub const CELL_SUFFIX: &str = "\n})";

/// Columns [`CELL_PREFIX`] adds to a cell's first line (it is ASCII).
pub const CELL_PREFIX_COLUMNS: u32 = CELL_PREFIX.len() as u32;

/// How deeply nested a JSON value leaving the VM may be, on both sides of
/// the boundary (the guest's fast encoder and the host's parser; the
/// sandbox's prelude.js repeats it, pinned by a test).
pub const MAX_JSON_DEPTH: usize = 100;
