//! One upstream MCP server: connecting (stdio child or streamable HTTP),
//! listing its tools, calling it with a per-call timeout, and restarting
//! it when it exits or hangs, without touching any other server.
//!
//! State machine: `Connecting` → `Ready` (calls go through) → on exit back
//! to `Connecting` at once; a failed start is `Down` until the next attempt
//! (backoff 1 s doubling to 30 s). Calls arriving while it connects wait
//! for it (bounded by the call timeout); calls to a `Down` server fail at
//! once with the reason. A call that times out triggers a ping; a server
//! that does not answer it is killed and restarted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientRequest, GetPromptRequestParams,
    Implementation, InitializeRequestParams, PaginatedRequestParams, PingRequest, ProtocolVersion,
    ReadResourceRequestParams, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientServiceExt, Peer, RoleClient};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::{McpServerConfig, Transport, UpstreamProtocol};
use crate::upstream_stdio::GuardedChild;

/// Environment variables a stdio server inherits from the gateway (as the
/// reference MCP clients do); everything else must be set in `env`.
const INHERITED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TMPDIR",
];
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a server that timed out a call gets to answer a ping.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

pub use crate::upstream_error::UpstreamError;

/// What the gateway knows of a connected server.
#[derive(Debug, Clone)]
pub struct ServerSnapshot {
    /// Its tools (all pages).
    pub tools: Arc<Vec<Tool>>,
    /// Its `instructions`, if any.
    pub instructions: Option<String>,
    /// Whether it offers resources.
    pub resources: bool,
    /// Whether it offers prompts.
    pub prompts: bool,
}

#[derive(Clone)]
enum Status {
    Connecting,
    Ready(Arc<Connection>),
    Down { error: String, retry_at: Instant },
    Stopped,
}

struct Connection {
    peer: Peer<RoleClient>,
    /// Ends this connection (kills a child's process group).
    stop: CancellationToken,
    snapshot: Mutex<ServerSnapshot>,
}

/// One configured upstream server.
pub struct Upstream {
    config: McpServerConfig,
    status: watch::Sender<Status>,
    /// Set once the first connection attempt ended (either way): new
    /// sessions wait for that, not for later restarts.
    first_attempt: watch::Sender<bool>,
    /// The last tool list seen: kept while the server restarts, so its
    /// `MCP.<server>` namespace does not vanish from new runs.
    last_known: Mutex<Option<ServerSnapshot>>,
    /// Told whenever the tool list or the server's state changes.
    changed: Arc<dyn Fn() + Send + Sync>,
    shutdown: CancellationToken,
    /// Tool calls in flight (their progress and client session).
    progress: ProgressRoutes,
    /// Where the server's requests to its client are relayed.
    clients: Arc<crate::relay::ClientDirectory>,
    /// What to do when the server refuses the connection's OAuth token;
    /// set by each OAuth handshake.
    #[cfg(feature = "oauth")]
    reauthorization: Mutex<Option<Arc<crate::upstream_oauth::Reauthorization>>>,
}

/// Kills a stdio server's whole process group when dropped: a child that
/// hangs (or ignores stdin closing) must not outlive its connection, nor
/// the gateway (runtime shutdown drops the supervisor and with it this).
struct ProcessGroupGuard(Option<i32>);

impl Drop for ProcessGroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            // SAFETY: killpg only sends a signal; the group id is the one
            // this guard's child leads (spawned with ProcessGroup::leader)
            // and is signalled once.
            let _ = unsafe { libc::killpg(pgid, libc::SIGKILL) };
        }
    }
}

/// Why a handshake failed: the SDK's error (with the message for the
/// log), or a failure before the handshake.
enum Handshake {
    Failed(Box<rmcp::service::ClientInitializeError>, UpstreamError),
    Other(UpstreamError),
}

impl Handshake {
    fn into_error(self) -> UpstreamError {
        match self {
            Handshake::Failed(_, e) | Handshake::Other(e) => e,
        }
    }
}

/// A tool call in flight on this server: where its progress goes and the
/// client session whose run made it.
#[derive(Clone)]
struct InFlightCall {
    progress: Option<codemode_runtime::CallProgress>,
    session: Option<String>,
}

/// The tool calls in flight, by the progress token the SDK sent with them.
type ProgressRoutes = Arc<Mutex<HashMap<String, InFlightCall>>>;

