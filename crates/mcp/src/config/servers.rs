//! `mcpServers`: how each upstream is reached, its limits and its tool
//! policy globs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use codemode_runtime::OwnerPolicy;
use codemode_runtime::config_reader::{Section, Strictness, join};
use codemode_runtime::{ConfigError, Diagnostic};
use serde_json::Value;

use crate::config::reader::{Fields, Secret, error, section};

/// How to reach one upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment (on top of a small default set: `PATH`,
        /// `HOME`, `USER`, `LOGNAME`, `SHELL`, `TERM`, `LANG`, `TMPDIR`).
        env: BTreeMap<String, Secret>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint URL (`http://` or `https://`).
        url: String,
        /// Extra request headers (e.g. `Authorization`).
        headers: BTreeMap<String, Secret>,
        /// `oauth`: how the gateway gets access tokens for it.
        oauth: Option<UpstreamOAuth>,
    },
}

/// `mcpServers.<name>.oauth`: access tokens for an HTTP upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamOAuth {
    /// `clientCredentials`: the OAuth 2.1 client-credentials grant
    /// (machine to machine); the authorization server is found through the
    /// upstream's protected-resource metadata.
    ClientCredentials {
        /// `clientId`.
        client_id: String,
        /// How the client proves who it is at the token endpoint.
        authentication: ClientAuthentication,
        /// `scopes` to ask for.
        scopes: Vec<String>,
    },
    /// `authorizationCode`: a user's authorization, got once with
    /// `codemode login <server>` (authorization code with PKCE) and kept in
    /// the data directory; the gateway uses and refreshes the stored token.
    AuthorizationCode {
        /// `clientId` of a pre-registered client; without it the client
        /// registers itself (dynamic client registration).
        client_id: Option<String>,
        /// `clientSecret` of a pre-registered confidential client.
        client_secret: Option<Secret>,
        /// `scopes` to ask for (default: what the server advertises).
        scopes: Vec<String>,
        /// `redirectPort`: the loopback port `codemode login` listens on for
        /// the redirect (default: any free port; a pre-registered client
        /// usually needs a fixed one).
        redirect_port: Option<u16>,
        /// `clientMetadataUrl`: the HTTPS URL of this client's metadata
        /// document (a client ID metadata document), used as the client id
        /// where the authorization server supports that, before falling
        /// back to dynamic registration; ignored with `clientId`.
        client_metadata_url: Option<String>,
    },
}

/// How a client-credentials client authenticates to the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAuthentication {
    /// `clientSecret` (a secret: from the environment), sent as
    /// `client_secret_basic` or `client_secret_post`.
    Secret(Secret),
    /// `privateKey`: a PEM private key (RSA or EC; a secret: from the
    /// environment) signing a short-lived JWT assertion per token request
    /// (`private_key_jwt`, RFC 7523).
    PrivateKeyJwt {
        /// The PEM text.
        private_key: Secret,
        /// `signingAlgorithm`: RS256, RS384, RS512, ES256 or ES384
        /// (default: RS256 for an RSA key, ES256 for an EC key).
        algorithm: Option<String>,
    },
}

/// The JWT signing algorithms `signingAlgorithm` takes.
pub const SIGNING_ALGORITHMS: &[&str] = &["RS256", "RS384", "RS512", "ES256", "ES384"];

/// One entry of `mcpServers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The key in `mcpServers`: the middle part of its catalog ids and the
    /// source of its `MCP.<server>` name.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Limit of one tool, resource or prompt request (`timeoutMs`, default
    /// 60 s); past it the call fails with `nested_tool_failed`.
    pub call_timeout: Duration,
    /// Limit of connecting and listing at start (`startupTimeoutMs`,
    /// default 30 s).
    pub startup_timeout: Duration,
    /// What the server is for, as the operator wrote it (`description`):
    /// shown to the model in place of the server's own `instructions`.
    pub description: Option<String>,
    /// Which of its tools exist for code mode (`allowTools` / `denyTools`,
    /// globs over the upstream tool names; deny wins) and which need a
    /// human's approval whatever `approvals.mode` says (`approveTools`).
    /// The others are absent from the catalog, `MCP.<server>` and the
    /// declarations, and are refused even by a guessed name. Applied by
    /// the runtime's [`ToolPolicy::decide`] ([`GatewayConfig::tool_policy`]).
    pub tools: OwnerPolicy,
    /// Which MCP protocol the gateway speaks to it (`protocol`).
    pub protocol: UpstreamProtocol,
}

