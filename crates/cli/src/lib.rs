//! The `codemode` command line, as a library: the `codemode` binary, the
//! npm package's `codemode` bin and the pip package's console script all
//! call [`run_main`] with their arguments.
//!
//! - `codemode exec [--config FILE [--agent ID]] [--tools FILE] [--deny NAME]... [--store STORE] [--language javascript|typescript] [--follow [--approve]] [FILE|-]`
//!   runs one cell in the gateway's session without the transport (the
//!   configured servers, hooks, result handles and run store of `serve`,
//!   plus the scripted tools of a tools file, see [`tools_file`]) and
//!   prints one `CodeModeResult` JSON object on stdout (with `--follow`,
//!   keeps calling `wait` while the result is `waiting` and prints every
//!   result as one JSON line). Exit status: 0 completed or waiting, 1
//!   failed, 2 bad usage.
//! - `codemode wait RUN_ID [same options]` resumes a run an earlier
//!   `codemode exec` (or `wait`) left waiting in the durable run store.
//! - `codemode serve --config FILE [--agent ID] [--http ADDR]` is the code-mode MCP
//!   gateway: MCP clients see exactly `exec` and `wait`; the config's
//!   `mcpServers` sit behind the guest's `MCP` namespace. stdio by default,
//!   streamable HTTP at `http://ADDR/mcp` with `--http`.
//!   With `--admin-listen ADDR` (and `CODEMODE_ADMIN_TOKEN` set), it also
//!   serves the operator endpoint for approvals on a separate address.
//! - `codemode approvals list|approve|deny --admin URL` drives that
//!   endpoint (the token from `CODEMODE_ADMIN_TOKEN`).
//! - `codemode login SERVER --config FILE [--no-browser]` authorizes the
//!   gateway to reach an OAuth-protected upstream (authorization code with
//!   PKCE) and stores the token; `codemode logout` removes it.
//! - `codemode catalog --config FILE` connects to the configured servers and
//!   prints the hidden catalog (one JSON line per tool).
//! - `codemode check-config FILE` reports every problem of a config file.
//!
//! Logs go to stderr (`RUST_LOG` / `CODEMODE_LOG` filter them); stdout holds
//! only results.

mod approvals;
mod catalog;
mod check_config;
mod exec;
mod login;
mod logs;
mod serve;
pub mod tools_file;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use codemode_mcp::config::parse_config_for_agent;
use codemode_mcp::{GatewayConfig, GatewayOptions, Upstreams};
use codemode_runtime::{Diagnostic, ToolPolicy};

use crate::approvals::approvals;
use crate::catalog::catalog;
use crate::check_config::check_config;
use crate::exec::{ExecArgs, WaitArgs, exec, wait};
use crate::login::{login, logout};
use crate::logs::init_logs_and_traces;
use crate::serve::{Listeners, serve};

#[derive(Parser)]
#[command(
    name = "codemode",
    version,
    about = "Code mode for AI agents: run model-written JavaScript against hidden tools in a QuickJS/WebAssembly sandbox."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr as text (the default) or as JSON objects (one
    /// per line, with the event's fields: session, call, server, ...).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum LanguageArg {
    Javascript,
    Typescript,
}

