//! The guest API: the globals a cell sees besides the engine's `text` and
//! `json` (`tools`, `ALL_TOOLS`, `MCP`, `API`, `namespaces`,
//! `yield_control`), the bridge methods they send, and the run context
//! (`{tools, conveniences, mcp}`) they are installed from.
//!
//! One owner for both sides: `guest_api.js` is handed to the sandbox as
//! [`SandboxConfig::guest_api`](codemode_sandbox::SandboxConfig) (the
//! sandbox knows no method name, catalog or MCP), and [`Method`] is the
//! list of names the bridge parses; a test pins the two together, so a
//! rename on one side fails the build's tests instead of every cell.

use codemode_sandbox::GuestApi;
use serde_json::{Value, json};

use crate::catalog::mcp::McpMethod;

/// The guest API's JavaScript (see the file's header).
const SOURCE: &str = include_str!("guest_api.js");

/// Every global `guest_api.js` defines (a test pins the two together):
/// plugin namespaces may not take them.
pub(crate) const GUEST_GLOBALS: &[&str] = &[
    "yield_control",
    "progress",
    "unwrap",
    "ALL_TOOLS",
    "tools",
    "MCP",
    "namespaces",
    "API",
];

/// The guest API the runtime's sandbox is built with. Public for harnesses
/// (fuzzing, benches) that drive a bare [`codemode_sandbox::Sandbox`] with
/// the product's globals.
pub fn guest_api() -> GuestApi {
    GuestApi::new(SOURCE)
}

/// A bridge method: the `method` of a request the guest API sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// `yield_control(reason?)`: resolved when the run resumes.
    Yield,
    /// `tools.search(query, options?)`.
    Search,
    /// `tools.describe(id)`.
    Describe,
    /// `tools.call(id, input)` and the `tools.<name>` conveniences.
    Call,
    /// `MCP.<server>.<tool>(input)`.
    McpCall,
    /// `MCP.<server>.resources.*` / `.prompts.*`.
    McpRequest,
    /// `MCP.<server>.$api(toolName?, options?)`.
    McpApi,
    /// `API.list(prefix?)`.
    ApiList,
    /// `API.read(path, options?)`.
    ApiRead,
    /// `API.search(query, options?)`: ranked MCP tools across servers.
    ApiSearch,
    /// A call of `MCP.<server>.<tool>` the run does not have (reached
    /// dynamically): answered with a coded rejection and the nearest names.
    McpMissing,
    /// `<Namespace>.<path>(...args)`: a plugin namespace's callable.
    NsCall,
    /// `progress(value, total?, message?)`.
    Progress,
    /// A result handle's `text(start?, end?)`.
    HandleText,
    /// A result handle's `find(needle, from?)`.
    HandleFind,
    /// A result handle's `json()`.
    HandleJson,
}

impl Method {
    /// Every method, in the order of the guest API.
    pub(crate) const ALL: [Method; 16] = [
        Method::Yield,
        Method::Search,
        Method::Describe,
        Method::Call,
        Method::McpCall,
        Method::McpRequest,
        Method::McpApi,
        Method::ApiList,
        Method::ApiRead,
        Method::ApiSearch,
        Method::McpMissing,
        Method::NsCall,
        Method::Progress,
        Method::HandleText,
        Method::HandleFind,
        Method::HandleJson,
    ];

    /// Its name on the wire (the string `guest_api.js` sends).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Method::Yield => "yield",
            Method::Search => "search",
            Method::Describe => "describe",
            Method::Call => "call",
            Method::McpCall => "mcp.call",
            Method::McpRequest => "mcp.request",
            Method::McpApi => "mcp.api",
            Method::ApiList => "api.list",
            Method::ApiRead => "api.read",
            Method::ApiSearch => "api.search",
            Method::McpMissing => "mcp.missing",
            Method::NsCall => "ns.call",
            Method::Progress => "progress",
            Method::HandleText => "handle.text",
            Method::HandleFind => "handle.find",
            Method::HandleJson => "handle.json",
        }
    }

    /// The method named `name`, if the guest API has one.
    pub(crate) fn from_wire(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// The operation of an `mcp.request` (`MCP.<server>.resources.*` /
/// `.prompts.*`), as `guest_api.js` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum McpOp {
    ResourcesList,
    ResourcesRead,
    ResourcesTemplates,
    PromptsList,
    PromptsGet,
}

impl McpOp {
    /// Every operation.
    pub(crate) const ALL: [McpOp; 5] = [
        McpOp::ResourcesList,
        McpOp::ResourcesRead,
        McpOp::ResourcesTemplates,
        McpOp::PromptsList,
        McpOp::PromptsGet,
    ];

    /// Its name on the wire (the `op` param), also the tail of its
    /// `MCP.<server>.<op>` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            McpOp::ResourcesList => "resources.list",
            McpOp::ResourcesRead => "resources.read",
            McpOp::ResourcesTemplates => "resources.templates",
            McpOp::PromptsList => "prompts.list",
            McpOp::PromptsGet => "prompts.get",
        }
    }

    /// The operation named `name`, if there is one.
    pub(crate) fn from_wire(name: &str) -> Option<McpOp> {
        McpOp::ALL.into_iter().find(|op| op.as_str() == name)
    }

    /// The MCP method it asks the server for.
    pub(crate) fn method(self) -> McpMethod {
        match self {
            McpOp::ResourcesList => McpMethod::ResourcesList,
            McpOp::ResourcesRead => McpMethod::ResourcesRead,
            McpOp::ResourcesTemplates => McpMethod::ResourceTemplatesList,
            McpOp::PromptsList => McpMethod::PromptsList,
            McpOp::PromptsGet => McpMethod::PromptsGet,
        }
    }

    /// Whether it is a resources operation (else a prompts one).
    pub(crate) fn is_resources(self) -> bool {
        matches!(
            self,
            McpOp::ResourcesList | McpOp::ResourcesRead | McpOp::ResourcesTemplates
        )
    }
}

