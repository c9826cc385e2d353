//! The `codemode` binary.
//!
//! - `codemode exec [--config FILE] [--tools FILE] [--deny NAME]... [--language javascript|typescript] [--follow] [FILE|-]`
//!   runs one cell against the scripted tools of a tools file (see
//!   [`tools_file`]) and prints one `CodeModeResult` JSON object on stdout
//!   (with `--follow`, keeps calling `wait` while the result is `waiting` and
//!   prints every result as one JSON line). Exit status: 0 completed or
//!   waiting, 1 failed, 2 bad usage.
//! - `codemode serve --config FILE [--http ADDR]` is the code-mode MCP
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

mod tools_file;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use codemode_mcp::{Gateway, GatewayConfig, GatewayOptions, Upstreams, parse_config};
use codemode_runtime::{
    Catalog, CodeModeResult, CodeModeRuntime, Diagnostic, RunContext, ToolDefinition, ToolPolicy,
    ToolSource,
};

use crate::tools_file::ToolsFile;

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
    Exec {
        /// JSON5 config file holding `tools.codeMode`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// JSON5 file `{ tools: [...] }` of scripted tools the cell can call.
        #[arg(long)]
        tools: Option<PathBuf>,
        /// Remove a tool (by name or id) by policy; repeatable.
        #[arg(long, value_name = "NAME")]
        deny: Vec<String>,
        /// Cell language.
        #[arg(long, value_enum, default_value = "javascript")]
        language: LanguageArg,
        /// Keep calling `wait` while the result is `waiting`, printing each result.
        #[arg(long)]
        follow: bool,
        /// With --follow: approve every call that awaits approval (without
        /// it, following stops at a run waiting for approval).
        #[arg(long, requires = "follow")]
        approve: bool,
        /// The cell source file, or `-` (the default) for stdin.
        file: Option<PathBuf>,
    },
    /// Serve the code-mode MCP gateway (stdio by default).
    Serve {
        /// JSON5 config file: `tools.codeMode` and `mcpServers`.
        #[arg(long)]
        config: PathBuf,
        /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8080).
        #[arg(long, value_name = "ADDR")]
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
        #[arg(long, value_name = "ADDR")]
        admin_listen: Option<std::net::SocketAddr>,
        /// Also serve /metrics (Prometheus text, no authentication) at
        /// http://ADDR/metrics for scrapers.
        #[arg(long, value_name = "ADDR")]
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
    /// Check a config file and report every problem with its path.
    CheckConfig {
        /// The JSON5 config file.
        file: PathBuf,
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

fn main() -> ExitCode {
    let mut filter = std::env::var("CODEMODE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    // OPENCLAW_DEBUG_* / CODEMODE_DEBUG_* ask for their logs whatever the
    // filter says.
    if codemode_runtime::debug::DebugSwitches::current().any() {
        filter.push_str(",codemode::debug=info");
    }
    let cli = Cli::try_parse();
    let json_logs = cli.as_ref().is_ok_and(|c| c.log_format == LogFormat::Json);
    let traces = init_logs_and_traces(&filter, json_logs);
    let code = run_cli(cli);
    if let Some(provider) = traces {
        // Spans still in the batch go out before the process ends.
        let _ = provider.shutdown();
    }
    code
}

/// Logs on stderr (text or JSON, filtered by `CODEMODE_LOG`/`RUST_LOG`),
/// and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is
/// set, the `codemode::trace` spans (exec, wait, nested calls) exported
/// over OTLP/HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the
/// default, or `http/json`).
fn init_logs_and_traces(
    filter: &str,
    json: bool,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // Colours only for a terminal: piped logs are read by programs.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt: Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> = if json {
        Box::new(fmt.json().with_current_span(false))
    } else {
        Box::new(fmt)
    };
    let (otel, provider, problem) = match otel_tracer() {
        Ok(Some((tracer, provider))) => (
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(
                        tracing_subscriber::filter::Targets::new()
                            .with_target("codemode::trace", tracing::Level::INFO),
                    ),
            ),
            Some(provider),
            None,
        ),
        Ok(None) => (None, None, None),
        Err(e) => (None, None, Some(e)),
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(tracing_subscriber::EnvFilter::new(filter)))
        .with(otel)
        .init();
    if let Some(e) = problem {
        tracing::warn!(error = %e, "OpenTelemetry export is off: the exporter could not be built");
    }
    provider
}

