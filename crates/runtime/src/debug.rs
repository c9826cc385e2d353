//! The debug switches of the reference, read from the environment once:
//!
//! | variable | value | logs (target `codemode::debug`, level info) |
//! |---|---|---|
//! | `OPENCLAW_DEBUG_CODE_MODE` | `1` | activation decisions (surface, catalog size by source, why no surface) |
//! | `OPENCLAW_DEBUG_MODEL_TRANSPORT` | `1` | each checked provider payload: its shape, bytes, tool count, verdict |
//! | `OPENCLAW_DEBUG_MODEL_PAYLOAD` | `tools` | the model-visible tool names of each checked payload |
//! | | `full-redacted` | the payload itself, secrets masked, long strings cut, at most 16 KiB |
//! | `OPENCLAW_DEBUG_SSE` | `events` | each streamed event's type and size ([`sse_event`]) |
//! | | `peek` | the first five events of a stream, redacted and bounded |
//!
//! `CODEMODE_DEBUG_*` spellings work too (they win when both are set).
//! Every line is bounded, and values under secret-looking keys are masked;
//! `full-redacted` and `peek` can still show prompt and message text, so
//! they are for short debugging sessions.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::control::{Bounds, redacted_json};

/// What `..._MODEL_PAYLOAD` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadDebug {
    /// The tool names only.
    Tools,
    /// The payload, redacted and bounded.
    FullRedacted,
}

/// What `..._SSE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseDebug {
    /// Type and size of every event.
    Events,
    /// The first five events of each stream, redacted.
    Peek,
}

/// The switches in effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DebugSwitches {
    /// `..._CODE_MODE=1`.
    pub code_mode: bool,
    /// `..._MODEL_TRANSPORT=1`.
    pub model_transport: bool,
    /// `..._MODEL_PAYLOAD`.
    pub model_payload: Option<PayloadDebug>,
    /// `..._SSE`.
    pub sse: Option<SseDebug>,
}

/// The longest payload logged by `full-redacted`.
pub const MAX_PAYLOAD_LOG_BYTES: usize = 16 * 1024;
/// The longest event logged by `peek`.
pub const MAX_EVENT_LOG_BYTES: usize = 2 * 1024;
/// Events of a stream logged by `peek`.
pub const PEEK_EVENTS: usize = 5;

impl DebugSwitches {
    /// The switches of this process's environment (read once).
    pub fn current() -> DebugSwitches {
        static CURRENT: OnceLock<DebugSwitches> = OnceLock::new();
        *CURRENT.get_or_init(|| DebugSwitches::from_lookup(&|name| std::env::var(name).ok()))
    }

    /// The switches `lookup` (an environment) sets; unknown values are
    /// off (and said so on stderr once, through `tracing`).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> DebugSwitches {
        let read = |suffix: &str| {
            lookup(&format!("CODEMODE_DEBUG_{suffix}"))
                .or_else(|| lookup(&format!("OPENCLAW_DEBUG_{suffix}")))
                .map(|v| v.trim().to_ascii_lowercase())
                .filter(|v| !v.is_empty())
        };
        let flag =
            |suffix: &str| matches!(read(suffix).as_deref(), Some("1" | "true" | "yes" | "on"));
        let model_payload = match read("MODEL_PAYLOAD").as_deref() {
            None | Some("0" | "off" | "false") => None,
            Some("tools") => Some(PayloadDebug::Tools),
            Some("full-redacted") => Some(PayloadDebug::FullRedacted),
            Some(other) => {
                tracing::warn!(target: "codemode::debug", value = %bounded(other), "OPENCLAW_DEBUG_MODEL_PAYLOAD: unknown value; use tools or full-redacted");
                None
            }
        };
        let sse = match read("SSE").as_deref() {
            None | Some("0" | "off" | "false") => None,
            Some("events") => Some(SseDebug::Events),
            Some("peek") => Some(SseDebug::Peek),
            Some(other) => {
                tracing::warn!(target: "codemode::debug", value = %bounded(other), "OPENCLAW_DEBUG_SSE: unknown value; use events or peek");
                None
            }
        };
        DebugSwitches {
            code_mode: flag("CODE_MODE"),
            model_transport: flag("MODEL_TRANSPORT"),
            model_payload,
            sse,
        }
    }

    /// Whether any switch is on (the binary then lets `codemode::debug`
    /// through its log filter).
    pub fn any(&self) -> bool {
        self.code_mode || self.model_transport || self.model_payload.is_some() || self.sse.is_some()
    }
}

fn bounded(text: &str) -> String {
    text.chars().take(64).collect()
}

/// A payload, redacted and bounded for `full-redacted`.
pub(crate) fn redacted_payload(payload: &Value) -> String {
    redacted_json(
        payload,
        Bounds {
            depth: 8,
            string: 512,
            bytes: MAX_PAYLOAD_LOG_BYTES,
        },
        "the payload",
    )
}

