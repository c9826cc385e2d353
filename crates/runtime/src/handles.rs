//! Large nested results by handle: a tool result whose JSON is larger than
//! [`crate::RuntimeOptions::result_handle_bytes`] stays on the host, and
//! the cell gets a handle (`bytes`, `text(start, end)`, `find(needle,
//! from?)`, `json()`) instead of the value, so a cell can work through a
//! large document in slices without holding all of it (twice: as JSON text
//! and as the parsed value) in its heap. Held results count against a
//! per-run bound and are released with the run.

use std::sync::Arc;

use serde_json::{Value, json};

/// The key that marks a handle descriptor in a resolved value.
pub(crate) const HANDLE_KEY: &str = "$codemodeResultHandle";

/// The most one `text(start, end)` returns.
pub const MAX_HANDLE_SLICE_BYTES: usize = 1 << 20;

/// One held result.
pub(crate) struct HeldResult {
    /// The result itself (`json()` serializes it).
    value: Value,
    /// Bytes of its JSON.
    json_len: usize,
    /// The text `text()` slices when it is not a string inside `value`
    /// (several text items joined, or the JSON of anything else).
    joined: Option<String>,
}

impl HeldResult {
    fn of(value: Value, json: String) -> HeldResult {
        let json_len = json.len();
        let joined = match &value {
            Value::String(_) => None,
            Value::Object(map) => match map.get("content").and_then(Value::as_array) {
                Some(items) if items.len() == 1 && single_text(&items[0]).is_some() => None,
                Some(items)
                    if !items.is_empty() && items.iter().all(|i| single_text(i).is_some()) =>
                {
                    Some(
                        items
                            .iter()
                            .filter_map(single_text)
                            .collect::<Vec<_>>()
                            .join("\n"),
                    )
                }
                _ => Some(json),
            },
            _ => Some(json),
        };
        HeldResult {
            value,
            json_len,
            joined,
        }
    }

    /// What `text()` slices: the joined text items of an MCP result, a
    /// string result itself, else the JSON.
    fn text(&self) -> &str {
        if let Some(joined) = &self.joined {
            return joined;
        }
        match &self.value {
            Value::String(s) => s,
            other => other
                .get("content")
                .and_then(|c| c.get(0))
                .and_then(single_text)
                .unwrap_or_default(),
        }
    }

    fn bytes(&self) -> usize {
        self.json_len + self.joined.as_ref().map_or(0, String::len)
    }
}

/// The text of a `{ type: "text", text }` content item.
fn single_text(item: &Value) -> Option<&str> {
    (item.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| item.get("text").and_then(Value::as_str))
        .flatten()
}

/// The results a run holds.
pub(crate) struct ResultHandles {
    held: Vec<Arc<HeldResult>>,
    bytes: usize,
    /// Carried by this run's descriptors and known to its guest only: a
    /// tool's own JSON with the handle key is never taken for a handle.
    nonce: String,
}

impl Default for ResultHandles {
    fn default() -> Self {
        ResultHandles {
            held: Vec::new(),
            bytes: 0,
            nonce: format!(
                "{:016x}{:016x}",
                codemode_sandbox::random_u64(),
                codemode_sandbox::random_u64()
            ),
        }
    }
}

/// Why a result cannot be held.
pub(crate) enum HoldError {
    /// The run already holds `held` bytes; this one needs `needed` more.
    Full { held: usize, needed: usize },
}

impl ResultHandles {
    /// Bytes of the results held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// What a durable run keeps of its handles: the nonce and the results,
    /// in handle order.
    pub(crate) fn export(&self) -> (String, Vec<Value>) {
        (
            self.nonce.clone(),
            self.held.iter().map(|h| h.value.clone()).collect(),
        )
    }

    /// The handles of a restored run (the same ids and nonce as before).
    pub(crate) fn import(nonce: String, values: Vec<Value>) -> ResultHandles {
        let mut handles = ResultHandles {
            held: Vec::with_capacity(values.len()),
            bytes: 0,
            nonce,
        };
        for value in values {
            let json = value.to_string();
            let held = HeldResult::of(value, json);
            handles.bytes += held.bytes();
            handles.held.push(Arc::new(held));
        }
        handles
    }

    /// The run's handle nonce (in its guest context).
    pub(crate) fn nonce(&self) -> &str {
        &self.nonce
    }