/// Which protocol the gateway speaks to an upstream (`protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// `"auto"` (default): a session (`initialize`, 2025-11-25) where the
    /// server offers one, as the official clients connect by default; a
    /// server that refuses the handshake is asked `server/discover` and
    /// spoken to statelessly (2026-07-28). A session never loses a feature:
    /// the server can ask its user (elicitation) mid-call.
    #[default]
    Auto,
    /// `"2025-11-25"`: the `initialize` handshake only.
    Session,
    /// `"2026-07-28"`: stateless (`server/discover`) only.
    Stateless,
}

impl UpstreamProtocol {
    /// The config's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamProtocol::Auto => "auto",
            UpstreamProtocol::Session => "2025-11-25",
            UpstreamProtocol::Stateless => "2026-07-28",
        }
    }
}

// An upstream's grant: a typo there fails the login loudly anyway.
const CLIENT_CREDENTIALS: Section = section(
    &[
        "clientId",
        "clientSecret",
        "privateKey",
        "signingAlgorithm",
        "scopes",
    ],
    Strictness::Ordinary,
);
const AUTHORIZATION_CODE: Section = section(
    &[
        "clientId",
        "clientSecret",
        "scopes",
        "redirectPort",
        "clientMetadataUrl",
    ],
    Strictness::Ordinary,
);

/// A client ID metadata document's URL is the client id itself: the
/// authorization server fetches it, so it must be HTTPS with a path.
fn check_client_metadata_url(url: &str) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| {
        "expected the HTTPS URL of this client's metadata document, e.g. \"https://example.com/codemode-client.json\""
    })?;
    if parsed.scheme() != "https" {
        return Err("must be an https:// URL (the authorization server fetches it)");
    }
    if parsed.path() == "/" || parsed.path().is_empty() {
        return Err(
            "needs a path naming the document (e.g. /codemode-client.json), not just the host",
        );
    }
    if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry a fragment or credentials: it is sent as the client id");
    }
    Ok(())
}

const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;
const MAX_SERVER_NAME_BYTES: usize = 64;

