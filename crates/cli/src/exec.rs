//! `codemode exec` and `codemode wait`: one cell, or one waiting run,
//! against the configured servers and a tools file. The session is the
//! gateway's own without the transport ([`Gateway::local_session`]): the
//! same run store, result handles, hooks and debug logs as `serve`.
//! Approvals have no client to ask: calls needing one are refused, or,
//! with `--follow --approve`, approved.

use crate::Exit;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use codemode_mcp::config::{StoreSetting, parse_config_for_agent};
use codemode_mcp::gateway::local::LocalSession;
use codemode_mcp::{Gateway, GatewayConfig, GatewayError, GatewayOptions};
use codemode_runtime::{
    ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver, CodeModeResult, RunContext,
    ToolPolicy,
};

use crate::tools_file::ToolsFile;
use crate::{LanguageArg, environment, print_diagnostics, report_down, tokio_runtime};

/// What `exec` and `wait` share: where the session's tools, settings and
/// waiting runs come from, and how results are followed.
#[derive(clap::Args)]
pub(crate) struct SessionArgs {
    /// JSON5 config file: `tools.codeMode`, `mcpServers` (whose tools join
    /// the catalog), `hooks`, `approvals`, `results`, `store`.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Use this agent's `agents.list[].tools.codeMode` over the global one.
    #[arg(long, value_name = "ID", requires = "config")]
    pub(crate) agent: Option<String>,
    /// JSON5 file `{ tools: [...] }` of scripted tools the cell can call.
    #[arg(long)]
    pub(crate) tools: Option<PathBuf>,
    /// Remove a tool (by name or id) by policy; repeatable.
    #[arg(long, value_name = "NAME")]
    pub(crate) deny: Vec<String>,
    /// Where waiting runs are kept: `memory`, `file:PATH`, or
    /// `redis://HOST:PORT/DB`; over the config's `store`. Default: runs.db
    /// in the data directory, so `codemode wait` can resume them later.
    #[arg(long, value_name = "STORE", value_parser = StoreSetting::parse)]
    pub(crate) store: Option<StoreSetting>,
    /// Keep calling `wait` while the result is `waiting`, printing each result.
    #[arg(long)]
    pub(crate) follow: bool,
    /// With --follow: approve every call that needs approval (without
    /// it, such calls are refused: there is no one to ask).
    #[arg(long, requires = "follow")]
    pub(crate) approve: bool,
}

/// `codemode exec`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    pub(crate) session: SessionArgs,
    /// Cell language.
    #[arg(long, value_enum, default_value = "javascript")]
    pub(crate) language: LanguageArg,
    /// The cell source file, or `-` (the default) for stdin.
    pub(crate) file: Option<PathBuf>,
}

/// `codemode wait`'s arguments.
#[derive(clap::Args)]
pub(crate) struct WaitArgs {
    /// The run to resume: the `runId` of a `waiting` result.
    pub(crate) run_id: String,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
}

/// What the session does first.
enum Work {
    Exec {
        code: String,
        language: &'static str,
    },
    Wait {
        run_id: String,
    },
}

impl Work {
    /// The cell language a refused result reports (a wait's run is not
    /// read yet, so `javascript`, as documented).
    fn language(&self) -> &'static str {
        match self {
            Work::Exec { language, .. } => language,
            Work::Wait { .. } => "javascript",
        }
    }

    fn command(&self) -> &'static str {
        match self {
            Work::Exec { .. } => "codemode exec",
            Work::Wait { .. } => "codemode wait",
        }
    }
}

