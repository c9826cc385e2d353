//! `auth`: how HTTP clients authenticate (bearer tokens, OAuth access
//! tokens) and the per-principal limits.

use codemode_runtime::config_reader::{Section, Strictness, integer_in, join};
use codemode_runtime::{ConfigError, Diagnostic};
use serde_json::Value;

use crate::config::reader::{Fields, Secret, error, expand, section};
use crate::config::servers::is_loopback_http;

/// One of `auth.bearerTokens`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerToken {
    /// The principal it stands for (`name`, else `token-<n>` by position).
    pub name: String,
    /// The token (at least 16 bytes).
    pub token: Secret,
}

/// `auth.oauth`: the gateway as an OAuth 2.1 protected resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthResource {
    /// The authorization server (`iss` of accepted tokens).
    pub issuer: String,
    /// This gateway's MCP endpoint as clients reach it
    /// (`https://gw.example.com/mcp`): the audience tokens must name.
    pub resource: String,
    /// Where the issuer's keys are; found through the issuer's metadata
    /// when absent.
    pub jwks_uri: Option<String>,
}

/// `auth`: who may use the HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `bearerTokens`.
    pub bearer_tokens: Vec<BearerToken>,
    /// `oauth`.
    pub oauth: Option<OAuthResource>,
    /// `maxConcurrentExecs`: `exec`/`wait` calls one principal may run at
    /// once, over all its sessions (default 32).
    pub max_concurrent_execs: usize,
    /// `maxSuspendedRuns`: waiting runs one principal may hold, over all
    /// its sessions (default 256, the runtime's per-session bound).
    pub max_suspended_runs: usize,
}

const AUTH: Section = section(
    &[
        "bearerTokens",
        "maxConcurrentExecs",
        "maxSuspendedRuns",
        "oauth",
    ],
    Strictness::Guarded,
);
const BEARER_TOKEN: Section = section(&["name", "token"], Strictness::Guarded);
const OAUTH: Section = section(&["issuer", "resource", "jwksUri"], Strictness::Guarded);

/// The shortest bearer token accepted (a guessable token is no auth).
pub const MIN_BEARER_TOKEN_BYTES: usize = 16;
const DEFAULT_MAX_CONCURRENT_EXECS: usize = 32;
const DEFAULT_MAX_SUSPENDED_RUNS: usize = 256;

pub(crate) fn parse_auth(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<AuthConfig> {
    let Some(object) = value.as_object() else {
        errors.push(error(
            "auth",
            "expected an object like { bearerTokens: [\"${CODEMODE_TOKEN}\"] }",
        ));
        return None;
    };
    AUTH.check("auth", object, errors, diagnostics);
    let before = errors.len();
    let mut count = |key: &str, default: usize, max: u64| match object.get(key) {
        None => default,
        Some(value) => match integer_in(&join("auth", key), value, 1..=max, "an integer") {
            Ok(n) => usize::try_from(n).unwrap_or(default),
            Err(e) => {
                errors.push(e);
                default
            }
        },
    };
    let max_concurrent_execs = count("maxConcurrentExecs", DEFAULT_MAX_CONCURRENT_EXECS, 4096);
    let max_suspended_runs = count("maxSuspendedRuns", DEFAULT_MAX_SUSPENDED_RUNS, 65536);
    let oauth = object
        .get("oauth")
        .and_then(|value| parse_oauth(value, env, errors, diagnostics));
    let empty = Vec::new();
    let items = match object.get("bearerTokens") {
        Some(Value::Array(items)) => items,
        None if object.contains_key("oauth") => &empty,
        _ => {
            errors.push(error(
                "auth.bearerTokens",
                "expected an array of tokens (\"${NAME}\" or { name, token }), or `auth.oauth`",
            ));
            return None;
        }
    };
    if items.is_empty() && !object.contains_key("oauth") {
        errors.push(error(
            "auth.bearerTokens",
            "no tokens: nobody could connect; add one, or remove `auth` to run without authentication (loopback only)",
        ));
    }
    let mut tokens: Vec<BearerToken> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(token) = parse_bearer_token(i, item, &tokens, env, errors, diagnostics) {
            tokens.push(token);
        }
    }
    (errors.len() == before).then_some(AuthConfig {
        bearer_tokens: tokens,
        oauth,
        max_concurrent_execs,
        max_suspended_runs,
    })
}