#[derive(Subcommand)]
enum Command {
    /// Run one cell and print its result as JSON.
    Exec(ExecArgs),
    /// Resume a run a `codemode exec` left waiting and print its result.
    Wait(WaitArgs),
    /// Serve the code-mode MCP gateway (stdio by default).
    Serve {
        /// JSON5 config file: `tools.codeMode` and `mcpServers`.
        #[arg(long)]
        config: PathBuf,
        /// Serve as this agent of `agents.list`: its `tools.codeMode`
        /// merged over the global one.
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
        /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8080).
        #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
        http: Option<std::net::SocketAddr>,
        /// A host name HTTP clients may use besides loopback; repeatable.
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// A browser origin (e.g. https://app.example.com) allowed besides
        /// loopback ones; repeatable. Other Origin headers are refused.
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        allow_origins: Vec<String>,
        /// Remove an upstream tool (by name or id) by policy; repeatable.
        #[arg(long, value_name = "NAME")]
        deny: Vec<String>,
        /// HTTP: MCP sessions open at once (default 1024); past it a new
        /// client gets an error naming the limit.
        #[arg(long, value_name = "N")]
        max_http_sessions: Option<usize>,
        /// HTTP: close a session idle this many seconds (default: the
        /// runs' snapshotTtlSeconds plus 60, at least 360).
        #[arg(long, value_name = "SECONDS")]
        http_idle_secs: Option<u64>,
        /// Serve the operator endpoint for approvals at http://ADDR/approvals
        /// (bearer token from CODEMODE_ADMIN_TOKEN, at least 16 bytes);
        /// calls the client cannot be asked about then wait for it.
        #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
        admin_listen: Option<std::net::SocketAddr>,
        /// Also serve /metrics (OpenMetrics text, which Prometheus scrapes;
        /// no authentication) at http://ADDR/metrics.
        #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
        metrics: Option<std::net::SocketAddr>,
        /// Serve HTTP on a non-loopback address without `auth` (only when
        /// something in front of the gateway authenticates).
        #[arg(long)]
        insecure_no_auth: bool,
        /// Where waiting runs are kept: `memory`, `file:PATH`, or
        /// `redis://HOST:PORT/DB` (shared by replicas); over the config's
        /// `store`. Default: runs.db in the data directory.
        #[arg(long, value_name = "STORE", value_parser = codemode_mcp::config::StoreSetting::parse)]
        store: Option<codemode_mcp::config::StoreSetting>,
    },
    /// List, approve or deny calls awaiting approval at a gateway's
    /// operator endpoint (token from CODEMODE_ADMIN_TOKEN).
    Approvals {
        #[command(subcommand)]
        action: ApprovalsAction,
        /// The operator endpoint, e.g. http://127.0.0.1:9090
        #[arg(long, global = true, value_name = "URL")]
        admin: Option<String>,
    },
    /// Authorize the gateway to reach an OAuth-protected MCP server
    /// (`oauth: { authorizationCode: {...} }`): opens the authorization URL
    /// in a browser (or prints it), waits for the redirect on loopback and
    /// stores the token in the data directory.
    Login {
        /// The server's name in `mcpServers`.
        server: String,
        /// JSON5 config file holding the server.
        #[arg(long)]
        config: PathBuf,
        /// Only print the authorization URL; do not start a browser.
        #[arg(long)]
        no_browser: bool,
        /// Give up when no redirect came back within this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
    },
    /// Remove the token `codemode login` stored for a server.
    Logout {
        /// The server's name in `mcpServers`.
        server: String,
        /// JSON5 config file holding the server.
        #[arg(long)]
        config: PathBuf,
    },
    /// Connect to the configured MCP servers and print the hidden catalog.
    Catalog {
        /// JSON5 config file: `tools.codeMode` and `mcpServers`.
        #[arg(long)]
        config: PathBuf,
    },
    /// Check a config file and report every problem with its path; then
    /// start its servers and say how many of their tools each approval
    /// mode would gate (exit 1 when a server does not start).
    CheckConfig {
        /// The JSON5 config file.
        file: PathBuf,
        /// Check the file only; start no server.
        #[arg(long)]
        offline: bool,
        /// Check it as this agent of `agents.list` sees it.
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
    },
}

#[derive(Subcommand)]
enum ApprovalsAction {
    /// Print the calls awaiting approval (JSON).
    List,
    /// Approve one call: it starts now.
    Approve {
        /// The waiting run's id.
        run_id: String,
        /// The call's id (as listed).
        call_id: String,
    },
    /// Deny one call: the guest sees approval_denied.
    Deny {
        /// The waiting run's id.
        run_id: String,
        /// The call's id (as listed).
        call_id: String,
        /// Why, shown to the model.
        #[arg(long)]
        reason: Option<String>,
    },
}

/// A process exit status: 0 success, 1 a failed result or check, 2 bad
/// usage. (`std::process::ExitCode` cannot be read back, and the Node and
/// Python hosts hand the number to their own `exit`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub u8);

impl Exit {
    /// Exit status 0.
    pub const SUCCESS: Exit = Exit(0);
}

impl From<u8> for Exit {
    fn from(code: u8) -> Exit {
        Exit(code)
    }
}

/// Runs the command line `args` (the program name first, as
/// `std::env::args_os` gives it) to the end and returns its exit status.
/// Logs go to stderr; call it once per process (it installs the global
/// log subscriber).
pub fn run_main<I, T>(args: I) -> Exit
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut filter = std::env::var("CODEMODE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    // OPENCLAW_DEBUG_* / CODEMODE_DEBUG_* ask for their logs whatever the
    // filter says.
    if codemode_runtime::debug::DebugSwitches::current().any() {
        filter.push_str(",codemode::debug=info");
    }
    let cli = Cli::try_parse_from(args);
    let json_logs = cli.as_ref().is_ok_and(|c| c.log_format == LogFormat::Json);
    let traces = init_logs_and_traces(&filter, json_logs);
    let code = run_cli(cli);
    if let Some(provider) = traces {
        // Spans still in the batch go out before the process ends (an
        // export that fails says so itself; see logs::ReportingExporter).
        if let Err(e) = provider.shutdown() {
            tracing::warn!(target: "codemode", "OpenTelemetry shutdown: {e}");
        }
    }
    code
}

