//! Module-access rejection on a real parse.
//!
//! The cell is parsed as a module (so `import` declarations and
//! `import.meta` parse at all) that may `return` at top level; when that
//! fails outright it is parsed as the engine sees it, wrapped in an async
//! function in sloppy mode. References are resolved (oxc semantic), so a
//! cell's own `require` function is its own business, while the global
//! `require` — called, aliased or reached through `globalThis` — is denied.

use oxc_allocator::Allocator;
use oxc_ast::ast::{
    Argument, CallExpression, Declaration, ExportAllDeclaration, ExportDeclaration,
    ExportDefaultDeclaration, ExportFromDeclaration, ExportNamedDeclaration, Expression,
    IdentifierReference, ImportDeclaration, ImportDeclarationSpecifier, ImportExpression,
    ImportMeta, ImportOrExportKind, Program, TSExportAssignment, TSImportEqualsDeclaration,
    TSModuleBlock, UnaryExpression, UnaryOperator,
};
use oxc_ast_visit::{Visit, walk};
use oxc_parser::{ParseOptions, Parser};
use oxc_semantic::{Scoping, SemanticBuilder};
use oxc_span::{GetSpan, SourceType, Span};

use crate::{Dialect, line_column};

/// A module-loader pattern found in a cell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is not available in code mode (line {line}, column {column}): there is no module loader, filesystem or network; call tools instead (tools.search, tools.call, MCP.<server>.<tool>)"
)]
pub struct ModuleAccess {
    /// What was found, e.g. ``an `import` declaration``.
    pub what: String,
    /// 1-based line in the cell.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

use crate::cell_body::{CELL_PREFIX as WRAPPER, CELL_SUFFIX};

/// Checks a cell for module access.
///
/// # Errors
/// [`ModuleAccess`] for the first pattern found. A cell that does not parse
/// at all passes: the engine reports its syntax error.
pub fn check_module_access(source: &str, dialect: Dialect) -> Result<(), ModuleAccess> {
    // Cheap exit: without these words no pattern can be present.
    if !source.contains("import")
        && !source.contains("require")
        && !source.contains("export")
        && !source.contains("importScripts")
    {
        return Ok(());
    }
    let allocator = Allocator::default();
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let module_type = match dialect {
        Dialect::JavaScript => SourceType::mjs(),
        Dialect::TypeScript => SourceType::ts(),
    };
    let parsed = Parser::new(&allocator, source, module_type)
        .with_options(options)
        .parse();
    if !parsed.panicked {
        return scan(&parsed.program, source, 0, dialect);
    }
    let wrapped = format!("{WRAPPER}{source}{CELL_SUFFIX}");
    let script_type = match dialect {
        Dialect::JavaScript => SourceType::cjs(),
        Dialect::TypeScript => SourceType::ts().with_script(true),
    };
    let parsed = Parser::new(&allocator, &wrapped, script_type).parse();
    if parsed.panicked {
        return Ok(());
    }
    scan(&parsed.program, &wrapped, WRAPPER.len(), dialect)
}

fn scan(
    program: &Program<'_>,
    text: &str,
    shift: usize,
    dialect: Dialect,
) -> Result<(), ModuleAccess> {
    let semantic = SemanticBuilder::new().build(program);
    let scoping = semantic.semantic.scoping();
    let mut finder = Finder {
        scoping,
        dialect,
        found: None,
        typeof_operand: None,
        in_namespace: 0,
    };
    finder.visit_program(program);
    match finder.found {
        None => Ok(()),
        Some((what, span)) => {
            let (line, column) = line_column(text, span.start as usize);
            let column = if line == 1 && shift > 0 {
                column.saturating_sub(shift as u32).max(1)
            } else {
                column
            };
            Err(ModuleAccess { what, line, column })
        }
    }
}

/// Global names whose call loads modules.
const LOADER_FUNCTIONS: [&str; 4] = [
    "require",
    "createRequire",
    "__non_webpack_require__",
    "importScripts",
];

/// Global objects through which `require` may be reached.
const GLOBAL_OBJECTS: [&str; 4] = ["globalThis", "global", "window", "self"];

struct Finder<'s> {
    scoping: &'s Scoping,
    dialect: Dialect,
    found: Option<(String, Span)>,
    /// The span of the identifier under `typeof` (a harmless feature check).
    typeof_operand: Option<Span>,
    /// Inside a TypeScript `namespace` / `declare module` body, where
    /// `export` declares a namespace member, not a module export.
    in_namespace: u32,
}

