//! The documentation cannot drift from the binary: every `codemode`
//! command line shown in `README.md` and `docs/` (shell blocks and the
//! synopses) names a subcommand and flags the binary has, every JSON5
//! config shown there passes `codemode check-config --offline` with no
//! diagnostic, every `--tools` file shown loads, and the README's
//! self-contained example command runs to a completed result.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents users read: the README and every page of `docs/`.
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// The fenced code blocks of a markdown text: (info string, first line
/// number, body).
fn blocks(text: &str) -> Vec<(String, usize, String)> {
    let mut found = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), n + 1, String::new())),
            (Some(_), Some(_)) => found.push(open.take().unwrap()),
            (Some((_, _, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    found
}

fn codemode(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(args)
        // Nothing of the user's: help and scripted tools need no state.
        .env(
            "CODEMODE_DATA_DIR",
            std::env::temp_dir().join("codemode-docs-test"),
        )
        .output()
        .unwrap()
}

/// The long flags `codemode <subcommand> --help` lists, with the global ones.
fn flags_of(subcommand: &str, known: &mut BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    known
        .entry(subcommand.to_owned())
        .or_insert_with(|| {
            let mut args: Vec<&str> = subcommand.split_whitespace().collect();
            args.push("--help");
            let out = codemode(&args);
            assert!(
                out.status.success(),
                "`codemode {subcommand}` is documented but the binary has no such command:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let help = String::from_utf8_lossy(&out.stdout);
            long_flags(&help)
        })
        .clone()
}

/// Every `--flag` in `text`.
fn long_flags(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect()
}

/// The subcommands that take a second word.
const NESTED: [&str; 1] = ["approvals"];

#[test]
fn every_documented_command_line_names_real_subcommands_and_flags() {
    let mut known = BTreeMap::new();
    let mut checked = 0;
    for (path, text) in documents() {
        for (info, line, body) in blocks(&text) {
            if !matches!(info.as_str(), "" | "sh" | "bash" | "console") {
                continue;
            }
            for (offset, command) in body.lines().enumerate() {
                // `codemode ...`, `cargo run ... -p codemode -- ...`.
                let rest = command
                    .trim_start()
                    .strip_prefix("codemode ")
                    .or_else(|| command.split_once("-p codemode -- ").map(|(_, r)| r));
                let Some(rest) = rest else { continue };
                let Some(first) = rest.split_whitespace().next() else {
                    continue;
                };
                if first.starts_with('-') || first.starts_with('[') {
                    continue;
                }
                // `approvals list|approve RUN CALL|deny RUN CALL [--reason
                // TEXT]`: the flags of any alternative.
                // `login|logout SERVER`: either.
                let mut subcommands: Vec<String> = first.split('|').map(str::to_owned).collect();
                if NESTED.contains(&first) {
                    let words = rest[first.len()..].split(" [").next().unwrap_or("");
                    let words = words.split(" --").next().unwrap_or("");
                    let alternatives: Vec<String> = words
                        .split('|')
                        .filter_map(|a| a.split_whitespace().next())
                        .filter(|w| !w.starts_with('-'))
                        .map(|w| format!("{first} {w}"))
                        .collect();
                    if !alternatives.is_empty() {
                        subcommands = alternatives;
                    }
                }
                let mut flags = flags_of("", &mut known);
                for subcommand in &subcommands {
                    flags.extend(flags_of(subcommand, &mut known));
                }
                for flag in long_flags(rest) {
                    assert!(
                        flags.contains(&flag),
                        "{}:{}: `codemode {}` has no flag {flag} (its --help lists {flags:?})",
                        path.display(),
                        line + offset,
                        subcommands.join(" | ")
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} command lines found");
}

#[test]
fn every_documented_config_checks_clean_and_every_tools_file_loads() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (path, text) in documents() {
        for (info, line, body) in blocks(&text) {
            if info != "json5" {
                continue;
            }
            let at = format!("{}:{line}", path.display());
            let file = dir.path().join(format!("block-{checked}.json5"));
            std::fs::write(&file, &body).unwrap();
            let file = file.to_str().unwrap();
            // Every `${NAME}` the snippet uses is set, to a value of its
            // own that any field taking a secret accepts.
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_codemode"));
            for name in body.split("${").skip(1).filter_map(|s| s.split('}').next()) {
                let name = name.split(":-").next().unwrap_or(name);
                cmd.env(name, format!("documented-secret-{name}-0123456789"));
            }
            cmd.env("CODEMODE_DATA_DIR", dir.path());
            let is_tools_file = body.trim_start().starts_with("{ tools: [");
            let out = if is_tools_file {
                let cell = dir.path().join("cell.js");
                std::fs::write(&cell, "return ALL_TOOLS.length;").unwrap();
                cmd.args(["exec", "--tools", file, cell.to_str().unwrap()])
                    .output()
                    .unwrap()
            } else {
                cmd.args(["check-config", "--offline", file])
                    .output()
                    .unwrap()
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "{at}: the documented {} fails:\n{stdout}\n{stderr}\n{body}",
                if is_tools_file {
                    "tools file"
                } else {
                    "config"
                }
            );
            if !is_tools_file {
                // `FILE: ok (...)` and notes only: no diagnostic (an
                // unknown or misspelt key would be one).
                assert!(
                    stdout
                        .lines()
                        .all(|l| l.contains(": ok (") || l.contains(": note: ")),
                    "{at}: the documented config has diagnostics:\n{stdout}\n{body}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} configs found");
}

/// The README's self-contained example (scripted tools, no network).
#[test]
fn the_readme_example_cell_runs_to_completion() {
    let examples = root().join("examples");
    let path = |name: &str| examples.join(name).to_str().unwrap().to_owned();
    let out = codemode(&[
        "exec",
        "--config",
        &path("codemode.json5"),
        "--tools",
        &path("tools.json5"),
        &path("tools.js"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["status"], "completed", "{result}");
}
