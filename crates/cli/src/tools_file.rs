//! `--tools FILE`: scripted tools for trying cells from the command line.
//!
//! ```json5
//! { tools: [
//!   { source: "openclaw", owner: "core", name: "read", description: "Read a file",
//!     parameters: { type: "object", properties: { path: { type: "string" } } },
//!     result: { text: "hello" } },
//!   { source: "plugin", owner: "util", name: "echo", echoInput: true, delayMs: 50 },
//!   { source: "client", owner: "app", name: "broken", error: "the app is offline" },
//! ] }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use codemode_runtime::config_reader::{Section, Strictness, integer_in};
use codemode_runtime::{
    NestedCall, ToolCallError, ToolDefinition, ToolExecutor, ToolFuture, ToolSource,
};
use serde_json::Value;

/// What a scripted tool does when called.
#[derive(Debug, Clone, PartialEq)]
enum Behaviour {
    Result(Value),
    EchoInput,
    Error(String),
}

#[derive(Debug, Clone)]
struct Scripted {
    behaviour: Behaviour,
    delay: Option<Duration>,
}

/// The parsed tools file.
#[derive(Debug, Clone, Default)]
pub struct ToolsFile {
    definitions: Vec<ToolDefinition>,
    scripts: HashMap<String, Scripted>,
}

/// The file's one top-level key; unknown keys are errors (a misspelt
/// `needsApproval` would let a tool run unasked).
const ROOT: Section = Section {
    keys: &["tools"],
    strictness: Strictness::Guarded,
};

/// The keys of one tool entry.
const ENTRY: Section = Section {
    keys: &[
        "source",
        "owner",
        "name",
        "label",
        "description",
        "parameters",
        "result",
        "echoInput",
        "error",
        "delayMs",
        "needsApproval",
    ],
    strictness: Strictness::Guarded,
};

/// The first problem `section` finds in `object`, as the file's error
/// (`where`: the entry's label, or `the file`).
fn check_keys(
    section: Section,
    place: &str,
    object: &serde_json::Map<String, Value>,
) -> Result<(), String> {
    let mut errors = Vec::new();
    section.check("", object, &mut errors, &mut Vec::new());
    match errors.first() {
        Some(e) => Err(format!("{place}: field `{}`: {}", e.path, e.message)),
        None => Ok(()),
    }
}

impl ToolsFile {
    /// Parses the JSON5 text of a tools file.
    ///
    /// # Errors
    /// A message naming the entry (index and name) and the field.
    pub fn parse(text: &str) -> Result<ToolsFile, String> {
        let root: Value = json5::from_str(text).map_err(|e| format!("not valid JSON5: {e}"))?;
        let Some(root) = root.as_object() else {
            return Err("the file must hold an object like { tools: [...] }".into());
        };
        check_keys(ROOT, "the file", root)?;
        let Some(Value::Array(entries)) = root.get("tools") else {
            return Err("`tools` must be an array of tool entries".into());
        };
        let mut file = ToolsFile::default();
        for (i, entry) in entries.iter().enumerate() {
            let (definition, script) = parse_entry(i, entry)?;
            let id = definition.id().map_err(|e| format!("tools[{i}]: {e}"))?;
            if file.scripts.insert(id.clone(), script).is_some() {
                return Err(format!(
                    "tools[{i}]: a tool with id `{id}` is already defined"
                ));
            }
            file.definitions.push(definition);
        }
        Ok(file)
    }

    /// The tool definitions, for the catalog.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.definitions.clone()
    }

    /// An executor answering as the file says.
    pub fn executor(&self) -> Arc<dyn ToolExecutor> {
        Arc::new(FileExecutor {
            scripts: Arc::new(self.scripts.clone()),
        })
    }
}

