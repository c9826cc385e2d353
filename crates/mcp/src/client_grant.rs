//! An upstream's client-credentials grant (`oauth.clientCredentials`):
//! with a client secret, exchanged by the SDK; or with a private key
//! (`private_key_jwt`, RFC 7523 §2.2): each token request carries a fresh
//! JWT assertion signed here (`iss` = `sub` = the client id, `aud` = the
//! authorization server's issuer, five minutes, a random `jti`), and the
//! token goes into the connection's credential store. The scopes grow
//! when the server asks for more ([`ClientGrant::widen`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::transport::auth::{
    AuthorizationManager, ClientCredentialsConfig, CredentialStore as _, InMemoryCredentialStore,
    OAuthState, OAuthTokenResponse, StoredCredentials,
};

use crate::config::ClientAuthentication;

/// How long a signed assertion is valid.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(300);
const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// One upstream's grant as it stands.
#[derive(Clone)]
pub(crate) enum ClientGrant {
    Secret(ClientCredentialsConfig),
    PrivateKeyJwt(Box<JwtGrant>),
}

/// A `private_key_jwt` grant; the token endpoint is known once the
/// authorization server's metadata is ([`ClientGrant::prepare`]).
#[derive(Clone)]
pub(crate) struct JwtGrant {
    client_id: String,
    key: jsonwebtoken::EncodingKey,
    algorithm: jsonwebtoken::Algorithm,
    scopes: Vec<String>,
    resource: String,
    token_endpoint: String,
    audience: String,
    store: InMemoryCredentialStore,
}

impl ClientGrant {
    /// The grant `authentication` describes, for the resource `url`.
    pub(crate) fn new(
        client_id: &str,
        authentication: &ClientAuthentication,
        scopes: &[String],
        url: &str,
    ) -> Result<ClientGrant, String> {
        match authentication {
            ClientAuthentication::Secret(secret) => {
                Ok(ClientGrant::Secret(ClientCredentialsConfig::ClientSecret {
                    client_id: client_id.to_owned(),
                    client_secret: secret.expose().to_owned(),
                    scopes: scopes.to_vec(),
                    resource: Some(url.to_owned()),
                }))
            }
            ClientAuthentication::PrivateKeyJwt {
                private_key,
                algorithm,
            } => {
                let (key, algorithm) = signing_key(private_key.expose(), algorithm.as_deref())?;
                Ok(ClientGrant::PrivateKeyJwt(Box::new(JwtGrant {
                    client_id: client_id.to_owned(),
                    key,
                    algorithm,
                    scopes: scopes.to_vec(),
                    resource: url.to_owned(),
                    token_endpoint: String::new(),
                    audience: String::new(),
                    store: InMemoryCredentialStore::new(),
                })))
            }
        }
    }

    /// The scopes asked for.
    pub(crate) fn scopes(&self) -> &[String] {
        match self {
            ClientGrant::Secret(ClientCredentialsConfig::ClientSecret { scopes, .. }) => scopes,
            ClientGrant::PrivateKeyJwt(grant) => &grant.scopes,
            #[allow(unreachable_patterns, reason = "other grants behind SDK features")]
            ClientGrant::Secret(_) => &[],
        }
    }

    /// The same grant asking for `more` scopes too.
    pub(crate) fn widen(&self, more: &[String]) -> ClientGrant {
        let mut widened = self.clone();
        let scopes = match &mut widened {
            ClientGrant::Secret(ClientCredentialsConfig::ClientSecret { scopes, .. }) => scopes,
            ClientGrant::PrivateKeyJwt(grant) => &mut grant.scopes,
            #[allow(unreachable_patterns, reason = "other grants behind SDK features")]
            ClientGrant::Secret(_) => return widened,
        };
        for scope in more {
            if !scopes.contains(scope) {
                scopes.push(scope.clone());
            }
        }
        widened
    }

    /// The first token: finds the authorization server from the resource
    /// `url` (RFC 9728, RFC 8414) and exchanges the grant; the manager
    /// then holds the token.
    pub(crate) async fn authorize(&mut self, url: &str) -> Result<AuthorizationManager, String> {
        match self {
            ClientGrant::Secret(config) => {
                let mut state = OAuthState::new(url, None)
                    .await
                    .map_err(|e| format!("preparing the OAuth client failed: {e}"))?;
                state
                    .authenticate_client_credentials(config.clone())
                    .await
                    .map_err(|e| format!("getting an access token failed: {e}"))?;
                state
                    .into_authorization_manager()
                    .ok_or_else(|| "no authorization after the token exchange".to_owned())
            }
            ClientGrant::PrivateKeyJwt(grant) => {
                let mut manager = AuthorizationManager::new(url)
                    .await
                    .map_err(|e| format!("preparing the OAuth client failed: {e}"))?;
                let metadata = manager
                    .resolve_metadata()
                    .await
                    .map_err(|e| format!("finding the authorization server failed: {e}"))?
                    .metadata;
                grant.token_endpoint = metadata.token_endpoint.clone();
                // RFC 7523: the audience identifies the authorization
                // server: its issuer, or (without one) the token endpoint.
                grant.audience = metadata
                    .issuer
                    .clone()
                    .unwrap_or_else(|| metadata.token_endpoint.clone());
                manager.set_metadata(metadata);
                grant
                    .exchange()
                    .await
                    .map_err(|e| format!("getting an access token failed: {e}"))?;
                manager.set_credential_store(grant.store.clone());
                Ok(manager)
            }
        }
    }

