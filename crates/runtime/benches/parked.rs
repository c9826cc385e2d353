//! Thousands of cells awaiting a slow tool in one process (issue: waiting
//! cells hold no VM): `CELLS` execs in sessions of 16 (each its own scope),
//! each awaiting one nested call that answers after `SLOW_SECONDS`, with
//! the default 128 live VMs. Reports how long until every call is in
//! flight, how many cells wait at once (parked) and on how many live VMs
//! and threads, the process's RSS per waiting cell, the latency of another
//! session's `return 1` before the load and while it waits (median, p90,
//! p99), and whether every cell completed with its value.
//!
//! `cargo bench -p codemode-runtime --bench parked [-- CELLS SLOW_SECONDS]`
//! (defaults 2000 and 10).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "bench"
)]

#[allow(dead_code, reason = "the gate serves the other benches")]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use codemode_runtime::{
    Catalog, CodeModeRuntime, CodeModeSession, NestedCall, RunContext, RuntimeOptions,
    ToolDefinition, ToolExecutor, ToolFuture, ToolPolicy, ToolSource,
};
use serde_json::json;

/// `slow` answers its input after the delay; counts calls in flight.
struct Slow {
    delay: Duration,
    in_flight: Arc<AtomicUsize>,
}

impl ToolExecutor for Slow {
    fn call(&self, call: NestedCall) -> ToolFuture {
        let (delay, in_flight) = (self.delay, Arc::clone(&self.in_flight));
        Box::pin(async move {
            in_flight.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok(call.input)
        })
    }
}

fn session(runtime: &CodeModeRuntime, id: usize, slow: &Arc<Slow>) -> Arc<CodeModeSession> {
    let context = RunContext {
        session_id: Some(format!("s{id}")),
        ..RunContext::default()
    };
    let catalog = Catalog::build(
        vec![ToolDefinition::new(ToolSource::Plugin, "p", "slow")],
        &ToolPolicy::default(),
    )
    .unwrap();
    Arc::new(runtime.session(context, catalog, Arc::clone(slow) as Arc<dyn ToolExecutor>))
}

/// A line of `/proc/self/status` (`VmRSS`, `Threads`), as its number.
fn status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:.3} ms, p90 {:.3} ms, p99 {:.3} ms (n={})",
        at(0.5),
        at(0.9),
        at(0.99),
        v.len()
    )
}

/// `n` sequential `return 1` execs of `quick`, each one's milliseconds.
async fn quick_latencies(quick: &CodeModeSession, n: usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let r = quick.exec(&json!({ "code": "return 1" })).await.to_json();
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r["value"], 1, "{r}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    samples
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let cells: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let slow_seconds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let timeout_ms = (slow_seconds + 30) * 1000;
        let runtime = common::runtime(
            &format!("{{tools:{{codeMode:{{enabled:true, timeoutMs: {timeout_ms}}}}}}}"),
            RuntimeOptions::default(),
        );
        let slow = Arc::new(Slow {
            delay: Duration::from_secs(slow_seconds),
            in_flight: Arc::default(),
        });
        let quick = session(&runtime, usize::MAX, &slow);
        // Warm up: the module, the VM pool, the quick session.
        for _ in 0..20 {
            quick.exec(&json!({ "code": "return 1" })).await;
        }
        // Every VM slot used once at the same time (128 cells of 8
        // sessions busy for 300 ms): the memory of the VM pool is then
        // resident before the baseline, a fixed cost of concurrency that
        // is not per waiting cell.
        let busy = "const t = Date.now(); while (Date.now() - t < 300) {} return 1";
        let warm: Vec<_> = (0..8)
            .flat_map(|s| {
                let session = session(&runtime, 1_000_000 + s, &slow);
                (0..16).map(move |_| {
                    let session = Arc::clone(&session);
                    tokio::spawn(async move { session.exec(&json!({ "code": busy })).await })
                })
            })
            .collect();
        for cell in warm {
            cell.await.unwrap();
        }
        let unloaded = quick_latencies(&quick, 200).await;
        let (rss_before, threads_before) = (status("VmRSS"), status("Threads"));
        let started = Instant::now();
        let mut pending = Vec::with_capacity(cells);
        for s in 0..cells.div_ceil(16) {
            let session = session(&runtime, s, &slow);
            for c in 0..16.min(cells - s * 16) {
                let session = Arc::clone(&session);
                let n = s * 16 + c;
                pending.push(tokio::spawn(async move {
                    let code = format!("const r = await tools.slow({{ n: {n} }}); return r.n");
                    (n, session.exec(&json!({ "code": code })).await.to_json())
                }));
            }
        }
        while slow.in_flight.load(Ordering::SeqCst) < cells {
            assert!(
                started.elapsed() < Duration::from_secs(slow_seconds),
                "only {} of {cells} calls in flight before the first answered",
                slow.in_flight.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let all_in_flight = started.elapsed();
        // Let the last cells park.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (parked, live) = (runtime.parked_cells(), runtime.live_vms());
        let rss_parked = status("VmRSS");
        let loaded = quick_latencies(&quick, 200).await;
        // Memory once every cell waited long enough to be packed.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (rss_waiting, threads_waiting) = (status("VmRSS"), status("Threads"));
        let mut completed = 0;
        for cell in pending {
            let (n, r) = cell.await.unwrap();
            if r["status"] == "completed" && r["value"] == n {
                completed += 1;
            } else {
                eprintln!("cell {n}: {r}");
            }
        }
        let total = started.elapsed();
        println!("{cells} cells, each awaiting one call of {slow_seconds} s, default 128 live VMs");
        println!(
            "  every call in flight after {:.0} ms; then {parked} cells parked on {live} live VMs",
            all_in_flight.as_secs_f64() * 1000.0
        );
        let per_cell = |rss: u64| rss.saturating_sub(rss_before) as f64 / cells as f64;
        println!(
            "  RSS {rss_before} KiB (all 128 VMs used once) → {rss_parked} KiB when all parked ({:.1} KiB per cell) → {rss_waiting} KiB once packed ({:.1} KiB per cell); threads {threads_before} → {threads_waiting}",
            per_cell(rss_parked),
            per_cell(rss_waiting),
        );
        println!("  return 1, unloaded: {}", percentiles(unloaded));
        println!("  return 1, while the cells wait: {}", percentiles(loaded));
        println!(
            "  completed with their value: {completed} of {cells}, all within {:.2} s",
            total.as_secs_f64()
        );
        assert_eq!(completed, cells);
    });
}
