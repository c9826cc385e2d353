//! The gateway's config file: `tools.codeMode` plus the `mcpServers` map in
//! the form MCP users already know.
//!
//! ```json5
//! {
//!   tools: { codeMode: { enabled: true, timeoutMs: 10000 } },
//!   mcpServers: {
//!     memory: { command: "npx", args: ["-y", "@modelcontextprotocol/server-memory"], env: { MEMORY_FILE_PATH: "/tmp/memory.json" } },
//!     github: { url: "https://api.example.com/mcp", headers: { Authorization: "Bearer ${GITHUB_TOKEN}" } },
//!   },
//! }
//! ```
//!
//! Every problem is reported with its path in the file (a whole file is
//! checked before anything starts). `${NAME}` and `${NAME:-default}` in
//! strings read the gateway's environment, so secrets need not sit in the
//! file. Values of `env` and `headers` are [`Secret`]s: they never appear in
//! `Debug`, logs, telemetry or errors.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use codemode_runtime::{
    CodeModeConfig, ConfigError, Diagnostic, OwnerPolicy, ToolPolicy, ToolSource,
};

/// `approvals.mode`: which nested calls need a human's yes (decided by the
/// runtime's [`ToolPolicy::decide`]).
pub use codemode_runtime::ApprovalMode;

/// `approvals.mode` when the file does not say.
pub const DEFAULT_APPROVAL_MODE: ApprovalMode = ApprovalMode::Destructive;
use codemode_runtime::config_reader::{Section, Strictness, integer_in, join};
use serde_json::{Map, Value};

/// A value that must not be shown: `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that needs it (the child's
    /// environment, the HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

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
        /// `clientSecret` (a secret: from the environment).
        client_secret: Secret,
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
    },
}

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
}

/// `results.form`: how an `exec`/`wait` result reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResultForm {
    /// `structuredContent` (the result as the model should see it) plus a
    /// short text item, and an `outputSchema` on `exec`/`wait`: the MCP
    /// form for tools with an output schema, close to one copy.
    #[default]
    Structured,
    /// The result as JSON text only (no `structuredContent`, no
    /// `outputSchema`): for clients that give the model only text.
    Text,
    /// Both in full (the JSON text and `structuredContent`).
    Both,
}

/// Where a `before_tool_call` hook runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookTarget {
    /// A program: the event as JSON on stdin, the decision as JSON on
    /// stdout.
    Command(Vec<String>),
    /// An endpoint: the event POSTed as JSON, the decision in the body.
    Url(String),
}

/// `hooks.beforeToolCall`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// What runs.
    pub target: HookTarget,
    /// How long it may take (`timeoutMs`, default 5 s); past it the call
    /// is blocked.
    pub timeout: Duration,
}

/// A whole gateway config (the default: no file).
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// The effective `tools.codeMode`.
    pub code_mode: CodeModeConfig,
    /// Whether the file said anything about `tools.codeMode` (absent means
    /// the gateway turns code mode on: that is its job).
    pub code_mode_given: bool,
    /// Enabled upstream servers, by name.
    pub servers: Vec<McpServerConfig>,
    /// `tools.allow` / `tools.deny`: globs over catalog names or ids
    /// (`mcp:<server>:<tool>`), for every server at once.
    pub policy: ToolPolicy,
    /// `approvals.mode` (default `destructive`).
    pub approvals: ApprovalMode,
    /// `hooks.beforeToolCall`, if any.
    pub before_tool_call: Option<HookConfig>,
    /// `auth`: how HTTP clients authenticate (`None`: they do not).
    pub auth: Option<AuthConfig>,
    /// `results.form` (default `structured`).
    pub result_form: ResultForm,
    /// `results.handleBytes`: nested results larger than this (as JSON)
    /// reach cells as handles (default: the runtime's, 1 MiB).
    pub result_handle_bytes: Option<usize>,
    /// `store`: where waiting runs are kept (`None`: the default, the
    /// embedded file store in the data directory).
    pub store: Option<StoreSetting>,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            code_mode: CodeModeConfig::default(),
            code_mode_given: false,
            servers: Vec::new(),
            policy: ToolPolicy::default(),
            approvals: DEFAULT_APPROVAL_MODE,
            before_tool_call: None,
            auth: None,
            result_form: ResultForm::default(),
            result_handle_bytes: None,
            store: None,
        }
    }
}

impl GatewayConfig {
    /// The one policy the catalog applies: `tools.allow` / `tools.deny`
    /// (with `extra`'s deny globs added and its allow list, if any, in
    /// place of the file's: the command line's `--deny` / `--allow`),
    /// `approvals.mode`, and each server's `allowTools` / `denyTools` /
    /// `approveTools`.
    pub fn tool_policy(&self, extra: &ToolPolicy) -> ToolPolicy {
        let mut policy = ToolPolicy {
            allow: extra.allow.clone().or_else(|| self.policy.allow.clone()),
            deny: self
                .policy
                .deny
                .iter()
                .chain(&extra.deny)
                .cloned()
                .collect(),
            approve: self.policy.approve.clone(),
            approvals: self.approvals,
            owners: Vec::new(),
        };
        for server in &self.servers {
            policy = policy.with_owner(ToolSource::Mcp, &server.name, server.tools.clone());
        }
        policy
    }
}

/// Where waiting runs are kept (`store`, `--store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSetting {
    /// `memory`: in this process only; a restart loses waiting runs.
    Memory,
    /// `file:PATH`: the embedded durable store (one process at a time).
    File(std::path::PathBuf),
    /// `redis://[user:password@]HOST:PORT/DB`: shared by replicas.
    Redis(String),
}

