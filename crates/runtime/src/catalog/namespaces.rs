//! Plugin namespaces: a small domain API (`Issues.list(...)`) a trusted
//! plugin gives cells on top of its own catalog tools, without another
//! model-visible tool (`docs/embedding.md#plugin-namespaces`).
//!
//! - [`NamespaceRegistry`] (one per runtime, [`crate::CodeModeRuntime::namespaces`]):
//!   trusted Rust code registers a [`NamespaceRegistration`] for a plugin,
//!   clears a plugin's namespaces (disable, uninstall, rollback) or all.
//! - Visibility, per run: every `required_tool_names` entry is in the
//!   run's catalog *and owned by the registering plugin* (`sourceName`); a
//!   same-named tool of another plugin does not expose it.
//! - The scope a registration's factory returns ([`ScopeValue`]: JSON,
//!   objects, arrays, callable markers) is serialized into a descriptor
//!   the guest turns into a frozen global and `namespaces.<globalName>`.
//!   Raw host functions, cycles, unsafe keys and callables that target an
//!   undeclared tool are refused before any cell code runs; shared
//!   (non-cyclic) nodes are serialized at every place they appear.
//! - A guest call names `(namespace id, path)`; the host resolves it here
//!   (forged ids or paths are refused) to one catalog entry and its input,
//!   and the bridge runs it as an ordinary catalog tool call (policy,
//!   hooks, approvals, abort, telemetry, suspend/resume).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use crate::catalog::{Catalog, CatalogEntry};
use crate::config::CodeModeConfig;

/// Maps a call's guest arguments to the input of its catalog tool.
pub type InputMapper = Arc<dyn Fn(&[Value]) -> Value + Send + Sync>;

/// A raw host function: never allowed in a scope (it would bypass the
/// catalog tool's lifecycle); present so such scopes can be refused.
pub type HostFunction = Arc<dyn Fn(&[Value]) -> Value + Send + Sync>;

/// Builds a namespace's scope for one run.
pub type ScopeFactory = Arc<dyn Fn(&ScopeContext) -> ScopeValue + Send + Sync>;

/// A node of a namespace's scope.
#[derive(Clone)]
pub enum ScopeValue {
    /// Plain JSON data.
    Json(Value),
    /// An object: keys in order.
    Object(Vec<(String, ScopeValue)>),
    /// An array.
    Array(Vec<ScopeValue>),
    /// A callable member: calls the catalog tool named `tool` (see
    /// [`namespace_tool`]).
    Tool(NamespaceTool),
    /// A node that may appear at several places (or, wrongly, inside
    /// itself): serialized wherever it appears; a cycle is refused.
    Shared(Arc<Mutex<ScopeValue>>),
    /// A raw host function: always refused.
    HostFunction(HostFunction),
}

impl std::fmt::Debug for ScopeValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScopeValue::Json(v) => write!(f, "Json({v})"),
            ScopeValue::Object(entries) => f
                .debug_map()
                .entries(entries.iter().map(|(k, v)| (k, v)))
                .finish(),
            ScopeValue::Array(items) => f.debug_list().entries(items).finish(),
            ScopeValue::Tool(tool) => write!(f, "Tool({})", tool.tool),
            ScopeValue::Shared(_) => f.write_str("Shared(..)"),
            ScopeValue::HostFunction(_) => f.write_str("HostFunction(..)"),
        }
    }
}

/// A callable marker: the catalog tool it calls and how guest arguments
/// become that tool's input.
#[derive(Clone)]
pub struct NamespaceTool {
    /// The catalog tool's name (one of the registration's
    /// `required_tool_names`).
    pub tool: String,
    /// Guest arguments → input; without one, the first argument (or `{}`).
    pub mapper: Option<InputMapper>,
}

/// A callable member that calls catalog tool `tool` with the first guest
/// argument (or `{}`) as its input.
pub fn namespace_tool(tool: &str) -> ScopeValue {
    ScopeValue::Tool(NamespaceTool {
        tool: tool.to_owned(),
        mapper: None,
    })
}

/// A callable member that calls catalog tool `tool` with
/// `mapper(guest arguments)` as its input.
pub fn namespace_tool_with(
    tool: &str,
    mapper: impl Fn(&[Value]) -> Value + Send + Sync + 'static,
) -> ScopeValue {
    ScopeValue::Tool(NamespaceTool {
        tool: tool.to_owned(),
        mapper: Some(Arc::new(mapper)),
    })
}

