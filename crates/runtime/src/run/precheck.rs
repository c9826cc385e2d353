//! The pre-run name check: what a cell names statically of `MCP` and
//! `tools` ([`codemode_transform::CellReferences`]) resolved against the
//! run's catalog before the VM starts, so a misspelled or raw MCP tool name
//! fails the exec before its first nested call has any effect.
//!
//! Only what is provably wrong is refused: a direct, unguarded call
//! (`await MCP.notes.deleteNotes({...})`) of a server, tool or convenience
//! the run does not have; `tools.call("…")` / `tools.describe("…")` with a
//! literal id the catalog refuses; an object literal (no spread, no
//! computed key) missing a required key that has no default, or holding a
//! literal whose JSON type the tool's schema rules out. Everything else —
//! computed names, non-literal arguments, optional chains, names the cell
//! also feature-tests (`if (MCP.github)`), calls whose failure the cell
//! handles (`try`/`catch`, `.catch`, `Promise.allSettled`) — is left to run
//! time, where the same mistakes get coded errors too.

use codemode_transform::{ArgShape, CellReferences, GlobalUse, ObjectShape, Usage, ValueKind};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::catalog::mcp::McpServerView;
use crate::catalog::namespaces::RunNamespaces;

/// The globals the check follows.
pub(crate) const WATCHED_GLOBALS: [&str; 2] = ["MCP", "tools"];

/// The global that holds every visible plugin namespace (each is also a
/// global of its own name).
pub(crate) const NAMESPACES_GLOBAL: &str = "namespaces";

/// At most this many problems are listed in one refusal.
const MAX_LISTED: usize = 8;

/// A problem found before the run: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) line: u32,
    pub(crate) column: u32,
    pub(crate) message: String,
}

/// The provable mistakes in `refs` against `catalog`, in source order: at
/// most [`MAX_LISTED`] + 1 (the refusal lists the first ones; finding
/// suggestions for thousands would cost more than they are worth).
pub(crate) fn problems(refs: &CellReferences, catalog: &Catalog) -> Vec<Problem> {
    listed(refs, |used| {
        let Usage::Called {
            args,
            handled: false,
        } = &used.usage
        else {
            return None;
        };
        match used.root.as_str() {
            "MCP" => mcp_call(refs, catalog, used, args),
            "tools" => tools_call(refs, catalog, used, args),
            _ => None,
        }
    })
}

/// The problems `check` finds in the cell's uses, in source order, at
/// most [`MAX_LISTED`] + 1.
fn listed(
    refs: &CellReferences,
    mut check: impl FnMut(&GlobalUse) -> Option<String>,
) -> Vec<Problem> {
    let mut found = Vec::new();
    for used in &refs.uses {
        if found.len() > MAX_LISTED {
            break;
        }
        if let Some(message) = check(used) {
            found.push(Problem {
                line: used.line,
                column: used.column,
                message,
            });
        }
    }
    found
}

/// Every provable mistake in the cell's calls of plugin namespace members
/// (`Files.readFile(...)`, `namespaces.Files.readFile(...)`): a member the
/// run's serialized scope does not have. Members of data, arrays and
/// callables are left to run time, and so is calling a member that is not
/// a callable.
pub(crate) fn namespace_problems(
    refs: &CellReferences,
    namespaces: &RunNamespaces,
) -> Vec<Problem> {
    let trees: Vec<(&str, &Value)> = namespaces
        .descriptors
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|d| Some((d.get(0)?.as_str()?, d.get(2)?)))
                .collect()
        })
        .unwrap_or_default();
    listed(refs, |used| {
        if !matches!(used.usage, Usage::Called { handled: false, .. }) {
            return None;
        }
        let (global, path) = if used.root == NAMESPACES_GLOBAL {
            let (global, rest) = used.path.split_first()?;
            (global.as_str(), rest)
        } else if trees.iter().any(|(g, _)| *g == used.root) {
            (used.root.as_str(), used.path.as_slice())
        } else {
            return None;
        };
        if refs.mentioned(&used.root, &used.path) {
            return None;
        }
        match trees.iter().find(|(g, _)| *g == global) {
            None => Some(format!(
                "namespaces.{global} is not a plugin namespace of this run; its namespaces: {}",
                trees.iter().map(|(g, _)| *g).collect::<Vec<_>>().join(", ")
            )),
            Some((_, tree)) => missing_member(global, tree, path),
        }
    })
}

