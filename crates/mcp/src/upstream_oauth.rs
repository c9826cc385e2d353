//! OAuth to HTTP upstreams (`mcpServers.<name>.oauth`) through the official
//! SDK's `auth` support: the client-credentials grant, or a user's token
//! got by `codemode login` (see [`crate::login`]) and kept in a
//! [`TokenFile`]. The authorization server is found through the upstream's
//! protected-resource metadata (RFC 9728) and its own metadata (RFC 8414);
//! the token goes on every request (the SDK's `AuthClient`). A
//! client-credentials token is replaced with the same grant before it
//! expires; a user's token is refreshed with its refresh token (keeping
//! `resource` and the granted scopes) and the new one written back to the
//! file. When the upstream refuses a call's token ([`Reauthorization`]),
//! a client-credentials token is got again (with the scopes the server
//! asked for added) and the call retried once; a stored login records the
//! missing scopes for the next `codemode login`, and the call fails saying
//! so. Secrets and tokens are never logged or shown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use oauth2::TokenResponse as _;
use rmcp::transport::auth::{AuthClient, AuthorizationManager, OAuthClientConfig};
use tracing::{debug, warn};

use crate::challenge::BearerChallenge;
use crate::client_grant::ClientGrant;
use crate::config::UpstreamOAuth;
use crate::token_store::TokenFile;
use crate::upstream_error::UpstreamError;
use crate::upstream_http::TraceHeaders;

/// An HTTP client for `url` that carries access tokens got as `oauth` says,
/// and what to do when the server refuses them.
pub(crate) async fn authorized_client(
    server: &str,
    url: &str,
    oauth: &UpstreamOAuth,
    http: TraceHeaders,
) -> Result<(AuthClient<TraceHeaders>, Reauthorization), UpstreamError> {
    crate::install_tls_provider();
    let (client_id, authentication, scopes) = match oauth {
        UpstreamOAuth::ClientCredentials {
            client_id,
            authentication,
            scopes,
        } => (client_id, authentication, scopes),
        UpstreamOAuth::AuthorizationCode { client_secret, .. } => {
            let client = stored_authorization(server, url, client_secret.as_ref(), http).await?;
            let tokens = token_file(server, url)?;
            return Ok((client, Reauthorization::StoredLogin { tokens }));
        }
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        UpstreamError(format!(
            "MCP server `{server}`: OAuth client credentials: {what}: {e}"
        ))
    };
    let mut grant = ClientGrant::new(client_id, authentication, scopes, url)
        .map_err(|e| fail("the configured credentials", &e))?;
    let manager = grant.authorize(url).await.map_err(|e| {
        UpstreamError(format!(
            "MCP server `{server}`: OAuth client credentials: {e}"
        ))
    })?;
    let client = AuthClient::new(http, manager);
    let grant = Arc::new(std::sync::Mutex::new(grant));
    renew_before_expiry(
        server.to_owned(),
        Arc::downgrade(&client.auth_manager),
        Arc::clone(&grant),
    );
    let reauthorization = Reauthorization::ClientCredentials {
        manager: Arc::downgrade(&client.auth_manager),
        grant,
    };
    Ok((client, reauthorization))
}

