//! Validation of the model's `exec` and `wait` input (`docs/results-and-errors.md`).

use serde_json::Value;

use crate::config::{CodeModeConfig, Language};
use crate::result::ErrorCode;

/// A validated `exec` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecInput {
    /// The cell source (from `code`, or its alias `command`).
    pub code: String,
    /// The cell language.
    pub language: Language,
}

/// A validated `wait` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitInput {
    /// The run to resume.
    pub run_id: String,
}

/// Input the model got wrong: the code and a message naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    /// `invalid_input` or `unsupported_language`.
    pub code: ErrorCode,
    /// What is wrong and how to fix it.
    pub message: String,
}

fn invalid(message: impl Into<String>) -> InputError {
    InputError {
        code: ErrorCode::InvalidInput,
        message: message.into(),
    }
}

fn optional_string<'a>(
    object: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, InputError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!(
            "exec input field `{field}` must be a string"
        ))),
    }
}

impl ExecInput {
    /// Validates raw `exec` arguments against the config.
    ///
    /// # Errors
    /// [`InputError`] with `invalid_input` (naming the field) or
    /// `unsupported_language`.
    pub fn parse(raw: &Value, config: &CodeModeConfig) -> Result<ExecInput, InputError> {
        let Some(object) = raw.as_object() else {
            return Err(invalid(
                "exec input must be an object like {\"code\": \"return 1\"}",
            ));
        };
        if let Some(unknown) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "code" | "command" | "language"))
        {
            return Err(invalid(format!(
                "exec input field `{unknown}` is not supported; use `code` (JavaScript source) and optionally `language`"
            )));
        }
        let code = optional_string(object, "code")?.filter(|s| !s.trim().is_empty());
        let command = optional_string(object, "command")?.filter(|s| !s.trim().is_empty());
        let code = match (code, command) {
            (Some(code), Some(command)) if code != command => {
                return Err(invalid(
                    "exec input fields `code` and `command` differ; `command` is an alias of `code`, send only `code`",
                ));
            }
            (Some(code), _) => code,
            (None, Some(command)) => command,
            (None, None) => {
                return Err(invalid(
                    "exec input field `code` is missing or empty; pass the JavaScript to run",
                ));
            }
        };
        if let Some(at) = code.find('\0') {
            let (line, column) = codemode_transform::line_column(code, at);
            return Err(invalid(format!(
                "exec input field `code` contains a NUL character (U+0000) at line {line}, column {column}; write it as \"\\0\" inside a string instead"
            )));
        }
        let language = match optional_string(object, "language")? {
            None => Language::JavaScript,
            Some(name) => Language::parse(name).ok_or_else(|| InputError {
                code: ErrorCode::UnsupportedLanguage,
                message: format!("exec input field `language`: \"{name}\" is not supported; use \"javascript\" or \"typescript\""),
            })?,
        };
        if !config.allows(language) {
            let allowed: Vec<&str> = config.languages.iter().map(|l| l.as_str()).collect();
            return Err(InputError {
                code: ErrorCode::UnsupportedLanguage,
                message: format!(
                    "exec input field `language`: {language} is disabled by tools.codeMode.languages (allowed: {})",
                    allowed.join(", ")
                ),
            });
        }
        Ok(ExecInput {
            code: code.to_owned(),
            language,
        })
    }
}

impl WaitInput {
    /// Validates raw `wait` arguments.
    ///
    /// # Errors
    /// [`InputError`] with `invalid_input` naming the field.
    pub fn parse(raw: &Value) -> Result<WaitInput, InputError> {
        let Some(object) = raw.as_object() else {
            return Err(invalid(
                "wait input must be an object like {\"runId\": \"...\"}",
            ));
        };
        if let Some(unknown) = object.keys().find(|k| k.as_str() != "runId") {
            return Err(invalid(format!(
                "wait input field `{unknown}` is not supported; pass only `runId`"
            )));
        }
        match object.get("runId") {
            Some(Value::String(id)) if !id.trim().is_empty() => {
                Ok(WaitInput { run_id: id.clone() })
            }
            Some(Value::String(_)) | None => Err(invalid(
                "wait input field `runId` is missing or empty; pass the runId of a waiting result",
            )),
            Some(_) => Err(invalid("wait input field `runId` must be a string")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ExecInput, InputError> {
        ExecInput::parse(&v, &CodeModeConfig::default())
    }

    #[test]
    fn code_or_command_alias() {
        assert_eq!(parse(json!({"code": "return 1"})).unwrap().code, "return 1");
        assert_eq!(
            parse(json!({"command": "return 2"})).unwrap().code,
            "return 2"
        );
        assert_eq!(
            parse(json!({"code": "x", "command": "x"})).unwrap().code,
            "x"
        );
        let err = parse(json!({"code": "x", "command": "y"})).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert!(err.message.contains("`command`"));
    }

    #[test]
    fn missing_or_empty_code_names_the_field() {
        for v in [json!({}), json!({"code": "  "}), json!({"code": null})] {
            let err = parse(v).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidInput);
            assert!(err.message.contains("`code`"), "{}", err.message);
        }
        assert!(
            parse(json!({"code": 5}))
                .unwrap_err()
                .message
                .contains("`code` must be a string")
        );
        assert!(parse(json!("return 1")).is_err());
        assert!(
            parse(json!({"code": "1", "cwd": "/"}))
                .unwrap_err()
                .message
                .contains("`cwd`")
        );
    }

    #[test]
    fn languages() {
        assert_eq!(
            parse(json!({"code": "1"})).unwrap().language,
            Language::JavaScript
        );
        assert_eq!(
            parse(json!({"code": "1", "language": "typescript"}))
                .unwrap()
                .language,
            Language::TypeScript
        );
        assert_eq!(
            parse(json!({"code": "1", "language": "python"}))
                .unwrap_err()
                .code,
            ErrorCode::UnsupportedLanguage
        );
        let js_only = CodeModeConfig {
            languages: vec![Language::JavaScript],
            ..CodeModeConfig::default()
        };
        let err = ExecInput::parse(&json!({"code": "1", "language": "typescript"}), &js_only)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsupportedLanguage);
    }

    #[test]
    fn wait_input() {
        assert_eq!(
            WaitInput::parse(&json!({"runId": "run_1"})).unwrap().run_id,
            "run_1"
        );
        assert!(
            WaitInput::parse(&json!({}))
                .unwrap_err()
                .message
                .contains("`runId`")
        );
        assert!(WaitInput::parse(&json!({"runId": 3})).is_err());
    }
}
