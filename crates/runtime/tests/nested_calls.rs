//! Nested tool calls: host re-validation of raw bridge input, failures as
//! plain guest errors, `nested_tool_failed`, `maxPendingToolCalls`, real
//! parallelism, auto-drain within one exec, and what the executor receives.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use codemode_runtime::{RuntimeOptions, ToolSource};
use common::{
    Behaviour, Scripted, assert_each_contains, exec, runtime_with, session, shared, tool,
};
use serde_json::json;
use tokio::sync::Semaphore;

fn tools() -> Vec<codemode_runtime::ToolDefinition> {
    vec![
        tool(ToolSource::Openclaw, "core", "double", "Doubles n"),
        tool(ToolSource::Openclaw, "core", "echo", "Echoes its input"),
        tool(ToolSource::Plugin, "flaky", "broken", "Always fails"),
        tool(ToolSource::Plugin, "flaky", "panics", "Panics"),
        tool(ToolSource::Client, "app", "slow", "Takes 30 ms"),
        tool(ToolSource::Client, "app", "gated", "Waits for the test"),
    ]
}

fn executor() -> Scripted {
    Scripted::default()
        .with("openclaw:core:double", Behaviour::Double)
        .with("openclaw:core:echo", Behaviour::Echo)
        .with(
            "plugin:flaky:broken",
            Behaviour::Fail("upstream said 503".into()),
        )
        .with("plugin:flaky:panics", Behaviour::Panic)
        .with(
            "client:app:slow",
            Behaviour::Delay(Duration::from_millis(30), json!("slow done")),
        )
}

#[tokio::test]
async fn fifty_awaited_fast_calls_complete_in_one_exec() {
    let executor = executor();
    let s = session(shared(), tools(), executor.clone());
    let r = exec(
        &s,
        "let sum = 0;\nfor (let i = 0; i < 50; i++) sum += (await tools.double({ n: i })).n;\nreturn sum;",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], 2450);
    let t = &r["telemetry"];
    assert_eq!(t["execCount"], 1);
    assert_eq!(t["waitCount"], 0);
    assert_eq!(t["nestedCallCount"], 50);
    assert_eq!(t["nestedToolIds"], json!(["openclaw:core:double"]));
    assert_eq!(executor.call_count(), 50);
}

