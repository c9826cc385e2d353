//! `tools.codeMode`: parsing, defaults, clamping and diagnostics
//! (`docs/configuration.md`).
//!
//! Values of the wrong type are errors naming the field; out-of-range values
//! are clamped and reported (the contract's exception to the reader's
//! policy); unknown fields are reported by the one config reader
//! ([`reader`]), never silently ignored.

pub mod reader;

use std::fmt;

use serde_json::Value;

/// A cell language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// Plain JavaScript.
    JavaScript,
    /// TypeScript (types stripped before running).
    TypeScript,
}

impl Language {
    /// The name used in configs and exec input.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
        }
    }

    /// Parses `javascript` / `typescript`.
    pub fn parse(s: &str) -> Option<Language> {
        match s {
            "javascript" => Some(Language::JavaScript),
            "typescript" => Some(Language::TypeScript),
            _ => None,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The effective `tools.codeMode` settings, after defaults and clamps.
///
/// ```
/// use codemode_runtime::CodeModeConfig;
/// let (config, diagnostics) = CodeModeConfig::from_json5("{ tools: { codeMode: { enabled: true, timeoutMs: 5 } } }").unwrap();
/// assert!(config.enabled);
/// assert_eq!(config.timeout_ms, 100); // clamped to the lower bound
/// assert_eq!(diagnostics[0].path, "tools.codeMode.timeoutMs");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CodeModeConfig {
    /// The only switch.
    pub enabled: bool,
    /// Allowed cell languages.
    pub languages: Vec<Language>,
    /// Wall-clock limit of one exec or wait.
    pub timeout_ms: u64,
    /// Guest heap limit.
    pub memory_limit_bytes: u64,
    /// Returned text, json and value, per result.
    pub max_output_bytes: u64,
    /// One serialized VM snapshot.
    pub max_snapshot_bytes: u64,
    /// Concurrent nested calls.
    pub max_pending_tool_calls: u64,
    /// Nested calls started past `max_pending_tool_calls` that wait for a
    /// free slot (in start order) instead of failing; 0 fails at the cap,
    /// as the reference does.
    pub max_queued_tool_calls: u64,
    /// How long a suspended VM can be resumed.
    pub snapshot_ttl_seconds: u64,
    /// Default hits of `tools.search`.
    pub search_default_limit: u64,
    /// Max hits of `tools.search`.
    pub max_search_limit: u64,
}

impl Default for CodeModeConfig {
    fn default() -> Self {
        CodeModeConfig {
            enabled: false,
            languages: vec![Language::JavaScript, Language::TypeScript],
            timeout_ms: 10_000,
            memory_limit_bytes: 64 << 20,
            max_output_bytes: 65_536,
            max_snapshot_bytes: 10 << 20,
            max_pending_tool_calls: 16,
            max_queued_tool_calls: 1000,
            snapshot_ttl_seconds: 900,
            search_default_limit: 8,
            max_search_limit: 50,
        }
    }
}

/// Something worth telling the user about a config that still loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Dotted path of the field, e.g. `tools.codeMode.timeoutMs`.
    pub path: String,
    /// What happened and what the effective value is.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A config that cannot be used (`invalid_config`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid config at {path}: {message}")]
pub struct ConfigError {
    /// Dotted path of the offending field (or `$` for the whole file).
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
}

const PREFIX: &str = "tools.codeMode";

struct Bound {
    name: &'static str,
    min: u64,
    max: u64,
}

const BOUNDS: &[Bound] = &[
    Bound {
        name: "timeoutMs",
        min: 100,
        max: 60_000,
    },
    Bound {
        name: "memoryLimitBytes",
        min: 1 << 20,
        max: 1 << 30,
    },
    Bound {
        name: "maxOutputBytes",
        min: 1024,
        max: 10 << 20,
    },
    Bound {
        name: "maxSnapshotBytes",
        min: 1024,
        max: 256 << 20,
    },
    Bound {
        name: "maxPendingToolCalls",
        min: 1,
        max: 128,
    },
    Bound {
        name: "maxQueuedToolCalls",
        min: 0,
        max: 10_000,
    },
    Bound {
        name: "snapshotTtlSeconds",
        min: 1,
        max: 86_400,
    },
    Bound {
        name: "maxSearchLimit",
        min: 1,
        max: 50,
    },
    Bound {
        name: "searchDefaultLimit",
        min: 1,
        max: 50,
    },
];

impl CodeModeConfig {
    /// Parses a JSON5 document holding `{ tools: { codeMode: ... } }`.
    ///
    /// # Errors
    /// [`ConfigError`] for bad JSON5 or a field of the wrong type.
    pub fn from_json5(text: &str) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        let root: Value = json5::from_str(text).map_err(|e| ConfigError {
            path: "$".into(),
            message: format!("not valid JSON5: {e}"),
        })?;
        CodeModeConfig::from_document(&root)
    }

    /// Reads `tools.codeMode` out of an already parsed document.
    ///
    /// # Errors
    /// [`ConfigError`] for a field of the wrong type.
    pub fn from_document(root: &Value) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        first_error(CodeModeConfig::check_document(root, None))
    }

    /// The effective config of agent `agent_id`: its
    /// `agents.list[].tools.codeMode` block (the entry whose `id` matches)
    /// shallow-merged over the global `tools.codeMode`, key by key, the
    /// agent's keys winning. `true`/`false` count as `{ enabled: ... }`, so
    /// an agent's `false` turns off a global `true`, and an agent's
    /// `{ timeoutMs }` keeps the global switch.
    ///
    /// ```
    /// use codemode_runtime::CodeModeConfig;
    /// let root = serde_json::json!({
    ///     "tools": { "codeMode": { "enabled": true, "timeoutMs": 5000 } },
    ///     "agents": { "list": [ { "id": "quiet", "tools": { "codeMode": false } },
    ///                           { "id": "slow", "tools": { "codeMode": { "timeoutMs": 30000 } } } ] },
    /// });
    /// assert!(!CodeModeConfig::for_agent(&root, "quiet").unwrap().0.enabled);
    /// let (slow, _) = CodeModeConfig::for_agent(&root, "slow").unwrap();
    /// assert!(slow.enabled && slow.timeout_ms == 30000);
    /// assert_eq!(CodeModeConfig::for_agent(&root, "other").unwrap().0.timeout_ms, 5000);
    /// ```
    ///
    /// # Errors
    /// [`ConfigError`] (`invalid_config`) for a field of the wrong type in
    /// either block, naming the block it is in.
    pub fn for_agent(
        root: &Value,
        agent_id: &str,
    ) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        first_error(CodeModeConfig::check_document(root, Some(agent_id)))
    }

    /// Reads a document's `tools.codeMode` (with `agent_id`'s block merged
    /// over it, see [`CodeModeConfig::for_agent`]) and reports every
    /// problem, as [`CodeModeConfig::check_value`] does.
    pub fn check_document(
        root: &Value,
        agent_id: Option<&str>,
    ) -> (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>) {
        let mut errors = Vec::new();
        let Some(root) = root.as_object() else {
            errors.push(ConfigError {
                path: "$".into(),
                message: "the config must be an object".into(),
            });
            return (CodeModeConfig::default(), Vec::new(), errors);
        };
        let mut layers: Vec<(String, &Value)> = Vec::new();
        if let Some(block) = code_mode_block(root.get("tools"), "tools", &mut errors) {
            layers.push((PREFIX.to_owned(), block));
        }
        if let Some(agent_id) = agent_id
            && let Some((path, block)) = agent_block(root, agent_id, &mut errors)
        {
            layers.push((path, block));
        }
        let (config, diagnostics, more) = check_layers(&layers);
        errors.extend(more);
        (config, diagnostics, errors)
    }

    /// Reads the value of `tools.codeMode` itself (`true`, `false` or an object).
    ///
    /// # Errors
    /// [`ConfigError`] for a field of the wrong type or a value outside a
    /// closed set (`runtime`, `mode`, `languages`): the first one found
    /// ([`CodeModeConfig::check_value`] reports them all).
    pub fn from_value(value: &Value) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        first_error(CodeModeConfig::check_value(value))
    }

    /// Reads `tools.codeMode` and reports every problem: the effective
    /// config (fields in error keep their defaults), the diagnostics, and
    /// all errors in field order.
    pub fn check_value(value: &Value) -> (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>) {
        CodeModeConfig::check_block(value, PREFIX)
    }

    /// [`CodeModeConfig::check_value`] for a block found at `path` (an
    /// agent's `agents.list[2].tools.codeMode`): its problems are named
    /// by that path.
    pub fn check_block(
        value: &Value,
        path: &str,
    ) -> (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>) {
        check_layers(&[(path.to_owned(), value)])
    }

    fn field_mut(&mut self, name: &str) -> &mut u64 {
        match name {
            "timeoutMs" => &mut self.timeout_ms,
            "memoryLimitBytes" => &mut self.memory_limit_bytes,
            "maxOutputBytes" => &mut self.max_output_bytes,
            "maxSnapshotBytes" => &mut self.max_snapshot_bytes,
            "maxPendingToolCalls" => &mut self.max_pending_tool_calls,
            "maxQueuedToolCalls" => &mut self.max_queued_tool_calls,
            "snapshotTtlSeconds" => &mut self.snapshot_ttl_seconds,
            "maxSearchLimit" => &mut self.max_search_limit,
            _ => &mut self.search_default_limit,
        }
    }

    /// Whether `language` may be used in cells.
    pub fn allows(&self, language: Language) -> bool {
        self.languages.contains(&language)
    }
}

