//! One tool as code mode knows it: where it comes from
//! ([`ToolSource`]), its definition as the host hands it in
//! ([`ToolDefinition`]). Data only, below the catalog and the
//! MCP namespace that both index entries.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a tool comes from; the first part of its catalog id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSource {
    /// Core tools of the agent runtime (owner `core`).
    Openclaw,
    /// Plugin tools (owner: the plugin id).
    Plugin,
    /// Tools of an MCP server (owner: the server name). Catalogued, but
    /// reachable from the guest only through the `MCP` namespace.
    Mcp,
    /// Tools the client provides for this run (owner: the client name).
    Client,
}

impl ToolSource {
    /// The wire name: `openclaw`, `plugin`, `mcp` or `client`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSource::Openclaw => "openclaw",
            ToolSource::Plugin => "plugin",
            ToolSource::Mcp => "mcp",
            ToolSource::Client => "client",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<ToolSource> {
        match text {
            "openclaw" => Some(ToolSource::Openclaw),
            "plugin" => Some(ToolSource::Plugin),
            "mcp" => Some(ToolSource::Mcp),
            "client" => Some(ToolSource::Client),
            _ => None,
        }
    }

    fn default_owner(self) -> Option<&'static str> {
        match self {
            ToolSource::Openclaw => Some("core"),
            ToolSource::Client => Some("client"),
            ToolSource::Plugin | ToolSource::Mcp => None,
        }
    }
}

/// One effective tool of a run, as the agent runtime knows it.
///
/// ```
/// use codemode_runtime::{ToolDefinition, ToolSource};
/// let tool = ToolDefinition::new(ToolSource::Plugin, "browser", "browser_request")
///     .with_description("Fetch a page")
///     .with_parameters(serde_json::json!({"type": "object", "properties": {"url": {"type": "string"}}}));
/// assert_eq!(tool.id().unwrap(), "plugin:browser:browser_request");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// Where the tool comes from.
    pub source: ToolSource,
    /// The owner: plugin id, MCP server or client name (`core` for core
    /// tools when absent). Becomes `sourceName` and the id's middle part.
    #[serde(default)]
    pub source_name: Option<String>,
    /// The tool's name.
    pub name: String,
    /// A human label.
    #[serde(default)]
    pub label: Option<String>,
    /// What the tool does.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its input.
    #[serde(default)]
    pub parameters: Value,
    /// Every call needs a human's approval before it starts (see
    /// [`crate::Approver`] and [`crate::CodeModeSession::approve`]).
    #[serde(default)]
    pub needs_approval: bool,
    /// What the tool says of itself (MCP tool annotations such as
    /// `readOnlyHint`, `destructiveHint`), shown to whoever approves.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub annotations: Value,
    /// Shown to the model directly even in code mode, and kept out of the
    /// catalog (see [`crate::activate`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct_only: bool,
    /// The JSON Schema of the tool's structured result (MCP
    /// `outputSchema`): declaration files type `structuredContent` with it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output_schema: Value,
}

impl ToolDefinition {
    /// A tool with an empty description and no schema.
    pub fn new(source: ToolSource, owner: &str, name: &str) -> ToolDefinition {
        ToolDefinition {
            source,
            source_name: Some(owner.to_owned()),
            name: name.to_owned(),
            label: None,
            description: String::new(),
            parameters: Value::Null,
            needs_approval: false,
            annotations: Value::Null,
            direct_only: false,
            output_schema: Value::Null,
        }
    }

    /// Sets the schema of the tool's structured result.
    pub fn with_output_schema(mut self, output_schema: Value) -> ToolDefinition {
        self.output_schema = output_schema;
        self
    }

    /// Keeps the tool visible to the model in code mode (beside `exec` and
    /// `wait`) and out of the catalog.
    pub fn with_direct_only(mut self, direct_only: bool) -> ToolDefinition {
        self.direct_only = direct_only;
        self
    }

    /// Marks every call of the tool as needing approval.
    pub fn with_approval(mut self, needs_approval: bool) -> ToolDefinition {
        self.needs_approval = needs_approval;
        self
    }

    /// Sets the annotations.
    pub fn with_annotations(mut self, annotations: Value) -> ToolDefinition {
        self.annotations = annotations;
        self
    }

    /// Sets the description.
    pub fn with_description(mut self, description: &str) -> ToolDefinition {
        self.description = description.to_owned();
        self
    }

    /// Sets the label.
    pub fn with_label(mut self, label: &str) -> ToolDefinition {
        self.label = Some(label.to_owned());
        self
    }

    /// Sets the input schema.
    pub fn with_parameters(mut self, parameters: Value) -> ToolDefinition {
        self.parameters = parameters;
        self
    }

    pub(crate) fn owner(&self) -> Option<&str> {
        self.source_name
            .as_deref()
            .filter(|s| !s.is_empty())
            .or(self.source.default_owner())
    }

    /// The catalog id `<source>:<owner>:<name>`.
    ///
    /// # Errors
    /// [`CatalogError`] when the owner is missing or a part is malformed.
    pub fn id(&self) -> Result<String, CatalogError> {
        let owner = self.owner().ok_or_else(|| CatalogError::MissingOwner {
            name: self.name.clone(),
            origin: self.source.as_str(),
        })?;
        check_part("name", &self.name, &self.name, false)?;
        check_part("sourceName", owner, &self.name, true)?;
        Ok(format!("{}:{owner}:{}", self.source.as_str(), self.name))
    }
}

fn check_part(
    field: &'static str,
    value: &str,
    tool: &str,
    no_colon: bool,
) -> Result<(), CatalogError> {
    let problem = if value.is_empty() {
        Some("is empty")
    } else if value.len() > MAX_NAME_BYTES {
        Some("is longer than 128 bytes")
    } else if value.chars().any(char::is_control) {
        Some("contains control characters")
    } else if no_colon && value.contains(':') {
        Some("contains `:`, which separates the parts of a catalog id")
    } else if value.chars().any(char::is_whitespace) {
        Some("contains whitespace")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(CatalogError::BadPart {
            tool: tool.to_owned(),
            field,
            problem,
        }),
        None => Ok(()),
    }
}

const MAX_NAME_BYTES: usize = 128;

/// The code-mode control tools: never catalogued, so the guest can never
/// recurse into code mode. (A core shell tool named `exec` is the one
/// exception: it is an ordinary tool, `openclaw:core:exec`.)
pub const CONTROL_TOOL_NAMES: [&str; 6] = [
    "exec",
    "wait",
    "tool_search_code",
    "tool_search",
    "tool_describe",
    "tool_call",
];

/// A tool definition the catalog refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// Plugin and MCP tools need their owner.
    #[error(
        "tool `{name}` from source `{origin}` needs a sourceName (the plugin id or MCP server name)"
    )]
    MissingOwner {
        /// The tool name.
        name: String,
        /// Its source.
        origin: &'static str,
    },
    /// A name part that cannot form an id.
    #[error("tool `{tool}`: {field} {problem}")]
    BadPart {
        /// The tool name.
        tool: String,
        /// `name` or `sourceName`.
        field: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
}

/// A tool the catalog left out, and why (for diagnostics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    /// The tool's id (or name, when no id could be formed).
    pub tool: String,
    /// Why.
    pub reason: &'static str,
}
