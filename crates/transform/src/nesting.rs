//! A cheap upper estimate of how deeply a cell nests, taken on the raw text
//! before any parser sees it.
//!
//! Every parser, visitor and code generator that walks a syntax tree
//! recurses once per level, on the caller's thread. A hostile cell of
//! `[[[[…` or `!!!!…` or `1+1+1+…` (a left-deep tree) is tiny but deep
//! enough to overflow any fixed stack, and a Rust stack overflow aborts the
//! whole process. So the depth is bounded first, lexically: strings,
//! comments, regular expressions and template text are skipped, and the
//! estimate at any point is the number of open brackets plus, in each open
//! bracket, the number of operator characters, keyword operators and closed
//! groups seen since the last `,` or `;` or statement start. A tree level
//! always consumes at least one of those, so the real depth stays below the
//! estimate (statement starts the scanner cannot see without a parser —
//! a newline between two operands — at most halve it; callers keep a wide
//! stack margin).

/// The largest estimated nesting a cell may have. Far above what real
/// programs need (a 300-term string concatenation or a 100-step method
/// chain scores about 300), far below what overflows the checker's stack.
pub const MAX_NESTING_DEPTH: usize = 1_000;

/// A cell nests more deeply than [`MAX_NESTING_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the cell nests too deeply (more than {limit} levels of brackets or chained operators in one expression, reached at line {line}, column {column}); split deep literals and long operator chains into smaller statements"
)]
pub struct TooDeep {
    /// The limit that was passed.
    pub limit: usize,
    /// 1-based line where the estimate first passed the limit.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    Paren,
    /// The parenthesis after `if`, `for`, `while`, `with`: what follows its
    /// close is the statement's body, nested one level deeper.
    ControlParen,
    Bracket,
    Brace,
    /// `${ … }` inside a template literal.
    TemplateExpr,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start of input, after an operator, an opening bracket, `,` or `;`:
    /// a `/` here starts a regular expression.
    ExpressionStart,
    /// After an identifier, literal or closing bracket: `/` divides.
    Operand,
    /// After the `)` of `if (…)` and friends: the body follows (a `/` here
    /// starts a regular expression, and a newline is not a statement end).
    ControlHead,
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    frames: Vec<(Frame, usize)>,
    /// Chain count of the outermost level (no bracket open).
    top_chain: usize,
    /// Sum of all chain counts plus the number of open frames.
    depth: usize,
    max_depth: usize,
    /// The limit being checked and the offset of the token that first
    /// passed it.
    limit: usize,
    first_over: Option<usize>,
    prev: Prev,
    newline_before: bool,
    /// The last word was `else` (so `else if` does not start a statement).
    after_else: bool,
}

/// Words that only ever start a statement: the expression chain restarts.
const STATEMENT_WORDS: &[&[u8]] = &[
    b"const",
    b"var",
    b"return",
    b"throw",
    b"break",
    b"continue",
    b"try",
    b"switch",
    b"case",
    b"default",
    b"catch",
    b"finally",
];

/// Words that nest what follows them one level deeper.
const OPERATOR_WORDS: &[&[u8]] = &[
    b"typeof",
    b"void",
    b"delete",
    b"await",
    b"new",
    b"in",
    b"instanceof",
    b"of",
    b"yield",
    b"else",
    b"do",
    b"as",
    b"satisfies",
    b"keyof",
    b"extends",
];

/// Words whose parenthesis is a statement head.
const CONTROL_WORDS: &[&[u8]] = &[b"if", b"for", b"while", b"with"];

