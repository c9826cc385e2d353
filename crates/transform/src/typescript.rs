//! TypeScript → JavaScript, as a source transform only (oxc): types,
//! interfaces, type-only imports/exports, generics, `as`/`satisfies`,
//! non-null assertions, enums and parameter properties. No type checking,
//! no module resolution. The generated code carries a position map back to
//! the TypeScript source, so runtime errors name the model's own lines.

use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use oxc_allocator::Allocator;
use oxc_ast::ast::Statement;
use oxc_codegen::{Codegen, CodegenOptions};
use oxc_diagnostics::OxcDiagnostic;
use oxc_parser::{ParseOptions, Parser};
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{TransformOptions, Transformer};

use crate::line_column;

/// `(generated line, generated column, source line, source column)`, all
/// 0-based, sorted by generated position.
type Tokens = Vec<(u32, u32, u32, u32)>;

/// A transformed cell.
///
/// The position map is built only when asked for (an error to report): the
/// transform is deterministic, so it is re-run once with a source map, and
/// the common path does not pay for one.
#[derive(Debug)]
pub struct Transformed {
    /// The JavaScript to run.
    pub code: String,
    source: String,
    tokens: OnceLock<Tokens>,
}

impl Transformed {
    /// The TypeScript source it was made from (a durable run keeps it and
    /// transforms it again when restored elsewhere: the transform is
    /// deterministic).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Maps a 1-based position in [`Transformed::code`] to the 1-based
    /// position in the TypeScript source it came from.
    pub fn original_position(&self, line: u32, column: u32) -> (u32, u32) {
        let tokens = self.tokens.get_or_init(|| {
            with_arena(|allocator| transform_in(allocator, &self.source, true))
                .map(|(_, tokens)| tokens)
                .unwrap_or_default()
        });
        let (line0, col0) = (line.saturating_sub(1), column.saturating_sub(1));
        let on_line = tokens
            .iter()
            .filter(|t| t.0 == line0)
            .take_while(|t| t.1 <= col0)
            .last()
            .or_else(|| tokens.iter().find(|t| t.0 == line0))
            .or_else(|| tokens.iter().rev().find(|t| t.0 < line0));
        match on_line {
            Some(&(_, dst_col, src_line, src_col)) => {
                let offset = col0.saturating_sub(dst_col);
                (src_line + 1, src_col + offset + 1)
            }
            None => (line, column),
        }
    }
}

/// The TypeScript source could not be transformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TypeScript: {message} (line {line}, column {column})")]
pub struct TypeScriptError {
    /// What the parser or transformer said.
    pub message: String,
    /// 1-based line in the TypeScript source.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

static INITIALISED: AtomicBool = AtomicBool::new(false);

/// Whether the TypeScript transformer was ever set up in this process
/// (JavaScript-only use never sets it up).
pub fn typescript_transformer_initialised() -> bool {
    INITIALISED.load(Ordering::SeqCst)
}

fn transform_options() -> &'static TransformOptions {
    static OPTIONS: OnceLock<TransformOptions> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        INITIALISED.store(true, Ordering::SeqCst);
        // TypeScript only: no syntax lowering (QuickJS runs ES2023+).
        TransformOptions::default()
    })
}

fn error_at(source: &str, diagnostic: &OxcDiagnostic) -> TypeScriptError {
    let offset = diagnostic.labels.first().map_or(0, |label| label.offset());
    let (line, column) = line_column(source, offset as usize);
    let mut message = diagnostic.message.to_string();
    if let Some(help) = &diagnostic.help {
        message.push_str(&format!(" ({help})"));
    }
    TypeScriptError {
        message,
        line,
        column,
    }
}

/// Transforms a TypeScript cell body (top-level `await` and `return` allowed).
///
/// # Errors
/// [`TypeScriptError`] with the position of the first syntax or transform
/// error.
pub fn transform_typescript(source: &str) -> Result<Transformed, TypeScriptError> {
    let (code, _) = with_arena(|allocator| transform_in(allocator, source, false))?;
    Ok(Transformed {
        code,
        source: source.to_owned(),
        tokens: OnceLock::new(),
    })
}

/// Runs `f` with this thread's arena, reset first: a cell's AST is gone
/// once its code (and map) are copied out.
fn with_arena<T>(f: impl FnOnce(&Allocator) -> T) -> T {
    thread_local! {
        static ARENA: std::cell::RefCell<Allocator> = std::cell::RefCell::new(Allocator::default());
    }
    ARENA.with(|arena| match arena.try_borrow_mut() {
        Ok(mut allocator) => {
            allocator.reset();
            f(&allocator)
        }
        // Re-entered on this thread (cannot happen today): a fresh arena.
        Err(_) => f(&Allocator::default()),
    })
}

