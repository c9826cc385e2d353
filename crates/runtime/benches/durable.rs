//! Durable run stores side by side (issue: durable runs), in one process:
//! - suspend + resume of a cell waiting on one call — the exec that
//!   suspends plus the wait that resumes and completes it — with runs in
//!   memory, in the embedded file store (redb, fsync on every write that
//!   must survive a crash; a resume claims the run lazily, before its first
//!   new call) and in Redis on loopback (a real
//!   `redis-server`, append-only, `appendfsync everysec`); backends take
//!   turns each round, so the noise of the shared machine falls on all;
//!   medians and the median of the per-round differences to memory;
//! - 1,000 suspended runs held in each backend within a bound of 1,000 (the
//!   next one is refused with `snapshot_limit_exceeded`), with the store's
//!   bytes per run.
//!
//! `cargo bench -p codemode-runtime --bench durable [-- ROUNDS]`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "bench"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_runtime::codemode_store::testing::RedisServer;
use codemode_runtime::codemode_store::{FileBackend, RedisBackend, RunBackend};
use codemode_runtime::{
    Catalog, CodeModeRuntime, CodeModeSession, DurableStore, NestedCall, RunContext,
    RuntimeOptions, ToolCallError, ToolDefinition, ToolExecutor, ToolFuture, ToolPolicy,
    ToolSource,
};
use common::Gate;
use serde_json::{Value, json};

/// Only `gated`, which waits at the gate.
struct Gated(Gate);

impl ToolExecutor for Gated {
    fn call(&self, call: NestedCall) -> ToolFuture {
        if call.tool.name != "gated" {
            return Box::pin(async { Err(ToolCallError::new("unknown")) });
        }
        self.0.call()
    }
}

struct Backend {
    name: &'static str,
    runtime: CodeModeRuntime,
    session: Arc<CodeModeSession>,
    gate: Gate,
    store: Option<Arc<dyn RunBackend>>,
}

fn backend(name: &'static str, store: Option<Arc<dyn RunBackend>>, max_runs: usize) -> Backend {
    let runtime = common::runtime(
        "{tools:{codeMode:{enabled:true, timeoutMs: 5000, snapshotTtlSeconds: 600}}}",
        RuntimeOptions {
            max_suspended_runs: max_runs,
            max_suspended_runs_per_scope: max_runs,
            durable_store: store.clone().map(DurableStore),
            ..RuntimeOptions::default()
        },
    );
    let gate = Gate::default();
    let session = runtime.session(
        RunContext::default(),
        Catalog::build(
            vec![ToolDefinition::new(ToolSource::Openclaw, "core", "gated")],
            &ToolPolicy::default(),
        )
        .unwrap(),
        Arc::new(Gated(gate.clone())),
    );
    Backend {
        name,
        runtime,
        session: Arc::new(session),
        gate,
        store,
    }
}

/// Suspends at once with one call in flight.
const CELL: &str = "const p = tools.gated({}); await yield_control(); return await p;";

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One suspend + resume: the exec's time plus the wait's (the call answers
/// in between, untimed); and its parts: exec, wait, the suspend event's own
/// time (snapshot, record, store write).
async fn round(b: &Backend) -> [f64; 4] {
    let started = Instant::now();
    let r = b.session.exec(&json!({ "code": CELL })).await.to_json();
    let exec = started.elapsed();
    assert_eq!(r["status"], "waiting", "{}: {r}", b.name);
    let before = b.gate.passed();
    b.gate.open_one();
    while b.gate.passed() == before {
        tokio::task::yield_now().await;
    }
    // The result reaches the run (and, for durable stores, the store).
    tokio::time::sleep(Duration::from_millis(3)).await;
    let started = Instant::now();
    let w = b
        .session
        .wait(&json!({ "runId": r["runId"] }))
        .await
        .to_json();
    let wait = started.elapsed();
    assert_eq!(w["status"], "completed", "{}: {w}", b.name);
    let suspended = r["telemetry"]["snapshotEvents"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["event"] == "suspended"))
        .and_then(|e| e["micros"].as_f64())
        .unwrap_or(0.0);
    [
        (exec + wait).as_secs_f64() * 1e6,
        exec.as_secs_f64() * 1e6,
        wait.as_secs_f64() * 1e6,
        suspended,
    ]
}