/// The first segment of `path` an object node of the scope tree does not
/// have (`{o: [[key, node], ...]}`); `None` when the path exists or leaves
/// the objects (data, arrays, callables).
fn missing_member(global: &str, tree: &Value, path: &[String]) -> Option<String> {
    let mut node = tree;
    for (i, segment) in path.iter().enumerate() {
        let members = node.get("o")?.as_array()?;
        let keys: Vec<&str> = members.iter().filter_map(|m| m.get(0)?.as_str()).collect();
        match members
            .iter()
            .find(|m| m.get(0).and_then(Value::as_str) == Some(segment.as_str()))
        {
            Some(member) => node = member.get(1)?,
            None => {
                let owner = std::iter::once(global)
                    .chain(path[..i].iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(".");
                let mut text = format!("{owner}.{segment} is not a member of {owner}");
                let near = nearest(segment, keys.iter().copied());
                if near.is_empty() {
                    text.push_str(&format!("; its members: {}", keys.join(", ")));
                } else {
                    let hints: Vec<String> = near.iter().map(|n| format!("{owner}.{n}")).collect();
                    text.push_str(&format!("; did you mean {}?", hints.join(", ")));
                }
                return Some(text);
            }
        }
    }
    None
}

/// The refusal for `problems` (non-empty), with positions mapped by `at`.
pub(crate) fn refusal(problems: &[Problem], at: impl Fn(u32, u32) -> (u32, u32)) -> String {
    let mut text = String::from(
        "the cell names tools this run does not have, or calls them with input their schema rules out; nothing ran (checked before the first call):",
    );
    for p in problems.iter().take(MAX_LISTED) {
        let (line, column) = at(p.line, p.column);
        text.push_str(&format!("\n- line {line}, column {column}: {}", p.message));
    }
    if problems.len() > MAX_LISTED {
        text.push_str("\n- and more: fix these and run the cell again");
    }
    text
}

fn mcp_call(
    refs: &CellReferences,
    catalog: &Catalog,
    used: &GlobalUse,
    args: &[ArgShape],
) -> Option<String> {
    let [server_name, rest @ ..] = used.path.as_slice() else {
        return None;
    };
    if rest.is_empty() {
        // `MCP.x(...)`: a server is not callable; left to run time.
        return None;
    }
    let namespace = catalog.mcp();
    let Some(server) = namespace.server(server_name) else {
        if refs.mentioned("MCP", std::slice::from_ref(server_name)) {
            return None;
        }
        return Some(namespace.unknown_server_message(server_name));
    };
    let [tool_name] = rest else {
        // `MCP.s.resources.list(...)` and deeper: left to run time.
        return None;
    };
    if matches!(tool_name.as_str(), "$api" | "resources" | "prompts") {
        return None;
    }
    match server.tools.iter().find(|t| &t.js_name == tool_name) {
        Some(tool) => input_problem(
            || format!("MCP.{}.{}", server.js_name, tool.js_name),
            &tool.entry.parameters,
            args.first(),
        ),
        None if refs.mentioned("MCP", &used.path) => None,
        None => Some(server.unknown_tool_message(tool_name, namespace.servers())),
    }
}

fn tools_call(
    refs: &CellReferences,
    catalog: &Catalog,
    used: &GlobalUse,
    args: &[ArgShape],
) -> Option<String> {
    let [name] = used.path.as_slice() else {
        return None;
    };
    match name.as_str() {
        "search" => None,
        "describe" => match args.first() {
            Some(ArgShape::Str(id)) => catalog
                .describe(id)
                .err()
                .map(|m| format!("tools.describe: {m}")),
            _ => None,
        },
        "call" => match args.first() {
            Some(ArgShape::Str(id)) => match catalog.callable(id) {
                Ok(entry) => input_problem(
                    || format!("tools.call(\"{id}\")"),
                    &entry.parameters,
                    args.get(1),
                ),
                Err(m) => Some(format!("tools.call: {m}")),
            },
            _ => None,
        },
        _ => match catalog.conveniences().iter().find(|(n, _)| n == name) {
            Some((_, id)) => catalog.get(id).and_then(|entry| {
                input_problem(|| format!("tools.{name}"), &entry.parameters, args.first())
            }),
            None if refs.mentioned("tools", &used.path) => None,
            None => Some(catalog.unknown_convenience_message(name)),
        },
    }
}

/// What is provably wrong with `arg` as the input of a tool with `schema`.
/// `label` names the call; it is only built for a problem.
fn input_problem(
    label: impl Fn() -> String,
    schema: &Value,
    arg: Option<&ArgShape>,
) -> Option<String> {
    let Some(ArgShape::Object(shape)) = arg else {
        return None;
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut wrong = Vec::new();
    if !shape.open
        && let Some(required) = schema.get("required").and_then(Value::as_array)
    {
        let missing: Vec<String> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|key| !has_key(shape, key))
            .filter(|key| {
                // A default fills the key at run time (see mcp::prepare_input).
                properties
                    .and_then(|p| p.get(*key))
                    .and_then(|p| p.get("default"))
                    .is_none()
            })
            .map(|key| format!("`{key}`"))
            .collect();
        if !missing.is_empty() {
            wrong.push(format!(
                "missing required {} {}",
                if missing.len() == 1 { "key" } else { "keys" },
                missing.join(", ")
            ));
        }
    }
    if let Some(properties) = properties {
        for (key, kind) in &shape.keys {
            if let Some(wanted) = properties.get(key).and_then(contradicted_type(*kind)) {
                wrong.push(format!(
                    "`{key}` is {} but the schema wants {wanted}",
                    kind_name(*kind)
                ));
            }
        }
    }
    if wrong.is_empty() {
        return None;
    }
    Some(format!(
        "{}: {}; see its schema with tools.describe(id), API.read(\"mcp/<server>.d.ts\") or MCP.<server>.$api(\"<tool>\")",
        label(),
        wrong.join("; ")
    ))
}

fn has_key(shape: &ObjectShape, key: &str) -> bool {
    shape.keys.iter().any(|(k, _)| k == key)
}

/// For a literal of `kind`: the property schema's `type` when it provably
/// rules the literal out (`None` when it allows it or says too little: no
/// `type`, or combinators/references that could widen it).
fn contradicted_type(kind: ValueKind) -> impl Fn(&Value) -> Option<String> {
    move |property| {
        if kind == ValueKind::Unknown {
            return None;
        }
        let object = property.as_object()?;
        if ["anyOf", "oneOf", "allOf", "$ref", "not", "if"]
            .iter()
            .any(|k| object.contains_key(*k))
        {
            return None;
        }
        let types: Vec<&str> = match object.get("type")? {
            Value::String(t) => vec![t.as_str()],
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            _ => return None,
        };
        let known = [
            "string", "number", "integer", "boolean", "null", "array", "object",
        ];
        if types.is_empty() || types.iter().any(|t| !known.contains(t)) {
            return None;
        }
        let allowed = types.iter().any(|t| {
            matches!(
                (kind, *t),
                (ValueKind::String, "string")
                    | (ValueKind::Number { .. }, "number")
                    | (ValueKind::Number { integer: true }, "integer")
                    | (ValueKind::Boolean, "boolean")
                    | (ValueKind::Null, "null")
                    | (ValueKind::Array, "array")
                    | (ValueKind::Object, "object")
            )
        });
        (!allowed).then(|| types.join(" or "))
    }
}

fn kind_name(kind: ValueKind) -> &'static str {
    match kind {
        ValueKind::String => "a string",
        ValueKind::Number { integer: true } => "a whole number",
        ValueKind::Number { integer: false } => "a number with a fraction",
        ValueKind::Boolean => "a boolean",
        ValueKind::Null => "null",
        ValueKind::Array => "an array",
        ValueKind::Object => "an object",
        ValueKind::Unknown => "a value",
    }
}

