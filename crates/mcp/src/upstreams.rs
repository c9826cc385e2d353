//! All upstream servers of a gateway: their combined catalog (rebuilt
//! only when a server's tools or state changed) and the [`ToolExecutor`]
//! that sends nested MCP calls to the right server.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use codemode_runtime::{
    Catalog, McpServerCall, McpServerInfo, NestedCall, ToolCallError, ToolDefinition, ToolExecutor,
    ToolFuture, ToolPolicy, ToolSource,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::config::McpServerConfig;
use crate::upstream::Upstream;

/// Longest server description (its `instructions`) kept for the model.
const MAX_INSTRUCTIONS_CHARS: usize = 600;

/// The gateway's upstream servers.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    /// Bumped whenever a server's tools or state change; sessions watch it.
    version: Arc<tokio::sync::watch::Sender<u64>>,
    cached: Mutex<Option<(u64, Arc<Catalog>)>>,
    policy: ToolPolicy,
    shutdown: CancellationToken,
    /// The gateway's client sessions, for requests servers relay to them.
    clients: Arc<crate::relay::ClientDirectory>,
}

impl Upstreams {
    /// Starts connecting to every server in the background.
    /// `policy` (from [`crate::config::GatewayConfig::tool_policy`]) decides
    /// which tools are catalogued and which calls need a human's approval.
    pub fn start(configs: Vec<McpServerConfig>, policy: ToolPolicy) -> Arc<Upstreams> {
        // https upstreams use rustls with the ring provider; installing it
        // twice (a second gateway in one process) is harmless.
        crate::install_tls_provider();
        let version = Arc::new(tokio::sync::watch::Sender::new(1u64));
        let shutdown = CancellationToken::new();
        let clients = Arc::new(crate::relay::ClientDirectory::default());
        let bump = {
            let version = Arc::clone(&version);
            Arc::new(move || {
                version.send_modify(|v| *v += 1);
            }) as Arc<dyn Fn() + Send + Sync>
        };
        let servers = configs
            .into_iter()
            .map(|config| {
                Upstream::start(
                    config,
                    Arc::clone(&bump),
                    shutdown.child_token(),
                    Arc::clone(&clients),
                )
            })
            .collect();
        Arc::new(Upstreams {
            servers,
            version,
            cached: Mutex::new(None),
            policy,
            shutdown,
            clients,
        })
    }

    /// The gateway's client sessions (requests of servers are relayed to
    /// the one whose run made the call).
    pub(crate) fn clients(&self) -> &Arc<crate::relay::ClientDirectory> {
        &self.clients
    }

    /// Waits until every server's first start attempt ended (each bounded
    /// by its `startupTimeoutMs`).
    pub async fn started(&self) {
        let waits = self.servers.iter().map(|s| {
            let server = Arc::clone(s);
            async move { server.started(Duration::from_secs(3600)).await }
        });
        for wait in waits {
            wait.await;
        }
    }

    /// The servers, in config order.
    pub fn servers(&self) -> &[Arc<Upstream>] {
        &self.servers
    }

    /// A counter that changes whenever the catalog would.
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Tells about every change of [`Upstreams::version`].
    pub fn watch_version(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The catalog of every server's tools as of now (cached per version).
    pub fn catalog(&self) -> Arc<Catalog> {
        let version = self.version();
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((v, catalog)) = &*cached
            && *v == version
        {
            return Arc::clone(catalog);
        }
        let catalog = Arc::new(self.build_catalog());
        *cached = Some((version, Arc::clone(&catalog)));
        catalog
    }

    fn build_catalog(&self) -> Catalog {
        let mut tools = Vec::new();
        let mut infos = Vec::new();
        for server in &self.servers {
            let Some(snapshot) = server.snapshot() else {
                continue;
            };
            let mut info = McpServerInfo::new(server.name())
                .with_resources(snapshot.resources)
                .with_prompts(snapshot.prompts);
            // The operator's `description` wins over the server's own words.
            if let Some(text) = server
                .description()
                .or(snapshot.instructions.as_deref())
                .map(str::trim)
                .filter(|t| !t.is_empty())
            {
                let mut short: String = text.chars().take(MAX_INSTRUCTIONS_CHARS).collect();
                if short.len() < text.len() {
                    short.push('…');
                }
                info.description = Some(short);
            }
            infos.push(info);
            for tool in snapshot.tools.iter() {
                let mut definition =
                    ToolDefinition::new(ToolSource::Mcp, server.name(), &tool.name)
                        .with_description(tool.description.as_deref().unwrap_or(""))
                        .with_parameters(Value::Object((*tool.input_schema).clone()));
                if let Some(title) = &tool.title {
                    definition = definition.with_label(title);
                }
                if let Some(output) = &tool.output_schema {
                    definition = definition.with_output_schema(Value::Object((**output).clone()));
                }
                if let Some(annotations) = tool
                    .annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok())
                {
                    definition = definition.with_annotations(annotations);
                }
                // A tool whose name cannot form a catalog id is left out
                // (with a log line) instead of failing the whole catalog.
                match definition.id() {
                    Ok(_) => tools.push(definition),
                    Err(e) => {
                        warn!(server = %server.name(), error = %e, "MCP tool left out of the catalog")
                    }
                }
            }
        }
        match Catalog::build_with_mcp_servers(tools, &self.policy, &infos) {
            Ok(catalog) => catalog,
            Err(e) => {
                // Unreachable after the per-tool check; fail closed to an
                // empty catalog rather than exposing anything.
                warn!(error = %e, "catalog build failed");
                Catalog::empty()
            }
        }
    }

    fn server(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// The executor for nested MCP calls of any session.
    pub fn executor(self: &Arc<Self>) -> Arc<dyn ToolExecutor> {
        Arc::new(UpstreamExecutor {
            upstreams: Arc::clone(self),
        })
    }

    /// Stops every server (children are killed).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

struct UpstreamExecutor {
    upstreams: Arc<Upstreams>,
}

impl ToolExecutor for UpstreamExecutor {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let upstreams = Arc::clone(&self.upstreams);
        Box::pin(async move {
            let tool = &call.tool;
            let Some(server) = upstreams.server(&tool.source_name) else {
                return Err(ToolCallError::new(format!(
                    "no MCP server `{}` behind this gateway",
                    tool.source_name
                )));
            };
            // The catalog (ToolPolicy::decide) never holds a tool the
            // server's policy denies, and calls reach here only by entry.
            let input = match call.input {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            let started = std::time::Instant::now();
            let outcome = server
                .call_tool(
                    &tool.name,
                    input,
                    Some(&call.progress),
                    call.context.session_id.as_deref(),
                )
                .await
                .map_err(|e| ToolCallError::new(e.0));
            crate::metrics::record_nested(&tool.source_name, started.elapsed().as_secs_f64());
            outcome
        })
    }

    fn mcp_request(&self, request: McpServerCall) -> ToolFuture {
        let upstreams = Arc::clone(&self.upstreams);
        Box::pin(async move {
            let Some(server) = upstreams.server(&request.server) else {
                return Err(ToolCallError::new(format!(
                    "no MCP server `{}` behind this gateway",
                    request.server
                )));
            };
            server
                .request(request.method, request.params)
                .await
                .map_err(|e| ToolCallError::new(e.0))
        })
    }
}
