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
