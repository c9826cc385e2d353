//! The options a package passes to [`crate::open`], as JSON: `document`
//! (the gateway config: `tools.codeMode`, `mcpServers`), `tools` (the
//! host's tool definitions), `scripted` (the `--tools` file format),
//! `store`, `agentId`, `sessionId`, `owner`, and `host` (`node`,
//! `python`: the agent id when none is given).

use std::sync::atomic::{AtomicU64, Ordering};

use codemode::tools_file::ToolsFile;
use codemode_mcp::config::StoreSetting;
use codemode_mcp::gateway::local::local_owner;
use codemode_runtime::{RunContext, ToolDefinition, ToolSource};
use serde_json::{Value, json};

use crate::OpenError;

/// The parsed options.
pub struct Options {
    /// The config document's JSON text.
    pub document: String,
    /// The host's tools.
    pub tools: Vec<ToolDefinition>,
    /// Tools the runtime answers itself.
    pub scripted: ToolsFile,
    /// Where waiting runs are kept (default: memory).
    pub store: StoreSetting,
    /// Who and where the session's runs are.
    pub context: RunContext,
    /// Who the runs belong to across processes.
    pub owner: String,
}

fn bad(message: String) -> OpenError {
    OpenError::Options(message)
}

impl Options {
    /// Parses the options JSON; `Err` names the field.
    ///
    /// # Errors
    /// [`OpenError::Options`] naming the field.
    pub fn parse(text: &str) -> Result<Options, OpenError> {
        let options: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("options: {e}")))?;
        let document = options
            .get("document")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let store = match options.get("store") {
            None | Some(Value::Null) => StoreSetting::Memory,
            Some(Value::String(s)) => {
                StoreSetting::parse(s).map_err(|e| bad(format!("options.store: {e}")))?
            }
            Some(_) => {
                return Err(bad(
                    "options.store: expected a string: \"memory\", \"file:PATH\" or \"redis://HOST:PORT/DB\"".into(),
                ));
            }
        };
        let text_field = |name: &str| options.get(name).and_then(Value::as_str).map(str::to_owned);
        let agent = text_field("agentId");
        let context = RunContext {
            agent_id: Some(
                agent
                    .clone()
                    .or_else(|| text_field("host"))
                    .unwrap_or_else(|| "app".into()),
            ),
            session_id: Some(text_field("sessionId").unwrap_or_else(|| {
                static SESSIONS: AtomicU64 = AtomicU64::new(0);
                format!(
                    "{}-{}-{}",
                    text_field("host").unwrap_or_else(|| "inproc".into()),
                    std::process::id(),
                    SESSIONS.fetch_add(1, Ordering::Relaxed)
                )
            })),
            ..RunContext::default()
        };
        let owner = text_field("owner").unwrap_or_else(|| local_owner(agent.as_deref()));
        let mut tools = Vec::new();
        if let Some(entries) = options.get("tools").and_then(Value::as_array) {
            for (i, entry) in entries.iter().enumerate() {
                tools.push(tool_definition(i, entry)?);
            }
        }
        let scripted = match options.get("scripted") {
            None | Some(Value::Null) => ToolsFile::default(),
            Some(entries) => ToolsFile::parse(&json!({ "tools": entries }).to_string())
                .map_err(|e| bad(format!("options.scripted: {e}")))?,
        };
        Ok(Options {
            document: document.to_string(),
            tools,
            scripted,
            store,
            context,
            owner,
        })
    }
}

/// One host tool's definition (the package checked its shape; the runtime
/// checks names and ids).
fn tool_definition(i: usize, entry: &Value) -> Result<ToolDefinition, OpenError> {
    let text = |name: &str| entry.get(name).and_then(Value::as_str);
    let name = text("name").ok_or_else(|| bad(format!("tools[{i}].name: expected a string")))?;
    let source_text = text("source").unwrap_or("client");
    let source = match ToolSource::parse(source_text) {
        Some(ToolSource::Mcp) | None => {
            return Err(bad(format!(
                "tools[{i}].source: expected \"client\", \"plugin\" or \"openclaw\" (got {source_text:?}); MCP tools come from the MCP servers"
            )));
        }
        Some(source) => source,
    };
    let mut definition = ToolDefinition::new(source, text("owner").unwrap_or("app"), name);
    if let Some(description) = text("description") {
        definition = definition.with_description(description);
    }
    if let Some(schema) = entry.get("inputSchema").filter(|v| v.is_object()) {
        definition = definition.with_parameters(schema.clone());
    }
    if let Some(annotations) = entry.get("annotations").filter(|v| v.is_object()) {
        definition = definition.with_annotations(annotations.clone());
    }
    if let Some(needs) = entry.get("needsApproval").and_then(Value::as_bool) {
        definition = definition.with_approval(needs);
    }
    Ok(definition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        match Options::parse(text) {
            Ok(_) => panic!("{text} parsed"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_are_memory_and_a_fresh_session() {
        let options = Options::parse("{}").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(options.store, StoreSetting::Memory);
        assert_eq!(options.context.agent_id.as_deref(), Some("app"));
        assert!(options.tools.is_empty());
        let again = Options::parse("{}").unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(options.context.session_id, again.context.session_id);
    }

    #[test]
    fn a_wrong_option_is_named() {
        assert!(error(r#"{"store":"ftp://x"}"#).starts_with("options.store:"));
        assert!(error(r#"{"store":1}"#).contains("expected a string"));
        assert!(error(r#"{"tools":[{"description":"x"}]}"#).contains("tools[0].name"));
        assert!(error(r#"{"tools":[{"name":"x","source":"mcp"}]}"#).contains("tools[0].source"));
        assert!(
            error(r#"{"scripted":[{"source":"client","name":"x","echoInput":true,"reslt":1}]}"#)
                .contains("reslt")
        );
        assert!(error("not json").starts_with("options:"));
    }

    #[test]
    fn tools_keep_their_schema_annotations_and_approval() {
        let options = Options::parse(
            r#"{"tools":[{"name":"add","owner":"math","inputSchema":{"type":"object"},"needsApproval":true}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let tool = &options.tools[0];
        assert_eq!(tool.id().ok().as_deref(), Some("client:math:add"));
        assert!(tool.needs_approval);
        assert_eq!(tool.parameters, json!({"type": "object"}));
    }
}
