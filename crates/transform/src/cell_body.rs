//! A JavaScript cell must be exactly one function body.
//!
//! The engine runs a cell as `(async function () {` + cell + `\n})`. A cell
//! that closes that function itself (`}); evil(); (async function () {`)
//! would run code at the top level, before the run's globals are in place.
//! So the host parses the wrapped text exactly as the engine will and
//! accepts it only when the whole text is that one function expression; a
//! cell that does not parse is refused here with the parser's message, so
//! the engine never compiles text whose structure was not checked.

use oxc_allocator::Allocator;
use oxc_ast::ast::{Expression, Statement};
use oxc_parser::Parser;
use oxc_span::{GetSpan, SourceType};

use crate::line_column;

/// The engine's wrapper around a cell (the guest's `cm_run` uses the same
/// constants).
pub use codemode_abi::{CELL_PREFIX, CELL_SUFFIX};

/// A cell that is not one function body: a syntax error, or text that
/// closes the function it runs in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SyntaxError: {message} (line {line}, column {column})")]
pub struct CellSyntaxError {
    /// What is wrong.
    pub message: String,
    /// 1-based line in the cell.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

/// Checks that a JavaScript cell parses as one async function body.
///
/// # Errors
/// [`CellSyntaxError`] with the parser's first error, or naming the place
/// where the cell closes its own function.
///
/// ```
/// use codemode_transform::check_cell_body;
/// assert!(check_cell_body("const x = await f(); return x").is_ok());
/// assert!(check_cell_body("}); globalThis.x = 1; (async function () {").is_err());
/// ```
pub fn check_cell_body(source: &str) -> Result<(), CellSyntaxError> {
    with_cell_body(source, |_, _| ())
}

/// Checks a JavaScript cell as [`check_cell_body`] does and, on the same
/// parse, collects what it names of the `watched` globals
/// ([`crate::CellReferences`]), so the pre-run name check costs no
/// second parse.
///
/// # Errors
/// As [`check_cell_body`].
///
/// ```
/// use codemode_transform::check_cell_body_with_references;
/// let refs = check_cell_body_with_references("await MCP.notes.deleteNote({ id: 1 })", &["MCP"]).unwrap();
/// assert_eq!(refs.uses[0].path, ["notes", "deleteNote"]);
/// ```
pub fn check_cell_body_with_references(
    source: &str,
    watched: &[&str],
) -> Result<crate::CellReferences, CellSyntaxError> {
    if !crate::references::mentions_any(source, watched) {
        return check_cell_body(source).map(|()| crate::CellReferences::default());
    }
    with_cell_body(source, |program, wrapped| {
        crate::references::collect(program, wrapped, CELL_PREFIX.len(), watched)
    })
}

/// Parses the wrapped cell, checks that it is one function body, and hands
/// the parse to `then`.
fn with_cell_body<R>(
    source: &str,
    then: impl FnOnce(&oxc_ast::ast::Program<'_>, &str) -> R,
) -> Result<R, CellSyntaxError> {
    let wrapped = format!("{CELL_PREFIX}{source}{CELL_SUFFIX}");
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, &wrapped, SourceType::cjs()).parse();
    let at = |offset: usize| {
        let offset = offset.saturating_sub(CELL_PREFIX.len()).min(source.len());
        line_column(source, offset)
    };
    if let Some(first) = parsed.diagnostics.iter().next() {
        let offset = first.labels.first().map_or(0, |l| l.offset());
        let (line, column) = at(offset as usize);
        let mut message = first.message.to_string();
        if let Some(help) = &first.help {
            message.push_str(&format!(" ({help})"));
        }
        return Err(CellSyntaxError {
            message,
            line,
            column,
        });
    }
    if parsed.panicked {
        return Err(CellSyntaxError {
            message: "the cell could not be parsed".into(),
            line: 1,
            column: 1,
        });
    }
    let whole = match parsed.program.body.as_slice() {
        [Statement::ExpressionStatement(statement)] => match &statement.expression {
            Expression::ParenthesizedExpression(paren) => match &paren.expression {
                Expression::FunctionExpression(function) => {
                    let span = function.span;
                    span.start == 1 && span.end as usize + 1 == wrapped.len()
                }
                _ => false,
            },
            _ => false,
        },
        _ => false,
    };
    if whole && parsed.program.directives.is_empty() && parsed.program.hashbang.is_none() {
        return Ok(then(&parsed.program, &wrapped));
    }
    // Where the wrapper's function ends early: the end of the first statement.
    let end = parsed
        .program
        .body
        .first()
        .map_or(0, |s| s.span().end as usize);
    let (line, column) = at(end.saturating_sub(1));
    Err(CellSyntaxError {
        message: "unexpected `}`: the cell closes the function it runs in; a cell is a function body, so every `}` and `)` must close something the cell opened".into(),
        line,
        column,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_bodies_pass() {
        for cell in [
            "return 1",
            "const a = await tools.search('x'); return a // trailing comment",
            "function f() { return 2 } return f()",
            "'use strict'; return 1",
            "label: for (;;) { break label }",
            "return /}/.test('}')",
            "return `}${'}'}`",
            "<!-- html comment\nreturn 1",
        ] {
            assert_eq!(check_cell_body(cell), Ok(()), "{cell}");
        }
    }

    #[test]
    fn escaping_the_wrapper_is_refused() {
        for cell in [
            "}); globalThis.pwned = 1; (async function () {",
            "return 1 }); (function () {",
            "}) ; (async function () {",
            "})\n//",
        ] {
            let error = check_cell_body(cell).unwrap_err();
            assert!(error.to_string().starts_with("SyntaxError: "), "{error}");
        }
    }

    #[test]
    fn syntax_errors_name_the_cell_position() {
        let error = check_cell_body("const a = 1;\nconst = 2").unwrap_err();
        assert_eq!(error.line, 2, "{error}");
    }
}