impl StoreSetting {
    /// Parses a `store` value.
    ///
    /// # Errors
    /// What to write instead.
    pub fn parse(text: &str) -> Result<StoreSetting, String> {
        if text == "memory" {
            Ok(StoreSetting::Memory)
        } else if let Some(path) = text.strip_prefix("file:") {
            if path.is_empty() {
                Err("`file:` needs a path, like \"file:/var/lib/codemode/runs.db\"".into())
            } else {
                Ok(StoreSetting::File(path.into()))
            }
        } else if text.starts_with("redis://") {
            Ok(StoreSetting::Redis(text.to_owned()))
        } else {
            Err(format!(
                "unknown store {text:?}; write \"memory\", \"file:PATH\" or \"redis://HOST:PORT/DB\""
            ))
        }
    }
}

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

/// Everything wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_problems(.errors))]
pub struct ConfigProblems {
    /// Each problem with its path.
    pub errors: Vec<ConfigError>,
}

fn render_problems(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The keys of each section, declared once; the reader reports the rest
/// (in sections that guard access, as errors).
const fn section(keys: &'static [&'static str], strictness: Strictness) -> Section {
    Section { keys, strictness }
}
const ROOT: Section = section(
    &[
        "tools",
        "mcpServers",
        "approvals",
        "hooks",
        "auth",
        "results",
        "store",
    ],
    Strictness::Ordinary,
);
// `tools` also holds the agent runtime's other settings in reference configs.
const TOOLS: Section = section(&["codeMode", "allow", "deny"], Strictness::Ordinary);
const RESULTS: Section = section(&["form", "handleBytes"], Strictness::Ordinary);
const APPROVALS: Section = section(&["mode"], Strictness::Guarded);
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
// An upstream's grant: a typo there fails the login loudly anyway.
const CLIENT_CREDENTIALS: Section = section(
    &["clientId", "clientSecret", "scopes"],
    Strictness::Ordinary,
);
const AUTHORIZATION_CODE: Section = section(
    &["clientId", "clientSecret", "scopes", "redirectPort"],
    Strictness::Ordinary,
);
const HOOKS: Section = section(&["beforeToolCall"], Strictness::Guarded);
const HOOK: Section = section(&["command", "url", "timeoutMs"], Strictness::Guarded);

const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;
const MAX_TIMEOUT_MS: u64 = 3_600_000;
const MAX_SERVER_NAME_BYTES: usize = 64;

/// Reads a config, resolving `${NAME}` from `env`.
///
/// # Errors
/// [`ConfigProblems`] with every problem found; diagnostics (clamps,
/// unknown fields) come with a config that loads.
pub fn parse_config(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(GatewayConfig, Vec<Diagnostic>), ConfigProblems> {
    let root: Value = json5::from_str(text).map_err(|e| ConfigProblems {
        errors: vec![ConfigError {
            path: "$".into(),
            message: format!("not valid JSON5: {e}"),
        }],
    })?;
    let mut errors = Vec::new();
    let mut diagnostics = Vec::new();
    let Some(object) = root.as_object() else {
        return Err(ConfigProblems {
            errors: vec![error("$", "the config must be an object")],
        });
    };
    let mut code_mode = CodeModeConfig::default();
    let mut code_mode_given = false;
    let mut policy = ToolPolicy::default();
    let mut approvals = DEFAULT_APPROVAL_MODE;
    let mut before_tool_call = None;
    let mut auth = None;
    let mut result_form = ResultForm::default();
    let mut result_handle_bytes = None;
    let mut store = None;
    for (key, value) in object {
        match key.as_str() {
            "tools" => match value {
                Value::Object(tools) => {
                    let mut fields = Fields {
                        path: "tools",
                        object: tools,
                        env,
                        errors: &mut errors,
                    };
                    policy.allow = fields.globs("allow");
                    policy.deny = fields.globs("deny").unwrap_or_default();
                    TOOLS.check("tools", tools, fields.errors, &mut diagnostics);
                    if let Some(value) = tools.get("codeMode") {
                        code_mode_given = true;
                        let (config, d, e) = CodeModeConfig::check_value(value);
                        code_mode = config;
                        diagnostics.extend(d);
                        errors.extend(e);
                    }
                }
                _ => errors.push(error("tools", "expected an object")),
            },
            "mcpServers" => {}
            "approvals" => approvals = parse_approvals(value, env, &mut errors, &mut diagnostics),
            "hooks" => before_tool_call = parse_hooks(value, env, &mut errors, &mut diagnostics),
            "auth" => auth = parse_auth(value, env, &mut errors, &mut diagnostics),
            "results" => {
                (result_form, result_handle_bytes) =
                    parse_results(value, &mut errors, &mut diagnostics);
            }
            "store" => match value {
                Value::String(text) => {
                    match expand(text, env).and_then(|t| StoreSetting::parse(&t)) {
                        Ok(setting) => store = Some(setting),
                        Err(message) => errors.push(error("store", &message)),
                    }
                }
                _ => errors.push(error(
                    "store",
                    "expected a string: \"memory\", \"file:PATH\" or \"redis://HOST:PORT/DB\"",
                )),
            },
            _ => {}
        }
    }
    ROOT.check("", object, &mut errors, &mut diagnostics);
    let mut servers = Vec::new();
    match object.get("mcpServers") {
        None => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                let path = join("mcpServers", name);
                if let Some(server) =
                    parse_server(name, value, &path, env, &mut errors, &mut diagnostics)
                {
                    servers.push(server);
                }
            }
        }
        Some(_) => errors.push(error(
            "mcpServers",
            "expected an object of servers, like { memory: { command: \"npx\", args: [...] } }",
        )),
    }
    if errors.is_empty() {
        Ok((
            GatewayConfig {
                code_mode,
                code_mode_given,
                servers,
                policy,
                approvals,
                before_tool_call,
                auth,
                result_form,
                result_handle_bytes,
                store,
            },
            diagnostics,
        ))
    } else {
        Err(ConfigProblems { errors })
    }
}

