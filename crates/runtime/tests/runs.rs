//! Suspended runs: `waiting` with pending calls, calls that keep running
//! while a run waits, `wait` delivering them, scoping of runs to their
//! agent/session/run, concurrent resumes, abort, TTL, store bounds, cleanup,
//! telemetry and the trajectory export.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use codemode_runtime::{CodeModeRuntime, RuntimeOptions, ToolPolicy};
use common::{
    Behaviour, Scripted, context, eventually, exec, runtime_with, session, session_in, tool_at,
    wait,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// timeoutMs 200: a gated call makes exec come back `waiting` quickly.
fn quick() -> &'static CodeModeRuntime {
    static RUNTIME: OnceLock<CodeModeRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        runtime_with(
            "{tools:{codeMode:{enabled:true, timeoutMs: 200}}}",
            RuntimeOptions::default(),
        )
    })
}

fn tools() -> Vec<codemode_runtime::ToolDefinition> {
    vec![
        tool_at("client:app:gated", "Answers when the test opens its gate"),
        tool_at("client:app:other_gate", "A second gate"),
        tool_at("openclaw:core:echo", "Echo"),
    ]
}

struct Gates {
    first: Arc<Semaphore>,
    second: Arc<Semaphore>,
    executor: Scripted,
}

fn gates() -> Gates {
    let first = Arc::new(Semaphore::new(0));
    let second = Arc::new(Semaphore::new(0));
    let executor = Scripted::default()
        .with("client:app:gated", Behaviour::Gate(Arc::clone(&first)))
        .with(
            "client:app:other_gate",
            Behaviour::Gate(Arc::clone(&second)),
        )
        .with("openclaw:core:echo", Behaviour::Echo);
    Gates {
        first,
        second,
        executor,
    }
}

const TWO_GATES: &str = r#"
text("start");
const a = tools.gated({ which: "a" });
const b = tools.other_gate({ which: "b" });
const first = await a;
text("after a");
const second = await b;
return [first.which, second.which];
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_calls_suspend_keep_running_and_wait_delivers_them() {
    let g = gates();
    let s = session(quick(), tools(), g.executor.clone());
    let r = s
        .exec_call(
            "call_1",
            &json!({ "code": TWO_GATES }),
            codemode_runtime::CallOptions::default(),
        )
        .await
        .to_json();
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(r["reason"], "pending_tools");
    assert_eq!(r["output"], json!([{"type": "text", "text": "start"}]));
    assert_eq!(
        r["pendingToolCalls"],
        json!([
            {"id": "call_1.1", "toolId": "client:app:gated", "method": "call"},
            {"id": "call_1.2", "toolId": "client:app:other_gate", "method": "call"}
        ])
    );
    assert!(
        r["pendingToolCalls"][0].get("input").is_none(),
        "no raw inputs in pendingToolCalls"
    );
    assert_eq!(r["telemetry"]["snapshotEvents"][0]["event"], "suspended");
    let run_id = r["runId"].clone();
    assert!(quick().suspended_runs() >= 1);

    // The first call finishes while the run is suspended.
    g.first.add_permits(1);
    for _ in 0..100 {
        if g.executor.finished.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        g.executor.finished.load(Ordering::SeqCst),
        1,
        "calls keep running while the run waits"
    );

    // wait delivers it; the second is still pending, so it waits again with the same runId.
    let r = wait(&s, &run_id).await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(r["runId"], run_id);
    assert_eq!(r["output"], json!([{"type": "text", "text": "after a"}]));
    assert_eq!(
        r["pendingToolCalls"],
        json!([{"id": "call_1.2", "toolId": "client:app:other_gate", "method": "call"}])
    );
    assert_eq!(r["telemetry"]["waitCount"], 1);

    // The second finishes during the next wait's drain.
    let opener = {
        let second = Arc::clone(&g.second);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            second.add_permits(1);
        })
    };
    let r = wait(&s, &run_id).await;
    opener.await.unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], json!(["a", "b"]));
    assert_eq!(r["telemetry"]["execCount"], 1);
    assert_eq!(r["telemetry"]["waitCount"], 2);
    assert_eq!(r["telemetry"]["nestedCallCount"], 2);
    let events: Vec<&str> = r["telemetry"]["snapshotEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["restored"]);

    // The run is gone once it completed.
    let r = wait(&s, &run_id).await;
    assert_eq!(r["code"], "invalid_input");
    assert!(
        r["error"].as_str().unwrap().contains("no waiting run"),
        "{r}"
    );
}

