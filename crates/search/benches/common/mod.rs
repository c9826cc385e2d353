//! What both benches index: a tool as plain text fields, and the index
//! built from tools the way the runtime's catalog builds it (name, id,
//! description, parameter names, owner; no title).

use codemode_search::{Document, Index};

/// One tool's searchable text.
pub struct Tool {
    pub name: String,
    pub id: String,
    pub description: String,
    pub parameters: Vec<String>,
    pub owner: String,
}

/// The index over `tools`, in their order.
pub fn build(tools: &[Tool]) -> Index {
    Index::build(tools.iter().map(|t| Document {
        name: &t.name,
        id: &t.id,
        title: None,
        description: &t.description,
        parameters: t.parameters.iter().map(String::as_str).collect(),
        owner: &t.owner,
    }))
}
