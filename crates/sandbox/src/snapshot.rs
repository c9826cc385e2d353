//! Snapshots: a suspended VM as data.
//!
//! A wasm instance's whole state is its linear memory, its mutable globals
//! and the host state in its store. A [`Snapshot`] keeps only the 4 KiB pages
//! that differ from the pristine base image (and skips the dead part of the
//! shadow stack), the globals, and the host's request bookkeeping. Restoring
//! instantiates a brand-new VM from the base image (copy-on-write, a few
//! microseconds) and writes those pages back.
//!
//! [`Snapshot::to_bytes`] is the persisted form: a versioned header carrying
//! the build id, then a zstd-compressed body. [`Snapshot::from_bytes`] refuses
//! bytes from another build or format and never panics on damaged input.

use std::collections::BTreeSet;

use wasmtime::{Mutability, Val};

use crate::error::SnapshotError;
use crate::image::hex;
use crate::vm::Vm;
use crate::{Inner, Limits, SandboxError};

/// Granularity of the page diff.
pub(crate) const PAGE: usize = 4096;
const MAGIC: &[u8; 6] = b"CMSNAP";
/// A fast zstd level: the persisted form is written on the suspend path of
/// every durable run. Measured on a 184 KB snapshot (BENCHMARKS.md): level
/// 1 took ~420 µs for 66 KB, level -20 ~245 µs for 129 KB, -100 ~115 µs
/// for 166 KB; -20 keeps a durable suspend + resume within 1 ms of memory.
const COMPRESSION_LEVEL: i32 = -20;
/// The in-memory packing of a long-waiting run's pages: off the suspend
/// path, so the better ratio wins.
const PACK_LEVEL: i32 = 1;
const FORMAT_VERSION: u16 = 1;
const HEADER_LEN: usize = MAGIC.len() + 2 + 32;
/// Metadata allowance on top of page data when decompressing.
const METADATA_SLACK: usize = 1 << 20;

/// A suspended VM. Cheap to keep in memory; see [`Snapshot::to_bytes`] for
/// the persisted form.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub(crate) build_id: [u8; 32],
    pub(crate) memory_len: u64,
    pub(crate) page_indices: Vec<u32>,
    pub(crate) page_data: Vec<u8>,
    pub(crate) globals: Vec<(String, u64)>,
    pub(crate) next_request_id: u32,
    pub(crate) outstanding: Vec<u32>,
    pub(crate) random_state: u64,
}

/// A [`Snapshot`] whose pages are held zstd-compressed: what a run that
/// waits long keeps in memory. Made by [`Snapshot::pack`] from a snapshot
/// of this process only (never from input), so [`PackedSnapshot::unpack`]
/// knows the exact size and cannot fail on its own bytes.
#[derive(Clone)]
pub struct PackedSnapshot {
    /// Everything but the pages (or, when compression failed, everything).
    meta: Snapshot,
    pages: Vec<u8>,
}

impl PackedSnapshot {
    /// Bytes it holds in memory (what its buffer holds, not only the
    /// compressed bytes in it).
    pub fn size_bytes(&self) -> usize {
        self.meta.size_bytes() + self.pages.capacity()
    }

    /// The snapshot again, pages decompressed (about 0.14 ms for 140 KB,
    /// engine bench `snapshot_unpack`).
    ///
    /// # Errors
    /// [`SnapshotError::Corrupt`] only if memory was damaged: the bytes
    /// were compressed by this process.
    pub fn unpack(&self) -> Result<Snapshot, SnapshotError> {
        if self.pages.is_empty() {
            return Ok(self.meta.clone());
        }
        let len = self.meta.page_indices.len() * PAGE;
        let page_data = zstd::bulk::decompress(&self.pages, len)
            .ok()
            .filter(|d| d.len() == len)
            .ok_or_else(|| {
                SnapshotError::Corrupt("packed snapshot pages do not decompress".into())
            })?;
        Ok(Snapshot {
            page_data,
            ..self.meta.clone_meta()
        })
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("build_id", &hex(&self.build_id[..8]))
            .field("memory_len", &self.memory_len)
            .field("pages", &self.page_indices.len())
            .field("outstanding", &self.outstanding)
            .finish()
    }
}

