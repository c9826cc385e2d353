//! The gateway's config file: `tools.codeMode` plus the `mcpServers` map in
//! the form MCP users already know.
//!
//! ```json5
//! {
//!   tools: { codeMode: { enabled: true, timeoutMs: 10000 } },
//!   mcpServers: {
//!     memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"], env: { MEMORY_FILE_PATH: "/tmp/memory.json" } },
//!     github: { url: "https://api.example.com/mcp", headers: { Authorization: "Bearer ${GITHUB_TOKEN}" } },
//!   },
//! }
//! ```
//!
//! Every problem is reported with its path in the file (a whole file is
//! checked before anything starts). `${NAME}` and `${NAME:-default}` in
//! strings read the gateway's environment, so secrets need not sit in the
//! file. Values of `env` and `headers` are [`Secret`]s: they never appear in
//! `Debug`, logs, telemetry or errors.

//!
//! One file per section: [`servers`] (`mcpServers`), [`auth`], [`control`]
//! (`approvals`, `hooks`), [`results`] (`results`, `store`), [`agents`]
//! (`agents.list[]`); the typed field reader in [`reader`] over the
//! runtime's one config reader.

mod agents;
mod auth;
mod control;
mod reader;
mod results;
mod servers;

pub use auth::{AuthConfig, BearerToken, MIN_BEARER_TOKEN_BYTES, OAuthResource};
pub use control::{ApprovalMode, DEFAULT_APPROVAL_MODE, HookConfig, HookTarget};
pub use reader::Secret;
pub use results::{ResultForm, StoreSetting};
pub use servers::{
    ClientAuthentication, McpServerConfig, SIGNING_ALGORITHMS, Transport, UpstreamOAuth,
    UpstreamProtocol,
};

use codemode_runtime::config_reader::{Section, Strictness, join};
use codemode_runtime::{CodeModeConfig, ConfigError, Diagnostic, ToolPolicy, ToolSource};
use serde_json::Value;

use crate::config::agents::{parse_agents, unknown_agent};
use crate::config::auth::parse_auth;
use crate::config::control::{parse_approvals, parse_hooks};
use crate::config::reader::{Fields, error, expand, section};
use crate::config::results::parse_results;
use crate::config::servers::parse_server;

/// A whole gateway config (the default: no file).
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// The effective `tools.codeMode`: the global block, with the selected
    /// agent's `agents.list[].tools.codeMode` merged over it key by key.
    pub code_mode: CodeModeConfig,
    /// Whether the file said anything about `tools.codeMode` (the global
    /// block, or the selected agent's; absent means the gateway turns code
    /// mode on: that is its job).
    pub code_mode_given: bool,
    /// The agent selected from `agents.list` (`--agent ID`), if any.
    pub agent: Option<String>,
    /// Enabled upstream servers, by name.
    pub servers: Vec<McpServerConfig>,
    /// `tools.allow` / `tools.deny`: globs over catalog names or ids
    /// (`mcp:<server>:<tool>`), for every server at once.
    pub policy: ToolPolicy,
    /// `approvals.mode` (default `destructive`).
    pub approvals: ApprovalMode,
    /// `hooks.beforeToolCall`, if any.
    pub before_tool_call: Option<HookConfig>,
    /// `auth`: how HTTP clients authenticate (`None`: they do not).
    pub auth: Option<AuthConfig>,
    /// `results.form` (default `structured`).
    pub result_form: ResultForm,
    /// `results.handleBytes`: nested results larger than this (as JSON)
    /// reach cells as handles (default: the runtime's, 1 MiB).
    pub result_handle_bytes: Option<usize>,
    /// `store`: where waiting runs are kept (`None`: the default, the
    /// embedded file store in the data directory).
    pub store: Option<StoreSetting>,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            code_mode: CodeModeConfig::default(),
            code_mode_given: false,
            agent: None,
            servers: Vec::new(),
            policy: ToolPolicy::default(),
            approvals: DEFAULT_APPROVAL_MODE,
            before_tool_call: None,
            auth: None,
            result_form: ResultForm::default(),
            result_handle_bytes: None,
            store: None,
        }
    }
}

impl GatewayConfig {
    /// The one policy the catalog applies: `tools.allow` / `tools.deny`
    /// (with `extra`'s deny globs added and its allow list, if any, in
    /// place of the file's: the command line's `--deny` / `--allow`),
    /// `approvals.mode`, and each server's `allowTools` / `denyTools` /
    /// `approveTools`.
    pub fn tool_policy(&self, extra: &ToolPolicy) -> ToolPolicy {
        let mut policy = ToolPolicy {
            allow: extra.allow.clone().or_else(|| self.policy.allow.clone()),
            deny: self
                .policy
                .deny
                .iter()
                .chain(&extra.deny)
                .cloned()
                .collect(),
            approve: self.policy.approve.clone(),
            approvals: self.approvals,
            owners: Vec::new(),
        };
        for server in &self.servers {
            policy = policy.with_owner(ToolSource::Mcp, &server.name, server.tools.clone());
        }
        policy
    }
}

/// Everything wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_problems(.errors))]
pub struct ConfigProblems {
    /// Each problem with its path.
    pub errors: Vec<ConfigError>,
}