fn otel_tracer() -> Result<
    Option<(
        opentelemetry_sdk::trace::Tracer,
        opentelemetry_sdk::trace::SdkTracerProvider,
    )>,
> {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    codemode_mcp::install_tls_provider();
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => opentelemetry_otlp::Protocol::HttpJson,
        _ => opentelemetry_otlp::Protocol::HttpBinary,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .context("building the OTLP span exporter")?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("codemode")
                .build(),
        )
        .build();
    // W3C `traceparent` from clients (the gateway reads it per request).
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(Some((provider.tracer("codemode"), provider)))
}

fn run_cli(cli: std::result::Result<Cli, clap::Error>) -> ExitCode {
    let cli = match cli {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("codemode: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Exec {
            config,
            tools,
            deny,
            language,
            follow,
            approve,
            file,
        } => exec(ExecArgs {
            config,
            tools,
            deny,
            language,
            follow,
            approve,
            file,
        }),
        Command::Serve {
            config,
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
            Listeners {
                http,
                admin: admin_listen,
                metrics,
            },
            GatewayOptions {
                policy: ToolPolicy { allow: None, deny },
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
        Command::CheckConfig { file } => check_config(&file),
    }
}

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn load_config(path: Option<&PathBuf>) -> Result<(GatewayConfig, Vec<Diagnostic>)> {
    let Some(path) = path else {
        return Ok((GatewayConfig::default(), Vec::new()));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    parse_config(&text, &environment).map_err(|problems| {
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

fn check_config(path: &PathBuf) -> Result<ExitCode> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    match parse_config(&text, &environment) {
        Ok((config, diagnostics)) => {
            for d in &diagnostics {
                println!("{}: {d}", path.display());
            }
            println!(
                "{}: ok ({} MCP server{})",
                path.display(),
                config.servers.len(),
                if config.servers.len() == 1 { "" } else { "s" }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            for e in &problems.errors {
                println!("{}: {e}", path.display());
            }
            Ok(ExitCode::from(1))
        }
    }
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn print_diagnostics(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        eprintln!("codemode: config: {d}");
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

/// Where `serve` listens besides stdio.
struct Listeners {
    http: Option<std::net::SocketAddr>,
    admin: Option<std::net::SocketAddr>,
    metrics: Option<std::net::SocketAddr>,
}

fn serve(config: &PathBuf, listeners: Listeners, options: GatewayOptions) -> Result<ExitCode> {
    let (config, diagnostics) = load_config(Some(config))?;
    print_diagnostics(&diagnostics);
    let Listeners {
        http,
        admin,
        metrics,
    } = listeners;
    let admin = match admin {
        Some(addr) => Some((addr, admin_token()?)),
        None => None,
    };
    let tokio = tokio_runtime()?;
    let served = tokio.block_on(async move {
        let gateway = Gateway::start(config, options)?;
        if let Some(addr) = metrics {
            let g = gateway.clone();
            side_listener("metrics endpoint", move |bound| async move {
                g.serve_metrics(addr, |at| {
                    eprintln!("codemode: metrics at http://{at}/metrics");
                    let _ = bound.send(());
                })
                .await
            })
            .await?;
        }
        if let Some((addr, token)) = admin {
            let g = gateway.clone();
            side_listener("operator endpoint", move |bound| async move {
                g.serve_admin(addr, token, |at| {
                    eprintln!("codemode: operator endpoint at http://{at}/approvals");
                    let _ = bound.send(());
                })
                .await
            })
            .await?;
        }
        let stopper = gateway.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("signal received; shutting down");
            stopper.shutdown();
        });
        match http {
            None => gateway.serve_stdio().await?,
            Some(addr) => {
                gateway
                    .serve_http(addr, |bound| {
                        // Scripts read this line to learn the port.
                        eprintln!("codemode: serving MCP at http://{bound}/mcp");
                    })
                    .await?
            }
        }
        Ok(ExitCode::SUCCESS)
    });
    // A stdio read cannot be cancelled: do not wait for it (nor for any
    // other task) once serving has stopped. Dropped tasks kill upstream
    // process groups on the way out.
    tokio.shutdown_timeout(std::time::Duration::from_millis(500));
    served
}

/// Starts a listener beside the MCP one (metrics, operator endpoint) and
/// waits until it is bound; one that fails before binding stops `serve`
/// with its reason.
async fn side_listener<Fut>(
    what: &str,
    serve: impl FnOnce(tokio::sync::oneshot::Sender<()>) -> Fut,
) -> Result<()>
where
    Fut: std::future::Future<Output = Result<(), codemode_mcp::GatewayError>> + Send + 'static,
{
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let serving = tokio::spawn(serve(bound_tx));
    if bound_rx.await.is_err() {
        return match serving.await {
            Ok(Err(e)) => Err(anyhow::anyhow!("{what}: {e}")),
            _ => Err(anyhow::anyhow!("{what} did not start")),
        };
    }
    Ok(())
}

/// Ctrl-C or SIGTERM (what process managers send).
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Servers that could not start: said on stderr, the rest still works.
fn report_down(upstreams: &Upstreams) {
    for server in upstreams.servers() {
        if let Some(reason) = server.down_reason() {
            eprintln!("codemode: {reason}");
        }
    }
}

/// The server `name` of the config at `path`.
fn configured_server(name: &str, path: &PathBuf) -> Result<codemode_mcp::McpServerConfig> {
    let (config, diagnostics) = load_config(Some(path))?;
    print_diagnostics(&diagnostics);
    config
        .servers
        .into_iter()
        .find(|s| s.name == name)
        .with_context(|| {
            format!(
                "config {} has no server `{name}` in mcpServers",
                path.display()
            )
        })
}

fn login(name: &str, path: &PathBuf, no_browser: bool, timeout: u64) -> Result<ExitCode> {
    let server = configured_server(name, path)?;
    let data_dir = codemode_mcp::data_dir::data_dir().map_err(anyhow::Error::msg)?;
    let tokio = tokio_runtime()?;
    let logged_in = match tokio.block_on(codemode_mcp::login::login(
        &server,
        data_dir,
        std::time::Duration::from_secs(timeout),
        |url| {
            eprintln!("codemode: open this URL to authorize `{name}`:\n{url}");
            if !no_browser {
                open_browser(url);
            }
        },
    )) {
        Ok(logged_in) => logged_in,
        // The flow failed (not the usage): exit status 1.
        Err(e) => {
            eprintln!("codemode: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    eprintln!(
        "codemode: logged in to `{name}` (client {}); token stored in {}",
        logged_in.client_id,
        logged_in.token_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Best effort: the URL is printed anyway.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let started = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if started.is_err() {
        eprintln!("codemode: no browser started ({opener} is missing); open the URL yourself");
    }
}

fn logout(name: &str, path: &PathBuf) -> Result<ExitCode> {
    let server = configured_server(name, path)?;
    let data_dir = codemode_mcp::data_dir::data_dir().map_err(anyhow::Error::msg)?;
    if codemode_mcp::login::logout(&server, data_dir)? {
        eprintln!("codemode: removed the stored token of `{name}`");
    } else {
        eprintln!("codemode: `{name}` had no stored token");
    }
    Ok(ExitCode::SUCCESS)
}

fn catalog(config: &PathBuf) -> Result<ExitCode> {
    let (config, diagnostics) = load_config(Some(config))?;
    print_diagnostics(&diagnostics);
    let tokio = tokio_runtime()?;
    tokio.block_on(async move {
        let upstreams = Upstreams::start(config.servers, config.policy, config.approvals);
        upstreams.started().await;
        let catalog = upstreams.catalog();
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        report_down(&upstreams);
        for server in catalog.mcp().servers() {
            for tool in &server.tools {
                let line = serde_json::json!({
                    "id": tool.entry.id,
                    "call": format!("MCP.{}.{}", server.js_name, tool.js_name),
                    "description": tool.entry.description,
                });
                writeln!(stdout, "{line}")?;
            }
        }
        upstreams.shutdown();
        Ok(ExitCode::SUCCESS)
    })
}

struct ExecArgs {
    config: Option<PathBuf>,
    tools: Option<PathBuf>,
    deny: Vec<String>,
    language: LanguageArg,
    follow: bool,
    approve: bool,
    file: Option<PathBuf>,
}

fn load_tools(path: Option<&Path>) -> Result<ToolsFile> {
    let Some(path) = path else {
        return Ok(ToolsFile::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading tools file {}", path.display()))?;
    ToolsFile::parse(&text).map_err(|e| anyhow::anyhow!("tools file {}: {e}", path.display()))
}

fn exec(args: ExecArgs) -> Result<ExitCode> {
    let ExecArgs {
        config,
        tools,
        deny,
        language,
        follow,
        approve,
        file,
    } = args;
    // A config that is wrong is the run's result (`invalid_config`), as
    // the contract says; a file that cannot be read is bad usage.
    let (config, diagnostics) = match &config {
        None => (GatewayConfig::default(), Vec::new()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config {}", path.display()))?;
            match parse_config(&text, &environment) {
                Ok(parsed) => parsed,
                Err(problems) => {
                    let failed = CodeModeResult::failure(
                        codemode_runtime::ErrorCode::InvalidConfig,
                        format!("config {}: {problems}", path.display()),
                        codemode_runtime::Telemetry::default(),
                    );
                    println!("{}", serde_json::to_string(&failed)?);
                    return Ok(ExitCode::from(1));
                }
            }
        }
    };
    print_diagnostics(&diagnostics);
    let tools = load_tools(tools.as_deref())?;
    // `--deny` adds to the config's `tools.deny`.
    let mut policy = config.policy.clone();
    policy.deny.extend(deny);
    let code = match file.as_deref() {
        None => read_stdin()?,
        Some(p) if p.as_os_str() == "-" => read_stdin()?,
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading cell {}", p.display()))?
        }
    };
    let language = match language {
        LanguageArg::Javascript => "javascript",
        LanguageArg::Typescript => "typescript",
    };
    let tokio = tokio_runtime()?;
    tokio.block_on(async move {
        // The configured MCP servers join the scripted tools.
        let upstreams = Upstreams::start(config.servers, policy.clone(), config.approvals);
        upstreams.started().await;
        report_down(&upstreams);
        let mut definitions = tools.definitions();
        let mut mcp_servers = Vec::new();
        let mcp_catalog = upstreams.catalog();
        for server in mcp_catalog.mcp().servers() {
            mcp_servers.push(server.info.clone());
            for tool in &server.tools {
                definitions.push(
                    ToolDefinition::new(ToolSource::Mcp, &server.info.name, &tool.entry.name)
                        .with_description(&tool.entry.description)
                        .with_parameters(tool.entry.parameters.clone())
                        .with_approval(tool.entry.needs_approval)
                        .with_annotations(tool.entry.annotations.clone()),
                );
            }
        }
        let catalog = Catalog::build_with_mcp_servers(definitions, &policy, &mcp_servers)
            .map_err(|e| anyhow::anyhow!("tools file: {e}"))?;
        let executor = tools_file::combined(tools.executor(), upstreams.executor());
        let runtime = match CodeModeRuntime::new(config.code_mode) {
            Ok(runtime) => runtime,
            Err(e) => {
                // Fail closed, in the result shape callers already parse.
                let result = CodeModeResult::failure(
                    codemode_runtime::ErrorCode::RuntimeUnavailable,
                    e.to_string(),
                    codemode_runtime::Telemetry::default(),
                );
                print_result(&result)?;
                return Ok(ExitCode::from(1));
            }
        };
        let context = RunContext {
            agent_id: Some("cli".into()),
            session_id: Some(format!("cli-{}", std::process::id())),
            ..RunContext::default()
        };
        let session = runtime.session(context, catalog, executor);
        let mut result = session
            .exec_call("cli_exec", &serde_json::json!({ "code": code, "language": language }), codemode_runtime::CallOptions::default())
            .await;
        print_result(&result)?;
        while follow
            && let CodeModeResult::Waiting {
                run_id,
                reason,
                pending_tool_calls,
                ..
            } = &result
        {
            if *reason == codemode_runtime::WaitReason::Approval {
                if !approve {
                    eprintln!(
                        "codemode: the run waits for approval of a call; nothing here approves it (pass --approve to approve every call)"
                    );
                    break;
                }
                for call in pending_tool_calls.iter().filter(|c| c.awaiting_approval) {
                    // A call decided meanwhile is simply gone.
                    let _ = session.approve(run_id, &call.id);
                }
            }
            result = session.wait(&serde_json::json!({ "runId": run_id })).await;
            print_result(&result)?;
        }
        upstreams.shutdown();
        Ok(match result {
            CodeModeResult::Failed { .. } => ExitCode::from(1),
            _ => ExitCode::SUCCESS,
        })
    })
}

/// `codemode approvals ...`: one request to the operator endpoint; the
/// answer is printed as JSON.
fn approvals(action: ApprovalsAction, admin: Option<String>) -> Result<ExitCode> {
    let admin = admin.ok_or_else(|| {
        anyhow::anyhow!(
            "--admin URL is required (the gateway's operator endpoint, e.g. http://127.0.0.1:9090)"
        )
    })?;
    let token = admin_token()?;
    let base = admin.trim_end_matches('/').to_owned();
    let tokio = tokio_runtime()?;
    codemode_mcp::install_tls_provider();
    tokio.block_on(async move {
        let client = reqwest::Client::new();
        let request = match &action {
            ApprovalsAction::List => client.get(format!("{base}/approvals")),
            ApprovalsAction::Approve { run_id, call_id } => client
                .post(format!("{base}/approvals/approve"))
                .json(&serde_json::json!({ "runId": run_id, "callId": call_id })),
            ApprovalsAction::Deny {
                run_id,
                call_id,
                reason,
            } => client
                .post(format!("{base}/approvals/deny"))
                .json(&serde_json::json!({ "runId": run_id, "callId": call_id, "reason": reason })),
        };
        let response = request
            .bearer_auth(token)
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .with_context(|| format!("reaching the operator endpoint {base}"))?;
        let status = response.status();
        let body = response.text().await.context("reading the answer")?;
        println!("{body}");
        Ok(if status.is_success() {
            ExitCode::SUCCESS
        } else {
            eprintln!("codemode: the operator endpoint answered {status}");
            ExitCode::from(1)
        })
    })
}

fn read_stdin() -> Result<String> {
    let mut code = String::new();
    std::io::stdin()
        .read_to_string(&mut code)
        .context("reading the cell from stdin")?;
    Ok(code)
}

fn print_result(result: &CodeModeResult) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, result)?;
    stdout.write_all(b"\n")?;
    stdout.flush()?;
    Ok(())
}