fn parse_upstream_oauth(
    value: &Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<UpstreamOAuth> {
    const EXPECTED: &str = "expected { clientCredentials: { clientId: \"...\", clientSecret: \"${SECRET}\" | privateKey: \"${PEM}\", signingAlgorithm?, scopes?: [...] } } or { authorizationCode: { clientId?, clientSecret?, scopes?, redirectPort?, clientMetadataUrl? } }";
    let Value::Object(object) = value else {
        errors.push(error(path, EXPECTED));
        return None;
    };
    // Exactly one grant.
    let mut grants = object.iter();
    let (Some((grant, Value::Object(fields_object))), None) = (grants.next(), grants.next()) else {
        errors.push(error(path, EXPECTED));
        return None;
    };
    let grant = grant.as_str();
    let before = errors.len();
    let grant_path = join(path, grant);
    let mut fields = Fields {
        path: &grant_path,
        object: fields_object,
        env,
        errors,
    };
    let client_id = fields.string("clientId").filter(|s| !s.trim().is_empty());
    let client_secret = fields.string("clientSecret").filter(|s| !s.is_empty());
    let scopes = fields.strings("scopes");
    let oauth = match grant {
        "clientCredentials" => {
            CLIENT_CREDENTIALS.check(&grant_path, fields_object, fields.errors, diagnostics);
            if client_id.is_none() {
                fields.fail(
                    "clientId",
                    "required: the client id registered with the authorization server",
                );
            }
            let private_key = fields.string("privateKey").filter(|s| !s.trim().is_empty());
            let algorithm = fields.string("signingAlgorithm");
            if let Some(algorithm) = &algorithm
                && !SIGNING_ALGORITHMS.contains(&algorithm.as_str())
            {
                fields.fail(
                    "signingAlgorithm",
                    format!("expected one of {}", SIGNING_ALGORITHMS.join(", ")),
                );
            }
            let authentication = match (client_secret, private_key) {
                (Some(secret), None) => ClientAuthentication::Secret(Secret::new(secret)),
                (None, Some(key)) => ClientAuthentication::PrivateKeyJwt {
                    private_key: Secret::new(key),
                    algorithm: algorithm.clone(),
                },
                (Some(_), Some(_)) => {
                    fields.fail(
                        "privateKey",
                        "give either `clientSecret` or `privateKey` (private_key_jwt), not both",
                    );
                    ClientAuthentication::Secret(Secret::new(String::new()))
                }
                (None, None) => {
                    fields.fail(
                        "clientSecret",
                        "required: the client secret (write \"${NAME}\" to read it from the environment), or `privateKey` with a PEM private key for private_key_jwt",
                    );
                    ClientAuthentication::Secret(Secret::new(String::new()))
                }
            };
            if algorithm.is_some()
                && !matches!(authentication, ClientAuthentication::PrivateKeyJwt { .. })
            {
                fields.fail(
                    "signingAlgorithm",
                    "belongs to `privateKey` (private_key_jwt)",
                );
            }
            UpstreamOAuth::ClientCredentials {
                client_id: client_id.clone().unwrap_or_default(),
                authentication,
                scopes,
            }
        }
        "authorizationCode" => {
            AUTHORIZATION_CODE.check(&grant_path, fields_object, fields.errors, diagnostics);
            let redirect_port = fields
                .integer("redirectPort", 1..=u64::from(u16::MAX), "a port number")
                .and_then(|port| u16::try_from(port).ok());
            if client_secret.is_some() && client_id.is_none() {
                fields.fail(
                    "clientSecret",
                    "a client secret belongs to a pre-registered client: set `clientId` too",
                );
            }
            let client_metadata_url = fields.string("clientMetadataUrl");
            if let Some(url) = &client_metadata_url
                && let Err(why) = check_client_metadata_url(url)
            {
                fields.fail("clientMetadataUrl", why);
            }
            UpstreamOAuth::AuthorizationCode {
                client_id,
                client_secret: client_secret.map(Secret::new),
                scopes,
                redirect_port,
                client_metadata_url,
            }
        }
        _ => {
            errors.push(error(path, EXPECTED));
            return None;
        }
    };
    (errors.len() == before).then_some(oauth)
}

/// `http://127.0.0.1...`, `http://[::1]...` or `http://localhost...`.
pub(crate) fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn check_server_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("the server name is empty")
    } else if name.len() > MAX_SERVER_NAME_BYTES {
        Err("the server name is longer than 64 bytes")
    } else if name.contains(':') {
        Err("the server name contains `:`, which separates the parts of a catalog id")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err("the server name contains whitespace or control characters")
    } else {
        Ok(())
    }
}

/// An `mcpServers` entry (configs written for other clients carry keys
/// such as `autoApprove`: they load, with a diagnostic).
const SERVER: Section = section(
    &[
        "oauth",
        "allowTools",
        "denyTools",
        "approveTools",
        "type",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "timeoutMs",
        "startupTimeoutMs",
        "disabled",
        "description",
        "protocol",
    ],
    Strictness::Ordinary,
);

