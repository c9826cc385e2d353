//! What a cell names statically of a few globals (`MCP`, `tools`, plugin
//! namespaces), for the runtime's pre-run name check.
//!
//! Pure syntax: this module knows no catalog. It reports each static
//! member chain rooted at a watched global (`MCP.notes.deleteNote`,
//! `tools["call"]`) and how it is used — called, with the shape of its
//! literal arguments, or only mentioned (a feature test such as
//! `if (MCP.github)`, `typeof`, `"x" in MCP`, optional chaining, a value
//! passed on). The runtime decides what is provably wrong; anything this
//! module cannot see statically (computed names, a global shadowed by a
//! binding anywhere in the cell, a `with` statement) is simply not
//! reported, so it is left to run time.

use std::collections::HashSet;

use oxc_ast::ast::{
    Argument, ArrayExpressionElement, ArrowFunctionExpression, BinaryExpression, BinaryOperator,
    BindingIdentifier, CallExpression, ChainExpression, Expression, Function, ObjectExpression,
    ObjectPropertyKind, Program, PropertyKey, TryStatement, UnaryOperator, WithStatement,
};
use oxc_ast_visit::{Visit, walk};
use oxc_semantic::ScopeFlags;
use oxc_span::GetSpan;

/// At most this many uses are reported per cell (a generated cell with
/// thousands of calls keeps the check's cost bounded).
pub const MAX_REPORTED_USES: usize = 2048;

/// What a cell names of the watched globals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellReferences {
    /// Every use, in source order.
    pub uses: Vec<GlobalUse>,
    /// The mentioned paths, indexed once (see [`CellReferences::mentioned`]).
    guards: Guards,
}

/// Mentioned paths as `root\0seg\0seg` keys: whole paths, and every
/// non-empty prefix of them.
#[derive(Debug, Clone, Default, PartialEq)]
struct Guards {
    whole: HashSet<String>,
    prefixes: HashSet<String>,
}

fn guard_key(root: &str, path: &[String]) -> String {
    let mut key = root.to_owned();
    for segment in path {
        key.push('\0');
        key.push_str(segment);
    }
    key
}

impl CellReferences {
    fn new(uses: Vec<GlobalUse>) -> CellReferences {
        let mut guards = Guards::default();
        // The bare global (`Object.keys(MCP)`) and computed members guard
        // no particular name.
        for u in uses
            .iter()
            .filter(|u| u.usage == Usage::Mentioned && !u.path.is_empty())
        {
            guards.whole.insert(guard_key(&u.root, &u.path));
            for k in 1..=u.path.len() {
                guards.prefixes.insert(guard_key(&u.root, &u.path[..k]));
            }
        }
        CellReferences { uses, guards }
    }

    /// Whether the cell mentions `root.path`, a path it starts with, or a
    /// longer path starting with it, as a value: a feature test, an
    /// optional chain, a value passed on. A call the cell guards that way
    /// is not provably wrong. Hash lookups: a cell with thousands of names
    /// costs no quadratic scan.
    pub fn mentioned(&self, root: &str, path: &[String]) -> bool {
        if path.is_empty() {
            return false;
        }
        self.guards.prefixes.contains(&guard_key(root, path))
            || (1..=path.len()).any(|k| self.guards.whole.contains(&guard_key(root, &path[..k])))
    }
}

/// One static member chain rooted at a watched global.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalUse {
    /// The global (`MCP`, `tools`, a namespace's name).
    pub root: String,
    /// The static member names after it (`["notes", "deleteNote"]`).
    pub path: Vec<String>,
    /// The chain continues with a computed, non-literal member after
    /// `path` (`MCP[server]`): whatever it reaches is unknown.
    pub dynamic: bool,
    /// How the chain is used.
    pub usage: Usage,
    /// 1-based line of the chain in the cell.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