impl Scanner<'_> {
    fn chain_mut(&mut self) -> &mut usize {
        match self.frames.last_mut() {
            Some((_, chain)) => chain,
            None => &mut self.top_chain,
        }
    }

    fn bump(&mut self) {
        *self.chain_mut() += 1;
        self.depth += 1;
        self.note_max();
    }

    fn reset_chain(&mut self) {
        let chain = std::mem::take(self.chain_mut());
        self.depth -= chain;
    }

    fn note_max(&mut self) {
        self.max_depth = self.max_depth.max(self.depth);
        if self.depth > self.limit && self.first_over.is_none() {
            self.first_over = Some(self.pos.saturating_sub(1));
        }
    }

    fn open(&mut self, frame: Frame) {
        self.frames.push((frame, 0));
        self.depth += 1;
        self.note_max();
        self.prev = Prev::ExpressionStart;
    }

    /// Closes the innermost frame; the closed group is one more link in the
    /// enclosing chain (`f()()()`, `a[0][0]`). A closer with nothing open
    /// is ignored: the parser reports it.
    fn close(&mut self) -> Option<Frame> {
        let (frame, chain) = self.frames.pop()?;
        self.depth -= chain + 1;
        self.bump();
        Some(frame)
    }

    fn peek(&self, offset: usize) -> Option<u8> {
        self.bytes.get(self.pos + offset).copied()
    }

    fn skip_line_comment(&mut self) {
        while let Some(b) = self.peek(0) {
            if b == b'\n' {
                break;
            }
            self.pos += 1;
        }
    }

    fn skip_block_comment(&mut self) {
        self.pos += 2;
        while self.pos < self.bytes.len() {
            if self.bytes[self.pos] == b'\n' {
                self.newline_before = true;
            }
            if self.bytes[self.pos] == b'*' && self.peek(1) == Some(b'/') {
                self.pos += 2;
                return;
            }
            self.pos += 1;
        }
    }

    fn skip_string(&mut self, quote: u8) {
        self.pos += 1;
        while let Some(b) = self.peek(0) {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                b'\n' => return,
                _ if b == quote => return,
                _ => {}
            }
        }
    }

    fn skip_regex(&mut self) {
        self.pos += 1;
        let mut in_class = false;
        while let Some(b) = self.peek(0) {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                b'\n' => return,
                b'[' => in_class = true,
                b']' => in_class = false,
                b'/' if !in_class => break,
                _ => {}
            }
        }
        while self.peek(0).is_some_and(is_word_byte) {
            self.pos += 1;
        }
    }

    /// Template text up to its end or the next `${` (which opens a frame).
    fn scan_template_text(&mut self) {
        while let Some(b) = self.peek(0) {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                b'`' => {
                    self.prev = Prev::Operand;
                    return;
                }
                b'$' if self.peek(0) == Some(b'{') => {
                    self.pos += 1;
                    self.open(Frame::TemplateExpr);
                    return;
                }
                _ => {}
            }
        }
    }

    fn word(&mut self) {
        let start = self.pos;
        while self.peek(0).is_some_and(is_word_byte) {
            self.pos += 1;
        }
        let word = &self.bytes[start..self.pos];
        let after_else = std::mem::take(&mut self.after_else);
        if OPERATOR_WORDS.contains(&word) {
            self.bump();
            self.after_else = word == b"else";
            self.prev = Prev::ExpressionStart;
        } else if CONTROL_WORDS.contains(&word) {
            // `else if` and a body that is itself a statement nest; only a
            // control word at a statement start restarts the chain.
            if !after_else && self.prev != Prev::ControlHead {
                self.statement_start();
            }
            self.bump();
            self.skip_space();
            if self.peek(0) == Some(b'(') {
                self.pos += 1;
                self.open(Frame::ControlParen);
            } else {
                self.prev = Prev::ExpressionStart;
            }
        } else if STATEMENT_WORDS.contains(&word) && self.prev != Prev::ControlHead {
            self.statement_start();
            self.prev = Prev::ExpressionStart;
        } else {
            if self.prev == Prev::Operand && self.newline_before {
                // Operand, newline, operand: automatic semicolon insertion
                // ends the statement.
                self.reset_chain();
            }
            self.prev = Prev::Operand;
        }
    }

    fn statement_start(&mut self) {
        self.reset_chain();
    }

    fn skip_space(&mut self) {
        while let Some(b) = self.peek(0) {
            match b {
                b'\n' => self.newline_before = true,
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => {}
                _ => return,
            }
            self.pos += 1;
        }
    }

    fn number(&mut self) {
        while let Some(b) = self.peek(0) {
            let exponent_sign = (b == b'+' || b == b'-')
                && self.pos > 0
                && matches!(self.bytes[self.pos - 1], b'e' | b'E')
                && !self.bytes[..self.pos].starts_with(b"0x");
            if is_word_byte(b) || b == b'.' || exponent_sign {
                self.pos += 1;
            } else {
                break;
            }
        }
        if self.prev == Prev::Operand && self.newline_before {
            self.reset_chain();
        }
        self.prev = Prev::Operand;
    }

    fn run(&mut self) {
        while self.pos < self.bytes.len() {
            let b = self.bytes[self.pos];
            match b {
                b'\n' => {
                    self.newline_before = true;
                    self.pos += 1;
                    continue;
                }
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let newline_before = std::mem::take(&mut self.newline_before);
            match b {
                b'/' if self.peek(1) == Some(b'/') => {
                    self.skip_line_comment();
                    self.newline_before = newline_before;
                    continue;
                }
                b'/' if self.peek(1) == Some(b'*') => {
                    self.skip_block_comment();
                    self.newline_before |= newline_before;
                    continue;
                }
                b'"' | b'\'' => {
                    self.operand_start(newline_before);
                    self.skip_string(b);
                }
                b'`' => {
                    self.operand_start(newline_before);
                    self.pos += 1;
                    // A template is one link (a tagged template calls).
                    self.bump();
                    self.scan_template_text();
                }
                b'/' if self.prev != Prev::Operand => {
                    self.operand_start(newline_before);
                    self.skip_regex();
                    self.prev = Prev::Operand;
                }
                b'(' | b'[' | b'{' => {
                    self.pos += 1;
                    self.open(match b {
                        b'(' => Frame::Paren,
                        b'[' => Frame::Bracket,
                        _ => Frame::Brace,
                    });
                }
                b')' | b']' => {
                    self.pos += 1;
                    self.prev = match self.close() {
                        Some(Frame::ControlParen) => Prev::ControlHead,
                        _ => Prev::Operand,
                    };
                }
                b'}' => {
                    self.pos += 1;
                    if self.frames.last().map(|f| f.0) == Some(Frame::TemplateExpr) {
                        self.close();
                        self.scan_template_text();
                    } else {
                        self.close();
                        self.prev = Prev::Operand;
                    }
                }
                b',' | b';' => {
                    self.pos += 1;
                    self.reset_chain();
                    self.prev = Prev::ExpressionStart;
                }
                b'0'..=b'9' => {
                    self.newline_before = newline_before;
                    self.number();
                }
                b'.' if self.peek(1).is_some_and(|c| c.is_ascii_digit()) => {
                    self.newline_before = newline_before;
                    self.number();
                }
                _ if is_word_byte(b) => {
                    self.newline_before = newline_before;
                    self.word();
                    self.newline_before = false;
                }
                _ => {
                    // Operator characters (`+ - * % = < > ! ~ & | ^ ? : . @ #`
                    // and anything else): one level each, which over-counts
                    // multi-character operators on purpose.
                    self.pos += 1;
                    self.bump();
                    self.prev = Prev::ExpressionStart;
                }
            }
        }
    }

    fn operand_start(&mut self, newline_before: bool) {
        if self.prev == Prev::Operand && newline_before {
            self.reset_chain();
        }
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'\\' || b >= 0x80
}

fn scan(source: &str, limit: usize) -> Scanner<'_> {
    let mut scanner = Scanner {
        bytes: source.as_bytes(),
        pos: 0,
        frames: Vec::new(),
        top_chain: 0,
        depth: 0,
        max_depth: 0,
        limit,
        first_over: None,
        prev: Prev::ExpressionStart,
        newline_before: false,
        after_else: false,
    };
    scanner.run();
    scanner
}

