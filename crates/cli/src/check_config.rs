//! `codemode check-config`: every problem of a config file, then (unless
//! `--offline`) what its approval settings do to the tools the configured
//! servers really offer.

use crate::Exit;
use std::path::PathBuf;

use anyhow::{Context, Result};
use codemode_mcp::config::parse_config_for_agent;
use codemode_mcp::{GatewayConfig, Upstreams};
use codemode_runtime::{ApprovalMode, ApprovalReason, CatalogEntry};

use crate::{environment, report_down, tokio_runtime};

pub(crate) fn check_config(path: &PathBuf, offline: bool, agent: Option<&str>) -> Result<Exit> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    let config = match parse_config_for_agent(&text, &environment, agent) {
        Ok((config, diagnostics)) => {
            for d in &diagnostics {
                println!("{}: {d}", path.display());
            }
            let as_agent = agent
                .map(|id| format!(", as agent {}", serde_json::Value::String(id.to_owned())))
                .unwrap_or_default();
            println!(
                "{}: ok ({} MCP server{}{as_agent})",
                path.display(),
                config.servers.len(),
                if config.servers.len() == 1 { "" } else { "s" }
            );
            if config.code_mode_given && !config.code_mode.enabled {
                println!(
                    "{}: note: code mode is off{as_agent} (tools.codeMode without enabled: true); `serve` refuses such a config (`exec` runs cells whatever it says)",
                    path.display()
                );
            }
            if let Some(why) = crate::serve::no_tools(&config, &Default::default()) {
                println!(
                    "{}: note: no tools for code mode: {why}; `serve` refuses such a config (`exec` still runs cells, with --tools)",
                    path.display()
                );
            }
            config
        }
        Err(problems) => {
            for e in &problems.errors {
                println!("{}: {e}", path.display());
            }
            return Ok(Exit::from(1));
        }
    };
    if offline || config.servers.is_empty() {
        return Ok(Exit::SUCCESS);
    }
    let configured = config.approvals;
    let (entries, down) = served_tools(config)?;
    let gated = GatedCounts::of(configured, &entries);
    println!("{}: {}", path.display(), gated.describe());
    // A server that did not start offered no tools to count: the check
    // is incomplete, so it does not pass.
    Ok(if down == 0 {
        Exit::SUCCESS
    } else {
        Exit::from(1)
    })
}

/// Starts the configured servers, and returns each MCP tool they offer
/// and how many servers are down.
fn served_tools(config: GatewayConfig) -> Result<(Vec<CatalogEntry>, usize)> {
    tokio_runtime()?.block_on(async move {
        let policy = config.tool_policy(&Default::default());
        let upstreams = Upstreams::start(config.servers, policy);
        upstreams.started().await;
        let down = report_down(&upstreams);
        let entries = upstreams
            .catalog()
            .mcp()
            .servers()
            .iter()
            .flat_map(|server| server.tools.iter().map(|t| (*t.entry).clone()))
            .collect();
        upstreams.shutdown();
        Ok((entries, down))
    })
}

/// How many tools each approval mode would put to a human.
#[derive(Debug, PartialEq, Eq)]
struct GatedCounts {
    configured: ApprovalMode,
    tools: usize,
    unannotated: usize,
    /// Per mode of [`ApprovalMode::ALL`], in its order.
    gated: [usize; 4],
}

impl GatedCounts {
    fn of(configured: ApprovalMode, entries: &[CatalogEntry]) -> GatedCounts {
        let mut counts = GatedCounts {
            configured,
            tools: entries.len(),
            unannotated: 0,
            gated: [0; 4],
        };
        for entry in entries {
            let annotated = ["readOnlyHint", "destructiveHint"]
                .iter()
                .any(|hint| entry.annotations.get(hint).is_some_and(|v| v.is_boolean()));
            if !annotated {
                counts.unannotated += 1;
            }
            // A declaration or an approveTools glob asks whatever the mode.
            let listed = matches!(
                entry.gate.approval,
                Some(ApprovalReason::Declared | ApprovalReason::Listed(_))
            );
            for (i, mode) in ApprovalMode::ALL.iter().enumerate() {
                if listed || mode.asks_for(&entry.annotations) {
                    counts.gated[i] += 1;
                }
            }
        }
        counts
    }

    fn describe(&self) -> String {
        let per_mode: Vec<String> = ApprovalMode::ALL
            .iter()
            .zip(self.gated)
            .map(|(mode, n)| {
                let mark = if *mode == self.configured {
                    " (configured)"
                } else {
                    ""
                };
                format!("{} {n}{mark}", mode.as_str())
            })
            .collect();
        format!(
            "approvals: of {} MCP tools ({} without readOnlyHint/destructiveHint, which count as possibly destructive), each approvals.mode would ask before calls of: {}",
            self.tools,
            self.unannotated,
            per_mode.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_runtime::{GatePolicy, ToolSource};
    use serde_json::{Value, json};

    fn entry(annotations: Value, gate: Option<ApprovalReason>) -> CatalogEntry {
        CatalogEntry {
            id: "mcp:s:t".into(),
            name: "t".into(),
            label: None,
            description: String::new(),
            source: ToolSource::Mcp,
            source_name: "s".into(),
            parameters: Value::Null,
            gate: GatePolicy { approval: gate },
            annotations,
            output_schema: Value::Null,
        }
    }

    #[test]
    fn counts_follow_the_spec_defaults_and_the_approval_list() {
        let entries = [
            entry(Value::Null, None),
            entry(json!({"readOnlyHint": true}), None),
            entry(json!({"destructiveHint": false}), None),
            entry(
                json!({"readOnlyHint": true}),
                Some(ApprovalReason::Listed("x*".into())),
            ),
        ];
        let counts = GatedCounts::of(ApprovalMode::Destructive, &entries);
        assert_eq!(counts.tools, 4);
        assert_eq!(counts.unannotated, 1);
        // never: the listed one; destructive: + the unannotated; writes: +
        // the non-destructive write; always: all.
        assert_eq!(counts.gated, [1, 2, 3, 4]);
        let text = counts.describe();
        assert!(text.contains("destructive 2 (configured)"), "{text}");
        assert!(
            text.contains("1 without readOnlyHint/destructiveHint"),
            "{text}"
        );
    }
}
