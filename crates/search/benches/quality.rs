//! Ranking quality on LiveMCPBench (527 real MCP tools, 189 labelled
//! queries): recall@1/5/10 and MRR of `codemode-search` next to a plain
//! BM25 over name + description, computed here.
//!
//! The data is not in this repository: it is read from the directory named
//! by `CODEMODE_SEARCH_QUALITY`, or else `shared/search-quality` beside the
//! workspace; without it the bench says so and exits 0.
//!
//! `cargo bench -p codemode-search --bench quality`; with
//! `CODEMODE_SEARCH_QUALITY_VERBOSE=1` it also lists the queries where one
//! ranker has an expected tool in its top 5 and the other has none.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

mod common;
use common::Tool;
use serde_json::Value;

const TOOLS_FILE: &str = "livemcpbench.tools.json5";
const QUERIES_FILE: &str = "livemcpbench.queries.json";
/// Hits looked at per query.
const DEPTH: usize = 10;

struct Query {
    suite: String,
    text: String,
    expected: Vec<String>,
}

#[derive(Default, Clone, Copy)]
struct Metrics {
    queries: usize,
    recall: [f64; 3],
    mrr: f64,
}

impl Metrics {
    fn add(&mut self, ranked: &[&str], expected: &[String]) {
        self.queries += 1;
        if expected.is_empty() {
            return;
        }
        let wanted: HashSet<&str> = expected.iter().map(String::as_str).collect();
        for (slot, k) in [1, 5, 10].into_iter().enumerate() {
            let top: HashSet<&str> = ranked.iter().take(k).copied().collect();
            let found = wanted.intersection(&top).count();
            self.recall[slot] += found as f64 / wanted.len() as f64;
        }
        if let Some(rank) = ranked.iter().take(DEPTH).position(|n| wanted.contains(n)) {
            self.mrr += 1.0 / (rank as f64 + 1.0);
        }
    }

    fn mean(&self) -> [f64; 4] {
        let n = self.queries.max(1) as f64;
        [
            self.recall[0] / n,
            self.recall[1] / n,
            self.recall[2] / n,
            self.mrr / n,
        ]
    }
}

fn data_dir() -> PathBuf {
    match std::env::var_os("CODEMODE_SEARCH_QUALITY") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/search-quality"
        )),
    }
}

fn load_tools(text: &str) -> Result<Vec<Tool>, String> {
    let root: Value = json5::from_str(text).map_err(|e| format!("{TOOLS_FILE}: {e}"))?;
    let tools = root
        .get("tools")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{TOOLS_FILE}: no `tools` list"))?;
    let text_of =
        |t: &Value, key: &str| t.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    Ok(tools
        .iter()
        .map(|t| {
            let owner = text_of(t, "owner");
            let name = text_of(t, "name");
            let parameters = t
                .pointer("/parameters/properties")
                .and_then(Value::as_object)
                .map(|props| props.keys().cloned().collect())
                .unwrap_or_default();
            Tool {
                id: format!("plugin:{owner}:{name}"),
                description: text_of(t, "description"),
                parameters,
                name,
                owner,
            }
        })
        .collect())
}

fn load_queries(text: &str) -> Result<Vec<Query>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| format!("{QUERIES_FILE}: {e}"))?;
    let queries = root
        .get("queries")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{QUERIES_FILE}: no `queries` list"))?;
    Ok(queries
        .iter()
        .map(|q| Query {
            suite: q
                .get("suite")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            text: q
                .get("query")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            expected: q
                .get("expected")
                .and_then(Value::as_array)
                .map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect())
}

/// Plain BM25 (k1 = 1.2, b = 0.75) over name + description, lowercase
/// alphanumeric runs as terms, no stemming, no stop words.
struct Bm25 {
    postings: HashMap<String, Vec<(usize, f64)>>,
    lengths: Vec<f64>,
    average: f64,
}

impl Bm25 {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;

    fn words(text: &str) -> Vec<String> {
        text.to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn build(tools: &[Tool]) -> Bm25 {
        let mut postings: HashMap<String, Vec<(usize, f64)>> = HashMap::new();
        let mut lengths = Vec::new();
        for (doc, tool) in tools.iter().enumerate() {
            let words = Bm25::words(&format!("{} {}", tool.name, tool.description));
            lengths.push(words.len() as f64);
            let mut tf: BTreeMap<String, f64> = BTreeMap::new();
            for w in words {
                *tf.entry(w).or_default() += 1.0;
            }
            for (w, n) in tf {
                postings.entry(w).or_default().push((doc, n));
            }
        }
        let average = lengths.iter().sum::<f64>() / lengths.len().max(1) as f64;
        Bm25 {
            postings,
            lengths,
            average,
        }
    }

    fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        let n = self.lengths.len() as f64;
        let mut scores = vec![0f64; self.lengths.len()];
        let mut seen = HashSet::new();
        for w in Bm25::words(query) {
            if !seen.insert(w.clone()) {
                continue;
            }
            let Some(list) = self.postings.get(&w) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let norm = 1.0 - Bm25::B + Bm25::B * self.lengths[doc] / self.average;
                scores[doc] += idf * tf * (Bm25::K1 + 1.0) / (tf + Bm25::K1 * norm);
            }
        }
        let mut hits: Vec<(usize, f64)> = scores
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.into_iter().take(limit).map(|(d, _)| d).collect()
    }
}

