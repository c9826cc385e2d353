//! OAuth to HTTP upstreams (`mcpServers.<name>.oauth`) through the official
//! SDK's `auth` support: the client-credentials grant, or a user's token
//! got by `codemode login` (see [`crate::login`]) and kept in a
//! [`TokenFile`]. The authorization server is found through the upstream's
//! protected-resource metadata (RFC 9728) and its own metadata (RFC 8414);
//! the token goes on every request (the SDK's `AuthClient`). A
//! client-credentials token is replaced with the same grant before it
//! expires; a user's token is refreshed with its refresh token (keeping
//! `resource` and the granted scopes) and the new one written back to the
//! file. Secrets and tokens are never logged or shown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthClient, AuthorizationManager, ClientCredentialsConfig, OAuthClientConfig, OAuthState,
};
use tracing::{debug, warn};

use crate::config::UpstreamOAuth;
use crate::token_store::TokenFile;
use crate::upstream_error::UpstreamError;
use crate::upstream_http::TraceHeaders;

/// An HTTP client for `url` that carries access tokens got as `oauth` says.
pub(crate) async fn authorized_client(
    server: &str,
    url: &str,
    oauth: &UpstreamOAuth,
    http: TraceHeaders,
) -> Result<AuthClient<TraceHeaders>, UpstreamError> {
    crate::install_tls_provider();
    let (client_id, client_secret, scopes) = match oauth {
        UpstreamOAuth::ClientCredentials {
            client_id,
            client_secret,
            scopes,
        } => (client_id, client_secret, scopes),
        UpstreamOAuth::AuthorizationCode { client_secret, .. } => {
            return stored_authorization(server, url, client_secret.as_ref(), http).await;
        }
    };
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
    let client = AuthClient::new(http, manager);
    renew_before_expiry(
        server.to_owned(),
        Arc::downgrade(&client.auth_manager),
        grant,
    );
    Ok(client)
}

/// The token `codemode login` stored for `server`; refreshed (and stored
/// again) by the SDK when it nears expiry.
async fn stored_authorization(
    server: &str,
    url: &str,
    client_secret: Option<&crate::Secret>,
    http: TraceHeaders,
) -> Result<AuthClient<TraceHeaders>, UpstreamError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        UpstreamError(format!("MCP server `{server}`: OAuth: {what}: {e}"))
    };
    let data_dir = crate::data_dir::data_dir().map_err(|e| fail("no token store", &e))?;
    let tokens = TokenFile::new(&data_dir, server, url);
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| fail("preparing the OAuth client failed", &e))?;
    manager.set_credential_store(tokens.clone());
    let logged_in = manager
        .initialize_from_store()
        .await
        .map_err(|e| fail("reading the stored token failed", &e))?;
    if !logged_in {
        return Err(UpstreamError(format!(
            "MCP server `{server}`: not logged in (no token in {}); run `codemode login {server} --config <this config>` once",
            tokens.path().display()
        )));
    }
    if let Some(secret) = client_secret {
        // A confidential client refreshes with its secret.
        let credentials = manager
            .get_credentials()
            .await
            .map_err(|e| fail("reading the stored token failed", &e))?;
        manager
            .configure_client(
                OAuthClientConfig::new(credentials.0, "http://127.0.0.1/callback")
                    .with_client_secret(secret.expose()),
            )
            .map_err(|e| fail("configuring the client failed", &e))?;
    }
    Ok(AuthClient::new(http, manager))
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
