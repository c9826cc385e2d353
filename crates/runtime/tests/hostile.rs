//! Hostile cells against the process around the sandbox: each test pins a
//! way one cell or one session used to hurt the host or the others (issue
//! "Reliability"), and failed before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_runtime::{RuntimeOptions, ToolSource};
use common::{Behaviour, Scripted, exec, run, runtime_with, session, shared, tool, wait};
use serde_json::{Value, json};

fn assert_failed(result: &Value, code: Option<&str>, needle: &str) {
    assert_eq!(result["status"], "failed", "{result}");
    assert_eq!(result["code"].as_str(), code, "{result}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(error.contains(needle), "expected {needle:?} in: {error}");
}

/// Shapes that made the pre-VM checks recurse without bound on the
/// caller's thread (a Rust stack overflow aborts the whole process).
fn deep_shapes(n: usize) -> Vec<(String, &'static str)> {
    vec![
        (
            format!("// import\nreturn {}1{}", "[".repeat(n), "]".repeat(n)),
            "javascript",
        ),
        (
            format!("return {}1{}", "(".repeat(n), ")".repeat(n)),
            "javascript",
        ),
        (format!("return {}x", "!".repeat(n)), "javascript"),
        (format!("return 1{}", "+1".repeat(n)), "javascript"),
        (format!("return a{}", ".b".repeat(n)), "javascript"),
        (format!("return f{}", "()".repeat(n)), "javascript"),
        (format!("{}return 1", "if (x)\n".repeat(n)), "javascript"),
        (
            format!("return {}1{}", "[".repeat(n), "]".repeat(n)),
            "typescript",
        ),
        (
            format!(
                "type T = {}number{};\nreturn 1",
                "Array<".repeat(n),
                ">".repeat(n)
            ),
            "typescript",
        ),
        (format!("ls {}", "[".repeat(n)), "javascript"),
        (format!("ls {}", "-a ".repeat(n)), "javascript"),
    ]
}

#[tokio::test]
async fn too_deep_cells_fail_alone_with_a_clear_error() {
    for n in [1_500, 50_000] {
        for (code, language) in deep_shapes(n) {
            let result = run(&code, language).await;
            assert_failed(&result, Some("invalid_input"), "nests too deeply");
            assert!(
                result["error"].as_str().unwrap().contains("line"),
                "{result}"
            );
        }
    }
    // The process is fine: the next cell runs.
    assert_eq!(run("return 1", "javascript").await["value"], 1);
}

#[tokio::test]
async fn cells_just_under_the_nesting_limit_are_checked_without_overflow() {
    // Every shape at the deepest the bound lets through runs the real
    // parsers on the checker thread; whatever the engine then says, the
    // process survives and answers.
    for (code, language) in deep_shapes(480) {
        let result = run(&code, language).await;
        assert!(result["status"].is_string(), "{result}");
    }
    assert_eq!(run("return 2", "javascript").await["value"], 2);
}

#[tokio::test]
async fn a_cell_cannot_close_its_own_wrapper() {
    let escape = "}); globalThis.__escaped = 1; (async function () {";
    let result = run(escape, "javascript").await;
    assert_failed(&result, None, "SyntaxError");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("closes the function"),
        "{result}"
    );
    let again = run("return typeof globalThis.__escaped", "javascript").await;
    assert_eq!(again["value"], "undefined", "{again}");
    // Ordinary syntax errors still say where.
    let result = run("const a = 1;\nconst = 2", "javascript").await;
    assert_failed(&result, None, "line 2");
}

#[tokio::test]
async fn typescript_namespaces_are_not_module_exports() {
    let result = run(
        "namespace N { export const v = 9 }\nreturn N.v;",
        "typescript",
    )
    .await;
    assert_eq!(result["value"], 9, "{result}");
}

fn instant_tool() -> (Vec<codemode_runtime::ToolDefinition>, Scripted) {
    let tools = vec![tool(ToolSource::Plugin, "p", "ping", "answers at once")];
    let exec = Scripted::default().with("plugin:p:ping", Behaviour::Value(json!(1)));
    (tools, exec)
}

