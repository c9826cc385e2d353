//! The hidden catalog as the guest sees it: ids, `ALL_TOOLS`, control
//! tools, the shell `exec`, policy, determinism, isolation between runs,
//! `tools.search` ranking and limits, `tools.describe`, conveniences.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::{ToolPolicy, ToolSource};
use common::{
    Behaviour, Scripted, assert_each_contains, context, exec, session, session_in, shared, tool,
    tool_at,
};
use serde_json::json;

fn mixed_tools() -> Vec<codemode_runtime::ToolDefinition> {
    vec![
        tool_at("openclaw:core:message", "Send a message to a channel"),
        tool_at("openclaw:core:read", "Read a local file"),
        tool_at("openclaw:core:exec", "Run a shell command"),
        tool_at("openclaw:core:wait", "code-mode control tool"),
        tool_at("openclaw:core:tool_search", "control"),
        tool_at("openclaw:core:tool_search_code", "control"),
        tool_at("openclaw:core:tool_describe", "control"),
        tool_at("openclaw:core:tool_call", "control"),
        tool_at("plugin:browser:browser_request", "Fetch a web page"),
        tool_at("plugin:files:read", "Read a file from object storage"),
        tool_at("mcp:github:create_issue", "Create a GitHub issue"),
        tool_at("client:app:select_file", "Let the user pick a file"),
        tool_at("client:app:web-search", "Search the web"),
    ]
}

#[tokio::test]
async fn all_tools_lists_every_effective_non_mcp_tool_with_compact_entries() {
    let s = session(shared(), mixed_tools(), Scripted::default());
    let r = exec(&s, "return ALL_TOOLS").await;
    assert_eq!(r["status"], "completed", "{r}");
    let ids: Vec<&str> = r["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "openclaw:core:exec",
            "openclaw:core:message",
            "openclaw:core:read",
            "plugin:browser:browser_request",
            "plugin:files:read",
            "client:app:select_file",
            "client:app:web-search",
        ]
    );
    let first = &r["value"][0];
    assert_eq!(
        first,
        &json!({"id": "openclaw:core:exec", "name": "exec", "description": "Run a shell command", "source": "openclaw", "sourceName": "core"})
    );
    // Telemetry counts the whole catalog, MCP included.
    assert_eq!(r["telemetry"]["catalogSize"], 8);
    assert_eq!(
        r["telemetry"]["catalogBySource"],
        json!({"openclaw": 3, "plugin": 2, "mcp": 1, "client": 2})
    );
    assert_eq!(r["telemetry"]["visibleTools"], json!(["exec", "wait"]));
}