/// The run context of a run without tools.
pub(crate) const EMPTY_CONTEXT: &str = r#"{"tools":[],"conveniences":[]}"#;

/// The run context `install(context)` in `guest_api.js` reads: the guest's
/// `ALL_TOOLS` entries, the `tools.<name>` conveniences (`[name, id]`) and
/// the `MCP` namespace (`[server, "[[tool, id], ...]", flags]`, each tool
/// list itself JSON text, parsed when the cell first uses the server), as
/// JSON text.
pub(crate) fn run_context(
    tools: Vec<Value>,
    conveniences: &[(String, String)],
    mcp: Value,
) -> String {
    json!({
        "tools": tools,
        "conveniences": conveniences,
        "mcp": mcp,
    })
    .to_string()
}

/// `context` (a run context's JSON object, as the catalog made it) with
/// the fields of one run: the nonce its result handles carry (so a tool's
/// own JSON can never pass for a handle) and its plugin namespaces
/// (`[[globalName, id, tree], ...]`). Spliced in as text: the catalog's
/// context can be large and is not parsed again.
pub(crate) fn with_run_fields(
    context: &str,
    handle_nonce: &str,
    namespaces: Option<&Value>,
) -> String {
    let Some(body) = context.trim_end().strip_suffix('}') else {
        return context.to_owned();
    };
    let mut out = String::with_capacity(context.len() + 64);
    out.push_str(body);
    // Every context is a non-empty object (`{"tools":...}`).
    out.push_str(",\"handleNonce\":");
    out.push_str(&Value::String(handle_nonce.to_owned()).to_string());
    if let Some(namespaces) = namespaces {
        out.push_str(",\"namespaces\":");
        out.push_str(&namespaces.to_string());
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn guest_globals_are_exactly_what_guest_api_js_defines() {
        let mut defined: Vec<&str> = SOURCE
            .split("defineGlobal(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        defined.sort_unstable();
        let mut listed = GUEST_GLOBALS.to_vec();
        listed.sort_unstable();
        assert_eq!(defined, listed);
    }

    use std::collections::BTreeSet;

    use super::*;

    /// The method names `guest_api.js` sends: the string literal after each
    /// `hostRequest(` / `idRequest(`. Any call that does not start with a
    /// literal is an error (a computed name could not be pinned).
    fn sent_methods() -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for needle in ["hostRequest(", "idRequest("] {
            for (at, _) in SOURCE.match_indices(needle) {
                let rest = &SOURCE[at + needle.len()..];
                let Some(literal) = rest.strip_prefix('"') else {
                    panic!(
                        "guest_api.js calls {needle} without a literal method name: {}",
                        &rest[..rest.len().min(40)]
                    );
                };
                let end = literal.find('"').unwrap_or(literal.len());
                found.insert(literal[..end].to_owned());
            }
        }
        found
    }

    #[test]
    fn the_guest_api_sends_exactly_the_methods_the_bridge_parses() {
        let sent = sent_methods();
        let parsed: BTreeSet<String> = Method::ALL.iter().map(|m| m.as_str().to_owned()).collect();
        assert_eq!(sent, parsed, "guest_api.js and guest_api::Method disagree");
        for method in Method::ALL {
            assert_eq!(Method::from_wire(method.as_str()), Some(method));
        }
        assert_eq!(Method::from_wire("fs.read"), None);
    }

    #[test]
    fn the_guest_api_sends_exactly_the_mcp_ops_the_bridge_parses() {
        let needle = "mcpRequest(serverName, \"";
        let sent: BTreeSet<&str> = SOURCE
            .match_indices(needle)
            .map(|(at, _)| {
                let rest = &SOURCE[at + needle.len()..];
                &rest[..rest.find('"').unwrap_or(rest.len())]
            })
            .collect();
        let parsed: BTreeSet<&str> = McpOp::ALL.iter().map(|op| op.as_str()).collect();
        assert_eq!(sent, parsed, "guest_api.js and guest_api::McpOp disagree");
    }

    #[test]
    fn run_fields_are_spliced_into_the_context() {
        let out = with_run_fields(
            EMPTY_CONTEXT,
            "n0nce",
            Some(&json!([["Issues", "id", {"j": 1}]])),
        );
        let parsed: Value = serde_json::from_str(&out).unwrap_or_default();
        assert_eq!(parsed["handleNonce"], "n0nce");
        assert_eq!(parsed["namespaces"][0][0], "Issues");
        assert_eq!(parsed["tools"], json!([]));
        let plain: Value =
            serde_json::from_str(&with_run_fields(EMPTY_CONTEXT, "x", None)).unwrap_or_default();
        assert!(plain.get("namespaces").is_none());
    }

    #[test]
    fn the_empty_context_is_the_context_of_no_tools() {
        let empty: Value = serde_json::from_str(EMPTY_CONTEXT).unwrap_or_default();
        assert_eq!(empty["tools"], json!([]));
        assert_eq!(empty["conveniences"], json!([]));
    }
}