pub(crate) fn parse_server(
    name: &str,
    value: &Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<McpServerConfig> {
    let before = errors.len();
    if let Err(message) = check_server_name(name) {
        errors.push(error(path, message));
    }
    let Some(object) = value.as_object() else {
        errors.push(error(
            path,
            "expected an object with `command` (stdio) or `url` (streamable HTTP)",
        ));
        return None;
    };
    SERVER.check(path, object, errors, diagnostics);
    let mut fields = Fields {
        path,
        object,
        env,
        errors,
    };
    let disabled = match object.get("disabled") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            fields.fail("disabled", "expected a boolean");
            false
        }
    };
    let kind = fields.string("type");
    let command = fields.string("command");
    let url = fields.string("url");
    let call_timeout = fields.millis("timeoutMs", DEFAULT_CALL_TIMEOUT_MS);
    let startup_timeout = fields.millis("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS);
    let description = fields.string("description");
    let protocol = match fields.string("protocol").as_deref() {
        None | Some("auto") => UpstreamProtocol::Auto,
        Some("2025-11-25") => UpstreamProtocol::Session,
        Some("2026-07-28") => UpstreamProtocol::Stateless,
        Some(other) => {
            fields.fail(
                "protocol",
                format!(
                    "unknown protocol \"{}\"; use \"auto\" (default: a session where the server offers one), \"2025-11-25\" (initialize only) or \"2026-07-28\" (stateless only)",
                    other.chars().take(32).collect::<String>()
                ),
            );
            UpstreamProtocol::Auto
        }
    };
    let tools = OwnerPolicy {
        allow: fields.globs("allowTools"),
        deny: fields.globs("denyTools").unwrap_or_default(),
        approve: fields.globs("approveTools").unwrap_or_default(),
    };
    let wants_http = match kind.as_deref() {
        None => url.is_some() && command.is_none(),
        Some("stdio") => false,
        Some("http" | "streamable-http" | "streamableHttp" | "streamable_http") => true,
        Some("sse") => {
            fields.fail(
                "type",
                "the legacy SSE transport is not supported; use the server's streamable-HTTP endpoint (type: \"http\")",
            );
            return None;
        }
        Some(other) => {
            fields.fail(
                "type",
                format!("unknown transport \"{other}\"; use \"stdio\" or \"http\""),
            );
            return None;
        }
    };
    let transport = if wants_http {
        http_transport(&mut fields, path, url, command, diagnostics)?
    } else {
        stdio_transport(&mut fields, path, url, command)?
    };
    if disabled || errors.len() > before {
        return None;
    }
    Some(McpServerConfig {
        name: name.to_owned(),
        transport,
        call_timeout,
        startup_timeout,
        description,
        tools,
        protocol,
    })
}

/// The `url` form of a server entry (streamable HTTP).
fn http_transport(
    fields: &mut Fields<'_>,
    path: &str,
    url: Option<String>,
    command: Option<String>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Transport> {
    let object = fields.object;
    let env = fields.env;
    if command.is_some() {
        fields.fail("command", "an HTTP server has a `url`, not a `command`");
    }
    for key in ["args", "env", "cwd"] {
        if object.contains_key(key) {
            fields.fail(key, "only stdio servers (with `command`) take this");
        }
    }
    let headers = fields.secrets("headers");
    let oauth = object.get("oauth").and_then(|value| {
        parse_upstream_oauth(value, &join(path, "oauth"), env, fields.errors, diagnostics)
    });
    Some(match url {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => Transport::Http {
            url,
            headers,
            oauth,
        },
        Some(_) => {
            fields.fail("url", "expected an http:// or https:// URL");
            return None;
        }
        None => {
            fields.fail("url", "an HTTP server needs a `url`");
            return None;
        }
    })
}

/// The `command` form of a server entry (a child process over stdio).
fn stdio_transport(
    fields: &mut Fields<'_>,
    path: &str,
    url: Option<String>,
    command: Option<String>,
) -> Option<Transport> {
    let object = fields.object;
    if url.is_some() {
        fields.fail(
            "url",
            "a server has either `command` (stdio) or `url` (HTTP), not both",
        );
    }
    if object.contains_key("headers") {
        fields.fail("headers", "only HTTP servers (with `url`) take headers");
    }
    if object.contains_key("oauth") {
        fields.fail("oauth", "only HTTP servers (with `url`) take oauth");
    }
    let args = fields.strings("args");
    let env = fields.secrets("env");
    let cwd = fields.string("cwd").map(PathBuf::from);
    Some(match command {
        Some(command) if !command.trim().is_empty() => Transport::Stdio {
            command,
            args,
            env,
            cwd,
        },
        Some(_) => {
            fields.fail("command", "the command is empty");
            return None;
        }
        None => {
            fields.errors.push(error(
                path,
                "needs `command` (a stdio server) or `url` (a streamable-HTTP server)",
            ));
            return None;
        }
    })
}