impl McpServerView {
    /// The message for `MCP.<server>.<asked>` when the server has no such
    /// tool: the nearest names on this server, the raw MCP name's binding,
    /// or the server that does have it.
    pub(crate) fn unknown_tool_message(&self, asked: &str, servers: &[McpServerView]) -> String {
        let mut text = format!(
            "MCP.{}.{asked} is not a tool of MCP.{}",
            self.js_name, self.js_name
        );
        let near = self.nearest_tools(asked);
        if !near.is_empty() {
            text.push_str(&format!("; did you mean {}?", near.join(", ")));
        } else if let Some(elsewhere) = servers.iter().find_map(|s| {
            s.tools
                .iter()
                .find(|t| t.js_name == asked || t.entry.name == asked)
                .map(|t| format!("MCP.{}.{}", s.js_name, t.js_name))
        }) {
            text.push_str(&format!("; another server has it: {elsewhere}"));
        } else {
            text.push_str(&format!(
                "; its tools: {}",
                self.tool_list(12).unwrap_or_else(|| "none".into())
            ));
        }
        text.push_str(
            " (tools are called by their JavaScript names; API.search(query) finds tools across all servers)",
        );
        text
    }

    /// Up to three `MCP.<server>.<tool>` paths close to `asked`: the tool
    /// whose MCP name it is first, then by edit distance.
    fn nearest_tools(&self, asked: &str) -> Vec<String> {
        let path = |js: &str| format!("MCP.{}.{js}", self.js_name);
        if let Some(tool) = self.tools.iter().find(|t| {
            t.entry.name == asked || t.js_name == crate::catalog::mcp::js_identifier(asked)
        }) {
            let mut hint = path(&tool.js_name);
            if tool.entry.name == asked {
                hint.push_str(&format!(" (the MCP name \"{asked}\" is bound as that)"));
            }
            return vec![hint];
        }
        nearest(asked, self.tools.iter().map(|t| t.js_name.as_str()))
            .into_iter()
            .map(path)
            .collect()
    }

