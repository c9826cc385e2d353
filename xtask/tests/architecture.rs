//! Architecture invariants read from the source (as rust-analyzer keeps
//! its rules in tests): in no crate of the workspace do the modules'
//! `crate::` imports form a circle, and in the runtime crate every import
//! points to the same floor or a lower one (`ARCHITECTURE.md`, "Floors of
//! the runtime crate").

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use xtask::workspace_root;

/// The floors of the runtime crate, bottom first, by top-level module. A module
/// imports only from its own floor or below; within a floor, the module
/// graph must still be acyclic.
const FLOORS: &[(&str, u8)] = &[
    // Plain data and small shared parts.
    ("suggest", 0),
    ("config", 0),
    ("result", 0),
    ("progress", 0),
    ("handles", 0),
    ("slots", 0),
    ("trajectory", 0),
    ("input", 0),
    // What the guest may see: tools, catalog, MCP namespace, declarations,
    // guest API, plugin namespaces, the model surface.
    ("catalog", 1),
    // The embedder's vocabulary (context, executor, calls) and live scopes.
    ("executor", 2),
    // May this call run: hooks, approvals, the gate.
    ("control", 3),
    // One exec or wait from input to result, and the stores of waiting runs.
    ("run", 4),
    // The public facade.
    ("runtime", 5),
    ("session", 5),
    ("activation", 5),
    ("payload", 5),
    ("debug", 5),
    ("fuzzing", 5),
    ("lib", 5),
];

/// The `src` folder of every crate in the workspace, by folder name.
fn crate_sources() -> Vec<(String, PathBuf)> {
    let root = workspace_root();
    let mut dirs = vec![
        ("guest".to_owned(), root.join("guest/src")),
        ("xtask".to_owned(), root.join("xtask/src")),
        (
            "bindings/common".to_owned(),
            root.join("bindings/common/src"),
        ),
        ("bindings/node".to_owned(), root.join("bindings/node/src")),
        (
            "bindings/python".to_owned(),
            root.join("bindings/python/src"),
        ),
    ];
    let crates =
        std::fs::read_dir(root.join("crates")).unwrap_or_else(|e| panic!("read crates/: {e}"));
    for entry in crates.filter_map(Result::ok) {
        let src = entry.path().join("src");
        if src.is_dir() {
            dirs.push((entry.file_name().to_string_lossy().into_owned(), src));
        }
    }
    dirs.sort();
    dirs
}

fn runtime_src() -> PathBuf {
    workspace_root().join("crates/runtime/src")
}

/// Module path (`run::state`, `catalog`, `lib`) of every source file
/// under `root`.
fn modules(root: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path
                    .strip_prefix(root)
                    .unwrap_or_else(|e| panic!("{} outside src: {e}", path.display()))
                    .with_extension("");
                let mut parts: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|p| p == "mod") {
                    parts.pop();
                }
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                out.insert(parts.join("::"), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The code of a file without its unit tests and comments: imports that
/// only tests or docs make are not arrows of the architecture.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts with `crate::`, use-tree groups expanded
/// (`crate::a::{b, c::D}` gives `a::b` and `a::c::D`).
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let preceded_by_ident = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        rest = &rest[i + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        let (tree, _) = use_tree(rest);
        paths.extend(tree);
    }
    paths
}

/// Parses `a::b::{c, d::e}` at the start of `text` into its leaf paths.
fn use_tree(text: &str) -> (Vec<String>, usize) {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut prefix: Vec<String> = Vec::new();
    loop {
        while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
            pos += 1;
        }
        if pos < bytes.len() && bytes[pos] == b'{' {
            pos += 1;
            let mut leaves = Vec::new();
            loop {
                let (sub, used) = use_tree(&text[pos..]);
                pos += used;
                leaves.extend(sub.into_iter().map(|s| {
                    let mut full = prefix.clone();
                    if !s.is_empty() && s != "self" {
                        full.push(s);
                    }
                    full.join("::")
                }));
                while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
                    pos += 1;
                }
                match bytes.get(pos) {
                    Some(b',') => pos += 1,
                    Some(b'}') => {
                        pos += 1;
                        return (leaves, pos);
                    }
                    _ => return (leaves, pos),
                }
                while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
                    pos += 1;
                }
                if bytes.get(pos) == Some(&b'}') {
                    pos += 1;
                    return (leaves, pos);
                }
            }
        }
        let start = pos;
        while pos < bytes.len() && (bytes[pos].is_ascii_alphanumeric() || bytes[pos] == b'_') {
            pos += 1;
        }
        if pos == start {
            return (vec![prefix.join("::")], pos);
        }
        prefix.push(text[start..pos].to_owned());
        if text[pos..].starts_with("::") {
            pos += 2;
        } else {
            return (vec![prefix.join("::")], pos);
        }
    }
}

