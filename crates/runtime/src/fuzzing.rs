//! Entry points for the fuzz targets in `fuzz/` and their corpus replay in
//! `crates/fuzz`: the paths guest and network input reach, with the same
//! wiring as in production. Not a stable API.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::catalog::mcp::McpServerInfo;
use crate::catalog::{Catalog, ToolDefinition, ToolPolicy, ToolSource};
use crate::config::{CodeModeConfig, Language};
use crate::executor::{McpServerCall, NestedCall, ToolExecutor, ToolFuture};
use crate::input::ExecInput;
use crate::run::bridge::handle_request;
use crate::run::calls::Cancel;
use crate::run::env::DriveCtx;
use crate::runtime::CodeModeRuntime;
use crate::session::CodeModeSession;

/// The pre-VM checks exactly as `exec` runs them: the cell to run, or the
/// refusal message.
///
/// # Errors
/// The refusal's message.
pub fn prepare(code: &str, typescript: bool) -> Result<String, String> {
    crate::run::prepare::prepare(&exec_input(code, typescript), &[])
        .map(|cell| cell.code)
        .map_err(|refused| refused.message)
}

/// [`prepare`] plus the pre-run name check against `catalog`, exactly as
/// `exec` runs them (for the check's fuzzing and its bench).
///
/// # Errors
/// The refusal's message.
pub fn prepare_and_check_names(
    code: &str,
    typescript: bool,
    catalog: &Catalog,
) -> Result<String, String> {
    crate::run::prepare::prepare(&exec_input(code, typescript), &[])
        .and_then(|cell| cell.check_names(catalog).map(|()| cell.code))
        .map_err(|refused| refused.message)
}

/// The source checks alone, without collecting names for the name check
/// (the baseline the name check's cost is measured against).
///
/// # Errors
/// The refusal's message.
pub fn source_checks_only(code: &str, typescript: bool) -> Result<String, String> {
    crate::run::prepare::prepare_watching(&exec_input(code, typescript), Vec::new())
        .map(|cell| cell.code)
        .map_err(|refused| refused.message)
}

fn exec_input(code: &str, typescript: bool) -> ExecInput {
    ExecInput {
        code: code.to_owned(),
        language: if typescript {
            Language::TypeScript
        } else {
            Language::JavaScript
        },
    }
}

/// The catalog forged requests are tried against (the bridge's unit tests
/// use it too): a core tool, a plugin tool (behind the fuzzer's `Files`
/// namespace), an MCP tool with a schema, and an MCP tool the policy
/// denies, plus a server with resources.
#[allow(clippy::expect_used, reason = "a fixed, valid catalog")]
pub(crate) fn forged_request_catalog() -> Catalog {
    let schema = json!({
        "type": "object",
        "properties": { "a": { "type": "number" }, "b": { "type": "number", "default": 5 } },
        "required": ["a"]
    });
    Catalog::build_with_mcp_servers(
        vec![
            ToolDefinition::new(ToolSource::Openclaw, "core", "read"),
            ToolDefinition::new(ToolSource::Plugin, "files", "list_files"),
            ToolDefinition::new(ToolSource::Mcp, "calc", "add").with_parameters(schema),
            ToolDefinition::new(ToolSource::Mcp, "calc", "secret"),
        ],
        &ToolPolicy {
            allow: None,
            deny: vec!["mcp:calc:secret".into()],
            ..ToolPolicy::default()
        },
        &[McpServerInfo::new("docs").with_resources(true)],
    )
    .expect("catalog")
}

/// Ids of everything the executor was asked to run.
#[derive(Default)]
struct Recorder {
    started: Mutex<Vec<String>>,
}

impl ToolExecutor for Recorder {
    fn call(&self, call: NestedCall) -> ToolFuture {
        if let Ok(mut started) = self.started.lock() {
            started.push(call.tool.id.clone());
        }
        Box::pin(async { Ok(json!({ "content": [] })) })
    }

