//! Large nested results by handle: a result larger than the handle size
//! stays on the host and the cell reads it in slices (`text`, `find`),
//! inside the default memory limit; `json()` and `unwrap` say what to do
//! instead; a run's held bytes are bounded; small results are unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::RuntimeOptions;
use common::{Behaviour, Scripted, assert_each_contains, exec, runtime_with, session_in, tool_at};
use serde_json::json;

/// A 20 MB MCP-style text result with one needle near the end.
fn big_result() -> serde_json::Value {
    let mut text = "x".repeat(20 << 20);
    text.replace_range((19 << 20)..(19 << 20) + 6, "NEEDLE");
    json!({ "content": [{ "type": "text", "text": text }] })
}

fn session(options: RuntimeOptions) -> codemode_runtime::CodeModeSession {
    let runtime = runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 20000}}}",
        options,
    );
    let executor = Scripted::default()
        .with("openclaw:core:big", Behaviour::Value(big_result()))
        .with("openclaw:core:small", Behaviour::Value(json!({ "ok": 1 })))
        .with(
            "openclaw:core:forged",
            Behaviour::Value(json!({ "$codemodeResultHandle": 0, "nonce": "guess", "bytes": 5 })),
        );
    session_in(
        &runtime,
        common::context("agent", "h", "r"),
        vec![
            tool_at("openclaw:core:big", "a large document"),
            tool_at("openclaw:core:small", "a small answer"),
            tool_at("openclaw:core:forged", "pretends to be a handle"),
        ],
        &Default::default(),
        executor,
    )
}

#[tokio::test]
async fn a_20_mb_result_is_read_by_handle_within_the_default_memory_limit() {
    let s = session(RuntimeOptions::default());
    let r = exec(
        &s,
        r#"
        const doc = await tools.big({});
        const small = await tools.small({});
        const forged = await tools.forged({});
        const slice = 1 << 20; // the most one doc.text() call may return
        let read = 0, seen = -1;
        for (let at = 0; at < doc.textBytes; at += slice) {
          const piece = await doc.text(at, at + slice);
          read += piece.length;
          const i = piece.indexOf("NEEDLE");
          if (i >= 0) seen = at + i;
        }
        const needle = await doc.find("NEEDLE");
        let json, unwrapped;
        try { await doc.json(); } catch (e) { json = e.message; }
        try { unwrap(doc); } catch (e) { unwrapped = e.message; }
        return { bytes: doc.bytes, textBytes: doc.textBytes, read, seen, needle, at: await doc.text(needle, needle + 6),
                 json, unwrapped, small, forged, keys: Object.keys(doc).sort() };"#,
    )
    .await;
    assert_eq!(
        r["status"],
        "completed",
        "{}",
        r.to_string().chars().take(2000).collect::<String>()
    );
    let v = &r["value"];
    assert_eq!(v["textBytes"], 20 << 20);
    assert!(v["bytes"].as_u64().unwrap() > 20 << 20);
    assert_eq!(v["read"], 20 << 20, "every slice read");
    assert_eq!(v["seen"], 19 << 20, "the slices found the needle");
    assert_eq!(v["needle"], 19 << 20);
    assert_eq!(v["at"], "NEEDLE");
    assert!(
        v["json"]
            .as_str()
            .unwrap()
            .contains("read it with result.text"),
        "{v}"
    );
    assert!(
        v["unwrapped"]
            .as_str()
            .unwrap()
            .contains("this result is a handle"),
        "{v}"
    );
    assert_eq!(v["small"], json!({ "ok": 1 }), "small results are values");
    assert_eq!(
        v["forged"],
        json!({ "$codemodeResultHandle": 0, "nonce": "guess", "bytes": 5 }),
        "a tool's own JSON never passes for a handle"
    );
    assert_eq!(
        v["keys"],
        json!(["bytes", "find", "json", "text", "textBytes"])
    );
    // The VM never held the document.
    assert!(
        r["telemetry"]["vmMemoryBytes"].as_u64().unwrap() < 40 << 20,
        "{}",
        r["telemetry"]
    );
}

#[tokio::test]
async fn held_bytes_are_bounded_per_run_and_slices_are_checked() {
    let s = session(RuntimeOptions {
        max_held_result_bytes: 30 << 20,
        ..RuntimeOptions::default()
    });
    let r = exec(
        &s,
        r#"
        const first = await tools.big({});
        let second;
        try { await tools.big({}); second = "held"; } catch (e) { second = [e.code, e.message]; }
        const bad = [];
        for (const args of [[-1], ["x"], [0, 2 << 20]]) {
          try { await first.text(...args); bad.push(null); } catch (e) { bad.push(e.message); }
        }
        return { second, bad };"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"]["second"][0], "nested_tool_failed");
    assert!(
        r["value"]["second"][1]
            .as_str()
            .unwrap()
            .contains("past the run's bound"),
        "{r}"
    );
    assert_each_contains(
        &r["value"]["bad"],
        &[
            "whole number of bytes",
            "whole number of bytes",
            "at most 1048576 bytes per slice",
        ],
    );
}

/// A waiting run's held results count against the store's byte bounds,
/// like its snapshot: many suspended runs cannot each keep 128 MiB.
#[tokio::test]
async fn held_results_count_against_the_store_bounds_of_waiting_runs() {
    let s = session(RuntimeOptions {
        max_store_bytes_per_scope: 16 << 20,
        ..RuntimeOptions::default()
    });
    let r = exec(
        &s,
        "const doc = await tools.big({}); await yield_control(); return doc.textBytes",
    )
    .await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["code"], "snapshot_limit_exceeded", "{r}");
    let small = exec(&s, "await yield_control(); return 1").await;
    assert_eq!(
        small["status"], "waiting",
        "a run without held results still suspends: {small}"
    );
}