fn parse_entry(i: usize, entry: &Value) -> Result<(ToolDefinition, Scripted), String> {
    let Some(map) = entry.as_object() else {
        return Err(format!("tools[{i}] must be an object"));
    };
    let label = match map.get("name").and_then(Value::as_str) {
        Some(name) => format!("tools[{i}] (`{name}`)"),
        None => format!("tools[{i}]"),
    };
    check_keys(ENTRY, &label, map)?;
    let string = |field: &str, required: bool| -> Result<Option<String>, String> {
        match map.get(field) {
            None | Some(Value::Null) if !required => Ok(None),
            None | Some(Value::Null) => Err(format!("{label}: field `{field}` is required")),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{label}: field `{field}` must be a string")),
        }
    };
    let source_text = string("source", true)?.unwrap_or_default();
    let source = ToolSource::parse(&source_text).ok_or_else(|| {
        format!("{label}: field `source` must be one of openclaw, plugin, mcp, client (got `{source_text}`)")
    })?;
    let name = string("name", true)?.unwrap_or_default();
    let owner = string("owner", false)?;
    let parameters = match map.get("parameters") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Object(schema)) => Value::Object(schema.clone()),
        Some(_) => {
            return Err(format!(
                "{label}: field `parameters` must be a JSON Schema object"
            ));
        }
    };
    let behaviours: Vec<&str> = ["result", "echoInput", "error"]
        .into_iter()
        .filter(|k| map.contains_key(*k))
        .collect();
    let behaviour = match behaviours.as_slice() {
        ["result"] => Behaviour::Result(map.get("result").cloned().unwrap_or(Value::Null)),
        ["echoInput"] => match map.get("echoInput") {
            Some(Value::Bool(true)) => Behaviour::EchoInput,
            _ => return Err(format!("{label}: field `echoInput` must be true")),
        },
        ["error"] => Behaviour::Error(string("error", true)?.unwrap_or_default()),
        [] => {
            return Err(format!(
                "{label}: needs one behaviour: `result` (a JSON value), `echoInput: true` or `error` (a message)"
            ));
        }
        many => {
            return Err(format!(
                "{label}: has several behaviours ({}); give exactly one",
                many.join(", ")
            ));
        }
    };
    let delay = match map.get("delayMs") {
        None | Some(Value::Null) => None,
        Some(v) => Some(Duration::from_millis(
            integer_in("delayMs", v, 0..=3_600_000, "milliseconds")
                .map_err(|e| format!("{label}: field `delayMs`: {}", e.message))?,
        )),
    };
    let needs_approval = match map.get("needsApproval") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(format!("{label}: field `needsApproval` must be a boolean")),
    };
    let definition = ToolDefinition {
        source,
        source_name: owner,
        name,
        label: string("label", false)?,
        description: string("description", false)?.unwrap_or_default(),
        parameters,
        needs_approval,
        annotations: Value::Null,
        direct_only: false,
        output_schema: Value::Null,
    };
    Ok((definition, Scripted { behaviour, delay }))
}

struct FileExecutor {
    scripts: Arc<HashMap<String, Scripted>>,
}

impl ToolExecutor for FileExecutor {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let script = self.scripts.get(&call.tool.id).cloned();
        Box::pin(async move {
            let Some(script) = script else {
                return Err(ToolCallError::new(
                    "the tools file has no behaviour for this tool",
                ));
            };
            if let Some(delay) = script.delay {
                tokio::time::sleep(delay).await;
            }
            match script.behaviour {
                Behaviour::Result(value) => Ok(value),
                Behaviour::EchoInput => Ok(call.input),
                Behaviour::Error(message) => Err(ToolCallError::new(message)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_behaviour() {
        let file = ToolsFile::parse(
            r#"{ tools: [
                { source: "openclaw", owner: "core", name: "read", result: { ok: 1 } },
                { source: "plugin", owner: "u", name: "echo", echoInput: true, delayMs: 5 },
                { source: "client", name: "broken", error: "offline", needsApproval: false },
            ] }"#,
        )
        .unwrap();
        let ids: Vec<String> = file.definitions().iter().map(|d| d.id().unwrap()).collect();
        assert_eq!(
            ids,
            [
                "openclaw:core:read",
                "plugin:u:echo",
                "client:client:broken"
            ]
        );
    }

    #[test]
    fn errors_name_the_entry_and_field() {
        let cases = [
            (
                r#"{ tools: [{ source: "x", name: "a", result: 1 }] }"#,
                "tools[0] (`a`): field `source` must be one of",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a" }] }"#,
                "tools[0] (`a`): needs one behaviour",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a", result: 1, error: "e" }] }"#,
                "has several behaviours",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a", result: 1, delayMs: -1 }] }"#,
                "tools[0] (`a`): field `delayMs`: expected milliseconds from 0 to 3600000",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a", result: 1, color: 1 }] }"#,
                "tools[0] (`a`): field `color`: unknown field; this section takes only source, owner",
            ),
            (
                r#"{ tools: [{ source: "plugin", name: "a", result: 1 }] }"#,
                "tools[0]: tool `a` from source `plugin` needs a sourceName",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", result: 1 }] }"#,
                "tools[0]: field `name` is required",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a", echoInput: 1 }] }"#,
                "`echoInput` must be true",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a", result: 1 }, { source: "plugin", owner: "p", name: "a", result: 2 }] }"#,
                "tools[1]: a tool with id `plugin:p:a` is already defined",
            ),
            (
                r#"{ tool: [] }"#,
                "the file: field `tool`: unknown field; did you mean `tools`?",
            ),
            (
                r#"{ tools: [{ source: "plugin", owner: "p", name: "a", result: 1, needApproval: true }] }"#,
                "tools[0] (`a`): field `needApproval`: unknown field; did you mean `needsApproval`?",
            ),
            (r#"[1]"#, "must hold an object"),
            (r#"{ tools: "#, "not valid JSON5"),
        ];
        for (text, expected) in cases {
            let err = ToolsFile::parse(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
