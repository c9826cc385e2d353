//! The exec/wait contract end to end through the runtime: result shapes,
//! error codes, the run store, and concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use codemode_runtime::{CodeModeConfig, CodeModeRuntime, RuntimeOptions};
use serde_json::{Value, json};

fn runtime_with(config: &str, max_suspended_runs: usize) -> CodeModeRuntime {
    let (config, _) = CodeModeConfig::from_json5(config).unwrap();
    CodeModeRuntime::with_options(
        config,
        RuntimeOptions {
            max_suspended_runs,
            ..RuntimeOptions::default()
        },
    )
    .expect("runtime starts")
}

fn runtime() -> &'static CodeModeRuntime {
    static RUNTIME: OnceLock<CodeModeRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| runtime_with("{tools:{codeMode:{enabled:true, timeoutMs: 2000, memoryLimitBytes: 16777216, maxOutputBytes: 4096}}}", 64))
}

async fn exec(code: &str) -> Value {
    runtime().exec(&json!({ "code": code })).await.to_json()
}

#[tokio::test]
async fn completed_results_use_the_contract_field_names() {
    let r = exec("text('hi'); json([1]); return { ok: true }").await;
    assert_eq!(r["status"], "completed");
    assert_eq!(r["value"], json!({"ok": true}));
    assert_eq!(
        r["output"],
        json!([{"type": "text", "text": "hi"}, {"type": "json", "value": [1]}])
    );
    assert_eq!(r["telemetry"]["execCount"], 1);
    assert_eq!(r["telemetry"]["language"], "javascript");
    assert!(r["telemetry"]["durationMs"].as_f64().unwrap() > 0.0);
    let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
    for key in keys {
        assert!(
            ["status", "value", "output", "telemetry"].contains(&key.as_str()),
            "unexpected field {key}"
        );
    }
}

#[tokio::test]
async fn guest_exceptions_fail_with_name_message_and_line() {
    let r = exec("const a = 1;\nundefinedFunction(a);").await;
    assert_eq!(r["status"], "failed");
    let error = r["error"].as_str().unwrap();
    assert!(error.starts_with("ReferenceError: "), "{error}");
    assert!(error.contains("line 2"), "{error}");
    assert!(
        r.get("code").is_none(),
        "a guest exception has no error code: {r}"
    );
}

#[tokio::test]
async fn each_limit_has_its_code() {
    let cases = [
        ("while (true) {}", "timeout"),
        // Only the host's answers keep it busy: out of time, not waiting
        // for tools (a `wait` would repeat it forever).
        ("while (true) await tools.search('x')", "timeout"),
        (
            "for (;;) await ALL_TOOLS.length + (await tools.search('y')).length",
            "timeout",
        ),
        (
            "const a = []; while (true) a.push('x'.repeat(1 << 20) + Math.random())",
            "memory_limit_exceeded",
        ),
        ("for (;;) text('spam spam spam')", "output_limit_exceeded"),
        ("return 'v'.repeat(10000)", "output_limit_exceeded"),
    ];
    for (code, expected) in cases {
        let r = exec(code).await;
        assert_eq!(r["status"], "failed", "{code}");
        assert_eq!(r["code"], expected, "{code}: {r}");
        assert_eq!(r["telemetry"]["limitFailure"], expected, "{code}");
    }
    let r = exec("for (let i = 0; ; i++) text('line ' + i)").await;
    assert!(
        !r["output"].as_array().unwrap().is_empty(),
        "output before the limit is kept"
    );
}

#[tokio::test]
async fn stack_overflow_and_never_settling_cells_fail_clearly() {
    let r = exec("function f() { return f() } return f()").await;
    assert_eq!(r["status"], "failed");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("Maximum call stack size exceeded")
    );
    let r = exec("await new Promise(() => {})").await;
    assert_eq!(r["status"], "failed");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("nothing will ever settle"),
        "{r}"
    );
}