    /// Holds `value` (its JSON already made) and returns the descriptor
    /// the guest API turns into a handle.
    pub(crate) fn hold(
        &mut self,
        value: Value,
        json_text: String,
        max_bytes: usize,
    ) -> Result<Value, HoldError> {
        let held = HeldResult::of(value, json_text);
        let needed = held.bytes();
        if self.bytes.saturating_add(needed) > max_bytes {
            return Err(HoldError::Full {
                held: self.bytes,
                needed,
            });
        }
        self.bytes += needed;
        let id = self.held.len();
        let descriptor = json!({
            HANDLE_KEY: id,
            "nonce": self.nonce,
            "bytes": held.json_len,
            "textBytes": held.text().len(),
        });
        self.held.push(Arc::new(held));
        Ok(descriptor)
    }

    fn get(&self, id: u64) -> Option<&HeldResult> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.held.get(i))
            .map(|h| &**h)
    }

    /// `text(start, end)`: bytes `start..end` of the text (at most
    /// [`MAX_HANDLE_SLICE_BYTES`]), widened to whole characters.
    pub(crate) fn text(&self, id: u64, start: usize, end: Option<usize>) -> Result<String, String> {
        let held = self.get(id).ok_or_else(unknown)?;
        let text = held.text();
        let mut start = start.min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = end.unwrap_or(text.len()).clamp(start, text.len());
        if end - start > MAX_HANDLE_SLICE_BYTES {
            return Err(format!(
                "result.text(start, end): at most {MAX_HANDLE_SLICE_BYTES} bytes per slice (asked for {}); read it in pieces",
                end - start
            ));
        }
        while !text.is_char_boundary(end) {
            end += 1;
        }
        Ok(text[start..end].to_owned())
    }

    /// `find(needle, from?)`: the byte offset of the next `needle` in the
    /// text at or after `from`, or -1.
    pub(crate) fn find(&self, id: u64, needle: &str, from: usize) -> Result<i64, String> {
        let held = self.get(id).ok_or_else(unknown)?;
        let text = held.text();
        let mut from = from.min(text.len());
        while !text.is_char_boundary(from) {
            from += 1;
        }
        Ok(text[from..]
            .find(needle)
            .map_or(-1, |at| i64::try_from(from + at).unwrap_or(-1)))
    }

    /// `json()`: the whole result as JSON, if the bridge carries it.
    pub(crate) fn json(&self, id: u64, max_bytes: usize) -> Result<String, String> {
        let held = self.get(id).ok_or_else(unknown)?;
        if held.json_len > max_bytes {
            return Err(format!(
                "result.json(): the result is {} bytes of JSON, more than the bridge carries ({max_bytes}); read it with result.text(start, end) and result.find(...)",
                held.json_len
            ));
        }
        Ok(held.value.to_string())
    }
}

fn unknown() -> String {
    "no such result handle in this run".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_finds_and_bounds() {
        let mut handles = ResultHandles::default();
        let value = json!({ "content": [{ "type": "text", "text": "héllo" }, { "type": "text", "text": "world" }] });
        let text = value.to_string();
        let d = handles
            .hold(value.clone(), text.clone(), 1 << 20)
            .ok()
            .unwrap();
        assert_eq!(d[HANDLE_KEY], 0);
        assert_eq!(d["textBytes"], "héllo\nworld".len());
        assert_eq!(
            handles.text(0, 0, Some(3)).unwrap(),
            "hé",
            "widened to a whole character"
        );
        assert_eq!(handles.text(0, 7, None).unwrap(), "world");
        assert_eq!(handles.find(0, "world", 0).unwrap(), 7);
        assert_eq!(handles.find(0, "nope", 0).unwrap(), -1);
        assert_eq!(handles.json(0, 1 << 20).unwrap(), text);
        assert!(handles.json(0, 4).unwrap_err().contains("result.text"));
        assert!(handles.text(9, 0, None).is_err());
        // A second result past the run's bound is refused.
        assert!(handles.hold(value, text, 10).is_err());
        // Not an MCP text result: the JSON is the text.
        let d = handles
            .hold(json!([1, 2]), "[1,2]".into(), 1 << 20)
            .ok()
            .unwrap();
        assert_eq!(
            handles
                .text(d[HANDLE_KEY].as_u64().unwrap(), 0, None)
                .unwrap(),
            "[1,2]"
        );
        let big = "x".repeat(MAX_HANDLE_SLICE_BYTES + 10);
        let d = handles
            .hold(Value::String(big.clone()), format!("\"{big}\""), 1 << 30)
            .ok()
            .unwrap();
        assert!(
            handles
                .text(d[HANDLE_KEY].as_u64().unwrap(), 0, None)
                .is_err()
        );
    }
}
