//! The guest ABI as the host sees it: names, status codes and the checks a
//! module must pass before the host runs it. The constants are
//! `codemode-abi`'s, shared with the guest.

use wasmtime::{ExternType, Module, ValType};

use crate::SandboxError;

pub(crate) use codemode_abi::{
    ABI_VERSION, CELL_PREFIX_COLUMNS, EMIT_JSON, STATUS_COMPLETED, STATUS_FAILED,
    STATUS_OUT_OF_MEMORY, STATUS_PENDING,
};

/// Funcref tables never need to grow past this (QuickJS uses none at all).
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;

/// The mutable global that holds the shadow stack pointer.
pub(crate) const STACK_POINTER: &str = "__stack_pointer";

/// Exported functions the host calls, with their parameter counts (all i32)
/// and whether they return an i32.
const FUNCTIONS: &[(&str, usize, bool)] = &[
    ("cm_abi_version", 0, true),
    ("cm_alloc", 1, true),
    ("cm_free", 2, false),
    ("cm_run", 7, true),
    ("cm_settle", 4, true),
    ("cm_out_ptr", 0, true),
    ("cm_out_len", 0, true),
];

/// Checks a compiled guest module's exports, reporting every problem at once.
///
/// # Errors
/// [`SandboxError::Abi`] listing what is missing or mistyped.
pub(crate) fn validate_exports(module: &Module) -> Result<(), SandboxError> {
    let mut problems = Vec::new();
    for &(name, params, returns) in FUNCTIONS {
        match module.get_export(name) {
            Some(ExternType::Func(ty)) => {
                let ok_params =
                    ty.params().len() == params && ty.params().all(|p| matches!(p, ValType::I32));
                let results: Vec<ValType> = ty.results().collect();
                let ok_results = if returns {
                    results.len() == 1 && matches!(results[0], ValType::I32)
                } else {
                    results.is_empty()
                };
                if !ok_params || !ok_results {
                    problems.push(format!("export `{name}` has type {ty:?}"));
                }
            }
            Some(other) => problems.push(format!("export `{name}` is {other:?}, not a function")),
            None => problems.push(format!("export `{name}` is missing")),
        }
    }
    if !matches!(module.get_export("memory"), Some(ExternType::Memory(_))) {
        problems.push("export `memory` is missing".into());
    }
    if !matches!(
        module.get_export(STACK_POINTER),
        Some(ExternType::Global(_))
    ) {
        problems.push(format!("global `{STACK_POINTER}` is not exported"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SandboxError::Abi(problems.join("; ")))
    }
}