/// Receives the server's notifications and requests.
#[derive(Clone)]
struct Handler {
    server: String,
    refresh: tokio::sync::mpsc::UnboundedSender<()>,
    progress: ProgressRoutes,
    clients: Arc<crate::relay::ClientDirectory>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> InitializeRequestParams {
        // Elicitation is relayed to the client whose run made the call
        // (see `relay`); a client without it gets the server an error.
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            rmcp::model::ElicitationCapability::new()
                .with_form(rmcp::model::FormElicitationCapability::default())
                .with_url(rmcp::model::UrlElicitationCapability::default()),
        );
        InitializeRequestParams::new(
            capabilities,
            Implementation::new("codemode", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        // A call without a client session (`codemode exec`, an embedder's
        // run) is a party of its own that nobody can be asked for.
        let (mut sessions, without_client) = {
            let calls = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
            let sessions: Vec<String> = calls
                .values()
                .filter_map(|call| call.session.clone())
                .collect();
            let without_client = calls.values().any(|call| call.session.is_none());
            (sessions, without_client)
        };
        sessions.sort();
        sessions.dedup();
        debug!(server = %self.server, sessions = sessions.len(), without_client, "upstream asks for elicitation");
        if without_client {
            if sessions.is_empty() {
                return Err(crate::relay::no_client(&self.server));
            }
            // With other sessions' calls in flight too: whose question it
            // is cannot be told, so nobody is asked.
            sessions.push(String::new());
        }
        self.clients.elicit(&self.server, &sessions, request).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        debug!(server = %self.server, "tools/list_changed");
        let _ = self.refresh.send(());
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Only tokens of calls still in flight that someone follows.
        let route = self
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&token_key(&params.progress_token))
            .and_then(|call| call.progress.clone());
        if let Some(route) = route {
            route.report(params.progress, params.total, params.message.as_deref());
        }
    }
}

/// The stateless 2026-07-28 start (`server/discover`).
fn stateless() -> rmcp::ClientLifecycleMode {
    rmcp::ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// Whether a failed `initialize` means the server answered but does not
/// do sessions (a 2026 server without the handshake), so asking it
/// `server/discover` may work; not when it crashed or went silent.
fn refused_handshake(e: &rmcp::service::ClientInitializeError) -> bool {
    use rmcp::service::ClientInitializeError as E;
    matches!(
        e,
        E::JsonRpcError(_)
            | E::NoCompatibleProtocolVersion { .. }
            | E::ExpectedInitResult(_)
            | E::ExpectedInitResponse(_)
            | E::UncorrelatedErrorResponse { .. }
    )
}

/// Rounds of `input_required` one call may take (each asks the client).
const MAX_INPUT_ROUNDS: usize = 8;

/// The routing key of a progress token.
fn token_key(token: &rmcp::model::ProgressToken) -> String {
    match &token.0 {
        rmcp::model::NumberOrString::Number(n) => format!("n:{n}"),
        rmcp::model::NumberOrString::String(s) => format!("s:{s}"),
    }
}

/// The command of a stdio server: a clean environment but for the
/// variables a process needs to start and the server's own.
fn stdio_command(
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, crate::config::Secret>,
    cwd: Option<&std::path::Path>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args).env_clear();
    for key in INHERITED_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    for (key, value) in env {
        cmd.env(key, value.expose());
    }
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    cmd
}

/// A stdio server's stderr, line by line, into the log; the last few lines
/// are kept in the returned tail, for a start that fails (npx says why a
/// package is missing only there).
fn log_stderr(
    stderr: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    server: String,
) -> StderrTail {
    let tail = StderrTail::default();
    let kept = tail.clone();
    tokio::spawn(async move {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            info!(target: "codemode_mcp::upstream_stderr", server = %server, "{line}");
            kept.push(&line);
        }
        kept.close();
    });
    tail
}

/// The last lines a stdio server wrote to stderr (bounded).
#[derive(Clone, Default)]
struct StderrTail(Arc<(Mutex<StderrLines>, tokio::sync::Notify)>);

/// The kept lines, and whether stderr closed.
type StderrLines = (std::collections::VecDeque<String>, bool);

impl StderrTail {
    const LINES: usize = 4;
    const LINE_CHARS: usize = 300;

    fn push(&self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let mut kept = self.0.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.0.len() == Self::LINES {
            kept.0.pop_front();
        }
        kept.0
            .push_back(line.chars().take(Self::LINE_CHARS).collect());
    }

    fn close(&self) {
        self.0.0.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.0.1.notify_waiters();
    }

    /// The kept lines once stderr closed (the child exited), waiting at
    /// most `limit` for that; `None` when there are none.
    async fn lines(&self, limit: Duration) -> Option<String> {
        let closed = self.0.1.notified();
        if !self.0.0.lock().unwrap_or_else(PoisonError::into_inner).1 {
            let _ = tokio::time::timeout(limit, closed).await;
        }
        let kept = self.0.0.lock().unwrap_or_else(PoisonError::into_inner);
        (!kept.0.is_empty()).then(|| kept.0.iter().cloned().collect::<Vec<_>>().join(" | "))
    }
}

/// An HTTP server's configured headers, checked (values are secrets: an
/// error never echoes one).
fn header_map(
    name: &str,
    headers: &std::collections::BTreeMap<String, crate::config::Secret>,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, UpstreamError> {
    let mut custom = HashMap::new();
    for (key, value) in headers {
        let header = http::HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
            UpstreamError(format!(
                "MCP server `{name}`: header name `{key}` is not valid"
            ))
        })?;
        let value = http::HeaderValue::from_str(value.expose()).map_err(|_| {
            UpstreamError(format!(
                "MCP server `{name}`: the value of header `{key}` is not a valid header value"
            ))
        })?;
        custom.insert(header, value);
    }
    Ok(custom)
}