fn parse_results(
    value: &Value,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> (ResultForm, Option<usize>) {
    let Value::Object(object) = value else {
        errors.push(error(
            "results",
            "expected an object like { form: \"structured\" }",
        ));
        return (ResultForm::default(), None);
    };
    RESULTS.check("results", object, errors, diagnostics);
    let form = match object.get("form") {
        None => ResultForm::default(),
        Some(Value::String(form)) => match form.as_str() {
            "structured" => ResultForm::Structured,
            "text" => ResultForm::Text,
            "both" => ResultForm::Both,
            other => {
                errors.push(error(
                    "results.form",
                    &format!(
                        "unknown form \"{}\"; use \"structured\" (the default), \"text\" or \"both\"",
                        other.chars().take(32).collect::<String>()
                    ),
                ));
                ResultForm::default()
            }
        },
        Some(_) => {
            errors.push(error(
                "results.form",
                "expected \"structured\", \"text\" or \"both\"",
            ));
            ResultForm::default()
        }
    };
    const MIN_HANDLE: u64 = 1024;
    const MAX_HANDLE: u64 = 4 << 20;
    let handle_bytes = match object.get("handleBytes") {
        None => None,
        Some(value) => {
            match integer_in(
                "results.handleBytes",
                value,
                MIN_HANDLE..=MAX_HANDLE,
                "an integer",
            ) {
                Ok(n) => usize::try_from(n).ok(),
                Err(mut e) => {
                    e.message.push_str(&format!(
                        " (results larger than this reach cells as handles; the bridge carries at most {MAX_HANDLE} bytes as a value)"
                    ));
                    errors.push(e);
                    None
                }
            }
        }
    };
    (form, handle_bytes)
}

fn parse_approvals(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> ApprovalMode {
    let Some(object) = value.as_object() else {
        errors.push(error(
            "approvals",
            "expected an object like { mode: \"destructive\" }",
        ));
        return DEFAULT_APPROVAL_MODE;
    };
    APPROVALS.check("approvals", object, errors, diagnostics);
    let mut fields = Fields {
        path: "approvals",
        object,
        env,
        errors,
    };
    let Some(mode) = fields.string("mode") else {
        return DEFAULT_APPROVAL_MODE;
    };
    match ApprovalMode::parse(&mode) {
        Some(mode) => mode,
        None => {
            let other = mode;
            fields.fail(
                "mode",
                format!(
                    "unknown approval mode \"{other}\"; use \"never\", \"destructive\" (the default), \"writes\" or \"always\""
                ),
            );
            DEFAULT_APPROVAL_MODE
        }
    }
}

/// The shortest bearer token accepted (a guessable token is no auth).
pub const MIN_BEARER_TOKEN_BYTES: usize = 16;
const DEFAULT_MAX_CONCURRENT_EXECS: usize = 32;
const DEFAULT_MAX_SUSPENDED_RUNS: usize = 256;

fn parse_auth(
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
        let path = format!("auth.bearerTokens[{i}]");
        let (name, raw) = match item {
            Value::String(token) => (format!("token-{}", i + 1), token.clone()),
            Value::Object(entry) => {
                BEARER_TOKEN.check(&path, entry, errors, diagnostics);
                match (entry.get("name"), entry.get("token")) {
                    (Some(Value::String(name)), Some(Value::String(token)))
                        if !name.trim().is_empty() && name.len() <= 128 =>
                    {
                        (name.clone(), token.clone())
                    }
                    _ => {
                        errors.push(error(
                            &path,
                            "expected { name: \"alice\", token: \"${ALICE_TOKEN}\" } (a name of 1 to 128 bytes and a token)",
                        ));
                        continue;
                    }
                }
            }
            _ => {
                errors.push(error(&path, "expected a token string or { name, token }"));
                continue;
            }
        };
        let token = match expand(&raw, env) {
            Ok(token) => token,
            Err(message) => {
                errors.push(ConfigError { path, message });
                continue;
            }
        };
        // Never echo the token itself: it is a secret.
        if token.len() < MIN_BEARER_TOKEN_BYTES {
            errors.push(ConfigError {
                path,
                message: format!(
                    "the token is shorter than {MIN_BEARER_TOKEN_BYTES} bytes; use a long random value (e.g. `openssl rand -hex 32`)"
                ),
            });
            continue;
        }
        if tokens.iter().any(|t| t.name == name) {
            errors.push(ConfigError {
                path,
                message: format!("the name `{name}` is used by another token"),
            });
            continue;
        }
        if tokens.iter().any(|t| t.token.expose() == token) {
            errors.push(ConfigError {
                path,
                message: "the same token is listed twice".into(),
            });
            continue;
        }
        tokens.push(BearerToken {
            name,
            token: Secret::new(token),
        });
    }
    (errors.len() == before).then_some(AuthConfig {
        bearer_tokens: tokens,
        oauth,
        max_concurrent_execs,
        max_suspended_runs,
    })
}

fn parse_upstream_oauth(
    value: &Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<UpstreamOAuth> {
    const EXPECTED: &str = "expected { clientCredentials: { clientId: \"...\", clientSecret: \"${SECRET}\", scopes?: [...] } } or { authorizationCode: { clientId?, clientSecret?, scopes?, redirectPort? } }";
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
            if client_secret.is_none() {
                fields.fail(
                    "clientSecret",
                    "required: the client secret (write \"${NAME}\" to read it from the environment)",
                );
            }
            UpstreamOAuth::ClientCredentials {
                client_id: client_id.clone().unwrap_or_default(),
                client_secret: Secret::new(client_secret.unwrap_or_default()),
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
            UpstreamOAuth::AuthorizationCode {
                client_id,
                client_secret: client_secret.map(Secret::new),
                scopes,
                redirect_port,
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
fn is_loopback_http(url: &str) -> bool {
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

const DEFAULT_HOOK_TIMEOUT_MS: u64 = 5_000;
const MAX_HOOK_TIMEOUT_MS: u64 = 60_000;

fn parse_hooks(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<HookConfig> {
    let Some(object) = value.as_object() else {
        errors.push(error(
            "hooks",
            "expected an object like { beforeToolCall: { command: [\"./check\"] } }",
        ));
        return None;
    };
    HOOKS.check("hooks", object, errors, diagnostics);
    let path = "hooks.beforeToolCall";
    let hook = object.get("beforeToolCall")?;
    let Some(hook) = hook.as_object() else {
        errors.push(error(
            path,
            "expected an object with `command` (an array: program and arguments) or `url`",
        ));
        return None;
    };
    HOOK.check(path, hook, errors, diagnostics);
    let before = errors.len();
    let mut fields = Fields {
        path,
        object: hook,
        env,
        errors,
    };
    let timeout = Duration::from_millis(
        fields
            .integer("timeoutMs", 1..=MAX_HOOK_TIMEOUT_MS, "milliseconds")
            .unwrap_or(DEFAULT_HOOK_TIMEOUT_MS),
    );
    let target = match (hook.get("command"), hook.get("url")) {
        (Some(_), Some(_)) => {
            fields.fail("url", "a hook has either `command` or `url`, not both");
            None
        }
        (Some(Value::Array(_)), None) => {
            let command = fields.strings("command");
            if command.first().is_none_or(|c| c.trim().is_empty()) {
                fields.fail(
                    "command",
                    "expected the program and its arguments, like [\"./check-call\", \"--strict\"]",
                );
                None
            } else {
                Some(HookTarget::Command(command))
            }
        }
        (Some(_), None) => {
            fields.fail(
                "command",
                "expected an array: the program and its arguments, like [\"./check-call\"]",
            );
            None
        }
        (None, Some(_)) => match fields.string("url") {
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Some(HookTarget::Url(url))
            }
            Some(_) => {
                fields.fail("url", "expected an http:// or https:// URL");
                None
            }
            None => None,
        },
        (None, None) => {
            fields
                .errors
                .push(error(path, "needs `command` (an array) or `url`"));
            None
        }
    };
    if errors.len() > before {
        return None;
    }
    target.map(|target| HookConfig { target, timeout })
}

fn error(path: &str, message: &str) -> ConfigError {
    ConfigError {
        path: path.to_owned(),
        message: message.to_owned(),
    }
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

struct Fields<'a> {
    path: &'a str,
    object: &'a Map<String, Value>,
    env: &'a dyn Fn(&str) -> Option<String>,
    errors: &'a mut Vec<ConfigError>,
}

impl Fields<'_> {
    fn fail(&mut self, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: join(self.path, key),
            message: message.into(),
        });
    }

    fn string(&mut self, key: &str) -> Option<String> {
        match self.object.get(key)? {
            Value::String(s) => match expand(s, self.env) {
                Ok(s) => Some(s),
                Err(message) => {
                    self.fail(key, message);
                    None
                }
            },
            _ => {
                self.fail(key, "expected a string");
                None
            }
        }
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        match self.object.get(key) {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let path = format!("{}[{i}]", join(self.path, key));
                    match item {
                        Value::String(s) => match expand(s, self.env) {
                            Ok(s) => out.push(s),
                            Err(message) => self.errors.push(ConfigError { path, message }),
                        },
                        _ => self.errors.push(ConfigError {
                            path,
                            message: "expected a string".into(),
                        }),
                    }
                }
                out
            }
            Some(_) => {
                self.fail(key, "expected an array of strings");
                Vec::new()
            }
        }
    }

    /// A list of tool-name globs (`*`, `?`); `None` when absent.
    fn globs(&mut self, key: &str) -> Option<Vec<String>> {
        self.object.get(key)?;
        let before = self.errors.len();
        let patterns = self.strings(key);
        for (i, pattern) in patterns.iter().enumerate() {
            if pattern.trim().is_empty() || pattern.len() > MAX_PATTERN_BYTES {
                self.errors.push(ConfigError {
                    path: format!("{}[{i}]", join(self.path, key)),
                    message: format!(
                        "expected a tool-name pattern of 1 to {MAX_PATTERN_BYTES} bytes, like \"read_*\" (`*` and `?` are wildcards)"
                    ),
                });
            }
        }
        (self.errors.len() == before).then_some(patterns)
    }

    fn secrets(&mut self, key: &str) -> BTreeMap<String, Secret> {
        match self.object.get(key) {
            None => BTreeMap::new(),
            Some(Value::Object(map)) => {
                let mut out = BTreeMap::new();
                for (name, value) in map {
                    let path = join(&join(self.path, key), name);
                    match value {
                        // Never echo the value: it may be a secret.
                        Value::String(s) => match expand(s, self.env) {
                            Ok(s) => {
                                out.insert(name.clone(), Secret::new(s));
                            }
                            Err(message) => self.errors.push(ConfigError { path, message }),
                        },
                        Value::Number(_) | Value::Bool(_) => {
                            out.insert(name.clone(), Secret::new(value.to_string()));
                        }
                        _ => self.errors.push(ConfigError {
                            path,
                            message: "expected a string".into(),
                        }),
                    }
                }
                out
            }
            Some(_) => {
                self.fail(key, "expected an object of strings");
                BTreeMap::new()
            }
        }
    }

    /// A whole number in `range` (an error naming the range else);
    /// `None` when absent or wrong.
    fn integer(&mut self, key: &str, range: RangeInclusive<u64>, what: &str) -> Option<u64> {
        let value = self.object.get(key)?;
        integer_in(&join(self.path, key), value, range, what)
            .map_err(|e| self.errors.push(e))
            .ok()
    }

    fn millis(&mut self, key: &str, default: u64) -> Duration {
        Duration::from_millis(
            self.integer(key, 1..=MAX_TIMEOUT_MS, "milliseconds")
                .unwrap_or(default),
        )
    }
}

/// Longest tool-name pattern in `allowTools` / `denyTools` / `tools.allow`.
const MAX_PATTERN_BYTES: usize = 256;

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
    ],
    Strictness::Ordinary,
);