/// What a scope factory learns of the run.
#[derive(Debug, Clone)]
pub struct ScopeContext {
    /// The agent.
    pub agent_id: Option<String>,
    /// The session key.
    pub session_key: Option<String>,
    /// The session id.
    pub session_id: Option<String>,
    /// The agent run.
    pub run_id: Option<String>,
    /// The effective code-mode config.
    pub config: CodeModeConfig,
    /// Whether the run's scope was aborted.
    pub aborted: bool,
}

/// A namespace a plugin registers.
#[derive(Clone)]
pub struct NamespaceRegistration {
    /// Unique id (the guest's calls name it).
    pub id: String,
    /// The global the guest sees (also `namespaces.<globalName>`).
    pub global_name: String,
    /// What it is for; appended to the exec description when visible.
    pub description: String,
    /// The catalog tools it needs; all must be in the run's catalog and
    /// owned by the registering plugin. Callables may target only these.
    pub required_tool_names: Vec<String>,
    /// How to use it, appended to the exec description when visible.
    pub prompt: Option<String>,
    /// Builds the scope for a run.
    pub create_scope: ScopeFactory,
}

impl std::fmt::Debug for NamespaceRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceRegistration")
            .field("id", &self.id)
            .field("global_name", &self.global_name)
            .field("required_tool_names", &self.required_tool_names)
            .finish_non_exhaustive()
    }
}

/// A registration or scope that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceError {
    /// The registration itself is wrong.
    #[error("namespace `{id}` of plugin `{plugin}`: {problem}")]
    Registration {
        /// The plugin.
        plugin: String,
        /// The namespace id.
        id: String,
        /// What is wrong.
        problem: String,
    },
    /// The scope built for a run is wrong (nothing of it reaches a cell).
    #[error(
        "namespace `{global_name}` (plugin `{plugin}`): its scope is refused at `{path}`: {problem}"
    )]
    Scope {
        /// The plugin.
        plugin: String,
        /// The namespace's global.
        global_name: String,
        /// Where in the scope.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

/// Globals a namespace may not take besides those of the guest API
/// (`guest_api::GUEST_GLOBALS`) and the engine prelude
/// (`codemode_sandbox::PRELUDE_GLOBALS`), which own their lists: names
/// hosts and the language give meaning to.
const RESERVED_GLOBALS: &[&str] = &[
    // other runtimes' globals a model may probe for
    "process",
    "Deno",
    "Bun",
    "os",
    "std",
    "console",
    // the language
    "globalThis",
    "Object",
    "Function",
    "Array",
    "Number",
    "Boolean",
    "String",
    "Symbol",
    "BigInt",
    "Date",
    "Promise",
    "RegExp",
    "Error",
    "AggregateError",
    "EvalError",
    "RangeError",
    "ReferenceError",
    "SyntaxError",
    "TypeError",
    "URIError",
    "JSON",
    "Math",
    "Reflect",
    "Proxy",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "FinalizationRegistry",
    "ArrayBuffer",
    "SharedArrayBuffer",
    "DataView",
    "Atomics",
    "Iterator",
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "BigInt64Array",
    "BigUint64Array",
    "Intl",
    "eval",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "unescape",
    "queueMicrotask",
    "undefined",
    "NaN",
    "Infinity",
    "arguments",
];

/// Path segments that could reach a prototype.
const UNSAFE_SEGMENTS: &[&str] = &["__proto__", "constructor", "prototype"];

/// The separator of callable paths (`list`, `issues.update`): keys may
/// not contain it.
pub const PATH_SEPARATOR: char = '.';

/// The deepest scope accepted.
const MAX_SCOPE_DEPTH: usize = 32;
/// The most nodes one scope serializes to (shared nodes count each time).
const MAX_SCOPE_NODES: usize = 10_000;

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// Whether `name` may be a namespace's global, and why not.
fn check_global_name(name: &str) -> Result<(), String> {
    if !is_identifier(name) {
        return Err(format!(
            "globalName `{}` is not a JavaScript identifier (letters, digits, _ and $, not starting with a digit)",
            name.chars().take(64).collect::<String>()
        ));
    }
    // The words that cannot name a declaration (reserved words, `then`,
    // `constructor`, ...) cannot name a namespace either.
    if crate::catalog::mcp::RESERVED.contains(&name) {
        return Err(format!("globalName `{name}` is a reserved word"));
    }
    if RESERVED_GLOBALS.contains(&name)
        || crate::catalog::guest_api::GUEST_GLOBALS.contains(&name)
        || codemode_sandbox::PRELUDE_GLOBALS.contains(&name)
        || name.starts_with("__codemode")
        || name.starts_with("__openclaw")
    {
        return Err(format!(
            "globalName `{name}` collides with a built-in global of code mode or JavaScript"
        ));
    }
    Ok(())
}

struct Registered {
    plugin: String,
    registration: Arc<NamespaceRegistration>,
}

/// The namespaces registered in a runtime (process-local).
#[derive(Default)]
pub struct NamespaceRegistry {
    registered: Mutex<Vec<Registered>>,
}

impl std::fmt::Debug for NamespaceRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceRegistry")
            .field("count", &self.lock().len())
            .finish()
    }
}

