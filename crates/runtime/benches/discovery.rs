//! Discovery benchmarks (issue: the model finds the right tool first time):
//! - `Catalog::search` (`tools.search`'s ranking) over 1,000 and 10,000
//!   tools, the ranker's statistics already built for the catalog;
//! - the pre-run name check: a 100-line cell against a 1,000-tool catalog,
//!   the source checks alone next to the source checks plus the name check
//!   (collecting the names on the same parse, resolving them against the
//!   catalog): its cost is the difference.
//!
//! `cargo bench -p codemode-runtime --bench discovery`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "bench"
)]

use codemode_runtime::fuzzing::{prepare_and_check_names, source_checks_only};
use codemode_runtime::{Catalog, McpServerInfo, ToolDefinition, ToolPolicy, ToolSource};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

const VERBS: [&str; 12] = [
    "get", "list", "create", "update", "delete", "search", "read", "write", "send", "fetch",
    "convert", "analyze",
];
const NOUNS: [&str; 16] = [
    "file",
    "issue",
    "note",
    "page",
    "message",
    "user",
    "repository",
    "calendar_event",
    "invoice",
    "image",
    "document",
    "weather",
    "stock_price",
    "ticket",
    "comment",
    "playlist",
];
const WORDS: [&str; 24] = [
    "the", "a", "for", "with", "from", "by", "given", "current", "remote", "local", "all",
    "project", "account", "team", "public", "private", "recent", "details", "summary", "status",
    "format", "markdown", "json", "id",
];

/// `n` tools over `servers` servers with realistic names, descriptions and
/// schemas (deterministic).
fn tools(n: usize, source: ToolSource, servers: usize) -> Vec<ToolDefinition> {
    (0..n)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            let name = format!("{verb}_{noun}_{i}");
            let description: Vec<&str> = (0..14).map(|k| WORDS[(i * 7 + k * 5) % WORDS.len()]).collect();
            ToolDefinition::new(source, &format!("server{}", i % servers), &name)
                .with_description(&format!("{verb} {noun} {}", description.join(" ")))
                .with_parameters(json!({
                    "type": "object",
                    "properties": { "id": { "type": "string" }, "limit": { "type": "integer" }, "query": { "type": "string" } },
                    "required": ["id"]
                }))
        })
        .collect()
}

/// A 100-line cell calling MCP tools of the 1,000-tool catalog.
fn hundred_line_cell() -> String {
    let mut lines = vec!["const results = [];".to_owned()];
    for i in 0..33 {
        let verb = VERBS[i % VERBS.len()];
        let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
        let js = format!("{verb}{}{i}", camel(noun));
        lines.push(format!(
            "const r{i} = await MCP.server{}.{js}({{ id: \"x{i}\", limit: {i} }});",
            i % 20
        ));
        lines.push(format!(
            "if (r{i}.isError) {{ results.push(\"failed {i}\"); }}"
        ));
        lines.push(format!("else results.push(unwrap(r{i}));"));
    }
    lines.push("return results.filter(Boolean).slice(0, 10);".to_owned());
    assert!(lines.len() >= 100);
    lines.join("\n")
}

fn camel(noun: &str) -> String {
    noun.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    for n in [1_000, 10_000] {
        let catalog =
            Catalog::build(tools(n, ToolSource::Plugin, 50), &ToolPolicy::default()).unwrap();
        // Built once per catalog version: the first search pays for it.
        assert!(!catalog.search("warm", 1).is_empty() || catalog.len() == n);
        c.bench_function(
            &format!("tools.search over {n} tools (3-word query)"),
            |b| {
                b.iter(|| catalog.search("delete the invoice", 8));
            },
        );
    }

    let servers: Vec<McpServerInfo> = (0..20)
        .map(|i| McpServerInfo::new(&format!("server{i}")))
        .collect();
    let catalog = Catalog::build_with_mcp_servers(
        tools(1_000, ToolSource::Mcp, 20),
        &ToolPolicy::default(),
        &servers,
    )
    .unwrap();
    let cell = hundred_line_cell();
    prepare_and_check_names(&cell, false, &catalog).expect("the bench cell names real tools");
    let wrong = cell.replace("deleteFile4", "deleteFiles4");
    assert!(prepare_and_check_names(&wrong, false, &catalog).is_err());
    c.bench_function(
        "pre-run checks of a 100-line cell (source checks only)",
        |b| {
            b.iter(|| source_checks_only(&cell, false).unwrap());
        },
    );
    c.bench_function(
        "pre-run checks of a 100-line cell + name check vs 1,000 tools",
        |b| {
            b.iter(|| prepare_and_check_names(&cell, false, &catalog).unwrap());
        },
    );
    // Hostile: thousands of names, each feature-tested and called.
    let hostile: String = (0..2000)
        .map(|i| {
            format!(
                "if (MCP.server{}.nope{i}) await MCP.server{}.nope{i}({{ id: 'a' }});\n",
                i % 20,
                i % 20
            )
        })
        .collect();
    prepare_and_check_names(&hostile, false, &catalog).expect("guarded names are left to run time");
    c.bench_function(
        "name check of a hostile cell: 2,000 guarded unknown calls",
        |b| {
            b.iter(|| prepare_and_check_names(&hostile, false, &catalog).unwrap());
        },
    );
    c.bench_function("source checks only of that cell", |b| {
        b.iter(|| source_checks_only(&hostile, false).unwrap());
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = bench
}
criterion_main!(benches);