/// How a chain is used.
#[derive(Debug, Clone, PartialEq)]
pub enum Usage {
    /// Called directly (`MCP.a.b(...)`), not through optional chaining.
    Called {
        /// Its arguments' shapes.
        args: Vec<ArgShape>,
        /// A failure may be handled by the cell: the call is inside a
        /// `try` with a `catch`, its promise gets `.catch(...)` /
        /// `.then(_, onRejected)`, it is an element of
        /// `Promise.allSettled([...])` / `Promise.any([...])`, or it is in
        /// a function the cell's own code calls (which may catch), rather
        /// than in the cell body or a callback of an array method.
        handled: bool,
    },
    /// Named without being called directly.
    Mentioned,
}

/// What is statically known of one argument.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgShape {
    /// A string literal (or a template without substitutions).
    Str(String),
    /// An object literal.
    Object(ObjectShape),
    /// Anything else (its kind, if known, but no more).
    Other(ValueKind),
}

/// An object literal's statically known keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectShape {
    /// `(key, kind of its value)` for every plain key, in order.
    pub keys: Vec<(String, ValueKind)>,
    /// A spread or a computed key: the object may hold more keys.
    pub open: bool,
}

/// The JSON kind of a literal value, when the syntax proves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A string (literal or template).
    String,
    /// A number literal; `integer` when it has no fraction.
    Number {
        /// The value is a whole number.
        integer: bool,
    },
    /// `true` / `false`.
    Boolean,
    /// `null`.
    Null,
    /// An array literal.
    Array,
    /// An object literal.
    Object,
    /// Not provable from the syntax.
    Unknown,
}

/// Whether `source` contains any watched name at all (a cheap exit before
/// any parse).
pub(crate) fn mentions_any(source: &str, watched: &[&str]) -> bool {
    watched.iter().any(|w| !w.is_empty() && source.contains(w))
}

/// Collects the uses of `watched` in a parsed program. `text` is the parsed
/// text; `shift` the length of a wrapper before the cell on its first line.
pub(crate) fn collect(
    program: &Program<'_>,
    text: &str,
    shift: usize,
    watched: &[&str],
) -> CellReferences {
    let mut collector = Collector {
        watched,
        text,
        line_starts: std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect(),
        shift,
        uses: Vec::new(),
        bindings: HashSet::new(),
        handled: 0,
        optional: 0,
        opaque: 0,
        transparent: HashSet::new(),
        has_with: false,
    };
    collector.visit_program(program);
    if collector.has_with {
        // `with (obj) { MCP.x() }` may not mean the global at all.
        return CellReferences::default();
    }
    let Collector { uses, bindings, .. } = collector;
    CellReferences::new(
        uses.into_iter()
            .filter(|u| !bindings.contains(u.root.as_str()))
            .collect(),
    )
}

struct Collector<'w, 't> {
    watched: &'w [&'w str],
    text: &'t str,
    /// Byte offsets where each line of `text` starts: a use's position is
    /// a binary search, not a scan from the top per use.
    line_starts: Vec<usize>,
    shift: usize,
    uses: Vec<GlobalUse>,
    /// Every name the cell binds anywhere: a watched global bound by the
    /// cell (`const tools = [...]`) is the cell's own, wherever it is used.
    bindings: HashSet<String>,
    /// Inside a `try` with a `catch`, or an argument of a settling
    /// combinator.
    handled: u32,
    /// Inside an optional chain.
    optional: u32,
    /// Inside a function whose callers are not known (a helper the cell
    /// may call inside `try`): failures there are not provably unhandled.
    opaque: u32,
    /// Start offsets of functions passed straight to an array method
    /// (`items.map(x => ...)`): they run where the method is called.
    transparent: HashSet<u32>,
    has_with: bool,
}

/// Array and promise methods whose callback runs as part of the call:
/// the callback's failures surface where the method is called.
const TRANSPARENT_CALLERS: [&str; 11] = [
    "map",
    "flatMap",
    "forEach",
    "filter",
    "reduce",
    "some",
    "every",
    "find",
    "findIndex",
    "then",
    "finally",
];