#[tokio::test]
async fn output_is_bounded_over_the_whole_exec_not_per_burst() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, maxOutputBytes: 20000, timeoutMs: 5000}}}",
        RuntimeOptions::default(),
    );
    let (tools, executor) = instant_tool();
    let s = session(&runtime, tools, executor);
    let result = exec(
        &s,
        "for (let i = 0; i < 100; i++) { text('x'.repeat(5000)); await tools.ping({}); } return 1",
    )
    .await;
    assert_failed(&result, Some("output_limit_exceeded"), "maxOutputBytes");
    let kept: usize = result["output"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i["text"].as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    assert!(kept <= 20_000, "kept {kept} bytes");
    // Empty items cost something too.
    let result = exec(&s, "for (let i = 0; i < 1e6; i++) text(''); return 1").await;
    assert_failed(&result, Some("output_limit_exceeded"), "each item counts");
    // The value counts against the same budget.
    let result = exec(&s, "text('y'.repeat(15000)); return 'z'.repeat(10000)").await;
    assert_failed(&result, Some("output_limit_exceeded"), "returned value");
}

#[tokio::test]
async fn error_text_is_bounded() {
    // Its own runtime with a long timeout: building and cutting an 8 MiB
    // message takes a debug build over the shared runtime's 1 s on a
    // loaded machine, and this test is about the cut, not the clock.
    let roomy = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 30000}}}",
        RuntimeOptions::default(),
    );
    let s = session(&roomy, Vec::new(), Scripted::default());
    let result = exec(&s, "throw new Error('E'.repeat(8 << 20))").await;
    let error = result["error"].as_str().unwrap();
    assert!(error.len() < 10_000, "{} bytes", error.len());
    assert!(
        error.contains("[truncated: 8388608 bytes in all]"),
        "{result}"
    );
    let tools = vec![tool(ToolSource::Plugin, "p", "bad", "fails loudly")];
    let executor = Scripted::default().with("plugin:p:bad", Behaviour::Fail("F".repeat(2 << 20)));
    let s = session(&roomy, tools, executor);
    let result = exec(
        &s,
        "try { await tools.bad({}) } catch (e) { return e.message.length }",
    )
    .await;
    assert!(result["value"].as_u64().unwrap() < 10_000, "{result}");
}

#[tokio::test]
async fn host_work_asked_by_the_guest_ends_at_the_deadline() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 1000}}}",
        RuntimeOptions::default(),
    );
    let tools: Vec<_> = (0..300)
        .map(|i| {
            tool(
                ToolSource::Plugin,
                "p",
                &format!("tool_number_{i}"),
                "a tool",
            )
        })
        .collect();
    let s = session(&runtime, tools, Scripted::default());
    // Oversized ids are refused at once, catchably, naming the cap.
    let result = exec(
        &s,
        "try { await tools.describe('x'.repeat(200000)) } catch (e) { return e.message }",
    )
    .await;
    assert!(
        result["value"]
            .as_str()
            .unwrap()
            .contains("at most 1024 bytes"),
        "{result}"
    );
    // A burst of the most expensive describes the cap allows ends near the
    // deadline, not long after it.
    let started = Instant::now();
    let result = exec(
        &s,
        "const ps = []; for (let i = 0; i < 1000; i++) ps.push(tools.describe('y'.repeat(1000) + i).catch(() => 0));\
         for (;;) { await Promise.all(ps.slice(0, 10)); for (let i = 0; i < 50; i++) await tools.describe('z'.repeat(1000)).catch(() => 0); }",
    )
    .await;
    let took = started.elapsed();
    eprintln!(
        "describe burst ended after {took:?} (timeoutMs 1000): {}",
        result["status"]
    );
    // It ends at the deadline: suspended with results carried to the next
    // wait, or failed with `timeout` when the host was mid-burst.
    assert!(
        result["status"] == "waiting" || result["code"] == "timeout",
        "{result}"
    );
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

