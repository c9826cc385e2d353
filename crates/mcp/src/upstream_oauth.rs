//! OAuth to HTTP upstreams (`mcpServers.<name>.oauth`): the
//! client-credentials grant through the official SDK's `auth` support. The
//! authorization server is found through the upstream's protected-resource
//! metadata (RFC 9728) and its own metadata (RFC 8414); the token goes on
//! every request (the SDK's `AuthClient`), and a new one is got with the
//! same grant before the old one expires. Secrets and tokens are never
//! logged or shown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthClient, AuthorizationManager, ClientCredentialsConfig, OAuthState,
};
use tracing::{debug, warn};

use crate::config::UpstreamOAuth;
use crate::upstream::UpstreamError;

/// An HTTP client for `url` that carries access tokens got as `oauth` says.
pub(crate) async fn authorized_client(
    server: &str,
    url: &str,
    oauth: &UpstreamOAuth,
) -> Result<AuthClient<reqwest::Client>, UpstreamError> {
    crate::install_tls_provider();
    let UpstreamOAuth::ClientCredentials {
        client_id,
        client_secret,
        scopes,
    } = oauth;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        UpstreamError(format!(
            "MCP server `{server}`: OAuth client credentials: {what}: {e}"
        ))
    };
    let grant = ClientCredentialsConfig::ClientSecret {
        client_id: client_id.clone(),
        client_secret: client_secret.expose().to_owned(),
        scopes: scopes.clone(),
        resource: Some(url.to_owned()),
    };
    let mut state = OAuthState::new(url, None)
        .await
        .map_err(|e| fail("preparing the OAuth client failed", &e))?;
    state
        .authenticate_client_credentials(grant.clone())
        .await
        .map_err(|e| fail("getting an access token failed", &e))?;
    let manager = state.into_authorization_manager().ok_or_else(|| {
        UpstreamError(format!(
            "MCP server `{server}`: OAuth client credentials: no authorization after the token exchange"
        ))
    })?;
    let client = AuthClient::new(reqwest::Client::default(), manager);
    renew_before_expiry(
        server.to_owned(),
        Arc::downgrade(&client.auth_manager),
        grant,
    );
    Ok(client)
}

/// The client-credentials grant has no refresh token: a new token is got
/// with the same grant at a third of the old one's lifetime (rmcp's client
/// already treats a token as expired once less than half its lifetime, or
/// 30 s, is left), for as long as the connection's client lives.
fn renew_before_expiry(
    server: String,
    manager: Weak<tokio::sync::Mutex<AuthorizationManager>>,
    grant: ClientCredentialsConfig,
) {
    tokio::spawn(async move {
        let mut wait = lifetime(&manager).await;
        while let Some(lifetime) = wait {
            tokio::time::sleep((lifetime / 3).max(Duration::from_millis(500))).await;
            let Some(manager_now) = manager.upgrade() else {
                return;
            };
            let renewed = manager_now
                .lock()
                .await
                .exchange_client_credentials(&grant)
                .await;
            drop(manager_now);
            wait = match renewed {
                Ok(_) => {
                    debug!(%server, "renewed the upstream's access token");
                    lifetime_or(&manager, lifetime).await
                }
                Err(e) => {
                    warn!(%server, error = %e, "renewing the upstream's access token failed; retrying in 5 s");
                    // Slept as a third of this: 5 s.
                    Some(Duration::from_secs(15))
                }
            };
        }
    });
}

/// How long the current token lives; `None` without an expiry (nothing to
/// renew) or once the connection is gone.
async fn lifetime(manager: &Weak<tokio::sync::Mutex<AuthorizationManager>>) -> Option<Duration> {
    let manager = manager.upgrade()?;
    let credentials = manager.lock().await.get_credentials().await.ok()?;
    credentials.1.and_then(|token| token.expires_in())
}

/// [`lifetime`], or `previous` when the token says nothing of it.
async fn lifetime_or(
    manager: &Weak<tokio::sync::Mutex<AuthorizationManager>>,
    previous: Duration,
) -> Option<Duration> {
    manager.upgrade()?;
    Some(lifetime(manager).await.unwrap_or(previous))
}