/// A static member chain: the root identifier, the member names, and
/// whether a computed non-literal member follows.
struct Chain {
    root: String,
    path: Vec<String>,
    dynamic: bool,
}

fn literal_member(expr: &Expression<'_>) -> Option<String> {
    match expr {
        Expression::StringLiteral(s) => Some(s.value.to_string()),
        Expression::TemplateLiteral(t) if t.expressions.is_empty() => t
            .quasis
            .first()
            .and_then(|q| q.value.cooked.as_ref())
            .map(|c| c.to_string()),
        _ => None,
    }
}

impl Collector<'_, '_> {
    fn chain(&self, expr: &Expression<'_>) -> Option<Chain> {
        match expr {
            Expression::Identifier(ident) => {
                self.watched.contains(&ident.name.as_str()).then(|| Chain {
                    root: ident.name.to_string(),
                    path: Vec::new(),
                    dynamic: false,
                })
            }
            Expression::StaticMemberExpression(m) => {
                let mut chain = self.chain(&m.object)?;
                if !chain.dynamic {
                    chain.path.push(m.property.name.to_string());
                }
                Some(chain)
            }
            Expression::ComputedMemberExpression(m) => {
                let mut chain = self.chain(&m.object)?;
                if !chain.dynamic {
                    match literal_member(&m.expression) {
                        Some(name) => chain.path.push(name),
                        None => chain.dynamic = true,
                    }
                }
                Some(chain)
            }
            Expression::ParenthesizedExpression(p) => self.chain(&p.expression),
            _ => None,
        }
    }

    /// Visits the computed, non-literal members of a chain (`MCP[name]`:
    /// `name`), which may name things of their own.
    fn visit_computed_members(&mut self, expr: &Expression<'_>) {
        match expr {
            Expression::StaticMemberExpression(m) => self.visit_computed_members(&m.object),
            Expression::ComputedMemberExpression(m) => {
                if literal_member(&m.expression).is_none() {
                    walk_expression_of(self, &m.expression);
                }
                self.visit_computed_members(&m.object);
            }
            Expression::ParenthesizedExpression(p) => self.visit_computed_members(&p.expression),
            _ => {}
        }
    }

    fn record(&mut self, chain: Chain, usage: Usage, offset: u32) {
        if self.uses.len() >= MAX_REPORTED_USES {
            return;
        }
        let offset = (offset as usize).min(self.text.len());
        let line_index = self
            .line_starts
            .partition_point(|&start| start <= offset)
            .saturating_sub(1);
        let line_start = self.line_starts.get(line_index).copied().unwrap_or(0);
        let line = line_index as u32 + 1;
        let column = self
            .text
            .get(line_start..offset)
            .map_or(0, |s| s.encode_utf16().count()) as u32
            + 1;
        let column = if line == 1 {
            column.saturating_sub(self.shift as u32).max(1)
        } else {
            column
        };
        self.uses.push(GlobalUse {
            root: chain.root,
            path: chain.path,
            dynamic: chain.dynamic,
            usage,
            line,
            column,
        });
    }

    /// The shape of one call argument.
    fn arg_shape(arg: &Argument<'_>) -> ArgShape {
        match arg {
            Argument::SpreadElement(_) => ArgShape::Other(ValueKind::Unknown),
            other => match other.as_expression() {
                Some(expr) => expr_shape(expr),
                None => ArgShape::Other(ValueKind::Unknown),
            },
        }
    }
}

fn expr_shape(expr: &Expression<'_>) -> ArgShape {
    match expr {
        Expression::ParenthesizedExpression(p) => expr_shape(&p.expression),
        Expression::ObjectExpression(object) => ArgShape::Object(object_shape(object)),
        other => match literal_member(other) {
            Some(s) => ArgShape::Str(s),
            None => ArgShape::Other(value_kind(other)),
        },
    }
}

