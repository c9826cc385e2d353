//! The code-mode MCP gateway: an MCP server whose tool list is exactly
//! `exec` and `wait`, with the upstream servers behind the guest's `MCP`
//! namespace.
//!
//! Every MCP client session gets its own [`GatewaySession`]: its own
//! code-mode session scope, so runs, snapshots and catalogs never cross
//! sessions. Served over stdio ([`Gateway::serve_stdio`]) or streamable
//! HTTP ([`Gateway::serve_http`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use codemode_runtime::{
    CodeModeResult, CodeModeRuntime, CodeModeSession, RunContext, RuntimeError, ToolHooks,
    ToolPolicy,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::approvals::ClientApprover;
use crate::auth::{ClientAuth, Principal};
use crate::config::{ApprovalMode, AuthConfig, GatewayConfig, ResultForm};
use crate::hooks::ConfiguredHook;
use crate::oauth::TokenValidator;
use crate::upstreams::Upstreams;

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
    /// Binding or serving failed.
    #[error("{0}")]
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

struct Shared {
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
        let mut policy = config.policy;
        policy.deny.extend(options.policy.deny);
        if options.policy.allow.is_some() {
            policy.allow = options.policy.allow;
        }
        let upstreams = Upstreams::start(config.servers, policy, config.approvals);
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
            agent_id: Some("codemode-gateway".into()),
            session_id: Some(id.clone()),
            ..RunContext::default()
        };
        let approver = ClientApprover::new(self.shared.operator_approvals, self.shared.approvals);
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
            .with_approver(Arc::new(approver));
        if let Some(hook) = &self.shared.hook {
            session = session.with_hooks(Arc::clone(hook) as Arc<dyn ToolHooks>);
        }
        // Requests upstream servers make during this client's nested calls
        // are relayed to it (see `relay`).
        self.shared
            .upstreams
            .clients()
            .register(&id, Arc::clone(&peer));
        info!(session = %id, "MCP client session started");
        if codemode_runtime::debug::DebugSwitches::current().code_mode {
            let catalog = session.catalog();
            tracing::info!(
                target: "codemode::debug",
                session = %id,
                visible = ?["exec", "wait"],
                catalog = catalog.len(),
                mcp_servers = catalog.mcp().servers().len(),
                "code mode active for a client session"
            );
        }
        self.shared.open_sessions.fetch_add(1, Ordering::SeqCst);
        GatewaySession {
            shared: Arc::clone(&self.shared),
            id,
            session: Arc::new(session),
            peer,
            catalog_version: AtomicU64::new(catalog_version),
            ended: self.shared.shutdown.child_token(),
        }
    }

    /// Serves one MCP client on stdin/stdout until it disconnects.
    ///
    /// # Errors
    /// [`GatewayError::Stdio`] when the handshake fails.
    pub async fn serve_stdio(&self) -> Result<(), GatewayError> {
        // The handshake waits on the client: a shutdown must end it too.
        let running = tokio::select! {
            r = self.session().serve(crate::stdio_guard::guard(tokio::io::stdin(), tokio::io::stdout())) => {
                r.map_err(|e| GatewayError::Stdio(e.to_string()))?
            }
            _ = self.shared.shutdown.cancelled() => {
                self.shutdown();
                return Ok(());
            }
        };
        let reason = tokio::select! {
            r = running.waiting() => format!("{r:?}"),
            _ = self.shared.shutdown.cancelled() => "shutdown".into(),
        };
        info!(%reason, "stdio client disconnected");
        self.shutdown();
        Ok(())
    }

    /// Serves MCP over streamable HTTP at `http://<addr>/mcp` until
    /// [`Gateway::shutdown`]. `on_bound`
    /// is told the bound address (useful with port 0).
    ///
    /// # Errors
    /// [`GatewayError::Io`] when the address cannot be bound.
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        on_bound: impl FnOnce(SocketAddr),
    ) -> Result<(), GatewayError> {
        if self.shared.auth.is_none() && !addr.ip().is_loopback() && !self.shared.insecure_no_auth {
            return Err(GatewayError::Unauthenticated(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        on_bound(bound);
        let ct = self.shared.shutdown.clone();
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        hosts.extend(self.shared.allowed_hosts.iter().cloned());
        let gateway = self.clone();
        // An idle HTTP session is reaped after this; its suspended runs
        // must stay resumable for their whole TTL.
        let ttl = self.shared.runtime.config().snapshot_ttl_seconds;
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(
            self.shared
                .http_session_idle
                .unwrap_or(std::time::Duration::from_secs(ttl.max(300) + 60)),
        );
        let mut origins: Vec<String> =
            ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .into_iter()
                .map(String::from)
                .collect();
        origins.extend(self.shared.allowed_origins.iter().cloned());
        let max_sessions = self.shared.max_http_sessions;
        let sessions = Arc::new(sessions);
        let known_sessions = Arc::clone(&sessions);
        let service = StreamableHttpService::new(
            move || {
                let open = gateway.shared.open_sessions.load(Ordering::SeqCst);
                if open >= max_sessions {
                    tracing::warn!(open, max_sessions, "HTTP session refused: too many open");
                    return Err(std::io::Error::other(format!(
                        "too many MCP sessions are open on this gateway ({open}, the limit is {max_sessions}); close idle sessions (HTTP DELETE) or try again later"
                    )));
                }
                Ok(gateway.session())
            },
            sessions,
            StreamableHttpServerConfig::default()
                .with_allowed_hosts(hosts)
                .with_allowed_origins(origins)
                .enforce_origin_validation()
                .with_cancellation_token(ct.child_token()),
        );
        let metrics_gateway = self.clone();
        let mut app = axum::Router::new()
            .nest_service("/mcp", service)
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let gateway = metrics_gateway.clone();
                    async move { gateway.metrics_response() }
                }),
            )
            .layer(axum::middleware::from_fn({
                let known_sessions = Arc::clone(&known_sessions);
                move |request, next| http_conformance(Arc::clone(&known_sessions), request, next)
            }));
        if let Some(auth) = &self.shared.auth {
            #[cfg(feature = "oauth")]
            let oauth = auth.oauth.clone().map(TokenValidator::new);
            #[cfg(not(feature = "oauth"))]
            let oauth: Option<TokenValidator> = match auth.oauth {
                Some(_) => {
                    return Err(GatewayError::NotBuiltIn {
                        setting: "auth.oauth",
                        feature: "oauth",
                    });
                }
                None => None,
            };
            let auth = Arc::new(ClientAuth::new(
                auth.bearer_tokens.clone(),
                oauth,
                known_sessions,
                max_sessions,
            ));
            let layer_auth = Arc::clone(&auth);
            app = app.layer(axum::middleware::from_fn(move |request, next| {
                crate::auth::require_token(Arc::clone(&layer_auth), request, next)
            }));
            if auth.oauth.is_some() {
                // RFC 9728 metadata: public, outside the auth layer.
                let metadata = move || {
                    let auth = Arc::clone(&auth);
                    async move { axum::Json(auth.oauth.as_ref().map(TokenValidator::metadata)) }
                };
                app = app
                    .route(
                        "/.well-known/oauth-protected-resource",
                        axum::routing::get(metadata.clone()),
                    )
                    .route(
                        "/.well-known/oauth-protected-resource/mcp",
                        axum::routing::get(metadata),
                    );
            }
        }
        info!(%bound, "serving MCP over streamable HTTP at /mcp");
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { ct.cancelled().await })
            .await?;
        self.shutdown();
        Ok(())
    }

    /// Serves the operator endpoint (see [`crate::admin`]) at `addr`, each
    /// request authorized by `token` (at least 16 bytes), until
    /// [`Gateway::shutdown`]. Start the gateway with
    /// [`GatewayOptions::operator_approvals`] so undecided calls wait for it.
    ///
    /// # Errors
    /// [`GatewayError::Io`] when the address cannot be bound or the token
    /// is too short.
    pub async fn serve_admin(
        &self,
        addr: SocketAddr,
        token: String,
        on_bound: impl FnOnce(SocketAddr),
    ) -> Result<(), GatewayError> {
        if !addr.ip().is_loopback() && !self.shared.insecure_no_auth {
            return Err(GatewayError::Io(std::io::Error::other(format!(
                "refusing to serve the operator endpoint on {addr}: it can approve any session's calls and speaks plain HTTP; bind a loopback address (127.0.0.1) and reach it through a tunnel or an authenticating TLS proxy (or pass --insecure-no-auth)"
            ))));
        }
        if token.len() < crate::admin::MIN_ADMIN_TOKEN_BYTES {
            return Err(GatewayError::Io(std::io::Error::other(format!(
                "the admin token must be at least {} bytes",
                crate::admin::MIN_ADMIN_TOKEN_BYTES
            ))));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        on_bound(listener.local_addr()?);
        crate::admin::serve(
            listener,
            self.shared.runtime.clone(),
            token,
            self.shared.shutdown.clone(),
        )
        .await?;
        Ok(())
    }

    /// The `/metrics` answer: OpenMetrics text with its content type.
    fn metrics_response(&self) -> ([(http::header::HeaderName, &'static str); 1], String) {
        (
            [(
                http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            self.metrics_text(),
        )
    }

    /// The OpenMetrics text of every metric, gauges read now.
    pub fn metrics_text(&self) -> String {
        let runtime = &self.shared.runtime;
        crate::metrics::render(crate::metrics::Snapshot {
            suspended_runs: runtime.suspended_runs(),
            store_bytes: runtime.suspended_bytes(),
            sessions: self.shared.open_sessions.load(Ordering::SeqCst),
            upstreams: self
                .shared
                .upstreams
                .servers()
                .iter()
                .map(|s| (s.name(), s.is_ready()))
                .collect(),
            durable: runtime
                .durable_store_stats()
                .map(|(_, stats)| stats.map_err(|_| ())),
        })
    }

    /// Serves `/metrics` alone at `addr` (for scrapers; no authentication:
    /// bind it where only they reach it) until [`Gateway::shutdown`].
    ///
    /// # Errors
    /// [`GatewayError::Io`] when the address cannot be bound.
    pub async fn serve_metrics(
        &self,
        addr: SocketAddr,
        on_bound: impl FnOnce(SocketAddr),
    ) -> Result<(), GatewayError> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        on_bound(listener.local_addr()?);
        let gateway = self.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let gateway = gateway.clone();
                async move { gateway.metrics_response() }
            }),
        );
        let ct = self.shared.shutdown.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { ct.cancelled().await })
            .await?;
        Ok(())
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
                open_sessions = self.shared.open_sessions.load(Ordering::SeqCst),
                "suspended runs held at shutdown: {held}"
            );
        }
        self.shared.shutdown.cancel();
        self.shared.runtime.shutdown();
        self.shared.upstreams.shutdown();
    }
}

