//! The virtual declaration files behind `API.list` / `API.read` and
//! `MCP.<server>.$api()` (`docs/guest-api.md`): `mcp/index.d.ts` plus one
//! `mcp/<server>.d.ts` per visible server, rendered from tool metadata.
//!
//! Input types come from each tool's JSON Schema (enums and unions, arrays
//! and tuples, nested objects, optional vs required, local `$ref`s, defaults
//! noted in doc comments); results are `McpToolResult`. Nothing here touches
//! a disk: the files exist only as strings of the run's catalog.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::catalog::mcp::{McpNamespace, McpServerView, McpToolView};

/// Nesting beyond this renders as `unknown` (hostile or huge schemas).
const MAX_DEPTH: usize = 8;
/// Schema nodes one tool's input type may expand to (each `$ref` expands
/// again, so a small schema can fan out exponentially).
const MAX_TYPE_NODES: usize = 5_000;

thread_local! {
    /// Nodes left for the type being rendered on this thread.
    static NODE_BUDGET: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

fn take_node(budget: &std::cell::Cell<Option<usize>>) -> bool {
    match budget.get() {
        // Outside `with_node_budget` (tests of `ts_type` alone): no budget.
        None => true,
        Some(0) => false,
        Some(n) => {
            budget.set(Some(n - 1));
            true
        }
    }
}

/// Runs `render` with a fresh budget of [`MAX_TYPE_NODES`]; `None` when it
/// ran out (the partial text is then not used).
fn with_node_budget(render: impl FnOnce() -> String) -> Option<String> {
    let previous = NODE_BUDGET.with(|b| b.replace(Some(MAX_TYPE_NODES)));
    let text = render();
    let exhausted = NODE_BUDGET.with(|b| b.replace(previous)) == Some(0);
    (!exhausted).then_some(text)
}
/// Longest description kept in a doc comment, in characters.
const MAX_DOC_CHARS: usize = 1200;

/// One virtual file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiFile {
    /// e.g. `mcp/github.d.ts`.
    pub path: String,
    /// What it declares.
    pub description: String,
    /// Its text.
    pub text: String,
}

impl ApiFile {
    /// The `API.list` entry: `{ path, bytes, description }`.
    pub fn metadata_json(&self) -> Value {
        json!({ "path": self.path, "bytes": self.text.len(), "description": self.description })
    }
}

/// The run's virtual files, by path.
#[derive(Debug, Clone, Default)]
pub struct ApiFiles {
    files: BTreeMap<String, ApiFile>,
}

/// A rejected `API.list` prefix or `API.read` path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApiPathError(String);

const INDEX: &str = "mcp/index.d.ts";

impl ApiFiles {
    /// Renders every file of `namespace`.
    pub fn render(namespace: &McpNamespace) -> ApiFiles {
        let mut files = BTreeMap::new();
        let index = render_index(namespace);
        files.insert(
            INDEX.to_owned(),
            ApiFile {
                path: INDEX.to_owned(),
                description: "Shared MCP types (McpToolResult, McpApiHeader, ...), the API object, and the list of visible servers".into(),
                text: index,
            },
        );
        for server in namespace.servers() {
            let path = server.declaration_path();
            files.insert(
                path.clone(),
                ApiFile {
                    path,
                    description: format!(
                        "MCP.{}: {} tool{} of MCP server \"{}\"{}",
                        server.js_name,
                        server.tools.len(),
                        if server.tools.len() == 1 { "" } else { "s" },
                        server.info.name,
                        match (server.info.resources, server.info.prompts) {
                            (true, true) => ", resources and prompts",
                            (true, false) => " and resources",
                            (false, true) => " and prompts",
                            (false, false) => "",
                        }
                    ),
                    text: render_server(server, None, false),
                },
            );
        }
        ApiFiles { files }
    }

    /// All files in path order.
    pub fn iter(&self) -> impl Iterator<Item = &ApiFile> {
        self.files.values()
    }

    /// The files under a folder prefix (`mcp`, `mcp/`) or equal to a path;
    /// no prefix lists everything.
    ///
    /// # Errors
    /// [`ApiPathError`] for `.`/`..`/empty segments or a prefix that names
    /// nothing.
    pub fn list(&self, prefix: Option<&str>) -> Result<Vec<&ApiFile>, ApiPathError> {
        let Some(prefix) = prefix else {
            return Ok(self.files.values().collect());
        };
        let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
        if trimmed.is_empty() {
            return Ok(self.files.values().collect());
        }
        check_segments(trimmed)?;
        if let Some(file) = self.files.get(trimmed) {
            return Ok(vec![file]);
        }
        let folder = format!("{trimmed}/");
        let hits: Vec<&ApiFile> = self
            .files
            .values()
            .filter(|f| f.path.starts_with(&folder))
            .collect();
        if hits.is_empty() {
            return Err(ApiPathError(format!(
                "API.list: nothing under \"{prefix}\"; the files are {}",
                self.known()
            )));
        }
        Ok(hits)
    }