fn object_shape(object: &ObjectExpression<'_>) -> ObjectShape {
    let mut shape = ObjectShape {
        keys: Vec::new(),
        open: false,
    };
    for property in &object.properties {
        match property {
            ObjectPropertyKind::SpreadProperty(_) => shape.open = true,
            ObjectPropertyKind::ObjectProperty(p) => {
                let key = match &p.key {
                    PropertyKey::StaticIdentifier(id) if !p.computed => Some(id.name.to_string()),
                    PropertyKey::StringLiteral(s) => Some(s.value.to_string()),
                    PropertyKey::NumericLiteral(n) if !p.computed => Some(n.value.to_string()),
                    _ => None,
                };
                match key {
                    // `__proto__: x` sets the prototype, not a key.
                    Some(key) if key != "__proto__" => {
                        let kind = if p.method || p.kind != oxc_ast::ast::PropertyKind::Init {
                            ValueKind::Unknown
                        } else {
                            value_kind(&p.value)
                        };
                        shape.keys.push((key, kind));
                    }
                    _ => shape.open = true,
                }
            }
        }
    }
    shape
}

/// The JSON kind a literal expression provably has.
fn value_kind(expr: &Expression<'_>) -> ValueKind {
    match expr {
        Expression::ParenthesizedExpression(p) => value_kind(&p.expression),
        Expression::StringLiteral(_) | Expression::TemplateLiteral(_) => ValueKind::String,
        Expression::NumericLiteral(n) => number_kind(n.value),
        Expression::UnaryExpression(u)
            if matches!(
                u.operator,
                UnaryOperator::UnaryNegation | UnaryOperator::UnaryPlus
            ) =>
        {
            match &u.argument {
                Expression::NumericLiteral(n) => number_kind(n.value),
                _ => ValueKind::Unknown,
            }
        }
        Expression::BooleanLiteral(_) => ValueKind::Boolean,
        Expression::NullLiteral(_) => ValueKind::Null,
        Expression::ArrayExpression(a)
            if !a
                .elements
                .iter()
                .any(|e| matches!(e, ArrayExpressionElement::SpreadElement(_))) =>
        {
            ValueKind::Array
        }
        Expression::ObjectExpression(_) => ValueKind::Object,
        _ => ValueKind::Unknown,
    }
}

fn number_kind(value: f64) -> ValueKind {
    if value.is_finite() {
        ValueKind::Number {
            integer: value.fract() == 0.0,
        }
    } else {
        // Infinity / NaN become null in JSON.
        ValueKind::Unknown
    }
}

/// `promise.catch(...)`, `promise.then(a, b)`: a rejection of `promise` is
/// handled.
fn handles_rejection(call: &CallExpression<'_>) -> bool {
    match &call.callee {
        Expression::StaticMemberExpression(m) => {
            m.property.name == "catch" || (m.property.name == "then" && call.arguments.len() >= 2)
        }
        _ => false,
    }
}

/// `Promise.allSettled(...)` / `Promise.any(...)`: rejections of its
/// elements are settled, not thrown.
fn settles_arguments(call: &CallExpression<'_>) -> bool {
    match &call.callee {
        Expression::StaticMemberExpression(m) => {
            matches!(&m.object, Expression::Identifier(id) if id.name == "Promise")
                && matches!(m.property.name.as_str(), "allSettled" | "any")
        }
        _ => false,
    }
}

