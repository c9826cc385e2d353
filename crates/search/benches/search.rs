//! Search and build speed on synthetic tool catalogs of 1,000 and 10,000
//! tools made from a realistic vocabulary (service owners, verb_noun names
//! in snake, camel and kebab case, descriptions of 20 to 70 words,
//! parameter names).
//!
//! `cargo bench -p codemode-search --bench search`

#![allow(missing_docs, reason = "criterion's macros define undocumented items")]

use std::hint::black_box;
use std::time::Duration;

mod common;
use common::{Tool, build};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const OWNERS: &[&str] = &[
    "github",
    "gitlab",
    "slack",
    "notion",
    "jira",
    "linear",
    "google-drive",
    "gmail",
    "google-calendar",
    "stripe",
    "shopify",
    "postgres",
    "mysql",
    "redis",
    "aws-s3",
    "kubernetes",
    "docker",
    "weather",
    "yahoo-finance",
    "arxiv",
    "wikipedia",
    "filesystem",
    "git",
    "playwright",
    "figma",
    "airtable",
    "hubspot",
    "salesforce",
    "zendesk",
    "twilio",
    "sendgrid",
    "discord",
    "telegram",
    "trello",
    "asana",
    "todoist",
    "dropbox",
    "onedrive",
    "excel",
    "word-document",
    "powerpoint",
    "pdf-tools",
    "image-tools",
    "youtube",
    "spotify",
    "google-maps",
    "airbnb",
    "hackernews",
    "reddit",
    "calendly",
    "zoom",
    "datadog",
    "sentry",
    "pagerduty",
    "vercel",
    "netlify",
    "cloudflare",
    "openweather",
    "news-api",
    "deepwiki",
];

const VERBS: &[&str] = &[
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "send",
    "fetch",
    "add",
    "remove",
    "upload",
    "download",
    "read",
    "write",
    "query",
    "run",
    "start",
    "stop",
    "convert",
    "generate",
    "summarize",
    "analyze",
    "export",
    "import",
    "sync",
    "move",
    "copy",
    "rename",
    "share",
    "archive",
    "merge",
    "approve",
    "schedule",
    "cancel",
    "translate",
    "resize",
];

const NOUNS: &[&str] = &[
    "issue",
    "pull_request",
    "repository",
    "file",
    "folder",
    "message",
    "channel",
    "user",
    "event",
    "calendar",
    "page",
    "database",
    "table",
    "record",
    "row",
    "column",
    "document",
    "spreadsheet",
    "slide",
    "image",
    "video",
    "playlist",
    "track",
    "stock",
    "price",
    "order",
    "customer",
    "invoice",
    "payment",
    "ticket",
    "comment",
    "task",
    "project",
    "branch",
    "commit",
    "deployment",
    "container",
    "pod",
    "bucket",
    "object",
    "email",
    "contact",
    "note",
    "bookmark",
    "forecast",
    "location",
    "route",
    "place",
    "meeting",
    "recording",
    "alert",
    "incident",
    "metric",
    "log",
    "dashboard",
    "report",
    "chart",
    "paper",
    "article",
    "summary",
    "transcript",
    "subscription",
    "product",
    "inventory",
    "label",
    "milestone",
    "release",
    "workflow",
    "secret",
    "domain",
    "certificate",
    "webhook",
    "token",
    "permission",
    "team",
];

const QUALIFIERS: &[&str] = &[
    "current",
    "recent",
    "all",
    "new",
    "historical",
    "daily",
    "latest",
    "public",
    "private",
    "shared",
    "archived",
    "pending",
    "active",
    "detailed",
    "raw",
    "bulk",
    "default",
    "remote",
];

const FILLERS: &[&str] = &[
    "Use this tool when the user asks about it.",
    "Supports pagination with a cursor and a page size.",
    "Results are sorted by date, newest first.",
    "Requires an API key with read access.",
    "Returns an error when the item does not exist.",
    "The response includes the id, the title and the URL of each item.",
    "Dates are in ISO 8601 format and times in UTC.",
    "Only works within the allowed directories.",
    "Rate limited to 60 requests per minute.",
    "Large results are truncated; narrow the query to see more.",
    "Set dry_run to preview the change without applying it.",
    "Markdown and plain text are both accepted.",
    "Handles Unicode text and emoji.",
    "Returns at most 100 items unless a limit is given.",
];