    fn tool_list(&self, at_most: usize) -> Option<String> {
        if self.tools.is_empty() {
            return None;
        }
        let names: Vec<&str> = self
            .tools
            .iter()
            .take(at_most)
            .map(|t| t.js_name.as_str())
            .collect();
        let more = self.tools.len().saturating_sub(at_most);
        let mut text = names.join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        Some(text)
    }
}

impl crate::catalog::mcp::McpNamespace {
    /// The message for `MCP.<asked>` when the run has no such server.
    pub(crate) fn unknown_server_message(&self, asked: &str) -> String {
        let mut text = format!("MCP.{asked} is not an MCP server of this run");
        let exact = self.servers().iter().find(|s| {
            s.info.name == asked || s.js_name == crate::catalog::mcp::js_identifier(asked)
        });
        let near: Vec<String> = match exact {
            Some(s) => vec![format!("MCP.{}", s.js_name)],
            None => nearest(asked, self.servers().iter().map(|s| s.js_name.as_str()))
                .into_iter()
                .map(|s| format!("MCP.{s}"))
                .collect(),
        };
        if !near.is_empty() {
            text.push_str(&format!("; did you mean {}?", near.join(", ")));
        } else if let Some(s) = self.servers().iter().find_map(|s| {
            s.tools
                .iter()
                .find(|t| t.js_name == asked || t.entry.name == asked)
                .map(|t| format!("MCP.{}.{}", s.js_name, t.js_name))
        }) {
            text.push_str(&format!("; a tool of that name is {s}"));
        } else if self.is_empty() {
            text.push_str("; this run has no MCP servers");
        } else {
            let names: Vec<&str> = self
                .servers()
                .iter()
                .take(20)
                .map(|s| s.js_name.as_str())
                .collect();
            text.push_str(&format!("; its servers: {}", names.join(", ")));
            if self.servers().len() > 20 {
                text.push_str(&format!(" and {} more", self.servers().len() - 20));
            }
        }
        text.push_str(" (API.search(query) finds tools across all servers)");
        text
    }
}

