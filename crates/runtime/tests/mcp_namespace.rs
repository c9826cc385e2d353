//! The guest's `MCP` namespace and `API` files against a scripted MCP
//! executor: names, one-object calls, defaults, frozen globals, MCP
//! entries absent from `ALL_TOOLS` / `tools.*`, suspension and `wait`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use codemode_runtime::{Catalog, McpServerInfo, ToolDefinition, ToolPolicy, ToolSource};
use common::{Behaviour, Scripted, context, exec, shared, wait};
use serde_json::json;

fn tools() -> Vec<ToolDefinition> {
    vec![
        ToolDefinition::new(ToolSource::Openclaw, "core", "read").with_description("Read a file"),
        ToolDefinition::new(ToolSource::Mcp, "chrome-devtools", "take_snapshot")
            .with_description("Take a page snapshot")
            .with_parameters(json!({
                "type": "object",
                "properties": { "output": { "enum": ["markdown", "json"], "default": "markdown" } }
            })),
        ToolDefinition::new(ToolSource::Mcp, "github", "create_issue")
            .with_description("Create a GitHub issue")
            .with_parameters(json!({
                "type": "object",
                "properties": { "title": { "type": "string" }, "body": { "type": "string" } },
                "required": ["title"]
            })),
        ToolDefinition::new(ToolSource::Mcp, "github", "slow_search"),
    ]
}

fn session(executor: Scripted) -> codemode_runtime::CodeModeSession {
    let catalog = Catalog::build_with_mcp_servers(
        tools(),
        &ToolPolicy::default(),
        &[McpServerInfo::new("github").with_description("GitHub's API")],
    )
    .unwrap();
    let run = format!("run-{}", codemode_sandbox::random_u64());
    shared().session(context("agent", "mcp", &run), catalog, Arc::new(executor))
}

