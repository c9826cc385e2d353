//! Bridge requests, parsed once: the JSON a guest sends (untrusted: a cell
//! can forge any payload) becomes one [`BridgeRequest`] with typed, capped
//! fields before any handler runs. The handlers in [`crate::run::bridge`] only
//! look things up in the run's catalog.
//!
//! Every refusal here is a plain, catchable rejection with the same message
//! the bridge has always given. Errors whose message names something only
//! the catalog knows (an MCP server's JavaScript name), or that the bridge
//! reports after a catalog lookup, are kept as typed errors in the request
//! ([`McpInputError`], [`McpApiError`], the `range` of `API.read`) and
//! reported by the handler in that order.

use codemode_sandbox::{GuestJsonError, Settlement};
use serde_json::{Map, Value};

use crate::catalog::guest_api::{McpOp, Method};
use crate::config::CodeModeConfig;
use crate::result::ErrorCode;

/// The longest id, name, query, path or URI a guest request may carry: far
/// above any real one, and small enough that looking it up (suggestions
/// included) is cheap whatever the guest sends.
pub(crate) const MAX_NAME_BYTES: usize = 1024;

/// The most one `API.read` returns: larger files are read in pieces (a
/// whole 11 MB declaration file would fill a cell's heap).
pub(crate) const MAX_API_READ_BYTES: usize = 256 * 1024;

/// Params that name something (rather than carry tool input).
const NAME_FIELDS: &[&str] = &[
    "id", "name", "query", "path", "uri", "prefix", "server", "tool", "ns", "needle",
];

/// Why a request is refused before anything runs: its rejection message,
/// and the contract code it carries (an uncaught one fails the cell with
/// that code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) message: String,
    pub(crate) code: Option<ErrorCode>,
}

impl Refusal {
    /// A malformed request (no code: the cell sees a plain `Error`).
    pub(crate) fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal {
            message: message.into(),
            code: None,
        }
    }

    /// A nested call that cannot start (`nested_tool_failed`).
    pub(crate) fn nested(message: impl Into<String>) -> Refusal {
        Refusal {
            message: message.into(),
            code: Some(ErrorCode::NestedToolFailed),
        }
    }

    /// The guest's rejection.
    pub(crate) fn into_settlement(self) -> Settlement {
        match self.code {
            Some(code) => Settlement::reject_with_code(self.message, code.as_str()),
            None => Settlement::reject(self.message),
        }
    }
}

/// One guest request, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BridgeRequest {
    /// `yield_control(reason?)`.
    Yield,
    /// `tools.search(query, options?)`: a non-empty query of at most
    /// [`MAX_NAME_BYTES`], and a limit within `maxSearchLimit`.
    Search { query: String, limit: usize },
    /// `tools.describe(id)`.
    Describe { id: String },
    /// `tools.call(id, input)`: `input` defaults to `{}`.
    Call { id: String, input: Value },
    /// `MCP.<server>.<tool>(input)`: `input` as sent (`null` when absent);
    /// checked against the tool's schema by the handler.
    McpCall { id: String, input: Value },
    /// `MCP.<server>.resources.*` / `.prompts.*`.
    McpRequest {
        /// The server's JavaScript name (`""` when not a string).
        server: String,
        /// The operation, or the unknown name sent.
        op: Result<McpOp, String>,
        /// The params the executor gets, or what is wrong with the input.
        params: Result<Map<String, Value>, McpInputError>,
    },
    /// `MCP.<server>.$api(toolName?, options?)`.
    McpApi {
        /// The server's JavaScript name (`""` when not a string).
        server: String,
        /// The tool's JavaScript name, if one was asked for.
        tool: Result<Option<String>, McpApiError>,
        /// `options.schema`.
        schema: Result<bool, McpApiError>,
    },
    /// `<Namespace>.<path>(...args)`: resolved by the host against the
    /// run's namespaces (the guest may send any `ns` and `path`).
    NsCall {
        ns: String,
        path: String,
        args: Vec<Value>,
    },
    /// `progress(value, total?, message?)`: finite numbers, a message of
    /// at most [`crate::progress::MAX_PROGRESS_MESSAGE`] bytes (cut).
    Progress {
        value: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A result handle's `text(start?, end?)` (byte offsets).
    HandleText {
        id: u64,
        start: usize,
        end: Option<usize>,
    },
    /// A result handle's `find(needle, from?)`.
    HandleFind {
        id: u64,
        needle: String,
        from: usize,
    },
    /// A result handle's `json()`.
    HandleJson { id: u64 },
    /// `API.list(prefix?)`.
    ApiList { prefix: Option<String> },
    /// `API.search(query, options?)`: like [`BridgeRequest::Search`], over
    /// the run's MCP tools, optionally on one server (its JavaScript or
    /// MCP name).
    ApiSearch {
        query: String,
        limit: usize,
        server: Option<String>,
    },
    /// `MCP.<server>.<tool>(...)` of a name the run does not have.
    McpMissing {
        /// The server's JavaScript name as the cell wrote it.
        server: String,
        /// The tool's name as the cell wrote it (`None`: the server
        /// itself is unknown).
        tool: Option<String>,
    },
    /// `API.read(path, options?)`.
    ApiRead {
        path: String,
        /// `None` reads the whole file (if it is small enough); else
        /// `(offset, length)` in bytes, `length` at most
        /// [`MAX_API_READ_BYTES`].
        range: Result<Option<(usize, usize)>, Refusal>,
    },
}

/// What is wrong with the input of an MCP resource or prompt request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum McpInputError {
    /// The input is not an object.
    NotAnObject,
    /// This field is present but not a non-empty string.
    NotAString(&'static str),
    /// `resources.read` without `uri`.
    UriRequired,
    /// `prompts.get` without `name`.
    NameRequired,
    /// `prompts.get` with `arguments` that is not an object.
    ArgumentsNotAnObject,
}

