//! MCP over stdio: one client on stdin/stdout.

use super::{Gateway, GatewayError};

use rmcp::ServiceExt;
use tracing::info;

impl Gateway {
    /// Serves one MCP client on stdin/stdout until it disconnects.
    ///
    /// # Errors
    /// [`GatewayError::Stdio`] when the handshake fails.
    pub async fn serve_stdio(&self) -> Result<(), GatewayError> {
        // The handshake waits on the client: a shutdown must end it too.
        let running = tokio::select! {
            r = self.session().serve(crate::stdio_guard::guard(tokio::io::stdin(), tokio::io::stdout())) => {
                r.map_err(|e| GatewayError::Stdio(e.to_string()))?
            }
            _ = self.shared.shutdown.cancelled() => {
                self.shutdown();
                return Ok(());
            }
        };
        let reason = tokio::select! {
            r = running.waiting() => format!("{r:?}"),
            _ = self.shared.shutdown.cancelled() => "shutdown".into(),
        };
        info!(%reason, "stdio client disconnected");
        self.shutdown();
        Ok(())
    }
}
