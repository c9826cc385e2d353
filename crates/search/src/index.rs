//! The inverted index and the BM25F ranking.

use std::collections::{HashMap, HashSet};

use crate::text::{Piece, is_stop_word, pieces, stem};

/// The longest query text looked at (bytes, cut at a character boundary).
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most distinct query terms scored (the most specific ones, by IDF).
pub const MAX_QUERY_TERMS: usize = 32;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// Shortest query word tried as a prefix of a name word.
const MIN_PREFIX_CHARS: usize = 4;
/// Most name words one query word expands to as a prefix (and again as a
/// typo).
const MAX_EXPANSIONS: usize = 16;
/// A prefix or typo match counts this much of a whole-word match in the
/// name.
const PARTIAL_WEIGHT: f32 = 0.5;
/// Most distinct query words read (the rest of a longer query is left
/// out).
const MAX_QUERY_WORDS: usize = 256;
/// Most query words (that are no term of the index) tried as prefixes and
/// typos of name words: each costs a pass over the name words.
const MAX_PARTIAL_WORDS: usize = 8;
/// A pair of neighbouring query words found side by side in a field
/// counts this much of a single word (on top of the two words).
const PAIR_WEIGHT: f32 = 0.5;

/// The indexed fields, in [`FIELDS`] order.
#[derive(Debug, Clone, Copy)]
enum Field {
    Name = 0,
    Title = 1,
    Description = 2,
    Parameters = 3,
    Owner = 4,
}

const FIELD_COUNT: usize = 5;

/// Per-field weight and length normalisation `b` (BM25F).
struct FieldParams {
    weight: f32,
    b: f32,
}

const fn field(weight: f32, b: f32) -> FieldParams {
    FieldParams { weight, b }
}

/// Weights and `b` by [`Field`] (see the crate docs for why).
const FIELDS: [FieldParams; FIELD_COUNT] = [
    field(3.0, 0.75), // name
    field(2.0, 0.75), // title
    field(1.0, 0.75), // description
    field(0.5, 0.75), // parameters
    field(2.0, 0.75), // owner
];

/// One searchable entry, fields as plain text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document<'a> {
    /// The tool's name (`get_current_stock_price`, `deleteNote`); split into
    /// words and weighted highest.
    pub name: &'a str,
    /// The tool's full id (`plugin:notes:delete_note`); not indexed as text
    /// (its parts are the owner and name), only matched whole by a query
    /// equal to it.
    pub id: &'a str,
    /// A human label, if any.
    pub title: Option<&'a str>,
    /// What the tool does.
    pub description: &'a str,
    /// The names of the tool's input parameters (`symbol`, `start_date`);
    /// their descriptions are left out (see the crate docs).
    pub parameters: Vec<&'a str>,
    /// The plugin id or MCP server name the tool comes from.
    pub owner: &'a str,
}

/// One search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The document's position in [`Index::build`] order.
    pub doc: usize,
    /// Its score (higher is better; only comparable within one search).
    pub score: f32,
}

/// One document's entry in a term's postings.
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    /// The BM25F saturated term frequency over all fields, in `[0, 1)`.
    all: f32,
    /// The same over the name field alone (0 when not in the name).
    name: f32,
}

/// An inverted index over a tool catalog, built once (IDF, field lengths
/// and saturated term frequencies computed here), searched many times.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Term (stemmed) → its id; looked up, never iterated.
    terms: HashMap<String, u32>,
    /// Two terms side by side in a field (not across parameters; stop
    /// words skipped) → the id of that pair, scored like a term.
    pairs: HashMap<(u32, u32), u32>,
    /// By term id (words and pairs): postings in document order.
    postings: Vec<Vec<Posting>>,
    /// By term id.
    idf: Vec<f32>,
    /// Every distinct unstemmed word of a name, sorted, for prefix and
    /// typo matches.
    name_words: Vec<NameWord>,
    /// Lowercased name or id → documents (tier 2 exact matches).
    exact: HashMap<String, Vec<u32>>,
    /// A name's stemmed words joined by spaces, and its words run
    /// together → documents (tier 1 near-exact matches).
    near: HashMap<String, Vec<u32>>,
    /// The most words a name has (a longer query is no near-exact match).
    max_name_words: usize,
    len: usize,
}