impl Snapshot {
    /// Bytes this snapshot holds in memory (pages plus metadata).
    pub fn size_bytes(&self) -> usize {
        self.page_data.len()
            + self.page_indices.len() * 4
            + self.globals.len() * 16
            + self.outstanding.len() * 4
            + 64
    }

    /// Ids of the host requests the suspended guest waits on.
    pub fn outstanding_requests(&self) -> &[u32] {
        &self.outstanding
    }

    /// The build id of the base image this snapshot belongs to.
    pub fn build_id(&self) -> [u8; 32] {
        self.build_id
    }

    /// The same snapshot with its pages zstd-compressed in memory, for a
    /// run that waits long (a QuickJS heap packs about 3× at level 1; see
    /// [`PackedSnapshot`]). Costs about 0.34 ms for a 140 KB snapshot
    /// (engine bench `snapshot_pack`), so it is done off the suspend path.
    pub fn pack(&self) -> PackedSnapshot {
        let mut pages = zstd::bulk::compress(&self.page_data, PACK_LEVEL).unwrap_or_default();
        // zstd writes into a buffer of the worst-case size (about the
        // input's): without this a packed snapshot would hold as much
        // memory as the raw one.
        pages.shrink_to_fit();
        if pages.is_empty() && !self.page_data.is_empty() {
            // zstd failed (out of memory): keep the pages as they are.
            return PackedSnapshot {
                meta: self.clone(),
                pages: Vec::new(),
            };
        }
        PackedSnapshot {
            meta: self.clone_meta(),
            pages,
        }
    }

    fn clone_meta(&self) -> Snapshot {
        Snapshot {
            build_id: self.build_id,
            memory_len: self.memory_len,
            page_indices: self.page_indices.clone(),
            page_data: Vec::new(),
            globals: self.globals.clone(),
            next_request_id: self.next_request_id,
            outstanding: self.outstanding.clone(),
            random_state: self.random_state,
        }
    }

