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
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    // P-256 keys (PKCS#8) made for these tests only, and their public
    // coordinates as a JWK gives them.
    const KEY_A: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgA0wD05v8+P/z4fwM
TJKlDkieR/+1zD2nJC0ZvtO7DJahRANCAASM6fykK4GuiFQiKulItcZweR+3nhm0
He75gygygVrWaVAf+hlT1SUrIRvh89vvBLJNPluOxVyB+d71OlQKJiJ3
-----END PRIVATE KEY-----
";
    const KEY_A_XY: (&str, &str) = (
        "jOn8pCuBrohUIirpSLXGcHkft54ZtB3u-YMoMoFa1mk",
        "UB_6GVPVJSshG-Hz2-8Esk0-W47FXIH53vU6VAomInc",
    );
    const KEY_B: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjFJUvm1AXsUYem9G
z8wlSqLLZ1bslqarnG6Hb3ceGOShRANCAATRwiiqL6OqmuUDfL8jOQL6uaTgAJe/
kOQdDmFBtMKem7R63aBR9glDRFHXKn4FWavKCU4WvUBU6gVOs/Jc3w9l
-----END PRIVATE KEY-----
";
    const KEY_B_XY: (&str, &str) = (
        "0cIoqi-jqprlA3y_IzkC-rmk4ACXv5DkHQ5hQbTCnps",
        "tHrdoFH2CUNEUdcqfgVZq8oJTha9QFTqBU6z8lzfD2U",
    );

    const RESOURCE: &str = "https://gw.example.com/mcp";

    /// An authorization server on a loopback port. Under `/a` it publishes
    /// RFC 8414 metadata (and an OpenID configuration pointing nowhere,
    /// which must not be read); under `/b` only an OpenID configuration
    /// (its RFC 8414 document lacks `jwks_uri`); under `/c` neither. Every
    /// `…/jwks` serves `jwks`, or fails while `failing`, or answers
    /// something that is not a JWK set while `garbled`.
    struct Issuer {
        base: String,
        jwks: Arc<std::sync::Mutex<Value>>,
        fetches: Arc<AtomicUsize>,
        failing: Arc<AtomicBool>,
        garbled: Arc<AtomicBool>,
    }

    impl Issuer {
        async fn start(keys: Vec<Value>) -> Issuer {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let issuer = Issuer {
                base: base.clone(),
                jwks: Arc::new(std::sync::Mutex::new(json!({ "keys": keys }))),
                fetches: Arc::default(),
                failing: Arc::default(),
                garbled: Arc::default(),
            };
            let (jwks, fetches, failing, garbled) = (
                Arc::clone(&issuer.jwks),
                Arc::clone(&issuer.fetches),
                Arc::clone(&issuer.failing),
                Arc::clone(&issuer.garbled),
            );
            let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
                let (jwks, fetches, failing, garbled, base) = (
                    Arc::clone(&jwks),
                    Arc::clone(&fetches),
                    Arc::clone(&failing),
                    Arc::clone(&garbled),
                    base.clone(),
                );
                async move {
                    use axum::http::StatusCode;
                    let path = uri.path();
                    if path.ends_with("/jwks") {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        if failing.load(Ordering::SeqCst) {
                            return (StatusCode::INTERNAL_SERVER_ERROR, String::new());
                        }
                        if garbled.load(Ordering::SeqCst) {
                            return (StatusCode::OK, "<html>keys</html>".into());
                        }
                        return (StatusCode::OK, jwks.lock().unwrap().to_string());
                    }
                    let document = match path {
                        "/a/.well-known/oauth-authorization-server" => {
                            json!({ "jwks_uri": format!("{base}/a/jwks") })
                        }
                        "/a/.well-known/openid-configuration" => {
                            json!({ "jwks_uri": "http://127.0.0.1:9/nowhere" })
                        }
                        "/b/.well-known/oauth-authorization-server" => {
                            json!({ "issuer": format!("{base}/b") })
                        }
                        "/b/.well-known/openid-configuration" => {
                            json!({ "jwks_uri": format!("{base}/b/jwks") })
                        }
                        _ => return (StatusCode::NOT_FOUND, String::new()),
                    };
                    (StatusCode::OK, document.to_string())
                }
            });
            tokio::spawn(async move { axum::serve(listener, app).await });
            issuer
        }

        /// A validator trusting this server as issuer `path` (`/a`…),
        /// with its keys at `/a/jwks` or found through discovery.
        fn validator(&self, path: &str, discover: bool) -> TokenValidator {
            let issuer = format!("{}{path}", self.base);
            TokenValidator::new(OAuthResource {
                jwks_uri: (!discover).then(|| format!("{issuer}/jwks")),
                issuer,
                resource: RESOURCE.into(),
            })
        }

        fn fetches(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }
    }

    fn jwk(kid: Option<&str>, (x, y): (&str, &str), alg: Option<&str>) -> Value {
        let mut key = json!({ "kty": "EC", "crv": "P-256", "x": x, "y": y, "use": "sig" });
        if let Some(kid) = kid {
            key["kid"] = kid.into();
        }
        if let Some(alg) = alg {
            key["alg"] = alg.into();
        }
        key
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    /// Claims of a token issuer `iss` gave alice for this resource, valid
    /// five more minutes.
    fn claims(iss: &str) -> Value {
        json!({ "iss": iss, "aud": RESOURCE, "sub": "alice", "exp": now() + 300 })
    }

    fn claims_for(server: &Issuer) -> Value {
        claims(&format!("{}/a", server.base))
    }

    fn signed(key: &str, kid: Option<&str>, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_owned);
        let key = jsonwebtoken::EncodingKey::from_ec_pem(key.as_bytes()).unwrap();
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }

    #[tokio::test]
    async fn a_token_is_accepted_only_signed_by_the_issuer_for_this_resource_in_its_time() {
        let server = Issuer::start(vec![jwk(Some("a"), KEY_A_XY, Some("ES256"))]).await;
        let validator = server.validator("/a", false);
        let iss = format!("{}/a", server.base);
        let with = |change: &dyn Fn(&mut Value)| {
            let mut claims = claims(&iss);
            change(&mut claims);
            signed(KEY_A, Some("a"), &claims)
        };
        assert_eq!(
            validator.validate(&with(&|_| {})).await,
            Ok(Principal("oauth:alice".into()))
        );
        // 30 s of clock skew are forgiven, not more.
        for (change, expected) in [
            (json!({ "exp": now() - 10 }), Ok(())),
            (json!({ "exp": now() - 120 }), Err("the token has expired")),
            (json!({ "nbf": now() + 10 }), Ok(())),
            (
                json!({ "nbf": now() + 120 }),
                Err("the token is not valid yet"),
            ),
            (
                json!({ "aud": "https://other.example.com/mcp" }),
                Err("the token is for another resource (aud)"),
            ),
            (
                json!({ "iss": "https://evil.example.com" }),
                Err("the token is from another issuer (iss)"),
            ),
            (json!({ "sub": "" }), Err("the token has no subject")),
            (json!({ "sub": null }), Err("the token has no `sub` claim")),
            (json!({ "exp": null }), Err("the token has no `exp` claim")),
            (json!({ "aud": null }), Err("the token has no `aud` claim")),
            (json!({ "iss": null }), Err("the token has no `iss` claim")),
        ] {
            let token = with(&|claims| {
                for (name, value) in change.as_object().unwrap() {
                    match value {
                        Value::Null => claims.as_object_mut().unwrap().remove(name),
                        value => claims
                            .as_object_mut()
                            .unwrap()
                            .insert(name.clone(), value.clone()),
                    };
                }
            });
            let got = validator.validate(&token).await;
            match expected {
                Ok(()) => assert_eq!(got, Ok(Principal("oauth:alice".into())), "{change}"),
                Err(why) => assert_eq!(got, Err(why.to_owned()), "{change}"),
            }
        }
        // Another key under the issuer's key id.
        assert_eq!(
            validator
                .validate(&signed(KEY_B, Some("a"), &claims(&iss)))
                .await,
            Err("the token's signature does not verify".into())
        );
        // A shared secret would let anyone holding it mint tokens.
        let hs256 = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(Algorithm::HS256),
            &claims(&iss),
            &jsonwebtoken::EncodingKey::from_secret(b"guessable"),
        )
        .unwrap();
        assert_eq!(
            validator.validate(&hs256).await,
            Err("algorithm HS256 is not accepted (asymmetric signatures only)".into())
        );
        let err = validator.validate("opaque-token").await.unwrap_err();
        assert!(err.starts_with("not a JWT access token: "), "{err}");
        // One fetch served every check: known keys are cached, and still
        // trusted past the refetch interval.
        tokio::time::sleep(REFETCH_AT_MOST_EVERY + Duration::from_millis(100)).await;
        assert_eq!(
            validator.validate(&with(&|_| {})).await,
            Ok(Principal("oauth:alice".into()))
        );
        assert_eq!(server.fetches(), 1);
    }

    #[tokio::test]
    async fn a_new_key_id_fetches_the_keys_again_at_most_every_two_seconds() {
        let server = Issuer::start(vec![jwk(Some("a"), KEY_A_XY, Some("ES256"))]).await;
        let validator = server.validator("/a", false);
        let claims = claims(&format!("{}/a", server.base));
        let rotated = signed(KEY_B, Some("b"), &claims);
        assert_eq!(
            validator.validate(&rotated).await,
            Err("the issuer has no key `b`".into())
        );
        assert_eq!(server.fetches(), 1);
        // The issuer rotates; a client making up key ids right after the
        // last fetch does not make the gateway fetch again.
        server.jwks.lock().unwrap().as_object_mut().unwrap().insert(
            "keys".into(),
            json!([
                jwk(Some("a"), KEY_A_XY, Some("ES256")),
                jwk(Some("b"), KEY_B_XY, Some("ES256"))
            ]),
        );
        for kid in ["b", "made-up"] {
            assert_eq!(
                validator.validate(&signed(KEY_B, Some(kid), &claims)).await,
                Err(format!("the issuer has no key `{kid}`"))
            );
        }
        assert_eq!(server.fetches(), 1);
        tokio::time::sleep(REFETCH_AT_MOST_EVERY + Duration::from_millis(100)).await;
        assert_eq!(
            validator.validate(&rotated).await,
            Ok(Principal("oauth:alice".into()))
        );
        assert_eq!(
            validator.validate(&signed(KEY_A, Some("a"), &claims)).await,
            Ok(Principal("oauth:alice".into()))
        );
        assert_eq!(server.fetches(), 2);
    }

    #[tokio::test]
    async fn keys_of_the_wrong_algorithm_or_kind_are_skipped_and_tokens_without_a_key_id_try_the_rest()
     {
        // A key without `alg` is taken for its kind's usual one (ES256 for
        // a P-256 key); a key published for ES384 does not check ES256
        // tokens; an entry that is no key at all is skipped.
        let server = Issuer::start(vec![
            jwk(None, KEY_A_XY, None),
            jwk(Some("b"), KEY_B_XY, Some("ES384")),
            json!({ "kty": "EC", "crv": "P-256", "kid": "broken", "x": "!!", "y": "!!" }),
        ])
        .await;
        let validator = server.validator("/a", false);
        let claims = claims_for(&server);
        assert_eq!(
            validator.validate(&signed(KEY_A, None, &claims)).await,
            Ok(Principal("oauth:alice".into()))
        );
        assert_eq!(
            validator.validate(&signed(KEY_B, None, &claims)).await,
            Err("the token's signature does not verify".into())
        );
        assert_eq!(
            validator.validate(&signed(KEY_B, Some("b"), &claims)).await,
            Err("no key of the issuer matches".into())
        );
        // Keys with ids serve tokens without one too.
        let server = Issuer::start(vec![jwk(Some("b"), KEY_B_XY, Some("ES256"))]).await;
        let validator = server.validator("/a", false);
        let claims = claims_for(&server);
        assert_eq!(
            validator.validate(&signed(KEY_B, None, &claims)).await,
            Ok(Principal("oauth:alice".into()))
        );
        // An issuer with no usable key at all.
        let server = Issuer::start(vec![]).await;
        let validator = server.validator("/a", false);
        assert_eq!(
            validator
                .validate(&signed(KEY_A, None, &claims_for(&server)))
                .await,
            Err("the issuer publishes no usable key".into())
        );
    }

    #[tokio::test]
    async fn the_keys_are_found_through_the_issuers_metadata_first_rfc_8414_then_openid() {
        let server = Issuer::start(vec![jwk(Some("a"), KEY_A_XY, Some("ES256"))]).await;
        for path in ["/a", "/b"] {
            let validator = server.validator(path, true);
            let claims = claims(&format!("{}{path}", server.base));
            assert_eq!(
                validator.validate(&signed(KEY_A, Some("a"), &claims)).await,
                Ok(Principal("oauth:alice".into())),
                "{path}"
            );
        }
        let validator = server.validator("/c", true);
        let claims = claims(&format!("{}/c", server.base));
        assert_eq!(
            validator.validate(&signed(KEY_A, Some("a"), &claims)).await,
            Err(format!(
                "the issuer {}/c publishes no jwks_uri (neither /.well-known/oauth-authorization-server nor /.well-known/openid-configuration); set auth.oauth.jwksUri",
                server.base
            ))
        );
    }

    #[tokio::test]
    async fn known_keys_outlive_an_issuer_that_cannot_be_reached_and_none_are_invented() {
        let server = Issuer::start(vec![jwk(Some("a"), KEY_A_XY, Some("ES256"))]).await;
        let claims = claims(&format!("{}/a", server.base));
        let token = signed(KEY_A, Some("a"), &claims);
        // Never fetched, and the issuer fails or garbles: nothing to trust.
        for (trouble, why) in [
            (
                &server.failing,
                format!(
                    "fetching the issuer's keys from {}/a/jwks failed: ",
                    server.base
                ),
            ),
            (
                &server.garbled,
                format!(
                    "the issuer's keys at {}/a/jwks are not a JWK set: ",
                    server.base
                ),
            ),
        ] {
            trouble.store(true, Ordering::SeqCst);
            let err = server
                .validator("/a", false)
                .validate(&token)
                .await
                .unwrap_err();
            assert!(err.starts_with(&why), "{err}");
            trouble.store(false, Ordering::SeqCst);
        }
        // Known keys, then grown old while the issuer is down: they keep
        // working (a failed refresh must not lock everyone out), and the
        // refresh is tried again at most every two seconds.
        let validator = server.validator("/a", false);
        assert_eq!(
            validator.validate(&token).await,
            Ok(Principal("oauth:alice".into()))
        );
        let before = server.fetches();
        server.failing.store(true, Ordering::SeqCst);
        tokio::time::sleep(REFETCH_AT_MOST_EVERY + Duration::from_millis(100)).await;
        validator.keys.write().await.fetched = None;
        for _ in 0..3 {
            assert_eq!(
                validator.validate(&token).await,
                Ok(Principal("oauth:alice".into()))
            );
        }
        assert_eq!(server.fetches(), before + 1);
        // Back up: the next refresh replaces the old keys.
        server.failing.store(false, Ordering::SeqCst);
        *server.jwks.lock().unwrap() = json!({ "keys": [jwk(Some("b"), KEY_B_XY, Some("ES256"))] });
        tokio::time::sleep(REFETCH_AT_MOST_EVERY + Duration::from_millis(100)).await;
        assert_eq!(
            validator.validate(&token).await,
            Err("the issuer has no key `a`".into())
        );
        assert_eq!(server.fetches(), before + 2);
    }

    #[test]
    fn the_metadata_names_the_resource_its_issuer_and_header_tokens() {
        let validator = TokenValidator::new(OAuthResource {
            issuer: "https://as.example.com".into(),
            resource: RESOURCE.into(),
            jwks_uri: None,
        });
        assert_eq!(
            validator.metadata(),
            json!({
                "resource": RESOURCE,
                "authorization_servers": ["https://as.example.com"],
                "bearer_methods_supported": ["header"],
                "resource_name": "codemode MCP gateway",
            })
        );
        assert_eq!(
            validator.metadata_url(),
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
    }

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
        assert_eq!(
            metadata_url("https://gw.example.com/tenant/mcp/?session=1#top"),
            "https://gw.example.com/.well-known/oauth-protected-resource/tenant/mcp"
        );
        // Not a URL (the config check refuses those; never a panic here).
        assert_eq!(
            metadata_url("gw.example.com/mcp/"),
            "gw.example.com/mcp/.well-known/oauth-protected-resource"
        );
    }
}
