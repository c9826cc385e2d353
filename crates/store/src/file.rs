//! The embedded durable store: one redb file (the gateway's default is
//! `runs.db` in its data directory), shared by every process that opens it
//! (redb's multi-writer mode: one write transaction at a time over all of
//! them, each commit durable).
//!
//! Each process holds an exclusive lock on its own file in `<file>.instances/`
//! while the store is open, so another process can tell whether the process
//! that claimed a run or started a call is still alive: a lock it can take
//! belongs to a process that died (the kernel releases it with the process,
//! SIGKILL included). Counts that bound the store (runs, bytes) live in the
//! file too, so every process enforces the same bounds.

use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::notify::Notifier;
use crate::{
    ANY_OWNER, Bounds, Claimed, HeldCall, RunBackend, StoreError, StoreStats, new_instance_id,
    now_ms,
};

/// run id → header + record.
const RUNS: TableDefinition<&str, &[u8]> = TableDefinition::new("runs");
/// (run id, request id) → outcome.
const RESULTS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("results");
/// (run id, request id) → what an operator is shown of a call held for
/// approval, undecided.
const HELD: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("held");
/// (run id, request id) → the decision on a held call.
const DECIDED: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("decided");
/// (run id, request id) → the instance that started a decided held call.
const STARTED: TableDefinition<(&str, u32), &str> = TableDefinition::new("started");
/// run id → when it expired (ms), so a late `wait` hears "expired", not
/// "unknown"; kept for [`TOMBSTONE_MS`].
const EXPIRED: TableDefinition<&str, u64> = TableDefinition::new("expired");
/// The store's counts ([`RUN_COUNT`], [`BYTE_COUNT`]), kept in the same
/// transactions that change them.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const RUN_COUNT: &str = "runs";
const BYTE_COUNT: &str = "bytes";
/// How often a wait for a result rechecks the file (a result written by
/// another process wakes no one here).
const RECHECK: Duration = Duration::from_millis(200);
const TOMBSTONE_MS: u64 = 3_600_000;
/// redb's page cache (read and write): see `FileBackend::open`.
const CACHE_BYTES: usize = 4 << 20;

/// A run's place in the store, before its record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    resuming: bool,
    generation: u64,
    expires_ms: u64,
    owner: String,
    /// The process that stored or claimed it.
    instance: String,
}

impl Header {
    fn encode(&self, record: &[u8]) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(record.len() + self.owner.len() + self.instance.len() + 32);
        out.push(u8::from(self.resuming));
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.expires_ms.to_le_bytes());
        for text in [&self.owner, &self.instance] {
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        out.extend_from_slice(record);
        out
    }

    /// The header and where the record starts; `None` for damaged bytes.
    fn decode(bytes: &[u8]) -> Option<(Header, usize)> {
        let resuming = *bytes.first()? != 0;
        let generation = u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?);
        let expires_ms = u64::from_le_bytes(bytes.get(9..17)?.try_into().ok()?);
        let mut at = 17;
        let mut texts = Vec::with_capacity(2);
        for _ in 0..2 {
            let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
            at += 4;
            let text = std::str::from_utf8(bytes.get(at..at.checked_add(len)?)?).ok()?;
            texts.push(text.to_owned());
            at += len;
        }
        let instance = texts.pop()?;
        let owner = texts.pop()?;
        Some((
            Header {
                resuming,
                generation,
                expires_ms,
                owner,
                instance,
            },
            at,
        ))
    }
}

/// The embedded durable run store.
pub struct FileBackend {
    /// The open database; `None` after an I/O error (redb then refuses
    /// every transaction until the file is closed and opened again) until
    /// the next operation reopens it.
    db: RwLock<Option<Arc<Database>>>,
    path: PathBuf,
    /// Tests: a disk that fails writes with ENOSPC while this is set.
    #[cfg(test)]
    disk_full: Arc<std::sync::atomic::AtomicBool>,
    instance: String,
    /// This process's liveness lock, held while the store is open.
    alive: InstanceLock,
    notifier: Notifier,
}

/// A process's lock file in `<store>.instances/`: held (exclusive) by the
/// process whose instance id names it, removed when it closes the store.
struct InstanceLock {
    dir: PathBuf,
    path: PathBuf,
    _file: std::fs::File,
}

impl InstanceLock {
    fn take(store: &Path, instance: &str) -> std::io::Result<InstanceLock> {
        let dir = instances_dir(store);
        private_dir(&dir)?;
        let path = dir.join(instance);
        let file = std::fs::File::create(&path)?;
        file.try_lock().map_err(std::io::Error::from)?;
        Ok(InstanceLock {
            dir,
            path,
            _file: file,
        })
    }

