//! The code-mode MCP gateway: an MCP server whose tool list is exactly
//! `exec` and `wait`, with the upstream servers behind the guest's `MCP`
//! namespace.
//!
//! Every MCP client session gets its own [`GatewaySession`]: its own
//! code-mode session scope, so runs, snapshots and catalogs never cross
//! sessions. Served over stdio ([`Gateway::serve_stdio`]) or streamable
//! HTTP ([`Gateway::serve_http`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use codemode_runtime::{CodeModeRuntime, RunContext, RuntimeError, ToolHooks, ToolPolicy};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::approvals::ClientApprover;
use crate::config::{ApprovalMode, AuthConfig, GatewayConfig};
use crate::hooks::ConfiguredHook;
use crate::upstreams::Upstreams;

mod admission;
mod http_server;
mod input_required;
mod listeners;
pub mod local;
mod session;
mod stdio;

pub use session::GatewaySession;
use session::session_nonce;

/// What the gateway tells MCP clients at `initialize`.
const INSTRUCTIONS: &str = "Code mode: the upstream MCP servers' tools are not listed directly. \
Call `exec` with a small JavaScript program that uses them through MCP.<server>.<tool>({...}) \
(read the typed signatures with API.read(\"mcp/<server>.d.ts\")), and `wait` with the runId \
when exec answers {status: \"waiting\"}.";

/// Could not start the gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The sandbox could not start (code mode fails closed).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The config turns code mode off.
    #[error(
        "code mode is disabled in this config (tools.codeMode); the gateway serves only code mode: set tools.codeMode.enabled: true or remove tools.codeMode"
    )]
    Disabled,
    /// A listener's address could not be bound.
    #[error(
        "cannot listen on {addr}: {reason}; is another process using the port? Pick another address (port 0 takes a free one)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        reason: std::io::Error,
    },
    /// Serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// HTTP on a non-loopback address without `auth`.
    #[error(
        "refusing to serve MCP on {0} without authentication: anyone who can reach it could call every upstream tool; configure `auth.bearerTokens` in the config, bind a loopback address (127.0.0.1), or pass --insecure-no-auth if something in front of the gateway authenticates"
    )]
    Unauthenticated(SocketAddr),
    /// The MCP handshake over stdio failed.
    #[error("MCP over stdio: {0}")]
    Stdio(String),
    /// The run store cannot be opened.
    #[error("run store: {0}")]
    Store(String),
    /// The config asks for something this build of the library left out.
    #[error(
        "{setting} needs the `{feature}` feature of codemode-mcp, which this build leaves out: remove {setting}, or use a build with it (the codemode binary has every feature)"
    )]
    NotBuiltIn {
        /// The config setting.
        setting: &'static str,
        /// The Cargo feature it needs.
        feature: &'static str,
    },
}

/// Options beyond the config file.
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// Policy on top of the config's `tools.allow` / `tools.deny`: its
    /// `deny` patterns are added to the config's; its `allow`, when set,
    /// replaces the config's.
    pub policy: ToolPolicy,
    /// Host names an HTTP client may use besides loopback (the `Host`
    /// header check against DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example.com`, `http://host:*`) allowed
    /// to call the HTTP endpoint besides loopback ones. Requests with any
    /// other `Origin` header are refused (DNS-rebinding and cross-site
    /// protection, as the MCP transport guidance asks); requests without
    /// one (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// MCP client sessions open at once over HTTP (0 = the default, 1,024);
    /// a client past it gets an error naming the limit.
    pub max_http_sessions: usize,
    /// An HTTP session idle this long is closed (`None` = the runs' TTL
    /// plus a minute, at least six minutes: a waiting run stays resumable).
    pub http_session_idle: Option<std::time::Duration>,
    /// Calls needing approval that the client cannot be asked about wait
    /// for an operator ([`Gateway::serve_admin`]) instead of being denied.
    pub operator_approvals: bool,
    /// Serve HTTP on a non-loopback address without `auth` (something in
    /// front of the gateway authenticates).
    pub insecure_no_auth: bool,
    /// `--store`: where waiting runs are kept, over the config's `store`.
    pub store: Option<crate::config::StoreSetting>,
}

