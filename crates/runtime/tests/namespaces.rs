//! Plugin namespaces: registered by trusted code, visible only with the
//! registering plugin's own tools, serialized safely into the guest (a
//! global and `namespaces.<globalName>`), and called as ordinary catalog
//! tool calls (catchable errors, suspend and resume), with their
//! description and prompt in the exec description only when visible.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_runtime::{
    CodeModeRuntime, NamespaceRegistration, RuntimeOptions, ScopeValue, ToolDefinition,
    namespace_tool, namespace_tool_with,
};
use common::{Behaviour, Scripted, exec, runtime_with, session, tool_at, wait};
use serde_json::{Value, json};

fn runtime() -> CodeModeRuntime {
    runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 1000}}}",
        RuntimeOptions::default(),
    )
}

fn github_tools() -> Vec<ToolDefinition> {
    vec![
        tool_at("plugin:github:github_list_issues", "List issues"),
        tool_at("plugin:github:github_update_issue", "Update an issue"),
        tool_at("openclaw:core:read", "Read a file"),
    ]
}

fn executor() -> Scripted {
    Scripted::default()
        .with("plugin:github:github_list_issues", Behaviour::Echo)
        .with("plugin:github:github_update_issue", Behaviour::Echo)
}

fn issues(scope: impl Fn() -> ScopeValue + Send + Sync + 'static) -> NamespaceRegistration {
    NamespaceRegistration {
        id: "github-issues".into(),
        global_name: "Issues".into(),
        description: "GitHub issue helpers for the current repository.".into(),
        required_tool_names: vec!["github_list_issues".into(), "github_update_issue".into()],
        prompt: Some("Use Issues.list(params) and Issues.update(number, patch).".into()),
        create_scope: Arc::new(move |_| scope()),
    }
}

fn github_scope() -> ScopeValue {
    let shared = ScopeValue::Shared(Arc::new(Mutex::new(ScopeValue::Object(vec![(
        "count".into(),
        namespace_tool("github_list_issues"),
    )]))));
    ScopeValue::Object(vec![
        (
            "repository".into(),
            ScopeValue::Json(json!({ "owner": "acme", "name": "app" })),
        ),
        ("list".into(), namespace_tool("github_list_issues")),
        (
            "update".into(),
            namespace_tool_with(
                "github_update_issue",
                |args: &[Value]| json!({ "number": args.first().cloned().unwrap_or(Value::Null), "patch": args.get(1).cloned().unwrap_or(json!({})) }),
            ),
        ),
        ("open".into(), shared.clone()),
        ("again".into(), ScopeValue::Array(vec![shared])),
    ])
}

#[tokio::test]
async fn a_visible_namespace_is_a_global_whose_calls_are_catalog_tool_calls() {
    let runtime = runtime();
    runtime
        .namespaces()
        .register("github", issues(github_scope))
        .unwrap();
    let calls = executor();
    let s = session(&runtime, github_tools(), calls.clone());
    let r = exec(
        &s,
        r#"
        const listed = await Issues.list({ state: "open" });
        const updated = await namespaces.Issues.update(7, { title: "x" });
        const shared = [await Issues.open.count({ a: 1 }), await Issues.again[0].count()];
        return { listed, updated, shared, repo: Issues.repository.name, same: namespaces.Issues === Issues,
                 frozen: Object.isFrozen(Issues), fnName: Issues.update.name };"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["value"],
        json!({
            "listed": { "state": "open" },
            "updated": { "number": 7, "patch": { "title": "x" } },
            "shared": [{ "a": 1 }, {}],
            "repo": "app", "same": true, "frozen": true, "fnName": "update"
        })
    );
    let ids: Vec<String> = calls
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.tool.id.clone())
        .collect();
    assert_eq!(
        ids,
        [
            "plugin:github:github_list_issues",
            "plugin:github:github_update_issue",
            "plugin:github:github_list_issues",
            "plugin:github:github_list_issues"
        ]
    );
    // Counted like any nested call.
    assert_eq!(r["telemetry"]["nestedCallCount"], 4, "{r}");
    // The exec description tells of it.
    let description = &s.model_tools()[0].description;
    assert!(
        description.contains("Issues (also namespaces.Issues): GitHub issue helpers"),
        "{description}"
    );
    assert!(
        description.contains("Use Issues.list(params)"),
        "{description}"
    );
}

