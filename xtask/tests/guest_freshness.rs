//! The shipped guest module must be built from the guest sources in the tree.

use xtask::{GUEST_HASH_FILE, GUEST_WASM, guest_source_hash, workspace_root};

/// Fails when `guest/` changed but `cargo xtask build-guest` was not re-run.
#[test]
fn shipped_guest_module_matches_guest_sources() {
    let root = workspace_root();
    let recorded = std::fs::read_to_string(root.join(GUEST_HASH_FILE)).unwrap_or_else(|e| {
        panic!("{GUEST_HASH_FILE} is missing ({e}); run `cargo xtask build-guest`")
    });
    let current = guest_source_hash(&root).unwrap_or_else(|e| panic!("hashing guest sources: {e}"));
    assert_eq!(
        recorded.trim(),
        current,
        "the guest sources changed since {GUEST_WASM} was built: run `cargo xtask build-guest` and commit the result"
    );
    let wasm = std::fs::read(root.join(GUEST_WASM)).unwrap_or_else(|e| panic!("{GUEST_WASM}: {e}"));
    assert_eq!(&wasm[..4], b"\0asm", "{GUEST_WASM} is not a wasm module");
}
