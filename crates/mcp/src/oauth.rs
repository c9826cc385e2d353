//! The gateway as an OAuth 2.1 protected resource (MCP authorization,
//! RFC 9728): it serves its protected-resource metadata, and accepts JWT
//! access tokens signed by the configured issuer's keys (its JWKS, fetched,
//! cached, and fetched again for a key id it does not know: key rotation),
//! for this resource (`aud`), unexpired. The token's `sub` is the
//! principal (`oauth:<sub>`). Asymmetric algorithms only.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};
use tokio::sync::RwLock;

use crate::config::OAuthResource;
use crate::principal::Principal;

/// Keys are fetched again at most this often for an unknown key id (a
/// client sending made-up `kid`s cannot make the gateway hammer the issuer).
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(2);
/// Known keys are trusted this long before being fetched again.
const KEYS_TTL: Duration = Duration::from_secs(3600);
/// Clock skew allowed on `exp` / `nbf`.
const LEEWAY_SECONDS: u64 = 30;

const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

struct Keys {
    by_kid: HashMap<String, (DecodingKey, Algorithm)>,
    /// Keys without a `kid` (tried in turn).
    anonymous: Vec<(DecodingKey, Algorithm)>,
    fetched: Option<Instant>,
}

/// Validates access tokens for one resource.
pub(crate) struct TokenValidator {
    config: OAuthResource,
    http: reqwest::Client,
    keys: RwLock<Keys>,
    last_fetch_attempt: Mutex<Option<Instant>>,
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: Option<String>,
}

impl TokenValidator {
    pub(crate) fn new(config: OAuthResource) -> TokenValidator {
        crate::install_tls_provider();
        TokenValidator {
            config,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            keys: RwLock::new(Keys {
                by_kid: HashMap::new(),
                anonymous: Vec::new(),
                fetched: None,
            }),
            last_fetch_attempt: Mutex::new(None),
        }
    }

    /// Where clients read this resource's metadata (RFC 9728: the
    /// well-known path inserted before the resource's path).
    pub(crate) fn metadata_url(&self) -> String {
        metadata_url(&self.config.resource)
    }