#[tokio::test]
async fn another_plugins_same_named_tool_or_a_missing_tool_hides_it() {
    let runtime = runtime();
    runtime
        .namespaces()
        .register("github", issues(github_scope))
        .unwrap();
    let impostor = vec![
        tool_at("plugin:evil:github_list_issues", "List issues"),
        tool_at("plugin:evil:github_update_issue", "Update an issue"),
    ];
    let missing = vec![tool_at("plugin:github:github_list_issues", "List issues")];
    for tools in [impostor, missing] {
        let s = session(&runtime, tools, executor());
        let r = exec(&s, "return [typeof Issues, Object.keys(namespaces)]").await;
        assert_eq!(r["value"], json!(["undefined", []]), "{r}");
        assert!(
            !s.model_tools()[0].description.contains("Issues"),
            "no prompt when hidden"
        );
    }
}

#[tokio::test]
async fn errors_are_catchable_and_slow_calls_resume_with_wait() {
    let runtime = runtime();
    runtime
        .namespaces()
        .register("github", issues(github_scope))
        .unwrap();
    let calls = Scripted::default()
        .with(
            "plugin:github:github_list_issues",
            Behaviour::Fail("rate limited".into()),
        )
        .with(
            "plugin:github:github_update_issue",
            Behaviour::Delay(Duration::from_millis(1500), json!({ "ok": true })),
        );
    let s = session(&runtime, github_tools(), calls);
    let r = exec(
        &s,
        r#"try { await Issues.list({}); return "no"; } catch (e) { return [e.message, e.code]; }"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert!(
        r["value"][0].as_str().unwrap().contains("rate limited"),
        "{r}"
    );
    assert_eq!(r["value"][1], "nested_tool_failed");
    let r = exec(&s, "return await Issues.update(1, {})").await;
    assert_eq!(r["status"], "waiting", "{r}");
    let mut r = wait(&s, &r["runId"]).await;
    while r["status"] == "waiting" {
        r = wait(&s, &r["runId"]).await;
    }
    assert_eq!(r["value"], json!({ "ok": true }), "{r}");
}

#[tokio::test]
async fn unsafe_scopes_are_refused_before_any_cell_code_runs() {
    let cases: Vec<(ScopeValue, &str)> = vec![
        (
            ScopeValue::Object(vec![(
                "raw".into(),
                ScopeValue::HostFunction(Arc::new(|_: &[Value]| json!(1))),
            )]),
            "at `raw`: a raw host function",
        ),
        (
            ScopeValue::Object(vec![(
                "__proto__".into(),
                namespace_tool("github_list_issues"),
            )]),
            "unsafe key `__proto__`",
        ),
        (
            ScopeValue::Object(vec![("constructor".into(), ScopeValue::Json(json!(1)))]),
            "unsafe key `constructor`",
        ),
        (
            ScopeValue::Object(vec![(String::new(), ScopeValue::Json(json!(1)))]),
            "unsafe key ``",
        ),
        (
            ScopeValue::Object(vec![("a.b".into(), ScopeValue::Json(json!(1)))]),
            "unsafe key `a.b`",
        ),
        (
            ScopeValue::Object(vec![("read".into(), namespace_tool("read"))]),
            "calls tool `read`, which is not in requiredToolNames",
        ),
        (
            {
                let node = Arc::new(Mutex::new(ScopeValue::Json(json!(null))));
                *node.lock().unwrap() = ScopeValue::Object(vec![(
                    "self".into(),
                    ScopeValue::Shared(Arc::clone(&node)),
                )]);
                ScopeValue::Object(vec![("loop".into(), ScopeValue::Shared(node))])
            },
            "cyclic",
        ),
    ];
    for (scope, needle) in cases {
        let runtime = runtime();
        let scope = Arc::new(Mutex::new(Some(scope)));
        runtime
            .namespaces()
            .register(
                "github",
                issues(move || {
                    scope
                        .lock()
                        .unwrap()
                        .clone()
                        .unwrap_or(ScopeValue::Json(Value::Null))
                }),
            )
            .unwrap();
        let calls = executor();
        let s = session(&runtime, github_tools(), calls.clone());
        let r = exec(&s, "await tools.call('openclaw:core:read', {}); return 1").await;
        assert_eq!(r["status"], "failed", "{needle}: {r}");
        assert_eq!(r["code"], "internal_error", "{r}");
        let error = r["error"].as_str().unwrap();
        assert!(
            error.contains("namespace `Issues` (plugin `github`)") && error.contains(needle),
            "{needle}: {error}"
        );
        assert_eq!(calls.call_count(), 0, "no cell code ran");
    }
}

