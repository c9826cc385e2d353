//! Project automation shared by the `xtask` binary and its tests.
//!
//! The guest module is shipped pre-built in `guest/dist/` so that users need
//! only the stable Rust toolchain. [`guest_source_hash`] fingerprints
//! everything the module is built from; `guest/dist/SOURCE-SHA256` records the
//! fingerprint of the shipped build and a test fails when they disagree.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the shipped guest module lives, relative to the workspace root.
pub const GUEST_WASM: &str = "guest/dist/codemode-guest.wasm";
/// The recorded source fingerprint of the shipped module.
pub const GUEST_HASH_FILE: &str = "guest/dist/SOURCE-SHA256";

/// The workspace root (this crate lives in `<root>/xtask`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// SHA-256 over the guest's inputs: its manifest and every file under
/// `guest/src`, the same of `crates/abi` (the constants it shares with the
/// host), the guest build profile and the locked versions of the
/// QuickJS crates. Line endings are normalised so checkouts agree.
///
/// # Errors
/// Fails when a source file cannot be read.
pub fn guest_source_hash(root: &Path) -> std::io::Result<String> {
    // The guest and the one crate of constants it shares with the host.
    let mut files = vec![
        root.join("guest/Cargo.toml"),
        root.join("crates/abi/Cargo.toml"),
    ];
    collect_files(&root.join("guest/src"), &mut files)?;
    collect_files(&root.join("crates/abi/src"), &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for file in &files {
        let rel = file.strip_prefix(root).unwrap_or(file);
        hasher.update(rel.to_string_lossy().replace('\\', "/").as_bytes());
        hasher.update([0]);
        hasher.update(normalise(&fs::read(file)?));
        hasher.update([0]);
    }
    hasher.update(guest_profile(&fs::read_to_string(root.join("Cargo.toml"))?).as_bytes());
    hasher.update(quickjs_lock_entries(&fs::read_to_string(root.join("Cargo.lock"))?).as_bytes());
    Ok(hex(&hasher.finalize()))
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

fn normalise(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().copied().filter(|&b| b != b'\r').collect()
}

/// The `[profile.guest]` table of the workspace manifest, verbatim.
fn guest_profile(manifest: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = trimmed == "[profile.guest]";
        }
        if inside && !trimmed.starts_with('#') {
            out.push_str(trimmed);
            out.push('\n');
        }
    }
    out
}

/// `name version` of every locked `rquickjs*` package.
fn quickjs_lock_entries(lock: &str) -> String {
    let mut out = String::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_owned());
        } else if let Some(v) = line.strip_prefix("version = ")
            && let Some(n) = name.take()
            && n.starts_with("rquickjs")
        {
            out.push_str(&format!("{n} {}\n", v.trim_matches('"')));
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_extraction_keeps_only_the_guest_table() {
        let manifest =
            "[profile.release]\nlto = false\n[profile.guest]\nlto = true\n# c\n[x]\ny=1\n";
        assert_eq!(guest_profile(manifest), "[profile.guest]\nlto = true\n");
    }

    #[test]
    fn lock_entries_pick_quickjs_crates() {
        let lock = "[[package]]\nname = \"rquickjs-sys\"\nversion = \"0.14.0\"\n\n[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\n";
        assert_eq!(quickjs_lock_entries(lock), "rquickjs-sys 0.14.0\n");
    }
}

/// One security-critical file of `mutants/critical.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriticalFile {
    /// Relative to the workspace root.
    pub path: String,
    /// The share of viable mutants its tests must catch, in percent.
    pub minimum: u32,
    /// The packages whose tests run.
    pub packages: Vec<String>,
    /// Arguments for `cargo test` (the test targets that reach the file).
    pub test_args: Vec<String>,
}

/// Reads `mutants/critical.txt`: `file | minimum % | packages | cargo test
/// arguments`, `#` comments and blank lines skipped.
///
/// # Errors
/// A line that is not four fields, or a minimum that is not 0–100.
pub fn parse_critical(text: &str) -> Result<Vec<CriticalFile>, String> {
    let mut files = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        let [path, minimum, packages, args] = fields.as_slice() else {
            return Err(format!(
                "mutants/critical.txt line {}: expected `file | minimum % | packages | cargo test arguments`, got {line:?}",
                n + 1
            ));
        };
        let minimum: u32 = minimum
            .parse()
            .ok()
            .filter(|m| *m <= 100)
            .ok_or_else(|| {
                format!(
                    "mutants/critical.txt line {}: the minimum must be a whole percent 0-100, got {minimum:?}",
                    n + 1
                )
            })?;
        files.push(CriticalFile {
            path: (*path).to_owned(),
            minimum,
            packages: packages.split(',').map(|p| p.trim().to_owned()).collect(),
            test_args: args.split_whitespace().map(str::to_owned).collect(),
        });
    }
    Ok(files)
}

/// Reads `mutants/equivalent.txt`: `<file>: <mutation> — <why>` per line;
/// returns the mutant names (`<file>: <mutation>`).
///
/// # Errors
/// A line without its reason.
pub fn parse_equivalent(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(" — ") {
            Some((name, why)) if !why.trim().is_empty() && name.contains(": ") => {
                names.push(name.trim().to_owned());
            }
            _ => {
                return Err(format!(
                    "mutants/equivalent.txt line {}: expected `<file>: <mutation> — <why it changes nothing>`, got {line:?}",
                    n + 1
                ));
            }
        }
    }
    Ok(names)
}