fn first_error(
    (config, diagnostics, mut errors): (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>),
) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
    match errors.is_empty() {
        true => Ok((config, diagnostics)),
        false => Err(errors.swap_remove(0)),
    }
}

/// `<tools>.codeMode`, when `tools` (at `path`) is an object holding it.
fn code_mode_block<'a>(
    tools: Option<&'a Value>,
    path: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<&'a Value> {
    match tools? {
        Value::Object(tools) => tools.get("codeMode"),
        _ => {
            errors.push(type_error(path, "an object"));
            None
        }
    }
}

/// The `tools.codeMode` block of the `agents.list` entry with `id ==
/// agent_id`, with its path (`agents.list[2].tools.codeMode`).
fn agent_block<'a>(
    root: &'a serde_json::Map<String, Value>,
    agent_id: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<(String, &'a Value)> {
    let agents = match root.get("agents")? {
        Value::Object(agents) => agents,
        _ => {
            errors.push(type_error("agents", "an object"));
            return None;
        }
    };
    let list = match agents.get("list")? {
        Value::Array(list) => list,
        _ => {
            errors.push(type_error("agents.list", "an array of agents"));
            return None;
        }
    };
    let (index, agent) = list
        .iter()
        .enumerate()
        .find(|(_, agent)| agent.get("id").and_then(Value::as_str) == Some(agent_id))?;
    let tools_path = format!("agents.list[{index}].tools");
    let block = code_mode_block(agent.get("tools"), &tools_path, errors)?;
    Some((format!("{tools_path}.codeMode"), block))
}

