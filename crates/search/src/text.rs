//! Text analysis: words, identifier parts, CJK bigrams, stop words, stems.

use std::borrow::Cow;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};
use unicode_segmentation::UnicodeSegmentation;

/// One unit of analysed text: an identifier component split into its
/// camelCase parts (one part when it has no inner capitals), or one CJK
/// bigram (or lone CJK character).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The lowercased parts, in order (never empty, no part empty).
    pub(crate) parts: Vec<String>,
    /// A CJK bigram or unigram (never stemmed, never a stop word).
    pub(crate) cjk: bool,
}

impl Piece {
    /// The parts run together: `deleteNote` gives `deletenote`. `None` for
    /// a one-part piece.
    pub(crate) fn joined(&self) -> Option<String> {
        (self.parts.len() > 1).then(|| self.parts.concat())
    }
}

/// Whether `c` is written without spaces between words, so is indexed by
/// character bigrams: Han (CJK unified ideographs and their extensions,
/// compatibility ideographs), Hiragana, Katakana, Hangul, Bopomofo.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF      // Hangul Jamo
        | 0x2E80..=0x2FDF    // CJK radicals, Kangxi radicals
        | 0x3005..=0x3007    // 々 〆 〇
        | 0x3021..=0x3029    // Hangzhou numerals
        | 0x3031..=0x3035    // kana repeat marks
        | 0x3040..=0x30FF    // Hiragana, Katakana
        | 0x3100..=0x312F    // Bopomofo
        | 0x3130..=0x318F    // Hangul compatibility Jamo
        | 0x31A0..=0x31BF    // Bopomofo extended
        | 0x31F0..=0x31FF    // Katakana phonetic extensions
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xA960..=0xA97F    // Hangul Jamo extended A
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xD7B0..=0xD7FF    // Hangul Jamo extended B
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF66..=0xFF9F    // halfwidth Katakana
        | 0xFFA0..=0xFFDC    // halfwidth Hangul
        | 0x1B000..=0x1B16F  // Kana supplement, extended A
        | 0x20000..=0x3134F  // CJK extensions B..G, compatibility supplement
    ) && c.is_alphanumeric()
}

/// The characters UAX #29 lets stand inside a word that separate the parts
/// of an identifier or a number: `_` (and the other connector
/// punctuation), `.`, `:`, `'`, `’`, `,`, `;` and their kin; and
/// whitespace or controls that a combining mark joined to a word.
fn is_inner_separator(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_alphanumeric();
    }
    // A combining mark after a space or a control joins it in a UAX #29
    // word (`" \u{345}"`).
    if c.is_whitespace() || c.is_control() {
        return true;
    }
    matches!(
        c,
        // MidLetter
        '\u{00B7}' | '\u{0387}' | '\u{055F}' | '\u{05F4}' | '\u{2027}' | '\u{FE13}' | '\u{FE55}' | '\u{FF1A}'
        // MidNumLet
        | '\u{2018}' | '\u{2019}' | '\u{2024}' | '\u{FE52}' | '\u{FF07}' | '\u{FF0E}'
        // MidNum
        | '\u{037E}' | '\u{0589}' | '\u{060C}' | '\u{060D}' | '\u{066C}' | '\u{07F8}' | '\u{2044}'
        | '\u{FE10}' | '\u{FE14}' | '\u{FE50}' | '\u{FE54}' | '\u{FF0C}' | '\u{FF1B}'
        // ExtendNumLet
        | '\u{202F}' | '\u{203F}' | '\u{2040}' | '\u{2054}' | '\u{FE33}' | '\u{FE34}'
        | '\u{FE4D}'..='\u{FE4F}' | '\u{FF3F}'
    )
}

/// Splits one separator-free identifier component on case changes:
/// `deleteNote` → `delete`, `Note`; `HTTPServer` → `HTTP`, `Server`;
/// `mp3File` → `mp3`, `File`. Digits stay with the letters before them
/// (`base64`, `mp3`).
fn camel_parts(component: &str, out: &mut Vec<String>) {
    if component
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        push_lower(component, out);
        return;
    }
    let chars: Vec<(usize, char)> = component.char_indices().collect();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, cur) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|&(_, n)| n.is_lowercase());
        let boundary = cur.is_uppercase()
            && (prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower));
        if boundary {
            push_lower(&component[start..at], out);
            start = at;
        }
    }
    push_lower(&component[start..], out);
}