    /// Whether the process of `instance` still holds its lock. A lock
    /// that can be taken is a dead process's: its file is removed.
    fn held_by(&self, instance: &str) -> bool {
        // Instance ids are `<pid>-<hex>`: nothing else names a file here.
        if instance.is_empty() || !instance.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return false;
        }
        let path = self.dir.join(instance);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
            // Cannot tell: keep following its calls rather than call them
            // interrupted.
            Err(_) => return true,
        };
        match file.try_lock() {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
                false
            }
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(_)) => true,
        }
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn instances_dir(store: &Path) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_owned();
    name.push(".instances");
    store.with_file_name(name)
}

/// Creates `dir` (and its parents) as owner-only (0700); a directory that
/// exists keeps its mode (the operator chose it).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Creates the store file owner-only (0600), or makes an existing one so
/// (a file an older build created 0644).
fn private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if file.metadata()?.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
    }
    drop(file);
    Ok(())
}

/// Opens (or creates) the redb file. A small page cache: `wait` in this
/// process reads the live copy, the file is read back only after a
/// restart or by another generation, so redb's default (1 GiB, filled by
/// every record written) would only hold each waiting run's pages a
/// second time.
fn create_db(
    path: &Path,
    #[cfg(test)] disk_full: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Database, redb::DatabaseError> {
    let builder = {
        let mut builder = redb::Builder::new();
        builder
            .set_cache_size(CACHE_BYTES)
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
        builder
    };
    #[cfg(test)]
    {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        builder.create_with_backend(tests::Disk {
            file: redb::backends::FileBackend::new(file),
            full: Arc::clone(disk_full),
        })
    }
    #[cfg(not(test))]
    builder.create(path)
}

impl FileBackend {
    /// Opens (or creates) the store at `path`, creating its directory.
    ///
    /// # Errors
    /// `Unavailable` when the file cannot be opened: another process holds
    /// it, it is not a redb file, or the directory cannot be made.
    pub fn open(path: &Path) -> Result<FileBackend, StoreError> {
        let store = format!("file:{}", path.display());
        let unavailable = |reason: String| StoreError::Unavailable {
            store: store.clone(),
            reason,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_dir(dir)
                .map_err(|e| unavailable(format!("cannot create {}: {e}", dir.display())))?;
        }
        // Waiting runs hold tool results and VM memory: the file is the
        // owner's alone, like the login tokens beside it.
        private_file(path)
            .map_err(|e| unavailable(format!("cannot create {}: {e}", path.display())))?;
        #[cfg(test)]
        let disk_full = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let db = create_db(
            path,
            #[cfg(test)]
            &disk_full,
        )
        .map_err(|e| {
            unavailable(match e {
                redb::DatabaseError::DatabaseAlreadyOpen => {
                    "a process of an older codemode has it open alone (it does not share the file); stop it, or pass another file".into()
                }
                other => other.to_string(),
            })
        })?;
        let instance = new_instance_id();
        let alive = InstanceLock::take(path, &instance).map_err(|e| {
            unavailable(format!(
                "cannot take this process's lock in {}: {e}",
                instances_dir(path).display()
            ))
        })?;
        let backend = FileBackend {
            db: RwLock::new(Some(Arc::new(db))),
            #[cfg(test)]
            disk_full,
            path: path.to_owned(),
            instance,
            alive,
            notifier: Notifier::default(),
        };
        backend.init()?;
        Ok(backend)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A redb error as the store's; after an I/O error the database is
    /// closed, to be reopened by the next operation (a full disk that has
    /// space again must not disable the store until a restart).
    fn unavailable(&self, e: impl Into<redb::Error>) -> StoreError {
        let e: redb::Error = e.into();
        if matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo) {
            let closed = self
                .db
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if closed.is_some() {
                tracing::warn!(store = %self.describe(), error = %e, "I/O error in the run store; it is reopened on its next use");
            }
        }
        StoreError::Unavailable {
            store: self.describe(),
            reason: e.to_string(),
        }
    }

    /// The open database, reopening it after an I/O error. Reopening waits
    /// for transactions of the closed one to end (it holds the file lock
    /// until then): until it succeeds, operations fail `Unavailable`.
    fn db(&self) -> Result<Arc<Database>, StoreError> {
        if let Some(db) = &*self.db.read().unwrap_or_else(PoisonError::into_inner) {
            return Ok(Arc::clone(db));
        }
        let mut slot = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(db) = &*slot {
            return Ok(Arc::clone(db));
        }
        let db = create_db(
            &self.path,
            #[cfg(test)]
            &self.disk_full,
        )
        .map_err(|e| StoreError::Unavailable {
            store: self.describe(),
            reason: format!("reopening the file after an I/O error failed: {e}"),
        })?;
        tracing::info!(store = %self.describe(), "run store reopened after an I/O error");
        let db = Arc::new(db);
        *slot = Some(Arc::clone(&db));
        Ok(db)
    }

