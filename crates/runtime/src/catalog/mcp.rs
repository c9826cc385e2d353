//! The `MCP` namespace (`docs/guest-api.md`): how a run's MCP catalog entries
//! appear to the guest as `MCP.<server>.<tool>({...})`.
//!
//! Server and tool names become safe, unique JavaScript identifiers,
//! deterministically (`chrome-devtools` → `chromeDevtools`, `create_issue`
//! → `createIssue`; reserved words and prototype-like names get a trailing
//! `_`; collisions a numeric suffix in name order). The namespace is data:
//! the bridge resolves every guest request back to the exact catalog id
//! here, so a guest can reach only the MCP entries of its own run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::catalog::entry::CatalogEntry;
use crate::catalog::tool::ToolSource;

/// What the runtime knows of one MCP server beyond its tools: its
/// instructions and whether it offers resources and prompts.
///
/// ```
/// use codemode_runtime::McpServerInfo;
/// let docs = McpServerInfo::new("docs").with_resources(true).with_prompts(true);
/// assert_eq!(docs.name, "docs");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServerInfo {
    /// The server's name in the config (the owner of its catalog ids).
    pub name: String,
    /// A short description for the model (e.g. the server's instructions).
    #[serde(default)]
    pub description: Option<String>,
    /// Whether `MCP.<server>.resources.list/read` exist.
    #[serde(default)]
    pub resources: bool,
    /// Whether `MCP.<server>.prompts.list/get` exist.
    #[serde(default)]
    pub prompts: bool,
}

impl McpServerInfo {
    /// A server without resources or prompts.
    pub fn new(name: &str) -> McpServerInfo {
        McpServerInfo {
            name: name.to_owned(),
            ..McpServerInfo::default()
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: &str) -> McpServerInfo {
        self.description = Some(description.to_owned());
        self
    }

    /// Sets whether the server offers resources.
    pub fn with_resources(mut self, resources: bool) -> McpServerInfo {
        self.resources = resources;
        self
    }

    /// Sets whether the server offers prompts.
    pub fn with_prompts(mut self, prompts: bool) -> McpServerInfo {
        self.prompts = prompts;
        self
    }
}

/// One tool of a server in the namespace.
#[derive(Debug, Clone)]
pub struct McpToolView {
    /// `MCP.<server>.<js_name>`.
    pub js_name: String,
    /// The catalog entry it resolves to.
    pub entry: Arc<CatalogEntry>,
}

/// One server in the namespace.
#[derive(Debug, Clone)]
pub struct McpServerView {
    /// `MCP.<js_name>`; also the file `mcp/<js_name>.d.ts`.
    pub js_name: String,
    /// The server's name (catalog ids' owner part).
    pub info: McpServerInfo,
    /// Its catalogued tools, by JavaScript name.
    pub tools: Vec<McpToolView>,
}

impl McpServerView {
    /// The tool with this JavaScript or MCP name.
    pub fn tool(&self, name: &str) -> Option<&McpToolView> {
        self.tools
            .iter()
            .find(|t| t.js_name == name)
            .or_else(|| self.tools.iter().find(|t| t.entry.name == name))
    }

    /// The path of its declaration file.
    pub fn declaration_path(&self) -> String {
        format!("mcp/{}.d.ts", self.js_name)
    }
}

/// The run's `MCP` namespace: visible servers in name order.
#[derive(Debug, Clone, Default)]
pub struct McpNamespace {
    servers: Vec<McpServerView>,
}

/// Names the guest's server objects already use.
const SERVER_MEMBERS: [&str; 3] = ["$api", "resources", "prompts"];

/// Words that cannot name a function in a declaration file, and property
/// names that would confuse the guest (`then` makes an object thenable).
pub(crate) const RESERVED: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "implements",
    "interface",
    "let",
    "package",
    "private",
    "protected",
    "public",
    "static",
    "yield",
    "await",
    "arguments",
    "eval",
    "undefined",
    "NaN",
    "Infinity",
    "__proto__",
    "constructor",
    "prototype",
    "then",
    "toString",
    "valueOf",
    "hasOwnProperty",
];

