//! `results` (how an `exec`/`wait` result reaches the client) and `store`
//! (where waiting runs are kept).

use codemode_runtime::config_reader::{Section, Strictness, integer_in};
use codemode_runtime::{ConfigError, Diagnostic};
use serde_json::Value;

use crate::config::reader::{error, section};

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

/// Where waiting runs are kept (`store`, `--store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSetting {
    /// `memory`: in this process only; a restart loses waiting runs.
    Memory,
    /// `file:PATH`: the embedded durable store (shared by every process
    /// that opens it).
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

const RESULTS: Section = section(&["form", "handleBytes"], Strictness::Ordinary);

pub(crate) fn parse_results(
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