#[tokio::test]
async fn control_tools_are_never_reachable_and_the_shell_exec_is_an_ordinary_tool() {
    let exec_tools = Scripted::default().with("openclaw:core:exec", Behaviour::Echo);
    let s = session(shared(), mixed_tools(), exec_tools.clone());
    let r = exec(
        &s,
        r#"
        const names = ALL_TOOLS.map(t => t.name);
        const control = ["wait", "tool_search", "tool_search_code", "tool_describe", "tool_call"].filter(n => names.includes(n));
        const viaConvenience = await tools.exec({ command: "ls" });
        const viaId = await tools.call("openclaw:core:exec", { command: "pwd" });
        let waitErr = null;
        try { await tools.call("openclaw:core:wait", {}); } catch (e) { waitErr = e.message; }
        return { control, viaConvenience, viaId, waitErr, hasWait: typeof tools.wait };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let v = &r["value"];
    assert_eq!(v["control"], json!([]));
    assert_eq!(v["viaConvenience"], json!({"command": "ls"}));
    assert_eq!(v["viaId"], json!({"command": "pwd"}));
    assert!(
        v["waitErr"]
            .as_str()
            .unwrap()
            .contains("no tool \"openclaw:core:wait\""),
        "{v}"
    );
    assert_eq!(v["hasWait"], "undefined");
    assert_eq!(exec_tools.call_count(), 2);
}

#[tokio::test]
async fn without_a_shell_tool_tools_exec_does_not_exist() {
    let s = session(
        shared(),
        vec![tool(ToolSource::Openclaw, "core", "read", "")],
        Scripted::default(),
    );
    let r = exec(&s, "return [typeof tools.exec, typeof globalThis.exec, typeof globalThis.wait, Object.keys(tools).sort()]").await;
    assert_eq!(
        r["value"],
        json!([
            "undefined",
            "undefined",
            "undefined",
            ["call", "describe", "read", "search"]
        ]),
        "{r}"
    );
}

#[tokio::test]
async fn denied_tools_are_absent_and_cannot_be_called_by_a_guessed_id() {
    let executor = Scripted::default().with("openclaw:core:exec", Behaviour::Value(json!("ran")));
    let policy = ToolPolicy {
        allow: None,
        deny: vec!["exec".into(), "plugin:files:read".into()],
        ..ToolPolicy::default()
    };
    let s = session_in(
        shared(),
        context("a", "s", "denied"),
        mixed_tools(),
        &policy,
        executor.clone(),
    );
    let r = exec(
        &s,
        r#"
        const ids = ALL_TOOLS.map(t => t.id);
        const errors = [];
        for (const id of ["openclaw:core:exec", "plugin:files:read"]) {
          try { await tools.call(id, {}); errors.push("called " + id); } catch (e) { errors.push(e.message); }
        }
        let described = null;
        try { await tools.describe("openclaw:core:exec"); } catch (e) { described = e.message; }
        return { ids, errors, described, exec: typeof tools.exec, hits: (await tools.search("shell")).length };
        "#,
    )
    .await;
    let v = &r["value"];
    assert!(
        !v["ids"]
            .as_array()
            .unwrap()
            .contains(&json!("openclaw:core:exec")),
        "{v}"
    );
    assert!(
        !v["ids"]
            .as_array()
            .unwrap()
            .contains(&json!("plugin:files:read")),
        "{v}"
    );
    for e in v["errors"].as_array().unwrap() {
        assert!(e.as_str().unwrap().contains("no tool"), "{v}");
    }
    assert!(v["described"].as_str().unwrap().contains("no tool"), "{v}");
    assert_eq!(v["exec"], "undefined");
    assert_eq!(v["hits"], 0);
    assert_eq!(
        executor.call_count(),
        0,
        "a denied tool never reaches the executor"
    );
}

#[tokio::test]
async fn equal_tool_sets_give_equal_ids_whatever_their_order() {
    let mut tools = mixed_tools();
    let one = session(shared(), tools.clone(), Scripted::default());
    tools.reverse();
    let two = session(shared(), tools, Scripted::default());
    let code = "return [ALL_TOOLS, Object.keys(tools)]";
    assert_eq!(
        exec(&one, code).await["value"],
        exec(&two, code).await["value"]
    );
}

#[tokio::test]
async fn runs_never_see_tools_of_another_run_session_or_agent() {
    let a = session_in(
        shared(),
        context("agent-a", "s-a", "r1"),
        vec![tool(ToolSource::Client, "app", "alpha_secret", "")],
        &ToolPolicy::default(),
        Scripted::default().with("client:app:alpha_secret", Behaviour::Value(json!("a"))),
    );
    let b = session_in(
        shared(),
        context("agent-b", "s-b", "r2"),
        vec![tool(ToolSource::Client, "app", "beta", "")],
        &ToolPolicy::default(),
        Scripted::default(),
    );
    let (ra, rb) = tokio::join!(
        exec(&a, "return ALL_TOOLS.map(t => t.id)"),
        exec(
            &b,
            r#"
            let err = null;
            try { await tools.call("client:app:alpha_secret", {}); } catch (e) { err = e.message; }
            return { ids: ALL_TOOLS.map(t => t.id), hits: await tools.search("alpha"), err, conv: typeof tools.alpha_secret };
        "#
        )
    );
    assert_eq!(ra["value"], json!(["client:app:alpha_secret"]));
    assert_eq!(rb["value"]["ids"], json!(["client:app:beta"]));
    assert_eq!(rb["value"]["hits"], json!([]));
    assert_eq!(rb["value"]["conv"], "undefined");
    assert!(rb["value"]["err"].as_str().unwrap().contains("no tool"));
}

#[tokio::test]
async fn all_tools_and_tools_are_frozen() {
    let s = session(shared(), mixed_tools(), Scripted::default());
    let r = exec(
        &s,
        r#"
        "use strict";
        const tries = [];
        const attempt = (f) => { try { f(); tries.push("changed"); } catch (e) { tries.push(e.name); } };
        attempt(() => { ALL_TOOLS.push({ id: "x" }); });
        attempt(() => { ALL_TOOLS[0].id = "openclaw:core:other"; });
        attempt(() => { tools.call = () => 1; });
        attempt(() => { tools.injected = () => 1; });
        attempt(() => { globalThis.tools = {}; });
        return { tries, first: ALL_TOOLS[0].id, n: ALL_TOOLS.length };
        "#,
    )
    .await;
    assert_eq!(
        r["value"]["tries"],
        json!([
            "TypeError",
            "TypeError",
            "TypeError",
            "TypeError",
            "TypeError"
        ]),
        "{r}"
    );
    assert_eq!(r["value"]["first"], "openclaw:core:exec");
    assert_eq!(r["value"]["n"], 7);
}

#[tokio::test]
async fn search_ranks_and_honours_default_and_max_limits() {
    let tools = vec![
        tool(ToolSource::Openclaw, "core", "file", ""),
        tool(ToolSource::Openclaw, "core", "file_read", ""),
        tool(ToolSource::Openclaw, "core", "notes", "mentions a file"),
        tool(ToolSource::Plugin, "file", "zzz", ""),
        tool(ToolSource::Openclaw, "core", "yyy", "").with_label("File picker"),
        tool(ToolSource::Mcp, "fs", "file_mcp", "an MCP file tool"),
    ];
    let s = session(shared(), tools, Scripted::default());
    let r = exec(
        &s,
        r#"
        const ids = (hits) => hits.map(h => h.id);
        return {
          all: ids(await tools.search("FILE", { limit: 10 })),
          byDefault: (await tools.search("file")).length,
          compact: (await tools.search("file_read"))[0],
        };
        "#,
    )
    .await;
    let v = &r["value"];
    assert_eq!(
        v["all"],
        json!([
            "openclaw:core:file",
            "openclaw:core:file_read",
            "plugin:file:zzz",
            "openclaw:core:yyy",
            "openclaw:core:notes"
        ]),
        "{r}"
    );
    assert_eq!(v["byDefault"], 3, "searchDefaultLimit is 3 in this config");
    assert!(
        v["compact"].get("parameters").is_none(),
        "search hits carry no schema"
    );
    assert_eq!(r["telemetry"]["nestedSearchCount"], 3);
}

#[tokio::test]
async fn bad_search_arguments_are_clear_errors() {
    let s = session(shared(), mixed_tools(), Scripted::default());
    let r = exec(
        &s,
        r#"
        const out = [];
        for (const args of [[""], [42], ["x", { limit: 0 }], ["x", { limit: 11 }], ["x", { limit: 2.5 }], ["x", { limit: "3" }], ["x", { limit: NaN }], ["x", { top: 3 }], ["x", 5]]) {
          try { await tools.search(...args); out.push("ok"); } catch (e) { out.push(e.message); }
        }
        return out;
        "#,
    )
    .await;
    let limit = "options.limit must be an integer from 1 to 10 (maxSearchLimit)";
    assert_each_contains(
        &r["value"],
        &[
            "query is empty",
            "query must be a string",
            limit,
            limit,
            limit,
            limit,
            limit,
            "unknown option `top`",
            "options must be an object",
        ],
    );
}

#[tokio::test]
async fn describe_returns_the_schema_suggests_ids_and_names_ambiguity() {
    let s = session(shared(), mixed_tools(), Scripted::default());
    let r = exec(
        &s,
        r#"
        const err = async (f) => { try { await f(); return null; } catch (e) { return e.message; } };
        return {
          byId: await tools.describe("plugin:browser:browser_request"),
          byName: (await tools.describe("select_file")).id,
          typo: await err(() => tools.describe("plugin:browser:browser_requst")),
          ambiguous: await err(() => tools.describe("read")),
          mcp: await err(() => tools.describe("mcp:github:create_issue")),
          notString: await err(() => tools.describe(7)),
        };
        "#,
    )
    .await;
    let v = &r["value"];
    assert_eq!(
        v["byId"]["parameters"],
        json!({"type": "object", "properties": {"n": {"type": "number"}}}),
        "{r}"
    );
    assert_eq!(v["byId"]["source"], "plugin");
    assert_eq!(v["byName"], "client:app:select_file");
    let typo = v["typo"].as_str().unwrap();
    assert!(
        typo.contains("did you mean \"plugin:browser:browser_request\"")
            && typo.contains("tools.search"),
        "{typo}"
    );
    let ambiguous = v["ambiguous"].as_str().unwrap();
    assert!(
        ambiguous.contains("ambiguous")
            && ambiguous.contains("openclaw:core:read")
            && ambiguous.contains("plugin:files:read"),
        "{ambiguous}"
    );
    assert!(v["mcp"].as_str().unwrap().contains("MCP."), "{v}");
    assert!(
        v["notString"].as_str().unwrap().contains("id must be"),
        "{v}"
    );
    assert_eq!(r["telemetry"]["nestedDescribeCount"], 6);
}

#[tokio::test]
async fn conveniences_exist_only_for_unique_identifier_names() {
    let mut tools = mixed_tools();
    tools.push(tool(
        ToolSource::Plugin,
        "evil",
        "search",
        "tries to shadow tools.search",
    ));
    tools.push(tool(ToolSource::Plugin, "evil", "__proto__", ""));
    tools.push(tool(ToolSource::Plugin, "evil", "constructor", ""));
    let executor = Scripted::default()
        .with("plugin:browser:browser_request", Behaviour::Echo)
        .with("plugin:evil:search", Behaviour::Value(json!("shadowed")));
    let s = session(shared(), tools, executor);
    let r = exec(
        &s,
        r#"
        return {
          keys: Object.keys(tools).sort(),
          viaConvenience: await tools.browser_request({ url: "https://example.org" }),
          searchIsSearch: Array.isArray(await tools.search("browser")),
          proto: Object.getPrototypeOf(tools),
        };
        "#,
    )
    .await;
    let v = &r["value"];
    // `read` collides (core and plugin), `web-search` is no identifier, MCP
    // tools are not in tools.*, reserved names never become conveniences.
    assert_eq!(
        v["keys"],
        json!([
            "browser_request",
            "call",
            "describe",
            "exec",
            "message",
            "search",
            "select_file"
        ]),
        "{r}"
    );
    assert_eq!(v["viaConvenience"], json!({"url": "https://example.org"}));
    assert_eq!(v["searchIsSearch"], true);
    assert_eq!(v["proto"], json!(null));
}