fn push_lower(part: &str, out: &mut Vec<String>) {
    if part.is_empty() {
        return;
    }
    if part
        .bytes()
        .all(|b| !b.is_ascii_uppercase() && b.is_ascii())
    {
        out.push(part.to_owned());
    } else {
        out.push(part.to_lowercase());
    }
}

/// Analyses `text` into pieces: NFKC, Unicode word boundaries (UAX #29),
/// identifier components split on inner punctuation and then on case
/// changes, CJK runs as overlapping character bigrams (a lone character as
/// itself).
pub(crate) fn pieces(text: &str) -> Vec<Piece> {
    let normalized: Cow<'_, str> =
        if text.is_ascii() || is_nfkc_quick(text.chars()) == IsNormalized::Yes {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(text.nfkc().collect())
        };
    let mut out = Vec::new();
    let mut rest: &str = &normalized;
    while !rest.is_empty() {
        let cjk_at = rest.find(is_cjk).unwrap_or(rest.len());
        words(&rest[..cjk_at], &mut out);
        rest = &rest[cjk_at..];
        let end = rest.find(|c: char| !is_cjk(c)).unwrap_or(rest.len());
        cjk_bigrams(&rest[..end], &mut out);
        rest = &rest[end..];
    }
    out
}

fn words(text: &str, out: &mut Vec<Piece>) {
    for word in text.unicode_words() {
        for component in word.split(is_inner_separator) {
            let mut parts = Vec::new();
            camel_parts(component, &mut parts);
            parts.retain(|p| p.chars().any(char::is_alphanumeric));
            if !parts.is_empty() {
                out.push(Piece { parts, cjk: false });
            }
        }
    }
}

fn cjk_bigrams(run: &str, out: &mut Vec<Piece>) {
    let chars: Vec<char> = run.chars().flat_map(char::to_lowercase).collect();
    let grams: Vec<String> = match chars.len() {
        0 => Vec::new(),
        1 => vec![chars.iter().collect()],
        _ => chars.windows(2).map(|w| w.iter().collect()).collect(),
    };
    out.extend(grams.into_iter().map(|g| Piece {
        parts: vec![g],
        cjk: true,
    }));
}

/// The words of `text` as the index sees them before stemming, lowercased,
/// in order: Unicode word boundaries (UAX #29) after NFKC, punctuation
/// dropped, identifiers split into their words (`get_current_stock_price`,
/// `deleteNote`, `kebab-case`, `a.b.c`, `owner/tool`, `server:tool`,
/// `HTTPServer` → `http server`), digits kept (`mp3`, `2024`), CJK runs
/// (Han, Hiragana, Katakana, Hangul) as overlapping character bigrams (a
/// one-character run as itself). A camelCase word also gives its parts run
/// together after them (`GitHub` → `git`, `hub`, `github`), so a brand
/// written in camelCase still matches its lowercase spelling.
///
/// Stop words are kept and nothing is stemmed; see [`is_stop_word`] and
/// [`stem`].
///
/// ```
/// use codemode_search::tokens;
/// assert_eq!(tokens("Get the 'MCP' docs, deleteNote!"), ["get", "the", "mcp", "docs", "delete", "note", "deletenote"]);
/// assert_eq!(tokens("搜索关键词"), ["搜索", "索关", "关键", "键词"]);
/// ```
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in pieces(text) {
        let joined = piece.joined();
        out.extend(piece.parts);
        out.extend(joined);
    }
    out
}

/// The words of an identifier (or of any text), lowercased, without the
/// run-together forms [`tokens`] adds: `deleteNote` → `delete note`,
/// `get_current_stock_price`, `kebab-case`, `a.b.c`, `plugin:owner:tool`,
/// `HTTPServer` → `http server`.
///
/// ```
/// use codemode_search::split_identifier;
/// assert_eq!(split_identifier("HTTPServer"), ["http", "server"]);
/// assert_eq!(split_identifier("get_current-stock.price"), ["get", "current", "stock", "price"]);
/// assert_eq!(split_identifier("deleteNote"), ["delete", "note"]);
/// ```
pub fn split_identifier(text: &str) -> Vec<String> {
    pieces(text).into_iter().flat_map(|p| p.parts).collect()
}

