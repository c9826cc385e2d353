//! `cargo bench -p codemode-transform --bench transform`: the TypeScript
//! transform of a 25 KB cell, and the module-access check that every
//! JavaScript cell pays.
#![allow(clippy::unwrap_used, missing_docs, reason = "bench")]

use codemode_transform::{
    Dialect, MAX_NESTING_DEPTH, check_cell_body, check_module_access, check_nesting,
    looks_like_shell_command, transform_typescript,
};
use criterion::{Criterion, black_box, criterion_group, criterion_main};

/// About 25 KB of TypeScript with every construct the transform handles.
fn typescript_cell() -> String {
    let block = |i: usize| {
        format!(
            r#"
interface Item{i} {{ id: number; name: string; tags?: string[]; meta: Record<string, unknown> }}
type Result{i}<T> = {{ ok: true; value: T }} | {{ ok: false; error: string }};
enum Kind{i} {{ A = 1, B, C = "c" }}
class Store{i}<T extends {{ id: number }}> {{
  private items: Map<number, T> = new Map();
  constructor(private readonly name: string, public limit: number = 10) {{}}
  add(item: T): Result{i}<T> {{
    if (this.items.size >= this.limit) return {{ ok: false, error: "full" }};
    this.items.set(item.id, item);
    return {{ ok: true, value: item }};
  }}
  get(id: number): T | undefined {{ return this.items.get(id)!; }}
}}
const store{i} = new Store{i}<Item{i}>("s{i}", 5);
const added{i} = store{i}.add({{ id: {i}, name: "n{i}", meta: {{}} }} satisfies Item{i});
const kind{i}: Kind{i} = Kind{i}.B as Kind{i};
const found{i} = (await tools.search("item {i}", {{ limit: 1 }})) as Array<{{ id: string }}>;
"#
        )
    };
    let mut source = String::new();
    let mut i = 0;
    while source.len() < 25 * 1024 {
        source.push_str(&block(i));
        i += 1;
    }
    source.push_str("return store0.get(0);\n");
    source
}

fn javascript_cell() -> String {
    "const hits = await tools.search('weather', { limit: 3 });\nconst out = [];\nfor (const h of hits) out.push(await tools.call(h.id, { city: 'Oslo' }));\n// require and import only in a comment\nreturn out.map(o => o.tempC);\n".repeat(4)
}

fn bench(c: &mut Criterion) {
    let ts = typescript_cell();
    println!("typescript cell: {} bytes", ts.len());
    assert!(transform_typescript(&ts).is_ok());
    c.bench_function("transform a 25 KB TypeScript cell", |b| {
        b.iter(|| transform_typescript(black_box(&ts)).unwrap())
    });
    c.bench_function("module-access check of the 25 KB TypeScript cell", |b| {
        b.iter(|| check_module_access(black_box(&ts), Dialect::TypeScript).unwrap())
    });
    let js = javascript_cell();
    println!("javascript cell: {} bytes", js.len());
    c.bench_function(
        "module-access + shell check of a 1 KB JavaScript cell",
        |b| {
            b.iter(|| {
                assert!(looks_like_shell_command(black_box(&js), Dialect::JavaScript).is_none());
                check_module_access(black_box(&js), Dialect::JavaScript).unwrap()
            })
        },
    );
    c.bench_function("nesting estimate of the 1 KB JavaScript cell", |b| {
        b.iter(|| check_nesting(black_box(&js), MAX_NESTING_DEPTH).unwrap())
    });
    c.bench_function("one-function-body check of the 1 KB JavaScript cell", |b| {
        b.iter(|| check_cell_body(black_box(&js)).unwrap())
    });
    c.bench_function("one-function-body check of `return 1`", |b| {
        b.iter(|| check_cell_body(black_box("return 1")).unwrap())
    });
    c.bench_function("nesting estimate of the 25 KB TypeScript cell", |b| {
        b.iter(|| check_nesting(black_box(&ts), MAX_NESTING_DEPTH).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