    /// Bytes `[offset, offset + length)` of one file (cut back to character
    /// boundaries), for files too large to read whole.
    ///
    /// # Errors
    /// [`ApiPathError`] for a malformed or unknown path.
    pub fn read_range(
        &self,
        path: &str,
        offset: usize,
        length: usize,
    ) -> Result<&str, ApiPathError> {
        let text = self.read(path)?;
        let mut start = offset.min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = start.saturating_add(length).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Ok(&text[start..end])
    }

    /// The text of one file.
    ///
    /// # Errors
    /// [`ApiPathError`] for a malformed or unknown path.
    pub fn read(&self, path: &str) -> Result<&str, ApiPathError> {
        check_segments(path)?;
        match self.files.get(path) {
            Some(file) => Ok(&file.text),
            None => Err(ApiPathError(format!(
                "API.read: no file \"{path}\"; the files are {}",
                self.known()
            ))),
        }
    }

    fn known(&self) -> String {
        self.files
            .keys()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn check_segments(path: &str) -> Result<(), ApiPathError> {
    if path.is_empty() {
        return Err(ApiPathError(
            "the path is empty; use e.g. \"mcp/index.d.ts\" (API.list(\"mcp\") lists the files)"
                .into(),
        ));
    }
    if path.len() > 512 {
        return Err(ApiPathError("the path is longer than 512 bytes".into()));
    }
    if path.starts_with('/') {
        return Err(ApiPathError(format!(
            "\"{path}\": paths are relative, like \"mcp/index.d.ts\""
        )));
    }
    for segment in path.split('/') {
        match segment {
            "" => {
                return Err(ApiPathError(format!(
                    "\"{path}\" has an empty segment (`//`)"
                )));
            }
            "." | ".." => {
                return Err(ApiPathError(format!(
                    "\"{path}\": `.` and `..` segments are not allowed; use a path from API.list()"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The header `MCP.<server>.$api(toolName?, { schema })` returns.
pub(crate) fn api_header(
    server: &McpServerView,
    tool: Option<&McpToolView>,
    schema: bool,
) -> Value {
    let tools: Vec<&McpToolView> = match tool {
        Some(t) => vec![t],
        None => server.tools.iter().collect(),
    };
    let entries: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut v = json!({
                "name": t.js_name,
                "tool": t.entry.name,
                "id": t.entry.id,
                "description": t.entry.description,
            });
            if schema && let Some(map) = v.as_object_mut() {
                map.insert("inputSchema".into(), input_schema(&t.entry.parameters));
                if t.entry.output_schema.is_object() {
                    map.insert("outputSchema".into(), t.entry.output_schema.clone());
                }
            }
            v
        })
        .collect();
    json!({
        "server": server.js_name,
        "serverName": server.info.name,
        "path": server.declaration_path(),
        "declarations": render_server(server, tool, true),
        "tools": entries,
    })
}

fn input_schema(parameters: &Value) -> Value {
    if parameters.is_null() {
        json!({ "type": "object", "properties": {} })
    } else {
        parameters.clone()
    }
}

fn render_index(namespace: &McpNamespace) -> String {
    let mut out = String::from(
        "// Virtual declarations for code mode: nothing here exists on disk.\n\
         // Read a server's file with API.read(\"mcp/<server>.d.ts\").\n\n\
         /** What every MCP tool call resolves to: the server's raw `tools/call` result. `S` is the\n\
          * type of `structuredContent` for tools that publish an `outputSchema` (absent when `isError`). */\n\
         type McpToolResult<S = unknown> = {\n  content?: unknown[];\n  structuredContent?: S;\n  isError?: boolean;\n  [key: string]: unknown;\n};\n\n\
         /** `structuredContent` when present, else the JSON parsed from a single text item, else that text;\n\
          * throws (catchable) when the result has `isError`. */\n\
         declare function unwrap<S = unknown>(result: McpToolResult<S>): S;\n\n\
         /** What a call resolves to instead of its result when the result's JSON is larger than the\n\
          * runtime's handle size (1 MiB by default): the result stays on the host. `text` slices its text\n\
          * (byte offsets, at most 1 MiB per slice), `find` searches it, `json()` returns the whole result\n\
          * when the bridge carries it (4 MiB). */\n\
         type ResultHandle = {\n  readonly bytes: number;\n  readonly textBytes: number;\n  text(start?: number, end?: number): Promise<string>;\n  find(needle: string, from?: number): Promise<number>;\n  json(): Promise<unknown>;\n};\n\n\
         /** What `MCP.<server>.$api(toolName?, { schema })` returns. */\n\
         type McpApiHeader = {\n  server: string;\n  serverName: string;\n  path: string;\n  declarations: string;\n  tools: { name: string; tool: string; id: string; description: string; inputSchema?: unknown }[];\n};\n\n\
         /** A raw MCP result of resources/list, resources/read, prompts/list or prompts/get. */\n\
         type McpResult = { [key: string]: unknown };\n\n\
         /** One virtual file. */\n\
         type ApiFile = { path: string; bytes: number; description: string };\n\n\
         /** The virtual declaration files. */\n\
         declare const API: {\n  list(prefix?: string): Promise<ApiFile[]>;\n  /** Files over 256 KiB are read in pieces: `{ offset, length }` in bytes (length at most 262144). */\n  read(path: string, options?: { offset?: number; length?: number }): Promise<string>;\n};\n\n",
    );
    if namespace.is_empty() {
        out.push_str("/** No MCP server is visible in this run. */\ndeclare namespace MCP {}\n");
        return out;
    }
    out.push_str("/**\n * MCP servers visible in this run (call MCP.<server>.<tool>({ ... })):\n");
    for server in namespace.servers() {
        let _ = writeln!(
            out,
            " * - MCP.{} ({} tool{}): {}",
            server.js_name,
            server.tools.len(),
            if server.tools.len() == 1 { "" } else { "s" },
            server.declaration_path()
        );
    }
    out.push_str(" */\ndeclare namespace MCP {}\n");
    out
}

fn render_server(server: &McpServerView, only: Option<&McpToolView>, inline: bool) -> String {
    let mut out = String::new();
    if !inline {
        out.push_str("// Virtual declarations for code mode (types: mcp/index.d.ts).\n\n");
    }
    let mut doc = format!(
        "MCP server \"{}\": call as MCP.{}.<tool>({{ ... }}); every tool resolves to McpToolResult (its structuredContent typed where the tool has an outputSchema; unwrap(result) returns it).",
        server.info.name, server.js_name
    );
    if let Some(description) = server
        .info
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
    {
        doc.push_str("\n\n");
        doc.push_str(description);
    }
    write_doc(&mut out, "", &doc);
    let _ = writeln!(out, "declare namespace MCP.{} {{", server.js_name);
    if only.is_none() {
        out.push_str(
            "  /** Return this TypeScript-style API header (one tool's, with `toolName`; JSON schemas with `{ schema: true }`). */\n  \
             function $api(toolName?: string, options?: { schema?: boolean }): Promise<McpApiHeader>;\n",
        );
    }
    let tools: Vec<&McpToolView> = match only {
        Some(t) => vec![t],
        None => server.tools.iter().collect(),
    };
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 || only.is_none() {
            out.push('\n');
        }
        render_tool(&mut out, tool);
    }
    if only.is_none() {
        if server.info.resources {
            out.push_str(
                "\n  namespace resources {\n    \
                 /** resources/list: the server's resources (pass `cursor` for the next page). */\n    \
                 function list(input?: { cursor?: string }): Promise<McpResult>;\n    \
                 /** resources/read: the contents of one resource. */\n    \
                 function read(input: { uri: string }): Promise<McpResult>;\n    \
                 /** resources/templates/list: URI templates for reading parametrised resources. */\n    \
                 function templates(input?: { cursor?: string }): Promise<McpResult>;\n  }\n",
            );
        }
        if server.info.prompts {
            out.push_str(
                "\n  namespace prompts {\n    \
                 /** prompts/list: the server's prompts (pass `cursor` for the next page). */\n    \
                 function list(input?: { cursor?: string }): Promise<McpResult>;\n    \
                 /** prompts/get: one prompt, filled with its arguments. */\n    \
                 function get(input: { name: string; arguments?: { [key: string]: string } }): Promise<McpResult>;\n  }\n",
            );
        }
    }
    out.push_str("}\n");
    out
}

fn render_tool(out: &mut String, tool: &McpToolView) {
    let entry = &tool.entry;
    let mut doc = String::new();
    if !entry.description.trim().is_empty() {
        doc.push_str(entry.description.trim());
        doc.push_str("\n\n");
    }
    let _ = write!(doc, "MCP tool \"{}\" ({}).", entry.name, entry.id);
    let schema = input_schema(&entry.parameters);
    let root = &schema;
    // Property descriptions and defaults are doc comments on the input
    // type's keys (no `@param` copies: they would cost the model twice).
    write_doc(out, "  ", &doc);
    let ty = with_node_budget(|| ts_type(root, root, 1, "  "));
    let ty = match ty {
        Some(ty) => ty,
        // Schemas come from upstream servers: one that would expand past
        // the budget (deep `$ref` fans) becomes a still-valid, open type.
        None => format!(
            "Record<string, unknown> /* input type too large to render ({MAX_TYPE_NODES} schema nodes); see MCP.<server>.$api(\"{}\", {{ schema: true }}) */",
            entry.name.replace("*/", "*\\/")
        ),
    };
    let optional = !has_required(root);
    let _ = writeln!(
        out,
        "  function {}(input{}: {}): Promise<{}>;",
        tool.js_name,
        if optional { "?" } else { "" },
        ty,
        result_type(tool)
    );
}

/// `McpToolResult`, typed by the tool's `outputSchema` when it has one
/// (an object schema, as MCP requires).
fn result_type(tool: &McpToolView) -> String {
    let output = &tool.entry.output_schema;
    if !output.is_object() {
        return "McpToolResult".to_owned();
    }
    match with_node_budget(|| ts_type(output, output, 1, "  ")) {
        Some(ty) => format!("McpToolResult<{ty}>"),
        // Too large to render: the result stays untyped.
        None => "McpToolResult".to_owned(),
    }
}

/// Signatures in `API.search` hits are cut at this many characters.
const MAX_SIGNATURE_CHARS: usize = 200;

/// A one-line signature for search hits: `deleteNote({ id: string,
/// force?: boolean })`, top-level keys with shallow types only (the full
/// types are `$api()`'s and `API.read`'s).
pub(crate) fn short_signature(tool: &McpToolView) -> String {
    let schema = input_schema(&tool.entry.parameters);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let keys: Vec<String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(key, property)| {
                    let optional = if required.contains(&key.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    format!(
                        "{}{optional}: {}",
                        property_key(key),
                        shallow_type(property)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let input = if keys.is_empty() {
        String::new()
    } else {
        format!("{{ {} }}", keys.join(", "))
    };
    truncate(&format!("{}({input})", tool.js_name), MAX_SIGNATURE_CHARS)
}

/// A property's type without descending: `string`, `number`, `"a" | "b"`,
/// `string[]`, `object`, else `unknown`.
fn shallow_type(property: &Value) -> String {
    if let Some(Value::Array(values)) = property.get("enum")
        && !values.is_empty()
        && values.len() <= 4
    {
        return values.iter().map(literal).collect::<Vec<_>>().join(" | ");
    }
    let simple = |t: &str| match t {
        "string" | "boolean" | "null" | "object" => t.to_owned(),
        "number" | "integer" => "number".to_owned(),
        "array" => match property
            .get("items")
            .and_then(|i| i.get("type"))
            .and_then(Value::as_str)
        {
            Some(item @ ("string" | "boolean" | "object")) => format!("{item}[]"),
            Some("number" | "integer") => "number[]".to_owned(),
            _ => "unknown[]".to_owned(),
        },
        _ => "unknown".to_owned(),
    };
    match property.get("type") {
        Some(Value::String(t)) => simple(t),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .map(simple)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "unknown".to_owned(),
    }
}

/// The first sentence or line of a description, at most `max` characters.
pub(crate) fn summary_line(description: &str, max: usize) -> String {
    let line = description.trim().lines().next().unwrap_or("");
    truncate(&one_line(line), max)
}

fn has_required(schema: &Value) -> bool {
    schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut t: String = text.chars().take(max).collect();
    t.push('…');
    t
}

/// A doc comment that nothing inside can end early.
fn write_doc(out: &mut String, indent: &str, text: &str) {
    let text = truncate(text.trim(), MAX_DOC_CHARS).replace("*/", "*\\/");
    let _ = writeln!(out, "{indent}/**");
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            let _ = writeln!(out, "{indent} *");
        } else {
            let _ = writeln!(out, "{indent} * {line}");
        }
    }
    let _ = writeln!(out, "{indent} */");
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn property_key(key: &str) -> String {
    if is_identifier(key) {
        key.to_owned()
    } else {
        Value::String(key.to_owned()).to_string()
    }
}

/// The TypeScript type of a JSON Schema. `root` resolves local `$ref`s;
/// `indent` is the indentation of the line the type starts on.
pub(crate) fn ts_type(schema: &Value, root: &Value, depth: usize, indent: &str) -> String {
    if depth > MAX_DEPTH || !NODE_BUDGET.with(take_node) {
        return "unknown".into();
    }
    let object = match schema {
        Value::Bool(true) => return "unknown".into(),
        Value::Bool(false) => return "never".into(),
        Value::Object(object) => object,
        _ => return "unknown".into(),
    };
    let mut ty = base_type(object, root, depth, indent);
    if object.get("nullable") == Some(&Value::Bool(true)) && ty != "unknown" && ty != "null" {
        ty = format!("{} | null", paren(&ty));
    }
    ty
}

fn base_type(object: &Map<String, Value>, root: &Value, depth: usize, indent: &str) -> String {
    if let Some(Value::String(reference)) = object.get("$ref") {
        return match resolve_ref(root, reference) {
            Some(target) => ts_type(target, root, depth + 1, indent),
            None => "unknown".into(),
        };
    }
    if let Some(constant) = object.get("const") {
        return literal(constant);
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        let literals: Vec<String> = values.iter().map(literal).collect();
        return if literals.is_empty() {
            "never".into()
        } else {
            union(literals)
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(variants)) = object.get(key) {
            let parts: Vec<String> = variants
                .iter()
                .map(|v| ts_type(v, root, depth + 1, indent))
                .collect();
            if !parts.is_empty() {
                return union(parts);
            }
        }
    }
    if let Some(Value::Array(parts)) = object.get("allOf") {
        let parts: Vec<String> = parts
            .iter()
            .map(|v| paren(&ts_type(v, root, depth + 1, indent)))
            .filter(|t| t != "unknown")
            .collect();
        return match parts.len() {
            0 => "unknown".into(),
            _ => parts.join(" & "),
        };
    }
    match object.get("type") {
        Some(Value::String(t)) => typed(t, object, root, depth, indent),
        Some(Value::Array(types)) => {
            let parts: Vec<String> = types
                .iter()
                .filter_map(Value::as_str)
                .map(|t| typed(t, object, root, depth, indent))
                .collect();
            if parts.is_empty() {
                "unknown".into()
            } else {
                union(parts)
            }
        }
        _ if object.contains_key("properties") => object_type(object, root, depth, indent),
        _ if object.contains_key("items") => typed("array", object, root, depth, indent),
        _ => "unknown".into(),
    }
}

fn typed(t: &str, object: &Map<String, Value>, root: &Value, depth: usize, indent: &str) -> String {
    match t {
        "string" => "string".into(),
        "number" | "integer" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => array_type(object, root, depth, indent),
        "object" => object_type(object, root, depth, indent),
        _ => "unknown".into(),
    }
}

fn array_type(object: &Map<String, Value>, root: &Value, depth: usize, indent: &str) -> String {
    let tuple = object
        .get("prefixItems")
        .or_else(|| object.get("items").filter(|i| i.is_array()));
    if let Some(Value::Array(items)) = tuple {
        let parts: Vec<String> = items
            .iter()
            .map(|i| ts_type(i, root, depth + 1, indent))
            .collect();
        return format!("[{}]", parts.join(", "));
    }
    match object.get("items") {
        Some(items) => format!("{}[]", paren(&ts_type(items, root, depth + 1, indent))),
        None => "unknown[]".into(),
    }
}

fn object_type(object: &Map<String, Value>, root: &Value, depth: usize, indent: &str) -> String {
    let properties = object.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let additional = object.get("additionalProperties");
    let inner = format!("{indent}  ");
    let mut lines = Vec::new();
    if let Some(properties) = properties {
        for (key, property) in properties {
            let mut doc = property
                .get("description")
                .and_then(Value::as_str)
                .map(|d| one_line(&truncate(d.trim(), 300)))
                .unwrap_or_default();
            if let Some(default) = property.get("default") {
                let shown = truncate(&default.to_string(), 80);
                if !doc.is_empty() {
                    doc.push(' ');
                }
                doc.push_str(&format!("@default {shown}"));
            }
            let mut line = String::new();
            if !doc.is_empty() {
                let _ = writeln!(line, "{inner}/** {} */", doc.replace("*/", "*\\/"));
            }
            let optional = !required.contains(&key.as_str());
            let _ = write!(
                line,
                "{inner}{}{}: {};",
                property_key(key),
                if optional { "?" } else { "" },
                ts_type(property, root, depth + 1, &inner)
            );
            lines.push(line);
        }
    }
    match additional {
        Some(Value::Bool(false)) => {}
        Some(schema @ Value::Object(_)) if properties.is_none_or(Map::is_empty) => {
            lines.push(format!(
                "{inner}[key: string]: {};",
                ts_type(schema, root, depth + 1, &inner)
            ));
        }
        // Declared properties plus others: only `unknown` is compatible
        // with every declared property's type.
        Some(_) => lines.push(format!("{inner}[key: string]: unknown;")),
        None if properties.is_none_or(Map::is_empty) => {
            lines.push(format!("{inner}[key: string]: unknown;"));
        }
        None => {}
    }
    if lines.is_empty() {
        return "{}".into();
    }
    format!("{{\n{}\n{indent}}}", lines.join("\n"))
}

fn resolve_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

fn literal(value: &Value) -> String {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {
            // JSON string escapes are valid TypeScript string literals; a
            // line or paragraph separator is escaped for older parsers.
            value
                .to_string()
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029")
        }
        _ => "unknown".into(),
    }
}

fn paren(ty: &str) -> String {
    if ty.contains(" | ") || ty.contains(" & ") {
        format!("({ty})")
    } else {
        ty.to_owned()
    }
}

fn union(parts: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for part in parts {
        if !unique.contains(&part) {
            unique.push(part);
        }
    }
    if unique.iter().any(|p| p == "unknown") {
        return "unknown".into();
    }
    unique
        .iter()
        .map(|p| paren(p))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(schema: Value) -> String {
        ts_type(&schema, &schema, 1, "")
    }

    #[test]
    fn scalars_enums_and_unions() {
        assert_eq!(ty(json!({"type": "string"})), "string");
        assert_eq!(ty(json!({"type": "integer"})), "number");
        assert_eq!(ty(json!({"enum": ["a", "b", 3]})), "\"a\" | \"b\" | 3");
        assert_eq!(ty(json!({"type": ["string", "null"]})), "string | null");
        assert_eq!(
            ty(
                json!({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "number"}}]})
            ),
            "string | number[]"
        );
        assert_eq!(
            ty(json!({"type": "array", "items": {"enum": ["x", "y"]}})),
            "(\"x\" | \"y\")[]"
        );
        assert_eq!(ty(json!({"const": "fixed"})), "\"fixed\"");
        assert_eq!(
            ty(json!({"type": "string", "nullable": true})),
            "string | null"
        );
        assert_eq!(
            ty(json!({"prefixItems": [{"type": "string"}, {"type": "number"}], "type": "array"})),
            "[string, number]"
        );
        assert_eq!(ty(json!(true)), "unknown");
        assert_eq!(ty(json!({})), "unknown");
    }

    #[test]
    fn objects_mark_optional_keys_and_quote_odd_names() {
        let t = ty(json!({
            "type": "object",
            "properties": {
                "title": { "type": "string", "description": "Issue title" },
                "dry-run": { "type": "boolean", "default": false },
            },
            "required": ["title"],
            "additionalProperties": false
        }));
        assert_eq!(
            t,
            "{\n  /** @default false */\n  \"dry-run\"?: boolean;\n  /** Issue title */\n  title: string;\n}"
        );
        assert_eq!(
            ty(json!({"type": "object", "additionalProperties": {"type": "number"}})),
            "{\n  [key: string]: number;\n}"
        );
    }

    #[test]
    fn refs_resolve_locally_and_recursion_stops() {
        let schema = json!({
            "type": "object",
            "properties": { "node": { "$ref": "#/$defs/node" } },
            "$defs": { "node": { "type": "object", "properties": { "next": { "$ref": "#/$defs/node" } } } }
        });
        let t = ty(schema);
        assert!(t.contains("next?:"), "{t}");
        assert!(t.contains("unknown"), "recursion ends in unknown: {t}");
        assert_eq!(ty(json!({"$ref": "https://example.com/x.json"})), "unknown");
    }

    #[test]
    fn comments_cannot_be_closed_by_descriptions() {
        let mut out = String::new();
        write_doc(&mut out, "", "evil */ declare const x: 1; /*");
        assert!(!out.contains("evil */"), "{out}");
    }
}