impl Finder<'_> {
    fn report(&mut self, what: impl Into<String>, span: Span) {
        if self.found.is_none() {
            self.found = Some((what.into(), span));
        }
    }

    /// Whether `ident` names a global (no binding in the cell).
    fn is_global(&self, ident: &IdentifierReference<'_>) -> bool {
        match ident.reference_id.get() {
            Some(id) => self.scoping.get_reference(id).symbol_id().is_none(),
            None => true,
        }
    }

    fn global_named<'e>(&self, expr: &'e Expression<'_>) -> Option<&'e str> {
        match expr {
            Expression::Identifier(ident) if self.is_global(ident) => Some(ident.name.as_str()),
            _ => None,
        }
    }

    /// `globalThis.require`, `window["require"]`, `module.require`,
    /// `System.import`, `process.mainModule.require`, ...
    fn loader_member(&self, expr: &Expression<'_>) -> Option<String> {
        let (object, property) = match expr {
            Expression::StaticMemberExpression(m) => (&m.object, m.property.name.as_str()),
            Expression::ComputedMemberExpression(m) => match &m.expression {
                Expression::StringLiteral(s) => (&m.object, s.value.as_str()),
                Expression::TemplateLiteral(t) if t.expressions.is_empty() => (
                    &m.object,
                    t.quasis.first().map_or("", |q| q.value.raw.as_str()),
                ),
                _ => return None,
            },
            _ => return None,
        };
        let object_name = match object {
            Expression::Identifier(ident) if self.is_global(ident) => Some(ident.name.as_str()),
            Expression::StaticMemberExpression(inner) => match &inner.object {
                Expression::Identifier(ident)
                    if self.is_global(ident) && ident.name == "process" =>
                {
                    Some("process.mainModule")
                }
                _ => None,
            },
            _ => None,
        }?;
        let hit = match (object_name, property) {
            (g, p) if GLOBAL_OBJECTS.contains(&g) && LOADER_FUNCTIONS.contains(&p) => true,
            ("module", "require") | ("process.mainModule", "require") => true,
            ("System", "import" | "register") => true,
            ("require", _) => true,
            _ => false,
        };
        hit.then(|| format!("`{object_name}.{property}`"))
    }
}

fn type_only_specifiers(decl: &ImportDeclaration<'_>) -> bool {
    match &decl.specifiers {
        Some(specifiers) if !specifiers.is_empty() => specifiers.iter().all(|s| {
            matches!(s, ImportDeclarationSpecifier::ImportSpecifier(spec) if spec.import_kind == ImportOrExportKind::Type)
        }),
        _ => false,
    }
}