/// Tells the server a request was abandoned (`notifications/cancelled`)
/// when dropped while still armed.
struct CancelOnDrop {
    peer: Option<rmcp::service::Peer<RoleClient>>,
    id: rmcp::model::RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let id = self.id.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("the call was abandoned".into()),
                    ))
                    .await;
            });
        }
    }
}

/// Removes a call's progress route when the call ends (any way).
struct ProgressRoute {
    routes: ProgressRoutes,
    token: String,
}

impl ProgressRoute {
    /// Routes `token` to `call` until dropped.
    fn insert(routes: &ProgressRoutes, token: String, call: InFlightCall) -> ProgressRoute {
        lock(routes).insert(token.clone(), call);
        ProgressRoute {
            routes: Arc::clone(routes),
            token,
        }
    }
}

/// Keys of calls being sent (no progress token yet).
static NEXT_SENDING: AtomicU64 = AtomicU64::new(0);

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
    }
}

impl Upstream {
    /// Starts connecting in the background; `changed` is called whenever
    /// the server's tools or state change.
    pub(crate) fn start(
        config: McpServerConfig,
        changed: Arc<dyn Fn() + Send + Sync>,
        shutdown: CancellationToken,
        clients: Arc<crate::relay::ClientDirectory>,
    ) -> Arc<Upstream> {
        let (status, _) = watch::channel(Status::Connecting);
        let (first_attempt, _) = watch::channel(false);
        let upstream = Arc::new(Upstream {
            config,
            status,
            first_attempt,
            last_known: Mutex::new(None),
            changed,
            shutdown,
            progress: ProgressRoutes::default(),
            clients,
            #[cfg(feature = "oauth")]
            reauthorization: Mutex::new(None),
        });
        tokio::spawn(Arc::clone(&upstream).supervise());
        upstream
    }

    /// The server's name in the config.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The config's `description` of the server, if any.
    pub fn description(&self) -> Option<&str> {
        self.config.description.as_deref()
    }

    /// Waits until the first connection attempt has ended (or `limit`).
    /// Later restarts are not waited for: a new session or a `tools/list`
    /// must not stall behind one server's slow restart.
    pub async fn started(&self, limit: Duration) {
        let mut rx = self.first_attempt.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
    }

    /// The tools and capabilities to catalogue: the live ones, or the last
    /// known while the server restarts; `None` if it never connected.
    pub fn snapshot(&self) -> Option<ServerSnapshot> {
        if let Status::Ready(connection) = &*self.status.borrow() {
            return Some(lock(&connection.snapshot).clone());
        }
        lock(&self.last_known).clone()
    }

    /// Whether the server is connected right now.
    pub fn is_ready(&self) -> bool {
        matches!(&*self.status.borrow(), Status::Ready(_))
    }

    /// The reason the server is not connected, if it is not.
    pub fn down_reason(&self) -> Option<String> {
        match &*self.status.borrow() {
            Status::Down { error, .. } => Some(error.clone()),
            _ => None,
        }
    }