impl McpInputError {
    /// The message, for the call labelled `label` (`MCP.<server>.<op>`).
    pub(crate) fn message(&self, label: &str) -> String {
        match self {
            McpInputError::NotAnObject => {
                format!("{label} takes one object argument like {{ uri: \"...\" }}")
            }
            McpInputError::NotAString(key) => {
                format!("{label}: `{key}` must be a non-empty string")
            }
            McpInputError::UriRequired => format!("{label}({{ uri }}): `uri` is required"),
            McpInputError::NameRequired => {
                format!("{label}({{ name, arguments }}): `name` is required")
            }
            McpInputError::ArgumentsNotAnObject => {
                format!("{label}: `arguments` must be an object of strings")
            }
        }
    }
}

/// What is wrong with the arguments of `MCP.<server>.$api`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum McpApiError {
    ToolNotAString,
    UnknownOption(String),
    SchemaNotABoolean,
    OptionsNotAnObject,
}

impl McpApiError {
    /// The message, for the server whose JavaScript name is `server`.
    pub(crate) fn message(&self, server: &str) -> String {
        match self {
            McpApiError::ToolNotAString => {
                format!("MCP.{server}.$api(toolName?, options?): toolName must be a string")
            }
            McpApiError::UnknownOption(key) => {
                format!("MCP.{server}.$api: unknown option `{key}`; the only option is `schema`")
            }
            McpApiError::SchemaNotABoolean => {
                format!("MCP.{server}.$api: options.schema must be a boolean")
            }
            McpApiError::OptionsNotAnObject => {
                format!("MCP.{server}.$api: options must be an object like {{ schema: true }}")
            }
        }
    }
}

impl BridgeRequest {
    /// Parses the payload of one guest request (already parsed as JSON by
    /// the sandbox, with its depth and size caps).
    ///
    /// # Errors
    /// The rejection the guest gets: a payload that is not JSON, params
    /// that are not an object, an oversized name, an unknown method, or a
    /// field of the wrong type or out of range.
    #[cfg(test)]
    pub(crate) fn parse(
        payload: Result<Value, GuestJsonError>,
        config: &CodeModeConfig,
    ) -> Result<BridgeRequest, Refusal> {
        let (method, params) = BridgeRequest::envelope(payload)?;
        BridgeRequest::parse_params(method, &params, config)
    }

    /// The first half of [`BridgeRequest::parse`]: the method and its
    /// params object, with every name field capped. The bridge counts the
    /// request (telemetry) once the method is known, whatever its params.
    ///
    /// # Errors
    /// A payload that is not JSON, params that are not an object, an
    /// oversized name, or an unknown method.
    pub(crate) fn envelope(
        payload: Result<Value, GuestJsonError>,
    ) -> Result<(Method, Map<String, Value>), Refusal> {
        let mut payload =
            payload.map_err(|e| Refusal::bad_request(format!("bridge request refused: {e}")))?;
        let params = payload.get_mut("params").map(Value::take);
        let method = payload.get("method").and_then(Value::as_str).unwrap_or("");
        let params = match params {
            Some(Value::Object(map)) => map,
            None | Some(Value::Null) => Map::new(),
            Some(_) => {
                return Err(Refusal::bad_request(format!(
                    "bridge request `{method}`: params must be an object"
                )));
            }
        };
        // Before anything looks a name up: the cost of a lookup (and of its
        // did-you-mean suggestions) grows with the name.
        if let Some((field, bytes)) = oversized_name(&params) {
            return Err(Refusal::bad_request(format!(
                "bridge request `{}`: `{field}` is {bytes} bytes; ids, names, queries, paths and URIs are at most {MAX_NAME_BYTES} bytes",
                codemode_sandbox::bounded_text(method.to_owned(), 64)
            )));
        }
        let Some(method) = Method::from_wire(method) else {
            return Err(Refusal::bad_request(format!(
                "unknown bridge method `{method}`; the guest API is tools.search, tools.describe, tools.call, MCP.<server>.*, API.list, API.read and yield_control"
            )));
        };
        Ok((method, params))
    }

    /// The second half of [`BridgeRequest::parse`]: the typed params of
    /// `method`.
    ///
    /// # Errors
    /// A field of the wrong type or out of range.
    pub(crate) fn parse_params(
        method: Method,
        params: &Map<String, Value>,
        config: &CodeModeConfig,
    ) -> Result<BridgeRequest, Refusal> {
        Ok(match method {
            Method::Yield => BridgeRequest::Yield,
            Method::Search => {
                let (query, limit, _) = search(params, config, "tools.search", false)?;
                BridgeRequest::Search { query, limit }
            }
            Method::ApiSearch => {
                let (query, limit, server) = search(params, config, "API.search", true)?;
                BridgeRequest::ApiSearch {
                    query,
                    limit,
                    server,
                }
            }
            Method::McpMissing => BridgeRequest::McpMissing {
                server: server_name(params),
                tool: params
                    .get("tool")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            Method::Describe => match params.get("id") {
                Some(Value::String(id)) => BridgeRequest::Describe { id: id.clone() },
                _ => {
                    return Err(Refusal::bad_request(
                        "tools.describe(id): id must be a catalog id or tool name (a string)",
                    ));
                }
            },
            Method::Call => {
                let Some(Value::String(id)) = params.get("id") else {
                    return Err(Refusal::nested(
                        "tools.call(id, input): id must be a catalog id string",
                    ));
                };
                let input = match params.get("input") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(v) => v.clone(),
                };
                BridgeRequest::Call {
                    id: id.clone(),
                    input,
                }
            }
            Method::McpCall => {
                let Some(Value::String(id)) = params.get("id") else {
                    return Err(Refusal::nested("MCP call: the tool id must be a string"));
                };
                BridgeRequest::McpCall {
                    id: id.clone(),
                    input: params.get("input").cloned().unwrap_or(Value::Null),
                }
            }
            Method::McpRequest => {
                let op = params.get("op").and_then(Value::as_str).unwrap_or("");
                let op = McpOp::from_wire(op).ok_or_else(|| op.to_owned());
                let params_checked = match op {
                    Ok(op) => mcp_request_params(op, params.get("input")),
                    // Never reported: an unknown op is refused first.
                    Err(_) => Ok(Map::new()),
                };
                BridgeRequest::McpRequest {
                    server: server_name(params),
                    op,
                    params: params_checked,
                }
            }
            Method::McpApi => BridgeRequest::McpApi {
                server: server_name(params),
                tool: match params.get("tool") {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(name)) => Ok(Some(name.clone())),
                    Some(_) => Err(McpApiError::ToolNotAString),
                },
                schema: mcp_api_schema(params.get("options")),
            },
            Method::NsCall => ns_call(params)?,
            Method::Progress => progress(params)?,
            Method::HandleText | Method::HandleFind | Method::HandleJson => handle(method, params)?,
            Method::ApiList => BridgeRequest::ApiList {
                prefix: optional_string(params, "prefix", "API.list(prefix?)")?.map(str::to_owned),
            },
            Method::ApiRead => {
                let Some(path) = optional_string(params, "path", "API.read(path)")? else {
                    return Err(Refusal::bad_request(
                        "API.read(path): pass a path such as \"mcp/index.d.ts\" (API.list() lists them)",
                    ));
                };
                BridgeRequest::ApiRead {
                    path: path.to_owned(),
                    range: api_read_range(params.get("options")),
                }
            }
        })
    }
}