fn executor() -> Scripted {
    Scripted::default()
        .with("mcp:chrome-devtools:take_snapshot", Behaviour::Echo)
        .with("mcp:github:create_issue", Behaviour::Echo)
        .with(
            "mcp:github:slow_search",
            Behaviour::Delay(
                Duration::from_millis(1500),
                json!({ "content": [{ "type": "text", "text": "found" }] }),
            ),
        )
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_tools_are_called_through_safe_names_with_one_object() {
    let executor = executor();
    let s = session(executor.clone());
    let r = exec(
        &s,
        r#"
        const snap = await MCP.chromeDevtools.takeSnapshot();
        const issue = await MCP.github.createIssue({ title: "Bug" });
        const errors = [];
        for (const f of [() => MCP.github.createIssue(), () => MCP.github.createIssue({ title: "a" }, 2), () => MCP.github.createIssue("t")]) {
          try { await f(); errors.push(null); } catch (e) { errors.push(e.message); }
        }
        return { snap, issue, errors, names: [MCP.github.createIssue.name, typeof MCP.github.$api] };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["value"]["snap"],
        json!({ "output": "markdown" }),
        "schema defaults applied"
    );
    assert_eq!(r["value"]["issue"], json!({ "title": "Bug" }));
    let errors = r["value"]["errors"].as_array().unwrap();
    assert!(
        errors[0]
            .as_str()
            .unwrap()
            .contains("missing required key `title`"),
        "{errors:?}"
    );
    assert!(
        errors[1]
            .as_str()
            .unwrap()
            .contains("exactly one object argument"),
        "{errors:?}"
    );
    assert!(
        errors[2].as_str().unwrap().contains("got a string"),
        "{errors:?}"
    );
    assert_eq!(r["value"]["names"], json!(["createIssue", "function"]));
    assert_eq!(executor.call_count(), 2);
    assert_eq!(
        r["telemetry"]["nestedToolIds"],
        json!([
            "mcp:chrome-devtools:take_snapshot",
            "mcp:github:create_issue"
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_entries_stay_out_of_the_tools_views_and_globals_are_frozen() {
    let s = session(executor());
    let r = exec(
        &s,
        r#"
        // Sloppy-mode writes are ignored; strict-mode ones throw.
        const github = MCP.github;
        MCP.github = 1;
        MCP.github.createIssue = () => 1;
        delete MCP.github;
        globalThis.MCP = {};
        const attempts = [];
        const strict = (name, f) => { try { f(); } catch (e) { attempts.push(name); } };
        strict("assign", function () { "use strict"; MCP.github = 1; });
        strict("replace", function () { "use strict"; MCP.github.createIssue = () => 1; });
        strict("delete", function () { "use strict"; delete MCP.github; });
        strict("global", function () { "use strict"; globalThis.MCP = {}; });
        strict("api", function () { "use strict"; API.read = () => "x"; });
        const intact = MCP.github === github && MCP.github.createIssue.name === "createIssue";
        let described;
        try { await tools.describe("mcp:github:create_issue"); } catch (e) { described = e.message; }
        return {
          ids: ALL_TOOLS.map((t) => t.id),
          hits: (await tools.search("issue")).length,
          described,
          attempts,
          proto: Object.getPrototypeOf(MCP.github),
          servers: Object.keys(MCP),
          namespaces: typeof namespaces,
          intact,
        };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"]["ids"], json!(["openclaw:core:read"]));
    assert_eq!(r["value"]["hits"], 0);
    assert!(
        r["value"]["described"].as_str().unwrap().contains("MCP."),
        "{r}"
    );
    assert_eq!(
        r["value"]["attempts"],
        json!(["assign", "replace", "delete", "global", "api"])
    );
    assert_eq!(r["value"]["proto"], json!(null));
    assert_eq!(r["value"]["servers"], json!(["chromeDevtools", "github"]));
    assert_eq!(r["value"]["namespaces"], "object");
    assert_eq!(r["value"]["intact"], true);
}

/// Server objects build their tool functions on first read (a run does not
/// pay for every tool of every server): what the cell sees is the same as
/// an object holding them all: keys in catalog order then `$api`, `in`,
/// descriptors, one function per tool, writes refused, and freezing it
/// works.
#[tokio::test(flavor = "multi_thread")]
async fn server_objects_behave_like_frozen_objects_of_every_tool() {
    let s = session(executor());
    let r = exec(
        &s,
        r#"
        const gh = MCP.github;
        const before = Object.keys(gh);
        const has = ["createIssue" in gh, "slowSearch" in gh, "$api" in gh, "nope" in gh, "then" in gh];
        const d = Object.getOwnPropertyDescriptor(gh, "slowSearch");
        const same = gh.createIssue === gh.createIssue && d.value === gh.slowSearch;
        const refused = [];
        const attempt = (name, f) => { try { f(); refused.push(name + ": no error"); } catch (e) { refused.push(name); } };
        attempt("assign", function () { "use strict"; gh.createIssue = 1; });
        attempt("add", function () { "use strict"; gh.extra = 1; });
        attempt("define", () => Object.defineProperty(gh, "x", { value: 1 }));
        attempt("delete", function () { "use strict"; delete gh.createIssue; });
        Object.freeze(gh);
        return {
          before,
          after: Object.keys(gh),
          entries: Object.entries(gh).map(([k, v]) => k + ":" + typeof v),
          has,
          descriptor: [typeof d.value, d.enumerable, d.writable],
          same,
          refused,
          frozenCallable: typeof gh.createIssue,
          missing: typeof gh.nope,
          probe: typeof gh.then,
          names: [gh.createIssue.name, gh.slowSearch.name],
        };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let v = &r["value"];
    assert_eq!(v["before"], json!(["createIssue", "slowSearch", "$api"]));
    assert_eq!(v["after"], v["before"]);
    assert_eq!(
        v["entries"],
        json!([
            "createIssue:function",
            "slowSearch:function",
            "$api:function"
        ])
    );
    assert_eq!(v["has"], json!([true, true, true, false, false]));
    assert_eq!(v["descriptor"], json!(["function", true, false]));
    assert_eq!(v["same"], true);
    assert_eq!(v["refused"], json!(["assign", "add", "define", "delete"]));
    assert_eq!(v["frozenCallable"], "function");
    // A name the server lacks is still a function that rejects with the
    // nearest names; probes stay undefined.
    assert_eq!(v["missing"], "function");
    assert_eq!(v["probe"], "undefined");
    assert_eq!(v["names"], json!(["createIssue", "slowSearch"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn declarations_and_the_inline_header() {
    let s = session(executor());
    let r = exec(
        &s,
        r#"
        const files = await API.list();
        const github = await API.read("mcp/github.d.ts");
        const header = await MCP.github.$api("create_issue", { schema: true });
        return { files: files.map((f) => f.path), github, header };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["value"]["files"],
        json!([
            "mcp/chromeDevtools.d.ts",
            "mcp/github.d.ts",
            "mcp/index.d.ts"
        ])
    );
    let github = r["value"]["github"].as_str().unwrap();
    assert!(github.contains("GitHub's API"), "{github}");
    assert!(
        github.contains("function createIssue(input: {\n    body?: string;\n    title: string;\n  }): Promise<McpToolResult>;"),
        "{github}"
    );
    assert!(github.contains("function slowSearch(input?: "), "{github}");
    let header = &r["value"]["header"];
    assert_eq!(header["tools"][0]["name"], "createIssue");
    assert_eq!(
        header["tools"][0]["inputSchema"]["required"],
        json!(["title"])
    );
    assert_eq!(r["telemetry"]["nestedApiCount"], 3);
    assert_eq!(
        r["telemetry"]["nestedCallCount"], 0,
        "declarations are not tool calls"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_mcp_call_suspends_and_wait_delivers_it() {
    let s = session(executor());
    let r = exec(
        &s,
        "const r = await MCP.github.slowSearch(); return r.content[0].text",
    )
    .await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(r["pendingToolCalls"][0]["toolId"], "mcp:github:slow_search");
    assert_eq!(r["pendingToolCalls"][0]["method"], "call");
    let mut next = wait(&s, &r["runId"]).await;
    while next["status"] == "waiting" {
        next = wait(&s, &r["runId"]).await;
    }
    assert_eq!(next["status"], "completed", "{next}");
    assert_eq!(next["value"], "found");
}

#[tokio::test(flavor = "multi_thread")]
async fn resources_and_prompts_need_the_server_to_offer_them() {
    let s = session(executor());
    let r = exec(
        &s,
        "return [typeof MCP.github.resources, typeof MCP.github.prompts, typeof MCP.chromeDevtools.resources]",
    )
    .await;
    assert_eq!(
        r["value"],
        json!(["undefined", "undefined", "undefined"]),
        "{r}"
    );
    let catalog = Catalog::build_with_mcp_servers(
        vec![],
        &ToolPolicy::default(),
        &[McpServerInfo::new("docs")
            .with_resources(true)
            .with_prompts(true)],
    )
    .unwrap();
    let docs = shared().session(
        context("agent", "docs", "r"),
        catalog,
        Arc::new(Scripted::default()),
    );
    let r = exec(
        &docs,
        r#"
        let failed;
        try { await MCP.docs.resources.read({ uri: "memo://one" }); } catch (e) { failed = e.message; }
        return { keys: Object.keys(MCP.docs), resources: Object.keys(MCP.docs.resources), prompts: Object.keys(MCP.docs.prompts), failed };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"]["keys"], json!(["$api", "resources", "prompts"]));
    assert_eq!(
        r["value"]["resources"],
        json!(["list", "read", "templates"])
    );
    assert_eq!(r["value"]["prompts"], json!(["list", "get"]));
    // An executor without MCP support fails the request clearly.
    assert!(
        r["value"]["failed"]
            .as_str()
            .unwrap()
            .contains("resources/read of MCP server docs is not available"),
        "{r}"
    );
}

/// `unwrap(result)`: structuredContent, else the JSON (or text) of a single
/// text item, else joined text, else the content; `isError` throws a
/// catchable error; not a result is a TypeError.
#[tokio::test]
async fn unwrap_takes_the_meaning_out_of_a_tool_result() {
    let r = common::run(
        r#"
        const caught = (f) => { try { f(); return "no throw"; } catch (e) { return [e.constructor.name, e.message, e.code ?? null]; } };
        return [
          unwrap({ structuredContent: { a: 1 }, content: [{ type: "text", text: "{\"a\":1}" }] }),
          unwrap({ content: [{ type: "text", text: "{\"b\":2}" }] }),
          unwrap({ content: [{ type: "text", text: "plain" }] }),
          unwrap({ content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }),
          unwrap({ content: [{ type: "image", data: "x", mimeType: "image/png" }] }),
          caught(() => unwrap({ isError: true, content: [{ type: "text", text: "boom" }] })),
          caught(() => unwrap(5)),
          caught(() => unwrap([])),
        ];"#,
        "javascript",
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["value"],
        json!([
            { "a": 1 },
            { "b": 2 },
            "plain",
            "a\nb",
            [{ "type": "image", "data": "x", "mimeType": "image/png" }],
            ["Error", "the tool reported an error: boom", "nested_tool_failed"],
            ["TypeError", "unwrap(result) takes an MCP tool result ({ content, structuredContent?, isError? }), got a number", null],
            ["TypeError", "unwrap(result) takes an MCP tool result ({ content, structuredContent?, isError? }), got an array", null]
        ])
    );
}