    fn mcp_request(&self, request: McpServerCall) -> ToolFuture {
        if let Ok(mut started) = self.started.lock() {
            started.push(format!("{}:{}", request.server, request.method.as_str()));
        }
        Box::pin(async { Ok(json!({ "contents": [] })) })
    }
}

/// The bridge with a small catalog (one tool denied by policy), answering
/// raw guest request bytes.
pub struct BridgeFuzzer {
    tokio: tokio::runtime::Runtime,
    session: CodeModeSession,
    recorder: Arc<Recorder>,
}

impl BridgeFuzzer {
    /// # Panics
    /// When the sandbox or a tokio runtime cannot start here.
    #[allow(
        clippy::expect_used,
        reason = "a fuzz harness without a runtime is useless"
    )]
    pub fn new() -> BridgeFuzzer {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let runtime = CodeModeRuntime::new(CodeModeConfig {
            enabled: true,
            ..CodeModeConfig::default()
        })
        .expect("sandbox starts");
        let catalog = forged_request_catalog();
        // A namespace, so `ns.call` requests can reach a real callable.
        runtime
            .namespaces()
            .register(
                "files",
                crate::NamespaceRegistration {
                    id: "files-ns".into(),
                    global_name: "Files".into(),
                    description: String::new(),
                    required_tool_names: vec!["list_files".into()],
                    prompt: None,
                    create_scope: Arc::new(|_| {
                        crate::ScopeValue::Object(vec![(
                            "list".into(),
                            crate::namespace_tool("list_files"),
                        )])
                    }),
                },
            )
            .expect("a valid namespace");
        let recorder = Arc::new(Recorder::default());
        let session = runtime.session(
            Default::default(),
            catalog,
            Arc::clone(&recorder) as Arc<dyn ToolExecutor>,
        );
        BridgeFuzzer {
            tokio,
            session,
            recorder,
        }
    }

    /// Answers one raw request (as the guest's `codemode.request` bytes).
    ///
    /// # Panics
    /// When a request reached a tool outside the run's catalog (the denied
    /// one), or was left unanswered without starting a call.
    pub fn answer(&self, bytes: &[u8]) {
        let _entered = self.tokio.enter();
        let env = self.session.env(Default::default());
        let ctx = DriveCtx {
            progress: None,
            limits: Default::default(),
            deadline: Instant::now() + Duration::from_secs(10),
            await_idle: false,
            handle: self.tokio.handle().clone(),
            scope: Arc::clone(&env.scope),
            host: Arc::clone(&env.host),
        };
        let mut state = env.new_run("exec_fuzz", Language::JavaScript);
        state.namespaces = env.run_namespaces(&state).unwrap_or(None);
        let mut ready = VecDeque::new();
        let payload = codemode_sandbox::parse_guest_json(bytes);
        let method = payload
            .as_ref()
            .ok()
            .and_then(|p| p.get("method"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let before = self.recorder.started.lock().map(|s| s.len()).unwrap_or(0);
        handle_request(
            &ctx,
            &mut state,
            codemode_sandbox::HostRequest { id: 1, payload },
            &mut ready,
        );
        let started = self
            .recorder
            .started
            .lock()
            .map(|s| s[before.min(s.len())..].to_vec())
            .unwrap_or_default();
        for id in &started {
            assert!(
                id != "mcp:calc:secret" && !id.starts_with("mcp:calc:secret"),
                "a denied tool was called: {id}"
            );
        }
        let answered = !ready.is_empty();
        let in_flight = state.calls.in_flight() > 0 || !started.is_empty();
        let yielded = method == "yield";
        assert!(
            answered || in_flight || yielded,
            "request {method:?} got no answer"
        );
        state.calls.cancel_all(Cancel::Aborted);
    }
}

impl Default for BridgeFuzzer {
    fn default() -> Self {
        BridgeFuzzer::new()
    }
}