#[tokio::test]
async fn oversized_tool_input_rejects_inside_the_guest() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 5000}}}",
        RuntimeOptions::default(),
    );
    let (tools, executor) = instant_tool();
    let s = session(&runtime, tools, executor);
    let result = exec(
        &s,
        "try { await tools.ping({ big: 'x'.repeat(2 << 20) }) } catch (e) { return [e.code, e.message] }",
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    assert!(
        result["value"][1].as_str().unwrap().contains("bytes"),
        "{result}"
    );
}

#[tokio::test]
async fn one_nesting_limit_with_one_clear_error() {
    let (tools, executor) = instant_tool();
    let s = session(shared(), tools, executor);
    for depth in [99, 130, 150, 199, 250] {
        let code = format!(
            "let v = 1; for (let i = 0; i < {depth}; i++) v = [v];\n\
             const out = {{}};\n\
             try {{ await tools.ping({{ v }}); out.input = 'ok' }} catch (e) {{ out.input = e.message }}\n\
             try {{ json(v); out.json = 'ok' }} catch (e) {{ out.json = e.message }}\n\
             return out"
        );
        let result = exec(&s, &code).await;
        assert_eq!(result["status"], "completed", "{depth}: {result}");
        let value = &result["value"];
        if depth < 100 {
            assert_eq!(value["input"], "ok", "{depth}: {result}");
            assert_eq!(value["json"], "ok", "{depth}: {result}");
        } else {
            for key in ["input", "json"] {
                let message = value[key].as_str().unwrap();
                assert!(
                    message.contains("nests deeper than 100 levels"),
                    "{depth} {key}: {message}"
                );
            }
        }
        let returned = exec(
            &s,
            &format!("let v = 1; for (let i = 0; i < {depth}; i++) v = [v]; return v"),
        )
        .await;
        if depth < 100 {
            assert_eq!(returned["status"], "completed", "{depth}: {returned}");
        } else {
            assert!(
                returned["error"]
                    .as_str()
                    .unwrap()
                    .contains("nests deeper than 100 levels"),
                "{returned}"
            );
            assert_ne!(returned["code"], "internal_error", "{returned}");
        }
    }
}

#[tokio::test]
async fn lone_surrogates_become_replacement_characters() {
    let tools = vec![tool(ToolSource::Plugin, "p", "echo", "echoes")];
    let executor = Scripted::default().with("plugin:p:echo", Behaviour::Echo);
    let s = session(shared(), tools, executor);
    let result = exec(
        &s,
        "const cut = 'ab😀cd'.slice(0, 3); text(cut); json({ cut }); const back = await tools.echo({ cut }); return [cut, back.cut]",
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], json!(["ab\u{fffd}", "ab\u{fffd}"]));
    assert_eq!(result["output"][0]["text"], "ab\u{fffd}", "{result}");
    assert_eq!(
        result["output"][1]["value"]["cut"], "ab\u{fffd}",
        "{result}"
    );
}

#[tokio::test]
async fn a_nul_byte_in_the_source_is_invalid_input() {
    let result = run("return 1;\u{0}", "javascript").await;
    assert_failed(&result, Some("invalid_input"), "NUL");
}

/// `n` execs of one session, each awaiting a tool that answers when the
/// gate opens: the gate, the session and the execs' results to come.
#[allow(clippy::type_complexity, reason = "a test helper's tuple")]
fn cells_awaiting_a_gate(
    runtime: &codemode_runtime::CodeModeRuntime,
    n: usize,
) -> (
    Arc<tokio::sync::Semaphore>,
    Arc<codemode_runtime::CodeModeSession>,
    Vec<tokio::task::JoinHandle<Value>>,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let tools = vec![tool(ToolSource::Plugin, "p", "slow", "waits for a gate")];
    let s = Arc::new(session(
        runtime,
        tools,
        Scripted::default().with("plugin:p:slow", Behaviour::Gate(Arc::clone(&gate))),
    ));
    let hogs = (0..n)
        .map(|_| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                s.exec(&json!({ "code": "return await tools.slow({})" }))
                    .await
                    .to_json()
            })
        })
        .collect();
    (gate, s, hogs)
}

