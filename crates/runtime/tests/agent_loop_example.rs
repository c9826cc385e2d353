//! Runs the agent-loop example (`examples/agent_loop.rs`) as a test, so CI
//! (`cargo test`) runs it: activation from a reference-style config, the
//! payload guard on every provider request, `exec`/`wait` driven to the
//! model's final answer, and the trajectory exported with nested calls
//! under their parent `exec`.

#[path = "../examples/agent_loop.rs"]
#[allow(dead_code, reason = "the example's own main is not called here")]
mod agent_loop;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loop_example_runs_to_its_final_answer() {
    let report = match agent_loop::run().await {
        Ok(report) => report,
        Err(e) => panic!("the agent-loop example failed: {e}"),
    };
    assert_eq!(report.requests, 3, "exec, wait, final answer");
    assert_eq!(
        report.answer,
        "You picked notes.md; the README is 21 characters long."
    );
    // The export is JSON lines: two control calls, two nested calls.
    assert_eq!(report.trajectory_json_lines.lines().count(), 4);
    let nested = &report.tree["execs"][0]["nested"];
    assert_eq!(nested.as_array().map(Vec::len), Some(2), "{nested}");
}

#[test]
fn the_tree_refuses_a_nested_call_without_its_parent() {
    let orphan = concat!(
        r#"{"type":"nested_tool_call","parentCallId":"toolu_09","callId":"c1","toolId":"openclaw:core:read","status":"ok","inputBytes":2,"resultBytes":2,"durationMs":0.1}"#,
        "\n",
        r#"{"type":"code_mode_call","callId":"toolu_01","tool":"exec","toolKind":"code_mode_exec","status":"completed","durationMs":1.0}"#,
        "\n"
    );
    let err = agent_loop::trajectory_tree(orphan)
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("has no parent exec")),
        "{err:?}"
    );
}
