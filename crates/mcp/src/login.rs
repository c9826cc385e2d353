//! `codemode login <server>`: a user authorizes the gateway to reach an
//! OAuth-protected upstream once, with the authorization-code grant and
//! PKCE (S256), through the official SDK's `auth` support: the
//! authorization server is discovered from the upstream (RFC 9728, RFC
//! 8414), the client registers itself when the server offers dynamic
//! client registration and no `clientId` is configured, the user's browser
//! is sent to the authorization URL, and the redirect comes back to a
//! listener on loopback. Discovery starts from the challenge an
//! unauthenticated MCP request gets (its `resource_metadata` and `scope`);
//! a client ID metadata document (`clientMetadataUrl`) is used where the
//! authorization server supports one. After the gateway met a 403
//! `insufficient_scope`, the next login asks for the scopes the last one
//! had plus the missing ones. The token lands in the server's [`TokenFile`];
//! the gateway uses and refreshes it from there.
//!
//! This module never prints or logs a token or a code: the caller gets the
//! authorization URL (to open or print) and the token file's path.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::response::Html;
use rmcp::transport::auth::{AuthorizationManager, AuthorizationRequest, OAuthState};
use tokio::sync::oneshot;

use crate::config::{McpServerConfig, Transport, UpstreamOAuth};
use crate::token_store::TokenFile;

/// Why a login did not complete.
#[derive(Debug, thiserror::Error)]
#[error("login to MCP server `{server}`: {message}")]
pub struct LoginError {
    server: String,
    message: String,
}

/// What a completed login left behind.
#[derive(Debug)]
pub struct LoggedIn {
    /// The token file (owner-only).
    pub token_file: PathBuf,
    /// The client id the token was issued to (registered on the fly when
    /// the config names none).
    pub client_id: String,
}

/// Runs the authorization-code flow for `server` and stores the token.
/// `show_url` receives the authorization URL once it is known (open it in
/// a browser or print it); the user has `timeout` to finish.
pub async fn login(
    server: &McpServerConfig,
    data_dir: PathBuf,
    timeout: Duration,
    show_url: impl FnOnce(&str),
) -> Result<LoggedIn, LoginError> {
    crate::install_tls_provider();
    let fail = |message: String| LoginError {
        server: server.name.clone(),
        message,
    };
    let Transport::Http {
        url,
        oauth:
            Some(UpstreamOAuth::AuthorizationCode {
                client_id,
                client_secret,
                scopes,
                redirect_port,
                client_metadata_url,
            }),
        ..
    } = &server.transport
    else {
        return Err(fail(
            "it has no `oauth: { authorizationCode: {...} }` in the config; only such `url` servers take a login".into(),
        ));
    };

    // The redirect comes back to loopback only.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", redirect_port.unwrap_or(0)))
        .await
        .map_err(|e| {
            fail(format!(
                "cannot listen for the redirect on 127.0.0.1:{}: {e}",
                redirect_port.unwrap_or(0)
            ))
        })?;
    let port = listener
        .local_addr()
        .map_err(|e| fail(format!("the redirect listener has no address: {e}")))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");

    let tokens = TokenFile::new(&data_dir, &server.name, url);
    let mut manager = AuthorizationManager::new(url.as_str())
        .await
        .map_err(|e| fail(format!("preparing the OAuth client failed: {e}")))?;
    manager.set_credential_store(tokens.clone());
    let mut state = OAuthState::Unauthorized(manager);
    let mut request = AuthorizationRequest::new(&redirect_uri).with_client_name("codemode");
    // Where the server says its metadata is, and which scope it wants: the
    // challenge of a real MCP request (a GET may not reach the endpoint's
    // auth at all).
    if let Some(challenge) = challenge_of(url).await {
        request = request.with_challenge(challenge);
    }
    let scopes = scopes_to_ask(scopes, &tokens);
    if !scopes.is_empty() {
        request = request.with_scopes(scopes);
    }
    if let Some(id) = client_id {
        request = request.with_preregistered_client(id);
        if let Some(secret) = client_secret {
            request = request.with_client_secret(secret.expose());
        }
    } else if let Some(metadata_url) = client_metadata_url {
        request = request.with_client_metadata_url(metadata_url);
    }
    state
        .start_authorization(request)
        .await
        .map_err(|e| fail(format!("starting the authorization failed: {e}")))?;
    let authorization_url = state
        .get_authorization_url()
        .await
        .map_err(|e| fail(format!("no authorization URL: {e}")))?;

    let (sender, receiver) = oneshot::channel::<String>();
    let callback = axum::Router::new()
        .route("/callback", axum::routing::get(redirected))
        .with_state(std::sync::Arc::new(Mutex::new(Some(sender))));
    let serving = tokio::spawn(async move {
        let _ = axum::serve(listener, callback).await;
    });
    show_url(&authorization_url);
    let query = tokio::time::timeout(timeout, receiver).await;
    serving.abort();
    let query = match query {
        Ok(Ok(query)) => query,
        Ok(Err(_)) => return Err(fail("the redirect listener stopped".into())),
        Err(_) => {
            return Err(fail(format!(
                "no redirect came back within {} s; run the login again",
                timeout.as_secs()
            )));
        }
    };
    if let Some(refusal) = refusal(&query) {
        return Err(fail(refusal));
    }
    state
        .handle_callback_url(&format!("{redirect_uri}?{query}"))
        .await
        .map_err(|e| fail(format!("exchanging the authorization code failed: {e}")))?;
    let (client_id, _) = state
        .get_credentials()
        .await
        .map_err(|e| fail(format!("no token after the exchange: {e}")))?;
    tokens
        .clear_wanted_scopes()
        .map_err(|e| fail(format!("updating the token file: {e}")))?;
    Ok(LoggedIn {
        token_file: tokens.path().to_path_buf(),
        client_id,
    })
}

