//! `tools.codeMode`: parsing, defaults, clamping and diagnostics
//! (`docs/configuration.md`).
//!
//! Values of the wrong type are errors naming the field; out-of-range values
//! are clamped and reported; unknown fields are reported, never silently
//! ignored.

use std::fmt;

use serde_json::Value;

/// A cell language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// Plain JavaScript.
    JavaScript,
    /// TypeScript (types stripped before running).
    TypeScript,
}

impl Language {
    /// The name used in configs and exec input.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
        }
    }

    /// Parses `javascript` / `typescript`.
    pub fn parse(s: &str) -> Option<Language> {
        match s {
            "javascript" => Some(Language::JavaScript),
            "typescript" => Some(Language::TypeScript),
            _ => None,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The effective `tools.codeMode` settings, after defaults and clamps.
///
/// ```
/// use codemode_runtime::CodeModeConfig;
/// let (config, diagnostics) = CodeModeConfig::from_json5("{ tools: { codeMode: { enabled: true, timeoutMs: 5 } } }").unwrap();
/// assert!(config.enabled);
/// assert_eq!(config.timeout_ms, 100); // clamped to the lower bound
/// assert_eq!(diagnostics[0].path, "tools.codeMode.timeoutMs");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CodeModeConfig {
    /// The only switch.
    pub enabled: bool,
    /// Allowed cell languages.
    pub languages: Vec<Language>,
    /// Wall-clock limit of one exec or wait.
    pub timeout_ms: u64,
    /// Guest heap limit.
    pub memory_limit_bytes: u64,
    /// Returned text, json and value, per result.
    pub max_output_bytes: u64,
    /// One serialized VM snapshot.
    pub max_snapshot_bytes: u64,
    /// Concurrent nested calls.
    pub max_pending_tool_calls: u64,
    /// How long a suspended VM can be resumed.
    pub snapshot_ttl_seconds: u64,
    /// Default hits of `tools.search`.
    pub search_default_limit: u64,
    /// Max hits of `tools.search`.
    pub max_search_limit: u64,
}

impl Default for CodeModeConfig {
    fn default() -> Self {
        CodeModeConfig {
            enabled: false,
            languages: vec![Language::JavaScript, Language::TypeScript],
            timeout_ms: 10_000,
            memory_limit_bytes: 64 << 20,
            max_output_bytes: 65_536,
            max_snapshot_bytes: 10 << 20,
            max_pending_tool_calls: 16,
            snapshot_ttl_seconds: 900,
            search_default_limit: 8,
            max_search_limit: 50,
        }
    }
}

/// Something worth telling the user about a config that still loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Dotted path of the field, e.g. `tools.codeMode.timeoutMs`.
    pub path: String,
    /// What happened and what the effective value is.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A config that cannot be used (`invalid_config`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid config at {path}: {message}")]
pub struct ConfigError {
    /// Dotted path of the offending field (or `$` for the whole file).
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
}

const PREFIX: &str = "tools.codeMode";

struct Bound {
    name: &'static str,
    min: u64,
    max: u64,
}

const BOUNDS: &[Bound] = &[
    Bound {
        name: "timeoutMs",
        min: 100,
        max: 60_000,
    },
    Bound {
        name: "memoryLimitBytes",
        min: 1 << 20,
        max: 1 << 30,
    },
    Bound {
        name: "maxOutputBytes",
        min: 1024,
        max: 10 << 20,
    },
    Bound {
        name: "maxSnapshotBytes",
        min: 1024,
        max: 256 << 20,
    },
    Bound {
        name: "maxPendingToolCalls",
        min: 1,
        max: 128,
    },
    Bound {
        name: "snapshotTtlSeconds",
        min: 1,
        max: 86_400,
    },
    Bound {
        name: "maxSearchLimit",
        min: 1,
        max: 50,
    },
    Bound {
        name: "searchDefaultLimit",
        min: 1,
        max: 50,
    },
];

impl CodeModeConfig {
    /// Parses a JSON5 document holding `{ tools: { codeMode: ... } }`.
    ///
    /// # Errors
    /// [`ConfigError`] for bad JSON5 or a field of the wrong type.
    pub fn from_json5(text: &str) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        let root: Value = json5::from_str(text).map_err(|e| ConfigError {
            path: "$".into(),
            message: format!("not valid JSON5: {e}"),
        })?;
        CodeModeConfig::from_document(&root)
    }

    /// Reads `tools.codeMode` out of an already parsed document.
    ///
    /// # Errors
    /// [`ConfigError`] for a field of the wrong type.
    pub fn from_document(root: &Value) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        let Some(root) = root.as_object() else {
            return Err(ConfigError {
                path: "$".into(),
                message: "the config must be an object".into(),
            });
        };
        match root.get("tools") {
            None => Ok((CodeModeConfig::default(), Vec::new())),
            Some(Value::Object(tools)) => match tools.get("codeMode") {
                None => Ok((CodeModeConfig::default(), Vec::new())),
                Some(value) => CodeModeConfig::from_value(value),
            },
            Some(_) => Err(ConfigError {
                path: "tools".into(),
                message: "expected an object".into(),
            }),
        }
    }

    /// Reads the value of `tools.codeMode` itself (`true`, `false` or an object).
    ///
    /// # Errors
    /// [`ConfigError`] for a field of the wrong type or a value outside a
    /// closed set (`runtime`, `mode`, `languages`): the first one found
    /// ([`CodeModeConfig::check_value`] reports them all).
    pub fn from_value(value: &Value) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        let (config, diagnostics, mut errors) = CodeModeConfig::check_value(value);
        match errors.is_empty() {
            true => Ok((config, diagnostics)),
            false => Err(errors.swap_remove(0)),
        }
    }

    /// Reads `tools.codeMode` and reports every problem: the effective
    /// config (fields in error keep their defaults), the diagnostics, and
    /// all errors in field order.
    pub fn check_value(value: &Value) -> (CodeModeConfig, Vec<Diagnostic>, Vec<ConfigError>) {
        let mut config = CodeModeConfig::default();
        let mut diagnostics = Vec::new();
        let mut errors = Vec::new();
        let object = match value {
            Value::Bool(enabled) => {
                config.enabled = *enabled;
                return (config, diagnostics, errors);
            }
            Value::Object(object) => object,
            _ => {
                errors.push(ConfigError {
                    path: PREFIX.into(),
                    message: "expected true, false or an object".into(),
                });
                return (config, diagnostics, errors);
            }
        };
        let field_path = |name: &str| format!("{PREFIX}.{name}");
        for (key, field) in object {
            let path = field_path(key);
            let checked: Result<(), ConfigError> = match key.as_str() {
                "enabled" => match field {
                    // Only a literal `true` turns code mode on.
                    Value::Bool(b) => {
                        config.enabled = *b;
                        Ok(())
                    }
                    _ => Err(type_error(&path, "a boolean")),
                },
                "runtime" => expect_only(&path, field, "quickjs-wasi"),
                "mode" => expect_only(&path, field, "only"),
                "languages" => parse_languages(&path, field).map(|l| config.languages = l),
                name => {
                    if let Some(bound) = BOUNDS.iter().find(|b| b.name == name) {
                        parse_integer(&path, field).map(|raw| {
                            let clamped = raw.clamp(bound.min as i128, bound.max as i128) as u64;
                            if clamped as i128 != raw {
                                diagnostics.push(Diagnostic {
                                    path: path.clone(),
                                    message: format!(
                                        "{raw} is outside {} … {}; using {clamped}",
                                        bound.min, bound.max
                                    ),
                                });
                            }
                            *config.field_mut(name) = clamped;
                        })
                    } else {
                        diagnostics.push(Diagnostic {
                            path,
                            message: "unknown field; it has no effect".into(),
                        });
                        Ok(())
                    }
                }
            };
            if let Err(e) = checked {
                errors.push(e);
            }
        }
        if config.search_default_limit > config.max_search_limit {
            diagnostics.push(Diagnostic {
                path: field_path("searchDefaultLimit"),
                message: format!(
                    "{} is above maxSearchLimit; using {}",
                    config.search_default_limit, config.max_search_limit
                ),
            });
            config.search_default_limit = config.max_search_limit;
        }
        (config, diagnostics, errors)
    }

    fn field_mut(&mut self, name: &str) -> &mut u64 {
        match name {
            "timeoutMs" => &mut self.timeout_ms,
            "memoryLimitBytes" => &mut self.memory_limit_bytes,
            "maxOutputBytes" => &mut self.max_output_bytes,
            "maxSnapshotBytes" => &mut self.max_snapshot_bytes,
            "maxPendingToolCalls" => &mut self.max_pending_tool_calls,
            "snapshotTtlSeconds" => &mut self.snapshot_ttl_seconds,
            "maxSearchLimit" => &mut self.max_search_limit,
            _ => &mut self.search_default_limit,
        }
    }

    /// Whether `language` may be used in cells.
    pub fn allows(&self, language: Language) -> bool {
        self.languages.contains(&language)
    }
}