    /// Connects, serves, restarts: runs until shutdown.
    async fn supervise(self: Arc<Self>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            if self.shutdown.is_cancelled() {
                break;
            }
            self.status.send_replace(Status::Connecting);
            let attempt = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                r = tokio::time::timeout(self.config.startup_timeout, self.connect()) => r,
            };
            let running = match attempt {
                Ok(Ok(running)) => running,
                Ok(Err(error)) => {
                    self.mark_down(error, &mut backoff).await;
                    continue;
                }
                Err(_) => {
                    let error = UpstreamError(format!(
                        "MCP server `{}` did not finish starting within {} ms (startupTimeoutMs)",
                        self.config.name,
                        self.config.startup_timeout.as_millis()
                    ));
                    self.mark_down(error, &mut backoff).await;
                    continue;
                }
            };
            backoff = Duration::from_secs(1);
            let (running, connection, mut refresh, _group) = running;
            info!(server = %self.config.name, tools = lock(&connection.snapshot).tools.len(), "MCP server connected");
            *lock(&self.last_known) = Some(lock(&connection.snapshot).clone());
            self.status
                .send_replace(Status::Ready(Arc::clone(&connection)));
            // The catalog version moves before the first start is reported
            // done: a session woken by it must not pair the old version (and
            // a catalog cached without this server) with "all started".
            (self.changed)();
            self.first_attempt.send_replace(true);
            let stop = connection.stop.clone();
            let mut waiting = Box::pin(running.waiting());
            loop {
                tokio::select! {
                    quit = &mut waiting => {
                        debug!(server = %self.config.name, ?quit, "connection ended");
                        break;
                    }
                    _ = stop.cancelled() => {
                        break;
                    }
                    _ = self.shutdown.cancelled() => {
                        connection.stop.cancel();
                        break;
                    }
                    Some(()) = refresh.recv() => {
                        // A burst of list-changed notifications is one re-list.
                        while refresh.try_recv().is_ok() {}
                        self.refresh_tools(&connection).await;
                    }
                }
            }
            // Dropping the running service (still inside `waiting` if it
            // was stopped) closes the transport and kills the child.
            drop(waiting);
            if self.shutdown.is_cancelled() {
                break;
            }
            warn!(server = %self.config.name, "MCP server connection ended; restarting");
            crate::metrics::upstream_restart(&self.config.name);
        }
        self.status.send_replace(Status::Stopped);
        (self.changed)();
        self.first_attempt.send_replace(true);
    }

    async fn mark_down(&self, error: UpstreamError, backoff: &mut Duration) {
        warn!(server = %self.config.name, error = %error, retry_in_ms = backoff.as_millis() as u64, "MCP server unavailable");
        crate::metrics::upstream_restart(&self.config.name);
        self.status.send_replace(Status::Down {
            error: error.0,
            retry_at: Instant::now() + *backoff,
        });
        (self.changed)();
        self.first_attempt.send_replace(true);
        tokio::select! {
            _ = self.shutdown.cancelled() => {}
            _ = tokio::time::sleep(*backoff) => {}
        }
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
    }

    async fn refresh_tools(&self, connection: &Connection) {
        let limit = self.config.call_timeout;
        let listed = match tokio::time::timeout(
            limit,
            list_tools(&self.config.name, &connection.peer),
        )
        .await
        {
            Ok(listed) => listed,
            Err(_) => {
                warn!(server = %self.config.name, timeout_ms = limit.as_millis() as u64, "re-listing tools timed out; keeping the last list");
                return;
            }
        };
        match listed {
            Ok(tools) => {
                info!(server = %self.config.name, tools = tools.len(), "tool list changed");
                let snapshot = {
                    let mut snapshot = lock(&connection.snapshot);
                    snapshot.tools = Arc::new(tools);
                    snapshot.clone()
                };
                *lock(&self.last_known) = Some(snapshot);
                (self.changed)();
            }
            Err(e) => warn!(server = %self.config.name, error = %e, "re-listing tools failed"),
        }
    }

    async fn connect(
        &self,
    ) -> Result<
        (
            RunningService<RoleClient, Handler>,
            Arc<Connection>,
            tokio::sync::mpsc::UnboundedReceiver<()>,
            ProcessGroupGuard,
        ),
        UpstreamError,
    > {
        let name = &self.config.name;
        let (refresh_tx, refresh_rx) = tokio::sync::mpsc::unbounded_channel();
        let handler = Handler {
            server: name.clone(),
            refresh: refresh_tx,
            progress: Arc::clone(&self.progress),
            clients: Arc::clone(&self.clients),
        };
        let mut group = ProcessGroupGuard(None);
        // As the official clients connect by default: a session where the
        // server offers one, so it can ask its user mid-call (a stateless
        // 2026 connection gives the server no way to send a request).
        let first = match self.config.protocol {
            UpstreamProtocol::Auto | UpstreamProtocol::Session => {
                rmcp::ClientLifecycleMode::Initialize
            }
            UpstreamProtocol::Stateless => stateless(),
        };
        let running = match self.handshake(handler.clone(), first, &mut group).await {
            Ok(running) => running,
            Err(Handshake::Failed(e, why))
                if self.config.protocol == UpstreamProtocol::Auto && refused_handshake(&e) =>
            {
                tracing::info!(server = %name, initialize = %why, "the server refused the initialize handshake; connecting statelessly (server/discover, 2026-07-28)");
                self.handshake(handler, stateless(), &mut group)
                    .await
                    .map_err(|e| {
                        let mut shown = e.into_error();
                        shown.0.push_str(&format!(
                            " (after initialize failed: {why}; set `protocol` on the server to choose one)"
                        ));
                        shown
                    })?
            }
            Err(other) => return Err(other.into_error()),
        };
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            UpstreamError(format!("MCP server `{name}`: {what}: {e}"))
        };
        let peer = running.peer().clone();
        peer.set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        let capabilities = peer.peer_info().map(|info| {
            (
                info.capabilities.resources.is_some(),
                info.capabilities.prompts.is_some(),
                info.instructions.clone(),
            )
        });
        let (resources, prompts, instructions) = capabilities.unwrap_or((false, false, None));
        let tools = list_tools(name, &peer)
            .await
            .map_err(|e| fail("tools/list failed", &e))?;
        let connection = Arc::new(Connection {
            peer,
            stop: CancellationToken::new(),
            snapshot: Mutex::new(ServerSnapshot {
                tools: Arc::new(tools),
                instructions,
                resources,
                prompts,
            }),
        });
        Ok((running, connection, refresh_rx, group))
    }

    /// Starts the transport and the MCP handshake in `mode`. A stdio
    /// server's process group is held by `group` (a retry replaces it,
    /// killing the first child).
    async fn handshake(
        &self,
        handler: Handler,
        mode: rmcp::ClientLifecycleMode,
        group: &mut ProcessGroupGuard,
    ) -> Result<RunningService<RoleClient, Handler>, Handshake> {
        let name = &self.config.name;
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            UpstreamError(format!("MCP server `{name}`: {what}: {e}"))
        };
        let fail_init = |e: &rmcp::service::ClientInitializeError| fail("initialize failed", e);
        let running = match &self.config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let cmd = stdio_command(command, args, env, cwd.as_deref());
                let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
                wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
                let (transport, stderr, pid) = GuardedChild::spawn(wrapped, name.clone())
                    .map_err(|e| Handshake::Other(fail(&format!("starting `{command}`"), &e)))?;
                *group = ProcessGroupGuard(None);
                group.0 = pid.and_then(|pid| i32::try_from(pid).ok());
                let tail = stderr.map(|stderr| log_stderr(stderr, name.clone()));
                match handler.serve_with_lifecycle(transport, mode.clone()).await {
                    Ok(running) => running,
                    Err(e) => {
                        let mut shown = fail_init(&e);
                        if let Some(tail) = &tail
                            && let Some(said) = tail.lines(Duration::from_millis(500)).await
                        {
                            shown.0.push_str(&format!("; it wrote on stderr: {said}"));
                        }
                        return Err(Handshake::Failed(Box::new(e), shown));
                    }
                }
            }
            Transport::Http {
                url,
                headers,
                oauth,
            } => {
                let custom = header_map(name, headers).map_err(Handshake::Other)?;
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let http =
                    crate::upstream_http::TraceHeaders(crate::upstream_http::reqwest_client());
                match oauth {
                    None => handler
                        .serve_with_lifecycle(
                            StreamableHttpClientTransport::with_client(http, config),
                            mode.clone(),
                        )
                        .await
                        .map_err(|e| {
                            let shown = fail_init(&e);
                            Handshake::Failed(Box::new(e), shown)
                        })?,
                    #[cfg(not(feature = "oauth"))]
                    Some(_) => {
                        return Err(Handshake::Other(UpstreamError(format!(
                            "MCP server `{name}`: `oauth` needs the `oauth` feature of codemode-mcp, which this build leaves out (the codemode binary has it)"
                        ))));
                    }
                    #[cfg(feature = "oauth")]
                    Some(oauth) => {
                        let (client, reauthorization) =
                            crate::upstream_oauth::authorized_client(name, url, oauth, http)
                                .await
                                .map_err(Handshake::Other)?;
                        *lock(&self.reauthorization) = Some(Arc::new(reauthorization));
                        handler
                            .serve_with_lifecycle(
                                StreamableHttpClientTransport::with_client(client, config),
                                mode.clone(),
                            )
                            .await
                            .map_err(|e| {
                                let shown = fail_init(&e);
                                Handshake::Failed(Box::new(e), shown)
                            })?
                    }
                }
            }
        };
        Ok(running)
    }

    /// The live connection: waits while the server (re)connects, at most
    /// `limit`.
    async fn connection(&self, limit: Duration) -> Result<Arc<Connection>, UpstreamError> {
        let mut rx = self.status.subscribe();
        // A connection whose transport already closed (the server just
        // exited) is not used: the supervisor is about to replace it.
        let usable = |s: &Status| match s {
            Status::Connecting => false,
            Status::Ready(connection) => !connection.peer.is_transport_closed(),
            Status::Down { .. } | Status::Stopped => true,
        };
        let waited = tokio::time::timeout(limit, rx.wait_for(usable)).await;
        let name = &self.config.name;
        match waited {
            Err(_) => Err(UpstreamError(format!(
                "MCP server `{name}` is still starting after {} ms",
                limit.as_millis()
            ))),
            Ok(Err(_)) => Err(UpstreamError(format!("MCP server `{name}` was shut down"))),
            Ok(Ok(status)) => match &*status {
                Status::Ready(connection) => Ok(Arc::clone(connection)),
                Status::Down { error, retry_at } => Err(UpstreamError(format!(
                    "{error} (the next start attempt is in {} ms)",
                    retry_at
                        .saturating_duration_since(Instant::now())
                        .as_millis()
                ))),
                Status::Stopped => Err(UpstreamError(format!("MCP server `{name}` was shut down"))),
                Status::Connecting => Err(UpstreamError(format!(
                    "MCP server `{name}` is still starting"
                ))),
            },
        }
    }

    /// Calls a tool; the result is the raw `tools/call` result as JSON.
    ///
    /// # Errors
    /// [`UpstreamError`] when the server is down, the call times out, the
    /// connection drops, or the server answers with a protocol error.
    pub async fn call_tool(
        &self,
        tool: &str,
        input: Map<String, Value>,
        progress: Option<&codemode_runtime::CallProgress>,
        session: Option<&str>,
    ) -> Result<Value, UpstreamError> {
        let name = &self.config.name;
        let started = Instant::now();
        let limit = self.config.call_timeout;
        let connection = self.connection(limit).await?;
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(input);
        crate::upstream_http::set_trace_context(&mut params);
        let left = limit.saturating_sub(started.elapsed());
        let call = |params: CallToolRequestParams| {
            let peer = connection.peer.clone();
            let routes = Arc::clone(&self.progress);
            let clients = Arc::clone(&self.clients);
            let server = name.clone();
            async move {
                let mut params = params;
                for _round in 0..MAX_INPUT_ROUNDS {
                    // The call counts as in flight from before it is sent: a
                    // fast server may ask for elicitation before the send
                    // returns the progress token, and must find this session.
                    let sending = ProgressRoute::insert(
                        &routes,
                        format!("sending:{}", NEXT_SENDING.fetch_add(1, Ordering::Relaxed)),
                        InFlightCall {
                            progress: None,
                            session: session.map(str::to_owned),
                        },
                    );
                    // Sent by hand (not `peer.call_tool`) to learn the progress
                    // token the SDK gives the request: the server's progress of
                    // this call goes to whoever follows the run.
                    let handle = peer
                        .send_request_with_option(
                            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(
                                params.clone(),
                            )),
                            rmcp::service::PeerRequestOptions::no_options(),
                        )
                        .await?;
                    let _route = ProgressRoute::insert(
                        &routes,
                        token_key(&handle.progress_token),
                        InFlightCall {
                            progress: progress.cloned(),
                            session: session.map(str::to_owned),
                        },
                    );
                    drop(sending);
                    // Dropped unanswered (timeout, cancellation): the server is told.
                    let mut abandoned = CancelOnDrop {
                        peer: Some(peer.clone()),
                        id: handle.id.clone(),
                    };
                    let answer = handle.await_response().await;
                    abandoned.peer = None;
                    match answer? {
                        rmcp::model::ServerResult::CallToolResult(result) => return Ok(result),
                        // A 2026 server asks its client for input in the result
                        // (MRTR): elicitations go to the client whose run made the
                        // call, and the call is sent again with the answers.
                        rmcp::model::ServerResult::InputRequiredResult(asked) => {
                            let sessions: Vec<String> =
                                session.iter().map(|s| (*s).to_owned()).collect();
                            let responses = answer_input_requests(
                                &clients,
                                &server,
                                &sessions,
                                asked.input_requests,
                            )
                            .await?;
                            params = params.with_input_responses(responses);
                            if let Some(state) = asked.request_state {
                                params = params.with_request_state(state);
                            }
                        }
                        _ => return Err(rmcp::ServiceError::UnexpectedResponse),
                    }
                }
                Err(rmcp::ServiceError::McpError(
                    rmcp::ErrorData::internal_error(
                        format!(
                            "the server asked for input more than {MAX_INPUT_ROUNDS} times in one call"
                        ),
                        None,
                    ),
                ))
            }
        };
        let what = format!("tool `{tool}`");
        // A token the server refuses may be replaced (client credentials):
        // then the call goes once more.
        let attempt = async {
            let error = match call(params.clone()).await {
                Ok(result) => return Ok(result),
                Err(error) => error,
            };
            match self.refused_token(&error).await {
                Some(Ok(())) => call(params)
                    .await
                    .map_err(|e| self.service_error(&what, &e)),
                Some(Err(refusal)) => Err(refusal),
                None => Err(self.service_error(&what, &error)),
            }
        };
        match tokio::time::timeout(left, attempt).await {
            Ok(Ok(mut result)) => {
                // The wire form older clients know: no `resultType`.
                result.result_type = None;
                serde_json::to_value(&result).map_err(|e| {
                    UpstreamError(format!(
                        "MCP server `{name}`: tool `{tool}`: unreadable result: {e}"
                    ))
                })
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                self.check_alive(Arc::clone(&connection));
                Err(UpstreamError(format!(
                    "MCP server `{name}`: tool `{tool}` did not answer within {} ms (timeoutMs); the call was cancelled",
                    limit.as_millis()
                )))
            }
        }
    }

    /// A resource or prompt request; the raw MCP result as JSON.
    ///
    /// # Errors
    /// As [`Upstream::call_tool`].
    pub async fn request(
        &self,
        method: codemode_runtime::McpMethod,
        params: Value,
    ) -> Result<Value, UpstreamError> {
        use codemode_runtime::McpMethod;
        let name = &self.config.name;
        let started = Instant::now();
        let limit = self.config.call_timeout;
        let connection = self.connection(limit).await?;
        let peer = &connection.peer;
        let text = |key: &str| params.get(key).and_then(Value::as_str).map(str::to_owned);
        let cursor = PaginatedRequestParams::default().with_cursor(text("cursor"));
        let left = limit.saturating_sub(started.elapsed());
        let what = method.as_str();
        let answer = tokio::time::timeout(left, async {
            let value = match method {
                McpMethod::ResourcesList => {
                    serde_json::to_value(peer.list_resources(Some(cursor)).await?)
                }
                McpMethod::ResourceTemplatesList => {
                    serde_json::to_value(peer.list_resource_templates(Some(cursor)).await?)
                }
                McpMethod::PromptsList => {
                    serde_json::to_value(peer.list_prompts(Some(cursor)).await?)
                }
                McpMethod::ResourcesRead => {
                    let mut request =
                        ReadResourceRequestParams::new(text("uri").unwrap_or_default());
                    crate::upstream_http::set_trace_context(&mut request);
                    serde_json::to_value(peer.read_resource(request).await?)
                }
                McpMethod::PromptsGet => {
                    let mut request = GetPromptRequestParams::new(text("name").unwrap_or_default());
                    if let Some(Value::Object(arguments)) = params.get("arguments") {
                        request = request.with_arguments(arguments.clone());
                    }
                    crate::upstream_http::set_trace_context(&mut request);
                    serde_json::to_value(peer.get_prompt(request).await?)
                }
            };
            Ok::<_, rmcp::ServiceError>(value)
        })
        .await;
        match answer {
            Ok(Ok(Ok(mut value))) => {
                if let Some(map) = value.as_object_mut() {
                    map.remove("resultType");
                }
                Ok(value)
            }
            Ok(Ok(Err(e))) => Err(UpstreamError(format!(
                "MCP server `{name}`: {what}: unreadable result: {e}"
            ))),
            Ok(Err(e)) => Err(match self.refused_token(&e).await {
                Some(Err(refusal)) => refusal,
                _ => self.service_error(what, &e),
            }),
            Err(_) => {
                self.check_alive(connection);
                Err(UpstreamError(format!(
                    "MCP server `{name}`: {what} did not answer within {} ms (timeoutMs); the request was cancelled",
                    limit.as_millis()
                )))
            }
        }
    }

    /// A request the server refused for its token (401, or 403
    /// `insufficient_scope`): `Some(Ok(()))` when a new token is in place
    /// and the request may go once more, `Some(Err(_))` saying why not and
    /// what to do; `None` for other failures. The connection stays either
    /// way: the refusal is this request's, not the server's end.
    async fn refused_token(&self, error: &rmcp::ServiceError) -> Option<Result<(), UpstreamError>> {
        let challenge = crate::challenge::BearerChallenge::parse(error.auth_challenge()?);
        #[cfg(feature = "oauth")]
        {
            let reauthorization = lock(&self.reauthorization).clone();
            if let Some(reauthorization) = reauthorization {
                use crate::upstream_oauth::Refused;
                return Some(
                    match reauthorization.refused(&self.config.name, &challenge).await {
                        Refused::Retry => Ok(()),
                        Refused::Fail(message) => Err(UpstreamError(message)),
                    },
                );
            }
        }
        let name = &self.config.name;
        let scope = if challenge.scopes.is_empty() {
            String::new()
        } else {
            format!(" (it asks for scope `{}`)", challenge.scopes.join(" "))
        };
        Some(Err(UpstreamError(if challenge.is_insufficient_scope() {
            format!(
                "MCP server `{name}` refuses this request for lack of scope{scope}: the credentials in its `headers` do not carry it; give the gateway credentials that do, or configure `oauth`"
            )
        } else {
            format!(
                "MCP server `{name}` refused the gateway's credentials (401){scope}: check the `headers` of its config, or configure `oauth`"
            )
        })))
    }

    fn service_error(&self, what: &str, error: &rmcp::ServiceError) -> UpstreamError {
        let name = &self.config.name;
        match error {
            rmcp::ServiceError::McpError(data) => {
                UpstreamError(format!("MCP server `{name}`: {what}: {}", data.message))
            }
            rmcp::ServiceError::TransportSend(_) if error.auth_challenge().is_some() => {
                UpstreamError(format!(
                    "MCP server `{name}`: {what}: the server refused the access token again after a new one was got"
                ))
            }
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
                UpstreamError(format!(
                    "MCP server `{name}`: {what}: the connection to the server was lost (it crashed or exited); it is being restarted"
                ))
            }
            other => UpstreamError(format!("MCP server `{name}`: {what}: {other}")),
        }
    }

    /// After a timed-out call: a server that does not answer a ping is
    /// hung, so its connection is ended (and the supervisor restarts it).
    fn check_alive(&self, connection: Arc<Connection>) {
        let name = self.config.name.clone();
        tokio::spawn(async move {
            let ping = connection
                .peer
                .send_request(ClientRequest::PingRequest(PingRequest::default()));
            match tokio::time::timeout(PING_TIMEOUT, ping).await {
                // Any answer, an error too (a 2026 server may not know
                // `ping`), means it is not hung.
                Ok(Ok(ServerResult::EmptyResult(_)))
                | Ok(Ok(_))
                | Ok(Err(rmcp::ServiceError::McpError(_))) => {
                    debug!(server = %name, "server answers pings after a timed-out call; keeping it");
                }
                _ => {
                    warn!(server = %name, "server does not answer pings after a timed-out call; restarting it");
                    connection.stop.cancel();
                }
            }
        });
    }
}

