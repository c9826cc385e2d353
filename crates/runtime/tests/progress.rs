//! Progress of an exec/wait for hosts that follow it: nested calls
//! started and finished, a nested call's own progress, and the cell's
//! `progress(value, total?, message?)`; nothing while a run is suspended,
//! and nothing without a sink.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_runtime::{
    CallOptions, NestedCall, ProgressSink, ProgressUpdate, ToolCallError, ToolExecutor, ToolFuture,
    ToolSource,
};
use common::{exec, runtime_with, tool};
use serde_json::json;

#[derive(Default)]
struct Collect(Mutex<Vec<ProgressUpdate>>);

impl ProgressSink for Collect {
    fn report(&self, update: ProgressUpdate) {
        self.0.lock().unwrap().push(update);
    }
}

/// `slow` reports half-way progress, sleeps `ms` from its input, answers.
struct Reporting;

impl ToolExecutor for Reporting {
    fn call(&self, call: NestedCall) -> ToolFuture {
        Box::pin(async move {
            call.progress.report(0.5, Some(1.0), Some("half way"));
            let ms = call.input["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if call.tool.name == "broken" {
                return Err(ToolCallError::new("broken"));
            }
            Ok(json!({ "slept": ms }))
        })
    }
}

fn session() -> codemode_runtime::CodeModeSession {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 400}}}",
        Default::default(),
    );
    let catalog = codemode_runtime::Catalog::build(
        vec![
            tool(ToolSource::Openclaw, "core", "slow", "sleeps"),
            tool(ToolSource::Openclaw, "core", "broken", "fails"),
        ],
        &Default::default(),
    )
    .unwrap();
    runtime.session(
        common::context("agent", "p", "r"),
        catalog,
        Arc::new(Reporting),
    )
}

#[tokio::test]
async fn an_exec_reports_its_calls_their_progress_and_the_cells() {
    let s = session();
    let sink = Arc::new(Collect::default());
    let r = s
        .exec_call(
            "exec_p1",
            &json!({ "code": r#"
                progress(1, 3, "starting");
                await tools.slow({ ms: 1 });
                try { await tools.broken({}); } catch {}
                await progress(3, 3);
                return "done";"# }),
            CallOptions::default().with_progress(sink.clone()),
        )
        .await;
    assert_eq!(r.to_json()["value"], "done", "{}", r.to_json());
    let seen = sink.0.lock().unwrap().clone();
    let kinds: Vec<String> = seen
        .iter()
        .map(|u| match u {
            ProgressUpdate::CallStarted { tool_id, .. } => format!("started {tool_id}"),
            ProgressUpdate::CallFinished { tool_id, ok, .. } => format!("finished {tool_id} {ok}"),
            ProgressUpdate::Call {
                progress,
                total,
                message,
                ..
            } => {
                format!("call {progress}/{total:?} {message:?}")
            }
            ProgressUpdate::Cell {
                value,
                total,
                message,
            } => format!("cell {value}/{total:?} {message:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "cell 1/Some(3.0) Some(\"starting\")",
            "started openclaw:core:slow",
            "call 0.5/Some(1.0) Some(\"half way\")",
            "finished openclaw:core:slow true",
            "started openclaw:core:broken",
            "call 0.5/Some(1.0) Some(\"half way\")",
            "finished openclaw:core:broken false",
            "cell 3/Some(3.0) None",
        ]
    );
}

#[tokio::test]
async fn a_wait_reports_what_happens_while_it_drives_and_nothing_is_kept_between() {
    let s = session();
    let first = Arc::new(Collect::default());
    let r = s
        .exec_call(
            "exec_p2",
            &json!({ "code": "return await tools.slow({ ms: 700 })" }),
            CallOptions::default().with_progress(first.clone()),
        )
        .await
        .to_json();
    assert_eq!(r["status"], "waiting", "{r}");
    assert!(
        matches!(
            first.0.lock().unwrap().last(),
            Some(ProgressUpdate::Call { .. })
        ),
        "the exec saw the start and the call's progress"
    );
    let second = Arc::new(Collect::default());
    let mut r = s
        .wait_call(
            "wait_p2",
            &json!({ "runId": r["runId"] }),
            CallOptions::default().with_progress(second.clone()),
        )
        .await
        .to_json();
    while r["status"] == "waiting" {
        r = s
            .wait_call(
                "wait_p2b",
                &json!({ "runId": r["runId"] }),
                CallOptions::default().with_progress(second.clone()),
            )
            .await
            .to_json();
    }
    assert_eq!(r["value"], json!({ "slept": 700 }));
    let seen = second.0.lock().unwrap().clone();
    assert!(
        matches!(
            seen.as_slice(),
            [ProgressUpdate::CallFinished { ok: true, .. }]
        ),
        "the wait saw the call finish, once: {seen:?}"
    );
    assert_eq!(
        first.0.lock().unwrap().len(),
        2,
        "the exec's sink got nothing after it returned"
    );
}

#[tokio::test]
async fn progress_checks_its_arguments_and_works_without_a_sink() {
    let s = session();
    let r = exec(
        &s,
        r#"
        const bad = [];
        for (const args of [["x"], [NaN], [1, "y"], [Infinity]]) {
          try { await progress(...args); bad.push(null); } catch (e) { bad.push(e.message); }
        }
        await progress(1, 2, "m".repeat(10000));
        return bad;"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    for message in r["value"].as_array().unwrap() {
        assert!(
            message
                .as_str()
                .unwrap()
                .contains("must be a finite number"),
            "{r}"
        );
    }
}