impl NamespaceRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Registered>> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `registration` for `plugin_id`. Registering an id the
    /// plugin already has replaces it.
    ///
    /// # Errors
    /// [`NamespaceError::Registration`]: an empty id or plugin id, a bad
    /// `globalName`, no required tools, or an id or `globalName` another
    /// registration holds.
    pub fn register(
        &self,
        plugin_id: &str,
        registration: NamespaceRegistration,
    ) -> Result<(), NamespaceError> {
        let refuse = |problem: String| NamespaceError::Registration {
            plugin: plugin_id.to_owned(),
            id: registration.id.clone(),
            problem,
        };
        if plugin_id.trim().is_empty() {
            return Err(refuse("the plugin id is empty".into()));
        }
        if registration.id.trim().is_empty() || registration.id.len() > 128 {
            return Err(refuse("the id must be 1 to 128 bytes".into()));
        }
        check_global_name(&registration.global_name).map_err(refuse)?;
        if registration.required_tool_names.is_empty() {
            return Err(refuse(
                "requiredToolNames is empty: a namespace is visible only with the plugin tools it calls".into(),
            ));
        }
        let mut registered = self.lock();
        if let Some(other) = registered.iter().find(|r| {
            (r.registration.id == registration.id
                || r.registration.global_name == registration.global_name)
                && !(r.plugin == plugin_id && r.registration.id == registration.id)
        }) {
            return Err(refuse(format!(
                "id or globalName `{}` is already registered by plugin `{}`",
                if other.registration.id == registration.id {
                    &registration.id
                } else {
                    &registration.global_name
                },
                other.plugin
            )));
        }
        registered.retain(|r| !(r.plugin == plugin_id && r.registration.id == registration.id));
        registered.push(Registered {
            plugin: plugin_id.to_owned(),
            registration: Arc::new(registration),
        });
        Ok(())
    }

    /// Removes every namespace of `plugin_id` (disable, uninstall,
    /// rollback); returns how many. Runs already started keep theirs.
    pub fn clear_plugin(&self, plugin_id: &str) -> usize {
        let mut registered = self.lock();
        let before = registered.len();
        registered.retain(|r| r.plugin != plugin_id);
        before - registered.len()
    }

    /// Removes every namespace (for tests).
    pub fn clear_all(&self) {
        self.lock().clear();
    }

    /// The registrations visible with `catalog`, in registration order.
    pub(crate) fn visible(&self, catalog: &Catalog) -> Vec<(String, Arc<NamespaceRegistration>)> {
        self.lock()
            .iter()
            .filter(|r| {
                r.registration
                    .required_tool_names
                    .iter()
                    .all(|name| owned_entry(catalog, &r.plugin, name).is_some())
            })
            .map(|r| (r.plugin.clone(), Arc::clone(&r.registration)))
            .collect()
    }

    /// The namespaces of one run: each visible one's scope built and
    /// serialized. `None` when none is visible.
    ///
    /// # Errors
    /// [`NamespaceError::Scope`] when a scope is refused.
    pub(crate) fn for_run(
        &self,
        catalog: &Catalog,
        context: &ScopeContext,
    ) -> Result<Option<Arc<RunNamespaces>>, NamespaceError> {
        let visible = self.visible(catalog);
        if visible.is_empty() {
            return Ok(None);
        }
        let mut descriptors = Vec::new();
        let mut callables = HashMap::new();
        for (plugin, registration) in visible {
            let scope = (registration.create_scope)(context);
            let mut walk = Walk {
                plugin: &plugin,
                registration: &registration,
                catalog,
                callables: &mut callables,
                ancestors: Vec::new(),
                nodes: 0,
            };
            let tree = walk.node(&scope, &mut Vec::new())?;
            descriptors.push(json!([registration.global_name, registration.id, tree]));
        }
        Ok(Some(Arc::new(RunNamespaces {
            descriptors: Value::Array(descriptors),
            callables,
        })))
    }
}

/// The catalog entry named `name` owned by `plugin`, if the run has it.
fn owned_entry<'a>(
    catalog: &'a Catalog,
    plugin: &str,
    name: &str,
) -> Option<&'a Arc<CatalogEntry>> {
    catalog
        .entries()
        .iter()
        .find(|e| e.name == name && e.source_name == plugin)
}

