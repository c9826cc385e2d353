//! MCP over streamable HTTP at `/mcp`: the listener, client authentication,
//! OAuth metadata, and the middleware where the SDK's answers differ from
//! the transport spec.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tracing::info;

use super::{Gateway, GatewayError};
use crate::auth::ClientAuth;
use crate::oauth::TokenValidator;

impl Gateway {
    /// Serves MCP over streamable HTTP at `http://<addr>/mcp` until
    /// [`Gateway::shutdown`]. `on_bound`
    /// is told the bound address (useful with port 0).
    ///
    /// # Errors
    /// [`GatewayError::Bind`] when the address cannot be bound.
    pub async fn serve_http(
        &self,
        addr: SocketAddr,
        on_bound: impl FnOnce(SocketAddr),
    ) -> Result<(), GatewayError> {
        if self.shared.auth.is_none() && !addr.ip().is_loopback() && !self.shared.insecure_no_auth {
            return Err(GatewayError::Unauthenticated(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|reason| GatewayError::Bind { addr, reason })?;
        let bound = listener.local_addr()?;
        on_bound(bound);
        let ct = self.shared.shutdown.clone();
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        hosts.extend(self.shared.allowed_hosts.iter().cloned());
        let gateway = self.clone();
        // An idle HTTP session is reaped after this; its suspended runs
        // must stay resumable for their whole TTL.
        let ttl = self.shared.runtime.config().snapshot_ttl_seconds;
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(
            self.shared
                .http_session_idle
                .unwrap_or(std::time::Duration::from_secs(ttl.max(300) + 60)),
        );
        let mut origins: Vec<String> =
            ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .into_iter()
                .map(String::from)
                .collect();
        origins.extend(self.shared.allowed_origins.iter().cloned());
        let max_sessions = self.shared.max_http_sessions;
        let sessions = Arc::new(sessions);
        let known_sessions = Arc::clone(&sessions);
        let service = StreamableHttpService::new(
            move || {
                let open = gateway.shared.open_sessions.load(Ordering::SeqCst);
                if open >= max_sessions {
                    tracing::warn!(open, max_sessions, "HTTP session refused: too many open");
                    return Err(std::io::Error::other(format!(
                        "{SESSION_LIMIT_WORDS} on this gateway ({open}, the limit is {max_sessions}); close idle sessions (HTTP DELETE) or try again later"
                    )));
                }
                Ok(gateway.session())
            },
            sessions,
            StreamableHttpServerConfig::default()
                .with_allowed_hosts(hosts)
                .with_allowed_origins(origins)
                .enforce_origin_validation()
                .with_cancellation_token(ct.child_token()),
        );
        let metrics_gateway = self.clone();
        let mut app = axum::Router::new()
            .nest_service("/mcp", service)
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let gateway = metrics_gateway.clone();
                    async move { gateway.metrics_response() }
                }),
            )
            .layer(axum::middleware::from_fn({
                let known_sessions = Arc::clone(&known_sessions);
                move |request, next| http_conformance(Arc::clone(&known_sessions), request, next)
            }));
        if let Some(auth) = &self.shared.auth {
            #[cfg(feature = "oauth")]
            let oauth = auth.oauth.clone().map(TokenValidator::new);
            #[cfg(not(feature = "oauth"))]
            let oauth: Option<TokenValidator> = match auth.oauth {
                Some(_) => {
                    return Err(GatewayError::NotBuiltIn {
                        setting: "auth.oauth",
                        feature: "oauth",
                    });
                }
                None => None,
            };
            let auth = Arc::new(ClientAuth::new(
                auth.bearer_tokens.clone(),
                oauth,
                known_sessions,
                max_sessions,
            ));
            let layer_auth = Arc::clone(&auth);
            app = app.layer(axum::middleware::from_fn(move |request, next| {
                crate::auth::require_token(Arc::clone(&layer_auth), request, next)
            }));
            if auth.oauth.is_some() {
                // RFC 9728 metadata: public, outside the auth layer.
                let metadata = move || {
                    let auth = Arc::clone(&auth);
                    async move { axum::Json(auth.oauth.as_ref().map(TokenValidator::metadata)) }
                };
                app = app
                    .route(
                        "/.well-known/oauth-protected-resource",
                        axum::routing::get(metadata.clone()),
                    )
                    .route(
                        "/.well-known/oauth-protected-resource/mcp",
                        axum::routing::get(metadata),
                    );
            }
        }
        info!(%bound, "serving MCP over streamable HTTP at /mcp");
        // The client's address reaches each request (fair shares of what
        // unauthenticated clients hold are per address).
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move { ct.cancelled().await })
        .await?;
        self.shutdown();
        Ok(())
    }
}

/// Where the SDK's HTTP answers differ from the MCP transport spec:
/// a JSON body that does not parse is a 400 with a JSON-RPC parse error
/// (the SDK says 415, which tells the client to change its Content-Type),
/// and a `DELETE` of a session that does not exist (ended, or never
/// opened) is a 404, as every request naming an unknown session is (the
/// SDK says 202).
/// The SDK answers a session its factory refused with 500; the session
/// limit is no server error but a full house: 503 with `Retry-After` and
/// the limit named. Any other 500 passes unchanged.
async fn session_limit_answer(response: axum::response::Response) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 10)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    match text.find(SESSION_LIMIT_WORDS) {
        Some(at) => (
            http::StatusCode::SERVICE_UNAVAILABLE,
            [(http::header::RETRY_AFTER, "5")],
            format!("Service Unavailable: {}", text[at..].trim()),
        )
            .into_response(),
        None => axum::response::Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
}

/// How the session factory's refusal begins (see `serve_http`).
const SESSION_LIMIT_WORDS: &str = "too many MCP sessions are open";

async fn http_conformance(
    sessions: Arc<LocalSessionManager>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use rmcp::transport::streamable_http_server::session::SessionManager;
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if request.method() == http::Method::DELETE
        && let Some(id) = &session
        && !sessions
            .has_session(&id.as_str().into())
            .await
            .unwrap_or(false)
    {
        return (
            http::StatusCode::NOT_FOUND,
            format!("Not Found: there is no MCP session `{id}` (it ended or never existed)"),
        )
            .into_response();
    }
    let json_post = request.method() == http::Method::POST
        && request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(';')
                    .next()
                    .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
            });
    let response = next.run(request).await;
    if json_post
        && session.is_none()
        && response.status() == http::StatusCode::INTERNAL_SERVER_ERROR
    {
        return session_limit_answer(response).await;
    }
    if !(json_post && response.status() == http::StatusCode::UNSUPPORTED_MEDIA_TYPE) {
        return response;
    }
    let detail = axum::body::to_bytes(response.into_body(), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let detail = detail
        .strip_prefix("fail to deserialize request body ")
        .unwrap_or(&detail);
    tracing::warn!(%detail, "HTTP request body is not a JSON-RPC message; answered 400");
    // serde_json's data errors (valid JSON of the wrong shape) and the
    // SDK's own message for one start so; anything else is a syntax error.
    let wrong_shape = [
        "unrecognized JSON-RPC message",
        "invalid type",
        "invalid value",
        "invalid length",
        "unknown variant",
        "unknown field",
        "missing field",
        "duplicate field",
        "data did not match",
    ]
    .iter()
    .any(|p| detail.starts_with(p));
    let (code, message) = if wrong_shape {
        (
            -32600,
            format!("Invalid Request: the body is JSON but not a JSON-RPC message ({detail})"),
        )
    } else {
        (
            -32700,
            format!("Parse error: the body is not JSON ({detail})"),
        )
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    });
    (
        http::StatusCode::BAD_REQUEST,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
