//! MCP over stdio: one client on stdin/stdout.

use super::{Gateway, GatewayError};
use crate::stdio_guard;

use rmcp::ServiceExt;
use tracing::info;

impl Gateway {
    /// Serves one MCP client on stdin/stdout until it disconnects.
    ///
    /// # Errors
    /// [`GatewayError::Stdio`] when the handshake fails.
    pub async fn serve_stdio(&self) -> Result<(), GatewayError> {
        let (input, output) = stdio_guard::process_stdio();
        let session = self.session();
        // The client runs as the local user: its runs are the user's (as
        // `codemode exec`'s are), so the next gateway of this user — after
        // a restart, or another window's — resumes them from the store.
        let owner = super::local::local_owner(self.shared.agent.as_deref());
        session.session.bind_owner(
            &owner,
            codemode_runtime::RuntimeOptions::default().max_suspended_runs,
        );
        let input_ended = tokio_util::sync::CancellationToken::new();
        // The handshake waits on the client: a shutdown must end it too.
        let running = tokio::select! {
            r = session.serve(stdio_guard::guard(input, output, input_ended.clone())) => {
                r.map_err(|e| GatewayError::Stdio(e.to_string()))?
            }
            _ = self.shared.shutdown.cancelled() => {
                self.shutdown();
                return Ok(());
            }
        };
        let runtime = self.shared.runtime.clone();
        // The client closed its input: that is how a stdio client ends the
        // server (MCP lifecycle). Cells still running are aborted now (their
        // `aborted` answers still go out while the SDK drains), not left to
        // run for the SDK's 5 s drain.
        tokio::spawn(async move {
            input_ended.cancelled().await;
            info!("stdio client closed its input; aborting running cells");
            runtime.shutdown();
        });
        let reason = tokio::select! {
            r = running.waiting() => format!("{r:?}"),
            _ = self.shared.shutdown.cancelled() => "shutdown".into(),
        };
        info!(%reason, "stdio client disconnected");
        self.shutdown();
        Ok(())
    }
}