/// Session ids only need to be unique and unguessable enough within this
/// process: std's randomly keyed hasher gives 64 fresh bits.
/// Where the SDK's HTTP answers differ from the MCP transport spec:
/// a JSON body that does not parse is a 400 with a JSON-RPC parse error
/// (the SDK says 415, which tells the client to change its Content-Type),
/// and a `DELETE` of a session that does not exist (ended, or never
/// opened) is a 404, as every request naming an unknown session is (the
/// SDK says 202).
async fn http_conformance(
    sessions: Arc<LocalSessionManager>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use rmcp::transport::streamable_http_server::session::SessionManager;
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if request.method() == http::Method::DELETE
        && let Some(id) = &session
        && !sessions
            .has_session(&id.as_str().into())
            .await
            .unwrap_or(false)
    {
        return (
            http::StatusCode::NOT_FOUND,
            format!("Not Found: there is no MCP session `{id}` (it ended or never existed)"),
        )
            .into_response();
    }
    let json_post = request.method() == http::Method::POST
        && request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(';')
                    .next()
                    .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
            });
    let response = next.run(request).await;
    if !(json_post && response.status() == http::StatusCode::UNSUPPORTED_MEDIA_TYPE) {
        return response;
    }
    let detail = axum::body::to_bytes(response.into_body(), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let detail = detail
        .strip_prefix("fail to deserialize request body ")
        .unwrap_or(&detail);
    tracing::warn!(%detail, "HTTP request body is not a JSON-RPC message; answered 400");
    // serde_json's data errors (valid JSON of the wrong shape) and the
    // SDK's own message for one start so; anything else is a syntax error.
    let wrong_shape = [
        "unrecognized JSON-RPC message",
        "invalid type",
        "invalid value",
        "invalid length",
        "unknown variant",
        "unknown field",
        "missing field",
        "duplicate field",
        "data did not match",
    ]
    .iter()
    .any(|p| detail.starts_with(p));
    let (code, message) = if wrong_shape {
        (
            -32600,
            format!("Invalid Request: the body is JSON but not a JSON-RPC message ({detail})"),
        )
    } else {
        (
            -32700,
            format!("Parse error: the body is not JSON ({detail})"),
        )
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    });
    (
        http::StatusCode::BAD_REQUEST,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn session_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// One MCP client session of the gateway.
pub struct GatewaySession {
    shared: Arc<Shared>,
    id: String,
    /// Shared with the tasks this session started (they drive its runs
    /// after the request, or the whole session, is gone).
    session: Arc<CodeModeSession>,
    /// The client, for approval requests (set at its first tool call).
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    catalog_version: AtomicU64,
    /// Cancelled when the session ends: stops its list-changed watcher.
    ended: CancellationToken,
}

impl Drop for GatewaySession {
    /// The client is gone: its running cells stop now (their nested calls
    /// are cancelled) instead of running to their timeouts.
    fn drop(&mut self) {
        self.ended.cancel();
        self.shared.upstreams.clients().remove(&self.id);
        // Runs owned by a principal or by their id outlive the session; a
        // task still driving one of its runs keeps the rest alive.
        if Arc::strong_count(&self.session) == 1 {
            self.session.close();
        }
        self.shared.open_sessions.fetch_sub(1, Ordering::SeqCst);
        info!(session = %self.id, "MCP client session ended");
    }
}

impl GatewaySession {
    /// Brings the session's catalog up to date with the upstream servers
    /// (waiting for servers still starting).
    async fn refresh_catalog(&self) {
        self.shared.upstreams.started().await;
        let version = self.shared.upstreams.version();
        if self.catalog_version.swap(version, Ordering::SeqCst) != version {
            self.session
                .replace_catalog(self.shared.upstreams.catalog());
        }
    }

    fn model_tools(&self) -> Vec<Tool> {
        // With structured results the tools say what they return.
        let output_schema = match self.shared.result_form {
            ResultForm::Text => None,
            ResultForm::Structured | ResultForm::Both => match codemode_runtime::result_schema() {
                Value::Object(map) => Some(Arc::new(map)),
                _ => None,
            },
        };
        self.session
            .model_tools()
            .into_iter()
            .map(|t| {
                let schema = match t.input_schema {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let mut tool = Tool::new(t.name, t.description, Arc::new(schema));
                tool.output_schema = output_schema.clone();
                tool
            })
            .collect()
    }

    /// The result union as an MCP tool result, once (`results.form`): the
    /// model's view of the result (short telemetry) as `structuredContent`
    /// with a one-paragraph text, or as JSON text only, or both in full;
    /// `isError` when it failed; the full telemetry (numbers rounded) in
    /// `_meta["codemode/telemetry"]` for operators and tools, not the model.
    fn tool_result(&self, result: &CodeModeResult) -> CallToolResult {
        tool_result(self.shared.result_form, result)
    }
}

/// [`GatewaySession::tool_result`] for a given `results.form`.
fn tool_result(form: ResultForm, result: &CodeModeResult) -> CallToolResult {
    let model = result.to_model_json();
    let json_text = || serde_json::to_string(&model).unwrap_or_else(|_| model.to_string());
    let (text, structured) = match form {
        ResultForm::Structured => (result.summary_text(), Some(model.clone())),
        ResultForm::Text => (json_text(), None),
        ResultForm::Both => (json_text(), Some(model.clone())),
    };
    let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
    out.is_error = Some(matches!(result, CodeModeResult::Failed { .. }));
    out.structured_content = structured;
    let mut meta = rmcp::model::MetaObject::new();
    if let Ok(telemetry) = serde_json::to_value(result.telemetry()) {
        meta.insert("codemode/telemetry".into(), telemetry);
    }
    out.meta = Some(meta);
    out
}

impl ServerHandler for GatewaySession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("codemode", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// Every version the SDK knows: up to 2025-11-25 with a session
    /// (`initialize`), 2026-07-28 stateless (a new handler per request; its
    /// runs belong to the principal, or to whoever holds the run id).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let principal = principal_of(&context);
        self.shared
            .tasks
            .get(&request.task_id, principal.as_ref().map(|p| p.0.as_str()))
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = principal_of(&context);
        self.shared
            .tasks
            .cancel(&request.task_id, principal.as_ref().map(|p| p.0.as_str()))
    }

    /// Watches the upstream servers for this session: when what the exec
    /// description says changes (servers, tool counts), the client is told
    /// `notifications/tools/list_changed`.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let peer = context.peer;
        let upstreams = Arc::clone(&self.shared.upstreams);
        let runtime = self.shared.runtime.clone();
        let ended = self.ended.clone();
        let mut versions = upstreams.watch_version();
        let described = move || {
            let catalog = upstreams.catalog();
            codemode_runtime::model_tools(runtime.config(), &catalog)
                .into_iter()
                .map(|t| t.description)
                .collect::<Vec<_>>()
        };
        let mut last = described();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = ended.cancelled() => break,
                    changed = versions.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
                let now = described();
                if now != last {
                    last = now;
                    if peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.refresh_catalog().await;
        let result = ListToolsResult::with_all_items(self.model_tools());
        // Fail closed: the answer must be exactly the runtime's exec and
        // wait (this also feeds the OPENCLAW_DEBUG_MODEL_* logs).
        let payload = serde_json::to_value(&result).unwrap_or(Value::Null);
        if let Err(e) = self
            .session
            .surface()
            .check_payload(codemode_runtime::PayloadShape::McpToolsList, &payload)
        {
            tracing::error!(error = %e, "tools/list refused");
            return Err(ErrorData::internal_error(e.to_string(), None));
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let call_id = format!("{}:{}", self.id, context.id);
        // One peer per client session: approvals are asked through it.
        let _ = self.peer.set(context.peer.clone());
        // `notifications/cancelled` (or the session closing) cancels the
        // request's token. The exec blocks this task while its VM runs, so
        // the watcher runs beside it.
        let watcher = {
            let canceller = self.session.canceller();
            let call_id = call_id.clone();
            let ct = context.ct.clone();
            tokio::spawn(async move {
                ct.cancelled().await;
                info!(call = %call_id, "client cancelled the call");
                canceller.cancel_call(&call_id);
            })
        };
        let _stop_watcher = AbortOnDrop(watcher);
        let principal = principal_of(&context);
        // A stateless request (2026-07-28: no session) without
        // authentication: the run id is the capability to resume the run.
        let stateless = context
            .meta
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        if stateless && principal.is_none() {
            self.session.resume_runs_by_id();
        }
        let wants_task = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        // A metrics label from a fixed set: the client names the tool.
        let tool = match request.name.as_ref() {
            "exec" => "exec",
            "wait" => "wait",
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool `{}`: this server has exactly two tools, exec and wait",
                        other.chars().take(64).collect::<String>()
                    ),
                    None,
                ));
            }
        };
        let _running = match self.admit(principal.as_ref()) {
            Ok(running) => running,
            Err(refused) => {
                crate::metrics::record_call(tool, &refused, 0.0);
                return Ok(self.tool_result(&refused).into());
            }
        };
        let started = std::time::Instant::now();
        // The request's trace span, continuing the client's W3C
        // `traceparent` when it sent one; the exec/wait span is its child.
        let span = tracing::info_span!(target: "codemode::trace", "mcp.tools_call", tool);
        #[cfg(feature = "otel")]
        if let Some(parts) = context.extensions.get::<http::request::Parts>() {
            let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
                propagator.extract(&Headers(&parts.headers))
            });
            let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
        }
        // A progress token asks for notifications/progress while it runs.
        let (progress, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (sink, forwarder) =
                    crate::progress::ClientProgress::start(context.peer.clone(), token);
                (
                    Some(sink as Arc<dyn codemode_runtime::ProgressSink>),
                    Some(forwarder),
                )
            }
            None => (None, None),
        };
        let result = tracing::Instrument::instrument(
            async {
                let mut options = codemode_runtime::CallOptions::default();
                if let Some(sink) = progress {
                    options = options.with_progress(sink);
                }
                if tool == "exec" {
                    self.refresh_catalog().await;
                    self.session.exec_call(&call_id, &input, options).await
                } else {
                    self.session.wait_call(&call_id, &input, options).await
                }
            },
            span,
        )
        .await;
        if let Some(forwarder) = forwarder {
            forwarder.finish().await;
        }
        crate::metrics::record_call(tool, &result, started.elapsed().as_secs_f64());
        if wants_task && let CodeModeResult::Waiting { run_id, .. } = &result {
            let form = self.shared.result_form;
            let ttl =
                std::time::Duration::from_secs(self.shared.runtime.config().snapshot_ttl_seconds);
            if let Some(task) = self.shared.tasks.start(
                run_id,
                &result,
                principal.map(|p| p.0),
                Arc::clone(&self.session),
                ttl,
                move |r| tool_result(form, r),
            ) {
                info!(task = %run_id, "exec/wait answered as a task");
                return Ok(CallToolResponse::Task(task));
            }
        }
        Ok(self.tool_result(&result).into())
    }
}

