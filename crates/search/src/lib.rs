//! A deterministic, fast lexical ranker for tool catalogs: what answers
//! `tools.search(query)`.
//!
//! ```
//! use codemode_search::{Document, Index};
//!
//! let index = Index::build([
//!     Document { name: "get_weather", id: "plugin:weather:get_weather", title: None,
//!         description: "Get the current weather of a city.", parameters: vec!["city"], owner: "weather" },
//!     Document { name: "read_wiki_structure", id: "plugin:deepwiki:read_wiki_structure", title: None,
//!         description: "List the documentation topics of a GitHub repository.",
//!         parameters: vec!["repoName"], owner: "deepwiki" },
//! ]);
//! let hits = index.search("documentation topics of a repo", 5);
//! assert_eq!(hits[0].doc, 1);
//! assert_eq!(index.search("getWeather", 5)[0].doc, 0);
//! assert!(index.search("me", 5).is_empty());
//! ```
//!
//! # Text
//!
//! [`tokens`] turns text into words: NFKC, Unicode word boundaries
//! (UAX #29), lowercase, punctuation dropped; identifiers split into their
//! words ([`split_identifier`]: `deleteNote`, `get_current_stock_price`,
//! `kebab-case`, `a.b.c`, `owner/tool`, `server:tool`, `HTTPServer`), a
//! camelCase word also kept run together (`GitHub` → `git hub github`), so
//! a brand matches either spelling; digits kept (`mp3`, `2024`); Han,
//! Hiragana, Katakana and Hangul runs as overlapping character bigrams (a
//! lone character as itself), the usual way to match CJK text without a
//! dictionary. Terms are Snowball English stems ([`stem`]) of those words,
//! on both sides, and only whole terms match: "me" never matches "time".
//!
//! # Ranking
//!
//! BM25F (k1 = 1.2, b = 0.75 in every field), IDF computed once per
//! index. A term's frequency is summed over the fields with these weights,
//! each field normalised by its own average length, then saturated once:
//!
//! | field | weight | why |
//! | --- | --- | --- |
//! | name (split into words) | 3 | the tool's own short summary; what a model names |
//! | title | 2 | a human label, as short and as specific |
//! | owner (plugin or server) | 2 | how people name a tool set ("the deepwiki of …"); short |
//! | description | 1 | the most text, so the most incidental words |
//! | parameter names | 0.5 | hints (`symbol`, `repoName`), shared by many tools |
//!
//! Parameter descriptions are left out: on the one catalog measured they
//! changed nothing, and they are mostly boilerplate ("The date in
//! YYYY-MM-DD format") that a long schema would repeat.
//!
//! On top of the words:
//!
//! - English stop words (NLTK's list, [`is_stop_word`]) are dropped from
//!   the query, unless it holds nothing else ("the who" still searches).
//!   The index keeps them, so that fallback has something to match.
//! - Neighbouring query words found side by side in a field (stop words
//!   skipped: "stock price" in `get_stock_price`, "pull request") score
//!   again as a pair, at half the weight of a word (a light sequential
//!   dependence model).
//! - A query word that is no term of the index may still match a name word
//!   it begins (4 characters or more: `calc` → `calculator`) or is a typo
//!   of (same first letter, 1 edit from 5 characters, 2 from 8:
//!   `caculate` → `calculate`), at half the weight of a whole-word name
//!   match.
//! - A query that is a tool's name or id (any case) ranks that tool first;
//!   then a query with the same words as a name (`delete note`, `delete
//!   notes`, `deletenote` for `deleteNote`), above every other match.
//!
//! The IDF plus the name weight settle "one rare word in the name against
//! five common words in a description": a word every tool has is worth
//! almost nothing.
//!
//! # Determinism and bounds
//!
//! Nothing depends on hash iteration order; equal scores go by document
//! position. A query is read up to [`MAX_QUERY_BYTES`] and 256 distinct
//! words; at most [`MAX_QUERY_TERMS`] terms (the rarest) and as many pairs
//! are scored, and at most 8 unknown words tried as prefixes or typos, so
//! a query's cost is bounded by the catalog, not by the query.
//!
//! # Quality and speed
//!
//! `cargo bench -p codemode-search --bench quality` prints recall@1/5/10
//! and MRR on LiveMCPBench (527 MCP tools, 189 labelled queries; the data
//! is read from `shared/search-quality`, never kept here) next to a plain
//! BM25 over name and description; `--bench search` times searches over
//! synthetic catalogs of 1,000 and 10,000 tools and a 10,000-tool build.

mod index;
mod text;

pub use index::{Document, Hit, Index, MAX_QUERY_BYTES, MAX_QUERY_TERMS};
pub use text::{is_stop_word, split_identifier, stem, tokens};