fn render_problems(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

const ROOT: Section = section(
    &[
        "tools",
        "mcpServers",
        "approvals",
        "hooks",
        "auth",
        "results",
        "store",
        "agents",
    ],
    Strictness::Ordinary,
);
// `tools` also holds the agent runtime's other settings in reference configs.
const TOOLS: Section = section(&["codeMode", "allow", "deny"], Strictness::Ordinary);

/// Reads a config, resolving `${NAME}` from `env`; its `tools.codeMode` is
/// the global block (see [`parse_config_for_agent`]).
///
/// # Errors
/// [`ConfigProblems`] with every problem found; diagnostics (clamps,
/// unknown fields) come with a config that loads.
pub fn parse_config(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(GatewayConfig, Vec<Diagnostic>), ConfigProblems> {
    parse_config_for_agent(text, env, None)
}

/// [`parse_config`] for agent `agent` of `agents.list` (`--agent ID`): its
/// `tools.codeMode` block merged over the global one, key by key (`true`
/// and `false` count as `{ enabled: ... }`). Every agent's block is
/// checked whichever is selected.
///
/// # Errors
/// As [`parse_config`]; an `agent` that `agents.list` does not hold is a
/// problem at `agents.list` naming the ids it does hold.
pub fn parse_config_for_agent(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    agent: Option<&str>,
) -> Result<(GatewayConfig, Vec<Diagnostic>), ConfigProblems> {
    let root: Value = json5::from_str(text).map_err(|e| ConfigProblems {
        errors: vec![ConfigError {
            path: "$".into(),
            message: format!("not valid JSON5: {e}"),
        }],
    })?;
    let mut errors = Vec::new();
    let mut diagnostics = Vec::new();
    let Some(object) = root.as_object() else {
        return Err(ConfigProblems {
            errors: vec![error("$", "the config must be an object")],
        });
    };
    let mut code_mode = CodeModeConfig::default();
    let mut code_mode_given = false;
    let mut policy = ToolPolicy::default();
    let mut approvals = DEFAULT_APPROVAL_MODE;
    let mut before_tool_call = None;
    let mut auth = None;
    let mut result_form = ResultForm::default();
    let mut result_handle_bytes = None;
    let mut store = None;
    let mut agents = Vec::new();
    for (key, value) in object {
        match key.as_str() {
            "tools" => match value {
                Value::Object(tools) => {
                    let mut fields = Fields {
                        path: "tools",
                        object: tools,
                        env,
                        errors: &mut errors,
                    };
                    policy.allow = fields.globs("allow");
                    policy.deny = fields.globs("deny").unwrap_or_default();
                    TOOLS.check("tools", tools, fields.errors, &mut diagnostics);
                    if let Some(value) = tools.get("codeMode") {
                        code_mode_given = true;
                        let (config, d, e) = CodeModeConfig::check_value(value);
                        code_mode = config;
                        diagnostics.extend(d);
                        errors.extend(e);
                    }
                }
                _ => errors.push(error("tools", "expected an object")),
            },
            "mcpServers" => {}
            "approvals" => approvals = parse_approvals(value, env, &mut errors, &mut diagnostics),
            "hooks" => before_tool_call = parse_hooks(value, env, &mut errors, &mut diagnostics),
            "auth" => auth = parse_auth(value, env, &mut errors, &mut diagnostics),
            "results" => {
                (result_form, result_handle_bytes) =
                    parse_results(value, &mut errors, &mut diagnostics);
            }
            "store" => match value {
                Value::String(text) => {
                    match expand(text, env).and_then(|t| StoreSetting::parse(&t)) {
                        Ok(setting) => store = Some(setting),
                        Err(message) => errors.push(error("store", &message)),
                    }
                }
                _ => errors.push(error(
                    "store",
                    "expected a string: \"memory\", \"file:PATH\" or \"redis://HOST:PORT/DB\"",
                )),
            },
            "agents" => agents = parse_agents(value, &mut errors, &mut diagnostics),
            _ => {}
        }
    }
    ROOT.check("", object, &mut errors, &mut diagnostics);
    if let Some(id) = agent {
        match agents.iter().find(|a| a.id == id) {
            None => errors.push(unknown_agent(id, &agents)),
            Some(entry) => {
                // Each block was checked on its own above; what only the
                // merge makes (a clamp across blocks) is added here.
                let (merged, d, e) = CodeModeConfig::check_document(&root, Some(id));
                code_mode = merged;
                code_mode_given |= entry.has_code_mode;
                for d in d {
                    if !diagnostics.contains(&d) {
                        diagnostics.push(d);
                    }
                }
                for e in e {
                    if !errors.contains(&e) {
                        errors.push(e);
                    }
                }
            }
        }
    }
    let mut servers = Vec::new();
    match object.get("mcpServers") {
        None => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                let path = join("mcpServers", name);
                if let Some(server) =
                    parse_server(name, value, &path, env, &mut errors, &mut diagnostics)
                {
                    servers.push(server);
                }
            }
        }
        Some(_) => errors.push(error(
            "mcpServers",
            "expected an object of servers, like { memory: { command: \"npx\", args: [...] } }",
        )),
    }
    if errors.is_empty() {
        Ok((
            GatewayConfig {
                code_mode,
                code_mode_given,
                agent: agent.map(str::to_owned),
                servers,
                policy,
                approvals,
                before_tool_call,
                auth,
                result_form,
                result_handle_bytes,
                store,
            },
            diagnostics,
        ))
    } else {
        Err(ConfigProblems { errors })
    }
}

#[cfg(test)]
mod tests;
