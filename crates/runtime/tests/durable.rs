//! Durable runs, against every durable backend (the embedded file store and
//! a real `redis-server`): a waiting run outlives its process (a runtime
//! dropped mid-wait is a process that died), results that arrived while it
//! waited are delivered after the restart, calls whose process died reject
//! with `interrupted` and are never re-run, two runtimes on one Redis
//! share runs (a call still running on the first is delivered on the
//! second), ownership and TTL hold across processes, records of another
//! guest build are refused, and an unreachable store fails the suspension
//! with `runtime_busy`, and calls held for approval outlive their process
//! (listed and decided on every process, asked again after a restart,
//! never `interrupted` when they never started).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use codemode_runtime::codemode_store::testing::RedisServer;
use codemode_runtime::codemode_store::{self, RunBackend};
use codemode_runtime::{
    ApprovalDecision, CodeModeRuntime, DurableStore, RuntimeOptions, ToolPolicy, ToolSource,
};
use common::{Behaviour, Scripted, context, exec, runtime_with, session_in, tool, wait};
use serde_json::{Value, json};

const CONFIG: &str = "{tools:{codeMode:{enabled:true, timeoutMs: 400, snapshotTtlSeconds: 60}}}";
/// The process after a restart: its waits last long enough to see a dead
/// Redis replica's heartbeat run out (3 s) while following its calls.
const PATIENT: &str = "{tools:{codeMode:{enabled:true, timeoutMs: 8000, snapshotTtlSeconds: 60}}}";

fn tools() -> Vec<codemode_runtime::ToolDefinition> {
    vec![
        tool(ToolSource::Client, "app", "slow", "Answers after a while"),
        tool(ToolSource::Client, "app", "later", "Answers after 600 ms"),
        tool(ToolSource::Openclaw, "core", "echo", "Echo"),
        tool(ToolSource::Client, "app", "remove", "Deletes things").with_approval(true),
    ]
}

fn executor(slow: Duration) -> Scripted {
    Scripted::default()
        .with(
            "client:app:slow",
            Behaviour::Delay(slow, json!({"slow": "done"})),
        )
        .with(
            "client:app:later",
            Behaviour::Delay(Duration::from_millis(600), json!({"later": "done"})),
        )
        .with("openclaw:core:echo", Behaviour::Echo)
        .with("client:app:remove", Behaviour::Echo)
}

/// Where the runs are kept: a file store's path, or a Redis server.
enum Place {
    File(PathBuf, #[allow(dead_code)] tempfile::TempDir),
    Redis(RedisServer),
}

impl Place {
    fn file() -> Place {
        let dir = tempfile::tempdir().unwrap();
        Place::File(dir.path().join("runs.db"), dir)
    }

    fn redis() -> Place {
        Place::Redis(RedisServer::start())
    }

