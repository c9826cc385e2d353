//! A session of the gateway with no transport, for `codemode exec` and
//! `codemode wait`: cells run with what `serve` gives each MCP client
//! session — the same runtime (run store, result handles), upstream
//! servers, `hooks.beforeToolCall`, debug logs and fail-closed surface
//! check — and with the caller's tools, approvals and owner.

use std::sync::Arc;

use codemode_runtime::{
    Approver, Catalog, CatalogError, CodeModeSession, McpServerCall, NestedCall, PayloadError,
    PayloadShape, RunContext, ToolDefinition, ToolExecutor, ToolFuture, ToolHooks, ToolPolicy,
    ToolSource,
};

use super::Gateway;
use crate::Upstreams;

/// What a [`Gateway::local_session`] runs with besides the gateway's own.
pub struct LocalSession {
    /// Who runs it: hooks see its `agentId` and `sessionId`.
    pub context: RunContext,
    /// Its catalog and executor; `None`: the upstream servers' (as a
    /// client session of `serve` has them).
    pub tools: Option<(Catalog, Arc<dyn ToolExecutor>)>,
    /// Who decides calls that need approval; `None`: they wait for
    /// [`CodeModeSession::approve`] / [`CodeModeSession::deny`] (or the
    /// operator endpoint).
    pub approver: Option<Arc<dyn Approver>>,
    /// Who its runs belong to beyond this session: with a durable store,
    /// any session (in any process) bound to the same owner may resume
    /// them. `None`: this session's scope alone.
    pub owner: Option<String>,
}

/// Who the runs of the local user belong to — `codemode exec`/`wait` and
/// every stdio client's gateway of that user (and agent) — so a later
/// process of the same user resumes them from a durable store, and nobody
/// else: a bearer token's principal cannot hold a `:`, an OAuth user's
/// starts `oauth:`. The user is the OS account running the process.
pub fn local_owner(agent: Option<&str>) -> String {
    let user = os_user();
    match agent {
        Some(agent) => format!("cli:{user}:agent:{agent}"),
        None => format!("cli:{user}"),
    }
}

/// The OS account running this process: its name from `USER`/`LOGNAME`
/// when they name this uid's account, else `uid<N>`.
fn os_user() -> String {
    #[cfg(unix)]
    {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let named = ["USER", "LOGNAME"]
            .iter()
            .filter_map(|key| std::env::var(key).ok())
            .find(|name| !name.is_empty() && !name.contains(':'));
        match named {
            // The name alone would let another account that sets USER
            // take these runs: the uid is part of the owner.
            Some(name) => format!("{name}({uid})"),
            None => format!("uid{uid}"),
        }
    }
    #[cfg(not(unix))]
    {
        std::env::var("USERNAME").unwrap_or_else(|_| "local".into())
    }
}

impl Gateway {
    /// A code-mode session with the gateway's runtime, hooks and
    /// upstreams, for a caller that is not an MCP client (`codemode exec`
    /// and `codemode wait`). Wait for [`Gateway::wait_ready`] first when
    /// the upstreams' tools should be in its catalog.
    ///
    /// Its model surface is checked as `serve` checks each `tools/list`
    /// (exactly `exec` and `wait`, with the debug switches'
    /// `OPENCLAW_DEBUG_*` logs).
    ///
    /// # Errors
    /// [`PayloadError`] when that surface is not exactly `exec` and
    /// `wait` (code mode fails closed).
    pub fn local_session(&self, local: LocalSession) -> Result<CodeModeSession, PayloadError> {
        let LocalSession {
            context,
            tools,
            approver,
            owner,
        } = local;
        let (catalog, executor) = match tools {
            Some((catalog, executor)) => (Arc::new(catalog), executor),
            None => (
                self.shared.upstreams.catalog(),
                self.shared.upstreams.executor(),
            ),
        };
        let id = context.session_id.clone().unwrap_or_default();
        let mut session = self.shared.runtime.session(context, catalog, executor);
        if let Some(approver) = approver {
            session = session.with_approver(approver);
        }
        if let Some(hook) = &self.shared.hook {
            session = session.with_hooks(Arc::clone(hook) as Arc<dyn ToolHooks>);
        }
        if let Some(owner) = owner {
            let bound = codemode_runtime::RuntimeOptions::default().max_suspended_runs;
            session.bind_owner(&owner, bound);
        }
        super::log_code_mode_active(&session, &id, "local");
        // The tools/list this session would answer over MCP, checked as
        // serve checks it (this also feeds OPENCLAW_DEBUG_MODEL_*).
        let tools: Vec<serde_json::Value> = session
            .model_tools()
            .into_iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "description": t.description,
                    "inputSchema": t.input_schema,
                })
            })
            .collect();
        session.surface().check_payload(
            PayloadShape::McpToolsList,
            &serde_json::json!({ "tools": tools }),
        )?;
        Ok(session)
    }
}

/// The caller's own tools (`definitions`, run by `executor`) and the
/// upstream servers' tools in one catalog and one executor, for a
/// [`LocalSession`]: MCP calls and resource/prompt requests go to the
/// upstreams, every other call to `executor`.
///
/// # Errors
/// [`CatalogError`] when the definitions do not make a catalog (a
/// duplicate id, a bad name).
pub fn with_upstream_tools(
    upstreams: &Arc<Upstreams>,
    mut definitions: Vec<ToolDefinition>,
    executor: Arc<dyn ToolExecutor>,
    policy: &ToolPolicy,
) -> Result<(Catalog, Arc<dyn ToolExecutor>), CatalogError> {
    let mut mcp_servers = Vec::new();
    let mcp_catalog = upstreams.catalog();
    for server in mcp_catalog.mcp().servers() {
        mcp_servers.push(server.info.clone());
        for tool in &server.tools {
            definitions.push(
                ToolDefinition::new(ToolSource::Mcp, &server.info.name, &tool.entry.name)
                    .with_description(&tool.entry.description)
                    .with_parameters(tool.entry.parameters.clone())
                    .with_annotations(tool.entry.annotations.clone()),
            );
        }
    }
    let catalog = Catalog::build_with_mcp_servers(definitions, policy, &mcp_servers)?;
    let executor = Arc::new(Combined {
        own: executor,
        mcp: upstreams.executor(),
    });
    Ok((catalog, executor))
}

/// MCP calls to the upstreams, the rest to the caller's executor.
struct Combined {
    own: Arc<dyn ToolExecutor>,
    mcp: Arc<dyn ToolExecutor>,
}

impl ToolExecutor for Combined {
    fn call(&self, call: NestedCall) -> ToolFuture {
        if call.tool.source == ToolSource::Mcp {
            self.mcp.call(call)
        } else {
            self.own.call(call)
        }
    }

    fn mcp_request(&self, request: McpServerCall) -> ToolFuture {
        self.mcp.mcp_request(request)
    }
}