/// The scopes a login asks for: the configured ones (none: the SDK picks
/// from the challenge and the server's metadata); after the server refused
/// a call for lack of scope, what the last login had plus what it lacked
/// (asking for the union keeps what already worked working).
fn scopes_to_ask(configured: &[String], tokens: &TokenFile) -> Vec<String> {
    let wanted = tokens.wanted_scopes();
    if wanted.is_empty() {
        return configured.to_vec();
    }
    let mut scopes = if configured.is_empty() {
        tokens.granted_scopes()
    } else {
        configured.to_vec()
    };
    for scope in wanted {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    scopes
}

/// The `WWW-Authenticate` header an unauthenticated MCP `initialize` POST
/// gets from `url`, if it is refused (401/403); `None` when it is not or
/// the server cannot be reached (discovery then goes by the well-known
/// metadata paths).
async fn challenge_of(url: &str) -> Option<String> {
    let initialize = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": { "name": "codemode", "version": env!("CARGO_PKG_VERSION") },
        },
    });
    let client = crate::upstream_http::reqwest_client();
    let response = client
        .post(url)
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .timeout(CHALLENGE_PROBE_TIMEOUT)
        .json(&initialize)
        .send()
        .await
        .ok()?;
    let status = response.status();
    if status != reqwest::StatusCode::UNAUTHORIZED && status != reqwest::StatusCode::FORBIDDEN {
        // Let in without a token: end the session it may have opened.
        if let Some(session) = response.headers().get("mcp-session-id").cloned() {
            let _ = client
                .delete(url)
                .header("mcp-session-id", session)
                .timeout(CHALLENGE_PROBE_TIMEOUT)
                .send()
                .await;
        }
        return None;
    }
    let headers = response.headers().get_all(http::header::WWW_AUTHENTICATE);
    let values: Vec<&str> = headers.iter().filter_map(|v| v.to_str().ok()).collect();
    values
        .iter()
        .find(|v| v.to_ascii_lowercase().contains("resource_metadata"))
        .or_else(|| values.first())
        .map(|v| (*v).to_owned())
}

const CHALLENGE_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Removes `server`'s stored token; `Ok(false)` when there was none.
pub fn logout(server: &McpServerConfig, data_dir: PathBuf) -> Result<bool, LoginError> {
    let url = match &server.transport {
        Transport::Http { url, .. } => url,
        Transport::Stdio { .. } => "",
    };
    let path = TokenFile::new(&data_dir, &server.name, url)
        .path()
        .to_path_buf();
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(LoginError {
            server: server.name.clone(),
            message: format!("removing {}: {e}", path.display()),
        }),
    }
}

type Waiting = std::sync::Arc<Mutex<Option<oneshot::Sender<String>>>>;

/// The browser's redirect: the first one is taken, later ones are told
/// the login is over.
async fn redirected(State(waiting): State<Waiting>, RawQuery(query): RawQuery) -> Html<String> {
    let query = query.unwrap_or_default();
    let sender = waiting.lock().ok().and_then(|mut s| s.take());
    match sender {
        Some(sender) => {
            let text = match refusal(&query) {
                Some(refusal) => format!("codemode: the login failed: {}", escape(&refusal)),
                None => "codemode: authorization received; you can close this window.".into(),
            };
            let _ = sender.send(query);
            Html(format!("<!doctype html><title>codemode login</title><p>{text}</p>"))
        }
        None => Html(
            "<!doctype html><title>codemode login</title><p>codemode: this login is already over.</p>"
                .into(),
        ),
    }
}

/// The authorization server's refusal (`error`, `error_description`) in a
/// redirect query, if it is one.
fn refusal(query: &str) -> Option<String> {
    let pairs: Vec<(String, String)> = url_pairs(query);
    let error = pairs.iter().find(|(k, _)| k == "error")?.1.clone();
    let description = pairs
        .iter()
        .find(|(k, _)| k == "error_description")
        .map(|(_, v)| format!(" ({})", v.chars().take(200).collect::<String>()))
        .unwrap_or_default();
    Some(format!(
        "the authorization server refused: {}{description}",
        error.chars().take(64).collect::<String>()
    ))
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://localhost/?{query}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_read_from_the_redirect() {
        assert_eq!(refusal("code=abc&state=xyz"), None);
        assert_eq!(
            refusal("error=access_denied&error_description=The%20user%20said%20no&state=x")
                .as_deref(),
            Some("the authorization server refused: access_denied (The user said no)")
        );
    }

    #[test]
    fn escape_keeps_markup_out_of_the_page() {
        assert_eq!(escape("<script>&"), "&lt;script&gt;&amp;");
    }
}