#[tokio::test]
async fn yield_control_suspends_with_reason_yield() {
    let s = session(quick(), tools(), Scripted::default());
    let r = exec(
        &s,
        "text('one'); await yield_control('checkpoint'); text('two'); return 2",
    )
    .await;
    assert_eq!(r["status"], "waiting");
    assert_eq!(r["reason"], "yield");
    assert!(r.get("pendingToolCalls").is_none());
    let r = wait(&s, &r["runId"]).await;
    assert_eq!(r["status"], "completed");
    assert_eq!(r["output"], json!([{"type": "text", "text": "two"}]));
}

#[tokio::test]
async fn wait_refuses_unknown_ids_and_runs_of_another_session_or_run() {
    let g = gates();
    let owner = session_in(
        quick(),
        context("agent", "s-owner", "run-1"),
        tools(),
        &ToolPolicy::default(),
        g.executor.clone(),
    );
    let r = exec(&owner, "return await tools.gated({})").await;
    let run_id = r["runId"].clone();
    assert_eq!(r["status"], "waiting");

    let unknown = wait(&owner, &json!("run_00000000000000000000000000000000")).await;
    assert_eq!(unknown["code"], "invalid_input");
    for intruder in [
        context("agent", "s-other", "run-1"),
        context("agent", "s-owner", "run-2"),
        context("other-agent", "s-owner", "run-1"),
    ] {
        let s = session_in(
            quick(),
            intruder,
            tools(),
            &ToolPolicy::default(),
            Scripted::default(),
        );
        let r = wait(&s, &run_id).await;
        assert_eq!(r["status"], "failed");
        assert_eq!(r["code"], "invalid_input");
        assert!(
            r["error"].as_str().unwrap().contains("belongs to another"),
            "{r}"
        );
    }
    // A second session object of the same scope may resume it.
    let same = session_in(
        quick(),
        context("agent", "s-owner", "run-1"),
        tools(),
        &ToolPolicy::default(),
        Scripted::default(),
    );
    g.first.add_permits(1);
    let r = wait(&same, &run_id).await;
    assert_eq!(r["status"], "completed", "{r}");
    drop(owner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumed_by_one_wait_is_busy_for_another() {
    // A first wait that holds the run for a whole second, and a second wait
    // well inside that second: robust on a loaded machine.
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 1000}}}",
        RuntimeOptions::default(),
    );
    let g = gates();
    let s = Arc::new(session(&runtime, tools(), g.executor.clone()));
    let r = exec(&s, "return await tools.gated({})").await;
    let run_id = r["runId"].clone();
    let first = {
        let s = Arc::clone(&s);
        let id = run_id.clone();
        tokio::spawn(async move { wait(&s, &id).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = wait(&s, &run_id).await;
    assert_eq!(second["status"], "failed");
    assert!(
        second["error"]
            .as_str()
            .unwrap()
            .contains("already being resumed"),
        "{second}"
    );
    let first = first.await.unwrap();
    assert_eq!(
        first["status"], "waiting",
        "the first wait is unaffected: {first}"
    );
    g.first.add_permits(1);
    assert_eq!(wait(&s, &run_id).await["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_cancels_calls_discards_the_snapshot_and_later_calls_fail() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 200}}}",
        RuntimeOptions::default(),
    );
    let g = gates();
    let s = session(&runtime, tools(), g.executor.clone());
    let r = exec(&s, "return await tools.gated({})").await;
    assert_eq!(r["status"], "waiting");
    assert_eq!(runtime.suspended_runs(), 1);
    s.abort();
    assert_eq!(runtime.suspended_runs(), 0);
    eventually("the in-flight call is cancelled", || {
        g.executor.cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    let r = wait(&s, &r["runId"]).await;
    assert_eq!(r["code"], "aborted", "{r}");
    let r = exec(&s, "return 1").await;
    assert_eq!(r["code"], "aborted", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_a_live_exec_and_abort_run_ends_one_run() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 5000}}}",
        RuntimeOptions::default(),
    );
    let g = gates();
    let s = Arc::new(session(&runtime, tools(), g.executor.clone()));
    let live = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { exec(&s, "return await tools.gated({})").await })
    };
    // Abort only once the gated call is in flight (robust on a loaded machine).
    for _ in 0..400 {
        if g.executor.call_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(g.executor.call_count(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = std::time::Instant::now();
    runtime.abort_session("s1");
    let r = live.await.unwrap();
    assert_eq!(r["code"], "aborted", "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "abort woke the drive"
    );
    eventually("the in-flight call is cancelled", || {
        g.executor.cancelled.load(Ordering::SeqCst) == 1
    })
    .await;

    let g = gates();
    let s = session(quick(), tools(), g.executor.clone());
    let r = exec(&s, "return await tools.gated({})").await;
    assert!(s.abort_run(r["runId"].as_str().unwrap()));
    assert_eq!(wait(&s, &r["runId"]).await["code"], "aborted");
    assert_eq!(
        exec(&s, "return 'still usable'").await["value"],
        "still usable"
    );
}

#[tokio::test]
async fn snapshots_expire_after_the_ttl() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 200, snapshotTtlSeconds: 1}}}",
        RuntimeOptions::default(),
    );
    let g = gates();
    let s = session(&runtime, tools(), g.executor.clone());
    let r = exec(&s, "return await tools.gated({})").await;
    assert_eq!(r["status"], "waiting");
    // The reaper discards it once its 1 s TTL is over.
    eventually("the run expires", || runtime.suspended_runs() == 0).await;
    let r = wait(&s, &r["runId"]).await;
    assert_eq!(r["code"], "snapshot_expired", "{r}");
    assert_eq!(r["telemetry"]["snapshotEvents"][0]["event"], "expired");
    eventually("expiry cancels the run's calls", || {
        g.executor.cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
}

/// Suspends `held` runs in `s`, then checks the next one is refused with
/// `snapshot_limit_exceeded` and a message containing `why`.
async fn suspend_until_refused(s: &codemode_runtime::CodeModeSession, held: usize, why: &str) {
    for _ in 0..held {
        assert_eq!(
            exec(s, "await yield_control(); return 1").await["status"],
            "waiting"
        );
    }
    let r = exec(s, "await yield_control(); return 1").await;
    assert_eq!(r["code"], "snapshot_limit_exceeded", "{r}");
    assert!(r["error"].as_str().unwrap().contains(why), "{r}");
}

#[tokio::test]
async fn the_store_bounds_live_runs_and_snapshot_bytes() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 100}}}",
        RuntimeOptions {
            max_suspended_runs: 2,
            ..RuntimeOptions::default()
        },
    );
    let s = session(&runtime, tools(), Scripted::default());
    suspend_until_refused(&s, 2, "too many suspended runs").await;
    assert_eq!(runtime.suspended_runs(), 2);

    let shared_store = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 100}}}",
        RuntimeOptions {
            max_suspended_runs: 10,
            max_suspended_runs_per_scope: 2,
            ..RuntimeOptions::default()
        },
    );
    let greedy = session(&shared_store, tools(), Scripted::default());
    suspend_until_refused(&greedy, 2, "limit per session").await;
    let other = session(&shared_store, tools(), Scripted::default());
    assert_eq!(
        exec(&other, "await yield_control(); return 1").await["status"],
        "waiting",
        "another session still gets a slot"
    );

    let small = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 100, maxSnapshotBytes: 1024}}}",
        RuntimeOptions::default(),
    );
    let s = session(&small, tools(), Scripted::default());
    let r = exec(
        &s,
        "globalThis.keep = 'x'.repeat(100000); await yield_control(); return 1",
    )
    .await;
    assert_eq!(r["code"], "snapshot_limit_exceeded", "{r}");
    assert_eq!(small.suspended_runs(), 0);
}

