//! From a validated `exec` input to the JavaScript the VM runs: the nesting
//! bound, the shell command check, the module-access check, the one-function-
//! body check for JavaScript and, for TypeScript cells, the transform (with
//! its position map kept for error reports).
//!
//! Everything here runs before a VM starts, so a refused cell costs no VM.
//! Parsers recurse once per nesting level on the thread that calls them, and
//! a stack overflow aborts the whole process: the depth is bounded lexically
//! first ([`codemode_transform::check_nesting`]), and a cell that nests more
//! than a little is checked on a thread with a known, large stack.

use std::sync::Arc;

use codemode_transform::{CellReferences, Dialect, MAX_NESTING_DEPTH, Transformed};

use crate::run::precheck::{NAMESPACES_GLOBAL, WATCHED_GLOBALS};

use crate::config::Language;
use crate::input::ExecInput;
use crate::result::ErrorCode;

/// Cells nesting at most this deep (estimated) are checked on the caller's
/// thread: even the deepest-recursing pass needs far less than the 2 MiB a
/// runtime worker thread has for them.
const INLINE_NESTING: usize = 64;
/// Larger cells are checked on their own thread, so source size alone
/// cannot add up to a deep tree on the caller's stack either.
const INLINE_BYTES: usize = 64 * 1024;
/// The checker thread's stack: at [`MAX_NESTING_DEPTH`] levels this leaves
/// over 64 KiB per level, about 40 times what the passes were measured to
/// need (`tests/cell_checks.rs` runs every deep shape at the limit).
const CHECKER_STACK_BYTES: usize = 64 << 20;

/// A cell ready for the VM.
pub(crate) struct PreparedCell {
    pub(crate) code: String,
    /// For TypeScript cells: maps positions in `code` back to the source.
    pub(crate) source_map: Option<Arc<Transformed>>,
    /// What `code` names statically of `MCP` and `tools`, for the pre-run
    /// name check ([`crate::run::precheck`]).
    pub(crate) references: CellReferences,
}

impl PreparedCell {
    /// The pre-run name check against the run's catalog: `Err` with the
    /// refusal (`invalid_input`) when the cell provably names something
    /// the run does not have.
    pub(crate) fn check_names(&self, catalog: &crate::catalog::Catalog) -> Result<(), Refused> {
        self.refuse(crate::run::precheck::problems(&self.references, catalog))
    }

    /// The name check of the cell's plugin namespace calls against the
    /// run's namespaces (after they are built, before the VM starts).
    pub(crate) fn check_namespace_names(
        &self,
        namespaces: &crate::catalog::namespaces::RunNamespaces,
    ) -> Result<(), Refused> {
        self.refuse(crate::run::precheck::namespace_problems(
            &self.references,
            namespaces,
        ))
    }

    fn refuse(&self, problems: Vec<crate::run::precheck::Problem>) -> Result<(), Refused> {
        if problems.is_empty() {
            return Ok(());
        }
        let message =
            crate::run::precheck::refusal(&problems, |line, column| match &self.source_map {
                Some(map) => map.original_position(line, column),
                None => (line, column),
            });
        Err(Refused::new(ErrorCode::InvalidInput, message))
    }
}

/// Why a cell was refused before running.
pub(crate) struct Refused {
    /// `None` for a plain syntax error (no contract code, as from the engine).
    pub(crate) code: Option<ErrorCode>,
    pub(crate) message: String,
}

impl Refused {
    fn new(code: ErrorCode, message: impl Into<String>) -> Refused {
        Refused {
            code: Some(code),
            message: message.into(),
        }
    }
}

/// Checks and transforms `input`; `namespace_globals` are the run's plugin
/// namespace globals, whose static uses are collected for the name check
/// too (besides `MCP` and `tools`).
pub(crate) fn prepare(
    input: &ExecInput,
    namespace_globals: &[String],
) -> Result<PreparedCell, Refused> {
    let mut watched: Vec<String> = WATCHED_GLOBALS.iter().map(|g| (*g).to_owned()).collect();
    if !namespace_globals.is_empty() {
        watched.push(NAMESPACES_GLOBAL.to_owned());
        watched.extend(namespace_globals.iter().cloned());
    }
    prepare_watching(input, watched)
}

/// [`prepare`], collecting the static uses of the `watched` globals (none:
/// the source checks alone).
pub(crate) fn prepare_watching(
    input: &ExecInput,
    watched: Vec<String>,
) -> Result<PreparedCell, Refused> {
    let depth = codemode_transform::check_nesting(&input.code, MAX_NESTING_DEPTH)
        .map_err(|e| Refused::new(ErrorCode::InvalidInput, e.to_string()))?;
    if depth <= INLINE_NESTING && input.code.len() <= INLINE_BYTES {
        return check_and_transform(&input.code, input.language, &watched);
    }
    let code = input.code.clone();
    let language = input.language;
    let checker = std::thread::Builder::new()
        .name("codemode-check".into())
        .stack_size(CHECKER_STACK_BYTES)
        .spawn(move || check_and_transform(&code, language, &watched));
    match checker.map(std::thread::JoinHandle::join) {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Refused::new(
            ErrorCode::InternalError,
            "the source checks failed unexpectedly on this cell",
        )),
        Err(e) => Err(Refused::new(
            ErrorCode::RuntimeBusy,
            format!("could not start a thread to check the cell: {e}; retry shortly"),
        )),
    }
}

fn check_and_transform(
    code: &str,
    language: Language,
    watched: &[String],
) -> Result<PreparedCell, Refused> {
    let watched: Vec<&str> = watched.iter().map(String::as_str).collect();
    let dialect = match language {
        Language::JavaScript => Dialect::JavaScript,
        Language::TypeScript => Dialect::TypeScript,
    };
    if let Some(message) = codemode_transform::looks_like_shell_command(code, dialect) {
        return Err(Refused::new(ErrorCode::InvalidInput, message));
    }
    codemode_transform::check_module_access(code, dialect)
        .map_err(|e| Refused::new(ErrorCode::ModuleAccessDenied, e.to_string()))?;
    match language {
        Language::JavaScript => {
            let references = codemode_transform::check_cell_body_with_references(code, &watched)
                .map_err(|e| Refused {
                    code: None,
                    message: e.to_string(),
                })?;
            Ok(PreparedCell {
                code: code.to_owned(),
                source_map: None,
                references,
            })
        }
        Language::TypeScript => match codemode_transform::transform_typescript(code) {
            Ok(transformed) => Ok(PreparedCell {
                references: codemode_transform::cell_references(&transformed.code, &watched),
                code: transformed.code.clone(),
                source_map: Some(Arc::new(transformed)),
            }),
            Err(e) => Err(Refused::new(
                ErrorCode::TypescriptTransformFailed,
                format!(
                    "the TypeScript cell could not be transformed: {e}; fix the syntax (types are not checked, only removed)"
                ),
            )),
        },
    }
}
