//! Snapshots: suspend a VM with pending host promises to bytes, drop it, and
//! continue in a brand-new instance.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;
use codemode_sandbox::{Limits, SandboxError, Settlement, Snapshot, SnapshotError, Step};
use common::*;
use proptest::prelude::*;
use serde_json::json;

fn through_bytes(snapshot: &Snapshot) -> Snapshot {
    let bytes = snapshot.to_bytes();
    Snapshot::from_bytes(&bytes, &sandbox().build_id(), limits().max_snapshot_bytes).unwrap()
}

#[test]
fn suspend_drop_restore_resolve_gives_the_right_value() {
    let (mut vm, step) = start(
        "const seen = new Map();
         let counter = 0;
         const bump = () => ++counter;
         const later = Promise.resolve().then(() => { seen.set('then', bump()); });
         const [a, b] = await Promise.all([
           yield_control('a').then(() => { seen.set('a', bump()); return 'A'; }),
           yield_control('b').then(() => { seen.set('b', bump()); return 'B'; }),
         ]);
         await later;
         return { a, b, counter, seen };",
    );
    assert_eq!(step, Step::Pending);
    let ids: Vec<u32> = vm.take_new_requests().iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 2);
    let snapshot = through_bytes(&vm.suspend().unwrap());
    assert_eq!(snapshot.outstanding_requests(), &ids[..]);

    // First restore: settle `b` only, suspend again.
    let mut vm = sandbox().restore(&snapshot, &limits()).unwrap();
    assert_eq!(
        vm.settle(ids[1], Settlement::Resolve(json!(null))).unwrap(),
        Step::Pending
    );
    let snapshot = through_bytes(&vm.suspend().unwrap());
    assert_eq!(snapshot.outstanding_requests(), &ids[..1]);

    // Second restore: settle `a`, the cell completes with all state intact.
    let mut vm = sandbox().restore(&snapshot, &limits()).unwrap();
    assert_eq!(
        vm.settle(ids[0], Settlement::Resolve(json!(null))).unwrap(),
        Step::Completed(
            json!({"a": "A", "b": "B", "counter": 3, "seen": {"then": 1, "b": 2, "a": 3}})
        )
    );
}

#[test]
fn one_snapshot_restores_into_independent_vms() {
    let (mut vm, _) = start("let n = 10; await yield_control(); n += 1; return n");
    let id = vm.take_new_requests()[0].id;
    let snapshot = vm.suspend().unwrap();
    for _ in 0..3 {
        let mut vm = sandbox().restore(&snapshot, &limits()).unwrap();
        assert_eq!(
            vm.settle(id, Settlement::Resolve(json!(null))).unwrap(),
            Step::Completed(json!(11))
        );
    }
}

#[test]
fn output_after_restore_belongs_to_the_resumed_burst() {
    let (mut vm, _) = start("text('before'); await yield_control(); text('after'); return 1");
    assert_eq!(vm.take_output().len(), 1);
    let id = vm.take_new_requests()[0].id;
    let mut vm = sandbox()
        .restore(&vm.suspend().unwrap(), &limits())
        .unwrap();
    assert_eq!(
        vm.settle(id, Settlement::Resolve(json!(null))).unwrap(),
        Step::Completed(json!(1))
    );
    assert_eq!(
        vm.take_output(),
        vec![codemode_sandbox::OutputItem::Text("after".into())]
    );
}

#[test]
fn snapshots_store_only_what_changed() {
    let (vm, _) = start("await yield_control(); return 1");
    let snapshot = vm.suspend().unwrap();
    assert!(
        snapshot.size_bytes() < 256 * 1024,
        "{} bytes",
        snapshot.size_bytes()
    );
    // The persisted form trades size for speed (a fast zstd level):
    // about 87 KB here, versus 164 KB and more in memory.
    assert!(
        snapshot.to_bytes().len() < 128 * 1024,
        "{} bytes persisted",
        snapshot.to_bytes().len()
    );
}