/// Checks layered `tools.codeMode` blocks (later keys win, key by key);
/// each problem names the block its key came from.
fn check_layers(
    layers: &[(String, &Value)],
) -> (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>) {
    let mut config = CodeModeConfig::default();
    let mut diagnostics = Vec::new();
    let mut errors = Vec::new();
    // key → (the block's path, the value), in first-seen order.
    let mut merged: Vec<(&str, String, &Value)> = Vec::new();
    for (prefix, value) in layers {
        match value {
            Value::Bool(_) => set_key(&mut merged, "enabled", prefix, value),
            Value::Object(object) => {
                for (key, field) in object {
                    set_key(&mut merged, key, prefix, field);
                }
            }
            _ => errors.push(ConfigError {
                path: prefix.clone(),
                message: "expected true, false or an object".into(),
            }),
        }
    }
    let mut search_default_path = format!("{PREFIX}.searchDefaultLimit");
    for (key, prefix, field) in merged {
        let path = format!("{prefix}.{key}");
        if key == "searchDefaultLimit" {
            search_default_path = path.clone();
        }
        let checked: Result<(), ConfigError> = match key {
            "enabled" => match field {
                // Only a literal `true` turns code mode on.
                Value::Bool(b) => {
                    config.enabled = *b;
                    Ok(())
                }
                _ => Err(type_error(&path, "a boolean")),
            },
            "runtime" => expect_only(&path, field, "quickjs-wasi"),
            "mode" => expect_only(&path, field, "only"),
            "languages" => parse_languages(&path, field).map(|l| config.languages = l),
            name => {
                if let Some(bound) = BOUNDS.iter().find(|b| b.name == name) {
                    parse_integer(&path, field).map(|raw| {
                        let clamped = raw.clamp(bound.min as i128, bound.max as i128) as u64;
                        if clamped as i128 != raw {
                            diagnostics.push(Diagnostic {
                                path: path.clone(),
                                message: format!(
                                    "{raw} is outside {} … {}; using {clamped}",
                                    bound.min, bound.max
                                ),
                            });
                        }
                        *config.field_mut(name) = clamped;
                    })
                } else {
                    let known: Vec<&str> = ["enabled", "runtime", "mode", "languages"]
                        .into_iter()
                        .chain(BOUNDS.iter().map(|b| b.name))
                        .collect();
                    let message = reader::unknown_key(name, &known);
                    diagnostics.push(Diagnostic { path, message });
                    Ok(())
                }
            }
        };
        if let Err(e) = checked {
            errors.push(e);
        }
    }
    if config.search_default_limit > config.max_search_limit {
        diagnostics.push(Diagnostic {
            path: search_default_path,
            message: format!(
                "{} is above maxSearchLimit; using {}",
                config.search_default_limit, config.max_search_limit
            ),
        });
        config.search_default_limit = config.max_search_limit;
    }
    (config, diagnostics, errors)
}