#[tokio::test]
async fn runs_resumable_by_id_count_against_a_bound_owner_without_belonging_to_it() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 100}}}",
        RuntimeOptions::default(),
    );
    // Stateless requests of one client address: each a fresh session.
    let request = || {
        let s = session(&runtime, tools(), Scripted::default()).with_runs_resumable_by_id();
        assert!(s.bind_owner("addr:10.0.0.7", 2));
        s
    };
    let first = exec(&request(), "await yield_control(); return 1").await;
    assert_eq!(first["status"], "waiting", "{first}");
    assert_eq!(
        exec(&request(), "await yield_control(); return 2").await["status"],
        "waiting"
    );
    suspend_until_refused(
        &request(),
        0,
        "`addr:10.0.0.7` already holds 2 suspended runs",
    )
    .await;
    // Another address is not affected.
    let other = session(&runtime, tools(), Scripted::default()).with_runs_resumable_by_id();
    assert!(other.bind_owner("addr:10.0.0.8", 2));
    assert_eq!(
        exec(&other, "await yield_control(); return 3").await["status"],
        "waiting"
    );
    // The id is still the capability: any session resumes the run.
    let stranger = session(&runtime, tools(), Scripted::default());
    let done = wait(&stranger, &first["runId"]).await;
    assert_eq!(done["value"], 1, "{done}");
}

