//! No input makes the tokenizer or the index panic, and search keeps its
//! contract (bounded, sorted, deterministic) on arbitrary text.

use codemode_search::{Document, Index, split_identifier, tokens};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z_ .:/'-]{0,40}",
        "[\\p{Han}\\p{Hiragana}\\p{Katakana}\\p{Hangul} a-z]{0,20}",
        proptest::collection::vec(
            prop_oneof![
                Just("get"),
                Just("the"),
                Just("File"),
                Just("deleteNote"),
                Just("HTTPServer"),
                Just("搜索"),
                Just("'mcp'"),
                Just("calc"),
                Just("__"),
                Just("3.14"),
                Just("é"),
                Just("\u{301}"),
                Just("\u{200d}"),
                Just("ǅ"),
                Just("İ"),
                Just("ﬁ"),
            ],
            0..12
        )
        .prop_map(|w| w.join(" ")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tokens_never_panic_and_are_clean(s in text()) {
        for t in tokens(&s) {
            prop_assert!(!t.is_empty());
            prop_assert!(t.chars().any(char::is_alphanumeric), "{t:?}");
            prop_assert!(!t.chars().any(char::is_whitespace), "{t:?}");
        }
        for w in split_identifier(&s) {
            prop_assert!(!w.is_empty());
        }
    }

    #[test]
    fn search_keeps_its_contract(
        docs in proptest::collection::vec((text(), text(), text(), proptest::collection::vec(text(), 0..3)), 0..8),
        query in text(),
        limit in 0usize..12,
    ) {
        let build = || Index::build(docs.iter().map(|(name, description, owner, parameters)| Document {
            name,
            id: name,
            title: Some(owner),
            description,
            parameters: parameters.iter().map(String::as_str).collect(),
            owner,
        }));
        let index = build();
        prop_assert_eq!(index.len(), docs.len());
        let hits = index.search(&query, limit);
        prop_assert!(hits.len() <= limit);
        for h in &hits {
            prop_assert!(h.doc < docs.len());
            prop_assert!(h.score.is_finite() && h.score > 0.0);
        }
        for w in hits.windows(2) {
            prop_assert!(w[0].score > w[1].score || (w[0].score == w[1].score && w[0].doc < w[1].doc));
        }
        prop_assert_eq!(&hits, &build().search(&query, limit));
        if query.trim().is_empty() {
            prop_assert!(hits.is_empty());
        }
    }
}