#[tokio::test]
async fn registrations_are_checked_and_cleared_per_plugin() {
    let runtime = runtime();
    let registry = runtime.namespaces();
    for (global, needle) in [
        ("tools", "collides"),
        ("namespaces", "collides"),
        ("yield_control", "collides"),
        ("Promise", "collides"),
        ("MCP", "collides"),
        ("not-an-id", "not a JavaScript identifier"),
        ("class", "reserved word"),
    ] {
        let mut registration = issues(github_scope);
        registration.global_name = global.into();
        let err = registry
            .register("github", registration)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{global}: {err}");
    }
    let mut empty = issues(github_scope);
    empty.required_tool_names.clear();
    assert!(registry.register("github", empty).is_err());
    registry.register("github", issues(github_scope)).unwrap();
    // Another plugin cannot take the id or the global.
    let err = registry
        .register("evil", issues(github_scope))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("already registered by plugin `github`"),
        "{err}"
    );
    // The same plugin re-registering replaces its own.
    registry.register("github", issues(github_scope)).unwrap();
    let s = session(&runtime, github_tools(), executor());
    assert_eq!(exec(&s, "return typeof Issues").await["value"], "object");
    // Uninstall: gone from the next run.
    assert_eq!(registry.clear_plugin("evil"), 0);
    assert_eq!(registry.clear_plugin("github"), 1);
    assert_eq!(exec(&s, "return typeof Issues").await["value"], "undefined");
    registry.register("github", issues(github_scope)).unwrap();
    registry.clear_all();
    assert_eq!(exec(&s, "return typeof Issues").await["value"], "undefined");
}

#[tokio::test]
async fn the_scope_factory_sees_the_run() {
    let runtime = runtime();
    let seen = Arc::new(Mutex::new(None));
    let record = Arc::clone(&seen);
    let mut registration = issues(github_scope);
    registration.create_scope = Arc::new(move |ctx| {
        *record.lock().unwrap() = Some((
            ctx.agent_id.clone(),
            ctx.session_id.clone(),
            ctx.run_id.clone(),
            ctx.config.timeout_ms,
            ctx.aborted,
        ));
        ScopeValue::Object(vec![("who".into(), ScopeValue::Json(json!(ctx.agent_id)))])
    });
    runtime
        .namespaces()
        .register("github", registration)
        .unwrap();
    let s = session(&runtime, github_tools(), executor());
    assert_eq!(exec(&s, "return Issues.who").await["value"], "agent");
    let (agent, session_id, run, timeout, aborted) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(
        (agent.as_deref(), session_id.as_deref(), timeout, aborted),
        (Some("agent"), Some("s1"), 1000, false)
    );
    assert!(run.unwrap().starts_with("run-"));
}

#[tokio::test]
async fn a_misspelled_namespace_member_fails_before_the_first_call() {
    let runtime = runtime();
    runtime
        .namespaces()
        .register("github", issues(github_scope))
        .unwrap();
    for (cell, expected) in [
        (
            "await Issues.list({});\nawait Issues.updat(7, {});",
            "line 2, column 7: Issues.updat is not a member of Issues; did you mean Issues.update?",
        ),
        (
            "await Issues.list({});\nawait namespaces.Issues.open.counts({});",
            "Issues.open.counts is not a member of Issues.open; did you mean Issues.open.count?",
        ),
        (
            "await namespaces.Isues.list({});",
            "namespaces.Isues is not a plugin namespace of this run; its namespaces: Issues",
        ),
    ] {
        let calls = executor();
        let s = session(&runtime, github_tools(), calls.clone());
        let r = exec(&s, cell).await;
        assert_eq!(r["code"], "invalid_input", "{cell}: {r}");
        assert!(r["error"].as_str().unwrap().contains(expected), "{r}");
        assert_eq!(calls.call_count(), 0, "{cell}: nothing ran");
    }
    // Not provable: data members, computed members, guarded names.
    let calls = executor();
    let s = session(&runtime, github_tools(), calls.clone());
    let r = exec(
        &s,
        r#"
        const out = [Issues.repository.name];
        if (Issues.close) out.push(await Issues.close(1));
        const which = "list";
        out.push(await Issues[which]({ n: 1 }));
        try { await Issues.again[0].missing(); } catch (e) { out.push(e.constructor.name); }
        return out;"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"], json!(["app", { "n": 1 }, "TypeError"]));
}
