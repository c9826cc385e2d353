//! A deterministic lexical ranker for tool catalogs (TODO docs).

mod index;
mod text;

pub use index::{Document, Hit, Index, MAX_QUERY_BYTES, MAX_QUERY_TERMS};
pub use text::{is_stop_word, split_identifier, stem, tokens};
