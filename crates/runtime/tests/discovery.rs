//! Finding and naming tools: `API.search` over MCP tools, the ranked
//! `tools.search`, the pre-run name check (wrong names refused before the
//! first nested call) and coded errors for wrong names reached at run time.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::Arc;

use codemode_runtime::{Catalog, McpServerInfo, ToolDefinition, ToolPolicy, ToolSource};
use common::{Behaviour, Scripted, context, shared};
use serde_json::{Value, json};

fn tools() -> Vec<ToolDefinition> {
    let note_schema = json!({
        "type": "object",
        "properties": { "id": { "type": "string" }, "new_title": { "type": "string" }, "limit": { "type": "integer" } },
        "required": ["id"]
    });
    vec![
        ToolDefinition::new(ToolSource::Plugin, "files", "read_file")
            .with_description("Read a local file from disk")
            .with_parameters(json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] })),
        ToolDefinition::new(ToolSource::Plugin, "weather", "get_weather")
            .with_description("Get the weather forecast of a city for the next days"),
        ToolDefinition::new(ToolSource::Mcp, "notes", "delete_note")
            .with_description("Delete a note by its id.\nThe note is gone for good.")
            .with_parameters(note_schema.clone()),
        ToolDefinition::new(ToolSource::Mcp, "notes", "rename_note")
            .with_description("Give a note a new title")
            .with_parameters(json!({
                "type": "object",
                "properties": { "id": { "type": "string" }, "new_title": { "type": "string" } },
                "required": ["id", "new_title"]
            })),
        ToolDefinition::new(ToolSource::Mcp, "deepwiki", "read_wiki_structure")
            .with_description("Get a list of documentation topics for a GitHub repository")
            .with_parameters(json!({ "type": "object", "properties": { "repoName": { "type": "string" } }, "required": ["repoName"] })),
        ToolDefinition::new(ToolSource::Mcp, "everything", "get-sum")
            .with_description("Returns the sum of two numbers")
            .with_parameters(json!({ "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] })),
    ]
}

fn executor() -> Scripted {
    Scripted::default()
        .with("plugin:files:read_file", Behaviour::Echo)
        .with("mcp:notes:delete_note", Behaviour::Echo)
        .with("mcp:notes:rename_note", Behaviour::Echo)
        .with("mcp:everything:get-sum", Behaviour::Echo)
}

fn session(executor: Scripted) -> codemode_runtime::CodeModeSession {
    let catalog = Catalog::build_with_mcp_servers(
        tools(),
        &ToolPolicy::default(),
        &[McpServerInfo::new("notes")],
    )
    .unwrap();
    let run = format!("run-{}", codemode_sandbox::random_u64());
    shared().session(
        context("agent", "discovery", &run),
        catalog,
        Arc::new(executor),
    )
}

async fn exec_in(language: &str, s: &codemode_runtime::CodeModeSession, code: &str) -> Value {
    s.exec(&json!({ "code": code, "language": language }))
        .await
        .to_json()
}

#[tokio::test(flavor = "multi_thread")]
async fn api_search_ranks_mcp_tools_with_their_call_paths() {
    let s = session(executor());
    let r = exec_in(
        "javascript",
        &s,
        r#"
        const hits = await API.search("delete a note");
        const sum = await API.search("sum");
        const onNotes = await API.search("note", { server: "notes", limit: 1 });
        const wiki = await API.search("get the deepwiki of vercel/ai");
        let bad = null;
        try { await API.search("x", { server: "nots" }); } catch (e) { bad = e.message; }
        const plain = await tools.search("note");
        return { first: hits[0], sum: sum.map(h => h.path), onNotes, wiki: wiki[0].path, bad, plain };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let v = &r["value"];
    assert_eq!(
        v["first"],
        json!({
            "server": "notes",
            "tool": "delete_note",
            "path": "MCP.notes.deleteNote",
            "description": "Delete a note by its id.",
            "signature": "deleteNote({ id: string, limit?: number, new_title?: string })"
        })
    );
    assert_eq!(v["sum"][0], "MCP.everything.getSum");
    assert_eq!(v["onNotes"].as_array().unwrap().len(), 1);
    assert_eq!(v["onNotes"][0]["server"], "notes");
    assert_eq!(v["wiki"], "MCP.deepwiki.readWikiStructure");
    assert!(
        v["bad"]
            .as_str()
            .unwrap()
            .contains("did you mean MCP.notes?"),
        "{v}"
    );
    assert_eq!(
        v["plain"],
        json!([]),
        "tools.search never returns MCP tools"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_search_matches_whole_words_and_ranks_rare_name_words_first() {
    let s = session(executor());
    let r = exec_in(
        "javascript",
        &s,
        r#"
        return {
          files: (await tools.search("files")).map(t => t.id),
          me: (await tools.search("me")).map(t => t.id),
          weather: (await tools.search("what is the weather in Oslo")).map(t => t.id),
        };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["value"]["files"][0], "plugin:files:read_file", "{r}");
    assert_eq!(r["value"]["me"], json!([]), "'me' is not a word of 'time'");
    assert_eq!(r["value"]["weather"][0], "plugin:weather:get_weather");
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_names_fail_before_the_first_nested_call() {
    for (cell, expected) in [
        (
            "await MCP.everything.getSum({ a: 1, b: 2 });\nawait MCP.notes.delete_note({ id: 'n1' });",
            "line 2, column 7: MCP.notes.delete_note is not a tool of MCP.notes; did you mean MCP.notes.deleteNote",
        ),
        (
            "await MCP.everything.getSum({ a: 1, b: 2 });\nawait MCP.notes.deleteNotes({ id: 'n1' });",
            "did you mean MCP.notes.deleteNote?",
        ),
        (
            "await MCP.everything.getSum({ a: 1, b: 2 });\nawait MCP.notes.renameNote({ id: 'n1' });",
            "MCP.notes.renameNote: missing required key `new_title`",
        ),
        (
            "await MCP.everything.getSum({ a: 1, b: 2 });\nawait MCP.note.deleteNote({ id: 'n1' });",
            "MCP.note is not an MCP server of this run; did you mean MCP.notes?",
        ),
        (
            "await MCP.everything.getSum({ a: '1', b: 2 });",
            "`a` is a string but the schema wants number",
        ),
        (
            "await tools.read_file({ path: 'a' });\nawait tools.readFile({ path: 'a' });",
            "tools.readFile is not a tool of this run; did you mean tools.read_file?",
        ),
    ] {
        let executor = executor();
        let s = session(executor.clone());
        let r = exec_in("javascript", &s, cell).await;
        assert_eq!(r["status"], "failed", "{cell}: {r}");
        assert_eq!(r["code"], "invalid_input", "{cell}: {r}");
        let error = r["error"].as_str().unwrap();
        assert!(error.contains(expected), "{cell}: {error}");
        assert!(error.contains("nothing ran"), "{error}");
        assert_eq!(executor.call_count(), 0, "{cell}: no nested call ran");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_refusals_name_the_typescript_line() {
    let s = session(executor());
    let r = exec_in(
        "typescript",
        &s,
        "interface A {\n  x: number;\n}\nconst n: number = 1;\nawait MCP.notes.delete_note({ id: 'x' });",
    )
    .await;
    assert_eq!(r["code"], "invalid_input", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("line 5, column"),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_is_not_provable_still_runs() {
    let executor = executor();
    let s = session(executor.clone());
    let r = exec_in(
        "javascript",
        &s,
        r#"
        const server = "notes", tool = "delete_note";
        const input = { id: "n1" };
        const out = [];
        out.push(await MCP.notes.deleteNote(input));
        out.push(await MCP.notes.renameNote({ ...input, new_title: "t" }));
        if (MCP.github) out.push("github?");
        out.push("github" in MCP, typeof MCP.notes.archive);
        try { await MCP.notes.archive({}); } catch (e) { out.push(e.code); }
        try { await MCP[server][tool]({ id: "x" }); } catch (e) { out.push(e.code, e.message); }
        try { await MCP.gitlab.search({}); } catch (e) { out.push(e.code); }
        return { out, keys: Object.keys(MCP.notes), servers: Object.keys(MCP) };
        "#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let out = r["value"]["out"].as_array().unwrap();
    assert_eq!(out[0], json!({ "id": "n1" }));
    assert_eq!(out[1], json!({ "id": "n1", "new_title": "t" }));
    // `MCP.github` is a placeholder (truthy); `in` tells the truth.
    assert_eq!(out[2], "github?");
    assert_eq!(out[3], false);
    assert_eq!(out[4], "function");
    assert_eq!(out[5], "nested_tool_failed");
    assert_eq!(out[6], "nested_tool_failed");
    assert!(
        out[7]
            .as_str()
            .unwrap()
            .contains("did you mean MCP.notes.deleteNote"),
        "{out:?}"
    );
    assert_eq!(out[8], "nested_tool_failed");
    assert_eq!(
        r["value"]["keys"],
        json!(["deleteNote", "renameNote", "$api"])
    );
    assert_eq!(
        r["value"]["servers"],
        json!(["deepwiki", "everything", "notes"])
    );
    assert_eq!(executor.call_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_uncaught_wrong_name_at_run_time_fails_with_its_code() {
    let s = session(executor());
    let r = exec_in(
        "javascript",
        &s,
        "const name = 'deleteNotes'; return await MCP.notes[name]({ id: 'x' });",
    )
    .await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["code"], "nested_tool_failed", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("MCP.notes.deleteNote"),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_exec_description_points_at_api_search() {
    let s = session(executor());
    let tools = s.model_tools();
    let exec = tools.iter().find(|t| t.name == "exec").unwrap();
    assert!(
        exec.description.contains("API.search(query"),
        "{}",
        exec.description
    );
    assert!(
        !exec
            .description
            .contains("tools.search(query, {limit}) ranks tools;")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cell_of_thousands_of_wrong_names_gets_a_short_refusal() {
    let executor = executor();
    let s = session(executor.clone());
    let cell: String = (0..3000)
        .map(|i| format!("if (MCP.x{i}) {{}} await MCP.notes.missing{i}({{ id: 'a' }});\n"))
        .collect();
    let r = exec_in("javascript", &s, &cell).await;
    assert_eq!(r["code"], "invalid_input", "{r}");
    let error = r["error"].as_str().unwrap();
    assert_eq!(error.matches("\n- line ").count(), 8, "{error}");
    assert!(
        error.ends_with("- and more: fix these and run the cell again"),
        "{error}"
    );
    // Guarded, the same names are left to run time.
    let guarded: String = (0..3000)
        .map(|i| format!("if (MCP.notes.missing{i}) await MCP.notes.missing{i}({{ id: 'a' }}).catch(() => null);\n"))
        .collect();
    let r = exec_in("javascript", &s, &format!("{guarded}\nreturn 1")).await;
    assert_ne!(r["code"], "invalid_input", "{r}");
}
