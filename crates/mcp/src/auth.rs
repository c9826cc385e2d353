//! Authentication of HTTP clients (`auth.bearerTokens`): every request to
//! `/mcp` and `/metrics` needs `Authorization: Bearer <token>` naming one
//! of the configured tokens (compared in constant time, against every
//! token). The matching token's name is the request's principal; an MCP
//! session belongs to the principal that opened it, and a request naming
//! another principal's session is refused, so runs never cross principals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::config::BearerToken;
use crate::oauth::TokenValidator;

pub use crate::principal::Principal;

/// Equal without an early exit: the time depends on the length of `a`
/// (the token a client sent) only, never on where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    compare(a, b).0
}

/// The comparison and how many bytes it looked at (always `a.len()`).
fn compare(a: &[u8], b: &[u8]) -> (bool, usize) {
    let mut diff = u8::from(a.len() != b.len());
    let mut steps = 0;
    for (i, x) in a.iter().enumerate() {
        // Compare against the other side cyclically, so a length mismatch
        // still walks all of `a`.
        let y = if b.is_empty() { 0 } else { b[i % b.len()] };
        diff |= x ^ y;
        steps += 1;
    }
    (std::hint::black_box(diff) == 0, steps)
}

/// The configured tokens and which principal owns each open session.
pub(crate) struct ClientAuth {
    tokens: Vec<BearerToken>,
    /// `auth.oauth`: JWT access tokens of an issuer.
    pub(crate) oauth: Option<TokenValidator>,
    owners: Mutex<HashMap<String, Principal>>,
    sessions: Arc<LocalSessionManager>,
    /// Past this many remembered sessions, ended ones are forgotten.
    prune_above: usize,
}

impl ClientAuth {
    pub(crate) fn new(
        tokens: Vec<BearerToken>,
        oauth: Option<TokenValidator>,
        sessions: Arc<LocalSessionManager>,
        max_sessions: usize,
    ) -> ClientAuth {
        ClientAuth {
            tokens,
            oauth,
            owners: Mutex::default(),
            sessions,
            prune_above: max_sessions.saturating_mul(2).max(64),
        }
    }

    /// The principal of a bearer token, checking every configured token.
    pub(crate) fn principal(&self, token: &str) -> Option<Principal> {
        let mut found = None;
        for configured in &self.tokens {
            if constant_time_eq(token.as_bytes(), configured.token.expose().as_bytes()) {
                found = Some(Principal(configured.name.clone()));
            }
        }
        found
    }

    fn owner(&self, session: &str) -> Option<Principal> {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session)
            .cloned()
    }

    async fn bind(&self, session: String, principal: Principal) {
        let full = {
            let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
            owners.insert(session, principal);
            owners.len() > self.prune_above
        };
        if full {
            // Forget sessions that ended (live ones are bounded by the
            // session cap, so this keeps the map bounded too).
            let known: Vec<String> = self
                .owners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .cloned()
                .collect();
            let mut ended = Vec::new();
            for id in known {
                if !self
                    .sessions
                    .has_session(&id.as_str().into())
                    .await
                    .unwrap_or(false)
                {
                    ended.push(id);
                }
            }
            let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
            for id in ended {
                owners.remove(&id);
            }
        }
    }
}

/// Header values cannot hold everything a reason might say.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control() && *c != '"' && *c != '\\')
        .take(200)
        .collect()
}

