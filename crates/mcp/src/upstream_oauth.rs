//! OAuth to HTTP upstreams (`mcpServers.<name>.oauth`): the
//! client-credentials grant through the official SDK's `auth` support. The
//! authorization server is found through the upstream's protected-resource
//! metadata (RFC 9728) and its own metadata (RFC 8414); the token goes on
//! every request, and a token the upstream rejects or that expired is
//! fetched again (the SDK's `AuthClient`). Secrets and tokens are never
//! logged or shown.

use rmcp::transport::auth::{AuthClient, ClientCredentialsConfig, OAuthState};

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
    let mut state = OAuthState::new(url, None)
        .await
        .map_err(|e| fail("preparing the OAuth client failed", &e))?;
    state
        .authenticate_client_credentials(ClientCredentialsConfig::ClientSecret {
            client_id: client_id.clone(),
            client_secret: client_secret.expose().to_owned(),
            scopes: scopes.clone(),
            resource: Some(url.to_owned()),
        })
        .await
        .map_err(|e| fail("getting an access token failed", &e))?;
    let manager = state.into_authorization_manager().ok_or_else(|| {
        UpstreamError(format!(
            "MCP server `{server}`: OAuth client credentials: no authorization after the token exchange"
        ))
    })?;
    Ok(AuthClient::new(reqwest::Client::default(), manager))
}