    /// Creates the tables, and the counts of a file written before they
    /// were kept in it.
    fn init(&self) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            txn.open_table(RESULTS).map_err(|e| self.unavailable(e))?;
            txn.open_table(HELD).map_err(|e| self.unavailable(e))?;
            txn.open_table(DECIDED).map_err(|e| self.unavailable(e))?;
            txn.open_table(STARTED).map_err(|e| self.unavailable(e))?;
            txn.open_table(EXPIRED).map_err(|e| self.unavailable(e))?;
            let mut meta = txn.open_table(META).map_err(|e| self.unavailable(e))?;
            if meta
                .get(RUN_COUNT)
                .map_err(|e| self.unavailable(e))?
                .is_none()
            {
                let (mut count, mut bytes) = (0u64, 0u64);
                for entry in runs.iter().map_err(|e| self.unavailable(e))? {
                    let (_, value) = entry.map_err(|e| self.unavailable(e))?;
                    count += 1;
                    bytes += value.value().len() as u64;
                }
                meta.insert(RUN_COUNT, count)
                    .map_err(|e| self.unavailable(e))?;
                meta.insert(BYTE_COUNT, bytes)
                    .map_err(|e| self.unavailable(e))?;
            }
        }
        txn.commit().map_err(|e| self.unavailable(e))
    }

    /// The store's counts: (runs, bytes).
    fn counts(&self, txn: &redb::WriteTransaction) -> Result<(u64, u64), StoreError> {
        let meta = txn.open_table(META).map_err(|e| self.unavailable(e))?;
        let read = |key| -> Result<u64, StoreError> {
            Ok(meta
                .get(key)
                .map_err(|e| self.unavailable(e))?
                .map_or(0, |v| v.value()))
        };
        Ok((read(RUN_COUNT)?, read(BYTE_COUNT)?))
    }

    /// Changes the counts by a run (`runs`: +1 added, -1 removed, 0
    /// replaced) of `bytes_before` → `bytes_after`.
    fn count(
        &self,
        txn: &redb::WriteTransaction,
        runs: i64,
        bytes_before: u64,
        bytes_after: u64,
    ) -> Result<(), StoreError> {
        let (count, bytes) = self.counts(txn)?;
        let mut meta = txn.open_table(META).map_err(|e| self.unavailable(e))?;
        meta.insert(RUN_COUNT, count.saturating_add_signed(runs))
            .map_err(|e| self.unavailable(e))?;
        meta.insert(
            BYTE_COUNT,
            (bytes + bytes_after).saturating_sub(bytes_before),
        )
        .map_err(|e| self.unavailable(e))?;
        Ok(())
    }

    /// A write transaction (durable: in multi-writer mode every commit is).
    fn write(&self) -> Result<redb::WriteTransaction, StoreError> {
        self.db()?.begin_write().map_err(|e| self.unavailable(e))
    }

    fn results_of(
        &self,
        table: &impl ReadableTable<(&'static str, u32), &'static [u8]>,
        run_id: &str,
    ) -> Result<Vec<(u32, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        for entry in table
            .range((run_id, 0)..=(run_id, u32::MAX))
            .map_err(|e| self.unavailable(e))?
        {
            let (key, value) = entry.map_err(|e| self.unavailable(e))?;
            out.push((key.value().1, value.value().to_vec()));
        }
        Ok(out)
    }

    /// Waits until `table` holds `(run_id, request_id)` (woken in this
    /// process, rechecked for other processes' writes), or `timeout`.
    fn wait_for(
        &self,
        table: TableDefinition<(&str, u32), &[u8]>,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.notifier.wait_for(run_id, timeout, RECHECK, || {
            let read = self.db()?.begin_read().map_err(|e| self.unavailable(e))?;
            let table = read.open_table(table).map_err(|e| self.unavailable(e))?;
            let value = table
                .get((run_id, request_id))
                .map_err(|e| self.unavailable(e))?;
            Ok(value.map(|v| v.value().to_vec()))
        })
    }

    /// Forgets `run_id` and its results in `txn`, counting it out.
    fn remove_in(&self, txn: &redb::WriteTransaction, run_id: &str) -> Result<(), StoreError> {
        let mut runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
        let removed = runs
            .remove(run_id)
            .map_err(|e| self.unavailable(e))?
            .map(|v| v.value().len() as u64);
        drop(runs);
        let mut results = txn.open_table(RESULTS).map_err(|e| self.unavailable(e))?;
        let keys: Vec<u32> = self
            .results_of(&results, run_id)?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for key in keys {
            results
                .remove((run_id, key))
                .map_err(|e| self.unavailable(e))?;
        }
        drop(results);
        for kind in [HELD, DECIDED] {
            let mut table = txn.open_table(kind).map_err(|e| self.unavailable(e))?;
            let keys: Vec<u32> = self
                .results_of(&table, run_id)?
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            for key in keys {
                table
                    .remove((run_id, key))
                    .map_err(|e| self.unavailable(e))?;
            }
        }
        let mut started = txn.open_table(STARTED).map_err(|e| self.unavailable(e))?;
        let keys: Vec<u32> = started
            .range((run_id, 0)..=(run_id, u32::MAX))
            .map_err(|e| self.unavailable(e))?
            .filter_map(Result::ok)
            .map(|(k, _)| k.value().1)
            .collect();
        for key in keys {
            started
                .remove((run_id, key))
                .map_err(|e| self.unavailable(e))?;
        }
        drop(started);
        if let Some(bytes) = removed {
            self.count(txn, -1, bytes, 0)?;
        }
        Ok(())
    }
}