/// A mutant's name without the line and column cargo-mutants puts after
/// the file (`a.rs:12:5: replace …` → `a.rs: replace …`), so the list of
/// equivalents survives edits above the mutated line.
pub fn mutant_key(name: &str) -> String {
    let name = name.trim();
    let Some((file, rest)) = name.split_once(": ") else {
        return name.to_owned();
    };
    let mut file = file;
    for _ in 0..2 {
        if let Some((head, tail)) = file.rsplit_once(':')
            && !tail.is_empty()
            && tail.bytes().all(|b| b.is_ascii_digit())
        {
            file = head;
        }
    }
    format!("{file}: {rest}")
}

/// What the tests made of one file's mutants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MutantScore {
    /// Caught by a failing test, or by a timeout.
    pub caught: Vec<String>,
    /// Not caught, and not listed as equivalent.
    pub missed: Vec<String>,
    /// Not caught, listed as equivalent.
    pub equivalent: Vec<String>,
    /// Listed as equivalent, yet caught: the list is wrong.
    pub wrongly_listed: Vec<String>,
    /// Did not build.
    pub unviable: usize,
}

impl MutantScore {
    /// Scores the lists cargo-mutants wrote (`caught.txt`, `timeout.txt`,
    /// `missed.txt`, `unviable.txt`: one mutant per line, named without line
    /// and column) against the equivalent mutants.
    pub fn from_lists(
        caught: &str,
        timeout: &str,
        missed: &str,
        unviable: &str,
        equivalent: &[String],
    ) -> MutantScore {
        let lines = |text: &str| -> Vec<String> {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(mutant_key)
                .collect()
        };
        let equivalent: Vec<String> = equivalent.iter().map(|e| mutant_key(e)).collect();
        let mut score = MutantScore {
            unviable: lines(unviable).len(),
            ..MutantScore::default()
        };
        for name in lines(caught).into_iter().chain(lines(timeout)) {
            if equivalent.contains(&name) {
                score.wrongly_listed.push(name.clone());
            }
            score.caught.push(name);
        }
        for name in lines(missed) {
            if equivalent.contains(&name) {
                score.equivalent.push(name);
            } else {
                score.missed.push(name);
            }
        }
        score
    }

    /// Mutants that build and are not equivalent.
    pub fn viable(&self) -> usize {
        self.caught.len() + self.missed.len()
    }

    /// Caught of viable, in percent (100 with none viable).
    pub fn percent(&self) -> f64 {
        if self.viable() == 0 {
            100.0
        } else {
            self.caught.len() as f64 * 100.0 / self.viable() as f64
        }
    }
}

#[cfg(test)]
mod mutant_tests {
    use super::*;

    #[test]
    fn the_critical_list_and_the_equivalents_are_read_and_bad_lines_named() {
        let files = parse_critical("# c\n\na.rs | 90 | p1, p2 | --lib --test t\n").unwrap();
        assert_eq!(files[0].packages, ["p1", "p2"]);
        assert_eq!(files[0].test_args, ["--lib", "--test", "t"]);
        assert!(
            parse_critical("a.rs | 90 | p")
                .unwrap_err()
                .contains("line 1")
        );
        assert!(
            parse_critical("a.rs | 190 | p | x")
                .unwrap_err()
                .contains("0-100")
        );
        let eq = parse_equivalent("a.rs: replace x with y — same value\n").unwrap();
        assert_eq!(eq, ["a.rs: replace x with y"]);
        assert!(
            parse_equivalent("a.rs: replace x with y\n").is_err(),
            "a reason is required"
        );
    }

    #[test]
    fn names_lose_line_and_column_only() {
        assert_eq!(
            mutant_key("a/b.rs:12:5: replace x with y"),
            "a/b.rs: replace x with y"
        );
        assert_eq!(
            mutant_key("a/b.rs: replace x with y"),
            "a/b.rs: replace x with y"
        );
        assert_eq!(
            mutant_key("a/b.rs:7: delete ! in f"),
            "a/b.rs: delete ! in f"
        );
        let score = MutantScore::from_lists("", "", "a.rs:3:1: m\n", "", &["a.rs: m".to_owned()]);
        assert_eq!(score.equivalent, ["a.rs: m"], "matched whatever the line");
    }

    #[test]
    fn equivalents_leave_the_viable_count_and_caught_ones_are_flagged() {
        let eq = vec!["f: m2".to_owned(), "f: m4".to_owned()];
        let score =
            MutantScore::from_lists("f: m1\nf: m4\n", "f: m5\n", "f: m2\nf: m3\n", "f: u\n", &eq);
        assert_eq!(score.caught.len(), 3);
        assert_eq!(score.missed, ["f: m3"]);
        assert_eq!(score.equivalent, ["f: m2"]);
        assert_eq!(score.wrongly_listed, ["f: m4"]);
        assert_eq!((score.viable(), score.unviable), (4, 1));
        assert!((score.percent() - 75.0).abs() < 1e-9);
        assert!((MutantScore::default().percent() - 100.0).abs() < 1e-9);
    }
}
