//! Source checks and transforms for code-mode cells, before any VM starts:
//!
//! - [`check_nesting`]: a lexical upper estimate of how deeply a cell
//!   nests, taken before any parser (which recurses per level) sees it.
//! - [`check_cell_body`]: a JavaScript cell parses as exactly one async
//!   function body (it cannot close the engine's wrapper).
//! - [`looks_like_shell_command`]: a cell that is plainly a shell command
//!   line (`ls -la`, `git status`) instead of JavaScript.
//! - [`check_module_access`]: `import` declarations, dynamic `import()`,
//!   `import.meta`, `require(...)` and other module-loader patterns, decided
//!   on a real parse (oxc), so names, strings, comments, regexes and template
//!   text that merely contain those words pass.
//! - [`cell_references`] / [`check_cell_body_with_references`]: what a cell
//!   names statically of a few globals (`MCP.notes.deleteNote({...})`),
//!   for the runtime's pre-run name check; pure syntax, no catalog.
//! - [`transform_typescript`]: TypeScript to JavaScript as a source
//!   transform only (no type checking, no module resolution), with a map
//!   from generated lines back to the TypeScript the model wrote.
//!
//! ```
//! use codemode_transform::{check_module_access, transform_typescript, Dialect};
//! assert!(check_module_access("const requireAuth = 1; return 'import'", Dialect::JavaScript).is_ok());
//! assert!(check_module_access("const fs = require('fs')", Dialect::JavaScript).is_err());
//! let js = transform_typescript("const n: number = 1;\nreturn n as number;").unwrap();
//! assert!(!js.code.contains(": number"));
//! ```
//!
//! The TypeScript transformer is set up only when a TypeScript cell arrives
//! ([`typescript_transformer_initialised`] tells whether it ever was).

mod cell_body;
mod module_access;
mod nesting;
mod references;
mod shell;
mod typescript;

pub use cell_body::{
    CELL_PREFIX, CELL_SUFFIX, CellSyntaxError, check_cell_body, check_cell_body_with_references,
};
pub use module_access::{ModuleAccess, check_module_access};
pub use nesting::{MAX_NESTING_DEPTH, TooDeep, check_nesting, nesting_estimate};
pub use references::{
    ArgShape, CellReferences, GlobalUse, MAX_REPORTED_USES, ObjectShape, Usage, ValueKind,
    cell_references,
};
pub use shell::looks_like_shell_command;
pub use typescript::{
    Transformed, TypeScriptError, transform_typescript, typescript_transformer_initialised,
};

/// Which language a cell's source is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// JavaScript.
    JavaScript,
    /// TypeScript (type-only imports and exports are allowed: they vanish).
    TypeScript,
}

/// 1-based line and column of byte `offset` in `source` (columns count
/// UTF-16 units, as JavaScript engines report them).
pub fn line_column(source: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() as u32 + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before
        .get(line_start..)
        .map_or(0, |s| s.encode_utf16().count()) as u32
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one() {
        assert_eq!(line_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é\nx", 3), (2, 1));
        assert_eq!(line_column("x", 99), (1, 2));
    }
}
