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
