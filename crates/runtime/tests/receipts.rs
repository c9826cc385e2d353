//! Effect receipts: every result lists the nested calls that ended during
//! that exec or wait, with how they ended, so that after a failure the
//! model knows which effects already happened (ids only, never inputs).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::Arc;

use codemode_runtime::{MAX_CALL_RECEIPTS, RuntimeOptions};
use common::{Behaviour, Scripted, eventually, exec, runtime_with, session, tool_at, wait};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

fn tools() -> Vec<codemode_runtime::ToolDefinition> {
    vec![
        tool_at("client:app:write", "Writes"),
        tool_at("client:app:broken", "Always fails"),
        tool_at("client:app:gated", "Answers when the test opens its gate"),
    ]
}

fn executor(gate: &Arc<Semaphore>) -> Scripted {
    Scripted::default()
        .with(
            "client:app:write",
            Behaviour::Value(json!({ "written": true })),
        )
        .with("client:app:broken", Behaviour::Fail("disk full".into()))
        .with("client:app:gated", Behaviour::Gate(Arc::clone(gate)))
}

fn outcomes(result: &Value) -> Vec<(String, String)> {
    result["nestedCalls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    (
                        c["toolId"].as_str().unwrap().to_owned(),
                        c["outcome"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pair(tool: &str, outcome: &str) -> (String, String) {
    (tool.to_owned(), outcome.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cell_lists_the_effects_that_already_happened() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 2000}}}",
        RuntimeOptions::default(),
    );
    let gate = Arc::new(Semaphore::new(0));
    let s = session(&runtime, tools(), executor(&gate));
    let r = exec(
        &s,
        r#"await tools.write({ n: 1 });
           await tools.write({ n: 2 });
           await tools.broken({ n: 3 });
           return "not reached";"#,
    )
    .await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["code"], "nested_tool_failed", "{r}");
    assert_eq!(
        outcomes(&r),
        [
            pair("client:app:write", "ok"),
            pair("client:app:write", "ok"),
            pair("client:app:broken", "failed"),
        ]
    );
    // Ids, never inputs.
    let text = r["nestedCalls"].to_string();
    assert!(!text.contains("\"n\""), "{text}");
    let ids: Vec<&str> = r["nestedCalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|id| !id.is_empty()), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_exec_and_wait_lists_only_what_ended_during_it() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 300}}}",
        RuntimeOptions::default(),
    );
    let gate = Arc::new(Semaphore::new(0));
    let s = session(&runtime, tools(), executor(&gate));
    let r = exec(
        &s,
        r#"await tools.write({});
           const slow = await tools.gated({});
           return slow;"#,
    )
    .await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(outcomes(&r), [pair("client:app:write", "ok")]);
    assert_eq!(r["pendingToolCalls"][0]["toolId"], "client:app:gated");
    gate.add_permits(1);
    let done = wait(&s, &r["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(outcomes(&done), [pair("client:app:gated", "ok")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_still_running_when_the_run_ends_are_unknown_and_aborted_ones_cancelled() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 300}}}",
        RuntimeOptions::default(),
    );
    // The cell fails while a call it never awaited runs.
    let gate = Arc::new(Semaphore::new(0));
    let s = session(&runtime, tools(), executor(&gate));
    let r = exec(
        &s,
        "tools.gated({}); await tools.write({}); throw new Error('stop');",
    )
    .await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(
        outcomes(&r),
        [
            pair("client:app:write", "ok"),
            pair("client:app:gated", "unknown")
        ]
    );

    // An abort while a call runs: cancelled.
    let gate = Arc::new(Semaphore::new(0));
    let scripted = executor(&gate);
    let s = Arc::new(session(&runtime, tools(), scripted.clone()));
    let live = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { exec(&s, "return await tools.gated({})").await })
    };
    eventually("the gated call is in flight", || scripted.call_count() == 1).await;
    s.abort();
    let r = live.await.unwrap();
    assert_eq!(r["code"], "aborted", "{r}");
    assert_eq!(outcomes(&r), [pair("client:app:gated", "cancelled")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_returned_waits_for_its_unawaited_calls_and_completes_when_they_settle() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 300}}}",
        RuntimeOptions::default(),
    );
    // Fire and forget: the cell returns while the call runs. `completed`
    // means no pending work, so the run waits rather than cancel the call.
    let gate = Arc::new(Semaphore::new(0));
    let scripted = executor(&gate);
    let s = session(&runtime, tools(), scripted.clone());
    let r = exec(
        &s,
        "tools.gated({}).then(v => text('late ' + JSON.stringify(v))); return 1;",
    )
    .await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(r["reason"], "pending_tools", "{r}");
    assert_eq!(
        r["pendingToolCalls"][0]["toolId"], "client:app:gated",
        "{r}"
    );
    assert!(outcomes(&r).is_empty(), "nothing was cancelled: {r}");
    gate.add_permits(1);
    let done = wait(&s, &r["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"], 1, "the value the cell returned: {done}");
    assert_eq!(outcomes(&done), [pair("client:app:gated", "ok")]);
    assert!(
        done["output"].to_string().contains("late"),
        "the call's continuation ran before completing: {done}"
    );
    assert_eq!(scripted.call_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_are_bounded_and_the_rest_counted() {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 5000}}}",
        RuntimeOptions::default(),
    );
    let gate = Arc::new(Semaphore::new(0));
    let s = session(&runtime, tools(), executor(&gate));
    let r = exec(
        &s,
        "for (let i = 0; i < 200; i++) await tools.write({}); return 1;",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["nestedCalls"].as_array().unwrap().len(),
        MAX_CALL_RECEIPTS
    );
    assert_eq!(r["nestedCallsOmitted"], 200 - MAX_CALL_RECEIPTS as u64);
    // A cell without nested calls has no receipt fields at all.
    let r = exec(&s, "return 1").await;
    assert!(r.get("nestedCalls").is_none(), "{r}");
    assert!(r.get("nestedCallsOmitted").is_none(), "{r}");
}