/// `ns.call` params: namespace id, path, arguments.
fn ns_call(params: &Map<String, Value>) -> Result<BridgeRequest, Refusal> {
    let text = |key: &str| match params.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let (Some(ns), Some(path)) = (text("ns"), text("path")) else {
        return Err(Refusal::nested(
            "namespace call: the namespace id and path must be strings",
        ));
    };
    let args = match params.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(args)) => args.clone(),
        Some(_) => {
            return Err(Refusal::nested(
                "namespace call: the arguments must be an array",
            ));
        }
    };
    Ok(BridgeRequest::NsCall { ns, path, args })
}

/// `progress(value, total?, message?)` params.
fn progress(params: &Map<String, Value>) -> Result<BridgeRequest, Refusal> {
    let number = |key: &str| {
        params
            .get(key)
            .and_then(Value::as_f64)
            .filter(|n| n.is_finite())
    };
    let Some(value) = number("value") else {
        return Err(Refusal::bad_request(
            "progress(value, total?, message?): value must be a finite number",
        ));
    };
    let total = match params.get("total") {
        None | Some(Value::Null) => None,
        Some(_) => Some(number("total").ok_or_else(|| {
            Refusal::bad_request("progress(value, total?, message?): total must be a finite number")
        })?),
    };
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .map(crate::progress::bounded_message);
    Ok(BridgeRequest::Progress {
        value,
        total,
        message,
    })
}

/// Params of a result handle's `text`, `find` or `json`.
fn handle(method: Method, params: &Map<String, Value>) -> Result<BridgeRequest, Refusal> {
    let offset = |key: &str, what: &str| -> Result<Option<usize>, Refusal> {
        match params.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    Refusal::bad_request(format!(
                        "{what}: `{key}` must be a whole number of bytes, 0 or more"
                    ))
                }),
        }
    };
    let Some(id) = params.get("id").and_then(Value::as_u64) else {
        return Err(Refusal::bad_request(
            "result handle: not a handle of this run",
        ));
    };
    Ok(match method {
        Method::HandleText => BridgeRequest::HandleText {
            id,
            start: offset("start", "result.text(start?, end?)")?.unwrap_or(0),
            end: offset("end", "result.text(start?, end?)")?,
        },
        Method::HandleFind => {
            let Some(Value::String(needle)) = params.get("needle") else {
                return Err(Refusal::bad_request(
                    "result.find(needle, from?): needle must be a string",
                ));
            };
            BridgeRequest::HandleFind {
                id,
                needle: needle.clone(),
                from: offset("from", "result.find(needle, from?)")?.unwrap_or(0),
            }
        }
        _ => BridgeRequest::HandleJson { id },
    })
}

fn oversized_name(params: &Map<String, Value>) -> Option<(&'static str, usize)> {
    NAME_FIELDS
        .iter()
        .find_map(|&field| match params.get(field) {
            Some(Value::String(s)) if s.len() > MAX_NAME_BYTES => Some((field, s.len())),
            _ => None,
        })
}

/// A server name as the MCP handlers look it up: anything but a string is
/// no server (`""`).
fn server_name(params: &Map<String, Value>) -> String {
    params
        .get("server")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn optional_string<'a>(
    params: &'a Map<String, Value>,
    key: &str,
    usage: &str,
) -> Result<Option<&'a str>, Refusal> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Refusal::bad_request(format!(
            "{usage}: {key} must be a string"
        ))),
    }
}