fn type_error(path: &str, expected: &str) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: format!("expected {expected}"),
    }
}

fn expect_only(path: &str, value: &Value, only: &str) -> Result<(), ConfigError> {
    match value.as_str() {
        Some(s) if s == only => Ok(()),
        Some(other) => Err(ConfigError {
            path: path.into(),
            message: format!("\"{other}\" is not supported; the only value is \"{only}\""),
        }),
        None => Err(type_error(path, &format!("the string \"{only}\""))),
    }
}

fn parse_integer(path: &str, value: &Value) -> Result<i128, ConfigError> {
    if let Some(i) = value.as_i64() {
        return Ok(i128::from(i));
    }
    if let Some(u) = value.as_u64() {
        return Ok(i128::from(u));
    }
    if let Some(f) = value.as_f64()
        && f.is_finite()
        && f.fract() == 0.0
    {
        return Ok(f as i128);
    }
    Err(type_error(path, "a whole number"))
}

fn parse_languages(path: &str, value: &Value) -> Result<Vec<Language>, ConfigError> {
    let Some(items) = value.as_array() else {
        return Err(type_error(
            path,
            "an array of \"javascript\" / \"typescript\"",
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let name = item
            .as_str()
            .ok_or_else(|| type_error(&item_path, "a string"))?;
        let language = Language::parse(name).ok_or_else(|| ConfigError {
            path: item_path,
            message: format!("unknown language \"{name}\"; use \"javascript\" or \"typescript\""),
        })?;
        if !out.contains(&language) {
            out.push(language);
        }
    }
    if out.is_empty() {
        return Err(ConfigError {
            path: path.into(),
            message: "at least one language is needed".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(CodeModeConfig, Vec<Diagnostic>), ConfigError> {
        CodeModeConfig::from_json5(text)
    }

    #[test]
    fn absent_or_false_is_off_and_true_is_shorthand() {
        assert!(!parse("{}").unwrap().0.enabled);
        assert!(!parse("{tools:{codeMode:false}}").unwrap().0.enabled);
        assert!(parse("{tools:{codeMode:true}}").unwrap().0.enabled);
    }

    #[test]
    fn other_fields_never_turn_it_on() {
        let (config, _) = parse("{tools:{codeMode:{timeoutMs: 2000}}}").unwrap();
        assert!(!config.enabled);
        assert_eq!(config.timeout_ms, 2000);
    }

    #[test]
    fn out_of_range_values_clamp_and_report() {
        let (config, diags) =
            parse("{tools:{codeMode:{enabled:true, timeoutMs: 999999, maxPendingToolCalls: 0}}}")
                .unwrap();
        assert_eq!(config.timeout_ms, 60_000);
        assert_eq!(config.max_pending_tool_calls, 1);
        assert_eq!(diags.len(), 2);
        assert!(
            diags
                .iter()
                .any(|d| d.path == "tools.codeMode.timeoutMs" && d.message.contains("60000"))
        );
    }

    #[test]
    fn wrong_types_name_the_field() {
        let err = parse("{tools:{codeMode:{enabled:true, memoryLimitBytes: 'lots'}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.memoryLimitBytes");
        let err = parse("{tools:{codeMode:{enabled:'yes'}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.enabled");
        let err = parse("{tools:{codeMode:{languages:['python']}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.languages[0]");
        let err = parse("{tools:{codeMode:{runtime:'v8'}}}").unwrap_err();
        assert_eq!(err.path, "tools.codeMode.runtime");
    }

    #[test]
    fn unknown_fields_are_reported() {
        let (_, diags) = parse("{tools:{codeMode:{enabled:true, timeotMs: 5}}}").unwrap();
        assert_eq!(
            diags,
            vec![Diagnostic {
                path: "tools.codeMode.timeotMs".into(),
                message: "unknown field; it has no effect".into()
            }]
        );
    }

    #[test]
    fn default_search_limit_never_exceeds_max() {
        let (config, diags) =
            parse("{tools:{codeMode:{maxSearchLimit: 5, searchDefaultLimit: 9}}}").unwrap();
        assert_eq!(config.search_default_limit, 5);
        assert_eq!(diags.len(), 1);
    }

    #[test]
    fn check_value_reports_every_error() {
        let root: Value = json5::from_str(
            "{enabled: 'yes', timeoutMs: 'soon', languages: ['python'], maxOutputBytes: 10}",
        )
        .unwrap();
        let (config, diagnostics, errors) = CodeModeConfig::check_value(&root);
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tools.codeMode.enabled",
                "tools.codeMode.languages[0]",
                "tools.codeMode.timeoutMs"
            ]
        );
        assert_eq!(config.max_output_bytes, 1024);
        assert_eq!(diagnostics.len(), 1);
    }

    #[test]
    fn bad_json5_is_an_error_at_the_root() {
        assert_eq!(parse("{tools:").unwrap_err().path, "$");
    }
}