/// The grant as it stands (scopes grow when the server asks for more).
fn current(grant: &std::sync::Mutex<ClientGrant>) -> ClientGrant {
    grant
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// What the gateway can do when an upstream refuses a call's token: a 401
/// the SDK's own refresh did not cure, or a 403 `insufficient_scope`.
pub(crate) enum Reauthorization {
    /// Client credentials: a new token (with the challenged scopes added
    /// to the grant), then the call once more.
    ClientCredentials {
        manager: Weak<tokio::sync::Mutex<AuthorizationManager>>,
        grant: Arc<std::sync::Mutex<ClientGrant>>,
    },
    /// A user's stored login: only the user can authorize more, so the
    /// missing scopes are recorded for the next `codemode login`.
    StoredLogin { tokens: TokenFile },
}

/// The answer to a refused token.
pub(crate) enum Refused {
    /// A new token is in place: send the call again (once).
    Retry,
    /// The call fails with this (it says what to do).
    Fail(String),
}

impl Reauthorization {
    /// Reacts to `challenge`, the server's `WWW-Authenticate` on refusing
    /// a call of `server`.
    pub(crate) async fn refused(&self, server: &str, challenge: &BearerChallenge) -> Refused {
        let wanted = challenge.scopes.join(" ");
        match self {
            Reauthorization::ClientCredentials { manager, grant } => {
                let mut widened = current(grant);
                if challenge.is_insufficient_scope() {
                    let had = widened.scopes().to_vec();
                    let missing = challenge.missing_from(&had);
                    if missing.is_empty() {
                        return Refused::Fail(format!(
                            "MCP server `{server}` refuses this call for lack of scope{} though the client credentials already ask for {}; the authorization server does not grant it to this client: allow it there",
                            if wanted.is_empty() {
                                String::new()
                            } else {
                                format!(" `{wanted}`")
                            },
                            if had.is_empty() {
                                "no particular scope".to_owned()
                            } else {
                                format!("`{}`", had.join(" "))
                            },
                        ));
                    }
                    widened = widened.widen(&missing);
                }
                let Some(manager) = manager.upgrade() else {
                    return Refused::Fail(format!(
                        "MCP server `{server}`: the connection closed while getting a new token"
                    ));
                };
                match widened.exchange(&manager).await {
                    Ok(()) => {
                        debug!(%server, scopes = %widened.scopes().join(" "), "got a new client-credentials token after a refusal");
                        *grant
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = widened;
                        Refused::Retry
                    }
                    Err(e) => Refused::Fail(format!(
                        "MCP server `{server}` refused the access token{}, and getting a new one with the client credentials failed: {e}",
                        if challenge.is_insufficient_scope() {
                            format!(" for lack of scope `{wanted}`")
                        } else {
                            String::new()
                        }
                    )),
                }
            }
            Reauthorization::StoredLogin { tokens } => {
                let relogin = format!("run `codemode login {server} --config <this config>` again");
                if !challenge.is_insufficient_scope() {
                    return Refused::Fail(format!(
                        "MCP server `{server}` refused the stored login's token (401) and refreshing it did not help; {relogin}"
                    ));
                }
                if challenge.scopes.is_empty() {
                    return Refused::Fail(format!(
                        "MCP server `{server}` refuses this call for lack of scope (it did not say which); {relogin}"
                    ));
                }
                let missing = challenge.missing_from(&tokens.granted_scopes());
                if missing.is_empty() {
                    return Refused::Fail(format!(
                        "MCP server `{server}` refuses this call for lack of scope `{wanted}`, which the stored login was already granted; logging in again will not help: the server's own authorization refuses it"
                    ));
                }
                let recorded = {
                    let tokens = tokens.clone();
                    let missing = missing.clone();
                    tokio::task::spawn_blocking(move || tokens.want_scopes(&missing)).await
                };
                if let Ok(Err(e)) | Err(e) = recorded.map_err(|e| e.to_string()) {
                    warn!(%server, error = %e, "recording the scopes wanted for the next login failed");
                }
                Refused::Fail(format!(
                    "MCP server `{server}` needs scope `{}` for this call, which the stored login lacks; {relogin} (it then asks for `{}` on top of what it had), then call again",
                    missing.join(" "),
                    missing.join(" ")
                ))
            }
        }
    }
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
    let tokens = token_file(server, url)?;
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

/// `server`'s token file in the data directory.
fn token_file(server: &str, url: &str) -> Result<TokenFile, UpstreamError> {
    let data_dir = crate::data_dir::data_dir()
        .map_err(|e| UpstreamError(format!("MCP server `{server}`: OAuth: no token store: {e}")))?;
    Ok(TokenFile::new(&data_dir, server, url))
}

/// The client-credentials grant has no refresh token: a new token is got
/// with the same grant at a third of the old one's lifetime (rmcp's client
/// already treats a token as expired once less than half its lifetime, or
/// 30 s, is left), for as long as the connection's client lives.
fn renew_before_expiry(
    server: String,
    manager: Weak<tokio::sync::Mutex<AuthorizationManager>>,
    grant: Arc<std::sync::Mutex<ClientGrant>>,
) {
    tokio::spawn(async move {
        let mut wait = lifetime(&manager).await;
        while let Some(lifetime) = wait {
            tokio::time::sleep((lifetime / 3).max(Duration::from_millis(500))).await;
            let Some(manager_now) = manager.upgrade() else {
                return;
            };
            let renewed = current(&grant).exchange(&manager_now).await;
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
