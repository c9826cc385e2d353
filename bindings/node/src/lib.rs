//! The npm package's native addon (`codemode.node`): codemode's runtime
//! in-process for Node.js, and the `codemode` command line.
//!
//! The surface here is small and JSON-shaped on purpose; `index.js` (the
//! package's entry) builds the friendly API on it: `new CodeMode({ tools,
//! mcpServers, config, store })`, `exec`, `wait`, `surface`. A session is
//! the gateway's own local session ([`Gateway::local_session`]): the same
//! runtime, run store, upstream MCP servers and fail-closed surface check
//! as `codemode serve`, with the user's JS tools beside the servers'.

mod callbacks;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use codemode::tools_file::ToolsFile;
use codemode_mcp::config::{StoreSetting, parse_config_for_agent};
use codemode_mcp::gateway::local::{LocalSession, local_owner, with_upstream_tools};
use codemode_mcp::{Gateway, GatewayError, GatewayOptions};
use codemode_runtime::{
    Approver, CallOptions, CodeModeSession, NestedCall, RunContext, ToolDefinition, ToolExecutor,
    ToolFuture, ToolPolicy, ToolSource,
};
use napi::bindgen_prelude::{Error, Result};
use napi_derive::napi;
use serde_json::{Value, json};

use crate::callbacks::{JsApprover, JsAsync, JsHooks, JsNotify, JsProgress, JsTools};

/// Scripted tools (answered by the runtime, no JS) by id; the rest to JS.
struct Routed {
    scripted_ids: HashSet<String>,
    scripted: Arc<dyn ToolExecutor>,
    js: Arc<dyn ToolExecutor>,
}

impl ToolExecutor for Routed {
    fn call(&self, call: NestedCall) -> ToolFuture {
        if self.scripted_ids.contains(&call.tool.id) {
            self.scripted.call(call)
        } else {
            self.js.call(call)
        }
    }
}

/// Runs the `codemode` command line with `args` (the program name
/// first) on the calling thread and returns its exit status. The npm
/// package's `codemode` bin calls it once, then exits with the status.
#[napi]
pub fn run_cli(args: Vec<String>) -> u32 {
    u32::from(codemode::run_main(args).0)
}

/// The answer of JS tool call `token` (`{ ok }` or `{ error }` as JSON);
/// `false` when the call is gone (cancelled, or answered already).
#[napi]
pub fn complete_tool_call(token: i64, answer: String) -> bool {
    u64::try_from(token).is_ok_and(|token| callbacks::complete(token, answer))
}

fn error(message: impl Into<String>) -> Error {
    Error::from_reason(message.into())
}

/// What `index.js` passes to [`open`], as JSON.
struct Options {
    document: String,
    tools: Vec<ToolDefinition>,
    scripted: ToolsFile,
    store: StoreSetting,
    context: RunContext,
    owner: String,
}