    /// The persisted form: header (magic, format version, build id) and a
    /// zstd-compressed body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.page_data.len() + 256);
        put_u64(&mut body, self.memory_len);
        put_u32(&mut body, self.page_indices.len() as u32);
        for &i in &self.page_indices {
            put_u32(&mut body, i);
        }
        body.extend_from_slice(&self.page_data);
        put_u32(&mut body, self.globals.len() as u32);
        for (name, bits) in &self.globals {
            put_u32(&mut body, name.len() as u32);
            body.extend_from_slice(name.as_bytes());
            put_u64(&mut body, *bits);
        }
        put_u32(&mut body, self.next_request_id);
        put_u32(&mut body, self.outstanding.len() as u32);
        for &id in &self.outstanding {
            put_u32(&mut body, id);
        }
        put_u64(&mut body, self.random_state);
        let compressed = zstd::bulk::compress(&body, COMPRESSION_LEVEL).unwrap_or_default();
        let mut out = Vec::with_capacity(HEADER_LEN + compressed.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.build_id);
        out.extend_from_slice(&compressed);
        out
    }

    /// Parses the persisted form made by [`Snapshot::to_bytes`].
    ///
    /// `expected_build_id` is [`crate::Sandbox::build_id`]; `max_bytes` caps
    /// the decompressed size (use `maxSnapshotBytes`).
    ///
    /// # Errors
    /// [`SnapshotError::Incompatible`] for another build or format,
    /// [`SnapshotError::Corrupt`] for damaged bytes, [`SnapshotError::TooLarge`]
    /// when the snapshot exceeds `max_bytes`.
    pub fn from_bytes(
        bytes: &[u8],
        expected_build_id: &[u8; 32],
        max_bytes: usize,
    ) -> Result<Snapshot, SnapshotError> {
        if bytes.len() < HEADER_LEN || &bytes[..MAGIC.len()] != MAGIC {
            return Err(SnapshotError::Corrupt("not a codemode snapshot".into()));
        }
        let version = u16::from_le_bytes([bytes[6], bytes[7]]);
        if version != FORMAT_VERSION {
            return Err(SnapshotError::Incompatible(format!(
                "snapshot format {version}, expected {FORMAT_VERSION}"
            )));
        }
        let mut build_id = [0u8; 32];
        build_id.copy_from_slice(&bytes[8..HEADER_LEN]);
        if &build_id != expected_build_id {
            return Err(SnapshotError::Incompatible(format!(
                "build {}, this host runs {}",
                hex(&build_id[..8]),
                hex(&expected_build_id[..8])
            )));
        }
        let body = zstd::bulk::decompress(
            &bytes[HEADER_LEN..],
            max_bytes.saturating_add(METADATA_SLACK),
        )
        .map_err(|e| SnapshotError::Corrupt(format!("decompressing: {e}")))?;
        let mut r = Reader {
            bytes: &body,
            pos: 0,
        };
        let memory_len = r.u64()?;
        let pages = r.u32()? as usize;
        let mut page_indices = Vec::with_capacity(pages.min(body.len() / 4));
        for _ in 0..pages {
            page_indices.push(r.u32()?);
        }
        let page_data = r
            .take(
                pages
                    .checked_mul(PAGE)
                    .ok_or_else(|| corrupt("page count"))?,
            )?
            .to_vec();
        let n_globals = r.u32()? as usize;
        let mut globals = Vec::new();
        for _ in 0..n_globals {
            let len = r.u32()? as usize;
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| corrupt("global name"))?
                .to_owned();
            globals.push((name, r.u64()?));
        }
        let next_request_id = r.u32()?;
        let n_outstanding = r.u32()? as usize;
        let mut outstanding = Vec::new();
        for _ in 0..n_outstanding {
            outstanding.push(r.u32()?);
        }
        let random_state = r.u64()?;
        if r.pos != body.len() {
            return Err(corrupt("trailing bytes"));
        }
        let snapshot = Snapshot {
            build_id,
            memory_len,
            page_indices,
            page_data,
            globals,
            next_request_id,
            outstanding,
            random_state,
        };
        snapshot.check_shape()?;
        if snapshot.size_bytes() > max_bytes {
            return Err(SnapshotError::TooLarge {
                size: snapshot.size_bytes(),
                limit: max_bytes,
            });
        }
        Ok(snapshot)
    }

    /// Structural checks that make restoring safe to attempt.
    fn check_shape(&self) -> Result<(), SnapshotError> {
        if !self.memory_len.is_multiple_of(65536) || self.memory_len > 4 << 30 {
            return Err(corrupt("memory size"));
        }
        let max_page = (self.memory_len as usize) / PAGE;
        let mut last = None;
        for &i in &self.page_indices {
            if i as usize >= max_page || last.is_some_and(|l| l >= i) {
                return Err(corrupt("page index"));
            }
            last = Some(i);
        }
        if self.page_data.len() != self.page_indices.len() * PAGE {
            return Err(corrupt("page data"));
        }
        Ok(())
    }
}

fn corrupt(what: &str) -> SnapshotError {
    SnapshotError::Corrupt(format!("bad {what}"))
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.pos.checked_add(n).ok_or_else(|| corrupt("length"))?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| corrupt("length"))?;
        self.pos = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

fn val_bits(val: &Val) -> Option<u64> {
    match val {
        Val::I32(x) => Some(*x as u32 as u64),
        Val::I64(x) => Some(*x as u64),
        Val::F32(x) => Some(u64::from(*x)),
        Val::F64(x) => Some(*x),
        _ => None,
    }
}

