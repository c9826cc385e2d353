//! A catalogued tool ([`CatalogEntry`]): what the catalog, the MCP
//! namespace, the executor and approvers see of one admitted tool,
//! including what its calls go through ([`GatePolicy`]).

use serde::Serialize;
use serde_json::{Value, json};

use crate::catalog::gate::GatePolicy;
use crate::catalog::tool::ToolSource;

/// A catalogued tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// `<source>:<owner>:<name>`.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// A human label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What it does.
    pub description: String,
    /// Where it comes from.
    pub source: ToolSource,
    /// Its owner.
    pub source_name: String,
    /// Its input schema (served by `tools.describe`, never in `ALL_TOOLS`).
    #[serde(skip)]
    pub parameters: Value,
    /// What its calls go through: whether they need a human's approval,
    /// and why ([`crate::ToolPolicy::decide`]).
    #[serde(skip)]
    pub gate: GatePolicy,
    /// The tool's annotations, for whoever approves (never shown to guests).
    #[serde(skip)]
    pub annotations: Value,
    /// The schema of its structured result (`Value::Null` when none).
    #[serde(skip)]
    pub output_schema: Value,
}

impl CatalogEntry {
    /// The compact form of `ALL_TOOLS` and `tools.search` (no schema).
    pub fn compact_json(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "source": self.source.as_str(),
            "sourceName": self.source_name,
        });
        if let (Some(label), Some(map)) = (&self.label, v.as_object_mut()) {
            map.insert("label".into(), Value::String(label.clone()));
        }
        v
    }

    /// The `tools.describe` form: compact plus `parameters`.
    pub fn described_json(&self) -> Value {
        let mut v = self.compact_json();
        if let Some(map) = v.as_object_mut() {
            let parameters = if self.parameters.is_null() {
                json!({ "type": "object", "properties": {} })
            } else {
                self.parameters.clone()
            };
            map.insert("parameters".into(), parameters);
        }
        v
    }

    /// Whether the guest's `ALL_TOOLS` / `tools.*` views include it.
    pub fn guest_visible(&self) -> bool {
        self.source != ToolSource::Mcp
    }
}
