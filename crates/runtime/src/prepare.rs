//! From a validated `exec` input to the JavaScript the VM runs: the shell
//! command check, the module-access check and, for TypeScript cells, the
//! transform (with its position map kept for error reports).
//!
//! Everything here runs before a VM starts, so a refused cell costs no VM.

use std::sync::Arc;

use codemode_transform::{Dialect, Transformed};

use crate::config::Language;
use crate::input::ExecInput;
use crate::result::ErrorCode;

/// A cell ready for the VM.
pub(crate) struct PreparedCell {
    pub(crate) code: String,
    /// For TypeScript cells: maps positions in `code` back to the source.
    pub(crate) source_map: Option<Arc<Transformed>>,
}

/// Why a cell was refused before running.
pub(crate) struct Refused {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

pub(crate) fn prepare(input: &ExecInput) -> Result<PreparedCell, Refused> {
    let dialect = match input.language {
        Language::JavaScript => Dialect::JavaScript,
        Language::TypeScript => Dialect::TypeScript,
    };
    if let Some(message) = codemode_transform::looks_like_shell_command(&input.code, dialect) {
        return Err(Refused {
            code: ErrorCode::InvalidInput,
            message,
        });
    }
    codemode_transform::check_module_access(&input.code, dialect).map_err(|e| Refused {
        code: ErrorCode::ModuleAccessDenied,
        message: e.to_string(),
    })?;
    match input.language {
        Language::JavaScript => Ok(PreparedCell {
            code: input.code.clone(),
            source_map: None,
        }),
        Language::TypeScript => match codemode_transform::transform_typescript(&input.code) {
            Ok(transformed) => Ok(PreparedCell {
                code: transformed.code.clone(),
                source_map: Some(Arc::new(transformed)),
            }),
            Err(e) => Err(Refused {
                code: ErrorCode::TypescriptTransformFailed,
                message: format!(
                    "the TypeScript cell could not be transformed: {e}; fix the syntax (types are not checked, only removed)"
                ),
            }),
        },
    }
}