fn parse_server(
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
        match url {
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Transport::Http {
                    url,
                    headers,
                    oauth,
                }
            }
            Some(_) => {
                fields.fail("url", "expected an http:// or https:// URL");
                return None;
            }
            None => {
                fields.fail("url", "an HTTP server needs a `url`");
                return None;
            }
        }
    } else {
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
        match command {
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
        }
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
    })
}

/// Replaces `${NAME}` and `${NAME:-default}` with the environment's value.
/// `$$` is a literal `$`.
fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if !text.contains('$') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('{') {
            let Some(end) = inner.find('}') else {
                return Err("`${` without a closing `}`".into());
            };
            let reference = &inner[..end];
            let (name, default) = match reference.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (reference, None),
            };
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(format!(
                    "`${{{reference}}}` is not a variable reference; use ${{NAME}} or ${{NAME:-default}} (write $$ for a literal $)"
                ));
            }
            match env(name).or(default.map(str::to_owned)) {
                Some(value) => out.push_str(&value),
                None => {
                    return Err(format!(
                        "the environment variable {name} is not set (write ${{{name}:-default}} for a fallback)"
                    ));
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `policy` says of tool `name` of server `server`: `None` when it
    /// is not catalogued, else whether its calls need approval.
    fn gate(policy: &ToolPolicy, server: &str, name: &str, annotations: &Value) -> Option<bool> {
        let tool = codemode_runtime::ToolDefinition::new(ToolSource::Mcp, server, name)
            .with_annotations(annotations.clone());
        match policy.decide(&tool, &tool.id().unwrap()) {
            codemode_runtime::Decision::Admitted(gate) => Some(gate.needs_approval()),
            codemode_runtime::Decision::Refused(_) => None,
        }
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Result<(GatewayConfig, Vec<Diagnostic>), ConfigProblems> {
        parse_config(text, &env)
    }

    #[test]
    fn approvals_and_hooks_parse_with_their_defaults() {
        let (config, diagnostics) = parse(
            r#"{
              approvals: { mode: "writes" },
              hooks: { beforeToolCall: { command: ["./check", "--strict"], timeoutMs: 800 } },
              mcpServers: { fs: { command: "fs", approveTools: ["write_*"] } },
            }"#,
        )
        .unwrap();
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        assert_eq!(config.approvals, ApprovalMode::Writes);
        assert_eq!(
            config.before_tool_call,
            Some(HookConfig {
                target: HookTarget::Command(vec!["./check".into(), "--strict".into()]),
                timeout: Duration::from_millis(800),
            })
        );
        assert_eq!(config.servers[0].tools.approve, ["write_*"]);
        // approveTools wins over read-only annotations; the mode decides the rest.
        let policy = config.tool_policy(&ToolPolicy::default());
        let read_only = serde_json::json!({"readOnlyHint": true});
        assert_eq!(gate(&policy, "fs", "write_file", &read_only), Some(true));
        assert_eq!(gate(&policy, "fs", "read_file", &read_only), Some(false));
        assert_eq!(gate(&policy, "fs", "move_file", &Value::Null), Some(true));

        let (config, _) =
            parse(r#"{ hooks: { beforeToolCall: { url: "http://127.0.0.1:9/h" } } }"#).unwrap();
        assert_eq!(
            config.approvals,
            ApprovalMode::Destructive,
            "the default mode"
        );
        let hook = config.before_tool_call.unwrap();
        assert_eq!(hook.target, HookTarget::Url("http://127.0.0.1:9/h".into()));
        assert_eq!(hook.timeout, Duration::from_secs(5));
    }

    #[test]
    fn bearer_tokens_parse_with_names_and_are_never_echoed() {
        let (config, _) = parse(
            r#"{ auth: { bearerTokens: ["${TOKEN}-0123456789", { name: "ci", token: "ci-token-0123456789" }], maxConcurrentExecs: 4, maxSuspendedRuns: 9 } }"#,
        )
        .unwrap();
        let auth = config.auth.unwrap();
        assert_eq!(auth.max_concurrent_execs, 4);
        assert_eq!(auth.max_suspended_runs, 9);
        let names: Vec<&str> = auth.bearer_tokens.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["token-1", "ci"]);
        assert_eq!(auth.bearer_tokens[0].token.expose(), "s3cret-0123456789");
        assert!(!format!("{auth:?}").contains("s3cret"));

        let err = parse(
            r#"{ auth: { bearerTokens: ["${TOKEN}", { name: "a", token: "aaaaaaaaaaaaaaaaaaaa" }, { name: "a", token: "bbbbbbbbbbbbbbbbbbbbb" }, 7] } }"#,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("auth.bearerTokens[0]") && text.contains("shorter than 16 bytes"),
            "{text}"
        );
        assert!(
            text.contains("auth.bearerTokens[2]") && text.contains("used by another token"),
            "{text}"
        );
        assert!(text.contains("auth.bearerTokens[3]"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        let err = parse(r#"{ auth: { bearerTokens: [] } }"#).unwrap_err();
        assert!(err.to_string().contains("nobody could connect"), "{err}");
    }

    #[test]
    fn oauth_parses_alone_or_beside_tokens() {
        let (config, _) = parse(
            r#"{ auth: { oauth: { issuer: "https://auth.example.com", resource: "https://gw.example.com/mcp" } } }"#,
        )
        .unwrap();
        let auth = config.auth.unwrap();
        assert!(auth.bearer_tokens.is_empty());
        let oauth = auth.oauth.unwrap();
        assert_eq!(oauth.issuer, "https://auth.example.com");
        assert_eq!(oauth.resource, "https://gw.example.com/mcp");
        assert_eq!(oauth.jwks_uri, None);
        assert!(is_loopback_http("http://127.0.0.1:8080/x"));
        assert!(is_loopback_http("http://[::1]:9/"));
        assert!(is_loopback_http("http://localhost"));
        assert!(!is_loopback_http("http://auth.example.com"));
        assert!(!is_loopback_http("http://127.0.0.1.evil.test/"));
        let err = parse(
            r#"{ auth: { oauth: { issuer: "http://auth.example.com", jwksUri: "ftp://x" } } }"#,
        )
        .unwrap_err()
        .to_string();
        for path in [
            "auth.oauth.issuer",
            "auth.oauth.resource",
            "auth.oauth.jwksUri",
        ] {
            assert!(err.contains(path), "{path}: {err}");
        }
    }

    #[test]
    fn upstream_oauth_client_credentials_parse_and_keep_the_secret_secret() {
        let (config, _) = parse(
            r#"{ mcpServers: { crm: { url: "https://crm.example.com/mcp", oauth: { clientCredentials: { clientId: "gw", clientSecret: "${TOKEN}", scopes: ["read"] } } } } }"#,
        )
        .unwrap();
        match &config.servers[0].transport {
            Transport::Http {
                oauth:
                    Some(UpstreamOAuth::ClientCredentials {
                        client_id,
                        client_secret,
                        scopes,
                    }),
                ..
            } => {
                assert_eq!(client_id, "gw");
                assert_eq!(client_secret.expose(), "s3cret");
                assert_eq!(scopes, &["read"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(!format!("{config:?}").contains("s3cret"));
        let err = parse(
            r#"{ mcpServers: { a: { url: "https://a.example.com/mcp", oauth: { clientCredentials: { clientId: "" } } }, b: { command: "x", oauth: {} } } }"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "mcpServers.a.oauth.clientCredentials.clientId",
            "mcpServers.a.oauth.clientCredentials.clientSecret",
            "mcpServers.b.oauth: only HTTP servers",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn upstream_oauth_authorization_code_parses_and_names_bad_fields() {
        let (config, diagnostics) = parse(
            r#"{ mcpServers: {
                 dyn: { url: "https://a.example.com/mcp", oauth: { authorizationCode: {} } },
                 pre: { url: "https://b.example.com/mcp", oauth: { authorizationCode: { clientId: "app", clientSecret: "${TOKEN}", scopes: ["read"], redirectPort: 8976, extra: 1 } } },
               } }"#,
        )
        .unwrap();
        let oauth = |name: &str| match &config
            .servers
            .iter()
            .find(|s| s.name == name)
            .unwrap()
            .transport
        {
            Transport::Http { oauth, .. } => oauth.clone(),
            Transport::Stdio { .. } => None,
        };
        assert_eq!(
            oauth("dyn"),
            Some(UpstreamOAuth::AuthorizationCode {
                client_id: None,
                client_secret: None,
                scopes: vec![],
                redirect_port: None,
            })
        );
        assert_eq!(
            oauth("pre"),
            Some(UpstreamOAuth::AuthorizationCode {
                client_id: Some("app".into()),
                client_secret: Some(Secret::new("s3cret")),
                scopes: vec!["read".into()],
                redirect_port: Some(8976),
            })
        );
        assert!(
            diagnostics
                .iter()
                .any(|d| d.path == "mcpServers.pre.oauth.authorizationCode.extra"),
            "{diagnostics:?}"
        );
        let err = parse(
            r#"{ mcpServers: {
                 a: { url: "https://a.example.com/mcp", oauth: { authorizationCode: { redirectPort: 70000 } } },
                 b: { url: "https://a.example.com/mcp", oauth: { authorizationCode: { clientSecret: "x" } } },
                 c: { url: "https://a.example.com/mcp", oauth: { authorizationCode: {}, clientCredentials: {} } },
                 d: { url: "https://a.example.com/mcp", oauth: { password: {} } },
               } }"#,
        )
        .unwrap_err();
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        for path in [
            "mcpServers.a.oauth.authorizationCode.redirectPort",
            "mcpServers.b.oauth.authorizationCode.clientSecret",
            "mcpServers.c.oauth",
            "mcpServers.d.oauth",
        ] {
            assert!(paths.contains(&path), "{path}: {paths:?}");
        }
    }

    #[test]
    fn the_store_setting_parses_and_names_bad_values() {
        for (text, want) in [
            ("memory", StoreSetting::Memory),
            (
                "file:/tmp/runs.db",
                StoreSetting::File("/tmp/runs.db".into()),
            ),
            (
                "redis://127.0.0.1:6379/0",
                StoreSetting::Redis("redis://127.0.0.1:6379/0".into()),
            ),
        ] {
            let (config, _) = parse(&format!("{{ store: {text:?} }}")).unwrap();
            assert_eq!(config.store, Some(want));
        }
        assert_eq!(parse("{}").unwrap().0.store, None);
        for bad in [r#""file:""#, r#""postgres://x""#, "42"] {
            let problems = parse(&format!("{{ store: {bad} }}")).unwrap_err();
            assert_eq!(problems.errors[0].path, "store", "{bad}");
        }
    }

    #[test]
    fn results_form_and_handle_bytes_parse_and_name_bad_values() {
        let (config, _) = parse(r#"{ results: { form: "text", handleBytes: 65536 } }"#).unwrap();
        assert_eq!(config.result_form, ResultForm::Text);
        assert_eq!(config.result_handle_bytes, Some(65536));
        let (config, _) = parse("{}").unwrap();
        assert_eq!(config.result_form, ResultForm::Structured);
        assert_eq!(config.result_handle_bytes, None);
        let err = parse(r#"{ results: { form: "xml", handleBytes: 5 } }"#).unwrap_err();
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["results.form", "results.handleBytes"]);
    }

    #[test]
    fn bad_approvals_and_hooks_are_named() {
        let err = parse(
            r#"{
              approvals: { mode: "sometimes" },
              hooks: { beforeToolCall: { command: "check.sh", timeoutMs: 0 } },
              mcpServers: { fs: { command: "fs", approveTools: [""] } },
            }"#,
        )
        .unwrap_err();
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        for path in [
            "approvals.mode",
            "hooks.beforeToolCall.timeoutMs",
            "hooks.beforeToolCall.command",
            "mcpServers.fs.approveTools[0]",
        ] {
            assert!(paths.contains(&path), "{path} in {paths:?}");
        }
        assert!(
            err.to_string().contains("\"destructive\" (the default)"),
            "{err}"
        );
        let err = parse(r#"{ hooks: { beforeToolCall: { command: ["x"], url: "http://h" } } }"#)
            .unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        let err = parse(r#"{ hooks: { beforeToolCall: {} } }"#).unwrap_err();
        assert!(err.to_string().contains("needs `command`"), "{err}");
    }

    #[test]
    fn stdio_and_http_servers() {
        let (config, diagnostics) = parse(
            r#"{
              tools: { codeMode: { enabled: true, timeoutMs: 2000 } },
              mcpServers: {
                memory: { command: "npx", args: ["-y", "server-memory"], env: { MEMORY_FILE_PATH: "/tmp/m.json" }, cwd: "/tmp" },
                remote: { url: "https://example.com/mcp", headers: { Authorization: "Bearer ${TOKEN}" }, timeoutMs: 5000 },
                off: { command: "x", disabled: true },
              },
            }"#,
        )
        .unwrap();
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        assert!(config.code_mode.enabled && config.code_mode_given);
        assert_eq!(config.code_mode.timeout_ms, 2000);
        assert_eq!(config.servers.len(), 2);
        let memory = &config.servers[0];
        assert_eq!(memory.name, "memory");
        assert_eq!(memory.call_timeout, Duration::from_secs(60));
        match &memory.transport {
            Transport::Stdio {
                command, args, env, ..
            } => {
                assert_eq!(command, "npx");
                assert_eq!(args, &["-y", "server-memory"]);
                assert_eq!(env["MEMORY_FILE_PATH"].expose(), "/tmp/m.json");
            }
            other => panic!("{other:?}"),
        }
        let remote = &config.servers[1];
        assert_eq!(remote.call_timeout, Duration::from_secs(5));
        match &remote.transport {
            Transport::Http { url, headers, .. } => {
                assert_eq!(url, "https://example.com/mcp");
                assert_eq!(headers["Authorization"].expose(), "Bearer s3cret");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn secrets_never_show_in_debug_or_errors() {
        let (config, _) = parse(
            r#"{ mcpServers: { a: { command: "x", env: { KEY: "${TOKEN}" } }, b: { url: "http://h/", headers: { X: "hidden-value" } } } }"#,
        )
        .unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("hidden-value"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"));
        let err =
            parse(r#"{ mcpServers: { a: { command: "x", env: { KEY: ["hidden-value"] } } } }"#)
                .unwrap_err();
        assert!(!err.to_string().contains("hidden-value"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let err = parse(
            r#"{
              tools: { codeMode: { enabled: "yes", timeoutMs: "soon" } },
              mcpServers: {
                "bad:name": { command: "x" },
                nothing: {},
                both: { command: "x", url: "https://h/" },
                web: { url: "ftp://h/", headers: { A: 1 } },
                args: { command: "x", args: [1, "ok"], env: { A: "${MISSING}" }, timeoutMs: -5 },
                legacy: { type: "sse", url: "https://h/sse" },
              },
            }"#,
        )
        .unwrap_err();
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tools.codeMode.enabled",
                "tools.codeMode.timeoutMs",
                "mcpServers.args.timeoutMs",
                "mcpServers.args.args[0]",
                "mcpServers.args.env.A",
                "mcpServers[\"bad:name\"]",
                "mcpServers.both.url",
                "mcpServers.legacy.type",
                "mcpServers.nothing",
                "mcpServers.web.url",
            ],
            "{err}"
        );
        assert!(err.to_string().contains("MISSING is not set"), "{err}");
    }

    #[test]
    fn misspelt_keys_in_sections_that_guard_access_are_errors() {
        let err = parse(
            r#"{ approvals: { mod: "always" }, hooks: { beforeToolcall: { url: "http://127.0.0.1:9/h" } },
                 auth: { bearerToken: ["${TOKEN}"] } }"#,
        )
        .unwrap_err();
        let found: Vec<(&str, &str)> = err
            .errors
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect();
        assert!(
            found.contains(&("approvals.mod", "unknown field; did you mean `mode`?")),
            "{found:?}"
        );
        assert!(
            found.contains(&(
                "hooks.beforeToolcall",
                "unknown field; did you mean `beforeToolCall`?"
            )),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|(path, message)| *path == "auth.bearerToken"
                    && message.contains("did you mean `bearerTokens`?")),
            "{found:?}"
        );
    }

    #[test]
    fn whole_numbers_read_alike_everywhere() {
        let (config, _) = parse(
            r#"{ mcpServers: { a: { command: "x", timeoutMs: 2e3 } }, results: { handleBytes: 4096.0 } }"#,
        )
        .unwrap();
        assert_eq!(config.servers[0].call_timeout, Duration::from_millis(2000));
        assert_eq!(config.result_handle_bytes, Some(4096));
        let err = parse(r#"{ mcpServers: { a: { command: "x", timeoutMs: 1.5 } } }"#).unwrap_err();
        assert_eq!(err.errors[0].path, "mcpServers.a.timeoutMs");
        assert_eq!(
            err.errors[0].message,
            "expected milliseconds from 1 to 3600000"
        );
    }

    #[test]
    fn unknown_fields_are_diagnostics() {
        let (_, diagnostics) =
            parse(r#"{ extra: 1, mcpServers: { a: { command: "x", autoApprove: [] } } }"#).unwrap();
        let paths: Vec<&str> = diagnostics.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["extra", "mcpServers.a.autoApprove"]);
    }

    #[test]
    fn tool_policy_globs_per_server_and_for_all() {
        let (config, diagnostics) = parse(
            r#"{
              tools: { allow: ["mcp:fs:*", "lookup"], deny: ["*delete*"] },
              mcpServers: {
                fs: { command: "fs", allowTools: ["read_*", "list_*"], denyTools: ["read_secret*"] },
                open: { command: "open" },
              },
            }"#,
        )
        .unwrap();
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        assert_eq!(
            config.policy,
            ToolPolicy {
                allow: Some(vec!["mcp:fs:*".into(), "lookup".into()]),
                deny: vec!["*delete*".into()],
                ..ToolPolicy::default()
            }
        );
        assert_eq!(config.servers[1].tools, OwnerPolicy::default());
        let policy = config.tool_policy(&ToolPolicy::default());
        let kept = |server: &str, name: &str| gate(&policy, server, name, &Value::Null).is_some();
        assert!(kept("fs", "read_file"));
        assert!(kept("fs", "list_dir"));
        assert!(!kept("fs", "read_secrets"), "the server's denyTools");
        assert!(!kept("fs", "write_file"), "not in the server's allowTools");
        assert!(!kept("fs", "list_delete"), "the global deny");
        assert!(!kept("open", "read_file"), "not in the global allow");
        // The command line's allow list replaces the file's; its deny adds.
        let policy = config.tool_policy(&ToolPolicy {
            allow: Some(vec!["mcp:open:*".into()]),
            deny: vec!["*drop*".into()],
            ..ToolPolicy::default()
        });
        let kept = |server: &str, name: &str| gate(&policy, server, name, &Value::Null).is_some();
        assert!(kept("open", "read_file"));
        assert!(!kept("open", "drop_table"));
        assert!(!kept("open", "delete_row"));

        let problems = parse(
            r#"{ tools: { deny: "x" }, mcpServers: { fs: { command: "fs", allowTools: ["", 3], denyTools: {} } } }"#,
        )
        .unwrap_err();
        let paths: Vec<_> = problems.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tools.deny",
                "mcpServers.fs.allowTools[1]",
                "mcpServers.fs.allowTools[0]",
                "mcpServers.fs.denyTools"
            ],
            "{problems}"
        );
    }

    #[test]
    fn expansion() {
        assert_eq!(expand("a${TOKEN}b", &env).unwrap(), "as3cretb");
        assert_eq!(expand("${NOPE:-fallback}", &env).unwrap(), "fallback");
        assert_eq!(expand("cost $$5 and $x", &env).unwrap(), "cost $5 and $x");
        assert!(
            expand("${NOPE}", &env)
                .unwrap_err()
                .contains("NOPE is not set")
        );
        assert!(expand("${1x}", &env).is_err());
        assert!(expand("${OPEN", &env).is_err());
    }
}
