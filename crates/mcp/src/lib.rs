//! The MCP side of codemode.
//!
//! - [`config`]: the gateway config file (`tools.codeMode` + `mcpServers`),
//!   checked as a whole with every problem's path; secrets redacted.
//! - [`upstream`] / [`upstreams`]: clients of the user's MCP servers (stdio
//!   children and streamable HTTP, via the official `rmcp` SDK): tools,
//!   resources and prompts, per-call timeouts, restart on crash or hang,
//!   list-changed refresh; their tools become `mcp` catalog entries and a
//!   [`codemode_runtime::ToolExecutor`] dispatches the guest's
//!   `MCP.<server>.<tool>(...)` calls to them.
//! - [`gateway`]: the MCP server any client connects to; its tool list is
//!   exactly `exec` and `wait`; each client session is its own code-mode
//!   scope.
//! - `approvals`: calls needing approval are put to the client's user
//!   through MCP elicitation; fail closed without it.
//! - [`hooks`]: `hooks.beforeToolCall` (a command or a URL), fail closed.
//! - [`admin`]: the operator endpoint for approvals (off by default).
//! - [`login`]: `codemode login`, a user's OAuth authorization of an
//!   upstream (authorization code + PKCE), kept by `token_store` in the
//!   [`data_dir`] and refreshed by `upstream_oauth`.
//! - [`auth`]: bearer tokens for HTTP clients; a session belongs to the
//!   principal that opened it.
//! - `metrics`: Prometheus metrics at `/metrics`.
//! - `stdio_guard`: between the stdio client and the SDK: lines the SDK
//!   would drop silently (garbage, too deep, too large, non-object
//!   `arguments`) get their JSON-RPC error instead of silence.
//! - `upstream_stdio`: the transport to a stdio upstream; a reply the SDK
//!   would drop (unreadable, oversized, a stray id) fails its call at once
//!   with the reason instead of at the upstream timeout.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use codemode_mcp::{Gateway, GatewayOptions, parse_config};
//! let text = r#"{ mcpServers: { memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"] } } }"#;
//! let (config, _diagnostics) = parse_config(text, &|name| std::env::var(name).ok())?;
//! let gateway = Gateway::start(config, GatewayOptions::default())?;
//! gateway.serve_stdio().await?;
//! # Ok(()) }
//! ```

pub mod admin;
mod approvals;
pub mod auth;
mod challenge;
#[cfg(feature = "oauth")]
mod client_grant;
pub mod config;
pub mod data_dir;
pub mod gateway;
pub mod hooks;
#[cfg(feature = "oauth")]
pub mod login;
mod metrics;
#[cfg(feature = "oauth")]
mod oauth;
#[cfg(not(feature = "oauth"))]
#[path = "oauth_off.rs"]
mod oauth;
mod principal;
mod progress;
mod relay;
pub mod run_store;
mod stdio_guard;
mod tasks;
#[cfg(feature = "oauth")]
mod token_store;
pub mod upstream;
mod upstream_error;
mod upstream_http;
#[cfg(feature = "oauth")]
mod upstream_oauth;
mod upstream_stdio;
pub mod upstreams;

pub use config::{
    ApprovalMode, AuthConfig, BearerToken, ConfigProblems, GatewayConfig, HookConfig, HookTarget,
    McpServerConfig, OAuthResource, ResultForm, Secret, Transport, UpstreamOAuth, parse_config,
};
pub use gateway::{Gateway, GatewayError, GatewayOptions, GatewaySession};
pub use upstreams::Upstreams;

/// Installs rustls' ring provider for the process (https upstreams, hook
/// URLs, `codemode approvals`); a second call is harmless.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