impl<'a> Visit<'a> for Collector<'_, '_> {
    fn visit_binding_identifier(&mut self, it: &BindingIdentifier<'a>) {
        if self.watched.contains(&it.name.as_str()) {
            self.bindings.insert(it.name.to_string());
        }
    }

    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        // Offset 1: the engine's wrapper around the cell, i.e. the cell body.
        let opaque = it.span.start != 1 && !self.transparent.contains(&it.span.start);
        self.opaque += u32::from(opaque);
        walk::walk_function(self, it, flags);
        self.opaque -= u32::from(opaque);
    }

    fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
        let opaque = !self.transparent.contains(&it.span.start);
        self.opaque += u32::from(opaque);
        walk::walk_arrow_function_expression(self, it);
        self.opaque -= u32::from(opaque);
    }

    fn visit_with_statement(&mut self, it: &WithStatement<'a>) {
        self.has_with = true;
        walk::walk_with_statement(self, it);
    }

    fn visit_try_statement(&mut self, it: &TryStatement<'a>) {
        let catches = it.handler.is_some();
        self.handled += u32::from(catches);
        self.visit_block_statement(&it.block);
        self.handled -= u32::from(catches);
        if let Some(handler) = &it.handler {
            self.visit_catch_clause(handler);
        }
        if let Some(finalizer) = &it.finalizer {
            self.visit_block_statement(finalizer);
        }
    }

    fn visit_chain_expression(&mut self, it: &ChainExpression<'a>) {
        self.optional += 1;
        walk::walk_chain_expression(self, it);
        self.optional -= 1;
    }

    fn visit_binary_expression(&mut self, it: &BinaryExpression<'a>) {
        // `"github" in MCP`: a feature test of MCP.github.
        if it.operator == BinaryOperator::In
            && let Some(name) = literal_member(&it.left)
            && let Some(mut chain) = self.chain(&it.right)
        {
            if !chain.dynamic {
                chain.path.push(name);
            }
            self.record(chain, Usage::Mentioned, it.span.start);
            return;
        }
        walk::walk_binary_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if let Expression::StaticMemberExpression(m) = &it.callee
            && TRANSPARENT_CALLERS.contains(&m.property.name.as_str())
        {
            for arg in &it.arguments {
                match arg {
                    Argument::ArrowFunctionExpression(f) => {
                        self.transparent.insert(f.span.start);
                    }
                    Argument::FunctionExpression(f) => {
                        self.transparent.insert(f.span.start);
                    }
                    _ => {}
                }
            }
        }
        if let Some(chain) = self.chain(&it.callee) {
            let direct = !chain.dynamic && self.optional == 0 && !it.optional;
            let usage = if direct {
                Usage::Called {
                    args: it.arguments.iter().map(Collector::arg_shape).collect(),
                    handled: self.handled > 0 || self.opaque > 0,
                }
            } else {
                Usage::Mentioned
            };
            self.record(chain, usage, it.callee.span().start);
            self.visit_computed_members(&it.callee);
            let settles = settles_arguments(it);
            self.handled += u32::from(settles);
            for arg in &it.arguments {
                self.visit_argument(arg);
            }
            self.handled -= u32::from(settles);
            return;
        }
        if handles_rejection(it)
            && let Expression::StaticMemberExpression(m) = &it.callee
        {
            self.handled += 1;
            self.visit_expression(&m.object);
            self.handled -= 1;
            for arg in &it.arguments {
                self.visit_argument(arg);
            }
            return;
        }
        let settles = settles_arguments(it);
        self.visit_expression(&it.callee);
        self.handled += u32::from(settles);
        for arg in &it.arguments {
            self.visit_argument(arg);
        }
        self.handled -= u32::from(settles);
    }

    fn visit_expression(&mut self, it: &Expression<'a>) {
        if let Some(chain) = self.chain(it) {
            self.record(chain, Usage::Mentioned, it.span().start);
            self.visit_computed_members(it);
            return;
        }
        walk::walk_expression(self, it);
    }
}

/// Visits an expression with the collector (lifetimes of the visitor's
/// arena differ from the chain helpers').
fn walk_expression_of<'a>(collector: &mut Collector<'_, '_>, expr: &Expression<'a>) {
    Visit::visit_expression(collector, expr);
}

