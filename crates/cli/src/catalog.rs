//! `codemode catalog`: the hidden catalog of the configured servers.

use crate::Exit;
use std::path::PathBuf;

use anyhow::Result;
use codemode_mcp::Upstreams;

use crate::{load_config, print_diagnostics, report_down, tokio_runtime};

pub(crate) fn catalog(config: &PathBuf) -> Result<Exit> {
    let (config, diagnostics) = load_config(Some(config), None)?;
    print_diagnostics(&diagnostics);
    let tokio = tokio_runtime()?;
    tokio.block_on(async move {
        let policy = config.tool_policy(&Default::default());
        let upstreams = Upstreams::start(config.servers, policy);
        upstreams.started().await;
        let catalog = upstreams.catalog();
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let down = report_down(&upstreams);
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
        // A server that is down is not a catalog: say so in the exit code
        // too (its reason is on stderr, the others' tools on stdout).
        Ok(if down == 0 {
            Exit::SUCCESS
        } else {
            Exit::from(1)
        })
    })
}
