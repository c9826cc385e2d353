//! The `codemode` binary.
//!
//! - `codemode exec [--config FILE] [--tools FILE] [--deny NAME]... [--language javascript|typescript] [--follow] [FILE|-]`
//!   runs one cell against the scripted tools of a tools file (see
//!   [`tools_file`]) and prints one `CodeModeResult` JSON object on stdout
//!   (with `--follow`, keeps calling `wait` while the result is `waiting` and
//!   prints every result as one JSON line). Exit status: 0 completed or
//!   waiting, 1 failed, 2 bad usage.
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
use codemode_runtime::{
    Catalog, CodeModeConfig, CodeModeResult, CodeModeRuntime, Diagnostic, RunContext, ToolPolicy,
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
        /// The cell source file, or `-` (the default) for stdin.
        file: Option<PathBuf>,
    },
    /// Check a config file and report every problem with its path.
    CheckConfig {
        /// The JSON5 config file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let filter = std::env::var("CODEMODE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .init();
    let cli = match Cli::try_parse() {
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
            file,
        } => exec(ExecArgs {
            config,
            tools,
            deny,
            language,
            follow,
            file,
        }),
        Command::CheckConfig { file } => check_config(&file),
    }
}

fn load_config(path: Option<&PathBuf>) -> Result<(CodeModeConfig, Vec<Diagnostic>)> {
    let Some(path) = path else {
        return Ok((CodeModeConfig::default(), Vec::new()));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    CodeModeConfig::from_json5(&text).with_context(|| format!("config {}", path.display()))
}

fn check_config(path: &PathBuf) -> Result<ExitCode> {
    match load_config(Some(path)) {
        Ok((_, diagnostics)) => {
            for d in &diagnostics {
                println!("{}: {d}", path.display());
            }
            if diagnostics.is_empty() {
                println!("{}: ok", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("{e:#}");
            Ok(ExitCode::from(1))
        }
    }
}

struct ExecArgs {
    config: Option<PathBuf>,
    tools: Option<PathBuf>,
    deny: Vec<String>,
    language: LanguageArg,
    follow: bool,
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
        file,
    } = args;
    let (config, diagnostics) = load_config(config.as_ref())?;
    for d in &diagnostics {
        eprintln!("codemode: config: {d}");
    }
    let tools = load_tools(tools.as_deref())?;
    let policy = ToolPolicy { allow: None, deny };
    let catalog = Catalog::build(tools.definitions(), &policy)
        .map_err(|e| anyhow::anyhow!("tools file: {e}"))?;
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
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    tokio.block_on(async move {
        let runtime = match CodeModeRuntime::new(config) {
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
        let session = runtime.session(context, catalog, tools.executor());
        let mut result = session
            .exec_call(
                "cli_exec",
                &serde_json::json!({ "code": code, "language": language }),
            )
            .await;
        print_result(&result)?;
        while follow && let CodeModeResult::Waiting { run_id, .. } = &result {
            result = session.wait(&serde_json::json!({ "runId": run_id })).await;
            print_result(&result)?;
        }
        Ok(match result {
            CodeModeResult::Failed { .. } => ExitCode::from(1),
            _ => ExitCode::SUCCESS,
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