fn print_table(title: &str, rows: &BTreeMap<String, (Metrics, Metrics)>) {
    println!("{title}");
    println!(
        "{:<20} {:>5}  {:<16} {:>6} {:>6} {:>6} {:>6}",
        "suite", "n", "ranker", "R@1", "R@5", "R@10", "MRR"
    );
    for (suite, (ours, bm25)) in rows {
        let o = ours.mean();
        let b = bm25.mean();
        let line = |name: &str, m: [f64; 4]| {
            println!(
                "{:<20} {:>5}  {:<16} {:>6.3} {:>6.3} {:>6.3} {:>6.3}",
                suite, ours.queries, name, m[0], m[1], m[2], m[3]
            );
        };
        line("codemode-search", o);
        line("bm25", b);
        println!(
            "{:<20} {:>5}  {:<16} {:>+6.3} {:>+6.3} {:>+6.3} {:>+6.3}",
            suite,
            ours.queries,
            "delta",
            o[0] - b[0],
            o[1] - b[1],
            o[2] - b[2],
            o[3] - b[3]
        );
    }
}

fn main() -> Result<(), String> {
    let dir = data_dir();
    let (Ok(tools_text), Ok(queries_text)) = (
        std::fs::read_to_string(dir.join(TOOLS_FILE)),
        std::fs::read_to_string(dir.join(QUERIES_FILE)),
    ) else {
        println!(
            "search quality: skipped, no {TOOLS_FILE} and {QUERIES_FILE} in {} (set CODEMODE_SEARCH_QUALITY to their directory)",
            dir.display()
        );
        return Ok(());
    };
    let tools = load_tools(&tools_text)?;
    let queries = load_queries(&queries_text)?;

    let index = common::build(&tools);
    let bm25 = Bm25::build(&tools);

    let mut rows: BTreeMap<String, (Metrics, Metrics)> = BTreeMap::new();
    for q in &queries {
        let ours: Vec<&str> = index
            .search(&q.text, DEPTH)
            .iter()
            .map(|h| tools[h.doc].name.as_str())
            .collect();
        let theirs: Vec<&str> = bm25
            .search(&q.text, DEPTH)
            .into_iter()
            .map(|d| tools[d].name.as_str())
            .collect();
        for suite in [q.suite.clone(), "overall".to_owned()] {
            let row = rows.entry(suite).or_default();
            row.0.add(&ours, &q.expected);
            row.1.add(&theirs, &q.expected);
        }
    }
    if std::env::var_os("CODEMODE_SEARCH_QUALITY_VERBOSE").is_some() {
        for q in &queries {
            let ours: Vec<&str> = index
                .search(&q.text, 5)
                .iter()
                .map(|h| tools[h.doc].name.as_str())
                .collect();
            let theirs: Vec<&str> = bm25
                .search(&q.text, 5)
                .into_iter()
                .map(|d| tools[d].name.as_str())
                .collect();
            let hit = |l: &[&str]| l.iter().any(|n| q.expected.iter().any(|e| e == n));
            if hit(&ours) != hit(&theirs) {
                println!(
                    "{} {:?}\n  expected {:?}\n  ours     {:?}\n  bm25     {:?}",
                    if hit(&ours) { "WIN " } else { "LOSS" },
                    q.text,
                    q.expected,
                    ours,
                    theirs
                );
            }
        }
    }
    print_table(
        &format!(
            "search quality: LiveMCPBench, {} tools, {} queries (top {DEPTH})",
            tools.len(),
            queries.len()
        ),
        &rows,
    );
    Ok(())
}
