//! The one config reader: how every config the product reads (the
//! gateway's file, `tools.codeMode`, the `--tools` file of `codemode
//! exec`) names paths, treats unknown keys and reads whole numbers. Each
//! section declares its known keys once and hands them to
//! [`check_keys`].
//!
//! The policy, the same everywhere:
//! - an unknown key is reported with its path, and with the key it most
//!   likely misspells (`denyToolsX`: did you mean `denyTools`?);
//! - in an ordinary section it is a diagnostic ("unknown field; it has no
//!   effect"), so a config written for other tools still loads; in a
//!   section that guards access ([`Strictness::Guarded`]: policy,
//!   approvals, hooks, auth) it is an error, because a misspelt setting
//!   that silently does nothing can leave a gate open;
//! - a whole number is an integer or a float without a fraction (JSON5
//!   `1e4`);
//! - a number outside its range is an error naming the range
//!   ([`integer_in`]). The one exception is the contract's own:
//!   `tools.codeMode`'s limits are clamped and the clamp reported.

use std::ops::RangeInclusive;

use serde_json::{Map, Value};

use crate::config::{ConfigError, Diagnostic};

/// A map key as a path segment (`a.b` for plain keys, `a["x y"]` else).
pub fn path_key(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        key.to_owned()
    } else {
        format!("[{}]", Value::String(key.to_owned()))
    }
}

/// `path` and one more key.
pub fn join(path: &str, key: &str) -> String {
    let segment = path_key(key);
    if path.is_empty() || path == "$" {
        segment
    } else if segment.starts_with('[') {
        format!("{path}{segment}")
    } else {
        format!("{path}.{segment}")
    }
}

/// What an unknown key in a section is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// A diagnostic: the config loads.
    Ordinary,
    /// An error: the section guards access, and a setting that does
    /// nothing could leave a gate open.
    Guarded,
}

/// The keys one section knows, declared once.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// Its keys.
    pub keys: &'static [&'static str],
    /// What an unknown key in it is.
    pub strictness: Strictness,
}

impl Section {
    /// Reports the keys of `object` (at `path`) this section does not
    /// know, by the policy above.
    pub fn check(
        &self,
        path: &str,
        object: &Map<String, Value>,
        errors: &mut Vec<ConfigError>,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        for key in object.keys().filter(|k| !self.keys.contains(&k.as_str())) {
            let path = join(path, key);
            match self.strictness {
                Strictness::Ordinary => diagnostics.push(Diagnostic {
                    path,
                    message: unknown_key(key, self.keys),
                }),
                Strictness::Guarded => {
                    let message = match crate::suggest::closest(key, self.keys) {
                        Some(meant) => format!("unknown field; did you mean `{meant}`?"),
                        None => format!(
                            "unknown field; this section takes only {}",
                            self.keys.join(", ")
                        ),
                    };
                    errors.push(ConfigError { path, message });
                }
            }
        }
    }
}

/// An ordinary section's unknown keys of `object` at `path`, reported as
/// diagnostics (see [`Section`]).
pub fn check_keys(
    path: &str,
    object: &Map<String, Value>,
    known: &'static [&'static str],
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    Section {
        keys: known,
        strictness: Strictness::Ordinary,
    }
    .check(path, object, errors, diagnostics);
}

/// The word of `known` that `word` most likely misspells, by the rule
/// every did-you-mean uses (config keys, agent ids, tool names).
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    crate::suggest::closest(word, known)
}

/// The diagnostic for unknown key `key` of an ordinary section, naming
/// the key of `known` it most likely misspells.
pub fn unknown_key(key: &str, known: &[&str]) -> String {
    match crate::suggest::closest(key, known) {
        Some(meant) => format!("unknown field; did you mean `{meant}`? It has no effect"),
        None => "unknown field; it has no effect".into(),
    }
}

/// A whole number: an integer, or a finite float without a fraction.
pub fn whole_number(value: &Value) -> Option<i128> {
    if let Some(i) = value.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = value.as_u64() {
        return Some(i128::from(u));
    }
    value
        .as_f64()
        .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 1e30)
        .map(|f| f as i128)
}

/// A whole number in `range` at `path`; `what` names the unit in the
/// error (`"an integer"`, `"milliseconds"`).
///
/// # Errors
/// A [`ConfigError`] naming the range.
pub fn integer_in(
    path: &str,
    value: &Value,
    range: RangeInclusive<u64>,
    what: &str,
) -> Result<u64, ConfigError> {
    whole_number(value)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| range.contains(n))
        .ok_or_else(|| ConfigError {
            path: path.to_owned(),
            message: format!("expected {what} from {} to {}", range.start(), range.end()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_quote_keys_that_are_not_plain() {
        assert_eq!(join("mcpServers", "fs"), "mcpServers.fs");
        assert_eq!(join("mcpServers", "my server"), "mcpServers[\"my server\"]");
        assert_eq!(join("", "tools"), "tools");
        assert_eq!(join("$", "tools"), "tools");
    }

    #[test]
    fn unknown_keys_name_the_key_meant_and_guarded_sections_refuse_them() {
        const KEYS: &[&str] = &["command", "denyTools", "allowTools"];
        let object = json!({"denyToolsX": [], "autoApprove": [], "command": "x"});
        let object = object.as_object().unwrap();
        let (mut errors, mut diagnostics) = (Vec::new(), Vec::new());
        check_keys("mcpServers.fs", object, KEYS, &mut errors, &mut diagnostics);
        assert!(errors.is_empty());
        let found: Vec<(&str, &str)> = diagnostics
            .iter()
            .map(|d| (d.path.as_str(), d.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "mcpServers.fs.autoApprove",
                    "unknown field; it has no effect"
                ),
                (
                    "mcpServers.fs.denyToolsX",
                    "unknown field; did you mean `denyTools`? It has no effect"
                ),
            ]
        );
        let guarded = Section {
            keys: KEYS,
            strictness: Strictness::Guarded,
        };
        let (mut errors, mut diagnostics) = (Vec::new(), Vec::new());
        guarded.check("auth", object, &mut errors, &mut diagnostics);
        assert!(diagnostics.is_empty());
        let found: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "auth.autoApprove",
                    "unknown field; this section takes only command, denyTools, allowTools"
                ),
                (
                    "auth.denyToolsX",
                    "unknown field; did you mean `denyTools`?"
                ),
            ]
        );
    }

    #[test]
    fn whole_numbers_and_ranges() {
        assert_eq!(whole_number(&json!(1e4)), Some(10_000));
        assert_eq!(whole_number(&json!(-3)), Some(-3));
        assert_eq!(whole_number(&json!(1.5)), None);
        assert_eq!(whole_number(&json!("5")), None);
        assert_eq!(
            integer_in("a", &json!(1e4), 1..=65_535, "a port"),
            Ok(10_000)
        );
        let err = integer_in("a.b", &json!(0), 1..=60, "milliseconds").unwrap_err();
        assert_eq!(err.path, "a.b");
        assert_eq!(err.message, "expected milliseconds from 1 to 60");
        assert!(integer_in("a", &json!(-1), 0..=5, "an integer").is_err());
        assert!(integer_in("a", &json!(1e300), 0..=5, "an integer").is_err());
    }
}