#[tokio::test]
async fn an_owner_bounds_suspended_runs_over_all_its_sessions() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 100}}}",
        RuntimeOptions::default(),
    );
    let first = session(&runtime, tools(), Scripted::default());
    let second = session(&runtime, tools(), Scripted::default());
    assert!(first.bind_owner("alice", 3));
    assert!(second.bind_owner("alice", 3));
    assert!(
        second.bind_owner("alice", 99),
        "the same owner again is fine"
    );
    assert!(
        !second.bind_owner("bob", 3),
        "a session keeps its first owner"
    );
    let mut alices = Vec::new();
    for _ in 0..2 {
        let r = exec(
            &first,
            "await yield_control(); await yield_control(); return 1",
        )
        .await;
        assert_eq!(r["status"], "waiting", "{r}");
        alices.push(r["runId"].clone());
    }
    // The second session has no runs of its own, but its owner holds 2 + 1.
    suspend_until_refused(&second, 1, "`alice` already holds 3 suspended runs").await;
    let bob = session(&runtime, tools(), Scripted::default());
    assert!(bob.bind_owner("bob", 3));
    assert_eq!(
        exec(&bob, "await yield_control(); return 1").await["status"],
        "waiting",
        "another owner is not affected"
    );
    // A run that waits again keeps its place; one that finishes frees it.
    let again = wait(&first, &alices[0]).await;
    assert_eq!(again["status"], "waiting", "{again}");
    assert_eq!(again["runId"], alices[0]);
    let done = wait(&first, &alices[0]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        exec(&second, "await yield_control(); return 1").await["status"],
        "waiting",
        "a finished run frees its owner's slot"
    );
    assert_eq!(runtime.suspended_runs(), 4);
}