#[tokio::test]
async fn slow_calls_that_finish_before_the_deadline_are_drained_in_the_same_exec() {
    let s = session(shared(), tools(), executor());
    let r = exec(
        &s,
        "const out = [];\nfor (let i = 0; i < 5; i++) out.push(await tools.slow());\nreturn out;",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["value"],
        json!([
            "slow done",
            "slow done",
            "slow done",
            "slow done",
            "slow done"
        ])
    );
    assert_eq!(r["telemetry"]["waitCount"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise_all_calls_really_run_in_parallel() {
    let executor = executor();
    let s = session(shared(), tools(), executor.clone());
    let r = exec(
        &s,
        "return await Promise.all([1, 2, 3, 4].map(() => tools.slow()))",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"].as_array().unwrap().len(), 4);
    assert_eq!(
        executor.max_running.load(Ordering::SeqCst),
        4,
        "all four were in flight at once"
    );
}

#[tokio::test]
async fn failures_reach_the_guest_as_plain_catchable_errors() {
    let s = session(shared(), tools(), executor());
    let r = exec(
        &s,
        r#"
        try {
          await tools.broken({});
          return "not thrown";
        } catch (e) {
          return {
            isError: e instanceof Error,
            protoIsError: Object.getPrototypeOf(e) === Error.prototype,
            name: e.name,
            message: e.message,
            code: e.code,
            ownKeys: Object.getOwnPropertyNames(e).sort(),
          };
        }
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let v = &r["value"];
    assert_eq!(v["isError"], true);
    assert_eq!(v["protoIsError"], true);
    assert_eq!(v["name"], "Error");
    assert_eq!(
        v["message"],
        "tool plugin:flaky:broken failed: upstream said 503"
    );
    assert_eq!(v["code"], "nested_tool_failed");
    // No host stack or objects: only what QuickJS itself puts on an Error.
    for key in v["ownKeys"].as_array().unwrap() {
        assert!(
            ["code", "message", "stack"].contains(&key.as_str().unwrap()),
            "{v}"
        );
    }
}

#[tokio::test]
async fn an_uncaught_nested_failure_fails_the_cell_with_nested_tool_failed() {
    let s = session(shared(), tools(), executor());
    let r = exec(
        &s,
        "text('before');\nawait tools.call('plugin:flaky:broken', {});\nreturn 1;",
    )
    .await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["code"], "nested_tool_failed");
    assert!(
        r["error"].as_str().unwrap().contains("upstream said 503"),
        "{r}"
    );
    assert_eq!(r["output"], json!([{"type": "text", "text": "before"}]));
    // A cell that throws its own error keeps no code.
    let r = exec(&s, "throw new Error('mine')").await;
    assert!(r.get("code").is_none(), "{r}");
}

#[tokio::test]
async fn a_panicking_executor_is_a_failed_call_not_a_crash() {
    let s = session(shared(), tools(), executor());
    let r = exec(
        &s,
        "try { await tools.panics(); } catch (e) { return e.message; }",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["value"].as_str().unwrap().contains("panicked"), "{r}");
    assert_eq!(
        exec(&s, "return (await tools.double({ n: 2 })).n").await["value"],
        4
    );
}

#[tokio::test]
async fn forged_and_malformed_bridge_input_is_rejected_by_the_host() {
    let executor = executor();
    let s = session(shared(), tools(), executor.clone());
    let r = exec(
        &s,
        r#"
        const err = async (f) => { try { await f(); return "accepted"; } catch (e) { return e.message; } };
        return [
          await err(() => tools.call(42, {})),
          await err(() => tools.call({ id: "openclaw:core:echo" })),
          await err(() => tools.call("openclaw:core:nope", {})),
          await err(() => tools.call("echo", {})),
          await err(() => tools.call("mcp:x:y", {})),
          await err(() => tools.call("exec", {})),
        ];
        "#,
    )
    .await;
    assert_each_contains(
        &r["value"],
        &[
            "id must be a catalog id string",
            "id must be a catalog id string",
            "no tool \"openclaw:core:nope\"",
            "tools.call(\"openclaw:core:echo\", input)",
            "no tool",
            "no tool",
        ],
    );
    assert_eq!(executor.call_count(), 0);
}

#[tokio::test]
async fn inputs_are_json_and_a_missing_input_is_an_empty_object() {
    let executor = executor();
    let s = session(shared(), tools(), executor.clone());
    let r = exec(
        &s,
        "return [await tools.echo(), await tools.echo({ d: new Date(0), m: new Map([['k', 1]]), f() {}, u: undefined, n: NaN })]",
    )
    .await;
    assert_eq!(
        r["value"],
        json!([{}, {"d": "1970-01-01T00:00:00.000Z", "m": {"k": 1}, "n": null}]),
        "{r}"
    );
}

#[tokio::test]
async fn the_executor_gets_the_run_context_parent_call_and_catalog_entry() {
    let executor = executor();
    let s = session(shared(), tools(), executor.clone());
    let r = s
        .exec_call(
            "call_abc",
            &json!({"code": "await tools.echo({ x: 1 }); await tools.echo({ x: 2 }); return 1"}),
            codemode_runtime::CallOptions::default(),
        )
        .await;
    assert_eq!(r.status(), "completed", "{}", r.to_json());
    let calls = executor.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].parent_call_id, "call_abc");
    assert_eq!(calls[0].call_id, "call_abc.1");
    assert_eq!(calls[1].call_id, "call_abc.2");
    assert_eq!(calls[0].tool.id, "openclaw:core:echo");
    assert_eq!(calls[0].input, json!({"x": 1}));
    assert_eq!(calls[0].context.agent_id.as_deref(), Some("agent"));
    assert_eq!(calls[0].context.sender.as_deref(), Some("tester"));
    assert_eq!(calls[0].context.channel.as_deref(), Some("test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_queue_more_than_max_pending_calls_fail_with_too_many_pending_tool_calls() {
    let gate = Arc::new(Semaphore::new(0));
    let executor = executor().with("client:app:gated", Behaviour::Gate(Arc::clone(&gate)));
    // The reference's behaviour: maxQueuedToolCalls 0 fails at the cap.
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 1000, maxPendingToolCalls: 4, maxQueuedToolCalls: 0}}}",
        RuntimeOptions::default(),
    );
    let s = session(&runtime, tools(), executor.clone());
    let release = {
        let gate = Arc::clone(&gate);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            gate.add_permits(100);
        })
    };
    let r = exec(
        &s,
        r#"
        const started = [];
        for (let i = 0; i < 4; i++) started.push(tools.gated({ i }));
        let fifth = null;
        try { await tools.gated({ i: 4 }); } catch (e) { fifth = { message: e.message, code: e.code }; }
        const done = (await Promise.all(started)).map(x => x.i);
        // Once they settled, there is room again.
        const after = (await tools.double({ n: 1 })).n;
        return { done, fifth, after };
        "#,
    )
    .await;
    release.await.unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    let v = &r["value"];
    assert_eq!(v["done"], json!([0, 1, 2, 3]));
    assert_eq!(v["fifth"]["code"], "too_many_pending_tool_calls");
    assert!(
        v["fifth"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 4 (maxPendingToolCalls)"),
        "{v}"
    );
    assert_eq!(v["after"], 2);
    // Uncaught, the same rejection fails the cell with that code.
    let gate2 = Arc::new(Semaphore::new(0));
    let s2 = session(
        &runtime,
        tools(),
        executor
            .clone()
            .with("client:app:gated", Behaviour::Gate(Arc::clone(&gate2))),
    );
    let r = exec(
        &s2,
        "const p = [0,1,2,3,4].map(i => tools.gated({ i }));\nawait p[4];",
    )
    .await;
    gate2.add_permits(100);
    assert_eq!(r["code"], "too_many_pending_tool_calls", "{r}");
}