impl Vm {
    /// Suspends the VM into a [`Snapshot`] and drops the instance.
    ///
    /// # Errors
    /// [`SnapshotError::TooLarge`] past `max_snapshot_bytes`;
    /// [`SandboxError::VmDead`] for a VM that already failed.
    pub fn suspend(mut self) -> Result<Snapshot, SandboxError> {
        if self.dead {
            return Err(SandboxError::VmDead);
        }
        let mut globals = Vec::with_capacity(self.inner.mutable_globals.len());
        let mut stack_pointer = 0usize;
        for name in &self.inner.mutable_globals {
            let global = self
                .instance
                .get_global(&mut self.store, name)
                .ok_or_else(|| SandboxError::Abi(format!("global {name} vanished")))?;
            let bits = val_bits(&global.get(&mut self.store))
                .ok_or_else(|| SandboxError::Abi(format!("global {name} is not numeric")))?;
            if name == crate::abi::STACK_POINTER {
                stack_pointer = bits as usize;
            }
            globals.push((name.clone(), bits));
        }
        let memory = self.memory.data(&self.store);
        let base = &self.inner.base.memory;
        // Between calls every stack frame has returned: the stack below the
        // stack pointer is dead and need not be kept.
        let first_live = if self.inner.base.stack_first {
            stack_pointer / PAGE
        } else {
            0
        };
        let limit = self.limits.max_snapshot_bytes;
        let mut page_indices = Vec::new();
        let mut page_data = Vec::new();
        for (index, page) in memory.chunks_exact(PAGE).enumerate().skip(first_live) {
            let start = index * PAGE;
            let differs = match base.get(start..start + PAGE) {
                Some(pristine) => page != pristine,
                None => page.iter().any(|&b| b != 0),
            };
            if differs {
                page_indices.push(index as u32);
                page_data.extend_from_slice(page);
                if page_data.len() > limit {
                    return Err(SnapshotError::TooLarge {
                        size: memory.len(),
                        limit,
                    }
                    .into());
                }
            }
        }
        // Grown by doubling: held for as long as the run waits.
        page_data.shrink_to_fit();
        let state = self.store.data();
        let snapshot = Snapshot {
            build_id: self.inner.base.build_id,
            memory_len: memory.len() as u64,
            page_indices,
            page_data,
            globals,
            next_request_id: state.next_request_id,
            outstanding: state.outstanding.iter().copied().collect(),
            random_state: state.random_state,
        };
        if snapshot.size_bytes() > limit {
            return Err(SnapshotError::TooLarge {
                size: snapshot.size_bytes(),
                limit,
            }
            .into());
        }
        Ok(snapshot)
    }

    /// Restores `snapshot` into a brand-new VM (see [`crate::Sandbox::restore`]).
    pub(crate) fn restore(
        inner: &std::sync::Arc<Inner>,
        snapshot: &Snapshot,
        limits: &Limits,
    ) -> Result<Vm, SandboxError> {
        if snapshot.build_id != inner.base.build_id {
            return Err(SnapshotError::Incompatible(format!(
                "build {}, this host runs {}",
                hex(&snapshot.build_id[..8]),
                hex(&inner.base.build_id[..8])
            ))
            .into());
        }
        snapshot.check_shape()?;
        let mut vm = Vm::instantiate(inner, limits)?;
        let current = vm.memory.data_size(&vm.store) as u64;
        if snapshot.memory_len > current {
            let pages = (snapshot.memory_len - current) / 65536;
            vm.memory
                .grow(&mut vm.store, pages)
                .map_err(|_| SnapshotError::TooLarge {
                    size: snapshot.memory_len as usize,
                    limit: vm.store.data().limiter.max_bytes,
                })?;
        } else if snapshot.memory_len < current {
            return Err(corrupt("memory size (smaller than the base image)").into());
        }
        let memory = vm.memory.data_mut(&mut vm.store);
        for (k, &index) in snapshot.page_indices.iter().enumerate() {
            let start = index as usize * PAGE;
            memory[start..start + PAGE]
                .copy_from_slice(&snapshot.page_data[k * PAGE..(k + 1) * PAGE]);
        }
        for (name, bits) in &snapshot.globals {
            let global = vm
                .instance
                .get_global(&mut vm.store, name)
                .filter(|g| g.ty(&vm.store).mutability() == Mutability::Var)
                .ok_or_else(|| SnapshotError::Incompatible(format!("unknown global {name}")))?;
            let value = match global.ty(&vm.store).content() {
                wasmtime::ValType::I32 => Val::I32(*bits as u32 as i32),
                wasmtime::ValType::I64 => Val::I64(*bits as i64),
                wasmtime::ValType::F32 => Val::F32(*bits as u32),
                wasmtime::ValType::F64 => Val::F64(*bits),
                _ => {
                    return Err(SnapshotError::Incompatible(format!(
                        "global {name} has an unsupported type"
                    ))
                    .into());
                }
            };
            global
                .set(&mut vm.store, value)
                .map_err(|e| SnapshotError::Incompatible(format!("global {name}: {e}")))?;
        }
        let state = vm.store.data_mut();
        state.next_request_id = snapshot.next_request_id;
        state.outstanding = snapshot
            .outstanding
            .iter()
            .copied()
            .collect::<BTreeSet<u32>>();
        state.random_state = snapshot.random_state;
        Ok(vm)
    }
}