#[tokio::test]
async fn one_session_cannot_take_every_live_vm() {
    let options = RuntimeOptions {
        max_live_vms_per_scope: 4,
        vm_queue_timeout: Duration::from_millis(200),
        ..RuntimeOptions::default()
    };
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 3000}}}",
        options,
    );
    // Many execs of one session awaiting a slow tool...
    let (gate, _greedy, hogs) = cells_awaiting_a_gate(&runtime, 12);
    while runtime.live_vms() < 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ...leave room for another session.
    let other = session(&runtime, Vec::new(), Scripted::default());
    let result = exec(&other, "return 1").await;
    assert_eq!(result["value"], 1, "{result}");
    let mut refused = 0;
    for hog in hogs {
        let result = hog.await.unwrap();
        if result["code"] == "runtime_busy" {
            assert!(
                result["error"]
                    .as_str()
                    .unwrap()
                    .contains("maxLiveVmsPerSession"),
                "{result}"
            );
            refused += 1;
        }
    }
    assert!(refused >= 4, "refused {refused}");
    gate.add_permits(100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_waiting_on_slow_tools_give_their_vms_to_another_sessions_cell() {
    // Every live VM of the process taken by cells awaiting a slow tool.
    let options = RuntimeOptions {
        sandbox: codemode_sandbox::SandboxConfig {
            max_live_vms: 2,
            ..codemode_sandbox::SandboxConfig::default()
        },
        vm_queue_timeout: Duration::from_secs(2),
        ..RuntimeOptions::default()
    };
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 20000}}}",
        options,
    );
    let (gate, _slow, hogs) = cells_awaiting_a_gate(&runtime, 2);
    // The slow cells park: their VMs are free while their calls run (a
    // cell counts as parked from its ticket; its VM goes once its
    // snapshot is taken, just after).
    until(|| runtime.parked_cells() == 2 && runtime.live_vms() == 0).await;
    // Another session's quick cell gets a VM at once (before cells parked,
    // it queued 2 s and failed runtime_busy while they held theirs 20 s).
    let other = session(&runtime, Vec::new(), Scripted::default());
    let started = Instant::now();
    let result = exec(&other, "return 1").await;
    assert_eq!(result["value"], 1, "{result}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The slow cells resume in their own execs when their calls answer.
    gate.add_permits(2);
    for hog in hogs {
        let result = hog.await.unwrap();
        assert_eq!(result["status"], "completed", "{result}");
        assert_eq!(result["value"], json!({}), "{result}");
    }
    assert_eq!((runtime.parked_cells(), runtime.live_vms()), (0, 0));
}