fn unauthorized(auth: &ClientAuth, header_given: bool, reason: Option<&str>) -> Response {
    let mut challenge = String::from("Bearer realm=\"codemode\"");
    if let Some(oauth) = &auth.oauth {
        challenge.push_str(&format!(", resource_metadata=\"{}\"", oauth.metadata_url()));
    }
    if header_given {
        challenge.push_str(", error=\"invalid_token\"");
        if let Some(reason) = reason {
            challenge.push_str(&format!(", error_description=\"{}\"", quoted(reason)));
        }
    }
    let body = match reason {
        Some(reason) => format!(
            "Unauthorized: {reason}; this gateway needs `Authorization: Bearer <token>` (auth.bearerTokens or an OAuth access token)"
        ),
        None => "Unauthorized: this gateway needs `Authorization: Bearer <token>` with one of its configured tokens (auth.bearerTokens) or an OAuth access token (auth.oauth)".into(),
    };
    let mut response = (http::StatusCode::UNAUTHORIZED, body).into_response();
    if let Ok(value) = http::HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The middleware: 401 without a valid token, 403 for another principal's
/// session; otherwise the request goes on carrying its [`Principal`].
pub(crate) async fn require_token(
    auth: Arc<ClientAuth>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // One Authorization header: with two (a good and a bad one) it is
    // ambiguous which one a proxy or a later reader would honour.
    if request
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .nth(1)
        .is_some()
    {
        tracing::warn!(target: "codemode::auth", reason = "more than one Authorization header", "request refused");
        crate::metrics::auth_failure();
        return unauthorized(
            &auth,
            true,
            Some("the request carries more than one Authorization header; send exactly one"),
        );
    }
    let header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let given = header.is_some();
    let token = header
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .unwrap_or("");
    let mut reason = None;
    let mut principal = auth.principal(token).filter(|_| !token.is_empty());
    if principal.is_none()
        && !token.is_empty()
        && let Some(oauth) = &auth.oauth
    {
        match oauth.validate(token).await {
            Ok(p) => principal = Some(p),
            Err(why) => reason = Some(why),
        }
    }
    let Some(principal) = principal else {
        tracing::warn!(target: "codemode::auth", reason = reason.as_deref().unwrap_or("missing or unknown bearer token"), "request refused");
        crate::metrics::auth_failure();
        return unauthorized(&auth, given, reason.as_deref());
    };
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && let Some(owner) = auth.owner(id)
        && owner != principal
    {
        tracing::warn!(target: "codemode::auth", principal = %principal.0, "request for another principal's session refused");
        crate::metrics::auth_failure();
        return (
            http::StatusCode::FORBIDDEN,
            "Forbidden: this MCP session belongs to another principal",
        )
            .into_response();
    }
    request.extensions_mut().insert(principal.clone());
    let response = next.run(request).await;
    if session.is_none()
        && let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        auth.bind(id.to_owned(), principal).await;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret-token-1234", b"secret-token-1234"));
        assert!(!constant_time_eq(
            b"secret-token-1234",
            b"secret-token-1235"
        ));
        assert!(!constant_time_eq(b"secret", b"secret-token-1234"));
        assert!(!constant_time_eq(b"secret-token-1234", b"secret"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(!constant_time_eq(b"x", b""));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn the_comparison_looks_at_every_byte_wherever_the_inputs_differ() {
        let token = vec![b'a'; 4096];
        let mut first = token.clone();
        first[0] = b'b';
        let mut last = token.clone();
        last[4095] = b'b';
        for other in [&first[..], &last[..], &token[..10], &[][..], &token[..]] {
            let (equal, steps) = compare(&token, other);
            assert_eq!(equal, other == &token[..]);
            assert_eq!(steps, token.len(), "no early exit");
        }
    }

    #[tokio::test]
    async fn pruning_forgets_ended_sessions_and_keeps_the_owners_of_live_ones() {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        let sessions = Arc::new(LocalSessionManager::default());
        // A session cap of 8: pruning starts past 64 bound sessions.
        let auth = ClientAuth::new(Vec::new(), None, Arc::clone(&sessions), 8);
        let mut live = Vec::new();
        for _ in 0..8 {
            let (id, transport) = sessions.create_session().await.unwrap();
            auth.bind(id.to_string(), Principal("alice".into())).await;
            live.push((id.to_string(), transport));
        }
        // Many sessions that ended (never in the manager) push past the
        // pruning bound.
        for i in 0..100 {
            auth.bind(format!("ended-{i}"), Principal("bob".into()))
                .await;
        }
        for (id, _) in &live {
            assert_eq!(
                auth.owner(id),
                Some(Principal("alice".into())),
                "a live session keeps its owner, so another principal still gets 403"
            );
        }
        let held = auth
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        assert!(
            held <= auth.prune_above + 1,
            "the map stays bounded: {held}"
        );
        assert!(
            auth.owner("ended-0").is_none(),
            "ended sessions are forgotten"
        );
    }

    #[tokio::test]
    async fn ended_sessions_are_swept_in_bulk_once_past_the_bound_not_on_every_bind() {
        let sessions = Arc::new(LocalSessionManager::default());
        let auth = ClientAuth::new(Vec::new(), None, sessions, 8);
        let held = |auth: &ClientAuth| {
            auth.owners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len()
        };
        for i in 0..auth.prune_above {
            auth.bind(format!("ended-{i}"), Principal("bob".into()))
                .await;
        }
        assert_eq!(
            held(&auth),
            auth.prune_above,
            "up to the bound every bind is kept, without a sweep over the sessions"
        );
        auth.bind("one-more".into(), Principal("bob".into())).await;
        assert_eq!(held(&auth), 0, "past it, every ended session goes at once");
    }

    #[test]
    fn challenge_descriptions_carry_no_quote_backslash_control_or_non_ascii() {
        let reason = "bad \"token\"\\ é\r\nWWW-Authenticate: evil";
        let shown = quoted(reason);
        assert_eq!(shown, "bad token WWW-Authenticate: evil");
        assert!(
            http::HeaderValue::from_str(&format!("Bearer error_description=\"{shown}\"")).is_ok()
        );
        assert_eq!(quoted(&"x".repeat(500)).len(), 200, "bounded");
    }

    /// The middleware in front of a route that answers with the request's
    /// principal, served on a loopback port.
    async fn guarded_server() -> std::net::SocketAddr {
        guarded_server_with(None).await
    }

    async fn guarded_server_with(oauth: Option<TokenValidator>) -> std::net::SocketAddr {
        let auth = Arc::new(ClientAuth::new(
            vec![BearerToken {
                name: "alice".into(),
                token: crate::Secret::new("alice-token-0123456789"),
            }],
            oauth,
            Arc::new(LocalSessionManager::default()),
            16,
        ));
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::post(|request: axum::extract::Request| async move {
                    request
                        .extensions()
                        .get::<Principal>()
                        .map(|p| p.0.clone())
                        .unwrap_or_default()
                }),
            )
            .layer(axum::middleware::from_fn(move |request, next| {
                require_token(Arc::clone(&auth), request, next)
            }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    #[tokio::test]
    async fn with_oauth_an_unknown_token_is_checked_as_a_jwt_and_the_challenge_says_why() {
        let oauth = TokenValidator::new(crate::config::OAuthResource {
            // Nothing listens there: a token that is not a JWT is refused
            // before any key is fetched.
            issuer: "http://127.0.0.1:9".into(),
            resource: "http://gw.test/mcp".into(),
            jwks_uri: None,
        });
        let addr = guarded_server_with(Some(oauth)).await;
        crate::install_tls_provider();
        let client = reqwest::Client::new();
        let challenge = |authorization: Option<&'static str>| {
            let mut request = client.post(format!("http://{addr}/"));
            if let Some(value) = authorization {
                request = request.header(http::header::AUTHORIZATION, value);
            }
            async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status().as_u16(), 401);
                response
                    .headers()
                    .get(http::header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            }
        };
        let metadata =
            "resource_metadata=\"http://gw.test/.well-known/oauth-protected-resource/mcp\"";
        let refused = challenge(Some("Bearer not-a-jwt")).await;
        assert!(refused.contains(metadata), "{refused}");
        assert!(refused.contains("error=\"invalid_token\""), "{refused}");
        assert!(
            refused.contains("error_description=\"not a JWT access token"),
            "{refused}"
        );
        let empty = challenge(Some("Bearer ")).await;
        assert!(empty.contains("error=\"invalid_token\""), "{empty}");
        assert!(
            !empty.contains("error_description"),
            "an empty token is not sent to the issuer's checks: {empty}"
        );
        let none = challenge(None).await;
        assert!(none.contains(metadata), "{none}");
        assert!(!none.contains("error="), "{none}");
    }

    #[tokio::test]
    async fn the_middleware_admits_exactly_one_valid_token() {
        let addr = guarded_server().await;
        crate::install_tls_provider();
        let client = reqwest::Client::new();
        let send = |headers: Vec<&'static str>| {
            // `header` appends: two calls send two Authorization headers.
            let request = headers
                .into_iter()
                .fold(client.post(format!("http://{addr}/")), |request, value| {
                    request.header(http::header::AUTHORIZATION, value)
                });
            async move {
                let response = request.send().await.unwrap();
                (response.status().as_u16(), response.text().await.unwrap())
            }
        };
        const GOOD: &str = "Bearer alice-token-0123456789";
        const BAD: &str = "Bearer mallory-token-0123456";
        assert_eq!(send(vec![GOOD]).await, (200, "alice".into()));
        assert_eq!(
            send(vec!["Bearer   alice-token-0123456789  "]).await,
            (200, "alice".into()),
            "surrounding spaces are not part of the token"
        );
        for (headers, why) in [
            (vec![], "no header"),
            (vec![BAD], "an unknown token"),
            (vec!["Basic YWxpY2U6cHc="], "another scheme"),
            (vec![GOOD, BAD], "a good and a bad header"),
            (vec![BAD, GOOD], "a bad and a good header"),
            (vec![GOOD, GOOD], "the good header twice"),
        ] {
            let duplicate = headers.len() > 1;
            let (status, body) = send(headers).await;
            assert_eq!(status, 401, "{why}: {body}");
            assert!(body.starts_with("Unauthorized"), "{why}: {body}");
            assert_eq!(
                body.contains("more than one Authorization header"),
                duplicate,
                "{why}: {body}"
            );
        }
    }

    #[test]
    fn every_token_is_checked_and_names_its_principal() {
        let auth = ClientAuth::new(
            vec![
                BearerToken {
                    name: "alice".into(),
                    token: crate::Secret::new("alice-token-0123456789"),
                },
                BearerToken {
                    name: "bob".into(),
                    token: crate::Secret::new("bob-token-0123456789ab"),
                },
            ],
            None,
            Arc::new(LocalSessionManager::default()),
            16,
        );
        assert_eq!(
            auth.principal("bob-token-0123456789ab"),
            Some(Principal("bob".into()))
        );
        assert_eq!(
            auth.principal("alice-token-0123456789"),
            Some(Principal("alice".into()))
        );
        assert_eq!(auth.principal("alice-token-012345678"), None);
        assert_eq!(auth.principal(""), None);
    }

    #[test]
    fn quoted_keeps_printable_ascii_and_drops_quotes_backslashes_and_controls() {
        let printable: String = (' '..='~').collect();
        let expected: String = printable
            .chars()
            .filter(|c| !matches!(c, '"' | '\\'))
            .collect();
        assert_eq!(quoted(&printable), expected);
        for c in [
            '"', '\\', '\0', '\t', '\n', '\r', '\u{1b}', '\u{7f}', 'é', '\u{2028}',
        ] {
            assert_eq!(quoted(&format!("a{c}b")), "ab", "{c:?} is dropped");
        }
    }

    #[test]
    fn the_challenge_header_carries_the_reason_as_a_valid_quoted_string() {
        let auth = ClientAuth::new(
            Vec::new(),
            None,
            Arc::new(LocalSessionManager::default()),
            16,
        );
        let reason = "a\"b\\c\td\u{7f}e\0f\r\ng\u{1b}h é\", evil=\"1";
        let response = unauthorized(&auth, true, Some(reason));
        let header = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .expect("a challenge is sent")
            .to_str()
            .unwrap();
        let description = header
            .strip_prefix(
                "Bearer realm=\"codemode\", error=\"invalid_token\", error_description=\"",
            )
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_else(|| panic!("unexpected challenge: {header}"));
        assert_eq!(description, "abcdefgh , evil=1");
        assert!(
            description
                .chars()
                .all(|c| (' '..='~').contains(&c) && c != '"' && c != '\\'),
            "only qdtext inside the quotes: {header}"
        );
    }

    /// Alice's and Bob's tokens in front of a route that opens a live
    /// session (in the manager the middleware prunes against) for a
    /// request without one, and otherwise answers with the principal.
    async fn session_server(max_sessions: usize) -> (std::net::SocketAddr, Arc<ClientAuth>) {
        let sessions = Arc::new(LocalSessionManager::default());
        let auth = Arc::new(ClientAuth::new(
            vec![
                BearerToken {
                    name: "alice".into(),
                    token: crate::Secret::new("alice-token-0123456789"),
                },
                BearerToken {
                    name: "bob".into(),
                    token: crate::Secret::new("bob-token-0123456789ab"),
                },
            ],
            None,
            Arc::clone(&sessions),
            max_sessions,
        ));
        // The transports stay alive, so every session stays live.
        let transports = Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let middleware_auth = Arc::clone(&auth);
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::post(move |request: axum::extract::Request| {
                    let sessions = Arc::clone(&sessions);
                    let transports = Arc::clone(&transports);
                    async move {
                        let principal = request
                            .extensions()
                            .get::<Principal>()
                            .map(|p| p.0.clone())
                            .unwrap_or_default();
                        if request.headers().contains_key("mcp-session-id") {
                            return principal.into_response();
                        }
                        let (id, transport) = sessions.create_session().await.unwrap();
                        transports.lock().await.push(transport);
                        ([("mcp-session-id", id.to_string())], principal).into_response()
                    }
                }),
            )
            .layer(axum::middleware::from_fn(move |request, next| {
                require_token(Arc::clone(&middleware_auth), request, next)
            }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, auth)
    }

    #[tokio::test]
    async fn past_the_pruning_bound_live_sessions_still_refuse_another_principal() {
        let (addr, auth) = session_server(8).await;
        crate::install_tls_provider();
        let client = reqwest::Client::new();
        let send = |token: &'static str, session: Option<String>| {
            let mut request = client
                .post(format!("http://{addr}/"))
                .header(http::header::AUTHORIZATION, format!("Bearer {token}"));
            if let Some(id) = session {
                request = request.header("mcp-session-id", id);
            }
            async move {
                let response = request.send().await.unwrap();
                let id = response
                    .headers()
                    .get("mcp-session-id")
                    .map(|v| v.to_str().unwrap().to_owned());
                (
                    response.status().as_u16(),
                    id,
                    response.text().await.unwrap(),
                )
            }
        };
        const ALICE: &str = "alice-token-0123456789";
        const BOB: &str = "bob-token-0123456789ab";
        // More live sessions than the bound past which the map is pruned.
        let opened = auth.prune_above + 16;
        let mut ids = Vec::new();
        for _ in 0..opened {
            let (status, id, body) = send(ALICE, None).await;
            assert_eq!((status, body.as_str()), (200, "alice"));
            ids.push(id.expect("a new session id"));
        }
        assert_eq!(
            send(BOB, None).await.0,
            200,
            "Bob's token is good on its own"
        );
        for (n, id) in ids.iter().enumerate() {
            let (status, _, body) = send(BOB, Some(id.clone())).await;
            assert_eq!(
                status, 403,
                "Bob got into Alice's live session #{n} of {opened}: {body}"
            );
            assert!(body.starts_with("Forbidden"), "{body}");
            let (status, _, body) = send(ALICE, Some(id.clone())).await;
            assert_eq!((status, body.as_str()), (200, "alice"), "session #{n}");
        }
    }
}
