//! The gateway's side of the one config reader
//! (`codemode_runtime::config_reader`): reading typed fields of one section
//! ([`Fields`]), `${NAME}` expansion ([`expand`]) and [`Secret`]s.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use codemode_runtime::ConfigError;
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

/// The keys of each section, declared once; the reader reports the rest
/// (in sections that guard access, as errors).
pub(crate) const fn section(keys: &'static [&'static str], strictness: Strictness) -> Section {
    Section { keys, strictness }
}

pub(crate) const MAX_TIMEOUT_MS: u64 = 3_600_000;

pub(crate) fn error(path: &str, message: &str) -> ConfigError {
    ConfigError {
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

pub(crate) struct Fields<'a> {
    pub(crate) path: &'a str,
    pub(crate) object: &'a Map<String, Value>,
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
    pub(crate) errors: &'a mut Vec<ConfigError>,
}

impl Fields<'_> {
    pub(crate) fn fail(&mut self, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: join(self.path, key),
            message: message.into(),
        });
    }

    pub(crate) fn string(&mut self, key: &str) -> Option<String> {
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

    pub(crate) fn strings(&mut self, key: &str) -> Vec<String> {
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
    pub(crate) fn globs(&mut self, key: &str) -> Option<Vec<String>> {
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

    pub(crate) fn secrets(&mut self, key: &str) -> BTreeMap<String, Secret> {
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
    pub(crate) fn integer(
        &mut self,
        key: &str,
        range: RangeInclusive<u64>,
        what: &str,
    ) -> Option<u64> {
        let value = self.object.get(key)?;
        integer_in(&join(self.path, key), value, range, what)
            .map_err(|e| self.errors.push(e))
            .ok()
    }

    pub(crate) fn millis(&mut self, key: &str, default: u64) -> Duration {
        Duration::from_millis(
            self.integer(key, 1..=MAX_TIMEOUT_MS, "milliseconds")
                .unwrap_or(default),
        )
    }
}

/// Longest tool-name pattern in `allowTools` / `denyTools` / `tools.allow`.
const MAX_PATTERN_BYTES: usize = 256;

/// Replaces `${NAME}` and `${NAME:-default}` with the environment's value.
/// `$$` is a literal `$`.
pub(crate) fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
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
