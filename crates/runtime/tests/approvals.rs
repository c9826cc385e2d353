//! The control layer: calls that need approval suspend the run (never
//! replaying earlier calls), `approve` / `deny` and an [`Approver`] decide
//! them, and `before_tool_call` / `after_tool_call` hooks allow, block or
//! rewrite nested calls and the outer exec.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::{Arc, Mutex};

use codemode_runtime::{
    ApprovalDecision, ApprovalFuture, ApprovalRequest, Approver, CodeModeSession, HookDecision,
    HookFuture, RuntimeOptions, ToolCallEvent, ToolCallRecord, ToolDefinition, ToolHooks,
    ToolPolicy, ToolSource,
};
use common::{Behaviour, Scripted, context, exec, runtime_with, session_in, tool, wait};
use serde_json::{Value, json};

fn tools() -> Vec<ToolDefinition> {
    vec![
        tool(ToolSource::Client, "app", "read", "Reads"),
        tool(ToolSource::Client, "app", "remove", "Deletes things").with_approval(true),
    ]
}

fn executor() -> Scripted {
    Scripted::default()
        .with("client:app:read", Behaviour::Value(json!({ "read": true })))
        .with("client:app:remove", Behaviour::Echo)
}

fn runtime() -> codemode_runtime::CodeModeRuntime {
    runtime_with(
        "{tools:{codeMode:{enabled:true, timeoutMs: 2000}}}",
        RuntimeOptions::default(),
    )
}

fn session_named(
    runtime: &codemode_runtime::CodeModeRuntime,
    name: &str,
    executor: Scripted,
) -> CodeModeSession {
    session_in(
        runtime,
        context("agent", name, &format!("run-{name}")),
        tools(),
        &ToolPolicy::default(),
        executor,
    )
}

fn called(executor: &Scripted) -> Vec<(String, Value)> {
    executor
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.tool.id.clone(), c.input.clone()))
        .collect()
}

