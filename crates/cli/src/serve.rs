//! `codemode serve`: the gateway over stdio or HTTP, with its side listeners.

use crate::Exit;
use std::path::PathBuf;

use anyhow::Result;
use codemode_mcp::{Gateway, GatewayConfig, GatewayOptions};
use codemode_runtime::ToolPolicy;

use crate::{
    admin_token, load_config, print_diagnostics, tokio_runtime, tokio_runtime_for_one_client,
};

/// Where `serve` listens besides stdio.
pub(crate) struct Listeners {
    pub(crate) http: Option<std::net::SocketAddr>,
    pub(crate) admin: Option<std::net::SocketAddr>,
    pub(crate) metrics: Option<std::net::SocketAddr>,
}

pub(crate) fn serve(
    config: &PathBuf,
    agent: Option<&str>,
    listeners: Listeners,
    options: GatewayOptions,
) -> Result<Exit> {
    let (config, diagnostics) = load_config(Some(config), agent)?;
    print_diagnostics(&diagnostics);
    if config.code_mode_given && !config.code_mode.enabled {
        match &config.agent {
            None => return Err(codemode_mcp::GatewayError::Disabled.into()),
            Some(agent) => anyhow::bail!(
                "code mode is disabled for agent {} (its agents.list[].tools.codeMode merged over tools.codeMode); the gateway serves only code mode: set enabled: true in that agent's block or in tools.codeMode, or serve another agent",
                serde_json::Value::String(agent.clone())
            ),
        }
    }
    // The reference's activation: a run with no tools gets no code-mode
    // surface. A gateway whose config gives it none has nothing to serve.
    if let Some(why) = no_tools(&config, &options.policy) {
        anyhow::bail!(
            "this config gives code mode no tools: {why}. A run without tools gets no code-mode surface (no exec, no wait), so there is nothing to serve; add a server to mcpServers or let its tools through"
        );
    }
    let Listeners {
        http,
        admin,
        metrics,
    } = listeners;
    let admin = match admin {
        Some(addr) => Some((addr, admin_token()?)),
        None => None,
    };
    let tokio = match http {
        None => tokio_runtime_for_one_client()?,
        Some(_) => tokio_runtime()?,
    };
    let served = tokio.block_on(async move {
        let gateway = Gateway::start(config, options)?;
        if let Some(addr) = metrics {
            let g = gateway.clone();
            side_listener("metrics endpoint", move |bound| async move {
                g.serve_metrics(addr, |at| {
                    crate::logs::say(
                        tracing::Level::INFO,
                        &format!("metrics at http://{at}/metrics"),
                    );
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
                    crate::logs::say(
                        tracing::Level::INFO,
                        &format!("operator endpoint at http://{at}/approvals"),
                    );
                    let _ = bound.send(());
                })
                .await
            })
            .await?;
        }
        let watcher = gateway.clone();
        tokio::spawn(async move {
            watcher.wait_ready().await;
            if watcher.upstreams().catalog().is_empty() {
                tracing::warn!(
                    "no upstream tool yet: every configured server is down or offers no tool the policy lets through; cells can call nothing until one does"
                );
            }
        });
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
                        crate::logs::say(
                            tracing::Level::INFO,
                            &format!("serving MCP at http://{bound}/mcp"),
                        );
                    })
                    .await?
            }
        }
        Ok(Exit::SUCCESS)
    });
    // A stdio read cannot be cancelled: do not wait for it (nor for any
    // other task) once serving has stopped. Dropped tasks kill upstream
    // process groups on the way out.
    tokio.shutdown_timeout(std::time::Duration::from_millis(500));
    served
}

/// Why `config` (with `extra` from the command line) can give code mode
/// no tool at all, whatever its servers offer: no enabled server, an
/// empty allow list, or a deny-everything pattern, for all servers or
/// for each. `None`: it may have tools.
pub(crate) fn no_tools(config: &GatewayConfig, extra: &ToolPolicy) -> Option<String> {
    let policy = config.tool_policy(extra);
    let shut = |allow: &Option<Vec<String>>, deny: &[String]| {
        allow.as_ref().is_some_and(Vec::is_empty) || deny.iter().any(|g| g == "*")
    };
    if config.servers.is_empty() {
        return Some(
            "no MCP server is configured (mcpServers is empty, or every server is disabled)".into(),
        );
    }
    if shut(&policy.allow, &policy.deny) {
        return Some("the tool policy lets no tool through (tools.allow is empty, or tools.deny / --deny holds \"*\")".into());
    }
    if config
        .servers
        .iter()
        .all(|s| shut(&s.tools.allow, &s.tools.deny))
    {
        return Some("every server's allowTools is empty or its denyTools holds \"*\"".into());
    }
    None
}

/// Starts a listener beside the MCP one (metrics, operator endpoint) and
/// waits until it is bound; one that fails before binding stops `serve`
/// with its reason.
pub(crate) async fn side_listener<Fut>(
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
pub(crate) async fn shutdown_signal() {
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