const PARAMS: &[&str] = &[
    "id",
    "query",
    "limit",
    "cursor",
    "owner",
    "repo",
    "path",
    "content",
    "channelId",
    "user_id",
    "start_date",
    "end_date",
    "title",
    "body",
    "labels",
    "format",
    "timezone",
    "symbol",
    "url",
    "email",
    "project_key",
    "page_size",
    "sort_by",
    "dry_run",
];

/// SplitMix64: a tiny deterministic generator (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn camel(words: &[&str]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().flat_map(|w| w.split('_')).enumerate() {
        if i == 0 {
            out.push_str(w);
        } else {
            let mut chars = w.chars();
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
        }
    }
    out
}

fn catalog(size: usize) -> Vec<Tool> {
    let mut rng = Rng(0x5EED ^ size as u64);
    (0..size)
        .map(|i| {
            // About 40 tools a server: 25 servers for 1,000, 250 for 10,000.
            let base = OWNERS[(i / 40) % OWNERS.len()];
            let owner = if i / 40 < OWNERS.len() {
                base.to_owned()
            } else {
                format!("{base}-{}", i / 40 / OWNERS.len())
            };
            let verb = rng.pick(VERBS);
            let noun = rng.pick(NOUNS);
            let qualifier = rng.pick(QUALIFIERS);
            let words: Vec<&str> = if rng.below(3) == 0 {
                vec![verb, qualifier, noun]
            } else {
                vec![verb, noun]
            };
            let name = match rng.below(4) {
                0 => camel(&words),
                1 => words.join("-").replace('_', "-"),
                _ => words.join("_"),
            };
            let other = rng.pick(NOUNS).replace('_', " ");
            let third = rng.pick(NOUNS).replace('_', " ");
            let mut description = format!(
                "{}{} a {} {} in {}. Returns the {} and the {} of the {}.",
                verb[..1].to_uppercase(),
                &verb[1..],
                qualifier,
                noun.replace('_', " "),
                base,
                other,
                third,
                noun.replace('_', " "),
            );
            for _ in 0..rng.below(5) {
                description.push(' ');
                description.push_str(rng.pick(FILLERS));
            }
            let parameters = (0..1 + rng.below(4))
                .map(|_| rng.pick(PARAMS).to_owned())
                .collect();
            Tool {
                id: format!("plugin:{owner}:{name}"),
                name,
                description,
                parameters,
                owner,
            }
        })
        .collect()
}

fn queries(tools: &[Tool]) -> Vec<(&'static str, String)> {
    let mut rng = Rng(42);
    let hostile: String = (0..2_000)
        .map(|_| format!("{}{} ", rng.pick(NOUNS), rng.below(1000)))
        .collect();
    // Every word of the vocabulary, over and over: as many known terms and
    // pairs as a query can score.
    let mut vocabulary = String::new();
    while vocabulary.len() < 4096 {
        for w in VERBS.iter().chain(NOUNS).chain(QUALIFIERS) {
            vocabulary.push_str(w);
            vocabulary.push(' ');
        }
    }
    vec![
        ("short", "create github issue".to_owned()),
        ("sentence", "send a message to the team channel on slack".to_owned()),
        ("stock", "get the current stock price for a ticker symbol".to_owned()),
        (
            "task",
            "Find the latest issues in the repository, summarize the comments and send an email to the project team with a report of the pending pull requests and failed deployments"
                .to_owned(),
        ),
        ("exact_name", tools[tools.len() / 2].name.clone()),
        ("partial", "deploym archiv".to_owned()),
        ("common", "get list".to_owned()),
        ("hostile_4k", hostile),
        ("vocabulary_4k", vocabulary),
    ]
}

fn bench(c: &mut Criterion) {
    for size in [1_000, 10_000] {
        let tools = catalog(size);
        let index = build(&tools);
        let mut group = c.benchmark_group(format!("search_{size}"));
        group.measurement_time(Duration::from_secs(3));
        for (label, query) in queries(&tools) {
            group.bench_with_input(BenchmarkId::from_parameter(label), &query, |b, q| {
                b.iter(|| index.search(black_box(q), 10));
            });
        }
        group.finish();
    }
    let tools = catalog(10_000);
    let mut group = c.benchmark_group("build");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("10000", |b| b.iter(|| build(black_box(&tools))));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