/// Calls started past `maxPendingToolCalls` wait for a slot instead of
/// failing: at most the cap run at once, the executor is asked in start
/// order, and every call completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_max_pending_queue_and_start_in_order() {
    let gate = Arc::new(Semaphore::new(0));
    let executor = executor().with("client:app:gated", Behaviour::Gate(Arc::clone(&gate)));
    // maxPendingToolCalls is 4 in the shared runtime; the queue is the default.
    let s = session(shared(), tools(), executor.clone());
    let release = {
        let gate = Arc::clone(&gate);
        let executor = executor.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            // Only the first four were handed to the executor.
            let asked = executor.call_count();
            // Then one call at a time finishes.
            for _ in 0..10 {
                gate.add_permits(1);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            asked
        })
    };
    let r = exec(
        &s,
        "const ps = [];\nfor (let i = 0; i < 10; i++) ps.push(tools.gated({ i }));\nreturn (await Promise.all(ps)).map(x => x.i);",
    )
    .await;
    let asked_before_release = release.await.unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], json!([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]));
    assert_eq!(asked_before_release, 4, "the cap held while all were busy");
    assert_eq!(executor.max_running.load(Ordering::SeqCst), 4);
    let order: Vec<i64> = executor
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.input["i"].as_i64().unwrap())
        .collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "start order");
    assert_eq!(r["telemetry"]["nestedCallCount"], 10);
}

/// `Promise.all` over 500 items works as written under the default
/// settings (16 at once, the rest queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise_all_over_five_hundred_calls_completes_by_default() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true}}}",
        RuntimeOptions::default(),
    );
    let executor = executor().with(
        "client:app:slow",
        Behaviour::Delay(Duration::from_millis(1), json!("done")),
    );
    let s = session(&runtime, tools(), executor.clone());
    let r = exec(
        &s,
        "const items = Array.from({ length: 500 }, (_, i) => i);\nconst out = await Promise.all(items.map(i => tools.slow({ i })));\nreturn out.length;",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], 500);
    assert_eq!(r["telemetry"]["nestedCallCount"], 500);
    assert_eq!(executor.call_count(), 500);
    assert!(executor.max_running.load(Ordering::SeqCst) <= 16);
}