impl RunBackend for FileBackend {
    fn describe(&self) -> String {
        format!("file:{}", self.path.display())
    }

    fn instance(&self) -> &str {
        &self.instance
    }

    fn put(
        &self,
        run_id: &str,
        owner: &str,
        record: &[u8],
        ttl: Duration,
        bounds: Bounds,
    ) -> Result<u64, StoreError> {
        self.expire()?;
        let txn = self.write()?;
        let generation = {
            let mut runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            let previous = runs.get(run_id).map_err(|e| self.unavailable(e))?.map(|v| {
                let value = v.value();
                let generation = Header::decode(value).map_or(0, |(h, _)| h.generation);
                (generation, value.len() as u64)
            });
            let header = Header {
                resuming: false,
                generation: previous.map_or(0, |(g, _)| g) + 1,
                expires_ms: now_ms().saturating_add(ttl.as_millis() as u64),
                owner: owner.to_owned(),
                instance: self.instance.clone(),
            };
            let value = header.encode(record);
            let size = value.len() as u64;
            let before = previous.map(|(_, bytes)| bytes);
            let (count, bytes) = self.counts(&txn)?;
            if before.is_none() && count as usize >= bounds.max_runs {
                return Err(StoreError::Full {
                    limit: bounds.max_runs,
                });
            }
            if (bytes + size).saturating_sub(before.unwrap_or(0)) > bounds.max_bytes {
                return Err(StoreError::BytesFull {
                    limit: bounds.max_bytes,
                    held: bytes,
                    needed: size.saturating_sub(before.unwrap_or(0)),
                });
            }
            runs.insert(run_id, value.as_slice())
                .map_err(|e| self.unavailable(e))?;
            drop(runs);
            self.count(&txn, i64::from(before.is_none()), before.unwrap_or(0), size)?;
            header.generation
        };
        txn.commit().map_err(|e| self.unavailable(e))?;
        Ok(generation)
    }

    fn claim(&self, run_id: &str, owner: &str, known: Option<u64>) -> Result<Claimed, StoreError> {
        let txn = self.write()?;
        let claimed = {
            let mut runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            let value = match runs.get(run_id).map_err(|e| self.unavailable(e))? {
                Some(v) => v.value().to_vec(),
                None => {
                    let expired = txn.open_table(EXPIRED).map_err(|e| self.unavailable(e))?;
                    let known = expired.get(run_id).map_err(|e| self.unavailable(e))?;
                    return Err(if known.is_some() {
                        StoreError::Expired
                    } else {
                        StoreError::Unknown
                    });
                }
            };
            let (mut header, at) =
                Header::decode(&value).ok_or_else(|| StoreError::Unreadable {
                    store: self.describe(),
                    reason: "a damaged run record".into(),
                })?;
            if header.expires_ms <= now_ms() {
                drop(runs);
                self.remove_in(&txn, run_id)?;
                txn.open_table(EXPIRED)
                    .map_err(|e| self.unavailable(e))?
                    .insert(run_id, now_ms())
                    .map_err(|e| self.unavailable(e))?;
                txn.commit().map_err(|e| self.unavailable(e))?;
                return Err(StoreError::Expired);
            }
            if header.owner != ANY_OWNER && header.owner != owner {
                return Err(StoreError::OtherOwner);
            }
            if header.resuming {
                return Err(if self.instance_alive(&header.instance) {
                    StoreError::Busy {
                        instance: header.instance,
                    }
                } else {
                    StoreError::Interrupted {
                        instance: header.instance,
                    }
                });
            }
            header.resuming = true;
            header.instance = self.instance.clone();
            let record = value[at..].to_vec();
            let claimed_value = header.encode(&record);
            runs.insert(run_id, claimed_value.as_slice())
                .map_err(|e| self.unavailable(e))?;
            drop(runs);
            self.count(&txn, 0, value.len() as u64, claimed_value.len() as u64)?;
            let results = txn.open_table(RESULTS).map_err(|e| self.unavailable(e))?;
            Claimed {
                record: if known == Some(header.generation) {
                    Vec::new()
                } else {
                    record
                },
                generation: header.generation,
                results: self.results_of(&results, run_id)?,
            }
        };
        txn.commit().map_err(|e| self.unavailable(e))?;
        Ok(claimed)
    }

    fn remove(&self, run_id: &str) -> Result<(), StoreError> {
        let txn = self.write()?;
        self.remove_in(&txn, run_id)?;
        txn.commit().map_err(|e| self.unavailable(e))
    }