/// Collects the uses of `watched` in a JavaScript cell body (for a
/// TypeScript cell, its transformed JavaScript). A cell that does not
/// parse reports nothing: the engine reports its syntax error.
///
/// ```
/// use codemode_transform::{cell_references, Usage};
/// let refs = cell_references("if (MCP.github) await MCP.github.search({ q: 'x' })", &["MCP"]);
/// assert_eq!(refs.uses[0].usage, Usage::Mentioned);
/// assert!(matches!(refs.uses[1].usage, Usage::Called { .. }));
/// ```
pub fn cell_references(source: &str, watched: &[&str]) -> CellReferences {
    if !mentions_any(source, watched) {
        return CellReferences::default();
    }
    crate::check_cell_body_with_references(source, watched).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &[&str] = &["MCP", "tools"];

    fn uses(cell: &str) -> Vec<GlobalUse> {
        cell_references(cell, W).uses
    }

    fn called(u: &GlobalUse) -> (&[ArgShape], bool) {
        match &u.usage {
            Usage::Called { args, handled } => (args, *handled),
            Usage::Mentioned => panic!("not called: {u:?}"),
        }
    }

    #[test]
    fn static_calls_are_reported_with_their_position_and_arguments() {
        let u = uses(
            "const a = 1;\nawait MCP.notes.deleteNote({ id: 'x', force: true, n: -2.5, tags: [], o: {}, z: null, t: `a${a}` })",
        );
        assert_eq!(u.len(), 1);
        assert_eq!((u[0].line, u[0].column), (2, 7));
        assert_eq!(u[0].path, ["notes", "deleteNote"]);
        let (args, handled) = called(&u[0]);
        assert!(!handled);
        let ArgShape::Object(shape) = &args[0] else {
            panic!("{args:?}")
        };
        assert!(!shape.open);
        let kinds: Vec<(&str, ValueKind)> =
            shape.keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            kinds,
            [
                ("id", ValueKind::String),
                ("force", ValueKind::Boolean),
                ("n", ValueKind::Number { integer: false }),
                ("tags", ValueKind::Array),
                ("o", ValueKind::Object),
                ("z", ValueKind::Null),
                ("t", ValueKind::String),
            ]
        );
    }

    #[test]
    fn positions_agree_with_line_column() {
        let cell = "const é = 1;\n\n  await MCP.a.b({});\r\n\tx(MCP.c.d)";
        let wrapped = format!("{}{cell}{}", crate::CELL_PREFIX, crate::CELL_SUFFIX);
        for u in uses(cell) {
            let needle = format!("MCP.{}", u.path.join("."));
            let at = wrapped.find(&needle).unwrap();
            assert_eq!(
                (u.line, u.column),
                crate::line_column(cell, at - crate::CELL_PREFIX.len()),
                "{needle}"
            );
        }
    }

    #[test]
    fn first_line_columns_do_not_count_the_wrapper() {
        let u = uses("MCP.a.b()");
        assert_eq!((u[0].line, u[0].column), (1, 1));
    }

    #[test]
    fn string_literal_members_are_static_and_variables_are_dynamic() {
        let u = uses("await MCP['notes'][`delete_note`]({}); await MCP[s].x({})");
        assert_eq!(u[0].path, ["notes", "delete_note"]);
        assert!(!u[0].dynamic);
        assert!(u[1].dynamic);
        assert_eq!(u[1].usage, Usage::Mentioned);
        assert!(u[1].path.is_empty());
    }

    #[test]
    fn feature_tests_and_optional_chains_are_mentions() {
        let u = uses(
            "if (MCP.github) {} typeof MCP.x.y; 'gitlab' in MCP; await MCP.a?.b({}); await MCP.c.d?.({}); const f = MCP.e.f;",
        );
        let mentions: Vec<Vec<String>> = u
            .iter()
            .inspect(|u| assert_eq!(u.usage, Usage::Mentioned, "{u:?}"))
            .map(|u| u.path.clone())
            .collect();
        assert_eq!(
            mentions,
            [
                vec!["github"],
                vec!["x", "y"],
                vec!["gitlab"],
                vec!["a", "b"],
                vec!["c", "d"],
                vec!["e", "f"]
            ]
        );
        let refs = cell_references("if (MCP.github) await MCP.github.search({})", W);
        assert!(refs.mentioned("MCP", &["github".to_owned()]));
        assert!(!refs.mentioned("MCP", &["gitlab".to_owned()]));
    }

    #[test]
    fn handled_failures_are_marked() {
        for cell in [
            "try { await MCP.a.b({}) } catch (e) {}",
            "await MCP.a.b({}).catch(() => null)",
            "await MCP.a.b({}).then(x => x, e => null)",
            "await Promise.allSettled([MCP.a.b({}), 1])",
            "const err = async f => { try { return await f() } catch (e) { return e } }; await err(() => MCP.a.b({}))",
            "async function helper() { return MCP.a.b({}) } try { await helper() } catch {}",
        ] {
            let u = uses(cell);
            assert!(called(&u[0]).1, "{cell}");
        }
        for cell in [
            "try { await MCP.a.b({}) } finally {}",
            "await MCP.a.b({}).then(x => x)",
            "await Promise.all([MCP.a.b({})])",
            "try {} catch (e) {} await MCP.a.b({})",
            "await Promise.all(items.map(async (i) => MCP.a.b({ i })))",
            "for (const i of items) { await MCP.a.b({ i }) }",
            "items.forEach(function (i) { MCP.a.b({ i }) })",
        ] {
            let u = uses(cell);
            assert!(!called(&u[0]).1, "{cell}");
        }
    }

    #[test]
    fn shadowed_globals_and_with_are_not_reported() {
        assert!(uses("const tools = [1]; return tools.map(x => x)").is_empty());
        assert!(uses("function f(MCP) { return MCP.a.b() }").is_empty());
        assert!(uses("with (o) { MCP.a.b() }").is_empty());
        assert!(uses("return x.MCP.a.b()").is_empty());
        assert!(uses("return 'MCP.a.b()'").is_empty());
        assert_eq!(uses("const { MCP: m } = o; MCP.a.b()").len(), 1);
    }

    #[test]
    fn spreads_computed_keys_and_non_literals_are_open_or_unknown() {
        let u = uses("await MCP.a.b({ ...x, [k]: 1, v, n: f(), 'q': 1 }, 2, ...r)");
        let (args, _) = called(&u[0]);
        let ArgShape::Object(shape) = &args[0] else {
            panic!()
        };
        assert!(shape.open);
        assert_eq!(
            shape.keys,
            [
                ("v".to_owned(), ValueKind::Unknown),
                ("n".to_owned(), ValueKind::Unknown),
                ("q".to_owned(), ValueKind::Number { integer: true })
            ]
        );
        assert_eq!(
            args[1],
            ArgShape::Other(ValueKind::Number { integer: true })
        );
        assert_eq!(args[2], ArgShape::Other(ValueKind::Unknown));
    }

    #[test]
    fn arguments_and_callbacks_inside_calls_are_visited() {
        let u = uses(
            "await tools.call('plugin:a:b', { x: await MCP.s.t({}) }); items.map(i => tools.get_x(i))",
        );
        let paths: Vec<Vec<String>> = u.iter().map(|u| u.path.clone()).collect();
        assert_eq!(paths, [vec!["call"], vec!["s", "t"], vec!["get_x"]]);
        assert_eq!(called(&u[0]).0[0], ArgShape::Str("plugin:a:b".into()));
    }

    #[test]
    fn unparsable_cells_report_nothing() {
        assert!(uses("MCP.a.b(").is_empty());
        assert!(uses("}); MCP.a.b(); (async function () {").is_empty());
    }
}
