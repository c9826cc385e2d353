//! `codemode approvals`: the operator endpoint from the command line.

use crate::Exit;

use anyhow::{Context, Result};

use crate::{ApprovalsAction, admin_token, tokio_runtime};

/// `codemode approvals ...`: one request to the operator endpoint; the
/// answer is printed as JSON.
pub(crate) fn approvals(action: ApprovalsAction, admin: Option<String>) -> Result<Exit> {
    let admin = admin.ok_or_else(|| {
        anyhow::anyhow!(
            "--admin URL is required (the gateway's operator endpoint, e.g. http://127.0.0.1:9090)"
        )
    })?;
    let token = admin_token()?;
    // The URL `serve` prints ends in /approvals; the base works too.
    let base = admin.trim_end_matches('/');
    let base = base.strip_suffix("/approvals").unwrap_or(base).to_owned();
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
            Exit::SUCCESS
        } else {
            crate::logs::say(
                tracing::Level::ERROR,
                &format!("the operator endpoint answered {status}"),
            );
            Exit::from(1)
        })
    })
}
