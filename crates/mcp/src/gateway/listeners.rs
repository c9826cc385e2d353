//! The side listeners: the operator endpoint and `/metrics`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use super::{Gateway, GatewayError};

impl Gateway {
    /// Serves the operator endpoint (see [`crate::admin`]) at `addr`, each
    /// request authorized by `token` (at least 16 bytes), until
    /// [`Gateway::shutdown`]. Start the gateway with
    /// [`GatewayOptions::operator_approvals`] so undecided calls wait for it.
    ///
    /// # Errors
    /// [`GatewayError::Bind`] when the address cannot be bound.or the token
    /// is too short.
    pub async fn serve_admin(
        &self,
        addr: SocketAddr,
        token: String,
        on_bound: impl FnOnce(SocketAddr),
    ) -> Result<(), GatewayError> {
        if !addr.ip().is_loopback() && !self.shared.insecure_no_auth {
            return Err(GatewayError::Io(std::io::Error::other(format!(
                "refusing to serve the operator endpoint on {addr}: it can approve any session's calls and speaks plain HTTP; bind a loopback address (127.0.0.1) and reach it through a tunnel or an authenticating TLS proxy (or pass --insecure-no-auth)"
            ))));
        }
        if token.len() < crate::admin::MIN_ADMIN_TOKEN_BYTES {
            return Err(GatewayError::Io(std::io::Error::other(format!(
                "the admin token must be at least {} bytes",
                crate::admin::MIN_ADMIN_TOKEN_BYTES
            ))));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|reason| GatewayError::Bind { addr, reason })?;
        on_bound(listener.local_addr()?);
        crate::admin::serve(
            listener,
            self.shared.runtime.clone(),
            token,
            self.shared.shutdown.clone(),
        )
        .await?;
        Ok(())
    }

    /// The `/metrics` answer: OpenMetrics text with its content type.
    pub(super) fn metrics_response(
        &self,
    ) -> ([(http::header::HeaderName, &'static str); 1], String) {
        (
            [(
                http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            self.metrics_text(),
        )
    }

    /// The OpenMetrics text of every metric, gauges read now.
    pub fn metrics_text(&self) -> String {
        let runtime = &self.shared.runtime;
        crate::metrics::render(crate::metrics::Snapshot {
            suspended_runs: runtime.suspended_runs(),
            store_bytes: runtime.suspended_bytes(),
            sessions: self.shared.open_sessions.load(Ordering::SeqCst),
            upstreams: self
                .shared
                .upstreams
                .servers()
                .iter()
                .map(|s| (s.name(), s.is_ready()))
                .collect(),
            durable: runtime
                .durable_store_stats()
                .map(|(_, stats)| stats.map_err(|_| ())),
        })
    }

    /// Serves `/metrics` alone at `addr` (for scrapers; no authentication:
    /// bind it where only they reach it) until [`Gateway::shutdown`].
    ///
    /// # Errors
    /// [`GatewayError::Bind`] when the address cannot be bound.
    pub async fn serve_metrics(
        &self,
        addr: SocketAddr,
        on_bound: impl FnOnce(SocketAddr),
    ) -> Result<(), GatewayError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|reason| GatewayError::Bind { addr, reason })?;
        on_bound(listener.local_addr()?);
        let gateway = self.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let gateway = gateway.clone();
                async move { gateway.metrics_response() }
            }),
        );
        let ct = self.shared.shutdown.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { ct.cancelled().await })
            .await?;
        Ok(())
    }
}