/// One `auth.bearerTokens[i]` entry, checked against the `tokens` before
/// it; `None` after reporting why it cannot be used.
fn parse_bearer_token(
    i: usize,
    item: &Value,
    tokens: &[BearerToken],
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<BearerToken> {
    let path = format!("auth.bearerTokens[{i}]");
    let (name, raw) = match item {
        Value::String(token) => (format!("token-{}", i + 1), token.clone()),
        Value::Object(entry) => {
            BEARER_TOKEN.check(&path, entry, errors, diagnostics);
            match (entry.get("name"), entry.get("token")) {
                (Some(Value::String(name)), Some(Value::String(token))) => {
                    if let Err(message) = check_token_name(name) {
                        errors.push(error(&join(&path, "name"), &message));
                        return None;
                    }
                    (name.clone(), token.clone())
                }
                _ => {
                    errors.push(error(
                        &path,
                        "expected { name: \"alice\", token: \"${ALICE_TOKEN}\" } (a name of 1 to 128 bytes and a token)",
                    ));
                    return None;
                }
            }
        }
        _ => {
            errors.push(error(&path, "expected a token string or { name, token }"));
            return None;
        }
    };
    let token = match expand(&raw, env) {
        Ok(token) => token,
        Err(message) => {
            errors.push(ConfigError { path, message });
            return None;
        }
    };
    // Never echo the token itself: it is a secret.
    if let Some(problem) = unusable_token(&token) {
        errors.push(ConfigError {
            path,
            message: format!(
                "the token {problem}, so no client could ever send it in an `Authorization: Bearer` header; use a long random value (e.g. `openssl rand -hex 32`)"
            ),
        });
        return None;
    }
    if token.len() < MIN_BEARER_TOKEN_BYTES {
        errors.push(ConfigError {
            path,
            message: format!(
                "the token is shorter than {MIN_BEARER_TOKEN_BYTES} bytes; use a long random value (e.g. `openssl rand -hex 32`)"
            ),
        });
        return None;
    }
    if tokens.iter().any(|t| t.name == name) {
        errors.push(ConfigError {
            path,
            message: format!("the name `{name}` is used by another token"),
        });
        return None;
    }
    if tokens.iter().any(|t| t.token.expose() == token) {
        errors.push(ConfigError {
            path,
            message: "the same token is listed twice".into(),
        });
        return None;
    }
    Some(BearerToken {
        name,
        token: Secret::new(token),
    })
}

/// Why a bearer token's name cannot be used: it names the principal in
/// logs, metrics and run ownership, so it is one printable line, and it
/// has no `:` — OAuth principals are `oauth:<subject>`, and a token named
/// `oauth:alice` would own (and resume) the runs of OAuth user `alice`.
fn check_token_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() || name.len() > 128 {
        Err("expected a name of 1 to 128 bytes, like \"alice\"".into())
    } else if name.chars().any(char::is_control) {
        Err("the name has control characters (a newline would forge lines in the log); use one printable line".into())
    } else if name.contains(':') {
        Err("the name has `:`, which separates a principal's kind (`oauth:<subject>` is an OAuth user); use a plain name like \"ci-bot\"".into())
    } else if name.trim() != name {
        Err("the name starts or ends with whitespace".into())
    } else {
        Ok(())
    }
}

/// What makes a token impossible to present: a client sends
/// `Authorization: Bearer <token>`, which the gateway reads as one trimmed
/// run of visible ASCII.
fn unusable_token(token: &str) -> Option<&'static str> {
    if token.chars().any(|c| c.is_control()) {
        Some("has control characters")
    } else if token.chars().any(char::is_whitespace) {
        Some("has whitespace")
    } else if !token.is_ascii() {
        Some("has characters outside ASCII")
    } else {
        None
    }
}

fn parse_oauth(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<OAuthResource> {
    let path = "auth.oauth";
    let Some(object) = value.as_object() else {
        errors.push(error(
            path,
            "expected { issuer: \"https://auth.example.com\", resource: \"https://gw.example.com/mcp\" }",
        ));
        return None;
    };
    OAUTH.check(path, object, errors, diagnostics);
    let before = errors.len();
    let mut fields = Fields {
        path,
        object,
        env,
        errors,
    };
    let url = |fields: &mut Fields<'_>, key: &str, required: bool| match fields.string(key) {
        // Plain http would let anyone on the path serve their own keys.
        Some(u) if u.starts_with("https://") || is_loopback_http(&u) => Some(u),
        Some(_) => {
            fields.fail(
                key,
                "expected an https:// URL (plain http:// only on a loopback address, for tests)",
            );
            None
        }
        None => {
            if required {
                fields.fail(key, "required");
            }
            None
        }
    };
    let issuer = url(&mut fields, "issuer", true);
    let resource = url(&mut fields, "resource", true);
    let jwks_uri = url(&mut fields, "jwksUri", false);
    if errors.len() > before {
        return None;
    }
    Some(OAuthResource {
        issuer: issuer?,
        resource: resource?,
        jwks_uri,
    })
}
