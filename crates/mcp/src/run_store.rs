//! Which run store the gateway keeps waiting runs in: `store` in the config
//! or `--store`, else the embedded file store in the data directory.
//!
//! Every gateway of a data directory (each MCP client starts its own stdio
//! gateway) shares its one `runs.db`: the file store is made for several
//! processes at once, so a run one gateway suspended can be resumed by
//! another, or by the next after a restart.

use std::path::Path;

use codemode_runtime::DurableStore;
use codemode_runtime::codemode_store::StoreError;

use crate::config::StoreSetting;

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

/// `runs.db` in `dir`, shared with every other gateway of `dir`.
#[cfg(feature = "file-store")]
fn open_default(dir: &Path) -> Result<Option<DurableStore>, String> {
    let path = dir.join("runs.db");
    let store = open_file(&path)
        .map_err(|e| format!("{e}; pass --store file:PATH for another file, or --store memory"))?;
    tracing::info!(store = %path.display(), "waiting runs are kept in the embedded file store");
    Ok(Some(store))
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
    fn every_gateway_of_a_data_directory_shares_its_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = open_default(dir.path()).unwrap().unwrap();
        let second = open_default(dir.path()).unwrap().unwrap();
        assert!(first.0.describe().ends_with("/runs.db"));
        assert!(second.0.describe().ends_with("/runs.db"));
        let bounds = codemode_runtime::codemode_store::Bounds {
            max_runs: 8,
            max_bytes: 1 << 20,
        };
        let ttl = std::time::Duration::from_secs(60);
        first.0.put("run_x", "o", b"r", ttl, bounds).unwrap();
        assert_eq!(second.0.claim("run_x", "o", None).unwrap().record, b"r");
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".db"))
            .collect();
        assert_eq!(files, ["runs.db"], "no file per process");
    }
}