/// Whether `word` (lowercase) is an English stop word. The list is NLTK's
/// English list (Snowball's, with the fragments an apostrophe split
/// leaves: `don`, `isn`, `t`, `s`, …), without its apostrophe forms since
/// [`tokens`] never keeps an apostrophe.
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// The Snowball English stem of `word` (lowercase). Only plain ASCII
/// letter words are stemmed (the stemmer is English); anything else comes
/// back as it is.
///
/// ```
/// use codemode_search::stem;
/// assert_eq!(stem("files"), "file");
/// assert_eq!(stem("searching"), "search");
/// assert_eq!(stem("mp3"), "mp3");
/// ```
pub fn stem(word: &str) -> Cow<'_, str> {
    if word.len() > 2 && word.bytes().all(|b| b.is_ascii_lowercase()) {
        Stemmer::create(Algorithm::English).stem(word)
    } else {
        Cow::Borrowed(word)
    }
}

/// NLTK's English stop words (apostrophe forms left out), sorted for
/// binary search.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "ain",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "couldn",
    "d",
    "did",
    "didn",
    "do",
    "does",
    "doesn",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn",
    "has",
    "hasn",
    "have",
    "haven",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "isn",
    "it",
    "its",
    "itself",
    "just",
    "ll",
    "m",
    "ma",
    "me",
    "mightn",
    "more",
    "most",
    "mustn",
    "my",
    "myself",
    "needn",
    "no",
    "nor",
    "not",
    "now",
    "o",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "re",
    "s",
    "same",
    "shan",
    "she",
    "should",
    "shouldn",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "ve",
    "very",
    "was",
    "wasn",
    "we",
    "were",
    "weren",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "won",
    "wouldn",
    "y",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_and_unique() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn identifiers_split() {
        assert_eq!(split_identifier("deleteNote"), ["delete", "note"]);
        assert_eq!(
            split_identifier("get_current_stock_price"),
            ["get", "current", "stock", "price"]
        );
        assert_eq!(split_identifier("kebab-case"), ["kebab", "case"]);
        assert_eq!(split_identifier("a.b.c"), ["a", "b", "c"]);
        assert_eq!(split_identifier("HTTPServer"), ["http", "server"]);
        assert_eq!(
            split_identifier("plugin:owner:tool"),
            ["plugin", "owner", "tool"]
        );
        assert_eq!(
            split_identifier("owner/tool_name"),
            ["owner", "tool", "name"]
        );
        assert_eq!(
            split_identifier("parseJSONToXML"),
            ["parse", "json", "to", "xml"]
        );
        assert_eq!(
            split_identifier("mp3File base64"),
            ["mp3", "file", "base64"]
        );
        assert_eq!(split_identifier("getV2Users"), ["get", "v2", "users"]);
        assert_eq!(split_identifier("ALL_CAPS"), ["all", "caps"]);
        assert_eq!(split_identifier("__init__"), ["init"]);
    }

    #[test]
    fn punctuation_is_stripped() {
        assert_eq!(
            tokens("'mcp' react, (vercel/ai)!"),
            ["mcp", "react", "vercel", "ai"]
        );
        assert_eq!(tokens("what's up?"), ["what", "s", "up"]);
        assert_eq!(tokens("“quoted” — dash…"), ["quoted", "dash"]);
        assert_eq!(tokens("3.14 and 1,000"), ["3", "14", "and", "1", "000"]);
    }

    #[test]
    fn cjk_runs_become_bigrams() {
        assert_eq!(tokens("股票"), ["股票"]);
        assert_eq!(tokens("查询股价"), ["查询", "询股", "股价"]);
        assert_eq!(tokens("字"), ["字"]);
        assert_eq!(
            tokens("bing_search返回的结果"),
            ["bing", "search", "返回", "回的", "的结", "结果"]
        );
        assert_eq!(
            tokens("カタカナ ひらがな"),
            ["カタ", "タカ", "カナ", "ひら", "らが", "がな"]
        );
        assert_eq!(tokens("한국어 검색"), ["한국", "국어", "검색"]);
        // Full-width forms fold to ASCII (NFKC).
        assert_eq!(tokens("ＡＢＣ１２３"), ["abc123"]);
    }

    #[test]
    fn stems_and_stop_words() {
        assert_eq!(stem("files"), "file");
        assert_eq!(stem("file"), "file");
        assert_eq!(stem("running"), "run");
        assert_eq!(stem("ab"), "ab");
        assert_eq!(stem("café"), "café");
        assert!(is_stop_word("the"));
        assert!(is_stop_word("me"));
        assert!(!is_stop_word("time"));
        assert!(!is_stop_word("get"));
    }
}