pub(crate) fn load_tools(path: Option<&Path>) -> Result<ToolsFile> {
    let Some(path) = path else {
        return Ok(ToolsFile::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading tools file {}", path.display()))?;
    ToolsFile::parse(&text).map_err(|e| anyhow::anyhow!("tools file {}: {e}", path.display()))
}

pub(crate) fn exec(args: ExecArgs) -> Result<Exit> {
    let ExecArgs {
        session,
        language,
        file,
    } = args;
    let code = read_cell(file.as_deref())?;
    let language = match language {
        LanguageArg::Javascript => "javascript",
        LanguageArg::Typescript => "typescript",
    };
    run(session, Work::Exec { code, language })
}

pub(crate) fn wait(args: WaitArgs) -> Result<Exit> {
    run(
        args.session,
        Work::Wait {
            run_id: args.run_id,
        },
    )
}

/// The config of `path` for `agent`; a config with problems is the run's
/// result (`invalid_config`), as the contract says (`Err(Ok(exit))`), a
/// file that cannot be read is bad usage (`Err(Err(_))`).
fn load(
    path: Option<&Path>,
    agent: Option<&str>,
    language: &str,
) -> std::result::Result<GatewayConfig, Result<Exit>> {
    let Some(path) = path else {
        return Ok(GatewayConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))
        .map_err(Err)?;
    match parse_config_for_agent(&text, &environment, agent) {
        Ok((config, diagnostics)) => {
            print_diagnostics(&diagnostics);
            Ok(config)
        }
        Err(problems) => {
            let failed = CodeModeResult::failure(
                codemode_runtime::ErrorCode::InvalidConfig,
                format!("config {}: {problems}", path.display()),
                codemode_runtime::Telemetry::refused(language),
            );
            Err(print_result(&failed).map(|()| Exit::from(1)))
        }
    }
}

fn run(args: SessionArgs, work: Work) -> Result<Exit> {
    let SessionArgs {
        config,
        agent,
        tools,
        deny,
        store,
        follow,
        approve,
    } = args;
    let mut config = match load(config.as_deref(), agent.as_deref(), work.language()) {
        Ok(config) => config,
        Err(exit) => return exit,
    };
    // `exec` runs the cell whatever `enabled` says (documented).
    config.code_mode.enabled = true;
    let tools = load_tools(tools.as_deref())?;
    // `--deny` adds to the config's `tools.deny`.
    let extra = ToolPolicy {
        deny,
        ..ToolPolicy::default()
    };
    let policy = config.tool_policy(&extra);
    let default_store = store.is_none() && config.store.is_none();
    let options = GatewayOptions {
        policy: extra,
        store,
        ..GatewayOptions::default()
    };
    let context = RunContext {
        agent_id: Some(config.agent.clone().unwrap_or_else(|| "cli".into())),
        session_id: Some(format!("cli-{}", std::process::id())),
        ..RunContext::default()
    };
    let owner = codemode_mcp::gateway::local::local_owner(config.agent.as_deref());
    let tokio = tokio_runtime()?;
    let ran = tokio.block_on(async move {
        let gateway = match start(config, options, default_store, work.language())? {
            Ok(gateway) => gateway,
            Err(failed) => {
                print_result(&failed)?;
                return Ok(Exit::from(1));
            }
        };
        gateway.wait_ready().await;
        let _ = report_down(gateway.upstreams());
        // Scripted tools join the configured servers' in one catalog.
        let tools = if tools.definitions().is_empty() {
            None
        } else {
            let joined = codemode_mcp::gateway::local::with_upstream_tools(
                gateway.upstreams(),
                tools.definitions(),
                tools.executor(),
                &policy,
            )
            .map_err(|e| anyhow::anyhow!("tools file: {e}"))?;
            Some(joined)
        };
        let approver: Option<Arc<dyn Approver>> = match approve {
            // Calls wait; the loop below approves them.
            true => None,
            false => Some(Arc::new(NoOneToAsk {
                command: work.command(),
            })),
        };
        let session = match gateway.local_session(LocalSession {
            context,
            tools,
            approver,
            owner: Some(owner),
        }) {
            Ok(session) => session,
            Err(refused) => {
                print_result(&refused.to_result())?;
                gateway.shutdown();
                return Ok(Exit::from(1));
            }
        };
        let options = codemode_runtime::CallOptions::default;
        let mut result = match &work {
            Work::Exec { code, language } => {
                let input = serde_json::json!({ "code": code, "language": language });
                session.exec_call("cli_exec", &input, options()).await
            }
            Work::Wait { run_id } => {
                let input = serde_json::json!({ "runId": run_id });
                session.wait_call("cli_wait", &input, options()).await
            }
        };
        print_result(&result)?;
        let mut waits = 0;
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
                    crate::logs::say(
                        tracing::Level::WARN,
                        "the run waits for approval of a call; nothing here approves it (pass --approve to approve every call)",
                    );
                    break;
                }
                for call in pending_tool_calls.iter().filter(|c| c.awaiting_approval) {
                    // A call decided meanwhile is simply gone.
                    let _ = session.approve(run_id, &call.id);
                }
            }
            waits += 1;
            let input = serde_json::json!({ "runId": run_id });
            result = session
                .wait_call(&format!("cli_wait_{waits}"), &input, options())
                .await;
            print_result(&result)?;
        }
        if let CodeModeResult::Waiting { run_id, .. } = &result {
            say_where_it_waits(&gateway, run_id);
        }
        gateway.shutdown();
        drop(session);
        Ok(match result {
            CodeModeResult::Failed { .. } => Exit::from(1),
            _ => Exit::SUCCESS,
        })
    });
    // Calls still running stop with the process (a later `wait` gets
    // them as `interrupted`); do not wait for them.
    tokio.shutdown_timeout(std::time::Duration::from_millis(500));
    ran
}