/// The estimated maximum nesting depth of `source`.
pub fn nesting_estimate(source: &str) -> usize {
    scan(source, usize::MAX).max_depth
}

/// Checks that `source` nests at most `limit` levels (estimated) and
/// returns the estimate.
///
/// # Errors
/// [`TooDeep`] naming the limit and where it was first passed.
///
/// ```
/// use codemode_transform::{check_nesting, MAX_NESTING_DEPTH};
/// assert!(check_nesting("return [[1, 2], { a: (1 + 2) * 3 }]", MAX_NESTING_DEPTH).is_ok());
/// let deep = format!("return {}1{}", "[".repeat(5000), "]".repeat(5000));
/// assert!(check_nesting(&deep, MAX_NESTING_DEPTH).is_err());
/// ```
pub fn check_nesting(source: &str, limit: usize) -> Result<usize, TooDeep> {
    let scanner = scan(source, limit);
    match scanner.first_over {
        None => Ok(scanner.max_depth),
        Some(offset) => {
            let (line, column) = crate::line_column(source, offset);
            Err(TooDeep {
                limit,
                line,
                column,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(source: &str) -> usize {
        nesting_estimate(source)
    }

    #[test]
    fn ordinary_programs_score_low() {
        let cell = r#"
            const hits = await tools.search("issues", { limit: 5 });
            const out = [];
            for (const hit of hits) {
              if (hit.id.startsWith("mcp:")) continue;
              out.push({ id: hit.id, name: hit.name, score: (hit.score ?? 0) * 2 });
            }
            text(`found ${out.length} tools: ${out.map(o => o.name).join(", ")}`);
            return out.filter(o => o.score > 1).map(o => o.id);
        "#;
        assert!(depth(cell) < 30, "{}", depth(cell));
    }

    #[test]
    fn semicolon_free_lines_do_not_accumulate() {
        let cell = "let a = 1\n".repeat(5000) + "return a";
        assert!(depth(&cell) < 10, "{}", depth(&cell));
        let calls = "f(x)\n".repeat(5000);
        assert!(depth(&calls) < 10, "{}", depth(&calls));
    }

    #[test]
    fn strings_comments_regexes_and_templates_are_not_brackets() {
        let cell = r#"const s = "((((((((["; // [[[[[[
            /* {{{{{{{{ */ const r = /[(((((]\//g; const t = `((( ${"x"} [[[`;
            return s + r + t"#;
        assert!(depth(cell) < 12, "{}", depth(cell));
    }

    #[test]
    fn every_deep_shape_is_seen() {
        let n = 2_000;
        let shapes = [
            format!("return {}1{}", "[".repeat(n), "]".repeat(n)),
            format!("return {}1{}", "(".repeat(n), ")".repeat(n)),
            format!("return {}{}", "{a:".repeat(n), "}".repeat(n)),
            format!("return {}x", "!".repeat(n)),
            format!("return 1{}", "+1".repeat(n)),
            format!("return 1{}", "\n+1".repeat(n)),
            format!("return a{}", ".b".repeat(n)),
            format!("return f{}", "()".repeat(n)),
            format!("return {}x", "await ".repeat(n)),
            format!("return {}x", "typeof ".repeat(n)),
            format!("return {}0", "x=>".repeat(n)),
            format!("return {}0", "a?b:".repeat(n)),
            format!("{}1", "if (x)\n".repeat(n)),
            format!("if (a) {{}}{}", " else if (b) {}".repeat(n)),
            format!("return f{}", "`x`".repeat(n)),
            format!("return `{}{}`", "${`".repeat(n), "`}".repeat(n)),
            format!("ls {}", "-a ".repeat(n)),
        ];
        for shape in shapes {
            assert!(
                depth(&shape) >= n,
                "{} scored {}",
                &shape[..40.min(shape.len())],
                depth(&shape)
            );
        }
    }

    #[test]
    fn the_error_names_where_the_limit_was_passed() {
        let cell = format!("const ok = 1;\nreturn {}", "[".repeat(50));
        let error = check_nesting(&cell, 10).unwrap_err();
        assert_eq!((error.line, error.column), (2, 18));
        assert!(error.to_string().contains("more than 10 levels"));
    }
}
