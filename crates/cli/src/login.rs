//! `codemode login` / `codemode logout`: OAuth for an upstream server.

use crate::Exit;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::{load_config, print_diagnostics, tokio_runtime};

/// The server `name` of the config at `path`.
pub(crate) fn configured_server(
    name: &str,
    path: &PathBuf,
) -> Result<codemode_mcp::McpServerConfig> {
    let (config, diagnostics) = load_config(Some(path), None)?;
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

pub(crate) fn login(name: &str, path: &PathBuf, no_browser: bool, timeout: u64) -> Result<Exit> {
    let server = configured_server(name, path)?;
    let data_dir = codemode_mcp::data_dir::data_dir().map_err(anyhow::Error::msg)?;
    let tokio = tokio_runtime()?;
    let logged_in = match tokio.block_on(codemode_mcp::login::login(
        &server,
        data_dir,
        std::time::Duration::from_secs(timeout),
        |url| {
            crate::logs::say(
                tracing::Level::INFO,
                &format!("open this URL to authorize `{name}`:\n{url}"),
            );
            if !no_browser {
                open_browser(url);
            }
        },
    )) {
        Ok(logged_in) => logged_in,
        // The flow failed (not the usage): exit status 1.
        Err(e) => {
            crate::logs::say(tracing::Level::ERROR, &e.to_string());
            return Ok(Exit::from(1));
        }
    };
    crate::logs::say(
        tracing::Level::INFO,
        &format!(
            "logged in to `{name}` (client {}); token stored in {}",
            logged_in.client_id,
            logged_in.token_file.display()
        ),
    );
    Ok(Exit::SUCCESS)
}

/// Best effort: the URL is printed anyway.
pub(crate) fn open_browser(url: &str) {
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
        crate::logs::say(
            tracing::Level::WARN,
            &format!("no browser started ({opener} is missing); open the URL yourself"),
        );
    }
}

pub(crate) fn logout(name: &str, path: &PathBuf) -> Result<Exit> {
    let server = configured_server(name, path)?;
    let data_dir = codemode_mcp::data_dir::data_dir().map_err(anyhow::Error::msg)?;
    if codemode_mcp::login::logout(&server, data_dir)? {
        crate::logs::say(
            tracing::Level::INFO,
            &format!("removed the stored token of `{name}`"),
        );
    } else {
        crate::logs::say(
            tracing::Level::INFO,
            &format!("`{name}` had no stored token"),
        );
    }
    Ok(Exit::SUCCESS)
}