    /// The protected-resource metadata document.
    pub(crate) fn metadata(&self) -> Value {
        json!({
            "resource": self.config.resource,
            "authorization_servers": [self.config.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "codemode MCP gateway",
        })
    }

    /// The principal of a valid token, or why it is not valid (for the
    /// log and the `error_description`; never the token itself).
    pub(crate) async fn validate(&self, token: &str) -> Result<Principal, String> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("not a JWT access token: {e}"))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(format!(
                "algorithm {:?} is not accepted (asymmetric signatures only)",
                header.alg
            ));
        }
        let candidates = self.keys_for(header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut last = String::from("no key of the issuer matches");
        for (key, alg) in candidates {
            if alg != header.alg {
                continue;
            }
            match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
                Ok(data) => {
                    let sub = data
                        .claims
                        .sub
                        .filter(|s| !s.is_empty())
                        .ok_or("the token has no subject")?;
                    return Ok(Principal(format!("oauth:{sub}")));
                }
                Err(e) => last = describe(&e),
            }
        }
        Err(last)
    }

    /// The keys a token with `kid` may be signed with, fetching the JWKS
    /// when none is known yet, when it is old, or (rate-limited) when the
    /// id is new.
    async fn keys_for(&self, kid: Option<&str>) -> Result<Vec<(DecodingKey, Algorithm)>, String> {
        let found = |keys: &Keys, fresh_only: bool| -> Option<Vec<(DecodingKey, Algorithm)>> {
            let fresh = keys.fetched.is_some_and(|t| t.elapsed() < KEYS_TTL);
            if fresh_only && !fresh {
                return None;
            }
            match kid {
                Some(kid) => keys.by_kid.get(kid).map(|k| vec![k.clone()]),
                None if !keys.anonymous.is_empty() || !keys.by_kid.is_empty() => Some(
                    keys.anonymous
                        .iter()
                        .chain(keys.by_kid.values())
                        .cloned()
                        .collect(),
                ),
                None => None,
            }
        };
        if let Some(keys) = found(&*self.keys.read().await, true) {
            return Ok(keys);
        }
        let may_fetch = {
            let mut last = self
                .last_fetch_attempt
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let ok = last.is_none_or(|t| t.elapsed() >= REFETCH_AT_MOST_EVERY);
            if ok {
                *last = Some(Instant::now());
            }
            ok
        };
        if may_fetch {
            match self.fetch().await {
                Ok(fetched) => *self.keys.write().await = fetched,
                // Old keys keep working while the issuer cannot be
                // reached: a failed refresh must not lock everyone out.
                Err(e) => match found(&*self.keys.read().await, false) {
                    Some(stale) => {
                        tracing::warn!(target: "codemode::auth", error = %e, "refreshing the issuer's keys failed; using the ones known");
                        return Ok(stale);
                    }
                    None => return Err(e),
                },
            }
        }
        // Known keys, fresh or not (a refresh is rate-limited).
        found(&*self.keys.read().await, false).ok_or_else(|| match kid {
            Some(kid) => format!("the issuer has no key `{kid}`"),
            None => "the issuer publishes no usable key".into(),
        })
    }

    async fn fetch(&self) -> Result<Keys, String> {
        let jwks_uri = match &self.config.jwks_uri {
            Some(uri) => uri.clone(),
            None => self.discover().await?,
        };
        let set: JwkSet = self
            .http
            .get(&jwks_uri)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("fetching the issuer's keys from {jwks_uri} failed: {e}"))?
            .json()
            .await
            .map_err(|e| format!("the issuer's keys at {jwks_uri} are not a JWK set: {e}"))?;
        let mut keys = Keys {
            by_kid: HashMap::new(),
            anonymous: Vec::new(),
            fetched: Some(Instant::now()),
        };
        for jwk in &set.keys {
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok())
                .unwrap_or(match &jwk.algorithm {
                    jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                    _ => Algorithm::RS256,
                });
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), (key, alg));
                }
                None => keys.anonymous.push((key, alg)),
            }
        }
        tracing::info!(target: "codemode::auth", keys = keys.by_kid.len() + keys.anonymous.len(), %jwks_uri, "fetched the issuer's keys");
        Ok(keys)
    }

    /// The issuer's `jwks_uri`, from its authorization-server metadata
    /// (RFC 8414), else its OpenID configuration.
    async fn discover(&self) -> Result<String, String> {
        let issuer = self.config.issuer.trim_end_matches('/');
        for well_known in [
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
        ] {
            let url = format!("{issuer}{well_known}");
            let Ok(response) = self.http.get(&url).send().await else {
                continue;
            };
            if !response.status().is_success() {
                continue;
            }
            if let Ok(meta) = response.json::<Value>().await
                && let Some(uri) = meta.get("jwks_uri").and_then(Value::as_str)
            {
                return Ok(uri.to_owned());
            }
        }
        Err(format!(
            "the issuer {issuer} publishes no jwks_uri (neither /.well-known/oauth-authorization-server nor /.well-known/openid-configuration); set auth.oauth.jwksUri"
        ))
    }
}

fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet".into(),
        ErrorKind::InvalidAudience => "the token is for another resource (aud)".into(),
        ErrorKind::InvalidIssuer => "the token is from another issuer (iss)".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        other => format!("the token is not valid: {other:?}"),
    }
}

/// RFC 9728 §3.1: `https://host/mcp` → `https://host/.well-known/oauth-protected-resource/mcp`.
pub(crate) fn metadata_url(resource: &str) -> String {
    match reqwest::Url::parse(resource) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            let mut base = url.clone();
            base.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
            base.set_query(None);
            base.set_fragment(None);
            base.to_string()
        }
        Err(_) => format!(
            "{}/.well-known/oauth-protected-resource",
            resource.trim_end_matches('/')
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_path() {
        assert_eq!(
            metadata_url("https://gw.example.com/mcp"),
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
    }
}