/// `tools.search` / `API.search`: the query, the limit and (for
/// `API.search`, `allow_server`) the `server` option.
fn search(
    params: &Map<String, Value>,
    config: &CodeModeConfig,
    usage: &str,
    allow_server: bool,
) -> Result<(String, usize, Option<String>), Refusal> {
    let query = match params.get("query") {
        Some(Value::String(q)) if !q.trim().is_empty() && q.len() <= MAX_NAME_BYTES => q,
        Some(Value::String(q)) if q.len() > MAX_NAME_BYTES => {
            return Err(Refusal::bad_request(format!(
                "{usage}: the query is longer than 1024 bytes; use a few keywords"
            )));
        }
        Some(Value::String(_)) => {
            return Err(Refusal::bad_request(if allow_server {
                format!(
                    "{usage}: the query is empty; pass keywords, or read API.list(\"mcp\") for every server"
                )
            } else {
                format!(
                    "{usage}: the query is empty; pass keywords, or read ALL_TOOLS for the whole catalog"
                )
            }));
        }
        _ => {
            return Err(Refusal::bad_request(format!(
                "{usage}(query, options?): query must be a string of keywords"
            )));
        }
    };
    let options_hint = if allow_server {
        "the options are `limit` and `server`"
    } else {
        "the only option is `limit`"
    };
    let mut limit = config.search_default_limit.min(config.max_search_limit) as usize;
    let mut server = None;
    match params.get("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(options)) => {
            if let Some(key) = options
                .keys()
                .find(|k| k.as_str() != "limit" && !(allow_server && k.as_str() == "server"))
            {
                return Err(Refusal::bad_request(format!(
                    "{usage}: unknown option `{key}`; {options_hint}"
                )));
            }
            if let Some(v) = options.get("limit") {
                match v
                    .as_u64()
                    .filter(|&n| n >= 1 && n <= config.max_search_limit)
                {
                    Some(n) => limit = n as usize,
                    None => {
                        return Err(Refusal::bad_request(format!(
                            "{usage}: options.limit must be an integer from 1 to {} (maxSearchLimit), got {v}",
                            config.max_search_limit
                        )));
                    }
                }
            }
            match options.get("server") {
                None | Some(Value::Null) => {}
                Some(Value::String(name)) if name.len() <= MAX_NAME_BYTES => {
                    server = Some(name.clone());
                }
                Some(_) => {
                    return Err(Refusal::bad_request(format!(
                        "{usage}: options.server must be a server's name (a short string), as in MCP.<server>"
                    )));
                }
            }
        }
        Some(_) => {
            return Err(Refusal::bad_request(format!(
                "{usage}: options must be an object like {{ limit: 5 }}"
            )));
        }
    }
    Ok((query.clone(), limit, server))
}

/// The params of an MCP resource or prompt request: only the checked keys
/// of `input` reach the executor (`arguments` values become strings).
fn mcp_request_params(
    op: McpOp,
    input: Option<&Value>,
) -> Result<Map<String, Value>, McpInputError> {
    let empty = Map::new();
    let input = match input {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => return Err(McpInputError::NotAnObject),
    };
    let string_field = |key: &'static str| match input.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(McpInputError::NotAString(key)),
    };
    let mut checked = Map::new();
    match op {
        McpOp::ResourcesList | McpOp::ResourcesTemplates | McpOp::PromptsList => {
            if let Some(cursor) = string_field("cursor")? {
                checked.insert("cursor".into(), Value::String(cursor));
            }
        }
        McpOp::ResourcesRead => {
            let uri = string_field("uri")?.ok_or(McpInputError::UriRequired)?;
            checked.insert("uri".into(), Value::String(uri));
        }
        McpOp::PromptsGet => {
            let name = string_field("name")?.ok_or(McpInputError::NameRequired)?;
            checked.insert("name".into(), Value::String(name));
            match input.get("arguments") {
                None | Some(Value::Null) => {}
                Some(Value::Object(args)) => {
                    let strings: Map<String, Value> = args
                        .iter()
                        .map(|(k, v)| {
                            let text = match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            (k.clone(), Value::String(text))
                        })
                        .collect();
                    checked.insert("arguments".into(), Value::Object(strings));
                }
                Some(_) => return Err(McpInputError::ArgumentsNotAnObject),
            }
        }
    }
    Ok(checked)
}

fn mcp_api_schema(options: Option<&Value>) -> Result<bool, McpApiError> {
    match options {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Object(options)) => {
            if let Some(key) = options.keys().find(|k| k.as_str() != "schema") {
                return Err(McpApiError::UnknownOption(key.clone()));
            }
            match options.get("schema") {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(McpApiError::SchemaNotABoolean),
            }
        }
        Some(_) => Err(McpApiError::OptionsNotAnObject),
    }
}