impl Options {
    fn parse(text: &str) -> Result<Options> {
        let options: Value =
            serde_json::from_str(text).map_err(|e| error(format!("options: {e}")))?;
        let document = options
            .get("document")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let store = match options.get("store") {
            None | Some(Value::Null) => StoreSetting::Memory,
            Some(Value::String(s)) => {
                StoreSetting::parse(s).map_err(|e| error(format!("options.store: {e}")))?
            }
            Some(_) => {
                return Err(error(
                    "options.store: expected a string: \"memory\", \"file:PATH\" or \"redis://HOST:PORT/DB\"",
                ));
            }
        };
        let text_field = |name: &str| options.get(name).and_then(Value::as_str).map(str::to_owned);
        let agent = text_field("agentId");
        let context = RunContext {
            agent_id: Some(agent.clone().unwrap_or_else(|| "node".into())),
            session_id: Some(text_field("sessionId").unwrap_or_else(|| {
                static SESSIONS: AtomicU64 = AtomicU64::new(0);
                format!(
                    "node-{}-{}",
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
                .map_err(|e| error(format!("options.scripted: {e}")))?,
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

/// One JS tool's definition (`index.js` checked the shape; the runtime
/// checks names and ids).
fn tool_definition(i: usize, entry: &Value) -> Result<ToolDefinition> {
    let text = |name: &str| entry.get(name).and_then(Value::as_str);
    let name = text("name").ok_or_else(|| error(format!("tools[{i}].name: expected a string")))?;
    let source_text = text("source").unwrap_or("client");
    let source = match ToolSource::parse(source_text) {
        Some(ToolSource::Mcp) | None => {
            return Err(error(format!(
                "tools[{i}].source: expected \"client\", \"plugin\" or \"openclaw\" (got {source_text:?}); MCP tools come from mcpServers"
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

/// An open code-mode session (JS: the native half of `CodeMode`).
#[napi]
pub struct NativeCodeMode {
    gateway: Gateway,
    session: Arc<CodeModeSession>,
    diagnostics: Vec<String>,
    calls: AtomicU64,
}

/// Opens a session: parses the config document, starts its MCP servers
/// (waiting until each answered or failed), and joins their tools with
/// the JS ones.
#[napi]
pub async fn open(
    options: String,
    dispatch: JsNotify,
    approve: Option<JsAsync>,
    before_tool_call: Option<JsAsync>,
) -> Result<NativeCodeMode> {
    let Options {
        document,
        mut tools,
        scripted,
        store,
        context,
        owner,
    } = Options::parse(&options)?;
    let environment = |name: &str| std::env::var(name).ok();
    let (mut config, diagnostics) =
        parse_config_for_agent(&document, &environment, None).map_err(|problems| {
            error(
                problems
                    .errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
    // The in-process API runs cells whatever `enabled` says: calling exec
    // is the opt-in.
    config.code_mode.enabled = true;
    let policy = config.tool_policy(&ToolPolicy::default());
    let gateway = Gateway::start(
        config,
        GatewayOptions {
            store: Some(store),
            ..GatewayOptions::default()
        },
    )
    .map_err(|e| match e {
        GatewayError::Runtime(e) => error(format!("runtime_unavailable: {e}")),
        other => error(other.to_string()),
    })?;
    gateway.wait_ready().await;
    let mut diagnostics: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
    for server in gateway.upstreams().servers() {
        if let Some(reason) = server.down_reason() {
            diagnostics.push(reason);
        }
    }
    let js: Arc<dyn ToolExecutor> = Arc::new(JsTools {
        dispatch: Arc::new(dispatch),
    });
    let scripted_ids = scripted
        .definitions()
        .iter()
        .filter_map(|d| d.id().ok())
        .collect();
    tools.extend(scripted.definitions());
    let executor = Arc::new(Routed {
        scripted_ids,
        scripted: scripted.executor(),
        js,
    });
    let joined = with_upstream_tools(gateway.upstreams(), tools, executor, &policy)
        .map_err(|e| error(format!("tools: {e}")))?;
    let approver = approve.map(|callback| {
        Arc::new(JsApprover {
            callback: Arc::new(callback),
        }) as Arc<dyn Approver>
    });
    let mut session = gateway
        .local_session(LocalSession {
            context,
            tools: Some(joined),
            approver,
            owner: Some(owner),
        })
        .map_err(|e| error(e.to_string()))?;
    if let Some(before) = before_tool_call {
        session = session.with_hooks(Arc::new(JsHooks {
            before: Arc::new(before),
        }));
    }
    Ok(NativeCodeMode {
        gateway,
        session: Arc::new(session),
        diagnostics,
        calls: AtomicU64::new(0),
    })
}

#[napi]
impl NativeCodeMode {
    fn options(&self, progress: Option<JsNotify>) -> CallOptions {
        match progress {
            Some(callback) => CallOptions::default().with_progress(Arc::new(JsProgress {
                callback: Arc::new(callback),
            })),
            None => CallOptions::default(),
        }
    }

    fn call_id(&self, given: Option<String>, kind: &str) -> String {
        given.unwrap_or_else(|| format!("{kind}_{}", self.calls.fetch_add(1, Ordering::Relaxed)))
    }

    /// Runs `exec` with its JSON input (`{ code, language? }`); resolves
    /// to the result's JSON.
    #[napi]
    pub async fn exec(
        &self,
        input: String,
        call_id: Option<String>,
        progress: Option<JsNotify>,
    ) -> Result<String> {
        let input = parse_input(&input)?;
        let call_id = self.call_id(call_id, "exec");
        let options = self.options(progress);
        let result = self.session.exec_call(&call_id, &input, options).await;
        serde_json::to_string(&result).map_err(|e| error(e.to_string()))
    }

    /// Runs `wait` with its JSON input (`{ runId }`).
    #[napi]
    pub async fn wait(
        &self,
        input: String,
        call_id: Option<String>,
        progress: Option<JsNotify>,
    ) -> Result<String> {
        let input = parse_input(&input)?;
        let call_id = self.call_id(call_id, "wait");
        let options = self.options(progress);
        let result = self.session.wait_call(&call_id, &input, options).await;
        serde_json::to_string(&result).map_err(|e| error(e.to_string()))
    }

    /// The model-visible tools, `exec` and `wait`: `[{ name, description,
    /// inputSchema }]` as JSON.
    #[napi]
    pub fn surface(&self) -> String {
        let tools: Vec<Value> = self
            .session
            .model_tools()
            .into_iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "inputSchema": t.input_schema }))
            .collect();
        Value::Array(tools).to_string()
    }

    /// The hidden catalog's ids, for the embedder (never the model).
    #[napi]
    pub fn catalog_ids(&self) -> Vec<String> {
        self.session
            .catalog()
            .entries()
            .iter()
            .map(|e| e.id.clone())
            .collect()
    }

    /// Config warnings and MCP servers that did not start.
    #[napi]
    pub fn diagnostics(&self) -> Vec<String> {
        self.diagnostics.clone()
    }

    /// Calls awaiting approval, as JSON.
    #[napi]
    pub fn pending_approvals(&self) -> Result<String> {
        serde_json::to_string(&self.session.pending_approvals()).map_err(|e| error(e.to_string()))
    }

    /// Approves a waiting call: it starts now.
    #[napi]
    pub fn approve(&self, run_id: String, call_id: String) -> Result<()> {
        self.session
            .approve(&run_id, &call_id)
            .map_err(|e| error(e.to_string()))
    }

    /// Denies a waiting call: the guest sees `approval_denied`.
    #[napi]
    pub fn deny(&self, run_id: String, call_id: String, reason: String) -> Result<()> {
        self.session
            .deny(&run_id, &call_id, &reason)
            .map_err(|e| error(e.to_string()))
    }

    /// Ends the session: running cells are aborted, MCP servers stopped.
    #[napi]
    pub fn close(&self) {
        self.session.close();
        self.gateway.shutdown();
    }
}

fn parse_input(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| error(format!("input: {e}")))
}