impl Catalog {
    /// The message for `tools.<asked>(...)` when no convenience has that
    /// name.
    pub(crate) fn unknown_convenience_message(&self, asked: &str) -> String {
        let same_name: Vec<&str> = self
            .entries()
            .iter()
            .filter(|e| e.guest_visible() && e.name == asked)
            .map(|e| e.id.as_str())
            .collect();
        if !same_name.is_empty() {
            let calls: Vec<String> = same_name
                .iter()
                .map(|id| format!("tools.call(\"{id}\", input)"))
                .collect();
            return format!(
                "tools.{asked} is not a function: the name is not unique or not an identifier in this run; call {}",
                calls.join(" or ")
            );
        }
        let names = nearest(asked, self.conveniences().iter().map(|(n, _)| n.as_str()));
        let mut text = format!("tools.{asked} is not a tool of this run");
        if !names.is_empty() {
            let hints: Vec<String> = names.iter().map(|n| format!("tools.{n}")).collect();
            text.push_str(&format!("; did you mean {}?", hints.join(", ")));
        } else if self.mcp().servers().iter().any(|s| {
            s.tools
                .iter()
                .any(|t| t.js_name == asked || t.entry.name == asked)
        }) {
            text.push_str("; MCP tools are called as MCP.<server>.<tool>({...}) (API.search(query) finds them)");
        }
        text.push_str(" (tools.search(query) ranks the catalog)");
        text
    }
}

