//! Runtime benchmarks (issue: catalog, nested calls, wait):
//! - exec of a cell awaiting 50 fast in-process tool calls in a loop;
//! - `return 1` with 1, 22 and 200 MCP tools in the catalog;
//! - `wait` on a suspended cell whose nested call already finished;
//! - 1,000 suspended runs held at once: bytes and RSS per run;
//! - the control layer: the same 50 calls through a no-op
//!   `before_tool_call` hook, and one call needing approval decided by an
//!   `Approver` at once, next to the same call without approval.
//!
//! `cargo bench -p codemode-runtime --bench runtime`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "bench"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_runtime::{
    ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver, Catalog, CodeModeRuntime,
    CodeModeSession, HookDecision, HookFuture, NestedCall, RunContext, RuntimeOptions,
    ToolCallError, ToolCallEvent, ToolDefinition, ToolExecutor, ToolFuture, ToolHooks, ToolPolicy,
    ToolSource,
};
use common::Gate;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

struct Tools {
    gate: Gate,
}

impl ToolExecutor for Tools {
    fn call(&self, call: NestedCall) -> ToolFuture {
        match call.tool.name.as_str() {
            // A fast in-process tool: answers on the first poll.
            "double" | "guarded" => {
                let n = call.input["n"].as_i64().unwrap_or(0);
                Box::pin(async move { Ok(json!({ "n": n * 2 })) })
            }
            "gated" => self.gate.call(),
            _ => Box::pin(async { Err(ToolCallError::new("unknown")) }),
        }
    }
}

/// A hook that allows everything (the cost of having hooks at all).
struct AllowAll;

impl ToolHooks for AllowAll {
    fn before_tool_call(&self, _event: ToolCallEvent) -> HookFuture {
        Box::pin(std::future::ready(HookDecision::Allow))
    }
}

/// Approves every call at once (the cost of the approval path itself).
struct ApproveAll;

impl Approver for ApproveAll {
    fn ask(&self, _request: ApprovalRequest) -> ApprovalFuture {
        Box::pin(std::future::ready(Some(ApprovalDecision::Approve)))
    }
}

/// Sessions over `double` and `guarded` (a `double` that needs approval).
fn control_sessions(runtime: &CodeModeRuntime) -> (CodeModeSession, CodeModeSession) {
    let tools = || {
        vec![
            ToolDefinition::new(ToolSource::Openclaw, "core", "double"),
            ToolDefinition::new(ToolSource::Openclaw, "core", "guarded").with_approval(true),
        ]
    };
    let executor = || {
        Arc::new(Tools {
            gate: Gate::default(),
        })
    };
    let hooked = runtime
        .session(
            RunContext::default(),
            Catalog::build(tools(), &ToolPolicy::default()).unwrap(),
            executor(),
        )
        .with_hooks(Arc::new(AllowAll));
    let approving = runtime
        .session(
            RunContext {
                session_id: Some("approving".into()),
                ..RunContext::default()
            },
            Catalog::build(tools(), &ToolPolicy::default()).unwrap(),
            executor(),
        )
        .with_approver(Arc::new(ApproveAll));
    (hooked, approving)
}

fn setup(
    timeout_ms: u64,
    max_suspended_runs: usize,
) -> (CodeModeRuntime, Arc<CodeModeSession>, Gate) {
    let runtime = common::runtime(
        &format!(
            "{{tools:{{codeMode:{{enabled:true, timeoutMs:{timeout_ms}, snapshotTtlSeconds: 3600}}}}}}"
        ),
        RuntimeOptions {
            max_suspended_runs,
            // The held-runs bench fills the store from one session.
            max_suspended_runs_per_scope: max_suspended_runs,
            ..RuntimeOptions::default()
        },
    );
    let tools = vec![
        ToolDefinition::new(ToolSource::Openclaw, "core", "double").with_description("Doubles n"),
        ToolDefinition::new(ToolSource::Client, "app", "gated").with_description("Waits"),
    ];
    let gate = Gate::default();
    let session = Arc::new(runtime.session(
        RunContext::default(),
        Catalog::build(tools, &ToolPolicy::default()).unwrap(),
        Arc::new(Tools { gate: gate.clone() }),
    ));
    (runtime, session, gate)
}