/// A word of some name, for prefix and typo matches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct NameWord {
    word: String,
    chars: Box<[char]>,
    term: u32,
}

/// The stemmed term of a lowercase token.
fn term_of(token: &str, cjk: bool) -> String {
    if cjk {
        token.to_owned()
    } else {
        stem(token).into_owned()
    }
}

/// The keys a name (or a query) has for near-exact matching: its stemmed
/// words joined by single spaces, and its lowercase words run together.
fn near_keys(pieces: &[Piece]) -> Option<(String, String)> {
    let words: Vec<&str> = pieces
        .iter()
        .flat_map(|p| p.parts.iter().map(String::as_str))
        .collect();
    if words.is_empty() {
        return None;
    }
    let stemmed: Vec<String> = pieces
        .iter()
        .flat_map(|p| p.parts.iter().map(|w| term_of(w, p.cjk)))
        .collect();
    Some((stemmed.join(" "), words.concat()))
}

fn push_unique(map: &mut HashMap<String, Vec<u32>>, key: String, doc: u32) {
    let docs = map.entry(key).or_default();
    if docs.last() != Some(&doc) {
        docs.push(doc);
    }
}

/// The id of `term`, a new one if it is new.
fn intern(
    terms: &mut HashMap<String, u32>,
    raw: &mut Vec<Vec<(u32, [u16; FIELD_COUNT])>>,
    term: &str,
) -> u32 {
    if let Some(&id) = terms.get(term) {
        return id;
    }
    let id = new_id(raw);
    terms.insert(term.to_owned(), id);
    id
}

/// A new term id, with its (empty) postings.
fn new_id(raw: &mut Vec<Vec<(u32, [u16; FIELD_COUNT])>>) -> u32 {
    let id = u32::try_from(raw.len()).unwrap_or(u32::MAX);
    raw.push(Vec::new());
    id
}

/// Cuts `text` to at most `max` bytes at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A query word after analysis.
struct QueryWord {
    /// Lowercase, unstemmed (for prefix and typo matches).
    word: String,
    /// The id of its stemmed term, if the index has it.
    id: Option<u32>,
    cjk: bool,
    stop: bool,
}

/// A query after analysis.
struct QueryWords {
    /// Distinct words, in order of first appearance.
    distinct: Vec<QueryWord>,
    /// The query as positions in `distinct`.
    sequence: Vec<usize>,
}