/// The queue is bounded: past `maxPendingToolCalls` + `maxQueuedToolCalls`
/// one more call rejects with `too_many_pending_tool_calls` naming both
/// settings; the calls already started still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_bounded_by_max_queued_tool_calls() {
    let gate = Arc::new(Semaphore::new(0));
    let executor = executor().with("client:app:gated", Behaviour::Gate(Arc::clone(&gate)));
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 2000, maxPendingToolCalls: 2, maxQueuedToolCalls: 3}}}",
        RuntimeOptions::default(),
    );
    let s = session(&runtime, tools(), executor.clone());
    let release = {
        let gate = Arc::clone(&gate);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            gate.add_permits(100);
        })
    };
    let r = exec(
        &s,
        r#"
        const started = [];
        for (let i = 0; i < 5; i++) started.push(tools.gated({ i }));
        let sixth = null;
        try { await tools.gated({ i: 5 }); } catch (e) { sixth = { message: e.message, code: e.code }; }
        const done = (await Promise.all(started)).map(x => x.i);
        return { done, sixth };
        "#,
    )
    .await;
    release.await.unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    let v = &r["value"];
    assert_eq!(v["done"], json!([0, 1, 2, 3, 4]));
    assert_eq!(v["sixth"]["code"], "too_many_pending_tool_calls", "{v}");
    let message = v["sixth"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 (maxPendingToolCalls)")
            && message.contains("3 more (maxQueuedToolCalls)"),
        "{message}"
    );
    assert_eq!(executor.max_running.load(Ordering::SeqCst), 2);
}

/// A run that suspends with calls queued keeps them: they start while the
/// VM is suspended as slots free up, and `wait` delivers every result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_calls_go_on_while_the_run_is_suspended() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 200, maxPendingToolCalls: 2}}}",
        RuntimeOptions::default(),
    );
    let executor = executor().with(
        "client:app:slow",
        Behaviour::Delay(Duration::from_millis(60), json!("done")),
    );
    let s = session(&runtime, tools(), executor.clone());
    let r = exec(
        &s,
        "const out = await Promise.all(Array.from({ length: 12 }, (_, i) => tools.slow({ i })));\nreturn out.length;",
    )
    .await;
    assert_eq!(r["status"], "waiting", "{r}");
    let run_id = r["runId"].as_str().unwrap().to_owned();
    // 12 calls, 2 at a time, 60 ms each: about 360 ms of work, most of
    // it after the exec returned.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        executor.call_count(),
        12,
        "queued calls started while suspended"
    );
    let r = s.wait(&json!({ "runId": run_id })).await.to_json();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], 12);
    assert!(executor.max_running.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn results_larger_than_the_bridge_carries_are_refused() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true}}}",
        RuntimeOptions {
            max_tool_result_bytes: 1000,
            ..RuntimeOptions::default()
        },
    );
    let executor = Scripted::default().with(
        "openclaw:core:big",
        Behaviour::Value(json!("x".repeat(2000))),
    );
    let s = session(
        &runtime,
        vec![tool(ToolSource::Openclaw, "core", "big", "")],
        executor,
    );
    let r = exec(
        &s,
        "try { await tools.big(); } catch (e) { return e.message; }",
    )
    .await;
    assert!(
        r["value"]
            .as_str()
            .unwrap()
            .contains("more than the bridge carries (1000 bytes)"),
        "{r}"
    );
}

#[tokio::test]
async fn fire_and_forget_calls_finish_before_the_cell_completes() {
    let executor = executor();
    let s = session(shared(), tools(), executor.clone());
    let r = exec(
        &s,
        "tools.slow().then(v => text('late: ' + v));\nreturn 'returned';",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], "returned");
    assert_eq!(
        r["output"],
        json!([{"type": "text", "text": "late: slow done"}])
    );
    assert_eq!(executor.finished.load(Ordering::SeqCst), 1);
}
