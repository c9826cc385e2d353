//! What a thread hand-off costs on this machine (issue: the gateway's own
//! cost): the mechanisms the run path uses, alone, on a multi-thread tokio
//! runtime like the gateway's.
//!
//! - `exec/block_in_place` vs `exec/inline`: a request task that runs its
//!   (tiny) VM work under `block_in_place`, as every exec and wait does
//!   (`run::drive::blocking`), against running it in the task.
//! - `nested_call/drive_thread` vs `nested_call/same_worker`: one nested
//!   call's round trip as the drive does it today (the drive thread spawns
//!   the call's task and blocks on the run's flume channel until the task
//!   sends the outcome back), against a drive that awaits the call on the
//!   worker that runs it.
//!
//! `cargo bench -p codemode-runtime --bench handoff`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "bench"
)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

/// Stands in for a short VM burst.
fn work() -> u64 {
    let mut x = 0u64;
    for i in 0..2_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
    }
    std::hint::black_box(x)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Times `iters` rounds of `round` inside one task on the runtime.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, round: F) -> Duration
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    rt.block_on(async move {
        tokio::spawn(async move {
            let started = Instant::now();
            for _ in 0..iters {
                round().await;
            }
            started.elapsed()
        })
        .await
        .unwrap()
    })
}

fn exec(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("exec");
    group.bench_function("inline", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                tokio::spawn(async { work() }).await.unwrap();
            })
        });
    });
    group.bench_function("block_in_place", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                tokio::spawn(async { tokio::task::block_in_place(work) })
                    .await
                    .unwrap();
            })
        });
    });
    group.finish();
}

fn nested_call(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("nested_call");
    group.bench_function("same_worker", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    tokio::task::yield_now().await;
                    let _ = tx.send(work());
                });
                std::hint::black_box(rx.await.unwrap());
            })
        });
    });
    group.bench_function("drive_thread", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                tokio::spawn(async move {
                    let handle = tokio::runtime::Handle::current();
                    tokio::task::block_in_place(|| {
                        let (tx, rx) = flume::unbounded();
                        let started = Instant::now();
                        for _ in 0..iters {
                            let tx = tx.clone();
                            handle.spawn(async move {
                                tokio::task::yield_now().await;
                                let _ = tx.send(work());
                            });
                            std::hint::black_box(rx.recv().unwrap());
                        }
                        started.elapsed()
                    })
                })
                .await
                .unwrap()
            })
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(4));
    targets = exec, nested_call
}
criterion_main!(benches);