impl Index {
    /// Indexes `docs`; a hit's `doc` is the position in this order.
    pub fn build<'a>(docs: impl IntoIterator<Item = Document<'a>>) -> Index {
        let mut index = Index::default();
        // By term id: (doc, raw term frequency per field).
        let mut raw: Vec<Vec<(u32, [u16; FIELD_COUNT])>> = Vec::new();
        // By doc: length per field, in tokens.
        let mut lengths: Vec<[u32; FIELD_COUNT]> = Vec::new();
        let mut name_words: Vec<(String, u32)> = Vec::new();
        // Token (unstemmed) → term id: each distinct token is stemmed once.
        let mut token_ids: HashMap<String, u32> = HashMap::new();

        for (position, doc) in docs.into_iter().enumerate() {
            let Ok(d) = u32::try_from(position) else {
                break; // More documents than a u32 counts: the rest are left out.
            };
            let name_pieces = pieces(doc.name);
            let mut fields: [Vec<Piece>; FIELD_COUNT] = Default::default();
            fields[Field::Name as usize] = name_pieces.clone();
            fields[Field::Title as usize] = doc.title.map(pieces).unwrap_or_default();
            fields[Field::Description as usize] = pieces(doc.description);
            fields[Field::Parameters as usize] =
                doc.parameters.iter().flat_map(|p| pieces(p)).collect();
            fields[Field::Owner as usize] = pieces(doc.owner);

            // (term id, field) of every token of this document.
            let mut occurrences: Vec<(u32, usize)> = Vec::new();
            let mut doc_lengths = [0u32; FIELD_COUNT];
            for (f, field_pieces) in fields.iter().enumerate() {
                let mut previous: Option<u32> = None;
                for piece in field_pieces {
                    let joined = piece.joined();
                    for token in piece.parts.iter().chain(joined.as_ref()) {
                        let id = match token_ids.get(token.as_str()) {
                            Some(&id) => id,
                            None => {
                                let id =
                                    intern(&mut index.terms, &mut raw, &term_of(token, piece.cjk));
                                token_ids.insert(token.clone(), id);
                                id
                            }
                        };
                        if f == Field::Name as usize {
                            name_words.push((token.clone(), id));
                        }
                        doc_lengths[f] = doc_lengths[f].saturating_add(1);
                        occurrences.push((id, f));
                    }
                    if f == Field::Parameters as usize {
                        continue;
                    }
                    for part in &piece.parts {
                        if piece.cjk || is_stop_word(part) {
                            continue;
                        }
                        let Some(&id) = token_ids.get(part.as_str()) else {
                            continue;
                        };
                        if let Some(prev) = previous.replace(id) {
                            let pair = *index
                                .pairs
                                .entry((prev, id))
                                .or_insert_with(|| new_id(&mut raw));
                            occurrences.push((pair, f));
                        }
                    }
                }
            }
            occurrences.sort_unstable();
            for group in occurrences.chunk_by(|a, b| a.0 == b.0) {
                let mut tf = [0u16; FIELD_COUNT];
                for &(_, f) in group {
                    tf[f] = tf[f].saturating_add(1);
                }
                if let Some(list) = raw.get_mut(group[0].0 as usize) {
                    list.push((d, tf));
                }
            }
            lengths.push(doc_lengths);

            push_unique(&mut index.exact, doc.name.trim().to_lowercase(), d);
            push_unique(&mut index.exact, doc.id.trim().to_lowercase(), d);
            let name_word_count: usize = name_pieces.iter().map(|p| p.parts.len()).sum();
            index.max_name_words = index.max_name_words.max(name_word_count);
            if let Some((stemmed, concat)) = near_keys(&name_pieces) {
                push_unique(&mut index.near, stemmed, d);
                push_unique(&mut index.near, concat, d);
            }
        }

        let n = lengths.len();
        index.len = n;
        let mut average = [0f32; FIELD_COUNT];
        for (f, avg) in average.iter_mut().enumerate() {
            let total: f64 = lengths.iter().map(|l| f64::from(l[f])).sum();
            *avg = if n == 0 {
                0.0
            } else {
                (total / n as f64) as f32
            };
        }
        // By doc and field: weight / length normalisation.
        let scale: Vec<[f32; FIELD_COUNT]> = lengths
            .iter()
            .map(|l| {
                let mut s = [0f32; FIELD_COUNT];
                for f in 0..FIELD_COUNT {
                    let FieldParams { weight, b } = FIELDS[f];
                    let norm = if average[f] > 0.0 {
                        1.0 - b + b * (l[f] as f32 / average[f])
                    } else {
                        1.0
                    };
                    s[f] = weight / norm;
                }
                s
            })
            .collect();

        index.idf = raw
            .iter()
            .map(|list| {
                let df = list.len() as f32;
                (1.0 + (n as f32 - df + 0.5) / (df + 0.5)).ln()
            })
            .collect();
        index.postings = raw
            .into_iter()
            .map(|list| {
                list.into_iter()
                    .map(|(doc, tf)| {
                        let s = scale.get(doc as usize).copied().unwrap_or_default();
                        let all: f32 = (0..FIELD_COUNT).map(|f| f32::from(tf[f]) * s[f]).sum();
                        let name = f32::from(tf[Field::Name as usize]) * s[Field::Name as usize];
                        Posting {
                            doc,
                            all: all / (K1 + all),
                            name: name / (K1 + name),
                        }
                    })
                    .collect()
            })
            .collect();
        name_words.sort_unstable();
        name_words.dedup();
        index.name_words = name_words
            .into_iter()
            .map(|(word, term)| NameWord {
                chars: word.chars().collect(),
                word,
                term,
            })
            .collect();
        index
    }

    /// How many documents the index holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The best hits for `query`, best first, at most `limit`; equal scores
    /// go by document position. A blank query, or one that matches no
    /// document (no word of it in the index, nor a prefix or typo of a
    /// name word, nor a document's exact name or id), returns nothing.
    ///
    /// The work is bounded whatever the query: only its first
    /// [`MAX_QUERY_BYTES`] and in them its first 256 distinct words are
    /// read, at most [`MAX_QUERY_TERMS`] distinct terms (the rarest) and as
    /// many neighbouring pairs are scored, and at most 8 unknown words are
    /// tried as prefixes or typos of name words.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let query = cut(query, MAX_QUERY_BYTES).trim();
        if query.is_empty() || limit == 0 || self.len == 0 {
            return Vec::new();
        }
        let query_pieces = pieces(query);
        let QueryWords { distinct, sequence } = self.query_words(&query_pieces);
        let any_content = distinct.iter().any(|w| !w.stop);

        // Distinct scored terms: known ones by IDF (rarest first), then
        // unknown ones that may still match a name word as a prefix or typo.
        let mut known: Vec<u32> = Vec::new();
        let mut seen: HashSet<u32> = HashSet::new();
        let mut unknown: Vec<&QueryWord> = Vec::new();
        for w in distinct.iter().filter(|w| !(any_content && w.stop)) {
            match w.id {
                Some(id) => {
                    if seen.insert(id) {
                        known.push(id);
                    }
                }
                None => unknown.push(w),
            }
        }
        known.sort_by(|a, b| self.idf_of(*b).total_cmp(&self.idf_of(*a)));
        known.truncate(MAX_QUERY_TERMS);
        unknown.truncate(MAX_PARTIAL_WORDS.min(MAX_QUERY_TERMS - known.len()));

        let mut scores = vec![0f32; self.len];
        for &id in &known {
            let idf = self.idf_of(id);
            for p in self.postings_of(id) {
                if let Some(s) = scores.get_mut(p.doc as usize) {
                    *s += idf * p.all;
                }
            }
        }
        for w in unknown {
            self.add_partial_matches(w, &mut scores);
        }
        // Neighbouring content words (stop words skipped, as in the index)
        // found side by side in some field.
        let content: Vec<Option<u32>> = sequence
            .iter()
            .filter_map(|&i| distinct.get(i))
            .filter(|w| !w.stop && !w.cjk)
            .map(|w| w.id)
            .collect();
        let mut pairs: Vec<u32> = Vec::new();
        for pair in content.windows(2) {
            let [Some(a), Some(b)] = pair else {
                continue;
            };
            if let Some(&id) = self.pairs.get(&(*a, *b))
                && !pairs.contains(&id)
                && pairs.len() < MAX_QUERY_TERMS
            {
                pairs.push(id);
            }
        }
        for id in pairs {
            let idf = PAIR_WEIGHT * self.idf_of(id);
            for p in self.postings_of(id) {
                if let Some(s) = scores.get_mut(p.doc as usize) {
                    *s += idf * p.all;
                }
            }
        }

        // Exact and near-exact name matches rank above everything else:
        // tier 2 (the query is the name or id), then tier 1 (the same
        // words), each lifted past the best plain score.
        let mut tiers: Vec<(u32, u8)> = Vec::new();
        let query_word_count: usize = query_pieces.iter().map(|p| p.parts.len()).sum();
        // No name has more words than the longest.
        let near = (query_word_count <= self.max_name_words)
            .then(|| near_keys(&query_pieces))
            .flatten();
        if let Some((stemmed, concat)) = near {
            for key in [&stemmed, &concat] {
                tiers.extend(self.near.get(key).into_iter().flatten().map(|&d| (d, 1)));
            }
        }
        let lowered = query.to_lowercase();
        tiers.extend(
            self.exact
                .get(&lowered)
                .into_iter()
                .flatten()
                .map(|&d| (d, 2)),
        );
        if !tiers.is_empty() {
            let top = scores.iter().copied().fold(0f32, f32::max);
            tiers.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            tiers.dedup_by_key(|(d, _)| *d);
            for (d, tier) in tiers {
                if let Some(s) = scores.get_mut(d as usize) {
                    *s += f32::from(tier) * (top + 1.0);
                }
            }
        }

        let mut hits: Vec<Hit> = scores
            .iter()
            .enumerate()
            .filter(|(_, s)| **s > 0.0)
            .map(|(doc, &score)| Hit { doc, score })
            .collect();
        let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc));
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_unstable_by(order);
        hits
    }

    /// The query's words, stemmed and flagged; a camelCase word whose
    /// run-together form is a term of the index (`GitHub` → `github`) is
    /// taken whole, otherwise as its parts.
    ///
    /// At most [`MAX_QUERY_WORDS`] distinct words are read.
    fn query_words(&self, query_pieces: &[Piece]) -> QueryWords {
        let mut distinct: Vec<QueryWord> = Vec::new();
        let mut positions: HashMap<String, usize> = HashMap::new();
        let mut sequence = Vec::new();
        for piece in query_pieces {
            let whole = piece
                .joined()
                .filter(|j| self.terms.contains_key(&term_of(j, piece.cjk)));
            let tokens: Vec<String> = match whole {
                Some(j) => vec![j],
                None => piece.parts.clone(),
            };
            for word in tokens {
                if let Some(&at) = positions.get(&word) {
                    sequence.push(at);
                    continue;
                }
                if distinct.len() >= MAX_QUERY_WORDS {
                    return QueryWords { distinct, sequence };
                }
                sequence.push(distinct.len());
                positions.insert(word.clone(), distinct.len());
                distinct.push(QueryWord {
                    id: self.terms.get(term_of(&word, piece.cjk).as_str()).copied(),
                    stop: !piece.cjk && is_stop_word(&word),
                    cjk: piece.cjk,
                    word,
                });
            }
        }
        QueryWords { distinct, sequence }
    }

    /// A query word that is no term of the index scores the name words it
    /// is the start of (at least [`MIN_PREFIX_CHARS`]: `calc` →
    /// `calculator`) or a typo of ([`typo_budget`], same first letter:
    /// `caculate` → `calculate`), at [`PARTIAL_WEIGHT`] of a whole-word
    /// name match, the best one per document.
    fn add_partial_matches(&self, w: &QueryWord, scores: &mut [f32]) {
        if w.cjk {
            return;
        }
        let chars: Vec<char> = w.word.chars().collect();
        let mut expanded: Vec<u32> = Vec::new();
        if chars.len() >= MIN_PREFIX_CHARS {
            let start = self
                .name_words
                .partition_point(|n| n.word.as_str() < w.word.as_str());
            for n in &self.name_words[start..] {
                if !n.word.starts_with(&w.word) || expanded.len() >= MAX_EXPANSIONS {
                    break;
                }
                if !expanded.contains(&n.term) {
                    expanded.push(n.term);
                }
            }
        }
        let budget = typo_budget(chars.len());
        if let (true, Some(first)) = (budget > 0, chars.first()) {
            // Like a fuzzy query with a prefix length of 1: the first
            // letter is taken as typed, which keeps the candidates to one
            // run of the sorted name words.
            let mut lead = [0u8; 4];
            let lead = &*first.encode_utf8(&mut lead);
            let start = self.name_words.partition_point(|n| n.word.as_str() < lead);
            let mut scratch = Vec::new();
            for n in self.name_words[start..]
                .iter()
                .take_while(|n| n.word.starts_with(lead))
            {
                if expanded.len() >= 2 * MAX_EXPANSIONS {
                    break;
                }
                if n.chars.len().abs_diff(chars.len()) <= budget
                    && !expanded.contains(&n.term)
                    && within_distance(&chars, &n.chars, budget, &mut scratch)
                {
                    expanded.push(n.term);
                }
            }
        }
        let mut best: Vec<(u32, f32)> = Vec::new();
        for id in expanded {
            let idf = self.idf_of(id);
            for p in self.postings_of(id) {
                if p.name > 0.0 {
                    best.push((p.doc, PARTIAL_WEIGHT * idf * p.name));
                }
            }
        }
        best.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
        best.dedup_by_key(|(doc, _)| *doc);
        for (doc, value) in best {
            if let Some(s) = scores.get_mut(doc as usize) {
                *s += value;
            }
        }
    }

    fn idf_of(&self, id: u32) -> f32 {
        self.idf.get(id as usize).copied().unwrap_or(0.0)
    }

    fn postings_of(&self, id: u32) -> &[Posting] {
        self.postings.get(id as usize).map_or(&[], Vec::as_slice)
    }
}