fn api_read_range(options: Option<&Value>) -> Result<Option<(usize, usize)>, Refusal> {
    let options = match options {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(options)) => options,
        Some(_) => {
            return Err(Refusal::bad_request(
                "API.read(path, options?): options must be an object like { offset: 0, length: 65536 }",
            ));
        }
    };
    if let Some(key) = options
        .keys()
        .find(|k| !matches!(k.as_str(), "offset" | "length"))
    {
        return Err(Refusal::bad_request(format!(
            "API.read: unknown option `{key}`; the options are `offset` and `length` (bytes)"
        )));
    }
    let number = |key: &str, default: u64| match options.get(key) {
        None | Some(Value::Null) => Some(default),
        Some(v) => v.as_u64(),
    };
    match (
        number("offset", 0),
        number("length", MAX_API_READ_BYTES as u64),
    ) {
        (Some(offset), Some(length)) if length <= MAX_API_READ_BYTES as u64 => {
            // An offset past `usize` is past any file: the read refuses it.
            Ok(Some((
                usize::try_from(offset).unwrap_or(usize::MAX),
                length as usize,
            )))
        }
        _ => Err(Refusal::bad_request(format!(
            "API.read: options.offset must be a byte offset (an integer from 0) and options.length an integer from 0 to {MAX_API_READ_BYTES}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(payload: Value) -> Result<BridgeRequest, Refusal> {
        BridgeRequest::parse(Ok(payload), &CodeModeConfig::default())
    }

    #[test]
    fn every_name_field_is_capped_before_the_method_is_known() {
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        for field in NAME_FIELDS {
            for method in ["describe", "nope"] {
                let refused = parse(json!({ "method": method, "params": { *field: long } }))
                    .expect_err("oversized");
                assert!(
                    refused
                        .message
                        .contains(&format!("`{field}` is 1025 bytes")),
                    "{refused:?}"
                );
                assert_eq!(refused.code, None);
            }
        }
        let fits = "x".repeat(MAX_NAME_BYTES);
        assert_eq!(
            parse(json!({ "method": "describe", "params": { "id": fits } })),
            Ok(BridgeRequest::Describe { id: fits })
        );
    }

    #[test]
    fn fields_are_typed() {
        assert_eq!(
            parse(json!({ "method": "call", "params": { "id": "a" } })),
            Ok(BridgeRequest::Call {
                id: "a".into(),
                input: json!({})
            })
        );
        assert_eq!(
            parse(json!({ "method": "call", "params": { "id": 1 } })).map_err(|r| r.code),
            Err(Some(ErrorCode::NestedToolFailed))
        );
        assert_eq!(
            parse(
                json!({ "method": "search", "params": { "query": "a", "options": { "limit": 3 } } })
            ),
            Ok(BridgeRequest::Search {
                query: "a".into(),
                limit: 3
            })
        );
        assert!(
            parse(
                json!({ "method": "search", "params": { "query": "a", "options": { "limit": 0 } } })
            )
            .is_err()
        );
        assert_eq!(
            parse(
                json!({ "method": "api.read", "params": { "path": "p", "options": { "length": MAX_API_READ_BYTES + 1 } } })
            ),
            Ok(BridgeRequest::ApiRead {
                path: "p".into(),
                range: Err(Refusal::bad_request(format!(
                    "API.read: options.offset must be a byte offset (an integer from 0) and options.length an integer from 0 to {MAX_API_READ_BYTES}"
                )))
            })
        );
        match parse(
            json!({ "method": "mcp.request", "params": { "server": "s", "op": "prompts.get", "input": { "name": "n", "arguments": { "a": 1 }, "x": 2 } } }),
        ) {
            Ok(BridgeRequest::McpRequest {
                op: Ok(McpOp::PromptsGet),
                params: Ok(params),
                ..
            }) => {
                assert_eq!(
                    Value::Object(params),
                    json!({ "name": "n", "arguments": { "a": "1" } })
                );
            }
            other => panic!("{other:?}"),
        }
    }

    fn refused(message: &str) -> Result<BridgeRequest, Refusal> {
        Err(Refusal::bad_request(message))
    }

    fn refused_nested(message: &str) -> Result<BridgeRequest, Refusal> {
        Err(Refusal::nested(message))
    }

    fn request(method: &str, params: Value) -> Result<BridgeRequest, Refusal> {
        parse(json!({ "method": method, "params": params }))
    }

    #[test]
    fn the_envelope_refuses_what_is_not_a_request_and_names_the_method_short() {
        assert_eq!(
            BridgeRequest::parse(
                Err(GuestJsonError("nested deeper than 64".into())),
                &CodeModeConfig::default()
            ),
            refused("bridge request refused: nested deeper than 64")
        );
        for absent in [
            json!({ "method": "yield" }),
            json!({ "method": "yield", "params": null }),
        ] {
            assert_eq!(parse(absent), Ok(BridgeRequest::Yield));
        }
        let method = "m".repeat(100);
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(
            request(&method, json!({ "uri": long })),
            refused(&format!(
                "bridge request `{}`: `uri` is 1025 bytes; ids, names, queries, paths and URIs are at most 1024 bytes",
                codemode_sandbox::bounded_text(method.clone(), 64)
            ))
        );
        // Only strings are names: a number under a name field is the
        // method's to refuse.
        assert_eq!(
            request("describe", json!({ "id": 5 })),
            refused("tools.describe(id): id must be a catalog id or tool name (a string)")
        );
        assert_eq!(
            request("describe!", json!({})),
            refused(
                "unknown bridge method `describe!`; the guest API is tools.search, tools.describe, tools.call, MCP.<server>.*, API.list, API.read and yield_control"
            )
        );
    }

    #[test]
    fn refusals_reach_the_guest_with_their_code_or_none() {
        assert_eq!(
            Refusal::bad_request("no").into_settlement(),
            Settlement::reject("no")
        );
        assert_eq!(
            Refusal::nested("no").into_settlement(),
            Settlement::reject_with_code("no", "nested_tool_failed")
        );
    }

    #[test]
    fn search_takes_a_query_a_limit_within_the_maximum_and_on_api_search_a_server() {
        let config = CodeModeConfig::default();
        let search = |query: Value, options: Value| {
            request("search", json!({ "query": query, "options": options }))
        };
        let found = |limit: usize| -> Result<BridgeRequest, Refusal> {
            Ok(BridgeRequest::Search {
                query: "q".into(),
                limit,
            })
        };
        assert_eq!(search(json!("q"), json!(null)), found(8));
        assert_eq!(search(json!("q"), json!({})), found(8));
        assert_eq!(search(json!("q"), json!({ "limit": 1 })), found(1));
        assert_eq!(search(json!("q"), json!({ "limit": 50 })), found(50));
        for limit in [json!(0), json!(51), json!(2.5), json!("3"), json!(-1)] {
            assert_eq!(
                search(json!("q"), json!({ "limit": limit })),
                refused(&format!(
                    "tools.search: options.limit must be an integer from 1 to 50 (maxSearchLimit), got {limit}"
                ))
            );
        }
        // A default above the maximum is the maximum.
        let capped = CodeModeConfig {
            search_default_limit: 80,
            ..CodeModeConfig::default()
        };
        assert_eq!(
            BridgeRequest::parse(
                Ok(json!({ "method": "search", "params": { "query": "q" } })),
                &capped
            ),
            found(50)
        );
        for (query, message) in [
            // Blank is blank at any length the cap allows.
            (
                json!(" ".repeat(MAX_NAME_BYTES)),
                "tools.search: the query is empty; pass keywords, or read ALL_TOOLS for the whole catalog",
            ),
            (
                json!(" \n"),
                "tools.search: the query is empty; pass keywords, or read ALL_TOOLS for the whole catalog",
            ),
            (
                json!(7),
                "tools.search(query, options?): query must be a string of keywords",
            ),
            (
                json!(null),
                "tools.search(query, options?): query must be a string of keywords",
            ),
        ] {
            assert_eq!(search(query, json!(null)), refused(message));
        }
        // The envelope caps names first; the search checks again for
        // callers that parse the params alone.
        let mut params = Map::new();
        params.insert("query".into(), json!("q".repeat(MAX_NAME_BYTES + 1)));
        assert_eq!(
            BridgeRequest::parse_params(Method::Search, &params, &config),
            refused("tools.search: the query is longer than 1024 bytes; use a few keywords")
        );
        assert_eq!(
            search(json!("q"), json!({ "server": "s" })),
            refused("tools.search: unknown option `server`; the only option is `limit`")
        );
        assert_eq!(
            search(json!("q"), json!([5])),
            refused("tools.search: options must be an object like { limit: 5 }")
        );
        // API.search: the same, with a server.
        let api =
            |options: Value| request("api.search", json!({ "query": "q", "options": options }));
        let on = |server: Option<&str>, limit: usize| -> Result<BridgeRequest, Refusal> {
            Ok(BridgeRequest::ApiSearch {
                query: "q".into(),
                limit,
                server: server.map(str::to_owned),
            })
        };
        assert_eq!(api(json!(null)), on(None, 8));
        assert_eq!(api(json!({ "server": null, "limit": 2 })), on(None, 2));
        assert_eq!(api(json!({ "server": "github" })), on(Some("github"), 8));
        let fits = "s".repeat(MAX_NAME_BYTES);
        assert_eq!(api(json!({ "server": fits })), on(Some(&fits), 8));
        for server in [json!(5), json!("s".repeat(MAX_NAME_BYTES + 1))] {
            assert_eq!(
                api(json!({ "server": server })),
                refused(
                    "API.search: options.server must be a server's name (a short string), as in MCP.<server>"
                )
            );
        }
        assert_eq!(
            api(json!({ "servers": "a" })),
            refused("API.search: unknown option `servers`; the options are `limit` and `server`")
        );
        assert_eq!(
            request("api.search", json!({ "query": "" })),
            refused(
                "API.search: the query is empty; pass keywords, or read API.list(\"mcp\") for every server"
            )
        );
    }

    #[test]
    fn calls_take_a_string_id_and_their_input() {
        for (input, expected) in [
            (None, json!({})),
            (Some(json!(null)), json!({})),
            (Some(json!([1])), json!([1])),
            (Some(json!({ "a": 1 })), json!({ "a": 1 })),
        ] {
            let mut params = json!({ "id": "t" });
            if let Some(input) = input {
                params["input"] = input;
            }
            assert_eq!(
                request("call", params),
                Ok(BridgeRequest::Call {
                    id: "t".into(),
                    input: expected
                })
            );
        }
        assert_eq!(
            request("call", json!({})),
            refused_nested("tools.call(id, input): id must be a catalog id string")
        );
        assert_eq!(
            request("mcp.call", json!({ "id": "t" })),
            Ok(BridgeRequest::McpCall {
                id: "t".into(),
                input: Value::Null
            })
        );
        assert_eq!(
            request("mcp.call", json!({ "id": "t", "input": { "a": 1 } })),
            Ok(BridgeRequest::McpCall {
                id: "t".into(),
                input: json!({ "a": 1 })
            })
        );
        assert_eq!(
            request("mcp.call", json!({ "id": 1 })),
            refused_nested("MCP call: the tool id must be a string")
        );
        assert_eq!(
            request("describe", json!({ "id": "t" })),
            Ok(BridgeRequest::Describe { id: "t".into() })
        );
        assert_eq!(
            request("mcp.missing", json!({ "server": "gh", "tool": "nope" })),
            Ok(BridgeRequest::McpMissing {
                server: "gh".into(),
                tool: Some("nope".into())
            })
        );
        assert_eq!(
            request("mcp.missing", json!({ "server": 3, "tool": 4 })),
            Ok(BridgeRequest::McpMissing {
                server: String::new(),
                tool: None
            })
        );
        assert_eq!(
            request(
                "ns.call",
                json!({ "ns": "fs", "path": "a.b", "args": [1, "x"] })
            ),
            Ok(BridgeRequest::NsCall {
                ns: "fs".into(),
                path: "a.b".into(),
                args: vec![json!(1), json!("x")]
            })
        );
        for args in [None, Some(json!(null))] {
            let mut params = json!({ "ns": "fs", "path": "p" });
            if let Some(args) = args {
                params["args"] = args;
            }
            assert_eq!(
                request("ns.call", params),
                Ok(BridgeRequest::NsCall {
                    ns: "fs".into(),
                    path: "p".into(),
                    args: vec![]
                })
            );
        }
        assert_eq!(
            request(
                "ns.call",
                json!({ "ns": "fs", "path": "p", "args": { "0": 1 } })
            ),
            refused_nested("namespace call: the arguments must be an array")
        );
        for params in [
            json!({ "ns": "fs" }),
            json!({ "path": "p" }),
            json!({ "ns": 1, "path": "p" }),
        ] {
            assert_eq!(
                request("ns.call", params),
                refused_nested("namespace call: the namespace id and path must be strings")
            );
        }
    }

    #[test]
    fn mcp_requests_keep_only_their_checked_fields() {
        let mcp = |op: &str, input: Value| match request(
            "mcp.request",
            json!({ "server": "docs", "op": op, "input": input }),
        ) {
            Ok(BridgeRequest::McpRequest { server, op, params }) => {
                assert_eq!(server, "docs");
                (op, params.map(Value::Object))
            }
            other => panic!("{other:?}"),
        };
        for op in [
            McpOp::ResourcesList,
            McpOp::ResourcesTemplates,
            McpOp::PromptsList,
        ] {
            let wire = op.as_str();
            assert_eq!(mcp(wire, json!(null)), (Ok(op), Ok(json!({}))));
            assert_eq!(
                mcp(wire, json!({ "cursor": "c2", "other": 1 })),
                (Ok(op), Ok(json!({ "cursor": "c2" })))
            );
            assert_eq!(
                mcp(wire, json!({ "cursor": null })),
                (Ok(op), Ok(json!({})))
            );
            for bad in [json!(""), json!(2)] {
                assert_eq!(
                    mcp(wire, json!({ "cursor": bad })),
                    (Ok(op), Err(McpInputError::NotAString("cursor")))
                );
            }
            assert_eq!(
                mcp(wire, json!("c")),
                (Ok(op), Err(McpInputError::NotAnObject))
            );
        }
        let read = McpOp::ResourcesRead;
        assert_eq!(
            mcp(
                "resources.read",
                json!({ "uri": "file:///a", "cursor": "x" })
            ),
            (Ok(read), Ok(json!({ "uri": "file:///a" })))
        );
        assert_eq!(
            mcp("resources.read", json!({})),
            (Ok(read), Err(McpInputError::UriRequired))
        );
        assert_eq!(
            mcp("resources.read", json!(null)),
            (Ok(read), Err(McpInputError::UriRequired))
        );
        assert_eq!(
            mcp("resources.read", json!({ "uri": 5 })),
            (Ok(read), Err(McpInputError::NotAString("uri")))
        );
        let get = McpOp::PromptsGet;
        assert_eq!(
            mcp(
                "prompts.get",
                json!({ "name": "p", "arguments": { "s": "x", "b": true, "n": null, "o": { "k": 1 } } })
            ),
            (
                Ok(get),
                Ok(
                    json!({ "name": "p", "arguments": { "s": "x", "b": "true", "n": "null", "o": "{\"k\":1}" } })
                )
            )
        );
        assert_eq!(
            mcp("prompts.get", json!({ "name": "p", "arguments": null })),
            (Ok(get), Ok(json!({ "name": "p" })))
        );
        assert_eq!(
            mcp("prompts.get", json!({})),
            (Ok(get), Err(McpInputError::NameRequired))
        );
        assert_eq!(
            mcp("prompts.get", json!({ "name": "p", "arguments": ["x"] })),
            (Ok(get), Err(McpInputError::ArgumentsNotAnObject))
        );
        // An unknown op is kept as sent, for the handler's message.
        assert_eq!(
            mcp("resources.delete", json!(5)),
            (Err("resources.delete".into()), Ok(json!({})))
        );
        assert_eq!(
            request("mcp.request", json!({ "server": 1 })),
            Ok(BridgeRequest::McpRequest {
                server: String::new(),
                op: Err(String::new()),
                params: Ok(Map::new())
            })
        );
        let label = "MCP.docs.resources.read";
        for (error, message) in [
            (
                McpInputError::NotAnObject,
                "MCP.docs.resources.read takes one object argument like { uri: \"...\" }",
            ),
            (
                McpInputError::NotAString("uri"),
                "MCP.docs.resources.read: `uri` must be a non-empty string",
            ),
            (
                McpInputError::UriRequired,
                "MCP.docs.resources.read({ uri }): `uri` is required",
            ),
            (
                McpInputError::NameRequired,
                "MCP.docs.resources.read({ name, arguments }): `name` is required",
            ),
            (
                McpInputError::ArgumentsNotAnObject,
                "MCP.docs.resources.read: `arguments` must be an object of strings",
            ),
        ] {
            assert_eq!(error.message(label), message);
        }
    }

    #[test]
    fn mcp_api_takes_a_tool_name_and_the_schema_option() {
        let api = |params: Value| match request("mcp.api", params) {
            Ok(BridgeRequest::McpApi {
                server,
                tool,
                schema,
            }) => (server, tool, schema),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            api(json!({ "server": "gh" })),
            ("gh".into(), Ok(None), Ok(false))
        );
        assert_eq!(
            api(json!({ "server": "gh", "tool": "t", "options": { "schema": true } })),
            ("gh".into(), Ok(Some("t".into())), Ok(true))
        );
        assert_eq!(api(json!({ "tool": null, "options": null })).1, Ok(None));
        assert_eq!(
            api(json!({ "tool": 3 })).1,
            Err(McpApiError::ToolNotAString)
        );
        for (options, schema) in [
            (json!({}), Ok(false)),
            (json!({ "schema": null }), Ok(false)),
            (json!({ "schema": false }), Ok(false)),
            (json!({ "schema": 1 }), Err(McpApiError::SchemaNotABoolean)),
            (
                json!({ "schema": true, "deep": true }),
                Err(McpApiError::UnknownOption("deep".into())),
            ),
            (json!(true), Err(McpApiError::OptionsNotAnObject)),
        ] {
            assert_eq!(api(json!({ "options": options })).2, schema, "{options}");
        }
        for (error, message) in [
            (
                McpApiError::ToolNotAString,
                "MCP.gh.$api(toolName?, options?): toolName must be a string",
            ),
            (
                McpApiError::UnknownOption("x".into()),
                "MCP.gh.$api: unknown option `x`; the only option is `schema`",
            ),
            (
                McpApiError::SchemaNotABoolean,
                "MCP.gh.$api: options.schema must be a boolean",
            ),
            (
                McpApiError::OptionsNotAnObject,
                "MCP.gh.$api: options must be an object like { schema: true }",
            ),
        ] {
            assert_eq!(error.message("gh"), message);
        }
    }

    #[test]
    fn progress_takes_finite_numbers_and_a_bounded_message() {
        let progress = |params: Value| request("progress", params);
        assert_eq!(
            progress(json!({ "value": 0.5 })),
            Ok(BridgeRequest::Progress {
                value: 0.5,
                total: None,
                message: None
            })
        );
        let long = "é".repeat(300);
        assert_eq!(
            progress(json!({ "value": 3, "total": 10, "message": long })),
            Ok(BridgeRequest::Progress {
                value: 3.0,
                total: Some(10.0),
                message: Some(crate::progress::bounded_message(&long))
            })
        );
        assert_eq!(
            progress(json!({ "value": 1, "total": null, "message": 5 })),
            Ok(BridgeRequest::Progress {
                value: 1.0,
                total: None,
                message: None
            })
        );
        for value in [json!(null), json!("1"), json!(true)] {
            let params = json!({ "value": value });
            assert_eq!(
                progress(params.clone()),
                refused("progress(value, total?, message?): value must be a finite number"),
                "{params}"
            );
        }
        assert_eq!(
            progress(json!({ "value": 1, "total": "10" })),
            refused("progress(value, total?, message?): total must be a finite number")
        );
    }

    #[test]
    fn result_handles_take_their_id_and_whole_byte_offsets() {
        assert_eq!(
            request("handle.text", json!({ "id": 4 })),
            Ok(BridgeRequest::HandleText {
                id: 4,
                start: 0,
                end: None
            })
        );
        assert_eq!(
            request("handle.text", json!({ "id": 4, "start": 5, "end": 9 })),
            Ok(BridgeRequest::HandleText {
                id: 4,
                start: 5,
                end: Some(9)
            })
        );
        assert_eq!(
            request(
                "handle.text",
                json!({ "id": 4, "start": null, "end": null })
            ),
            Ok(BridgeRequest::HandleText {
                id: 4,
                start: 0,
                end: None
            })
        );
        for (key, bad) in [
            ("start", json!(-1)),
            ("end", json!(1.5)),
            ("start", json!("0")),
        ] {
            assert_eq!(
                request("handle.text", json!({ "id": 4, key: bad })),
                refused(&format!(
                    "result.text(start?, end?): `{key}` must be a whole number of bytes, 0 or more"
                ))
            );
        }
        assert_eq!(
            request("handle.find", json!({ "id": 4, "needle": "x" })),
            Ok(BridgeRequest::HandleFind {
                id: 4,
                needle: "x".into(),
                from: 0
            })
        );
        assert_eq!(
            request("handle.find", json!({ "id": 4, "needle": "x", "from": 7 })),
            Ok(BridgeRequest::HandleFind {
                id: 4,
                needle: "x".into(),
                from: 7
            })
        );
        assert_eq!(
            request("handle.find", json!({ "id": 4, "needle": "x", "from": -7 })),
            refused(
                "result.find(needle, from?): `from` must be a whole number of bytes, 0 or more"
            )
        );
        assert_eq!(
            request("handle.find", json!({ "id": 4, "needle": 1 })),
            refused("result.find(needle, from?): needle must be a string")
        );
        assert_eq!(
            request("handle.json", json!({ "id": 4 })),
            Ok(BridgeRequest::HandleJson { id: 4 })
        );
        for method in ["handle.text", "handle.find", "handle.json"] {
            for id in [json!(null), json!(-4), json!("4")] {
                assert_eq!(
                    request(method, json!({ "id": id, "needle": "x" })),
                    refused("result handle: not a handle of this run")
                );
            }
        }
    }

    #[test]
    fn api_list_and_read_take_a_string_and_a_bounded_range() {
        assert_eq!(
            request("api.list", json!({})),
            Ok(BridgeRequest::ApiList { prefix: None })
        );
        assert_eq!(
            request("api.list", json!({ "prefix": "mcp" })),
            Ok(BridgeRequest::ApiList {
                prefix: Some("mcp".into())
            })
        );
        assert_eq!(
            request("api.list", json!({ "prefix": 1 })),
            refused("API.list(prefix?): prefix must be a string")
        );
        assert_eq!(
            request("api.read", json!({})),
            refused(
                "API.read(path): pass a path such as \"mcp/index.d.ts\" (API.list() lists them)"
            )
        );
        assert_eq!(
            request("api.read", json!({ "path": [] })),
            refused("API.read(path): path must be a string")
        );
        let read = |options: Value| match request(
            "api.read",
            json!({ "path": "p", "options": options }),
        ) {
            Ok(BridgeRequest::ApiRead { path, range }) => {
                assert_eq!(path, "p");
                range
            }
            other => panic!("{other:?}"),
        };
        let range_refused = Err(Refusal::bad_request(format!(
            "API.read: options.offset must be a byte offset (an integer from 0) and options.length an integer from 0 to {MAX_API_READ_BYTES}"
        )));
        assert_eq!(read(json!(null)), Ok(None));
        assert_eq!(read(json!({})), Ok(Some((0, MAX_API_READ_BYTES))));
        assert_eq!(
            read(json!({ "offset": null, "length": null })),
            Ok(Some((0, MAX_API_READ_BYTES)))
        );
        assert_eq!(
            read(json!({ "offset": 10, "length": 0 })),
            Ok(Some((10, 0)))
        );
        assert_eq!(
            read(json!({ "length": MAX_API_READ_BYTES })),
            Ok(Some((0, MAX_API_READ_BYTES)))
        );
        assert_eq!(
            read(json!({ "offset": u64::MAX })),
            Ok(Some((
                usize::try_from(u64::MAX).unwrap_or(usize::MAX),
                MAX_API_READ_BYTES
            )))
        );
        for options in [
            json!({ "length": MAX_API_READ_BYTES + 1 }),
            json!({ "offset": -1 }),
            json!({ "offset": 1.5 }),
            json!({ "length": "9" }),
        ] {
            assert_eq!(read(options.clone()), range_refused, "{options}");
        }
        assert_eq!(
            read(json!({ "offset": 0, "size": 4 })),
            Err(Refusal::bad_request(
                "API.read: unknown option `size`; the options are `offset` and `length` (bytes)"
            ))
        );
        assert_eq!(
            read(json!(4096)),
            Err(Refusal::bad_request(
                "API.read(path, options?): options must be an object like { offset: 0, length: 65536 }"
            ))
        );
        assert_eq!(MAX_API_READ_BYTES, 256 * 1024, "the documented piece size");
    }

    #[test]
    fn malformed_envelopes_are_refused() {
        assert!(
            parse(json!({ "method": "describe", "params": [1] }))
                .is_err_and(|r| r.message.contains("params must be an object"))
        );
        assert!(
            parse(json!({ "method": 5 }))
                .is_err_and(|r| r.message.contains("unknown bridge method ``"))
        );
        assert_eq!(
            parse(json!({ "method": "yield" })),
            Ok(BridgeRequest::Yield)
        );
    }
}