fn transform_in(
    allocator: &Allocator,
    source: &str,
    with_map: bool,
) -> Result<(String, Tokens), TypeScriptError> {
    let options = transform_options();
    let parse_options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let parsed = Parser::new(allocator, source, SourceType::ts())
        .with_options(parse_options)
        .parse();
    if let Some(first) = parsed.diagnostics.errors().next() {
        return Err(error_at(source, first));
    }
    let mut program = parsed.program;
    let semantic = SemanticBuilder::new()
        .with_excess_capacity(2.0)
        .with_enum_eval(true)
        .build(&program);
    if let Some(first) = semantic.diagnostics.errors().next() {
        return Err(error_at(source, first));
    }
    let scoping = semantic.semantic.into_scoping();
    let path = Path::new("cell.ts");
    let transformed =
        Transformer::new(allocator, path, options).build_with_scoping(scoping, &mut program);
    if let Some(first) = transformed.diagnostics.errors().next() {
        return Err(error_at(source, first));
    }
    // The transformer keeps a module a module (`export {};` after removing
    // type-only exports); the cell runs as a function body, so drop it.
    // Value exports never get here: the module-access check refuses them.
    program.body.retain(|statement| {
        !matches!(statement, Statement::ExportNamedDeclaration(d) if d.specifiers.is_empty())
    });
    let printed = Codegen::new()
        .with_options(CodegenOptions {
            source_map_path: with_map.then(|| path.to_path_buf()),
            ..CodegenOptions::default()
        })
        .build(&program);
    let mut tokens: Tokens = printed
        .map
        .map(|map| {
            map.get_tokens()
                .map(|t| {
                    (
                        t.get_dst_line(),
                        t.get_dst_col(),
                        t.get_src_line(),
                        t.get_src_col(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    tokens.sort_unstable();
    Ok((printed.code, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(source: &str) -> String {
        transform_typescript(source).unwrap().code
    }

    #[test]
    fn types_vanish_and_features_are_lowered() {
        let out = js(r#"
interface User { name: string; age?: number }
type Id = string | number;
import type { Thing } from "./types";
export type { Thing };
enum Color { Red, Green = "g" }
class Point { constructor(public x: number, private y: number) {} }
function first<T>(xs: T[]): T | undefined { return xs[0]; }
const u = { name: "a" } satisfies User;
const n = (u as any).age!;
const p = new Point(1, 2);
return [first<number>([1]), Color.Red, Color.Green, p.x, n ?? null];
"#);
        for gone in [
            "interface",
            "type Id",
            "import type",
            "export",
            "satisfies",
            " as any",
            "<T>",
            ": number",
            "public x",
        ] {
            assert!(!out.contains(gone), "{gone} left in:\n{out}\n---");
        }
        assert!(out.contains("Color"), "{out}");
        assert!(out.contains("this.x = x"), "{out}");
        assert!(out.contains("return"), "{out}");
    }

    #[test]
    fn top_level_await_and_return_are_kept() {
        let out = js("const r: number = await Promise.resolve(1);\nreturn r;");
        assert!(
            out.contains("await Promise.resolve(1)") && out.contains("return r"),
            "{out}"
        );
    }

    #[test]
    fn errors_carry_positions() {
        let e = transform_typescript("const a: number = 1;\nconst b = (;\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.column >= 11, "{e}");
    }

    #[test]
    fn the_map_is_built_on_demand_for_the_same_code() {
        let source = "enum E { A }\nconst x: number = E.A;\nreturn x;";
        let t = transform_typescript(source).unwrap();
        let (code, tokens) = with_arena(|a| transform_in(a, source, true)).unwrap();
        assert_eq!(code, t.code, "the map describes the code that runs");
        assert!(!tokens.is_empty());
    }

    #[test]
    fn positions_map_back_to_the_source() {
        let source =
            "interface A {\n  x: number;\n}\n\nconst a: A = { x: 1 };\nthrow new Error('boom');\n";
        let t = transform_typescript(source).unwrap();
        let line = t.code.lines().position(|l| l.contains("throw")).unwrap() as u32 + 1;
        assert_eq!(t.original_position(line, 1).0, 6, "{}", t.code);
    }
}