impl<'a> Visit<'a> for Finder<'_> {
    fn visit_import_declaration(&mut self, it: &ImportDeclaration<'a>) {
        let type_only = self.dialect == Dialect::TypeScript
            && (it.import_kind == ImportOrExportKind::Type || type_only_specifiers(it));
        if !type_only {
            self.report(
                format!("an `import` declaration (from \"{}\")", it.source.value),
                it.span,
            );
        }
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.report("dynamic `import()`", it.span);
    }

    fn visit_import_meta(&mut self, it: &ImportMeta) {
        self.report("`import.meta`", it.span);
    }

    fn visit_export_all_declaration(&mut self, it: &ExportAllDeclaration<'a>) {
        if !(self.dialect == Dialect::TypeScript && it.export_kind == ImportOrExportKind::Type) {
            self.report(
                format!("a re-export (`export * from \"{}\"`)", it.source.value),
                it.span,
            );
        }
    }

    fn visit_export_from_declaration(&mut self, it: &ExportFromDeclaration<'a>) {
        if !(self.dialect == Dialect::TypeScript && it.export_kind == ImportOrExportKind::Type) {
            self.report(
                format!("a re-export (from \"{}\")", it.source.value),
                it.span,
            );
        }
    }

    fn visit_ts_module_block(&mut self, it: &TSModuleBlock<'a>) {
        self.in_namespace += 1;
        walk::walk_ts_module_block(self, it);
        self.in_namespace -= 1;
    }

    fn visit_export_named_declaration(&mut self, it: &ExportNamedDeclaration<'a>) {
        if self.in_namespace > 0 {
            return walk::walk_export_named_declaration(self, it);
        }
        if !(self.dialect == Dialect::TypeScript && it.export_kind == ImportOrExportKind::Type) {
            self.report(
                "`export` (a cell is not a module: return the value instead)",
                it.span,
            );
        }
    }

    fn visit_export_declaration(&mut self, it: &ExportDeclaration<'a>) {
        let type_only = self.dialect == Dialect::TypeScript
            && matches!(
                &it.declaration,
                Declaration::TSTypeAliasDeclaration(_) | Declaration::TSInterfaceDeclaration(_)
            );
        if !type_only && self.in_namespace == 0 {
            self.report(
                "`export` (a cell is not a module: return the value instead)",
                it.span,
            );
        }
        walk::walk_export_declaration(self, it);
    }

    fn visit_export_default_declaration(&mut self, it: &ExportDefaultDeclaration<'a>) {
        self.report(
            "`export default` (a cell is not a module: return the value instead)",
            it.span,
        );
    }

    fn visit_ts_import_equals_declaration(&mut self, it: &TSImportEqualsDeclaration<'a>) {
        self.report("`import ... = require(...)`", it.span);
    }

    fn visit_ts_export_assignment(&mut self, it: &TSExportAssignment<'a>) {
        self.report("`export =`", it.span);
    }

    fn visit_unary_expression(&mut self, it: &UnaryExpression<'a>) {
        if it.operator == UnaryOperator::Typeof
            && let Expression::Identifier(ident) = &it.argument
        {
            self.typeof_operand = Some(ident.span);
        }
        walk::walk_unary_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if let Some(name) = self.global_named(&it.callee)
            && LOADER_FUNCTIONS.contains(&name)
        {
            let what = match it.arguments.first() {
                Some(Argument::StringLiteral(s)) => format!("`{name}(\"{}\")`", s.value),
                _ => format!("`{name}(...)`"),
            };
            self.report(what, it.span);
        } else if let Some(member) = self.loader_member(&it.callee) {
            self.report(format!("{member}(...)"), it.span);
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_expression(&mut self, it: &Expression<'a>) {
        if let Some(member) = self.loader_member(it) {
            self.report(member, it.span());
        }
        walk::walk_expression(self, it);
    }

    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        // `require` as a value (aliased, passed on) is the loader too;
        // `typeof require` is a harmless check.
        if it.name == "require" && self.is_global(it) && self.typeof_operand != Some(it.span) {
            self.report("`require`", it.span);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(source: &str) -> ModuleAccess {
        check_module_access(source, Dialect::JavaScript).expect_err(source)
    }

    #[test]
    fn reports_what_and_where() {
        let e = denied("const a = 1;\n  const fs = require('fs');");
        assert_eq!((e.line, e.column), (2, 14));
        assert!(e.what.contains("require(\"fs\")"), "{e}");
        assert!(e.to_string().contains("call tools instead"), "{e}");
    }

    #[test]
    fn own_require_functions_are_fine() {
        let ok = "function require(x) { return x * 2; }\nreturn require(21);";
        assert!(check_module_access(ok, Dialect::JavaScript).is_ok());
        assert!(check_module_access("return typeof require", Dialect::JavaScript).is_ok());
    }

    #[test]
    fn namespace_members_are_not_module_exports() {
        let ts = "namespace N { export const v = 9; export function f() { return 1 } }\nreturn N.v + N.f();";
        assert!(check_module_access(ts, Dialect::TypeScript).is_ok());
        let declared = "declare module 'x' { export const y: number }\nreturn 1";
        assert!(check_module_access(declared, Dialect::TypeScript).is_ok());
        // A real export next to a namespace is still refused.
        let mixed = "namespace N { export const v = 9 }\nexport const w = N.v;";
        assert!(check_module_access(mixed, Dialect::TypeScript).is_err());
    }

    #[test]
    fn sloppy_code_is_still_checked() {
        // `with` is no module syntax: the check falls back to the engine's view.
        let e = denied("with (Math) { x = max(1, 2) }\nawait import('x');");
        assert!(e.what.contains("import()"), "{e}");
    }
}