/// One callable of a run: the catalog entry it calls and its mapper.
#[derive(Clone)]
pub(crate) struct Callable {
    pub(crate) entry: Arc<CatalogEntry>,
    mapper: Option<InputMapper>,
    /// `<globalName>.<path>`, for messages.
    pub(crate) label: String,
}

impl Callable {
    /// The tool input for guest arguments `args`.
    pub(crate) fn input(&self, args: &[Value]) -> Value {
        match &self.mapper {
            Some(mapper) => mapper(args),
            None => match args.first() {
                None | Some(Value::Null) => json!({}),
                Some(first) => first.clone(),
            },
        }
    }
}

/// The namespaces of one run, as serialized for its guest.
pub(crate) struct RunNamespaces {
    /// `[[globalName, id, tree], ...]` for `guest_api.js`.
    pub(crate) descriptors: Value,
    /// `(namespace id, path)` → what it calls.
    callables: HashMap<(String, String), Callable>,
}

impl RunNamespaces {
    /// What `(namespace, path)` calls, if this run has it.
    pub(crate) fn resolve(&self, namespace: &str, path: &str) -> Option<&Callable> {
        self.callables.get(&(namespace.to_owned(), path.to_owned()))
    }
}

/// Serialization state of one scope.
struct Walk<'a> {
    plugin: &'a str,
    registration: &'a NamespaceRegistration,
    catalog: &'a Catalog,
    callables: &'a mut HashMap<(String, String), Callable>,
    /// Shared nodes being serialized now (a repeat is a cycle).
    ancestors: Vec<*const Mutex<ScopeValue>>,
    nodes: usize,
}

impl Walk<'_> {
    fn refuse(&self, path: &[String], problem: impl Into<String>) -> NamespaceError {
        NamespaceError::Scope {
            plugin: self.plugin.to_owned(),
            global_name: self.registration.global_name.clone(),
            path: if path.is_empty() {
                "(the scope)".to_owned()
            } else {
                path.join(".")
            },
            problem: problem.into(),
        }
    }

    /// The descriptor of `value` at `path`: `{"j": json}`, `{"o": [[k,
    /// node]...]}`, `{"a": [node...]}` or `{"f": "path"}`.
    fn node(
        &mut self,
        value: &ScopeValue,
        path: &mut Vec<String>,
    ) -> Result<Value, NamespaceError> {
        self.nodes += 1;
        if self.nodes > MAX_SCOPE_NODES {
            return Err(self.refuse(path, format!("more than {MAX_SCOPE_NODES} nodes")));
        }
        if path.len() > MAX_SCOPE_DEPTH {
            return Err(self.refuse(path, format!("nested deeper than {MAX_SCOPE_DEPTH} levels")));
        }
        Ok(match value {
            ScopeValue::Json(v) => json!({ "j": v }),
            ScopeValue::Object(entries) => {
                let mut out = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for (key, child) in entries {
                    if key.is_empty()
                        || UNSAFE_SEGMENTS.contains(&key.as_str())
                        || key.contains(PATH_SEPARATOR)
                    {
                        return Err(self.refuse(
                            path,
                            format!(
                                "unsafe key `{}` (empty, `__proto__`, `constructor`, `prototype`, or containing `{PATH_SEPARATOR}`)",
                                key.chars().take(64).collect::<String>()
                            ),
                        ));
                    }
                    if !seen.insert(key.as_str()) {
                        return Err(self.refuse(path, format!("key `{key}` appears twice")));
                    }
                    path.push(key.clone());
                    let node = self.node(child, path)?;
                    path.pop();
                    out.push(json!([key, node]));
                }
                json!({ "o": out })
            }
            ScopeValue::Array(items) => {
                let mut out = Vec::new();
                for (i, child) in items.iter().enumerate() {
                    path.push(i.to_string());
                    let node = self.node(child, path)?;
                    path.pop();
                    out.push(node);
                }
                json!({ "a": out })
            }
            ScopeValue::Tool(tool) => {
                if !self.registration.required_tool_names.contains(&tool.tool) {
                    return Err(self.refuse(
                        path,
                        format!(
                            "it calls tool `{}`, which is not in requiredToolNames",
                            tool.tool.chars().take(128).collect::<String>()
                        ),
                    ));
                }
                let Some(entry) = owned_entry(self.catalog, self.plugin, &tool.tool) else {
                    return Err(
                        self.refuse(path, format!("tool `{}` is not in this run", tool.tool))
                    );
                };
                let joined = path.join(".");
                self.callables.insert(
                    (self.registration.id.clone(), joined.clone()),
                    Callable {
                        entry: Arc::clone(entry),
                        mapper: tool.mapper.clone(),
                        label: format!("{}.{joined}", self.registration.global_name),
                    },
                );
                json!({ "f": joined })
            }
            ScopeValue::Shared(node) => {
                let pointer = Arc::as_ptr(node);
                if self.ancestors.contains(&pointer) {
                    return Err(self.refuse(path, "the scope is cyclic (a node contains itself)"));
                }
                self.ancestors.push(pointer);
                let inner = node.lock().unwrap_or_else(PoisonError::into_inner).clone();
                let out = self.node(&inner, path);
                self.ancestors.pop();
                out?
            }
            ScopeValue::HostFunction(_) => {
                return Err(self.refuse(
                    path,
                    "a raw host function; use namespace_tool(...) so the call goes through the catalog tool",
                ));
            }
        })
    }
}

