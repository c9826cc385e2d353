//! `codemode exec`: one cell against a tools file or the configured servers.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use codemode_mcp::{GatewayConfig, Upstreams, parse_config};
use codemode_runtime::{
    Catalog, CodeModeResult, CodeModeRuntime, RunContext, ToolDefinition, ToolSource,
};

use crate::tools_file::ToolsFile;
use crate::{LanguageArg, environment, print_diagnostics, report_down, tokio_runtime, tools_file};

/// `codemode exec`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    /// JSON5 config file holding `tools.codeMode`.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// JSON5 file `{ tools: [...] }` of scripted tools the cell can call.
    #[arg(long)]
    pub(crate) tools: Option<PathBuf>,
    /// Remove a tool (by name or id) by policy; repeatable.
    #[arg(long, value_name = "NAME")]
    pub(crate) deny: Vec<String>,
    /// Cell language.
    #[arg(long, value_enum, default_value = "javascript")]
    pub(crate) language: LanguageArg,
    /// Keep calling `wait` while the result is `waiting`, printing each result.
    #[arg(long)]
    pub(crate) follow: bool,
    /// With --follow: approve every call that awaits approval (without
    /// it, following stops at a run waiting for approval).
    #[arg(long, requires = "follow")]
    pub(crate) approve: bool,
    /// The cell source file, or `-` (the default) for stdin.
    pub(crate) file: Option<PathBuf>,
}

pub(crate) fn load_tools(path: Option<&Path>) -> Result<ToolsFile> {
    let Some(path) = path else {
        return Ok(ToolsFile::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading tools file {}", path.display()))?;
    ToolsFile::parse(&text).map_err(|e| anyhow::anyhow!("tools file {}: {e}", path.display()))
}

pub(crate) fn exec(args: ExecArgs) -> Result<ExitCode> {
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
    let policy = config.tool_policy(&codemode_runtime::ToolPolicy {
        deny,
        ..Default::default()
    });
    let code = read_cell(file.as_deref())?;
    let language = match language {
        LanguageArg::Javascript => "javascript",
        LanguageArg::Typescript => "typescript",
    };
    let tokio = tokio_runtime()?;
    tokio.block_on(async move {
        // The configured MCP servers join the scripted tools.
        let upstreams = Upstreams::start(config.servers, policy.clone());
        upstreams.started().await;
        let _ = report_down(&upstreams);
        let catalog = catalog_with_mcp(&tools, &upstreams, &policy)?;
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
            .exec_call(
                "cli_exec",
                &serde_json::json!({ "code": code, "language": language }),
                codemode_runtime::CallOptions::default(),
            )
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
                    crate::logs::say(tracing::Level::WARN, "the run waits for approval of a call; nothing here approves it (pass --approve to approve every call)");
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

/// The scripted tools and the configured servers' tools in one catalog.
fn catalog_with_mcp(
    tools: &ToolsFile,
    upstreams: &Upstreams,
    policy: &codemode_runtime::ToolPolicy,
) -> Result<Catalog> {
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
                    .with_annotations(tool.entry.annotations.clone()),
            );
        }
    }
    Catalog::build_with_mcp_servers(definitions, policy, &mcp_servers)
        .map_err(|e| anyhow::anyhow!("tools file: {e}"))
}

/// The cell: from `file`, or stdin for none or `-`.
fn read_cell(file: Option<&Path>) -> Result<String> {
    match file {
        None => read_stdin(),
        Some(p) if p.as_os_str() == "-" => read_stdin(),
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading cell {}", p.display()))
        }
    }
}

pub(crate) fn read_stdin() -> Result<String> {
    let mut code = String::new();
    std::io::stdin()
        .read_to_string(&mut code)
        .context("reading the cell from stdin")?;
    Ok(code)
}

pub(crate) fn print_result(result: &CodeModeResult) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, result)?;
    stdout.write_all(b"\n")?;
    stdout.flush()?;
    Ok(())
}
