//! `approvals` (which nested calls need a human's yes) and `hooks`
//! (`beforeToolCall`).

use std::time::Duration;

use codemode_runtime::config_reader::{Section, Strictness};
use codemode_runtime::{ConfigError, Diagnostic};
use serde_json::Value;

use crate::config::reader::{Fields, error, section};

/// `approvals.mode`: which nested calls need a human's yes (decided by the
/// runtime's [`ToolPolicy::decide`]).
pub use codemode_runtime::ApprovalMode;

/// `approvals.mode` when the file does not say.
pub const DEFAULT_APPROVAL_MODE: ApprovalMode = ApprovalMode::Destructive;

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

const APPROVALS: Section = section(&["mode"], Strictness::Guarded);
const HOOKS: Section = section(&["beforeToolCall"], Strictness::Guarded);
const HOOK: Section = section(&["command", "url", "timeoutMs"], Strictness::Guarded);

pub(crate) fn parse_approvals(
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

const DEFAULT_HOOK_TIMEOUT_MS: u64 = 5_000;
const MAX_HOOK_TIMEOUT_MS: u64 = 60_000;

pub(crate) fn parse_hooks(
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