/// The default for [`GatewayOptions::max_http_sessions`].
pub const DEFAULT_MAX_HTTP_SESSIONS: usize = 1024;

pub(super) struct Shared {
    runtime: CodeModeRuntime,
    upstreams: Arc<Upstreams>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    max_http_sessions: usize,
    http_session_idle: Option<std::time::Duration>,
    sessions: AtomicU64,
    /// Sessions open now (a session counts until its handler is dropped).
    open_sessions: Arc<AtomicUsize>,
    shutdown: CancellationToken,
    /// `hooks.beforeToolCall`.
    hook: Option<Arc<ConfiguredHook>>,
    approvals: ApprovalMode,
    operator_approvals: bool,
    auth: Option<AuthConfig>,
    insecure_no_auth: bool,
    /// `exec`/`wait` calls running now, per principal.
    running_by_principal: Mutex<HashMap<String, usize>>,
    /// `results.form`.
    result_form: crate::config::ResultForm,
    /// Runs driven as MCP tasks (the Tasks extension).
    tasks: Arc<crate::tasks::Tasks>,
    /// Work of stateless requests waiting for their client's answers.
    parked: input_required::Parked,
    /// The `agentId` client sessions' runs carry (hooks and traces see
    /// it): the `--agent` id, else `codemode-gateway`.
    agent_id: String,
    /// The configured agent (`--agent`), if any.
    agent: Option<String>,
}