/// Polls `done` every few milliseconds for up to 20 s.
async fn until(done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < until, "never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_more_cells_than_vms_await_slow_tools_at_once_and_complete() {
    // 2 live VMs, 40 cells in 20 sessions, every cell awaiting a slow call
    // and printing around it.
    let options = RuntimeOptions {
        sandbox: codemode_sandbox::SandboxConfig {
            max_live_vms: 2,
            ..codemode_sandbox::SandboxConfig::default()
        },
        vm_queue_timeout: Duration::from_secs(10),
        ..RuntimeOptions::default()
    };
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 30000}}}",
        options,
    );
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let scripted = Scripted::default().with("plugin:p:slow", Behaviour::Gate(Arc::clone(&gate)));
    let tools = vec![tool(ToolSource::Plugin, "p", "slow", "waits for a gate")];
    let mut cells = Vec::new();
    for s in 0..20 {
        let session = Arc::new(session(&runtime, tools.clone(), scripted.clone()));
        for c in 0..2 {
            let session = Arc::clone(&session);
            cells.push(tokio::spawn(async move {
                let code = format!(
                    "text('before {s}.{c}'); const r = await tools.slow({{ n: {} }}); text('after'); return r.n",
                    s * 2 + c
                );
                session.exec(&json!({ "code": code })).await.to_json()
            }));
        }
    }
    // All 40 wait at once on 2 VMs: their calls are in flight together.
    until(|| runtime.parked_cells() == 40).await;
    assert_eq!(scripted.calls.lock().unwrap().len(), 40);
    gate.add_permits(40);
    for (n, cell) in cells.into_iter().enumerate() {
        let result = cell.await.unwrap();
        assert_eq!(result["status"], "completed", "{result}");
        assert_eq!(result["value"], n, "{result}");
        // What the cell printed before it parked is kept.
        let printed: Vec<_> = result["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["text"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(printed.len(), 2, "{result}");
        assert!(printed[0].starts_with("before"), "{result}");
        assert_eq!(printed[1], "after", "{result}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_cell_at_its_deadline_waits_and_its_result_is_kept() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 1500}}}",
        RuntimeOptions::default(),
    );
    let (gate, slow, mut hogs) = cells_awaiting_a_gate(&runtime, 1);
    until(|| runtime.parked_cells() == 1).await;
    let waiting = hogs.pop().unwrap().await.unwrap();
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    assert_eq!(waiting["reason"], "pending_tools", "{waiting}");
    assert_eq!(runtime.parked_cells(), 0);
    gate.add_permits(1);
    let done = wait(&slow, &waiting["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_parked_cell_cancels_its_calls() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 20000}}}",
        RuntimeOptions::default(),
    );
    let (_gate, slow, mut hogs) = cells_awaiting_a_gate(&runtime, 1);
    until(|| runtime.parked_cells() == 1).await;
    slow.abort();
    let aborted = hogs.pop().unwrap().await.unwrap();
    assert_eq!(aborted["code"], "aborted", "{aborted}");
    assert_eq!(aborted["telemetry"]["cancelledToolCalls"], 1, "{aborted}");
    assert_eq!(runtime.parked_cells(), 0);
}

#[tokio::test]
async fn suspended_runs_are_bounded_in_bytes() {
    let options = RuntimeOptions {
        max_store_bytes_per_scope: 1 << 20,
        ..RuntimeOptions::default()
    };
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 2000}}}",
        options,
    );
    let s = session(&runtime, Vec::new(), Scripted::default());
    let mut last = Value::Null;
    for _ in 0..50 {
        last = exec(
            &s,
            "globalThis.keep = 'k'.repeat(300000) + Math.random(); await yield_control(); return 1",
        )
        .await;
        if last["status"] == "failed" {
            break;
        }
    }
    assert_failed(&last, Some("snapshot_limit_exceeded"), "per-session share");
    assert!(
        runtime.suspended_bytes() <= 1 << 20,
        "{}",
        runtime.suspended_bytes()
    );
}

#[tokio::test]
async fn expired_runs_release_their_snapshot_and_calls_on_a_timer() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 200, snapshotTtlSeconds: 1}}}",
        RuntimeOptions::default(),
    );
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let tools = vec![tool(ToolSource::Plugin, "p", "slow", "waits for a gate")];
    let executor = Scripted::default().with("plugin:p:slow", Behaviour::Gate(Arc::clone(&gate)));
    let s = session(&runtime, tools, executor.clone());
    let result = exec(&s, "return await tools.slow({})").await;
    assert_eq!(result["status"], "waiting", "{result}");
    assert!(runtime.suspended_bytes() > 0);
    // No store access: only the timer can release it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while executor.cancelled.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the expired run's call was never cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(runtime.suspended_bytes(), 0);
    let late = wait(&s, &result["runId"]).await;
    assert_eq!(late["code"], "snapshot_expired", "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_stops_a_busy_cell_within_milliseconds() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 20000}}}",
        RuntimeOptions::default(),
    );
    let s = Arc::new(session(&runtime, Vec::new(), Scripted::default()));
    let canceller = s.canceller();
    let busy = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            s.exec_call(
                "call-busy",
                &json!({ "code": "for (;;) {}" }),
                codemode_runtime::CallOptions::default(),
            )
            .await
            .to_json()
        })
    };
    while runtime.live_vms() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    assert!(canceller.cancel_call("call-busy"));
    let result = busy.await.unwrap();
    assert_eq!(result["code"], "aborted", "{result}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // The session goes on.
    assert_eq!(exec(&s, "return 3").await["value"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_a_loop_of_instant_calls_and_starts_no_more() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 20000}}}",
        RuntimeOptions::default(),
    );
    let (tools, executor) = instant_tool();
    let s = Arc::new(session(&runtime, tools, executor.clone()));
    let looping = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { exec(&s, "for (;;) await tools.ping({})").await })
    };
    while executor.call_count() < 100 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let started = Instant::now();
    s.abort();
    let result = looping.await.unwrap();
    assert_eq!(result["code"], "aborted", "{result}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    let after = executor.call_count();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        executor.call_count(),
        after,
        "a nested call started after abort"
    );
}

