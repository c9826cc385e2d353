//! Which run store the gateway keeps waiting runs in: `store` in the config
//! or `--store`, else the embedded file store in the data directory.
//!
//! The file store is held by one process. Several gateways on one machine
//! (each MCP client starting its own stdio gateway) would fight over one
//! `runs.db`, so the default moves on to `runs-2.db` … `runs-8.db` when a
//! file is held, and says which it took. A file named explicitly is never
//! swapped for another.

use std::path::Path;

use codemode_runtime::DurableStore;
use codemode_runtime::codemode_store::StoreError;

use crate::config::StoreSetting;

/// Files the default tries, in order.
#[cfg(feature = "file-store")]
const DEFAULT_FILES: usize = 8;

/// Opens the store `setting` names (`None`: the default file store).
/// `Ok(None)`: runs stay in memory.
///
/// # Errors
/// Why the store cannot be used, with what to do instead.
pub fn open(setting: Option<&StoreSetting>) -> Result<Option<DurableStore>, String> {
    match setting {
        Some(StoreSetting::Memory) => Ok(None),
        Some(StoreSetting::File(path)) => open_file(path).map(Some).map_err(|e| {
            format!("{e}; pass another path with --store file:PATH, or --store memory")
        }),
        Some(StoreSetting::Redis(url)) => open_redis(url).map(Some).map_err(|e| {
            format!("{e}; check that redis-server runs there, or pass --store memory")
        }),
        #[cfg(feature = "file-store")]
        None => {
            let dir = crate::data_dir::data_dir()?;
            open_default(&dir)
        }
        // Built without the file store: the default is memory.
        #[cfg(not(feature = "file-store"))]
        None => Ok(None),
    }
}

fn open_file(path: &Path) -> Result<DurableStore, StoreError> {
    #[cfg(feature = "file-store")]
    return codemode_runtime::codemode_store::FileBackend::open(path)
        .map(|b| DurableStore(std::sync::Arc::new(b)));
    #[cfg(not(feature = "file-store"))]
    return Err(not_built(&format!("file:{}", path.display()), "file-store"));
}

fn open_redis(url: &str) -> Result<DurableStore, StoreError> {
    #[cfg(feature = "redis-store")]
    return codemode_runtime::codemode_store::RedisBackend::open(url)
        .map(|b| DurableStore(std::sync::Arc::new(b)));
    #[cfg(not(feature = "redis-store"))]
    return Err(not_built(url, "redis-store"));
}

/// A store this build left out.
#[cfg(not(all(feature = "file-store", feature = "redis-store")))]
fn not_built(store: &str, feature: &str) -> StoreError {
    StoreError::Unavailable {
        store: store.to_owned(),
        reason: format!("this gateway was built without the `{feature}` feature of codemode-mcp"),
    }
}

/// `runs.db` in `dir`, else the next free of `runs-2.db` … `runs-8.db`.
#[cfg(feature = "file-store")]
fn open_default(dir: &Path) -> Result<Option<DurableStore>, String> {
    let mut last = None;
    for n in 1..=DEFAULT_FILES {
        let path: std::path::PathBuf = match n {
            1 => dir.join("runs.db"),
            n => dir.join(format!("runs-{n}.db")),
        };
        match open_file(&path) {
            Ok(store) => {
                tracing::info!(store = %path.display(), "waiting runs are kept in the embedded file store");
                return Ok(Some(store));
            }
            Err(e @ StoreError::Unavailable { .. })
                if e.to_string().contains("another process") =>
            {
                last = Some(e);
            }
            Err(e) => {
                return Err(format!(
                    "{e}; pass --store file:PATH for another file, or --store memory"
                ));
            }
        }
    }
    Err(format!(
        "{}: all {DEFAULT_FILES} default run store files in {} are held by other gateways; pass --store file:PATH, a redis:// URL, or --store memory",
        last.map(|e| e.to_string()).unwrap_or_default(),
        dir.display()
    ))
}

/// What `codemode_store` reports about the store, for logs and metrics.
pub fn describe(store: &Option<DurableStore>) -> String {
    store
        .as_ref()
        .map_or_else(|| "memory".to_owned(), |s| s.0.describe())
}

#[cfg(all(test, feature = "file-store"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_default_moves_to_the_next_file_when_one_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let first = open_default(dir.path()).unwrap().unwrap();
        let second = open_default(dir.path()).unwrap().unwrap();
        assert!(first.0.describe().ends_with("/runs.db"));
        assert!(second.0.describe().ends_with("/runs-2.db"));
        drop(first);
        let third = open_default(dir.path()).unwrap().unwrap();
        assert!(
            third.0.describe().ends_with("/runs.db"),
            "a freed file is taken again"
        );
    }
}
