//! `codemode check-config`: every problem of a config file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use codemode_mcp::parse_config;

use crate::environment;

pub(crate) fn check_config(path: &PathBuf) -> Result<ExitCode> {
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
