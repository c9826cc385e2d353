//! A `WWW-Authenticate: Bearer ...` challenge from an upstream (RFC 6750
//! §3): which error it names and which scopes it asks for. The header comes
//! from the network, so reading it never fails: whatever cannot be read is
//! left out.

/// What a bearer challenge says that the gateway acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BearerChallenge {
    /// `error`, e.g. `insufficient_scope` or `invalid_token`.
    pub error: Option<String>,
    /// `scope`, split on spaces.
    pub scopes: Vec<String>,
}

impl BearerChallenge {
    /// Reads the `Bearer` challenge of a header value (several challenges
    /// may share one value; the first `Bearer` one counts).
    pub(crate) fn parse(header: &str) -> BearerChallenge {
        let mut params = Params { rest: header };
        let mut in_bearer = false;
        let mut challenge = BearerChallenge::default();
        while let Some(item) = params.next() {
            match item {
                Item::Scheme(scheme) => {
                    if in_bearer {
                        break;
                    }
                    in_bearer = scheme.eq_ignore_ascii_case("bearer");
                }
                Item::Param(name, value) if in_bearer => {
                    if name.eq_ignore_ascii_case("error") && challenge.error.is_none() {
                        challenge.error = Some(value);
                    } else if name.eq_ignore_ascii_case("scope") && challenge.scopes.is_empty() {
                        challenge.scopes = value.split_whitespace().map(str::to_owned).collect();
                    }
                }
                Item::Param(..) => {}
            }
        }
        challenge
    }

    /// The server refuses the token for lack of scope (403).
    pub(crate) fn is_insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }

    /// The scopes asked for that `had` lacks.
    pub(crate) fn missing_from(&self, had: &[String]) -> Vec<String> {
        self.scopes
            .iter()
            .filter(|scope| !had.contains(scope))
            .cloned()
            .collect()
    }
}

enum Item {
    Scheme(String),
    Param(String, String),
}

/// The challenge's tokens: auth schemes and `name=value` parameters
/// (token or quoted string, RFC 9110 §11.6.1).
struct Params<'a> {
    rest: &'a str,
}

impl Params<'_> {
    fn next(&mut self) -> Option<Item> {
        loop {
            self.rest = self.rest.trim_start_matches([',', ' ', '\t']);
            if self.rest.is_empty() {
                return None;
            }
            let end = self
                .rest
                .find(['=', ',', ' ', '\t'])
                .unwrap_or(self.rest.len());
            let name = &self.rest[..end];
            let after = self.rest[end..].trim_start_matches([' ', '\t']);
            if name.is_empty() {
                // A stray `=`: skip it.
                self.rest = &self.rest[1..];
                continue;
            }
            let Some(value_text) = after.strip_prefix('=') else {
                self.rest = &self.rest[end..];
                return Some(Item::Scheme(name.to_owned()));
            };
            let value_text = value_text.trim_start_matches([' ', '\t']);
            if value_text.starts_with('=') {
                // token68 padding (`abc==`): not a parameter.
                self.rest = value_text.trim_start_matches('=');
                continue;
            }
            let (value, rest) = match value_text.strip_prefix('"') {
                Some(quoted) => unquote(quoted),
                None => {
                    let end = value_text
                        .find([',', ' ', '\t'])
                        .unwrap_or(value_text.len());
                    (value_text[..end].to_owned(), &value_text[end..])
                }
            };
            self.rest = rest;
            return Some(Item::Param(name.to_owned(), value));
        }
    }
}

/// A quoted string's value (after the opening quote) and what follows its
/// closing quote; an unterminated one runs to the end.
fn unquote(text: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return (value, &text[at + 1..]),
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            c => value.push(c),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_error_and_scopes_of_the_bearer_challenge() {
        let challenge = BearerChallenge::parse(
            r#"Bearer scope="mcp:basic mcp:write", resource_metadata="https://a/.well-known/oauth-protected-resource/mcp", error="insufficient_scope""#,
        );
        assert!(challenge.is_insufficient_scope());
        assert_eq!(challenge.scopes, ["mcp:basic", "mcp:write"]);
        assert_eq!(challenge.missing_from(&["mcp:basic".into()]), ["mcp:write"]);
        // Unquoted tokens, other schemes first, escapes in quoted strings.
        let challenge = BearerChallenge::parse(
            r#"Basic realm="x, y", Bearer error=insufficient_scope, scope="a\"b c""#,
        );
        assert_eq!(challenge.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(challenge.scopes, ["a\"b", "c"]);
        // Another scheme's parameters are not the bearer's.
        let challenge =
            BearerChallenge::parse(r#"Bearer realm="r", DPoP error="insufficient_scope""#);
        assert_eq!(challenge, BearerChallenge::default());
        assert_eq!(BearerChallenge::parse("Bearer"), BearerChallenge::default());
    }

    proptest! {
        /// Whatever the network sends, reading it ends and does not panic;
        /// a scope written as a quoted string is read back exactly.
        #[test]
        fn any_header_is_read_without_panic(header in "\\PC{0,200}") {
            let _ = BearerChallenge::parse(&header);
        }

        #[test]
        fn quoted_scopes_round_trip(scopes in proptest::collection::vec("[a-z:._-]{1,12}", 1..5), noise in "[ ,a-z=\"]{0,20}") {
            let header = format!("Bearer scope=\"{}\", error=\"insufficient_scope\", x={noise}", scopes.join(" "));
            let challenge = BearerChallenge::parse(&header);
            prop_assert_eq!(&challenge.scopes, &scopes);
            prop_assert!(challenge.is_insufficient_scope());
        }
    }
}