/// The authenticated principal of an HTTP request, if any.
fn principal_of(context: &RequestContext<RoleServer>) -> Option<Principal> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
}

/// One running `exec`/`wait` of a principal, counted until dropped.
struct Running {
    shared: Arc<Shared>,
    principal: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self
            .shared
            .running_by_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = running.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.principal);
            }
        }
    }
}

impl GatewaySession {
    /// Counts one more running call for `principal` under
    /// `auth.maxConcurrentExecs`; the refusal is a `runtime_unavailable`
    /// result naming the limit.
    fn admit(&self, principal: Option<&Principal>) -> Result<Option<Running>, Box<CodeModeResult>> {
        let (Some(principal), Some(auth)) = (principal, &self.shared.auth) else {
            return Ok(None);
        };
        // The session's runs count against its principal's bound on
        // suspended runs (a session belongs to one principal: see `auth`).
        self.session
            .bind_owner(&principal.0, auth.max_suspended_runs);
        let max = auth.max_concurrent_execs;
        let mut running = self
            .shared
            .running_by_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = running.entry(principal.0.clone()).or_insert(0);
        if *n >= max {
            return Err(Box::new(CodeModeResult::failure(
                codemode_runtime::ErrorCode::RuntimeUnavailable,
                format!(
                    "principal `{}` already has {max} exec/wait calls running (auth.maxConcurrentExecs); wait for one to finish",
                    principal.0
                ),
                codemode_runtime::Telemetry::default(),
            )));
        }
        *n += 1;
        Ok(Some(Running {
            shared: Arc::clone(&self.shared),
            principal: principal.0.clone(),
        }))
    }
}

/// HTTP headers as an OpenTelemetry carrier (for `traceparent`).
#[cfg(feature = "otel")]
struct Headers<'a>(&'a http::HeaderMap);

#[cfg(feature = "otel")]
impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Aborts a helper task when the request it watches is done.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Gateway {
    /// Waits until every upstream server's first start attempt ended.
    pub async fn wait_ready(&self) {
        self.shared.upstreams.started().await;
    }
}