/// A JavaScript identifier for an MCP name: separators (anything but ASCII
/// letters and digits) are dropped and the next letter upper-cased; a
/// leading digit gets a `_` in front; reserved words a `_` behind.
///
/// ```
/// use codemode_runtime::js_identifier;
/// assert_eq!(js_identifier("chrome-devtools"), "chromeDevtools");
/// assert_eq!(js_identifier("create_issue"), "createIssue");
/// assert_eq!(js_identifier("delete"), "delete_");
/// assert_eq!(js_identifier("2fa"), "_2fa");
/// ```
pub fn js_identifier(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper_next = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if upper_next && !out.is_empty() {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
            upper_next = false;
        } else {
            upper_next = true;
        }
    }
    if out.is_empty() {
        out.push('_');
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if RESERVED.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// Unique identifiers for `names` (given in a deterministic order), none
/// in `taken`: the first holder of a base name keeps it, later ones get
/// `2`, `3`, ... appended.
fn unique_identifiers<'a>(names: impl Iterator<Item = &'a str>, taken: &[&str]) -> Vec<String> {
    let mut used: BTreeSet<String> = taken.iter().map(|s| (*s).to_owned()).collect();
    names
        .map(|name| {
            let base = js_identifier(name);
            let base = if taken.contains(&base.as_str()) {
                format!("{base}_")
            } else {
                base
            };
            let mut candidate = base.clone();
            let mut n = 2;
            while used.contains(&candidate) {
                candidate = format!("{base}{n}");
                n += 1;
            }
            used.insert(candidate.clone());
            candidate
        })
        .collect()
}

impl McpNamespace {
    /// Builds the namespace from the catalog's MCP entries (in catalog
    /// order) and what is known of the servers. A server is visible when it
    /// has a catalogued tool or offers resources or prompts.
    pub(crate) fn build(entries: &[Arc<CatalogEntry>], servers: &[McpServerInfo]) -> McpNamespace {
        let mut by_server: BTreeMap<&str, (McpServerInfo, Vec<Arc<CatalogEntry>>)> =
            BTreeMap::new();
        for info in servers {
            if info.resources || info.prompts {
                by_server
                    .entry(info.name.as_str())
                    .or_insert_with(|| (info.clone(), Vec::new()));
            }
        }
        for entry in entries.iter().filter(|e| e.source == ToolSource::Mcp) {
            let server = entry.source_name.as_str();
            let slot = by_server.entry(server).or_insert_with(|| {
                let info = servers
                    .iter()
                    .find(|s| s.name == server)
                    .cloned()
                    .unwrap_or_else(|| McpServerInfo::new(server));
                (info, Vec::new())
            });
            slot.1.push(Arc::clone(entry));
        }
        let server_names = unique_identifiers(by_server.keys().copied(), &[]);
        let servers = by_server
            .into_values()
            .zip(server_names)
            .map(|((info, mut tools), js_name)| {
                tools.sort_by(|a, b| a.name.cmp(&b.name));
                let names =
                    unique_identifiers(tools.iter().map(|t| t.name.as_str()), &SERVER_MEMBERS);
                McpServerView {
                    js_name,
                    info,
                    tools: tools
                        .into_iter()
                        .zip(names)
                        .map(|(entry, js_name)| McpToolView { js_name, entry })
                        .collect(),
                }
            })
            .collect();
        McpNamespace { servers }
    }

    /// The visible servers, by JavaScript name order of their MCP names.
    pub fn servers(&self) -> &[McpServerView] {
        &self.servers
    }

    /// The server with this JavaScript name.
    pub fn server(&self, js_name: &str) -> Option<&McpServerView> {
        self.servers.iter().find(|s| s.js_name == js_name)
    }

    /// Whether no server is visible.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The guest's view: `[[serverName, [[toolName, id], ...], flags], ...]`
    /// with flags bit 1 = resources, bit 2 = prompts.
    pub(crate) fn guest_json(&self) -> Value {
        Value::Array(
            self.servers
                .iter()
                .map(|s| {
                    let tools: Vec<Value> = s
                        .tools
                        .iter()
                        .map(|t| json!([t.js_name, t.entry.id]))
                        .collect();
                    let flags = u8::from(s.info.resources) | (u8::from(s.info.prompts) << 1);
                    // The tool list as JSON text: the guest parses it when
                    // the cell first touches the server, not every exec.
                    json!([s.js_name, Value::Array(tools).to_string(), flags])
                })
                .collect(),
        )
    }
}

/// Checks an MCP call's input against the tool's JSON Schema at the top
/// level: it must be an object; missing keys with a `default` get it;
/// missing `required` keys are an error naming them. Deeper validation is
/// the server's job.
///
/// # Errors
/// A message for the model naming the call and what is wrong.
/// `label` names the call in messages; it is only built for an error.
pub(crate) fn prepare_input(
    label: impl Fn() -> String,
    schema: &Value,
    input: Value,
) -> Result<Value, String> {
    let mut object = match input {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "{} takes one object argument like {{ key: value }}, got {}",
                label(),
                json_kind(&other)
            ));
        }
    };
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, property) in properties {
            if !object.contains_key(key)
                && let Some(default) = property.get("default")
            {
                object.insert(key.clone(), default.clone());
            }
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        let missing: Vec<&str> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|key| !object.contains_key(*key))
            .collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|k| format!("`{k}`")).collect();
            return Err(format!(
                "{}: missing required {} {}; see API.read(\"mcp/...\") or $api() for the input type",
                label(),
                if missing.len() == 1 { "key" } else { "keys" },
                names.join(", ")
            ));
        }
    }
    Ok(Value::Object(object))
}

pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What an MCP server is asked besides tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum McpMethod {
    /// `resources/list` (params: optional `cursor`).
    ResourcesList,
    /// `resources/read` (params: `uri`).
    ResourcesRead,
    /// `resources/templates/list` (params: optional `cursor`).
    ResourceTemplatesList,
    /// `prompts/list` (params: optional `cursor`).
    PromptsList,
    /// `prompts/get` (params: `name`, optional `arguments`).
    PromptsGet,
}

impl McpMethod {
    /// The MCP method name, e.g. `resources/read`.
    pub fn as_str(self) -> &'static str {
        match self {
            McpMethod::ResourcesList => "resources/list",
            McpMethod::ResourcesRead => "resources/read",
            McpMethod::ResourceTemplatesList => "resources/templates/list",
            McpMethod::PromptsList => "prompts/list",
            McpMethod::PromptsGet => "prompts/get",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, ToolDefinition, ToolPolicy};

    #[test]
    fn identifiers_are_camel_case_and_safe() {
        assert_eq!(js_identifier("chrome-devtools"), "chromeDevtools");
        assert_eq!(js_identifier("create_issue"), "createIssue");
        assert_eq!(js_identifier("get-env"), "getEnv");
        assert_eq!(js_identifier("already_camelCase"), "alreadyCamelCase");
        assert_eq!(js_identifier("__proto__"), "proto");
        assert_eq!(js_identifier("constructor"), "constructor_");
        assert_eq!(js_identifier("then"), "then_");
        assert_eq!(js_identifier("9lives"), "_9lives");
        assert_eq!(js_identifier("---"), "_");
        assert_eq!(js_identifier("über.tool"), "berTool");
        assert_eq!(js_identifier("a b"), "aB");
    }

    #[test]
    fn collisions_get_deterministic_suffixes() {
        let names = unique_identifiers(["a-b", "a_b", "aB", "$api"].into_iter(), &SERVER_MEMBERS);
        assert_eq!(names, ["aB", "aB2", "aB3", "api"]);
        let names = unique_identifiers(["resources", "prompts"].into_iter(), &SERVER_MEMBERS);
        assert_eq!(names, ["resources_", "prompts_"]);
    }

    #[test]
    fn namespace_groups_tools_by_server() {
        let catalog = Catalog::build(
            vec![
                ToolDefinition::new(ToolSource::Mcp, "chrome-devtools", "take_snapshot"),
                ToolDefinition::new(ToolSource::Mcp, "github", "create_issue"),
                ToolDefinition::new(ToolSource::Mcp, "github", "delete"),
                ToolDefinition::new(ToolSource::Openclaw, "core", "read"),
            ],
            &ToolPolicy::default(),
        )
        .unwrap();
        let ns = McpNamespace::build(
            catalog.entries(),
            &[McpServerInfo::new("docs").with_resources(true)],
        );
        let names: Vec<&str> = ns.servers().iter().map(|s| s.js_name.as_str()).collect();
        assert_eq!(names, ["chromeDevtools", "docs", "github"]);
        let github = ns.server("github").unwrap();
        let tools: Vec<(&str, &str)> = github
            .tools
            .iter()
            .map(|t| (t.js_name.as_str(), t.entry.id.as_str()))
            .collect();
        assert_eq!(
            tools,
            [
                ("createIssue", "mcp:github:create_issue"),
                ("delete_", "mcp:github:delete")
            ]
        );
        assert_eq!(github.tool("create_issue").unwrap().js_name, "createIssue");
        assert_eq!(
            ns.guest_json()[1],
            json!(["docs", "[]", 1]),
            "a server with only resources is visible"
        );
    }

    #[test]
    fn inputs_get_defaults_and_required_keys_checked() {
        let schema = json!({
            "type": "object",
            "properties": { "a": { "type": "number" }, "b": { "type": "number", "default": 3 } },
            "required": ["a", "c"]
        });
        let err = prepare_input(|| "MCP.x.y".into(), &schema, json!({})).unwrap_err();
        assert!(err.contains("missing required keys `a`, `c`"), "{err}");
        let ok = prepare_input(|| "MCP.x.y".into(), &schema, json!({ "a": 1, "c": 2 })).unwrap();
        assert_eq!(ok, json!({ "a": 1, "b": 3, "c": 2 }));
        let err = prepare_input(|| "MCP.x.y".into(), &schema, json!([1])).unwrap_err();
        assert!(
            err.contains("one object argument") && err.contains("an array"),
            "{err}"
        );
        let ok = prepare_input(|| "MCP.x.y".into(), &json!({}), Value::Null).unwrap();
        assert_eq!(ok, json!({}));
    }
}