#[tokio::test]
async fn a_cancelled_call_that_has_not_started_never_runs() {
    let s = session(shared(), Vec::new(), Scripted::default());
    s.canceller().cancel_call("early");
    let result = s
        .exec_call(
            "early",
            &json!({ "code": "return 1" }),
            codemode_runtime::CallOptions::default(),
        )
        .await
        .to_json();
    assert_eq!(result["code"], "aborted", "{result}");
    assert_eq!(exec(&s, "return 1").await["value"], 1);
}

#[tokio::test]
async fn async_recursion_that_exhausts_memory_is_a_memory_failure() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 5000, memoryLimitBytes: 8388608}}}",
        RuntimeOptions::default(),
    );
    let s = session(&runtime, Vec::new(), Scripted::default());
    let result = exec(
        &s,
        "async function f(n) { await null; return [n, await f(n + 1)]; } return await f(0)",
    )
    .await;
    assert_eq!(result["code"], "memory_limit_exceeded", "{result}");
}

/// A server whose schemas fan out through `$ref`s, and enough tools to make
/// its declaration file larger than one read.
fn big_mcp_session() -> codemode_runtime::CodeModeSession {
    let mut defs = serde_json::Map::new();
    for level in 0..8 {
        let next = format!("#/$defs/l{}", level + 1);
        let properties: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("p{i}"), json!({ "$ref": next })))
            .collect();
        defs.insert(
            format!("l{level}"),
            json!({ "type": "object", "properties": properties }),
        );
    }
    defs.insert("l8".into(), json!({ "type": "string" }));
    let fan = json!({ "type": "object", "properties": { "root": { "$ref": "#/$defs/l0" } }, "$defs": defs });
    let mut tools = vec![
        codemode_runtime::ToolDefinition::new(ToolSource::Mcp, "big", "fan_out")
            .with_parameters(fan),
    ];
    for i in 0..2_000 {
        tools.push(
            codemode_runtime::ToolDefinition::new(ToolSource::Mcp, "big", &format!("tool_{i}"))
                .with_description(&"A tool with a long description. ".repeat(8))
                .with_parameters(json!({ "type": "object", "properties": { "q": { "type": "string", "description": "what to look for" } }, "required": ["q"] })),
        );
    }
    let catalog = codemode_runtime::Catalog::build_with_mcp_servers(
        tools,
        &codemode_runtime::ToolPolicy::default(),
        &[codemode_runtime::McpServerInfo::new("big")],
    )
    .unwrap();
    let run = format!("run-{}", codemode_sandbox::random_u64());
    shared().session(
        common::context("agent", "big", &run),
        catalog,
        Arc::new(Scripted::default()),
    )
}