fn held(rt: &tokio::runtime::Runtime, b: &Backend) {
    let started = Instant::now();
    let mut ids: Vec<Value> = Vec::new();
    for _ in 0..1000 {
        let r = rt
            .block_on(b.session.exec(&json!({ "code": CELL })))
            .to_json();
        assert_eq!(r["status"], "waiting", "{}: {r}", b.name);
        ids.push(r["runId"].clone());
    }
    let made = started.elapsed();
    let over = rt
        .block_on(b.session.exec(&json!({ "code": CELL })))
        .to_json();
    let refused = over["code"].as_str().unwrap_or("none").to_owned();
    let (store_bytes, waiting) = match &b.store {
        Some(store) => {
            let stats = store.stats().unwrap();
            (stats.bytes, stats.waiting)
        }
        None => (
            b.runtime.suspended_bytes() as u64,
            b.runtime.suspended_runs() as u64,
        ),
    };
    println!(
        "held {:>6}: {} runs held (bound 1000) in {:.1} s; store bytes {} ({} per run); the next exec: {}",
        b.name,
        waiting,
        made.as_secs_f64(),
        store_bytes,
        store_bytes / waiting.max(1),
        refused
    );
    assert_eq!(waiting, 1000);
    assert_eq!(refused, "snapshot_limit_exceeded");
    b.runtime.shutdown();
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start_with_fsync("everysec");
    let file_store = |name: &str| -> Arc<dyn RunBackend> {
        Arc::new(FileBackend::open(&dir.path().join(name)).unwrap())
    };
    let redis_store =
        || -> Arc<dyn RunBackend> { Arc::new(RedisBackend::open(&redis.url()).unwrap()) };
    let backends = [
        backend("memory", None, 1024),
        backend("file", Some(file_store("bench.db")), 1024),
        backend("redis", Some(redis_store()), 1024),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); backends.len()];
    let mut parts: Vec<[Vec<f64>; 3]> = vec![Default::default(); backends.len()];
    for i in 0..(rounds + 20) {
        for k in 0..backends.len() {
            // Rotate who goes first.
            let j = (i + k) % backends.len();
            let [t, exec, wait, suspended] = rt.block_on(round(&backends[j]));
            if i >= 20 {
                times[j].push(t);
                parts[j][0].push(exec);
                parts[j][1].push(wait);
                parts[j][2].push(suspended);
            }
        }
    }
    let memory = times[0].clone();
    println!("suspend + resume of a cell waiting on one call, {rounds} rounds, µs (exec + wait):");
    for ((b, t), p) in backends.iter().zip(&times).zip(&mut parts) {
        let mut diffs: Vec<f64> = t.iter().zip(&memory).map(|(a, m)| a - m).collect();
        let mut sorted = t.clone();
        println!(
            "  {:>6}: median {:>8.1}  p90 {:>8.1}  paired median difference to memory {:>+8.1}  (exec {:.1}, wait {:.1}, suspend event {:.1})",
            b.name,
            median(&mut sorted),
            sorted[sorted.len() * 9 / 10],
            median(&mut diffs),
            median(&mut p[0]),
            median(&mut p[1]),
            median(&mut p[2]),
        );
    }
    for b in backends {
        b.runtime.shutdown();
    }
    // What the stores' writes cost alone (a 66 KB record, the size of this
    // cell's snapshot persisted): put, claim, remove.
    let record: Vec<u8> = (0..66_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let bounds = codemode_runtime::codemode_store::Bounds {
        max_runs: 10,
        max_bytes: 1 << 30,
    };
    for (name, store) in [("file", file_store("writes.db")), ("redis", redis_store())] {
        let (mut put, mut claim, mut remove) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..200 {
            let t = Instant::now();
            store
                .put("run_w", "o", &record, Duration::from_secs(60), bounds)
                .unwrap();
            put.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            store.claim("run_w", "o", Some(u64::MAX)).unwrap();
            claim.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            store.remove("run_w").unwrap();
            remove.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!(
            "  {name:>6} writes alone, µs: put {:.1}, claim {:.1}, remove {:.1}",
            median(&mut put),
            median(&mut claim),
            median(&mut remove)
        );
    }
    // 1,000 held runs per backend (fresh stores, bound 1,000).
    held(&rt, &backend("memory", None, 1000));
    held(&rt, &backend("file", Some(file_store("held.db")), 1000));
    let fresh_redis = RedisServer::start_with_fsync("everysec");
    held(
        &rt,
        &backend(
            "redis",
            Some(Arc::new(RedisBackend::open(&fresh_redis.url()).unwrap())),
            1000,
        ),
    );
}