/// The gateway: one per process. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Builds the runtime and starts connecting to every upstream server
    /// (in the background: the gateway answers `initialize` at once, and
    /// `tools/list` / `exec` wait for servers still starting).
    ///
    /// # Errors
    /// [`GatewayError::Disabled`] when the config turns code mode off;
    /// [`GatewayError::Runtime`] when the sandbox cannot start.
    pub fn start(config: GatewayConfig, options: GatewayOptions) -> Result<Gateway, GatewayError> {
        let policy = config.tool_policy(&options.policy);
        let mut code_mode = config.code_mode;
        if !config.code_mode_given {
            code_mode.enabled = true;
        }
        if !code_mode.enabled {
            return Err(GatewayError::Disabled);
        }
        let mut runtime_options = codemode_runtime::RuntimeOptions::default();
        if let Some(bytes) = config.result_handle_bytes {
            runtime_options.result_handle_bytes = bytes;
        }
        let store = crate::run_store::open(options.store.as_ref().or(config.store.as_ref()))
            .map_err(GatewayError::Store)?;
        info!(store = %crate::run_store::describe(&store), "run store");
        runtime_options.durable_store = store;
        let runtime = CodeModeRuntime::with_options(code_mode, runtime_options)?;
        let upstreams = Upstreams::start(config.servers, policy);
        let hook = config
            .before_tool_call
            .map(|hook| Arc::new(ConfiguredHook::new(hook)));
        Ok(Gateway {
            shared: Arc::new(Shared {
                runtime,
                upstreams,
                allowed_hosts: options.allowed_hosts,
                allowed_origins: options.allowed_origins,
                max_http_sessions: match options.max_http_sessions {
                    0 => DEFAULT_MAX_HTTP_SESSIONS,
                    n => n,
                },
                http_session_idle: options.http_session_idle,
                sessions: AtomicU64::new(0),
                open_sessions: Arc::new(AtomicUsize::new(0)),
                shutdown: CancellationToken::new(),
                hook,
                approvals: config.approvals,
                operator_approvals: options.operator_approvals,
                auth: config.auth,
                result_form: config.result_form,
                insecure_no_auth: options.insecure_no_auth,
                running_by_principal: Mutex::default(),
                tasks: Arc::default(),
                parked: input_required::Parked::default(),
                agent_id: config
                    .agent
                    .clone()
                    .unwrap_or_else(|| "codemode-gateway".into()),
                agent: config.agent.clone(),
            }),
        })
    }

    /// The upstream servers.
    pub fn upstreams(&self) -> &Arc<Upstreams> {
        &self.shared.upstreams
    }

    /// The code-mode runtime.
    pub fn runtime(&self) -> &CodeModeRuntime {
        &self.shared.runtime
    }

    /// A new MCP client session (its own code-mode scope).
    pub fn session(&self) -> GatewaySession {
        let n = self.shared.sessions.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("mcp-{n}-{:016x}", session_nonce());
        let context = RunContext {
            agent_id: Some(self.shared.agent_id.clone()),
            session_id: Some(id.clone()),
            ..RunContext::default()
        };
        let approver = Arc::new(ClientApprover::new(
            self.shared.operator_approvals,
            self.shared.approvals,
        ));
        let peer = Arc::clone(&approver.peer);
        // The version before the catalog: if a server connects in between,
        // the session holds a newer catalog under an older version (and
        // refreshes once more), never an older catalog under a newer one
        // (which no refresh would ever replace).
        let catalog_version = self.shared.upstreams.version();
        let mut session = self
            .shared
            .runtime
            .session(
                context,
                self.shared.upstreams.catalog(),
                self.shared.upstreams.executor(),
            )
            .with_approver(Arc::clone(&approver) as Arc<dyn codemode_runtime::Approver>);
        if let Some(hook) = &self.shared.hook {
            session = session.with_hooks(Arc::clone(hook) as Arc<dyn ToolHooks>);
        }
        // Its id dies with this process: runs only it may resume (no
        // principal, no local user, not resumable by id) are never written
        // to a durable store.
        session.keep_scoped_runs_in_process();
        // Requests upstream servers make during this client's nested calls
        // are relayed to it (see `relay`).
        self.shared
            .upstreams
            .clients()
            .register(&id, Arc::clone(&peer));
        info!(session = %id, "MCP client session started");
        log_code_mode_active(&session, &id, "client");
        self.shared.open_sessions.fetch_add(1, Ordering::SeqCst);
        GatewaySession {
            shared: Arc::clone(&self.shared),
            id,
            session: Arc::new(session),
            peer,
            approver,
            catalog_version: std::sync::Mutex::new(catalog_version),
            ended: self.shared.shutdown.child_token(),
        }
    }

    /// Stops serving: sessions end, suspended runs are discarded, upstream
    /// servers are stopped.
    pub fn shutdown(&self) {
        if !self.shared.shutdown.is_cancelled() {
            // What was still held when serving ended (the soak checks that
            // nothing leaks: closed sessions take their runs with them).
            let held = self.shared.runtime.suspended_runs();
            info!(
                suspended_runs = held,
                live_vms = self.shared.runtime.live_vms(),
                parked_cells = self.shared.runtime.parked_cells(),
                open_sessions = self.shared.open_sessions.load(Ordering::SeqCst),
                "suspended runs held at shutdown: {held}"
            );
        }
        self.shared.shutdown.cancel();
        self.shared.runtime.shutdown();
        self.shared.upstreams.shutdown();
    }
}

/// `OPENCLAW_DEBUG_CODE_MODE`: what a new session (`kind`: a client's, or
/// the local one of `codemode exec`) sees.
fn log_code_mode_active(session: &codemode_runtime::CodeModeSession, id: &str, kind: &str) {
    if codemode_runtime::debug::DebugSwitches::current().code_mode {
        let catalog = session.catalog();
        tracing::info!(
            target: "codemode::debug",
            session = %id,
            visible = ?["exec", "wait"],
            catalog = catalog.len(),
            by_source = ?catalog.count_by_source(),
            mcp_servers = catalog.mcp().servers().len(),
            "code mode active for a {kind} session"
        );
    }
}

impl Gateway {
    /// Waits until every upstream server's first start attempt ended.
    pub async fn wait_ready(&self) {
        self.shared.upstreams.started().await;
    }
}
