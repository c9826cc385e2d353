//! JSON text from the guest, parsed on the host: request payloads, output
//! items and a cell's value all pass here.
//!
//! The guest's adapter (and its native fast path) refuse values nested
//! deeper than [`MAX_JSON_DEPTH`] with a `TypeError` naming the path, so
//! text deeper than that can only be forged; the host's parser allows a
//! little more, so every honest value parses. `JSON.stringify` writes lone
//! UTF-16 surrogates (`"ab😀".slice(0, 3)`) as `\udXXX` escapes, which are
//! valid JSON text but no Unicode scalar value: they become U+FFFD here,
//! the usual replacement, instead of failing the request or the cell.

use std::borrow::Cow;

/// The deepest nesting of arrays and objects a value leaving the guest may
/// have. The guest's fast encoder takes the same constant from
/// `codemode-abi`; the prelude's adapter repeats it (a test pins it).
pub const MAX_JSON_DEPTH: usize = codemode_abi::MAX_JSON_DEPTH;

/// Why the guest's JSON text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GuestJsonError(pub String);

/// Parses JSON text the guest produced.
///
/// # Errors
/// [`GuestJsonError`] for text that is not JSON or nests too deeply (only
/// a tampered guest produces either).
pub fn parse_guest_json(bytes: &[u8]) -> Result<serde_json::Value, GuestJsonError> {
    let repaired = replace_lone_surrogates(bytes);
    serde_json::from_slice(&repaired).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            GuestJsonError(format!(
                "the value nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
            ))
        } else {
            GuestJsonError(format!("the guest sent text that is not JSON ({e})"))
        }
    })
}

/// The longest error message a result carries (from the guest or from a
/// tool); longer ones are cut with a marker saying how long they were.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// `text` cut to at most `max` bytes (on a character boundary) plus a
/// marker naming the full length, or `text` unchanged when it fits.
pub fn bounded_text(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… [truncated: {} bytes in all]", &text[..cut], text.len())
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

/// `\udXXX` escapes that are not part of a surrogate pair become `\ufffd`.
pub(crate) fn replace_lone_surrogates(bytes: &[u8]) -> Cow<'_, [u8]> {
    if !bytes.windows(3).any(|w| w == b"\\ud" || w == b"\\uD") {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let unit = if bytes.get(i + 1) == Some(&b'u') {
            hex4(bytes, i + 2)
        } else {
            None
        };
        match unit {
            Some(0xD800..=0xDBFF) => {
                let low = (bytes.get(i + 6..i + 8) == Some(b"\\u"))
                    .then(|| hex4(bytes, i + 8))
                    .flatten();
                if matches!(low, Some(0xDC00..=0xDFFF)) {
                    out.extend_from_slice(&bytes[i..i + 12]);
                    i += 12;
                } else {
                    out.extend_from_slice(b"\\ufffd");
                    i += 6;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                out.extend_from_slice(b"\\ufffd");
                i += 6;
            }
            Some(_) => {
                out.extend_from_slice(&bytes[i..i + 6]);
                i += 6;
            }
            None => {
                // Any other escape: copy it whole, so `\\` never starts one.
                out.extend_from_slice(&bytes[i..(i + 2).min(bytes.len())]);
                i += 2;
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let v = parse_guest_json(br#"{"a":"ab\ud83d","b":"\ude00x","c":"\ud83d\ude00"}"#).unwrap();
        assert_eq!(v["a"], "ab\u{fffd}");
        assert_eq!(v["b"], "\u{fffd}x");
        assert_eq!(v["c"], "😀");
        // An escaped backslash followed by `ud83d` is text, not an escape.
        let v = parse_guest_json(br#""\\ud83d""#).unwrap();
        assert_eq!(v, "\\ud83d");
    }

    #[test]
    fn numbers_parse_to_exactly_the_double_the_guest_printed() {
        // Found by the fuzz smoke: without correctly rounded parsing this
        // came back one ulp off (…69e27).
        let v = parse_guest_json(b"[1.2345678901234567e+27]").unwrap();
        assert_eq!(v[0].as_f64(), Some(1.234_567_890_123_456_7e27));
        assert_eq!(v.to_string(), "[1.2345678901234567e+27]");
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(bounded_text("short".into(), 10), "short");
        let cut = bounded_text("é".repeat(10), 5);
        assert_eq!(cut, "éé… [truncated: 20 bytes in all]");
    }

    #[test]
    fn too_deep_and_not_json_say_so() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let e = parse_guest_json(deep.as_bytes()).unwrap_err();
        assert!(e.0.contains("deeper than 100"), "{e}");
        let ok = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert!(parse_guest_json(ok.as_bytes()).is_ok());
        assert!(
            parse_guest_json(b"{nope")
                .unwrap_err()
                .0
                .contains("not JSON")
        );
    }

    proptest! {
        /// Whatever JavaScript strings (any UTF-16 units) the guest encodes,
        /// the host parses them; well-formed text is kept exactly.
        #[test]
        fn any_utf16_string_parses(units in proptest::collection::vec(any::<u16>(), 0..40)) {
            let mut text = String::from("\"");
            for &u in &units {
                match u {
                    0x22 => text.push_str("\\\""),
                    0x5c => text.push_str("\\\\"),
                    0x00..=0x1f | 0xd800..=0xdfff => text.push_str(&format!("\\u{u:04x}")),
                    _ => text.push(char::from_u32(u32::from(u)).unwrap_or('?')),
                }
            }
            text.push('"');
            let parsed = parse_guest_json(text.as_bytes()).unwrap();
            let expected: String = char::decode_utf16(units.iter().copied())
                .map(|c| c.unwrap_or('\u{fffd}'))
                .collect();
            prop_assert_eq!(parsed, serde_json::Value::String(expected));
        }
    }
}