    fn put_result(&self, run_id: &str, request_id: u32, outcome: &[u8]) -> Result<(), StoreError> {
        {
            let txn = self.write()?;
            {
                // Only for a run the store still has: a late result of a
                // finished run must not linger.
                let runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
                if runs.get(run_id).map_err(|e| self.unavailable(e))?.is_none() {
                    return Ok(());
                }
                let mut results = txn.open_table(RESULTS).map_err(|e| self.unavailable(e))?;
                results
                    .insert((run_id, request_id), outcome)
                    .map_err(|e| self.unavailable(e))?;
            }
            txn.commit().map_err(|e| self.unavailable(e))?;
        }
        self.notifier.notify(run_id);
        Ok(())
    }

    fn await_result(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.wait_for(RESULTS, run_id, request_id, timeout)
    }

    fn put_held(&self, run_id: &str, request_id: u32, entry: &[u8]) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            let decided = txn.open_table(DECIDED).map_err(|e| self.unavailable(e))?;
            if runs.get(run_id).map_err(|e| self.unavailable(e))?.is_none()
                || decided
                    .get((run_id, request_id))
                    .map_err(|e| self.unavailable(e))?
                    .is_some()
            {
                return Ok(());
            }
            txn.open_table(HELD)
                .map_err(|e| self.unavailable(e))?
                .insert((run_id, request_id), entry)
                .map_err(|e| self.unavailable(e))?;
        }
        txn.commit().map_err(|e| self.unavailable(e))
    }

    fn list_held(&self) -> Result<Vec<HeldCall>, StoreError> {
        self.expire()?;
        let read = self.db()?.begin_read().map_err(|e| self.unavailable(e))?;
        let held = read.open_table(HELD).map_err(|e| self.unavailable(e))?;
        let mut out = Vec::new();
        for entry in held.iter().map_err(|e| self.unavailable(e))? {
            let (key, value) = entry.map_err(|e| self.unavailable(e))?;
            let (run_id, request_id) = key.value();
            out.push(HeldCall {
                run_id: run_id.to_owned(),
                request_id,
                entry: value.value().to_vec(),
            });
        }
        Ok(out)
    }

    fn decide_held(
        &self,
        run_id: &str,
        request_id: u32,
        decision: &[u8],
    ) -> Result<bool, StoreError> {
        let txn = self.write()?;
        {
            let runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            if runs.get(run_id).map_err(|e| self.unavailable(e))?.is_none() {
                return Ok(false);
            }
            let mut held = txn.open_table(HELD).map_err(|e| self.unavailable(e))?;
            if held
                .remove((run_id, request_id))
                .map_err(|e| self.unavailable(e))?
                .is_none()
            {
                return Ok(false);
            }
            txn.open_table(DECIDED)
                .map_err(|e| self.unavailable(e))?
                .insert((run_id, request_id), decision)
                .map_err(|e| self.unavailable(e))?;
        }
        txn.commit().map_err(|e| self.unavailable(e))?;
        self.notifier.notify(run_id);
        Ok(true)
    }

    fn start_held(&self, run_id: &str, request_id: u32) -> Result<Option<String>, StoreError> {
        let txn = self.write()?;
        let starter = {
            let runs = txn.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            if runs.get(run_id).map_err(|e| self.unavailable(e))?.is_none() {
                return Ok(None);
            }
            let mut started = txn.open_table(STARTED).map_err(|e| self.unavailable(e))?;
            let before = started
                .get((run_id, request_id))
                .map_err(|e| self.unavailable(e))?
                .map(|v| v.value().to_owned());
            match before {
                Some(instance) => instance,
                None => {
                    started
                        .insert((run_id, request_id), self.instance.as_str())
                        .map_err(|e| self.unavailable(e))?;
                    self.instance.clone()
                }
            }
        };
        txn.commit().map_err(|e| self.unavailable(e))?;
        Ok(Some(starter))
    }

    fn await_decision(
        &self,
        run_id: &str,
        request_id: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.wait_for(DECIDED, run_id, request_id, timeout)
    }

    fn instance_alive(&self, instance: &str) -> bool {
        instance == self.instance || self.alive.held_by(instance)
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        let read = self.db()?.begin_read().map_err(|e| self.unavailable(e))?;
        let runs = read.open_table(RUNS).map_err(|e| self.unavailable(e))?;
        let mut stats = StoreStats::default();
        for entry in runs.iter().map_err(|e| self.unavailable(e))? {
            let (_, value) = entry.map_err(|e| self.unavailable(e))?;
            let value = value.value();
            stats.bytes += value.len() as u64;
            match Header::decode(value) {
                Some((h, _)) if h.resuming => stats.resuming += 1,
                _ => stats.waiting += 1,
            }
        }
        let results = read.open_table(RESULTS).map_err(|e| self.unavailable(e))?;
        stats.results = results.len().map_err(|e| self.unavailable(e))?;
        Ok(stats)
    }

    fn expire(&self) -> Result<usize, StoreError> {
        let now = now_ms();
        let expired: Vec<String> = {
            let read = self.db()?.begin_read().map_err(|e| self.unavailable(e))?;
            let runs = read.open_table(RUNS).map_err(|e| self.unavailable(e))?;
            let mut out = Vec::new();
            for entry in runs.iter().map_err(|e| self.unavailable(e))? {
                let (id, value) = entry.map_err(|e| self.unavailable(e))?;
                if Header::decode(value.value()).is_none_or(|(h, _)| h.expires_ms <= now) {
                    out.push(id.value().to_owned());
                }
            }
            out
        };
        if expired.is_empty() {
            return Ok(0);
        }
        let txn = self.write()?;
        {
            let mut tombstones = txn.open_table(EXPIRED).map_err(|e| self.unavailable(e))?;
            let old: Vec<String> = tombstones
                .iter()
                .map_err(|e| self.unavailable(e))?
                .filter_map(Result::ok)
                .filter(|(_, when)| when.value().saturating_add(TOMBSTONE_MS) < now)
                .map(|(id, _)| id.value().to_owned())
                .collect();
            for id in old {
                tombstones
                    .remove(id.as_str())
                    .map_err(|e| self.unavailable(e))?;
            }
            for id in &expired {
                tombstones
                    .insert(id.as_str(), now)
                    .map_err(|e| self.unavailable(e))?;
            }
        }
        for id in &expired {
            self.remove_in(&txn, id)?;
        }
        txn.commit().map_err(|e| self.unavailable(e))?;
        tracing::info!(
            event = "discarded",
            runs = expired.len(),
            store = %self.describe(),
            "suspended runs expired (snapshotTtlSeconds): records discarded"
        );
        Ok(expired.len())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(unix)]
    #[test]
    fn the_store_file_and_the_directory_it_makes_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("data/runs.db");
        let store = FileBackend::open(&path).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        drop(store);
        // A file an older build left readable by others is tightened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let store = FileBackend::open(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        drop(store);
        // An owner-only mode the operator chose is kept.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        let _store = FileBackend::open(&path).unwrap();
        assert_eq!(mode(&path), 0o700);
    }

    use super::*;
    use redb::{BackendError, StorageBackend};
    use std::ops::Bound;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The real file backend, whose writes fail with ENOSPC while `full`.
    #[derive(Debug)]
    pub(super) struct Disk {
        pub(super) file: redb::backends::FileBackend,
        pub(super) full: Arc<AtomicBool>,
    }

    impl Disk {
        fn check(&self) -> Result<(), BackendError> {
            if self.full.load(Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(28).into()); // ENOSPC
            }
            Ok(())
        }
    }

    impl StorageBackend for Disk {
        fn len(&self) -> Result<u64, BackendError> {
            self.file.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
            self.file.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), BackendError> {
            self.check()?;
            self.file.set_len(len)
        }
        fn sync_data(&self) -> Result<(), BackendError> {
            self.check()?;
            self.file.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
            self.check()?;
            self.file.write(offset, data)
        }
        fn close(&self) -> Result<(), BackendError> {
            self.file.close()
        }
        fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
            self.file.try_lock_range(start, end)
        }
        fn try_lock_shared_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> Result<bool, BackendError> {
            self.file.try_lock_shared_range(start, end)
        }
        fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.file.lock_range(start, end)
        }
        fn lock_shared_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> Result<(), BackendError> {
            self.file.lock_shared_range(start, end)
        }
        fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.file.unlock_range(start, end)
        }
        fn query_lock_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> Result<bool, BackendError> {
            self.file.query_lock_range(start, end)
        }
    }

    #[test]
    fn a_full_disk_fails_writes_and_the_store_works_again_once_space_is_back() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileBackend::open(&tmp.path().join("runs.db")).unwrap();
        let bounds = Bounds {
            max_runs: 10,
            max_bytes: 1 << 20,
        };
        let ttl = Duration::from_secs(60);
        store.put("run_a", "alice", b"first", ttl, bounds).unwrap();
        store.disk_full.store(true, Ordering::SeqCst);
        let err = store
            .put("run_b", "alice", b"second", ttl, bounds)
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Unavailable { reason, .. } if reason.contains("No space left")),
            "{err:?}"
        );
        store.disk_full.store(false, Ordering::SeqCst);
        // redb alone would now answer "Previous I/O error" until a restart.
        store.put("run_b", "alice", b"second", ttl, bounds).unwrap();
        let claimed = store.claim("run_a", "alice", None).unwrap();
        assert!(claimed.record.ends_with(b"first"));
        assert_eq!(
            store.stats().unwrap().waiting + store.stats().unwrap().resuming,
            2
        );
    }

    proptest::proptest! {
        /// The file's bytes may be damaged: decoding never panics.
        #[test]
        fn arbitrary_headers_never_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
        ) {
            let _ = Header::decode(&bytes);
        }

        #[test]
        fn headers_round_trip_any_text(owner in ".{0,40}", instance in ".{0,40}", generation in 0u64..) {
            let h = Header { resuming: false, generation, expires_ms: 7, owner, instance };
            let bytes = h.encode(b"r");
            let decoded = Header::decode(&bytes).map(|(h, _)| h);
            proptest::prop_assert_eq!(decoded, Some(h));
        }
    }

    /// What the store's counts say, and what its runs add up to.
    fn counts_and_truth(store: &FileBackend) -> ((u64, u64), (u64, u64)) {
        let txn = store.write().unwrap();
        let counts = store.counts(&txn).unwrap();
        let runs = txn.open_table(RUNS).unwrap();
        let mut truth = (0, 0);
        for entry in runs.iter().unwrap() {
            let (_, value) = entry.unwrap();
            truth.0 += 1;
            truth.1 += value.value().len() as u64;
        }
        (counts, truth)
    }

    const ROOMY: Bounds = Bounds {
        max_runs: 100,
        max_bytes: 1 << 20,
    };

    #[test]
    fn the_counts_follow_every_change_and_a_file_without_them_is_counted_when_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("runs.db");
        let store = FileBackend::open(&path).unwrap();
        let ttl = Duration::from_secs(60);
        let check = |store: &FileBackend, runs: u64| {
            let (counts, truth) = counts_and_truth(store);
            assert_eq!(counts, truth);
            assert_eq!(counts.0, runs);
        };
        store.put("run_a", "alice", b"aaaa", ttl, ROOMY).unwrap();
        store.put("run_b", "alice", &[7; 300], ttl, ROOMY).unwrap();
        check(&store, 2);
        // Stored again, longer then shorter: the same run, other bytes.
        store.put("run_b", "alice", &[7; 900], ttl, ROOMY).unwrap();
        check(&store, 2);
        store.put("run_b", "alice", &[7; 10], ttl, ROOMY).unwrap();
        check(&store, 2);
        // A claim rewrites the header (another instance, resuming).
        store.claim("run_b", "alice", None).unwrap();
        check(&store, 2);
        store
            .put("run_c", "alice", b"c", Duration::ZERO, ROOMY)
            .unwrap();
        check(&store, 3);
        assert_eq!(store.expire().unwrap(), 1);
        check(&store, 2);
        store.remove("run_a").unwrap();
        check(&store, 1);
        store.remove("run_a").unwrap();
        check(&store, 1);
        // A file written before the counts were kept in it: they are
        // made from its runs when it is opened.
        store.put("run_d", "alice", &[1; 50], ttl, ROOMY).unwrap();
        let before = counts_and_truth(&store).1;
        {
            let txn = store.write().unwrap();
            let mut meta = txn.open_table(META).unwrap();
            meta.remove(RUN_COUNT).unwrap();
            meta.remove(BYTE_COUNT).unwrap();
            drop(meta);
            txn.commit().unwrap();
        }
        drop(store);
        let store = FileBackend::open(&path).unwrap();
        assert_eq!(counts_and_truth(&store), (before, before));
        // And they bound the store as before.
        let put_e = |max_runs, max_bytes| {
            store.put(
                "run_e",
                "alice",
                b"e",
                ttl,
                Bounds {
                    max_runs,
                    max_bytes,
                },
            )
        };
        let err = put_e(2, 1 << 20).unwrap_err();
        assert!(matches!(err, StoreError::Full { limit: 2 }), "{err:?}");
        let err = put_e(3, before.1).unwrap_err();
        assert!(
            matches!(err, StoreError::BytesFull { limit, held, needed } if limit == before.1 && held == before.1 && needed > 1),
            "{err:?}"
        );
        put_e(3, 1 << 20).unwrap();
        check(&store, 3);
    }

    #[test]
    fn a_run_at_the_bounds_may_be_stored_again_within_its_growth() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileBackend::open(&tmp.path().join("runs.db")).unwrap();
        let ttl = Duration::from_secs(60);
        store.put("run_a", "alice", &[1; 100], ttl, ROOMY).unwrap();
        let held = counts_and_truth(&store).1.1;
        let full = Bounds {
            max_runs: 1,
            max_bytes: held,
        };
        // The same size again fits exactly; another run does not.
        store.put("run_a", "alice", &[2; 100], ttl, full).unwrap();
        assert!(matches!(
            store.put(
                "run_b",
                "alice",
                b"",
                ttl,
                Bounds {
                    max_runs: 1,
                    max_bytes: 1 << 20
                }
            ),
            Err(StoreError::Full { limit: 1 })
        ));
        // Growing by 10 bytes needs 10 more.
        let err = store
            .put("run_a", "alice", &[3; 110], ttl, full)
            .unwrap_err();
        assert!(
            matches!(err, StoreError::BytesFull { limit, held: h, needed: 10 } if limit == held && h == held),
            "{err:?}"
        );
        store
            .put(
                "run_a",
                "alice",
                &[3; 110],
                ttl,
                Bounds {
                    max_runs: 1,
                    max_bytes: held + 10,
                },
            )
            .unwrap();
        // The generation counts every store.
        assert_eq!(store.claim("run_a", "alice", None).unwrap().generation, 3);
    }

    #[test]
    fn expired_runs_leave_a_tombstone_for_an_hour_then_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileBackend::open(&tmp.path().join("runs.db")).unwrap();
        let now = now_ms();
        {
            let txn = store.write().unwrap();
            let mut expired = txn.open_table(EXPIRED).unwrap();
            expired
                .insert("run_old", now - TOMBSTONE_MS - 1_000)
                .unwrap();
            expired
                .insert("run_recent", now - TOMBSTONE_MS + 60_000)
                .unwrap();
            drop(expired);
            txn.commit().unwrap();
        }
        assert_eq!(
            store.expire().unwrap(),
            0,
            "nothing to expire, nothing pruned"
        );
        assert!(matches!(
            store.claim("run_old", "alice", None),
            Err(StoreError::Expired)
        ));
        store
            .put("run_now", "alice", b"x", Duration::ZERO, ROOMY)
            .unwrap();
        // `put` expires first: run_now is still there until the next pass.
        assert_eq!(store.expire().unwrap(), 1);
        assert!(matches!(
            store.claim("run_old", "alice", None),
            Err(StoreError::Unknown)
        ));
        assert!(matches!(
            store.claim("run_recent", "alice", None),
            Err(StoreError::Expired)
        ));
        assert!(matches!(
            store.claim("run_now", "alice", None),
            Err(StoreError::Expired)
        ));
    }

    #[test]
    fn stats_tell_waiting_from_resuming_runs_and_count_bytes_and_results() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileBackend::open(&tmp.path().join("runs.db")).unwrap();
        let ttl = Duration::from_secs(60);
        store.put("run_a", "alice", b"aaaa", ttl, ROOMY).unwrap();
        store.put("run_b", "alice", b"bb", ttl, ROOMY).unwrap();
        store.put("run_c", "alice", b"c", ttl, ROOMY).unwrap();
        store.claim("run_b", "alice", None).unwrap();
        store.put_result("run_a", 1, b"one").unwrap();
        store.put_result("run_a", 2, b"two").unwrap();
        store.put_result("run_gone", 1, b"late").unwrap();
        let stats = store.stats().unwrap();
        assert_eq!((stats.waiting, stats.resuming, stats.results), (2, 1, 2));
        assert_eq!(stats.bytes, counts_and_truth(&store).1.1);
    }

    #[test]
    fn only_a_live_process_holds_its_instance_lock_and_only_instance_ids_are_looked_up() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("runs.db");
        let store = FileBackend::open(&path).unwrap();
        let other = FileBackend::open(&path).unwrap();
        // How errors and logs name the store.
        assert_eq!(store.describe(), format!("file:{}", path.display()));
        assert!(store.instance_alive(store.instance()));
        assert!(store.instance_alive(other.instance()));
        // A lock file nobody holds: a process that died; its file goes.
        let dead = instances_dir(&path).join("123-abc");
        std::fs::write(&dead, b"").unwrap();
        assert!(!store.instance_alive("123-abc"));
        assert!(!dead.exists());
        assert!(!store.instance_alive("999-def"), "no file at all");
        // Names that are not instance ids never reach the file system,
        // even where a lock is held under them.
        let outside = tmp.path().join("held");
        let held = std::fs::File::create(&outside).unwrap();
        held.try_lock().unwrap();
        for name in ["", "../held", "held", "12-ab/..", "12 ab"] {
            assert!(!store.instance_alive(name), "{name:?}");
        }
        // A lock file that cannot be read: unknown, so taken for alive
        // (its calls are followed, not called interrupted).
        #[cfg(unix)]
        {
            let looped = instances_dir(&path).join("77-abc");
            std::os::unix::fs::symlink("77-abc", &looped).unwrap();
            assert!(store.instance_alive("77-abc"));
            std::fs::remove_file(&looped).unwrap();
        }
        // Closing the store removes its lock file.
        let other_instance = other.instance().to_owned();
        let other_lock = instances_dir(&path).join(&other_instance);
        assert!(other_lock.exists());
        drop(other);
        assert!(!other_lock.exists(), "closed");
        assert!(!store.instance_alive(&other_instance), "closed");
    }

    #[test]
    fn headers_round_trip_and_damaged_ones_are_refused() {
        let h = Header {
            resuming: true,
            generation: 7,
            expires_ms: 123,
            owner: "principal:alice".into(),
            instance: "12-ab".into(),
        };
        let bytes = h.encode(b"record");
        let (back, at) = Header::decode(&bytes).expect("decodes");
        assert_eq!(back, h);
        assert_eq!(&bytes[at..], b"record");
        for cut in 0..at {
            assert!(Header::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
    }
}