const READ_THEN_REMOVE: &str = r#"
    const first = await tools.read({ n: 1 });
    const removed = await tools.remove({ path: "/tmp/x", apiToken: "sk-secret" });
    return { first, removed };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_needing_approval_suspends_and_runs_once_when_approved() {
    let runtime = runtime();
    let scripted = executor();
    let s = session_named(&runtime, "approve", scripted.clone());
    let r = exec(&s, READ_THEN_REMOVE).await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(r["reason"], "approval", "{r}");
    let pending = &r["pendingToolCalls"][0];
    assert_eq!(pending["toolId"], "client:app:remove", "{r}");
    assert_eq!(pending["awaitingApproval"], true, "{r}");
    let summary = pending["inputSummary"].as_str().unwrap();
    assert!(summary.contains("/tmp/x"), "{summary}");
    assert!(
        !summary.contains("sk-secret"),
        "the summary masks secrets: {summary}"
    );
    // The first call ran; the held one has not started.
    assert_eq!(called(&scripted).len(), 1);
    assert_eq!(r["nestedCalls"][0]["outcome"], "ok", "{r}");
    let listed = s.pending_approvals();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].run_id.as_ref(),
        r["runId"].as_str().map(str::to_owned).as_ref()
    );
    assert_eq!(listed[0].reason, "the tool's definition asks for approval");

    let run_id = r["runId"].as_str().unwrap();
    let call_id = pending["id"].as_str().unwrap();
    s.approve(run_id, call_id).unwrap();
    // Decided once: a second decision finds nothing to decide.
    assert!(s.approve(run_id, call_id).is_err());
    let done = wait(&s, &r["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"]["first"]["read"], true, "{done}");
    assert_eq!(done["value"]["removed"]["path"], "/tmp/x", "{done}");
    // No replay: the read ran exactly once, the removal exactly once.
    let ids: Vec<String> = called(&scripted).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["client:app:read", "client:app:remove"]);
    assert_eq!(done["nestedCalls"][0]["outcome"], "ok", "{done}");
    assert!(s.pending_approvals().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_rejects_with_approval_denied_and_never_runs() {
    let runtime = runtime();
    let scripted = executor();
    let s = session_named(&runtime, "deny", scripted.clone());
    let r = exec(
        &s,
        r#"await tools.read({ n: 1 });
           try { await tools.remove({ path: "/a" }); return "ran"; }
           catch (e) { return { code: e.code, message: e.message }; }"#,
    )
    .await;
    assert_eq!(r["reason"], "approval", "{r}");
    let run_id = r["runId"].as_str().unwrap();
    let call_id = r["pendingToolCalls"][0]["id"].as_str().unwrap();
    s.deny(run_id, call_id, "not today").unwrap();
    let done = wait(&s, &r["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"]["code"], "approval_denied", "{done}");
    let message = done["value"]["message"].as_str().unwrap();
    assert!(
        message.contains("denied") && message.contains("not today"),
        "{message}"
    );
    assert_eq!(done["nestedCalls"][0]["outcome"], "denied", "{done}");
    assert_eq!(called(&scripted).len(), 1, "only the read ran");

    // Uncaught, a denial fails the cell as a failed nested call.
    let r = exec(&s, r#"await tools.remove({ path: "/b" }); return 1;"#).await;
    let run_id = r["runId"].as_str().unwrap();
    let call_id = r["pendingToolCalls"][0]["id"].as_str().unwrap();
    s.deny(run_id, call_id, "no").unwrap();
    let failed = wait(&s, &r["runId"]).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["code"], "nested_tool_failed", "{failed}");
    assert!(
        failed["error"].as_str().unwrap().contains("denied"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_runs_own_session_decides_and_only_pending_calls() {
    let runtime = runtime();
    let s = session_named(&runtime, "owner", executor());
    let other = session_named(&runtime, "stranger", executor());
    let r = exec(&s, READ_THEN_REMOVE).await;
    let run_id = r["runId"].as_str().unwrap();
    let call_id = r["pendingToolCalls"][0]["id"].as_str().unwrap();
    let err = other.approve(run_id, call_id).unwrap_err();
    assert!(err.to_string().contains("awaits approval"), "{err}");
    assert!(other.pending_approvals().is_empty());
    assert!(s.approve(run_id, "exec_1.99").is_err());
    assert!(s.approve("run_unknown", call_id).is_err());
    // The operator view sees every scope and can decide.
    assert_eq!(runtime.pending_approvals().len(), 1);
    runtime
        .decide_approval(run_id, call_id, ApprovalDecision::Approve)
        .unwrap();
    let done = wait(&s, &r["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_does_not_stop_other_calls_and_is_cancelled_with_the_run() {
    let runtime = runtime();
    let scripted = executor().with(
        "client:app:read",
        Behaviour::Delay(std::time::Duration::from_millis(50), json!(7)),
    );
    let s = session_named(&runtime, "mixed", scripted.clone());
    // The held call is fire-and-forget: the cell returns without it, and
    // the run waits for the decision (`completed` means no pending work).
    let r = exec(
        &s,
        r#"tools.remove({ path: "/c" }).catch(() => {});
           return await tools.read({});"#,
    )
    .await;
    assert_eq!(r["status"], "waiting", "{r}");
    assert_eq!(
        r["pendingToolCalls"][0]["toolId"], "client:app:remove",
        "{r}"
    );
    let outcomes: Vec<&str> = r["nestedCalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok"], "the read ran beside the held call: {r}");
    assert_eq!(called(&scripted).len(), 1);
    // Aborting the run takes its approval with it.
    s.abort();
    assert!(
        runtime.pending_approvals().is_empty(),
        "the run took its approval with it"
    );
    assert_eq!(called(&scripted).len(), 1);
}

struct Answer(Option<ApprovalDecision>, Mutex<Vec<ApprovalRequest>>);

impl Approver for Answer {
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture {
        self.1.lock().unwrap().push(request);
        let answer = self.0.clone();
        Box::pin(async move { answer })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_decides_without_suspending_the_run() {
    let runtime = runtime();
    let yes = Arc::new(Answer(Some(ApprovalDecision::Approve), Mutex::default()));
    let scripted = executor();
    let s = session_named(&runtime, "approver-yes", scripted.clone()).with_approver(yes.clone());
    let r = exec(&s, READ_THEN_REMOVE).await;
    assert_eq!(r["status"], "completed", "{r}");
    {
        let asked = yes.1.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].tool.id, "client:app:remove");
        assert!(!asked[0].input_summary.contains("sk-secret"));
    }

    let no = Arc::new(Answer(
        Some(ApprovalDecision::Deny {
            reason: "the user said no".into(),
        }),
        Mutex::default(),
    ));
    let s = session_named(&runtime, "approver-no", executor()).with_approver(no);
    let r = exec(
        &s,
        r#"try { await tools.remove({}); } catch (e) { return e.code + ": " + e.message; }"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert!(
        r["value"]
            .as_str()
            .unwrap()
            .starts_with("approval_denied: "),
        "{r}"
    );
    assert!(
        r["value"].as_str().unwrap().contains("the user said no"),
        "{r}"
    );

    // An approver that cannot decide leaves the call to approve/deny.
    let undecided = Arc::new(Answer(None, Mutex::default()));
    let s = session_named(&runtime, "approver-none", executor()).with_approver(undecided);
    let r = exec(&s, READ_THEN_REMOVE).await;
    assert_eq!(r["reason"], "approval", "{r}");
}

/// Blocks `client:app:remove`, rewrites `read`'s input, blocks execs whose
/// code mentions `forbidden`, and records every event and record.
#[derive(Default)]
struct Policy {
    events: Mutex<Vec<ToolCallEvent>>,
    records: Mutex<Vec<ToolCallRecord>>,
}

impl ToolHooks for Policy {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        let decision = match event.tool_id.as_str() {
            "client:app:remove" => HookDecision::Block {
                reason: "removals are off".into(),
            },
            "client:app:read" => HookDecision::Rewrite {
                input: json!({ "n": 42 }),
            },
            "exec" if event.input.to_string().contains("forbidden") => HookDecision::Block {
                reason: "no forbidden cells".into(),
            },
            _ => HookDecision::Allow,
        };
        self.events.lock().unwrap().push(event);
        Box::pin(async move { decision })
    }

    fn after_tool_call(&self, record: ToolCallRecord) {
        self.records.lock().unwrap().push(record);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_block_rewrite_and_audit_nested_calls_and_the_exec() {
    let runtime = runtime();
    let hooks = Arc::new(Policy::default());
    let scripted = Scripted::default()
        .with("client:app:read", Behaviour::Echo)
        .with("client:app:remove", Behaviour::Echo);
    let s = session_in(
        &runtime,
        context("agent", "hooks", "run-hooks"),
        vec![
            tool(ToolSource::Client, "app", "read", "Reads"),
            tool(ToolSource::Client, "app", "remove", "Deletes"),
        ],
        &ToolPolicy::default(),
        scripted.clone(),
    )
    .with_hooks(hooks.clone());
    let r = s
        .exec(&json!({
            "language": "typescript",
            "code": r#"const read: unknown = await tools.read({ n: 1 });
                let blocked = "";
                try { await tools.remove({ path: "/x" }); } catch (e: any) { blocked = e.code + " " + e.message; }
                return { read, blocked };"#,
        }))
        .await
        .to_json();
    assert_eq!(r["status"], "completed", "{r}");
    // The executor saw the rewritten input, never the blocked call.
    assert_eq!(r["value"]["read"], json!({ "n": 42 }), "{r}");
    let blocked = r["value"]["blocked"].as_str().unwrap();
    assert!(blocked.starts_with("approval_denied "), "{blocked}");
    assert!(blocked.contains("removals are off"), "{blocked}");
    assert_eq!(
        called(&scripted),
        [("client:app:read".to_owned(), json!({ "n": 42 }))]
    );
    assert_eq!(r["nestedCalls"][1]["outcome"], "denied", "{r}");

    {
        let events = hooks.events.lock().unwrap();
        let kinds: Vec<(&str, &str)> = events
            .iter()
            .map(|e| (e.tool_kind, e.tool_id.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("code_mode_exec", "exec"),
                ("tool", "client:app:read"),
                ("tool", "client:app:remove")
            ]
        );
        assert_eq!(events[0].tool_input_kind, Some("typescript"));
        assert_eq!(
            events[1].input,
            json!({ "n": 1 }),
            "the hook saw the guest's input"
        );
        assert_eq!(events[1].context.session_id.as_deref(), Some("hooks"));
        let records = hooks.records.lock().unwrap();
        let audited: Vec<(&str, &str)> = records
            .iter()
            .map(|r| (r.tool_id.as_str(), r.outcome))
            .collect();
        assert_eq!(audited, [("client:app:read", "ok"), ("exec", "completed")]);
        assert!(records[0].input_bytes > 0 && records[0].result_bytes > 0);
    }

    let r = exec(&s, "return 'forbidden'").await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["code"], "approval_denied", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("no forbidden cells"),
        "{r}"
    );
}

/// Rewrites every exec into another cell (the rewrite is parsed again).
struct RewriteExec(Value);

impl ToolHooks for RewriteExec {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        let input = self.0.clone();
        Box::pin(async move {
            if event.tool_kind == "code_mode_exec" {
                HookDecision::Rewrite { input }
            } else {
                HookDecision::Allow
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_may_rewrite_the_exec_but_not_into_bad_input() {
    let runtime = runtime();
    let s = session_named(&runtime, "rewrite-ok", executor()).with_hooks(Arc::new(RewriteExec(
        json!({ "code": "return 'rewritten'" }),
    )));
    let r = exec(&s, "return 'original'").await;
    assert_eq!(r["value"], "rewritten", "{r}");
    let s = session_named(&runtime, "rewrite-bad", executor())
        .with_hooks(Arc::new(RewriteExec(json!({ "code": 7 }))));
    let r = exec(&s, "return 'original'").await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["code"], "invalid_input", "{r}");
    assert!(r["error"].as_str().unwrap().contains("hook rewrote"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_on_a_run_held_for_approval_waits_for_the_decision() {
    let runtime = runtime();
    let scripted = executor();
    let s = Arc::new(session_named(&runtime, "hold", scripted.clone()));
    let r = exec(&s, READ_THEN_REMOVE).await;
    assert_eq!(r["reason"], "approval", "{r}");
    let run_id = r["runId"].as_str().unwrap().to_owned();
    let call_id = r["pendingToolCalls"][0]["id"].as_str().unwrap().to_owned();
    // Nobody decides: the wait holds until its deadline, then says the
    // same (instead of answering at once and making the model spin).
    let started = std::time::Instant::now();
    let again = wait(&s, &r["runId"]).await;
    assert_eq!(again["reason"], "approval", "{again}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1500),
        "the wait held for its deadline: {:?}",
        started.elapsed()
    );
    // A decision during a wait ends the hold: the wait completes.
    let decider = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            common::eventually("the wait holds the run", || {
                s.pending_approvals().len() == 1
            })
            .await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            s.approve(&run_id, &call_id).unwrap();
        })
    };
    let done = wait(&s, &r["runId"]).await;
    decider.await.unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(called(&scripted).len(), 2, "each call ran once");
}

/// Blocks MCP resource reads of `memo://secret`, lets the rest through.
struct GuardResources(Mutex<Vec<(String, String)>>);

impl ToolHooks for GuardResources {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        self.0
            .lock()
            .unwrap()
            .push((event.tool_kind.to_owned(), event.tool_id.clone()));
        let secret = event.input["uri"] == "memo://secret";
        Box::pin(async move {
            if secret {
                HookDecision::Block {
                    reason: "secret memos stay private".into(),
                }
            } else {
                HookDecision::Allow
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_see_mcp_resource_and_prompt_requests_too() {
    let runtime = runtime();
    let catalog = codemode_runtime::Catalog::build_with_mcp_servers(
        vec![],
        &ToolPolicy::default(),
        &[codemode_runtime::McpServerInfo::new("docs").with_resources(true)],
    )
    .unwrap();
    let hooks = Arc::new(GuardResources(Mutex::default()));
    let s = runtime
        .session(
            context("agent", "resources", "run-resources"),
            catalog,
            Arc::new(Scripted::default()),
        )
        .with_hooks(hooks.clone());
    let r = exec(
        &s,
        r#"const out = {};
           for (const uri of ["memo://secret", "memo://public"]) {
             try { await MCP.docs.resources.read({ uri }); out[uri] = "read"; }
             catch (e) { out[uri] = e.code + ": " + e.message; }
           }
           return out;"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    let secret = r["value"]["memo://secret"].as_str().unwrap();
    assert!(secret.starts_with("approval_denied: "), "{secret}");
    assert!(secret.contains("secret memos stay private"), "{secret}");
    // Allowed: it reached the executor (which offers no MCP here).
    let public = r["value"]["memo://public"].as_str().unwrap();
    assert!(
        public.contains("resources/read of MCP server docs is not available"),
        "{public}"
    );
    let seen = hooks.0.lock().unwrap().clone();
    assert!(
        seen.contains(&(
            "mcp_request".to_owned(),
            "mcp:docs:resources/read".to_owned()
        )),
        "{seen:?}"
    );
}