const FIFTY_CALLS: &str = "let sum = 0;\nfor (let i = 0; i < 50; i++) sum += (await tools.double({ n: i })).n;\nreturn sum;";

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_runtime, session, gate) = setup(10_000, 2048);

    let r = rt
        .block_on(session.exec(&json!({ "code": FIFTY_CALLS })))
        .to_json();
    assert_eq!(r["value"], 2450, "{r}");
    c.bench_function("exec: 50 awaited fast tool calls, summed", |b| {
        b.iter(|| rt.block_on(session.exec(&json!({ "code": FIFTY_CALLS }))))
    });
    c.bench_function("exec: return 1 (no tool calls, for comparison)", |b| {
        b.iter(|| rt.block_on(session.exec(&json!({ "code": "return 1" }))))
    });

    // What the catalog's size costs an exec that calls nothing: every MCP
    // tool is in the run's `MCP` namespace.
    for n in [1usize, 22, 200] {
        let tools: Vec<ToolDefinition> = (0..n)
            .map(|i| {
                ToolDefinition::new(ToolSource::Mcp, "srv", &format!("tool_{i}"))
                    .with_description("A tool that does one thing")
                    .with_parameters(
                        json!({"type": "object", "properties": {"a": {"type": "number"}}}),
                    )
            })
            .collect();
        let catalog = Catalog::build_with_mcp_servers(
            tools,
            &ToolPolicy::default(),
            &[codemode_runtime::McpServerInfo::new("srv")],
        )
        .unwrap();
        let wide = _runtime.session(
            RunContext::default(),
            catalog,
            Arc::new(Tools {
                gate: Gate::default(),
            }),
        );
        let r = rt
            .block_on(wide.exec(&json!({ "code": "return Object.keys(MCP.srv).length" })))
            .to_json();
        assert_eq!(r["value"], n + 1, "{r}");
        c.bench_function(
            &format!("exec: return 1 with {n} MCP tools in the catalog"),
            |b| b.iter(|| rt.block_on(wide.exec(&json!({ "code": "return 1" })))),
        );
    }

    let (hooked, approving) = control_sessions(&_runtime);
    c.bench_function("exec: 50 fast tool calls through a no-op hook", |b| {
        b.iter(|| rt.block_on(hooked.exec(&json!({ "code": FIFTY_CALLS }))))
    });
    let one = |tool: &str| json!({ "code": format!("return (await tools.{tool}({{ n: 2 }})).n") });
    let r = rt.block_on(approving.exec(&one("guarded"))).to_json();
    assert_eq!(r["value"], 4, "{r}");
    c.bench_function("exec: one call, no approval needed", |b| {
        b.iter(|| rt.block_on(approving.exec(&one("double"))))
    });
    c.bench_function("exec: one call approved by an Approver at once", |b| {
        b.iter(|| rt.block_on(approving.exec(&one("guarded"))))
    });

    // wait on a suspended cell whose call has finished: time only the wait.
    let (_runtime, session, gate2) = setup(100, 2048);
    drop(gate);
    c.bench_function("wait: suspended cell, call finished -> completed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let waiting = rt
                    .block_on(
                        session
                            .exec(&json!({ "code": "const r = await tools.gated({}); return r" })),
                    )
                    .to_json();
                assert_eq!(waiting["status"], "waiting", "{waiting}");
                let before = gate2.passed();
                gate2.open_one();
                // Time only the wait: the call must have finished and sent
                // its result before the clock starts.
                while gate2.passed() == before {
                    std::thread::yield_now();
                }
                std::thread::sleep(Duration::from_micros(200));
                let input = json!({ "runId": waiting["runId"] });
                let started = Instant::now();
                let done = rt.block_on(session.wait(&input));
                total += started.elapsed();
                assert_eq!(done.status(), "completed", "{}", done.to_json());
            }
            total
        })
    });

    held_runs(&rt);
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// 1,000 runs suspended at once (each with one in-flight call), within a
/// store bounded at 1,024.
fn held_runs(rt: &tokio::runtime::Runtime) {
    let (runtime, session, _gate) = setup(100, 1024);
    let code = "const big = []; for (let i = 0; i < 100; i++) big.push({ i, s: 'x' + i });\nconst r = await tools.gated({});\nreturn big.length;";
    let rss_before = rss_bytes();
    let started = Instant::now();
    let mut ids: Vec<Value> = Vec::new();
    // 10 at a time: each exec waits out its 100 ms deadline.
    for _ in 0..100 {
        let batch: Vec<_> = (0..10)
            .map(|_| {
                let session = Arc::clone(&session);
                rt.spawn(async move { session.exec(&json!({ "code": code })).await.to_json() })
            })
            .collect();
        for handle in batch {
            let r = rt.block_on(handle).unwrap();
            assert_eq!(r["status"], "waiting", "{r}");
            ids.push(r["runId"].clone());
        }
    }
    let elapsed = started.elapsed();
    let held = runtime.suspended_runs();
    let bytes = runtime.suspended_bytes();
    let rss = rss_bytes().saturating_sub(rss_before);
    println!(
        "held runs: {held} suspended at once (limit 1024) in {:.1} s; snapshot bytes held {} ({} per run); RSS growth {} bytes ({} per run)",
        elapsed.as_secs_f64(),
        bytes,
        bytes / held.max(1),
        rss,
        rss / held.max(1)
    );
    let over = rt.block_on(session.exec(&json!({ "code": code })));
    let over = rt.block_on(async {
        let mut over = over;
        for _ in 0..30 {
            if over.status() != "waiting" {
                break;
            }
            over = session.exec(&json!({ "code": code })).await;
        }
        over
    });
    println!(
        "held runs: past the limit exec answers {:?}: {}",
        over.code().map(|c| c.as_str()),
        over.to_json()["error"]
    );
    runtime.shutdown();
    println!(
        "held runs: after shutdown {} held",
        runtime.suspended_runs()
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