/// Up to three of `names` close to `asked`: same words in another case or
/// separator style first, then within an edit distance of about a third of
/// the name.
pub(crate) fn nearest<'a>(asked: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    if asked.len() > 256 {
        return Vec::new();
    }
    let folded = fold(asked);
    let mut scored: Vec<(usize, &str)> = names
        .filter_map(|name| {
            let other = fold(name);
            if other == folded {
                return Some((0, name));
            }
            let threshold = (folded.chars().count() / 3).clamp(1, 4);
            if other.len().abs_diff(folded.len()) > threshold {
                return None;
            }
            let d = crate::suggest::levenshtein(&folded, &other);
            (d <= threshold).then_some((d, name))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// Lower case without separators: `delete_note`, `deleteNote` and
/// `Delete-Note` fold alike.
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ToolDefinition, ToolPolicy, ToolSource};
    use serde_json::json;

    fn catalog() -> Catalog {
        let schema = json!({
            "type": "object",
            "properties": {
                "id": { "type": "string" },
                "new_title": { "type": "string" },
                "count": { "type": "integer" },
                "mode": { "type": "string", "default": "fast" },
                "any": { "anyOf": [{ "type": "string" }, { "type": "number" }] }
            },
            "required": ["id", "new_title", "mode"]
        });
        Catalog::build(
            vec![
                ToolDefinition::new(ToolSource::Mcp, "notes", "delete_note")
                    .with_parameters(schema.clone()),
                ToolDefinition::new(ToolSource::Mcp, "notes", "rename_note")
                    .with_parameters(schema.clone()),
                ToolDefinition::new(ToolSource::Mcp, "github", "search_issues"),
                ToolDefinition::new(ToolSource::Plugin, "files", "read_file")
                    .with_parameters(schema),
                ToolDefinition::new(ToolSource::Plugin, "a", "dup"),
                ToolDefinition::new(ToolSource::Plugin, "b", "dup"),
            ],
            &ToolPolicy::default(),
        )
        .unwrap()
    }

    fn check(cell: &str) -> Vec<String> {
        let refs = codemode_transform::cell_references(cell, &WATCHED_GLOBALS);
        problems(&refs, &catalog())
            .into_iter()
            .map(|p| p.message)
            .collect()
    }

    /// Asserts of each `(cell, expected)` that the cell's first problem
    /// contains `expected`.
    fn assert_first_problems(cases: &[(&str, &str)]) {
        for &(cell, expected) in cases {
            let problems = check(cell);
            assert!(
                problems.first().is_some_and(|p| p.contains(expected)),
                "{cell}: {expected:?} not in {problems:?}"
            );
        }
    }

    #[test]
    fn raw_and_misspelled_mcp_names_get_the_binding() {
        let raw = "await MCP.notes.delete_note({ id: 'a', new_title: 'b' })";
        assert_eq!(check(raw).len(), 1);
        assert_first_problems(&[
            (
                raw,
                "did you mean MCP.notes.deleteNote (the MCP name \"delete_note\"",
            ),
            (
                "await MCP.notes.deleteNotes({ id: 'a', new_title: 'b' })",
                "did you mean MCP.notes.deleteNote?",
            ),
            ("await MCP.note.deleteNote({})", "did you mean MCP.notes?"),
            (
                "await MCP.notes.searchIssues({})",
                "another server has it: MCP.github.searchIssues",
            ),
        ]);
    }

    #[test]
    fn literal_inputs_are_checked_against_the_schema() {
        let missing = check("await MCP.notes.renameNote({ id: 'a' })");
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0].contains("missing required key `new_title`"),
            "{missing:?}"
        );
        assert!(
            !missing[0].contains("`mode`"),
            "defaults fill keys: {missing:?}"
        );
        let typed = "await MCP.notes.renameNote({ id: 1, new_title: 'b', count: 1.5, any: true })";
        assert_first_problems(&[
            (typed, "`id` is a whole number but the schema wants string"),
            (
                typed,
                "`count` is a number with a fraction but the schema wants integer",
            ),
        ]);
        assert!(!check(typed)[0].contains("`any`"), "{typed}");
        let tools = check(
            "await tools.read_file({ new_title: 'x', id: 'y', count: 2 }); await tools.call('plugin:files:read_file', { id: 'x' })",
        );
        assert_eq!(tools.len(), 1, "{tools:?}");
        assert!(
            tools[0].contains(
                "tools.call(\"plugin:files:read_file\"): missing required key `new_title`"
            )
        );
    }

    #[test]
    fn unknown_tools_ids_and_conveniences_are_named() {
        assert_first_problems(&[
            (
                "await tools.read_files({})",
                "did you mean tools.read_file?",
            ),
            ("await tools.dup({})", "tools.call(\"plugin:a:dup\", input)"),
            (
                "await tools.call('plugin:files:read_fil', {})",
                "did you mean \"plugin:files:read_file\"",
            ),
            (
                "await tools.describe('mcp:notes:delete_note')",
                "is an MCP tool",
            ),
        ]);
    }

    #[test]
    fn what_is_not_provable_is_left_to_run_time() {
        for cell in [
            "await MCP.notes.renameNote(input)",
            "await MCP.notes.renameNote({ ...base, id: 'a' })",
            "await MCP.notes.renameNote({ [k]: 1, id: 'a' })",
            "await MCP.notes.renameNote({ id: x, new_title: y })",
            "await MCP[server].deleteNote({})",
            "const m = MCP.notes; await m.delete_note({})",
            "if (MCP.gitlab) await MCP.gitlab.search({})",
            "if (typeof MCP.notes.archive === 'function') await MCP.notes.archive({})",
            "await MCP.gitlab?.search({})",
            "try { await MCP.notes.archive({}) } catch { }",
            "await MCP.notes.archive({}).catch(() => null)",
            "const tools = [1]; await tools.foo()",
            "await MCP.notes.$api('deleteNote')",
            "await tools.search('x'); await tools.call(id, {})",
        ] {
            assert_eq!(check(cell), Vec::<String>::new(), "{cell}");
        }
    }

    #[test]
    fn nearest_folds_case_and_separators() {
        let names = ["deleteNote", "renameNote", "listNotes"];
        assert_eq!(nearest("delete_note", names.into_iter()), ["deleteNote"]);
        assert_eq!(nearest("deleteNotes", names.into_iter()), ["deleteNote"]);
        assert_eq!(nearest("listNote", names.into_iter()), ["listNotes"]);
        assert!(nearest("weather", names.into_iter()).is_empty());
    }

    #[test]
    fn refusals_list_every_problem_with_positions() {
        let problems = vec![
            Problem {
                line: 2,
                column: 7,
                message: "a".into(),
            };
            10
        ];
        let text = refusal(&problems, |l, c| (l + 1, c));
        assert!(text.contains("\n- line 3, column 7: a"));
        assert!(
            text.ends_with("\n- and more: fix these and run the cell again"),
            "{text}"
        );
    }
}