#[tokio::test]
async fn ending_the_run_or_shutting_down_discards_its_runs_and_calls() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 100}}}",
        RuntimeOptions::default(),
    );
    let g = gates();
    let s = session(&runtime, tools(), g.executor.clone());
    assert_eq!(
        exec(&s, "return await tools.gated({})").await["status"],
        "waiting"
    );
    assert_eq!(runtime.suspended_runs(), 1);
    drop(s);
    assert_eq!(
        runtime.suspended_runs(),
        0,
        "the last session of a scope ends it"
    );
    eventually("the in-flight call is cancelled", || {
        g.executor.cancelled.load(Ordering::SeqCst) == 1
    })
    .await;

    let g = gates();
    let s = session(&runtime, tools(), g.executor.clone());
    assert_eq!(
        exec(&s, "return await tools.gated({})").await["status"],
        "waiting"
    );
    runtime.shutdown();
    assert_eq!(runtime.suspended_runs(), 0);
    eventually("the in-flight call is cancelled", || {
        g.executor.cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_and_trajectory_record_nested_calls_without_inputs() {
    let g = gates();
    let s = session(quick(), tools(), g.executor.clone());
    let secret = "sk-live-THIS-IS-SECRET";
    let code = format!(
        "await tools.search('echo'); await tools.describe('openclaw:core:echo');\nawait tools.echo({{ token: '{secret}' }});\nreturn (await tools.gated({{ token: '{secret}' }})).token.length;"
    );
    let r = s
        .exec_call(
            "call_9",
            &json!({ "code": code }),
            codemode_runtime::CallOptions::default(),
        )
        .await
        .to_json();
    assert_eq!(r["status"], "waiting", "{r}");
    g.first.add_permits(1);
    let done = s
        .wait_call(
            "call_10",
            &json!({ "runId": r["runId"] }),
            codemode_runtime::CallOptions::default(),
        )
        .await
        .to_json();
    assert_eq!(done["status"], "completed", "{done}");
    let t = &done["telemetry"];
    assert_eq!(t["nestedSearchCount"], 1);
    assert_eq!(t["nestedDescribeCount"], 1);
    assert_eq!(t["nestedCallCount"], 2);
    assert_eq!(
        t["nestedToolIds"],
        json!(["openclaw:core:echo", "client:app:gated"])
    );
    assert_eq!(t["catalogSize"], 3);
    for result in [&r, &done] {
        assert!(!result["telemetry"].to_string().contains(secret));
    }
    let lines = s.trajectory().to_json_lines();
    assert!(!lines.contains(secret), "no inputs in the trajectory");
    let events: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let nested: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "nested_tool_call")
        .collect();
    assert_eq!(nested.len(), 2);
    assert_eq!(nested[0]["parentCallId"], "call_9");
    assert_eq!(nested[0]["toolId"], "openclaw:core:echo");
    assert_eq!(nested[0]["status"], "ok");
    assert_eq!(nested[1]["callId"], "call_9.2");
    assert_eq!(nested[1]["toolId"], "client:app:gated");
    let control: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "code_mode_call")
        .map(|e| (e["tool"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(control, [("exec", "waiting"), ("wait", "completed")]);
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "code_mode_call")
            .nth(1)
            .unwrap()["runId"],
        r["runId"]
    );
}

#[tokio::test]
async fn model_tools_are_exactly_exec_and_wait() {
    let s = session(quick(), tools(), Scripted::default());
    let model = s.model_tools();
    let names: Vec<&str> = model.iter().map(|t| t.name).collect();
    assert_eq!(names, ["exec", "wait"]);
    codemode_runtime::check_model_tools(&names).unwrap();
    assert!(codemode_runtime::check_model_tools(&["exec", "wait", "echo"]).is_err());
    assert!(codemode_runtime::check_model_tools(&["exec"]).is_err());
    let exec_tool = serde_json::to_value(&model[0]).unwrap();
    assert!(
        exec_tool["description"]
            .as_str()
            .unwrap()
            .contains("tools.search")
    );
    assert_eq!(
        exec_tool["inputSchema"]["properties"]["language"]["enum"],
        json!(["javascript", "typescript"])
    );
    assert!(serde_json::to_string(&model).unwrap().len() < 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_arriving_at_the_deadline_is_kept_for_the_next_wait() {
    // The tool answers right at the 200 ms deadline: the result must neither
    // start guest work the deadline kills (a lost run) nor be dropped.
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 200}}}",
        RuntimeOptions::default(),
    );
    let executor = Scripted::default().with(
        "openclaw:core:echo",
        Behaviour::Delay(Duration::from_millis(200), json!("on time")),
    );
    let s = session(&runtime, tools(), executor);
    for _ in 0..5 {
        let mut r = exec(&s, "return await tools.echo({})").await;
        let mut legs = 1;
        while r["status"] == "waiting" && legs < 10 {
            r = wait(&s, &r["runId"]).await;
            legs += 1;
        }
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["value"], "on time");
    }
}

/// A run that waits past a second holds its VM memory packed (about a
/// third), and resumes from it as from the raw copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_waiting_run_holds_packed_memory_and_resumes_from_it() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 200}}}",
        RuntimeOptions::default(),
    );
    let g = gates();
    let s = session(&runtime, tools(), g.executor.clone());
    let r = exec(
        &s,
        r#"const kept = "abc".repeat(5000);
           const got = await tools.gated({ which: "a" });
           return [kept.length, got.which];"#,
    )
    .await;
    assert_eq!(r["status"], "waiting", "{r}");
    let raw = runtime.suspended_bytes();
    assert!(raw > 16 * 1024, "raw snapshot bytes {raw}");
    // The reaper packs it once it has waited a second.
    eventually("the waiting run's memory is packed", || {
        runtime.suspended_bytes() * 2 < raw
    })
    .await;
    g.first.add_permits(1);
    let r = wait(&s, &r["runId"]).await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], json!([15000, "a"]));
    assert_eq!(runtime.suspended_bytes(), 0);
}