#[tokio::test]
async fn yield_waits_and_wait_resumes() {
    let r = exec("text('first'); const x = 20; await yield_control('checkpoint'); text('second'); return x * 2 + 2").await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(r["reason"], "yield");
    assert_eq!(r["output"], json!([{"type": "text", "text": "first"}]));
    assert_eq!(r["telemetry"]["snapshotEvents"][0]["event"], "suspended");
    let run_id = r["runId"].as_str().unwrap().to_owned();
    let done = runtime().wait(&json!({ "runId": run_id })).await.to_json();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"], 42);
    assert_eq!(done["output"], json!([{"type": "text", "text": "second"}]));
    assert_eq!(done["telemetry"]["waitCount"], 1);
    assert_eq!(done["telemetry"]["snapshotEvents"][0]["event"], "restored");
    // The run is over: a second wait fails cleanly.
    let again = runtime().wait(&json!({ "runId": run_id })).await.to_json();
    assert_eq!(again["status"], "failed");
    assert_eq!(again["code"], "invalid_input");
}

#[tokio::test]
async fn a_run_can_wait_several_times_under_one_run_id() {
    let r = exec("let n = 0; for (let i = 0; i < 3; i++) { await yield_control(); n++ } return n")
        .await;
    let run_id = r["runId"].as_str().unwrap().to_owned();
    let mut last = r;
    for _ in 0..3 {
        last = runtime().wait(&json!({ "runId": run_id })).await.to_json();
        if last["status"] == "waiting" {
            assert_eq!(last["runId"], run_id.as_str());
        }
    }
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["value"], 3);
}

#[tokio::test]
async fn wait_fails_cleanly_for_unknown_and_expired_runs() {
    let r = runtime()
        .wait(&json!({ "runId": "run_nope" }))
        .await
        .to_json();
    assert_eq!(
        (r["status"].as_str(), r["code"].as_str()),
        (Some("failed"), Some("invalid_input"))
    );
    let r = runtime().wait(&json!({})).await.to_json();
    assert_eq!(r["code"], "invalid_input");

    let short = runtime_with(
        "{tools:{codeMode:{enabled:true, snapshotTtlSeconds: 1}}}",
        8,
    );
    let r = short
        .exec(&json!({ "code": "await yield_control(); return 1" }))
        .await
        .to_json();
    let run_id = r["runId"].as_str().unwrap().to_owned();
    // The reaper discards it once its 1 s TTL is over (checked, not slept).
    let until = Instant::now() + Duration::from_secs(10);
    while short.suspended_runs() != 0 {
        assert!(Instant::now() < until, "the run did not expire within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = short.wait(&json!({ "runId": run_id })).await.to_json();
    assert_eq!(r["code"], "snapshot_expired", "{r}");
    assert_eq!(short.suspended_runs(), 0);
}

#[tokio::test]
async fn the_number_of_suspended_runs_is_bounded() {
    let small = runtime_with("{tools:{codeMode:{enabled:true}}}", 2);
    for _ in 0..2 {
        let r = small
            .exec(&json!({ "code": "await yield_control()" }))
            .await
            .to_json();
        assert_eq!(r["status"], "waiting");
    }
    let r = small
        .exec(&json!({ "code": "await yield_control()" }))
        .await
        .to_json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["code"], "snapshot_limit_exceeded");
    assert!(r["error"].as_str().unwrap().contains("limit 2"));
}

#[tokio::test]
async fn exec_input_is_validated() {
    let r = runtime().exec(&json!({ "code": "" })).await.to_json();
    assert_eq!(r["code"], "invalid_input");
    let r = runtime()
        .exec(&json!({ "code": "1", "language": "ruby" }))
        .await
        .to_json();
    assert_eq!(r["code"], "unsupported_language");
    let r = runtime()
        .exec(&json!({ "command": "return 3" }))
        .await
        .to_json();
    assert_eq!(r["value"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_cell_does_not_slow_other_cells() {
    let rt = runtime().clone();
    let runaway = tokio::spawn(async move {
        rt.exec(&json!({ "code": "while (true) {}" }))
            .await
            .to_json()
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let quick: Vec<_> = (0..20)
        .map(|i| {
            let rt = runtime().clone();
            tokio::spawn(async move {
                rt.exec(&json!({ "code": format!("return {i}") }))
                    .await
                    .to_json()
            })
        })
        .collect();
    for (i, handle) in quick.into_iter().enumerate() {
        assert_eq!(handle.await.unwrap()["value"], i);
    }
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(!runaway.is_finished());
    assert_eq!(runaway.await.unwrap()["code"], "timeout");
}