/// Sets `key` in the merged view: a later block replaces the value (and
/// the path problems are reported under).
fn set_key<'a>(
    merged: &mut Vec<(&'a str, String, &'a Value)>,
    key: &'a str,
    prefix: &str,
    value: &'a Value,
) {
    match merged.iter_mut().find(|(k, _, _)| *k == key) {
        Some(entry) => *entry = (key, prefix.to_owned(), value),
        None => merged.push((key, prefix.to_owned(), value)),
    }
}

fn type_error(path: &str, expected: &str) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: format!("expected {expected}"),
    }
}

fn expect_only(path: &str, value: &Value, only: &str) -> Result<(), ConfigError> {
    match value.as_str() {
        Some(s) if s == only => Ok(()),
        Some(other) => Err(ConfigError {
            path: path.into(),
            message: format!("\"{other}\" is not supported; the only value is \"{only}\""),
        }),
        None => Err(type_error(path, &format!("the string \"{only}\""))),
    }
}

fn parse_integer(path: &str, value: &Value) -> Result<i128, ConfigError> {
    reader::whole_number(value).ok_or_else(|| type_error(path, "a whole number"))
}

fn parse_languages(path: &str, value: &Value) -> Result<Vec<Language>, ConfigError> {
    let Some(items) = value.as_array() else {
        return Err(type_error(
            path,
            "an array of \"javascript\" / \"typescript\"",
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let name = item
            .as_str()
            .ok_or_else(|| type_error(&item_path, "a string"))?;
        let language = Language::parse(name).ok_or_else(|| ConfigError {
            path: item_path,
            message: format!("unknown language \"{name}\"; use \"javascript\" or \"typescript\""),
        })?;
        if !out.contains(&language) {
            out.push(language);
        }
    }
    if out.is_empty() {
        return Err(ConfigError {
            path: path.into(),
            message: "at least one language is needed".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        CodeModeConfig::from_json5(text)
    }

    /// A reference-style config: many keys that are not ours, a global
    /// block and per-agent blocks.
    const REFERENCE: &str = r#"{
      gateway: { port: 18789, auth: { mode: "token" } },
      models: { providers: { openai: { apiKey: "sk-..." } } },
      channels: { telegram: { enabled: true } },
      tools: { profile: "coding", codeMode: true, sandbox: { tools: { alsoAllow: ["bundle-mcp"] } } },
      agents: {
        defaults: { model: "openai/gpt-5" },
        list: [
          { id: "main", default: true },
          { id: "ops", tools: { codeMode: { timeoutMs: 30000, maxPendingToolCalls: 4 } } },
          { id: "chat", tools: { codeMode: false } },
          { id: "bad", tools: { codeMode: { enabled: "yes", snapshotTtlSeconds: 999999, colour: 1 } } },
        ],
      },
    }"#;

    fn agent(id: &str) -> (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>) {
        let root: Value = json5::from_str(REFERENCE).unwrap();
        CodeModeConfig::check_document(&root, Some(id))
    }

    #[test]
    fn a_reference_config_loads_unchanged_and_agents_merge_over_the_global_block() {
        let (main, diagnostics, errors) = agent("main");
        assert!(main.enabled && errors.is_empty() && diagnostics.is_empty());
        assert_eq!(main.timeout_ms, 10_000);
        let (ops, _, errors) = agent("ops");
        assert!(errors.is_empty());
        assert!(ops.enabled, "the global shorthand's switch holds");
        assert_eq!((ops.timeout_ms, ops.max_pending_tool_calls), (30_000, 4));
        let (chat, _, _) = agent("chat");
        assert!(!chat.enabled, "an agent's false turns it off");
        let (unknown_agent, _, errors) = agent("nobody");
        assert!(unknown_agent.enabled && errors.is_empty());
        // The whole document without an agent: the global block only.
        let root: Value = json5::from_str(REFERENCE).unwrap();
        assert!(CodeModeConfig::from_document(&root).unwrap().0.enabled);
    }

    #[test]
    fn problems_in_an_agent_block_name_that_block() {
        let (config, diagnostics, errors) = agent("bad");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "agents.list[3].tools.codeMode.enabled");
        assert!(!config.enabled, "a field in error keeps its default (off)");
        let paths: Vec<&str> = diagnostics.iter().map(|d| d.path.as_str()).collect();
        assert!(
            paths.contains(&"agents.list[3].tools.codeMode.snapshotTtlSeconds"),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"agents.list[3].tools.codeMode.colour"),
            "{paths:?}"
        );
        let err =
            CodeModeConfig::for_agent(&json5::from_str(REFERENCE).unwrap(), "bad").unwrap_err();
        assert!(
            err.to_string()
                .contains("agents.list[3].tools.codeMode.enabled"),
            "{err}"
        );
        for (doc, path) in [
            (r#"{ agents: [] }"#, "agents"),
            (r#"{ agents: { list: {} } }"#, "agents.list"),
            (
                r#"{ agents: { list: [{ id: "a", tools: 1 }] } }"#,
                "agents.list[0].tools",
            ),
            (
                r#"{ agents: { list: [{ id: "a", tools: { codeMode: 7 } }] } }"#,
                "agents.list[0].tools.codeMode",
            ),
            (r#"{ tools: [] }"#, "tools"),
        ] {
            let root: Value = json5::from_str(doc).unwrap();
            let (_, _, errors) = CodeModeConfig::check_document(&root, Some("a"));
            assert_eq!(errors.first().map(|e| e.path.as_str()), Some(path), "{doc}");
        }
    }

    #[test]
    fn absent_or_false_is_off_and_true_is_shorthand() {
        assert!(!parse("{}").unwrap().0.enabled);
        assert!(!parse("{tools:{codeMode:false}}").unwrap().0.enabled);
        assert!(parse("{tools:{codeMode:true}}").unwrap().0.enabled);
    }

    #[test]
    fn other_fields_never_turn_it_on() {
        let (config, _) = parse("{tools:{codeMode:{timeoutMs: 2000}}}").unwrap();
        assert!(!config.enabled);
        assert_eq!(config.timeout_ms, 2000);
    }

    #[test]
    fn out_of_range_values_clamp_and_report() {
        let (config, diags) =
            parse("{tools:{codeMode:{enabled:true, timeoutMs: 999999, maxPendingToolCalls: 0}}}")
                .unwrap();
        assert_eq!(config.timeout_ms, 60_000);
        assert_eq!(config.max_pending_tool_calls, 1);
        assert_eq!(diags.len(), 2);
        assert!(
            diags
                .iter()
                .any(|d| d.path == "tools.codeMode.timeoutMs" && d.message.contains("60000"))
        );
    }

    #[test]
    fn wrong_types_name_the_field() {
        let err = parse("{tools:{codeMode:{enabled:true, memoryLimitBytes: 'lots'}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.memoryLimitBytes");
        let err = parse("{tools:{codeMode:{enabled:'yes'}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.enabled");
        let err = parse("{tools:{codeMode:{languages:['python']}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.languages[0]");
        let err = parse("{tools:{codeMode:{runtime:'v8'}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.runtime");
    }

    #[test]
    fn unknown_fields_are_reported() {
        let (_, diags) = parse("{tools:{codeMode:{enabled:true, timeotMs: 5}}}").unwrap();
        assert_eq!(
            diags,
            vec![Diagnostic {
                path: "tools.codeMode.timeotMs".into(),
                message: "unknown field; did you mean `timeoutMs`? It has no effect".into()
            }]
        );
    }

    #[test]
    fn default_search_limit_never_exceeds_max() {
        let (config, diags) =
            parse("{tools:{codeMode:{maxSearchLimit: 5, searchDefaultLimit: 9}}}").unwrap();
        assert_eq!(config.search_default_limit, 5);
        assert_eq!(diags.len(), 1);
    }

    #[test]
    fn check_value_reports_every_error() {
        let root: Value = json5::from_str(
            "{enabled: 'yes', timeoutMs: 'soon', languages: ['python'], maxOutputBytes: 10}",
        )
        .unwrap();
        let (config, diagnostics, errors) = CodeModeConfig::check_value(&root);
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tools.codeMode.enabled",
                "tools.codeMode.languages[0]",
                "tools.codeMode.timeoutMs"
            ]
        );
        assert_eq!(config.max_output_bytes, 1024);
        assert_eq!(diagnostics.len(), 1);
    }

    #[test]
    fn bad_json5_is_an_error_at_the_root() {
        assert_eq!(parse("{tools:").unwrap_err().path, "$");
    }
}