/// The text a visible namespace adds to the exec description.
pub(crate) fn describe_for_model(visible: &[(String, Arc<NamespaceRegistration>)]) -> String {
    let mut text = String::new();
    for (_, registration) in visible {
        text.push_str(&format!(
            "{} (also namespaces.{}): {}",
            registration.global_name,
            registration.global_name,
            registration.description.trim()
        ));
        if let Some(prompt) = registration
            .prompt
            .as_deref()
            .filter(|p| !p.trim().is_empty())
        {
            text.push(' ');
            text.push_str(prompt.trim());
        }
        text.push(' ');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ToolDefinition, ToolPolicy, ToolSource};

    #[test]
    fn only_registered_paths_of_visible_namespaces_resolve() {
        let catalog = Catalog::build(
            vec![ToolDefinition::new(
                ToolSource::Plugin,
                "github",
                "list_issues",
            )],
            &ToolPolicy::default(),
        )
        .unwrap();
        let registry = NamespaceRegistry::default();
        registry
            .register(
                "github",
                NamespaceRegistration {
                    id: "gh".into(),
                    global_name: "Issues".into(),
                    description: String::new(),
                    required_tool_names: vec!["list_issues".into()],
                    prompt: None,
                    create_scope: Arc::new(|_| {
                        ScopeValue::Object(vec![
                            ("list".into(), namespace_tool("list_issues")),
                            ("data".into(), ScopeValue::Json(json!({ "list": 1 }))),
                            (
                                "deep".into(),
                                ScopeValue::Object(vec![(
                                    "list".into(),
                                    namespace_tool("list_issues"),
                                )]),
                            ),
                        ])
                    }),
                },
            )
            .unwrap();
        let context = ScopeContext {
            agent_id: None,
            session_key: None,
            session_id: None,
            run_id: None,
            config: CodeModeConfig::default(),
            aborted: false,
        };
        let run = registry.for_run(&catalog, &context).unwrap().unwrap();
        assert_eq!(
            run.resolve("gh", "list").map(|c| c.entry.id.as_str()),
            Some("plugin:github:list_issues")
        );
        assert_eq!(
            run.resolve("gh", "deep.list").map(|c| c.label.as_str()),
            Some("Issues.deep.list")
        );
        for (ns, path) in [
            ("gh", "data"),
            ("gh", "data.list"),
            ("gh", "nope"),
            ("other", "list"),
            ("Issues", "list"),
            ("gh", ""),
        ] {
            assert!(run.resolve(ns, path).is_none(), "forged {ns} {path}");
        }
        // The mapperless input: the first argument, or {}.
        let list = run.resolve("gh", "list").unwrap();
        assert_eq!(list.input(&[]), json!({}));
        assert_eq!(list.input(&[json!({"a": 1}), json!(2)]), json!({"a": 1}));
        // Without the plugin's tool nothing is visible.
        let empty = Catalog::build(Vec::new(), &ToolPolicy::default()).unwrap();
        assert!(registry.for_run(&empty, &context).unwrap().is_none());
    }

    #[test]
    fn global_names_must_be_identifiers_and_not_built_ins() {
        for good in ["Issues", "_x", "$cal", "Fictions2"] {
            assert!(check_global_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "2x",
            "a-b",
            "a.b",
            "tools",
            "namespaces",
            "text",
            "json",
            "yield_control",
            "ALL_TOOLS",
            "MCP",
            "API",
            "progress",
            "unwrap",
            "require",
            "Promise",
            "Object",
            "class",
            "__codemodeX",
            "__openclaw_y",
        ] {
            assert!(check_global_name(bad).is_err(), "{bad}");
        }
    }
}
