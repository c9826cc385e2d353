//! Engine benchmarks (issue: sandbox engine). Run with
//! `cargo bench -p codemode-sandbox --bench engine`; figures go to BENCHMARKS.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark"
)]

use std::time::{Duration, Instant};

use codemode_sandbox::{GuestApi, Limits, Sandbox, SandboxConfig, Settlement, Snapshot, Step};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

/// With the tests' guest API (`yield_control`): the default one is empty.
fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig {
        guest_api: GuestApi::new(include_str!("../tests/common/guest_api.js")),
        ..SandboxConfig::default()
    })
    .expect("sandbox")
}

fn cold_exec(c: &mut Criterion) {
    let sb = sandbox();
    let limits = Limits::default();
    c.bench_function("cold_exec_return_1", |b| {
        b.iter(|| {
            let (_vm, step) = sb.start("return 1", &limits).unwrap();
            assert_eq!(step, Step::Completed(json!(1)));
        })
    });
    c.bench_function("loop_1e6_iterations", |b| {
        b.iter(|| {
            let (_vm, step) = sb
                .start(
                    "let s = 0; for (let i = 0; i < 1e6; i++) { s = (s + i) | 0 } return s",
                    &limits,
                )
                .unwrap();
            assert!(matches!(step, Step::Completed(_)));
        })
    });
    c.bench_function("loop_1e6_iterations_native_rust", |b| {
        b.iter(|| {
            let mut s: i32 = 0;
            for i in 0..1_000_000i32 {
                s = std::hint::black_box(s.wrapping_add(i));
            }
            s
        })
    });
}

const WAITING_CELL: &str = "const items = [1, 2, 3]; const r = await yield_control('one host promise'); return items.length";

fn snapshots(c: &mut Criterion) {
    let sb = sandbox();
    let limits = Limits::default();
    let (mut vm, _) = sb.start(WAITING_CELL, &limits).unwrap();
    let id = vm.take_new_requests()[0].id;
    let snapshot = vm.suspend().unwrap();
    let bytes = snapshot.to_bytes();
    eprintln!(
        "snapshot of a cell waiting on one host promise: {} bytes in memory ({} pages), {} bytes persisted (zstd-1)",
        snapshot.size_bytes(),
        snapshot.size_bytes() / 4096,
        bytes.len()
    );
    c.bench_function("suspend_plus_resume", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (mut vm, _) = sb.start(WAITING_CELL, &limits).unwrap();
                let id = vm.take_new_requests()[0].id;
                let t = Instant::now();
                let snapshot = vm.suspend().unwrap();
                let mut vm = sb.restore(&snapshot, &limits).unwrap();
                let step = vm.settle(id, Settlement::Resolve(json!(null))).unwrap();
                total += t.elapsed();
                assert_eq!(step, Step::Completed(json!(3)));
            }
            total
        })
    });
    c.bench_function("suspend_only", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (vm, _) = sb.start(WAITING_CELL, &limits).unwrap();
                let t = Instant::now();
                let snapshot = vm.suspend().unwrap();
                total += t.elapsed();
                drop(snapshot);
            }
            total
        })
    });
    c.bench_function("resume_only", |b| {
        b.iter(|| {
            let mut vm = sb.restore(&snapshot, &limits).unwrap();
            vm.settle(id, Settlement::Resolve(json!(null))).unwrap()
        })
    });
    // What a long-waiting run's live copy costs: packing (off the suspend
    // path, by the reaper) and unpacking (on `wait`).
    let packed = snapshot.pack();
    eprintln!(
        "packed in memory: {} bytes (raw {})",
        packed.size_bytes(),
        snapshot.size_bytes()
    );
    c.bench_function("snapshot_pack", |b| b.iter(|| snapshot.pack()));
    c.bench_function("snapshot_unpack", |b| b.iter(|| packed.unpack().unwrap()));
    c.bench_function("snapshot_to_bytes_and_back", |b| {
        b.iter(|| {
            Snapshot::from_bytes(
                &snapshot.to_bytes(),
                &sb.build_id(),
                limits.max_snapshot_bytes,
            )
            .unwrap()
        })
    });
}

fn throughput(c: &mut Criterion) {
    let sb = sandbox();
    let limits = Limits::default();
    // Cells per second on both cores: two threads each running trivial cells.
    let mut group = c.benchmark_group("throughput_2_threads");
    group.throughput(criterion::Throughput::Elements(2));
    group.bench_function("trivial_cell_pair", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    let sb = &sb;
                    let limits = &limits;
                    s.spawn(move || {
                        for _ in 0..iters {
                            let (_vm, step) = sb.start("return 1", limits).unwrap();
                            assert!(matches!(step, Step::Completed(_)));
                        }
                    });
                }
            });
            t.elapsed()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = cold_exec, snapshots, throughput
}
criterion_main!(benches);