    /// A backend on this place (retried briefly: opening can race a
    /// dropped runtime's last tasks).
    fn backend(&self) -> Arc<dyn RunBackend> {
        match self {
            Place::File(path, _) => {
                let until = std::time::Instant::now() + Duration::from_secs(10);
                loop {
                    match codemode_store::FileBackend::open(Path::new(path)) {
                        Ok(b) => return Arc::new(b),
                        Err(e) if std::time::Instant::now() > until => panic!("{e}"),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
            Place::Redis(server) => {
                Arc::new(codemode_store::RedisBackend::open(&server.url()).unwrap())
            }
        }
    }

    /// A runtime (one process) on this place.
    fn runtime(&self, config: &str) -> CodeModeRuntime {
        runtime_with(
            config,
            RuntimeOptions {
                durable_store: Some(DurableStore(self.backend())),
                ..RuntimeOptions::default()
            },
        )
    }
}

/// A session of principal `who` (runs owned by the principal, so another
/// session, and another process, of the same principal may resume them).
fn session_of(
    runtime: &CodeModeRuntime,
    who: &str,
    executor: Scripted,
) -> codemode_runtime::CodeModeSession {
    let run = format!("run-{}", codemode_sandbox::random_u64());
    let s = session_in(
        runtime,
        context("agent", &format!("sess-{run}"), &run),
        tools(),
        &ToolPolicy::default(),
        executor,
    );
    assert!(s.bind_owner(who, 64));
    s
}

async fn each_place(test: impl AsyncFn(Place)) {
    test(Place::file()).await;
    test(Place::redis()).await;
}

/// Drops a runtime as a process death would: its calls are cancelled, and
/// nothing of it is asked to clean up the store.
fn die(runtime: CodeModeRuntime) {
    runtime.shutdown();
    drop(runtime);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_outlives_its_process_and_a_dead_call_is_interrupted_not_rerun() {
    each_place(async |place| {
        let first = place.runtime(CONFIG);
        let calls_before = executor(Duration::from_secs(60));
        let s = session_of(&first, "alice", calls_before.clone());
        let started = exec(
            &s,
            r#"
            text("before");
            const r = await tools.slow({}).then(
              v => "value " + JSON.stringify(v),
              e => "caught " + e.code + ": " + e.message);
            text("after");
            return r;
            "#,
        )
        .await;
        assert_eq!(started["status"], "waiting", "{started}");
        let run_id = started["runId"].clone();
        drop(s);
        die(first);

        let second = place.runtime(PATIENT);
        let calls_after = executor(Duration::from_secs(60));
        let s = session_of(&second, "alice", calls_after.clone());
        let resumed = wait(&s, &run_id).await;
        assert_eq!(resumed["status"], "completed", "{resumed}");
        let value = resumed["value"].as_str().unwrap();
        assert!(
            value.starts_with("caught interrupted: ")
                && value.contains("may or may not have taken effect"),
            "{value}"
        );
        assert_eq!(resumed["output"][0]["text"], "after", "{resumed}");
        assert_eq!(
            calls_after.call_count(),
            0,
            "the interrupted call was not re-run"
        );
        assert_eq!(calls_before.call_count(), 1);
        // The finished run left the store.
        let again = wait(&s, &run_id).await;
        assert_eq!(again["code"], "invalid_input", "{again}");
    })
    .await;
}

/// Runs `code` (it must wait on `tools.later`) in a process that dies once
/// the call's result is in the store; the `wait` of the next process.
async fn resumed_after_a_restart(place: &Place, code: &str) -> Value {
    let first = place.runtime(CONFIG);
    let s = session_of(&first, "alice", executor(Duration::from_secs(60)));
    let started = exec(&s, code).await;
    assert_eq!(started["status"], "waiting", "{started}");
    // The call finishes while the run waits: its result goes to the store.
    common::eventually("the result is in the store", || {
        first
            .durable_store_stats()
            .and_then(|(_, stats)| stats.ok())
            .is_some_and(|stats| stats.results >= 1)
    })
    .await;
    drop(s);
    die(first);
    let second = place.runtime(CONFIG);
    let s = session_of(&second, "alice", executor(Duration::from_secs(60)));
    wait(&s, &started["runId"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_returned_before_its_calls_settled_keeps_its_value_across_a_restart() {
    each_place(async |place| {
        let done = resumed_after_a_restart(
            &place,
            r#"tools.later({}).then(v => text(v.later)); return "mine";"#,
        )
        .await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["value"], "mine", "{done}");
        assert_eq!(done["output"][0]["text"], "done", "{done}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_only_its_process_local_scope_may_resume_never_reaches_the_disk() {
    let place = Place::file();
    let runtime = place.runtime(CONFIG);
    let session = |executor| {
        let run = format!("run-{}", codemode_sandbox::random_u64());
        session_in(
            &runtime,
            context("agent", &format!("sess-{run}"), &run),
            tools(),
            &ToolPolicy::default(),
            executor,
        )
    };
    let stats = || runtime.durable_store_stats().unwrap().1.unwrap();
    // A gateway's MCP session without a principal: nobody else can ever
    // resume its runs, so only a marker is stored.
    let scoped = session(executor(Duration::from_secs(60)));
    scoped.keep_scoped_runs_in_process();
    let code = r#"const big = "x".repeat(100000); const a = await tools.later({}); return [a, big.length];"#;
    let started = exec(&scoped, code).await;
    assert_eq!(started["status"], "waiting", "{started}");
    assert!(
        stats().bytes < 1_000,
        "a marker, not a snapshot: {:?}",
        stats()
    );
    // Its call's result stays in memory too; the run resumes from it.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(stats().results, 0);
    let done = wait(&scoped, &started["runId"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"][0], json!({"later": "done"}));

    // Bound to an owner, the same session's runs are durable again.
    let owned = session(executor(Duration::from_secs(60)));
    owned.keep_scoped_runs_in_process();
    assert!(owned.bind_owner("alice", 64));
    let started = exec(&owned, code).await;
    assert_eq!(started["status"], "waiting", "{started}");
    assert!(stats().bytes > 10_000, "the whole run: {:?}", stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_that_arrived_while_the_run_waited_are_delivered_after_a_restart() {
    each_place(async |place| {
        let resumed = resumed_after_a_restart(
            &place,
            r#"const a = await tools.later({}); const b = await tools.echo({n: 2}); return [a, b];"#,
        )
        .await;
        assert_eq!(resumed["status"], "completed", "{resumed}");
        assert_eq!(resumed["value"], json!([{"later": "done"}, {"n": 2}]));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_belong_to_their_owner_in_every_process() {
    each_place(async |place| {
        let first = place.runtime(CONFIG);
        let s = session_of(&first, "alice", executor(Duration::from_secs(60)));
        let started = exec(
            &s,
            "try { return await tools.later({}) } catch (e) { return e.code }",
        )
        .await;
        let run_id = started["runId"].clone();
        drop(s);
        die(first);
        let second = place.runtime(PATIENT);
        let mallory = session_of(&second, "mallory", executor(Duration::from_secs(60)));
        let refused = wait(&mallory, &run_id).await;
        assert_eq!(refused["code"], "invalid_input", "{refused}");
        assert!(
            refused["error"].as_str().unwrap().contains("another owner"),
            "{refused}"
        );
        // A refused wait changed nothing: the owner still resumes it.
        let alice = session_of(&second, "alice", executor(Duration::from_secs(60)));
        let resumed = wait(&alice, &run_id).await;
        assert_eq!(resumed["status"], "completed", "{resumed}");
        assert_eq!(resumed["value"], "interrupted", "{resumed}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_ttl_is_expired_after_a_restart() {
    each_place(async |place| {
        let config = "{tools:{codeMode:{enabled:true, timeoutMs: 300, snapshotTtlSeconds: 1}}}";
        let first = place.runtime(config);
        let s = session_of(&first, "alice", executor(Duration::from_secs(60)));
        let started = exec(&s, "return await tools.slow({})").await;
        let run_id = started["runId"].clone();
        drop(s);
        die(first);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let second = place.runtime(config);
        let s = session_of(&second, "alice", executor(Duration::from_secs(60)));
        let late = wait(&s, &run_id).await;
        assert_eq!(late["code"], "snapshot_expired", "{late}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_another_guest_build_is_refused_with_snapshot_restore_failed() {
    each_place(async |place| {
        // What another build would have written: our record framing, a
        // snapshot whose header names another build id.
        let header = br#"{"parentCallId":"c1","language":"javascript","info":{},"yields":[],"carried":[],"pending":[],"typescript":null,"handleNonce":"n","handles":[],"ownerKey":"principal:alice"}"#;
        let mut record = b"CMR1".to_vec();
        record.extend_from_slice(&(header.len() as u32).to_le_bytes());
        record.extend_from_slice(header);
        record.extend_from_slice(b"CMSNAP\x01\x00");
        record.extend_from_slice(&[0xAB; 32]);
        let backend = place.backend();
        backend
            .put(
                "run_0123456789abcdef0123456789abcdef",
                "principal:alice",
                &record,
                Duration::from_secs(60),
                codemode_store::Bounds { max_runs: 100, max_bytes: 1 << 20 },
            )
            .unwrap();
        drop(backend);
        let runtime = place.runtime(CONFIG);
        let s = session_of(&runtime, "alice", executor(Duration::from_secs(60)));
        let refused = wait(&s, &json!("run_0123456789abcdef0123456789abcdef")).await;
        assert_eq!(refused["code"], "snapshot_restore_failed", "{refused}");
        // Refused records are removed, not retried.
        let again = wait(&s, &json!("run_0123456789abcdef0123456789abcdef")).await;
        assert_eq!(again["code"], "invalid_input", "{again}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_on_one_redis_share_runs_and_calls_still_running() {
    let place = Place::redis();
    let a = place.runtime(CONFIG);
    let b = place.runtime("{tools:{codeMode:{enabled:true, timeoutMs: 5000}}}");
    let calls_a = executor(Duration::from_millis(1500));
    let calls_b = executor(Duration::from_millis(1500));
    let sa = session_of(&a, "alice", calls_a.clone());
    let sb = session_of(&b, "alice", calls_b.clone());
    let started = exec(&sa, "const v = await tools.slow({}); return v;").await;
    assert_eq!(started["status"], "waiting", "{started}");
    let run_id = started["runId"].clone();
    // Resumed on b while the call still runs on a: b follows it through
    // the store and delivers it when a's call answers.
    let resumed = wait(&sb, &run_id).await;
    assert_eq!(resumed["status"], "completed", "{resumed}");
    assert_eq!(resumed["value"], json!({"slow": "done"}));
    assert_eq!((calls_a.call_count(), calls_b.call_count()), (1, 0));
    // a's stale copy is gone: a wait there says the run is unknown.
    let after = wait(&sa, &run_id).await;
    assert_eq!(after["code"], "invalid_input", "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_mid_call_gives_interrupted_on_the_other() {
    let place = Place::redis();
    let a = place.runtime(CONFIG);
    let b = place.runtime("{tools:{codeMode:{enabled:true, timeoutMs: 15000}}}");
    let sa = session_of(&a, "alice", executor(Duration::from_secs(60)));
    let sb = session_of(&b, "alice", executor(Duration::from_secs(60)));
    let started = exec(
        &sa,
        r#"try { return await tools.slow({}); } catch (e) { return e.code; }"#,
    )
    .await;
    let run_id = started["runId"].clone();
    let waiting = tokio::spawn(async move { wait(&sb, &run_id).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(sa);
    die(a);
    let resumed: Value = waiting.await.unwrap();
    assert_eq!(resumed["status"], "completed", "{resumed}");
    assert_eq!(resumed["value"], "interrupted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_fails_the_suspension_with_runtime_busy() {
    let Place::Redis(mut server) = Place::redis() else {
        unreachable!()
    };
    let runtime = runtime_with(
        CONFIG,
        RuntimeOptions {
            durable_store: Some(DurableStore(Arc::new(
                codemode_store::RedisBackend::open(&server.url()).unwrap(),
            ))),
            ..RuntimeOptions::default()
        },
    );
    let calls = executor(Duration::from_secs(60));
    let s = session_of(&runtime, "alice", calls.clone());
    server.kill();
    // A cell that needs no suspension is not affected.
    let quick = exec(&s, "return 6 * 7").await;
    assert_eq!(quick["value"], 42, "{quick}");
    let failed = exec(&s, "text('kept'); return await tools.slow({})").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["code"], "runtime_busy", "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("redis://127.0.0.1"),
        "{failed}"
    );
    assert_eq!(
        failed["output"][0]["text"], "kept",
        "output is not lost: {failed}"
    );
    let stats = runtime.durable_store_stats().unwrap();
    assert!(stats.1.is_err());
}

/// A Redis that loses its data (a restart without persistence, a flush)
/// under a waiting run: the wait says the store lost it, not that the
/// run never existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_lost_with_the_redis_data_is_reported_as_lost() {
    let place = Place::redis();
    let runtime = place.runtime(CONFIG);
    let s = session_of(&runtime, "alice", executor(Duration::from_secs(60)));
    let started = exec(&s, "return await tools.slow({})").await;
    assert_eq!(started["status"], "waiting", "{started}");
    let Place::Redis(server) = &place else {
        unreachable!()
    };
    server.flush_all();
    let lost = wait(&s, &started["runId"]).await;
    assert_eq!(lost["status"], "failed", "{lost}");
    assert_eq!(lost["code"], "snapshot_restore_failed", "{lost}");
    let said = lost["error"].as_str().unwrap();
    assert!(
        said.contains("lost its data since this gateway started"),
        "{said}"
    );
    assert!(!said.contains("never existed"), "{said}");
}

/// The memory store is a store like the others (the runtime has one path
/// for all), but its runs never reach another process: a second runtime on
/// the same memory (a test-only view, as if it were shared) finds the run
/// and the right owner, yet no snapshot, and says so; the first resumes
/// its own runs from their live copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_store_run_resumes_only_from_the_live_copy_of_its_process() {
    let memory = codemode_store::MemoryBackend::new();
    let on = |backend: codemode_store::MemoryBackend| {
        runtime_with(
            CONFIG,
            RuntimeOptions {
                durable_store: Some(DurableStore(Arc::new(backend))),
                ..RuntimeOptions::default()
            },
        )
    };
    let first = on(memory.another_process());
    let second = on(memory.another_process());
    assert!(
        first.durable_store_stats().is_none(),
        "memory is not reported as a durable store"
    );
    let a = session_of(&first, "alice", executor(Duration::from_millis(600)));
    let code = "const r = await tools.later({}); return r;";
    let mine = exec(&a, code).await;
    assert_eq!(mine["status"], "waiting", "{mine}");
    let resumed = wait(&a, &mine["runId"]).await;
    assert_eq!(resumed["status"], "completed", "{resumed}");
    assert_eq!(resumed["value"]["later"], "done", "{resumed}");

    let theirs = exec(&a, code).await;
    assert_eq!(theirs["status"], "waiting", "{theirs}");
    let mallory = session_of(&second, "mallory", executor(Duration::from_millis(600)));
    let refused = wait(&mallory, &theirs["runId"]).await;
    assert_eq!(refused["code"], "invalid_input", "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("another owner"),
        "{refused}"
    );
    let b = session_of(&second, "alice", executor(Duration::from_millis(600)));
    let elsewhere = wait(&b, &theirs["runId"]).await;
    assert_eq!(elsewhere["code"], "snapshot_restore_failed", "{elsewhere}");
    assert!(
        elsewhere["error"]
            .as_str()
            .unwrap()
            .contains("only as the live copy of the process that suspended it"),
        "{elsewhere}"
    );
}

/// A cell whose only call needs approval; it returns the call's value or
/// the code it failed with.
const HELD: &str = r#"
    try { return await tools.remove({ path: "/tmp/x" }); }
    catch (e) { return "caught " + e.code + ": " + e.message; }
"#;

/// The run id and call id of a `waiting` result held for approval.
fn held_ids(result: &Value) -> (String, String) {
    assert_eq!(result["status"], "waiting", "{result}");
    assert_eq!(result["reason"], "approval", "{result}");
    let call = &result["pendingToolCalls"][0];
    assert_eq!(call["awaitingApproval"], true, "{result}");
    (
        result["runId"].as_str().unwrap().to_owned(),
        call["id"].as_str().unwrap().to_owned(),
    )
}

fn listed(runtime: &CodeModeRuntime, run_id: &str) -> Vec<String> {
    runtime
        .pending_approvals()
        .into_iter()
        .filter(|p| p.run_id.as_deref() == Some(run_id))
        .map(|p| p.call_id)
        .collect()
}

/// Approvals outlive their process: after a restart the held call is
/// listed, its run waits for approval again (it never started, so it is
/// not `interrupted`), and once approved it runs once, in the new process.
/// A call denied while no process held it is denied when its run resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_outlives_its_process_and_is_decided_after_a_restart() {
    each_place(async |place| {
        let first = place.runtime(CONFIG);
        let calls_before = executor(Duration::from_secs(60));
        let s = session_of(&first, "alice", calls_before.clone());
        let (approved_run, approved_call) = held_ids(&exec(&s, HELD).await);
        let (denied_run, denied_call) = held_ids(&exec(&s, HELD).await);
        drop(s);
        die(first);

        let second = place.runtime(PATIENT);
        // Listed from the store before any wait brought the runs back.
        assert_eq!(listed(&second, &approved_run), vec![approved_call.clone()]);
        assert_eq!(listed(&second, &denied_run), vec![denied_call.clone()]);
        second
            .decide_approval(
                &denied_run,
                &denied_call,
                ApprovalDecision::Deny {
                    reason: "not today".into(),
                },
            )
            .unwrap();
        assert!(listed(&second, &denied_run).is_empty());
        let calls_after = executor(Duration::from_secs(60));
        let s = session_of(&second, "alice", calls_after.clone());
        // Held again here, and asked again: still waiting for approval.
        let again = wait(&s, &json!(approved_run)).await;
        assert_eq!(
            held_ids(&again),
            (approved_run.clone(), approved_call.clone())
        );
        assert_eq!(listed(&second, &approved_run), vec![approved_call.clone()]);
        second
            .decide_approval(&approved_run, &approved_call, ApprovalDecision::Approve)
            .unwrap();
        let done = wait(&s, &json!(approved_run)).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["value"], json!({"path": "/tmp/x"}), "{done}");
        let denied = wait(&s, &json!(denied_run)).await;
        assert_eq!(denied["status"], "completed", "{denied}");
        let value = denied["value"].as_str().unwrap();
        assert!(
            value.starts_with("caught approval_denied: ") && value.contains("not today"),
            "{value}"
        );
        assert_eq!(
            (calls_before.call_count(), calls_after.call_count()),
            (0, 1),
            "the approved call ran once, in the new process; the denied one never"
        );
        assert!(second.pending_approvals().is_empty());
    })
    .await;
}

/// A call held by one live process is listed and decided on another that
/// shares the store; the holder runs it, and the other delivers its result.
/// The first decision wins everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_decided_on_another_replica_and_runs_on_its_holder() {
    each_place(async |place| {
        let a = place.runtime(CONFIG);
        let b = place.runtime(PATIENT);
        let calls_a = executor(Duration::from_secs(60));
        let calls_b = executor(Duration::from_secs(60));
        let sa = session_of(&a, "alice", calls_a.clone());
        let sb = session_of(&b, "alice", calls_b.clone());
        let (run_id, call_id) = held_ids(&exec(&sa, HELD).await);
        assert_eq!(listed(&b, &run_id), vec![call_id.clone()]);
        b.decide_approval(&run_id, &call_id, ApprovalDecision::Approve)
            .unwrap();
        // Decided once: neither process can decide it again.
        let again = a.decide_approval(
            &run_id,
            &call_id,
            ApprovalDecision::Deny {
                reason: "too late".into(),
            },
        );
        assert!(again.is_err(), "{again:?}");
        common::eventually("the holder ran the call", || calls_a.call_count() == 1).await;
        let done = wait(&sb, &json!(run_id)).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["value"], json!({"path": "/tmp/x"}), "{done}");
        assert_eq!((calls_a.call_count(), calls_b.call_count()), (1, 0));
        assert!(a.pending_approvals().is_empty() && b.pending_approvals().is_empty());
    })
    .await;
}