#[test]
fn a_packed_snapshot_is_smaller_and_unpacks_to_the_same_run() {
    let (mut vm, step) = start(
        "const kept = 'x'.repeat(4000) + JSON.stringify({ deep: [1, 2, 3] });
         await yield_control('a');
         return kept.length;",
    );
    assert_eq!(step, Step::Pending);
    let id = vm.take_new_requests()[0].id;
    let snapshot = vm.suspend().unwrap();
    let packed = snapshot.pack();
    // A QuickJS heap packs well: this is what a long-waiting run holds
    // (its buffer's whole capacity: zstd's worst-case buffer is not kept).
    assert!(
        packed.size_bytes() * 2 < snapshot.size_bytes(),
        "packed {} of {}",
        packed.size_bytes(),
        snapshot.size_bytes()
    );
    let unpacked = packed.unpack().unwrap();
    assert_eq!(unpacked, snapshot);
    let mut vm = sandbox().restore(&unpacked, &limits()).unwrap();
    assert_eq!(
        vm.settle(id, Settlement::Resolve(json!(5))).unwrap(),
        Step::Completed(json!(4000 + 16))
    );
}

#[test]
fn settling_a_request_the_vm_does_not_wait_on_is_refused() {
    let (mut vm, _) = start("await yield_control(); return 1");
    assert!(matches!(
        vm.settle(999, Settlement::Resolve(json!(null))),
        Err(SandboxError::UnknownRequest(999))
    ));
}

#[test]
fn snapshots_past_the_limit_are_refused() {
    let small = Limits {
        max_snapshot_bytes: 64 * 1024,
        ..limits()
    };
    let (vm, step) = sandbox().start("const keep = 'z'.repeat(1 << 20) + Math.random(); await yield_control(); return keep.length", &small).unwrap();
    assert_eq!(step, Step::Pending);
    assert!(matches!(
        vm.suspend(),
        Err(SandboxError::Snapshot(SnapshotError::TooLarge { .. }))
    ));
}

#[test]
fn snapshots_of_another_build_or_damaged_bytes_are_refused() {
    let (vm, _) = start("await yield_control(); return 1");
    let bytes = vm.suspend().unwrap().to_bytes();
    let other_build = [7u8; 32];
    assert!(matches!(
        Snapshot::from_bytes(&bytes, &other_build, 1 << 30),
        Err(SnapshotError::Incompatible(_))
    ));
    let mut other_version = bytes.clone();
    other_version[6] = 99;
    assert!(matches!(
        Snapshot::from_bytes(&other_version, &sandbox().build_id(), 1 << 30),
        Err(SnapshotError::Incompatible(_))
    ));
    assert!(matches!(
        Snapshot::from_bytes(&bytes[..bytes.len() / 2], &sandbox().build_id(), 1 << 30),
        Err(SnapshotError::Corrupt(_))
    ));
    assert!(matches!(
        Snapshot::from_bytes(b"hello", &sandbox().build_id(), 1 << 30),
        Err(SnapshotError::Corrupt(_))
    ));
    assert!(matches!(
        Snapshot::from_bytes(&bytes, &sandbox().build_id(), 1024),
        Err(SnapshotError::Corrupt(_) | SnapshotError::TooLarge { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Snapshot::from_bytes(&bytes, &sandbox().build_id(), 1 << 20);
    }

    /// Flipping bytes of a real snapshot is refused or, if it still parses,
    /// restores without panicking the host.
    #[test]
    fn damaged_real_snapshots_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let bytes = BYTES.get_or_init(|| start("await yield_control(); return 1").0.suspend().unwrap().to_bytes());
        let mut damaged = bytes.clone();
        for (index, value) in flips {
            let i = index.index(damaged.len());
            damaged[i] ^= value | 1;
        }
        if let Ok(snapshot) = Snapshot::from_bytes(&damaged, &sandbox().build_id(), 1 << 24) {
            let _ = sandbox().restore(&snapshot, &limits());
        }
    }
}