    /// Gets a new access token with this grant into `manager`.
    pub(crate) async fn exchange(
        &self,
        manager: &tokio::sync::Mutex<AuthorizationManager>,
    ) -> Result<(), String> {
        match self {
            ClientGrant::Secret(config) => manager
                .lock()
                .await
                .exchange_client_credentials(config)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            ClientGrant::PrivateKeyJwt(grant) => grant.exchange().await,
        }
    }
}

impl JwtGrant {
    async fn exchange(&self) -> Result<(), String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = serde_json::json!({
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": self.audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME.as_secs(),
            "jti": oauth2::CsrfToken::new_random().into_secret(),
        });
        let assertion = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(self.algorithm),
            &claims,
            &self.key,
        )
        .map_err(|e| format!("signing the client assertion failed: {e}"))?;
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("client_id", self.client_id.clone()),
            ("client_assertion_type", ASSERTION_TYPE.to_owned()),
            ("client_assertion", assertion),
            ("resource", self.resource.clone()),
        ];
        if !self.scopes.is_empty() {
            form.push(("scope", self.scopes.join(" ")));
        }
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let response = crate::upstream_http::reqwest_client()
            .post(&self.token_endpoint)
            .header(http::header::ACCEPT, "application/json")
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| format!("the token request to {} failed: {e}", self.token_endpoint))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("reading the token response failed: {e}"))?;
        if !status.is_success() {
            // The server's `error` and description; never the assertion.
            let said: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let error = said
                .get("error")
                .and_then(|v| v.as_str())
                .unwrap_or("no error code");
            let description = said
                .get("error_description")
                .and_then(|v| v.as_str())
                .map(|d| format!(" ({})", d.chars().take(200).collect::<String>()))
                .unwrap_or_default();
            return Err(format!(
                "the authorization server refused the token request: {status} {error}{description}"
            ));
        }
        let token: OAuthTokenResponse = serde_json::from_slice(&body)
            .map_err(|e| format!("the token response is not an OAuth token: {e}"))?;
        self.store
            .save(StoredCredentials::new(
                self.client_id.clone(),
                Some(token),
                self.scopes.clone(),
                Some(now),
            ))
            .await
            .map_err(|e| e.to_string())
    }
}

/// The key of a PEM text and the algorithm to sign with (named, or the
/// usual one of the key's kind).
fn signing_key(
    pem: &str,
    named: Option<&str>,
) -> Result<(jsonwebtoken::EncodingKey, jsonwebtoken::Algorithm), String> {
    use jsonwebtoken::{Algorithm, EncodingKey};
    let algorithm = match named {
        None => None,
        Some("RS256") => Some(Algorithm::RS256),
        Some("RS384") => Some(Algorithm::RS384),
        Some("RS512") => Some(Algorithm::RS512),
        Some("ES256") => Some(Algorithm::ES256),
        Some("ES384") => Some(Algorithm::ES384),
        Some(other) => return Err(format!("unknown signingAlgorithm {other:?}")),
    };
    let rsa = || EncodingKey::from_rsa_pem(pem.as_bytes());
    let ec = || EncodingKey::from_ec_pem(pem.as_bytes());
    let unreadable = "`privateKey` is not a PEM RSA or EC private key (PKCS#8 `BEGIN PRIVATE KEY`, or `BEGIN RSA PRIVATE KEY` / `BEGIN EC PRIVATE KEY`)";
    match algorithm {
        Some(a @ (Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512)) => rsa()
            .map(|key| (key, a))
            .map_err(|_| format!("{unreadable} for {a:?}")),
        Some(a) => ec()
            .map(|key| (key, a))
            .map_err(|_| format!("{unreadable} for {a:?}")),
        None => match rsa() {
            Ok(key) => Ok((key, Algorithm::RS256)),
            Err(_) => ec()
                .map(|key| (key, Algorithm::ES256))
                .map_err(|_| unreadable.to_owned()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A P-256 key made for this test only (openssl genpkey -algorithm EC
    // -pkeyopt ec_paramgen_curve:P-256).
    const EC_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgrUPtIgGm+Jw/3dnZ
UIv3VQ+v65Hl9tOhYx1jBeF3+tOhRANCAASRoCTlGeEZRfEw3tHm3QaSSUR6Trzw
DJdHE7za5BaJ/0Q6beGFVmuFDql+MRpmL4KTGltBXvGR8k79/8Ok7ltL
-----END PRIVATE KEY-----";

    #[test]
    fn an_ec_key_signs_es256_by_default_and_rsa_names_are_refused_for_it() {
        let (_, algorithm) = signing_key(EC_KEY, None).unwrap();
        assert_eq!(algorithm, jsonwebtoken::Algorithm::ES256);
        let err = signing_key(EC_KEY, Some("RS256")).err().unwrap();
        assert!(err.contains("not a PEM RSA or EC private key"), "{err}");
        let err = signing_key("not a key", None).err().unwrap();
        assert!(err.contains("privateKey"), "{err}");
        assert!(
            !err.contains("not a key"),
            "the key text is never echoed: {err}"
        );
    }

    #[test]
    fn widening_adds_each_scope_once() {
        let grant = ClientGrant::new(
            "c",
            &ClientAuthentication::Secret(crate::config::Secret::new("s")),
            &["a".into()],
            "https://x/mcp",
        )
        .unwrap();
        let widened = grant.widen(&["a".into(), "b".into()]);
        assert_eq!(widened.scopes(), ["a", "b"]);
        assert_eq!(grant.scopes(), ["a"]);
    }
}