/// How many edits a query word of `len` characters may be from a name
/// word and still match it: none below 5 characters, 1 up to 7, 2 from 8
/// (Elasticsearch's `AUTO:5,8` fuzziness).
fn typo_budget(len: usize) -> usize {
    match len {
        0..5 => 0,
        5..8 => 1,
        _ => 2,
    }
}

/// Whether `a` and `b` are at most `max` edits apart (insertions,
/// deletions, substitutions, transpositions of neighbours: the optimal
/// string alignment distance), giving up as soon as a row exceeds `max`.
fn within_distance(a: &[char], b: &[char], max: usize, rows: &mut Vec<usize>) -> bool {
    if a.len().abs_diff(b.len()) > max {
        return false;
    }
    let width = b.len() + 1;
    rows.clear();
    rows.resize(3 * width, 0);
    let (mut two_back, rest) = rows.split_at_mut(width);
    let (mut one_back, mut current) = rest.split_at_mut(width);
    for (j, cell) in one_back.iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        current[0] = i;
        let mut row_min = i;
        for j in 1..width {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (one_back[j] + 1)
                .min(current[j - 1] + 1)
                .min(one_back[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(two_back[j - 2] + 1);
            }
            current[j] = d;
            row_min = row_min.min(d);
        }
        if row_min > max {
            return false;
        }
        std::mem::swap(&mut two_back, &mut one_back);
        std::mem::swap(&mut one_back, &mut current);
    }
    one_back[width - 1] <= max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &str, b: &str, max: usize) -> bool {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        within_distance(&a, &b, max, &mut Vec::new())
    }

    #[test]
    fn edit_distance_is_bounded_osa() {
        assert!(close("caculate", "calculate", 1));
        assert!(close("calculate", "calculate", 0));
        assert!(close("abdc", "abcd", 1));
        assert!(close("deploymnts", "deployments", 1));
        assert!(!close("kitten", "sitting", 2));
        assert!(close("kitten", "sitting", 3));
        assert!(close("", "ab", 2));
        assert!(!close("", "abc", 2));
        assert!(close("日本語", "日本", 1));
        assert_eq!(typo_budget(4), 0);
        assert_eq!(typo_budget(5), 1);
        assert_eq!(typo_budget(8), 2);
    }

    #[test]
    fn queries_are_cut_at_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }
}