fn run_cli(cli: std::result::Result<Cli, clap::Error>) -> Exit {
    let cli = match cli {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Exit::SUCCESS
                }
                _ => Exit::from(2),
            };
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            crate::logs::say(tracing::Level::ERROR, &format!("{e:#}"));
            Exit::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Exec(args) => exec(args),
        Command::Wait(args) => wait(args),
        Command::Serve {
            config,
            agent,
            http,
            allow_hosts,
            allow_origins,
            deny,
            max_http_sessions,
            http_idle_secs,
            admin_listen,
            metrics,
            insecure_no_auth,
            store,
        } => serve(
            &config,
            agent.as_deref(),
            Listeners {
                http,
                admin: admin_listen,
                metrics,
            },
            GatewayOptions {
                policy: ToolPolicy {
                    deny,
                    ..ToolPolicy::default()
                },
                allowed_hosts: allow_hosts,
                allowed_origins: allow_origins,
                max_http_sessions: max_http_sessions.unwrap_or(0),
                http_session_idle: http_idle_secs.map(std::time::Duration::from_secs),
                operator_approvals: admin_listen.is_some(),
                insecure_no_auth,
                store,
            },
        ),
        Command::Approvals { action, admin } => approvals(action, admin),
        Command::Login {
            server,
            config,
            no_browser,
            timeout,
        } => login(&server, &config, no_browser, timeout),
        Command::Logout { server, config } => logout(&server, &config),
        Command::Catalog { config } => catalog(&config),
        Command::CheckConfig {
            file,
            offline,
            agent,
        } => check_config(&file, offline, agent.as_deref()),
    }
}

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn load_config(
    path: Option<&PathBuf>,
    agent: Option<&str>,
) -> Result<(GatewayConfig, Vec<Diagnostic>)> {
    let Some(path) = path else {
        return Ok((GatewayConfig::default(), Vec::new()));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    parse_config_for_agent(&text, &environment, agent).map_err(|problems| {
        anyhow::anyhow!(
            "config {}:\n{}",
            path.display(),
            problems
                .errors
                .iter()
                .map(|e| format!("  {e}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The runtime of a gateway serving one client over stdio: one async
/// worker. That client's messages and its upstreams' replies are one
/// stream of short tasks; a second worker only adds cross-thread wakes
/// (measured: 4.3 context switches per nested call with two workers, 1.25
/// with one; BENCHMARKS.md). Cells still run in parallel: every exec's
/// first stretch, and a later burst past 2 ms, leave the worker
/// (`block_in_place` hands it on to another thread).
/// `TOKIO_WORKER_THREADS`, when set, wins.
fn tokio_runtime_for_one_client() -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn print_diagnostics(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        crate::logs::say(tracing::Level::WARN, &format!("config: {d}"));
    }
}

/// The operator endpoint's token, from the environment.
const ADMIN_TOKEN_VAR: &str = "CODEMODE_ADMIN_TOKEN";

fn admin_token() -> Result<String> {
    std::env::var(ADMIN_TOKEN_VAR).map_err(|_| {
        anyhow::anyhow!(
            "{ADMIN_TOKEN_VAR} is not set: the operator endpoint needs a bearer token (at least 16 bytes) in it"
        )
    })
}

/// Servers that could not start: said on stderr, the rest still works.
fn report_down(upstreams: &Upstreams) -> usize {
    let mut down = 0;
    for server in upstreams.servers() {
        if let Some(reason) = server.down_reason() {
            crate::logs::say(tracing::Level::WARN, &reason);
            down += 1;
        }
    }
    down
}

/// An address to listen on: `IP:PORT`, or `localhost:PORT` (loopback).
fn listen_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    match text.strip_prefix("localhost:").map(str::parse::<u16>) {
        Some(Ok(port)) => Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        _ => Err(
            "expected IP:PORT such as 127.0.0.1:8080 or [::1]:8080, or localhost:PORT; other host names are not looked up (bind an IP, and let clients use a name with --allow-host NAME)"
                .to_owned(),
        ),
    }
}