#[tokio::test]
async fn declarations_have_a_budget_and_large_files_are_read_in_pieces() {
    let s = big_mcp_session();
    let started = Instant::now();
    let result = exec(
        &s,
        "const files = await API.list('mcp');\n\
         const big = files.find(f => f.path === 'mcp/big.d.ts');\n\
         let whole = null; try { await API.read(big.path) } catch (e) { whole = e.message }\n\
         let text = ''; for (let offset = 0; offset < big.bytes; offset += 200000) text += await API.read(big.path, { offset, length: 200000 });\n\
         const header = await MCP.big.$api('fan_out');\n\
         return { bytes: big.bytes, read: text.length, whole, fan: header.declarations.includes('too large to render'), tail: text.slice(-3) }",
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    let value = &result["value"];
    assert!(value["bytes"].as_u64().unwrap() > 256 * 1024, "{value}");
    assert_eq!(value["read"], value["bytes"], "{value}");
    assert!(
        value["whole"].as_str().unwrap().contains("in pieces"),
        "{value}"
    );
    assert_eq!(value["fan"], true, "{value}");
    // 40 properties per level fan out past the budget: the budget ends it.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_cell_finishing_at_its_deadline_keeps_its_real_status() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 1000}}}",
        RuntimeOptions::default(),
    );
    let s = session(&runtime, Vec::new(), Scripted::default());
    // Finish a little before, at, and after the deadline: each ends as
    // completed or timeout, never as an internal error.
    for margin in [6, 4, 3, 2, 1, 0] {
        let code = format!(
            "const end = Date.now() + 1000 - {margin} - 2; while (Date.now() < end) {{}} return 'done'"
        );
        let result = exec(&s, &code).await;
        assert!(
            result["status"] == "completed" || result["code"] == "timeout",
            "margin {margin}: {result}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_session_while_others_end_does_not_deadlock() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true}}}",
        RuntimeOptions::default(),
    );
    let stress = {
        let runtime = runtime.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..2_000 {
                let context = common::context("agent", &format!("s{i}"), "r");
                let s = runtime.session(
                    context,
                    codemode_runtime::Catalog::empty(),
                    Arc::new(Scripted::default()),
                );
                runtime.abort_session("someone-else");
                drop(s);
            }
        })
    };
    let aborts = {
        let runtime = runtime.clone();
        tokio::task::spawn_blocking(move || {
            for _ in 0..2_000 {
                runtime.abort_session("nobody");
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        stress.await.unwrap();
        aborts.await.unwrap();
    })
    .await
    .expect("abort_session and session drops deadlocked");
}

/// A cell goes on after a result in its own task, on an async worker (no
/// thread hand-off per call); one that then runs long must give the
/// worker up. Two cells spin after their call answered, one in guest
/// code, one in host requests it makes, on a runtime of one worker:
/// timers still fire and tasks still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn cells_spinning_after_a_result_leave_the_async_worker() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 3000}}}",
        RuntimeOptions::default(),
    );
    let tools = vec![tool(ToolSource::Plugin, "p", "slow", "answers after 20 ms")];
    let scripted = Scripted::default().with(
        "plugin:p:slow",
        Behaviour::Delay(Duration::from_millis(20), json!({})),
    );
    let s = Arc::new(session(&runtime, tools, scripted.clone()));
    let spinners: Vec<_> = [
        "await tools.slow({}); for (;;) {}",
        "await tools.slow({}); for (;;) { await tools.search('slow'); }",
    ]
    .into_iter()
    .map(|code| {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.exec(&json!({ "code": code })).await.to_json() })
    })
    .collect();
    until(|| scripted.finished.load(std::sync::atomic::Ordering::SeqCst) == 2).await;
    // Their deadline is seconds away.
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let spawned = Instant::now();
    tokio::spawn(async {}).await.unwrap();
    let (slept, ran) = (spawned - started, spawned.elapsed());
    assert!(
        slept < Duration::from_millis(500) && ran < Duration::from_millis(500),
        "a 50 ms timer took {slept:?} and a task waited {ran:?} for the worker"
    );
    for spinner in spinners {
        let result = spinner.await.unwrap();
        assert_failed(&result, Some("timeout"), "");
    }
}