/// The module a path names: its longest prefix that is a module.
fn module_of(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|k| parts[..k].join("::"))
        .find(|m| modules.contains(m))
}

/// Module → the modules it imports (itself and its own ancestors left
/// out: a folder's `mod.rs` declaring its children is not an import).
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let sources = modules(src);
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, text) in &sources {
        let mut targets = BTreeSet::new();
        for path in crate_paths(&code_of(text)) {
            if let Some(target) = module_of(&path, &names)
                && target != *module
                && !module.starts_with(&format!("{target}::"))
            {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

fn floor_of(module: &str) -> Option<u8> {
    let top = module.split("::").next().unwrap_or(module);
    FLOORS.iter().find(|(m, _)| *m == top).map(|(_, f)| *f)
}

#[test]
fn the_parser_reads_use_trees_and_paths() {
    let code =
        "use crate::a::{b, c::{D, e}, self};\nlet x = crate::f::g(1); // crate::h\nmy_crate::z::y";
    let mut paths = crate_paths(code);
    paths.sort();
    assert_eq!(paths, ["a", "a::b", "a::c::D", "a::c::e", "f::g", "h"]);
    assert!(
        code_of(code).contains("crate::h"),
        "trailing comments are kept (harmless)"
    );
    assert!(!code_of("/// [`crate::x`]\nfn f() {}").contains("crate::x"));
}

#[test]
fn every_module_has_a_floor() {
    let missing: Vec<String> = modules(&runtime_src())
        .into_keys()
        .filter(|m| floor_of(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a floor: {missing:?}; add their top-level module to FLOORS in xtask/tests/architecture.rs (and ARCHITECTURE.md)"
    );
}

#[test]
fn runtime_imports_point_down_the_floors() {
    let graph = import_graph(&runtime_src());
    assert!(
        graph.len() > 20 && graph.values().map(BTreeSet::len).sum::<usize>() > 100,
        "the source scan found too little: {} modules",
        graph.len()
    );
    let mut upward = Vec::new();
    for (from, targets) in &graph {
        let Some(floor) = floor_of(from) else {
            continue;
        };
        for to in targets {
            if let Some(target_floor) = floor_of(to)
                && target_floor > floor
            {
                upward.push(format!(
                    "{from} (floor {floor}) -> {to} (floor {target_floor})"
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports pointing up:\n{}",
        upward.join("\n")
    );
}

/// A circle in `graph`, as a path that ends where it starts.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    // Depth-first search; an edge back to an open node closes a circle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_owned(), Mark::Open);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next.as_str()) {
                Some(Mark::Open) => {
                    let start = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut circle = stack[start..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(circle) = visit(next, graph, marks, stack) {
                        return Some(circle);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if !marks.contains_key(node.as_str()) {
            let mut stack = Vec::new();
            if let Some(circle) = visit(node, graph, &mut marks, &mut stack) {
                return Some(circle);
            }
        }
    }
    None
}

#[test]
fn no_import_circle_in_any_crate() {
    let crates = crate_sources();
    assert!(crates.len() >= 8, "found only {crates:?}");
    let circles: Vec<String> = crates
        .iter()
        .filter_map(|(name, src)| {
            find_circle(&import_graph(src)).map(|c| format!("{name}: {}", c.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_check_finds_a_circle() {
    // The check must be able to fail: three modules in a ring, read from
    // source text the way the crate's files are read.
    let names: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let sources = [
        ("a", "use crate::b::X;"),
        ("b", "use crate::{c::Y, config};"),
        ("c", "fn f() { crate::a::z() }"),
    ];
    let graph: BTreeMap<String, BTreeSet<String>> = sources
        .iter()
        .map(|(m, code)| {
            let targets = crate_paths(code)
                .iter()
                .filter_map(|p| module_of(p, &names))
                .collect();
            ((*m).to_owned(), targets)
        })
        .collect();
    assert_eq!(
        find_circle(&graph),
        Some(["a", "b", "c", "a"].map(String::from).to_vec())
    );
    let mut acyclic = graph;
    acyclic.insert("c".into(), BTreeSet::new());
    assert_eq!(find_circle(&acyclic), None);
}