/// All pages of the server's tools. A tool the SDK cannot read (an
/// `inputSchema` that is missing, `null`, an array, ...) is left out with a
/// warning; the server and its other tools stay.
async fn list_tools(
    server: &str,
    peer: &Peer<RoleClient>,
) -> Result<Vec<Tool>, rmcp::ServiceError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    // A server that pages forever is cut off: 1,000 pages is plenty.
    for _ in 0..1000 {
        let request = ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest {
            method: Default::default(),
            params: Some(PaginatedRequestParams::default().with_cursor(cursor)),
            extensions: Default::default(),
        });
        let (page, next) = match peer.send_request(request).await? {
            ServerResult::ListToolsResult(page) => (page.tools, page.next_cursor),
            // One bad tool makes the typed result unreadable, and the SDK
            // hands over the raw JSON: read it tool by tool.
            ServerResult::CustomResult(raw) => tools_one_by_one(server, raw.0),
            _ => return Err(rmcp::ServiceError::UnexpectedResponse),
        };
        tools.extend(page);
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

/// The readable tools of a raw `tools/list` page and its next cursor.
fn tools_one_by_one(server: &str, raw: Value) -> (Vec<Tool>, Option<String>) {
    let next = raw
        .get("nextCursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let items = match raw {
        Value::Object(mut map) => match map.remove("tools") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let tools = items
        .into_iter()
        .filter_map(|item| {
            let name = item
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .chars()
                .take(80)
                .collect::<String>();
            match serde_json::from_value::<Tool>(item) {
                Ok(tool) => Some(tool),
                Err(e) => {
                    warn!(server = %server, tool = %name, error = %e, "MCP tool left out: its definition is not valid (e.g. inputSchema must be an object)");
                    None
                }
            }
        })
        .collect();
    (tools, next)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers a 2026 server's `input_required` requests: elicitations through
/// the relay to the client whose run made the call (a client that cannot
/// be asked declines); sampling and roots are not offered by code mode.
async fn answer_input_requests(
    clients: &crate::relay::ClientDirectory,
    server: &str,
    sessions: &[String],
    requests: Option<rmcp::model::InputRequests>,
) -> Result<rmcp::model::InputResponses, rmcp::ServiceError> {
    let mut responses = rmcp::model::InputResponses::new();
    for (key, request) in requests.unwrap_or_default() {
        let answer = match request {
            rmcp::model::InputRequest::Elicitation(elicit) => {
                match clients.elicit(server, sessions, elicit.params).await {
                    Ok(result) => serde_json::to_value(result).unwrap_or_default(),
                    Err(e) => {
                        debug!(server, error = %e.message, "elicitation could not be relayed; declining");
                        serde_json::json!({ "action": "decline" })
                    }
                }
            }
            _ => {
                return Err(rmcp::ServiceError::McpError(
                    rmcp::ErrorData::invalid_request(
                        "the server asked for sampling or roots, which code mode does not offer its upstream servers",
                        None,
                    ),
                ));
            }
        };
        responses.insert(key, answer);
    }
    Ok(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_tool_is_left_out_and_the_rest_kept() {
        let raw = serde_json::json!({
            "tools": [
                { "name": "good", "inputSchema": { "type": "object" } },
                { "name": "array_schema", "inputSchema": [] },
                { "name": "null_schema", "inputSchema": null },
                { "name": "no_schema" },
                { "name": "also_good", "inputSchema": { "type": "object", "properties": {} } }
            ],
            "nextCursor": "page2"
        });
        // The SDK's untagged result type hands such a page over raw.
        let parsed: ServerResult = serde_json::from_value(raw.clone()).unwrap();
        assert!(
            matches!(parsed, ServerResult::CustomResult(_)),
            "{parsed:?}"
        );
        let (tools, next) = tools_one_by_one("s", raw);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["good", "also_good"]);
        assert_eq!(next.as_deref(), Some("page2"));
    }

    /// A session that `started()` wakes reads the catalog version next: if
    /// the version moved only after the first start was reported done, the
    /// session could pair the old version (and a catalog cached without
    /// this server) with "every server started" and miss the server for a
    /// cell. So when `changed` first fires, the first start is not yet
    /// reported.
    #[tokio::test]
    async fn the_catalog_version_moves_before_the_first_start_is_reported() {
        let (config, _) = crate::config::parse_config(
            r#"{ mcpServers: { gone: { command: "/nonexistent/codemode-test-server" } } }"#,
            &|_| None,
        )
        .expect("config");
        let server = config.servers.into_iter().next().expect("one server");
        let upstream_cell: Arc<std::sync::OnceLock<std::sync::Weak<Upstream>>> = Arc::default();
        let reported_at_change: Arc<Mutex<Vec<bool>>> = Arc::default();
        let changed: Arc<dyn Fn() + Send + Sync> = {
            let upstream_cell = Arc::clone(&upstream_cell);
            let reported_at_change = Arc::clone(&reported_at_change);
            Arc::new(move || {
                if let Some(upstream) = upstream_cell.get().and_then(std::sync::Weak::upgrade) {
                    let reported = *upstream.first_attempt.borrow();
                    lock(&reported_at_change).push(reported);
                }
            })
        };
        let shutdown = CancellationToken::new();
        // A current-thread runtime: the supervisor runs only once this
        // test awaits, after the cell is set.
        let upstream = Upstream::start(server, changed, shutdown.clone(), Arc::default());
        assert!(upstream_cell.set(Arc::downgrade(&upstream)).is_ok());
        upstream.started(Duration::from_secs(30)).await;
        shutdown.cancel();
        assert!(upstream.down_reason().is_some(), "the server cannot start");
        assert_eq!(lock(&reported_at_change).first(), Some(&false));
    }
}