/// One stream being debugged (`..._SSE`): give every event to
/// [`SseStream::event`]; with `peek`, only the first five are logged.
#[derive(Debug, Default)]
pub struct SseStream {
    seen: AtomicUsize,
}

impl SseStream {
    /// A new stream.
    pub fn new() -> SseStream {
        SseStream::default()
    }

    /// Logs one event as the switch says (nothing when it is off).
    /// `data` is the event's data, parsed as JSON when it is JSON.
    pub fn event(&self, event_type: &str, data: &str) {
        self.event_with(DebugSwitches::current(), event_type, data);
    }

    /// [`SseStream::event`] with explicit switches; returns what it logged.
    pub fn event_with(
        &self,
        switches: DebugSwitches,
        event_type: &str,
        data: &str,
    ) -> Option<String> {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        let line = match switches.sse? {
            SseDebug::Events => format!(
                "sse event #{n}: type {} ({} bytes)",
                bounded(event_type),
                data.len()
            ),
            SseDebug::Peek if n < PEEK_EVENTS => {
                let shown = match serde_json::from_str::<Value>(data) {
                    Ok(value) => redacted_json(
                        &value,
                        Bounds {
                            depth: 6,
                            string: 256,
                            bytes: MAX_EVENT_LOG_BYTES,
                        },
                        "the event",
                    ),
                    Err(_) => codemode_sandbox::bounded_text(data.to_owned(), MAX_EVENT_LOG_BYTES),
                };
                format!("sse event #{n}: type {}: {shown}", bounded(event_type))
            }
            SseDebug::Peek => return None,
        };
        tracing::info!(target: "codemode::debug", "{line}");
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn switches_read_both_spellings() {
        assert_eq!(
            DebugSwitches::from_lookup(&env(&[])),
            DebugSwitches::default()
        );
        assert!(!DebugSwitches::default().any());
        let on = DebugSwitches::from_lookup(&env(&[
            ("OPENCLAW_DEBUG_CODE_MODE", "1"),
            ("OPENCLAW_DEBUG_MODEL_TRANSPORT", "1"),
            ("OPENCLAW_DEBUG_MODEL_PAYLOAD", "tools"),
            ("OPENCLAW_DEBUG_SSE", "events"),
            ("CODEMODE_DEBUG_SSE", "peek"),
        ]));
        assert_eq!(
            on,
            DebugSwitches {
                code_mode: true,
                model_transport: true,
                model_payload: Some(PayloadDebug::Tools),
                sse: Some(SseDebug::Peek),
            }
        );
        let other = DebugSwitches::from_lookup(&env(&[
            ("CODEMODE_DEBUG_MODEL_PAYLOAD", "full-redacted"),
            ("OPENCLAW_DEBUG_CODE_MODE", "0"),
            ("OPENCLAW_DEBUG_SSE", "loud"),
        ]));
        assert_eq!(other.model_payload, Some(PayloadDebug::FullRedacted));
        assert!(!other.code_mode && other.sse.is_none());
    }

    #[test]
    fn peek_logs_five_redacted_bounded_events() {
        let switches = DebugSwitches {
            sse: Some(SseDebug::Peek),
            ..DebugSwitches::default()
        };
        let stream = SseStream::new();
        let big = format!(
            r#"{{"delta":"{}","api_key":"sk-live-123"}}"#,
            "x".repeat(50_000)
        );
        let logged: Vec<Option<String>> = (0..7)
            .map(|_| stream.event_with(switches, "content_block_delta", &big))
            .collect();
        assert!(logged[..5].iter().all(Option::is_some));
        assert!(
            logged[5..].iter().all(Option::is_none),
            "only the first five"
        );
        let first = logged[0].as_deref().unwrap();
        assert!(first.len() <= MAX_EVENT_LOG_BYTES + 100, "{}", first.len());
        assert!(!first.contains("sk-live-123"), "secrets masked");
        let events = SseStream::new()
            .event_with(
                DebugSwitches {
                    sse: Some(SseDebug::Events),
                    ..DebugSwitches::default()
                },
                "ping",
                "{}",
            )
            .unwrap();
        assert_eq!(events, "sse event #0: type ping (2 bytes)");
        assert_eq!(
            SseStream::new().event_with(DebugSwitches::default(), "x", "{}"),
            None
        );
    }

    #[test]
    fn full_redacted_payloads_are_masked_and_bounded() {
        let payload = serde_json::json!({
            "model": "gpt-5",
            "headers": { "Authorization": "Bearer sk-abc" },
            "messages": [{ "role": "user", "content": "y".repeat(100_000) }],
        });
        let text = redacted_payload(&payload);
        assert!(text.len() <= MAX_PAYLOAD_LOG_BYTES);
        assert!(!text.contains("sk-abc"));
        assert!(text.contains("gpt-5"));
    }
}