/// Starts the gateway for one local session. When the default run store
/// cannot be opened, the session keeps its runs in memory (said on
/// stderr) rather than fail. `Ok(Err(result))`: the sandbox could not
/// start (`runtime_unavailable`, in the result shape callers parse).
fn start(
    config: GatewayConfig,
    options: GatewayOptions,
    default_store: bool,
    language: &str,
) -> Result<std::result::Result<Gateway, CodeModeResult>> {
    let started = match Gateway::start(config.clone(), options.clone()) {
        Err(GatewayError::Store(reason)) if default_store => {
            crate::logs::say(
                tracing::Level::WARN,
                &format!(
                    "run store: {reason}; runs are kept in memory, so a run left waiting ends with this process"
                ),
            );
            Gateway::start(
                config,
                GatewayOptions {
                    store: Some(StoreSetting::Memory),
                    ..options
                },
            )
        }
        other => other,
    };
    match started {
        Ok(gateway) => Ok(Ok(gateway)),
        // Fail closed, in the result shape callers already parse.
        Err(GatewayError::Runtime(e)) => Ok(Err(CodeModeResult::failure(
            codemode_runtime::ErrorCode::RuntimeUnavailable,
            e.to_string(),
            codemode_runtime::Telemetry::refused(language),
        ))),
        Err(e) => Err(e.into()),
    }
}

/// A waiting run left in this process's memory: `codemode wait` will not
/// find it.
fn say_where_it_waits(gateway: &Gateway, run_id: &str) {
    if gateway.runtime().durable_store_stats().is_none() {
        crate::logs::say(
            tracing::Level::WARN,
            &format!(
                "run {run_id} waits in this process's memory and ends with it: `codemode wait` cannot resume it (use --follow, or a durable --store)"
            ),
        );
    }
}

/// The approver of a session with no client: a call that needs approval
/// is refused, saying how to let it run (fail closed).
struct NoOneToAsk {
    command: &'static str,
}

impl Approver for NoOneToAsk {
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture {
        let why = request
            .tool
            .gate
            .approval
            .as_ref()
            .map(|reason| format!(" ({})", reason.describe()))
            .unwrap_or_default();
        let reason = format!(
            "approval required: calls of {} need a human's approval{why}, and `{}` has no one to ask; run it with --follow --approve to approve every call, or change approvals.mode / approveTools in the config (needsApproval in a --tools file)",
            request.tool.id, self.command
        );
        Box::pin(std::future::ready(Some(ApprovalDecision::Deny { reason })))
    }
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
