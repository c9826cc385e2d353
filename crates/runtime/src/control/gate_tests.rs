//! The gated call as one future (hooks, approval, the store's watch, the
//! executor), the gate's stages, decisions through a run store, and the
//! redaction of what approvers see. Every test drives the real future with
//! scripted hooks, approvers, executors and stores.

use super::*;
use crate::catalog::gate::{ApprovalReason, GatePolicy};
use crate::catalog::mcp::McpMethod;
use crate::catalog::tool::ToolSource;
use crate::progress::CallProgress;
use codemode_store::{MemoryBackend, StoreError};
use serde_json::json;

const TOOL: &str = "plugin:p:sum";

fn tool(approval: Option<ApprovalReason>) -> Arc<CatalogEntry> {
    Arc::new(CatalogEntry {
        id: TOOL.into(),
        name: "sum".into(),
        label: None,
        description: String::new(),
        source: ToolSource::Plugin,
        source_name: "p".into(),
        parameters: Value::Null,
        gate: GatePolicy { approval },
        annotations: Value::Null,
        output_schema: Value::Null,
    })
}

fn call_of(tool: Arc<CatalogEntry>) -> NestedCall {
    NestedCall {
        context: Arc::new(RunContext::default()),
        parent_call_id: "exec_1".into(),
        call_id: "exec_1.1".into(),
        tool,
        input: json!({"a": 1}),
        progress: CallProgress::none(),
    }
}

/// Answers every call with `answer` after `delay`, recording the inputs
/// (params for MCP requests) it was started with.
struct Recorder {
    answer: Result<Value, ToolCallError>,
    delay: Duration,
    seen: Mutex<Vec<Value>>,
}

impl Recorder {
    fn new(answer: Result<Value, ToolCallError>) -> Arc<Recorder> {
        Arc::new(Recorder {
            answer,
            delay: Duration::ZERO,
            seen: Mutex::default(),
        })
    }

    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    fn answer(&self, input: Value) -> ToolFuture {
        self.seen.lock().unwrap().push(input);
        let (answer, delay) = (self.answer.clone(), self.delay);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            answer
        })
    }
}

impl ToolExecutor for Recorder {
    fn call(&self, call: NestedCall) -> ToolFuture {
        self.answer(call.input)
    }

    fn mcp_request(&self, request: McpServerCall) -> ToolFuture {
        self.answer(request.params)
    }
}

/// Answers every `before_tool_call` with `decision`; keeps what it saw.
struct Scripted {
    decision: HookDecision,
    events: Mutex<Vec<ToolCallEvent>>,
    records: Mutex<Vec<ToolCallRecord>>,
}

impl Scripted {
    fn new(decision: HookDecision) -> Arc<Scripted> {
        Arc::new(Scripted {
            decision,
            events: Mutex::default(),
            records: Mutex::default(),
        })
    }

    fn events(&self) -> Vec<ToolCallEvent> {
        self.events.lock().unwrap().clone()
    }

    fn records(&self) -> Vec<ToolCallRecord> {
        self.records.lock().unwrap().clone()
    }
}

impl ToolHooks for Scripted {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        self.events.lock().unwrap().push(event);
        Box::pin(std::future::ready(self.decision.clone()))
    }

    fn after_tool_call(&self, record: ToolCallRecord) {
        self.records.lock().unwrap().push(record);
    }
}

/// `record` is the audit of a call of kind, tool, call id and outcome
/// `what`, with `input` and `result` counted in compact JSON bytes.
fn assert_audited(
    record: &ToolCallRecord,
    what: (&str, &str, &str, &str),
    input: &Value,
    result: &Value,
) {
    let seen = (
        record.tool_kind,
        record.tool_id.as_str(),
        record.call_id.as_str(),
        record.outcome,
    );
    assert_eq!(seen, what);
    assert_eq!(record.input_bytes, json_len(input));
    assert_eq!(record.result_bytes, json_len(result));
}

/// `err` is a denial (the call never started) saying `message`.
fn assert_denied(err: &ToolCallError, message: &str) {
    assert!(err.denied, "{err:?}");
    assert_eq!(err.message, message);
}

fn hooked(hooks: &Arc<Scripted>, recheck: Option<Recheck>) -> Gate {
    Gate {
        state: GateState::new(),
        hooks: Some(Arc::clone(hooks) as Arc<dyn ToolHooks>),
        approval: None,
        recheck,
    }
}

#[tokio::test]
async fn an_allowed_call_runs_and_is_audited() {
    let hooks = Scripted::new(HookDecision::Allow);
    let executor = Arc::new(Recorder {
        answer: Ok(json!({"sum": 3})),
        delay: Duration::from_millis(20),
        seen: Mutex::default(),
    });
    let gate = hooked(&hooks, None);
    let state = Arc::clone(&gate.state);
    let call = call_of(tool(None));
    let out = gated(gate, call, executor.clone()).await;
    assert_eq!(out, Ok(json!({"sum": 3})));
    assert_eq!(executor.seen(), [json!({"a": 1})]);
    let event = &hooks.events()[0];
    assert_eq!(
        (
            event.tool_kind,
            event.tool_id.as_str(),
            event.call_id.as_str()
        ),
        ("tool", TOOL, "exec_1.1")
    );
    assert_eq!(event.parent_call_id.as_deref(), Some("exec_1"));
    assert_eq!(
        (event.tool_input_kind, &event.input),
        (None, &json!({"a": 1}))
    );
    let [record] = hooks.records().try_into().unwrap();
    assert_audited(
        &record,
        ("tool", TOOL, "exec_1.1", "ok"),
        &json!({"a": 1}),
        &json!({"sum": 3}),
    );
    // The executor's 20 ms, in milliseconds (not seconds, nor 1000 added).
    assert!(
        (20.0..900.0).contains(&record.duration_ms),
        "{}",
        record.duration_ms
    );
    assert!(!state.not_started() && !state.awaiting_approval());

    let failing = Recorder::new(Err(ToolCallError::new("boom")));
    let out = gated(hooked(&hooks, None), call_of(tool(None)), failing).await;
    assert_eq!(out.unwrap_err().message, "boom");
    let record = &hooks.records()[1];
    assert_eq!((record.outcome, record.result_bytes), ("failed", 0));
}

#[tokio::test]
async fn a_blocking_hook_denies_before_the_executor_is_asked() {
    let hooks = Scripted::new(HookDecision::Block {
        reason: "not today".into(),
    });
    let executor = Recorder::new(Ok(json!(1)));
    let err = gated(hooked(&hooks, None), call_of(tool(None)), executor.clone())
        .await
        .unwrap_err();
    assert_denied(
        &err,
        &format!("the call of {TOOL} was blocked by a before_tool_call hook: not today"),
    );
    assert!(executor.seen().is_empty());
    assert!(
        hooks.records().is_empty(),
        "a call that never ran is not audited"
    );
}

#[tokio::test]
async fn a_rewritten_input_is_checked_again() {
    let hooks = Scripted::new(HookDecision::Rewrite {
        input: json!({"a": 2}),
    });
    let executor = Recorder::new(Ok(json!(1)));
    // Checked: the executor gets what the check made of it.
    let recheck: Recheck = Box::new(|v| Ok(json!({ "checked": v })));
    gated(
        hooked(&hooks, Some(recheck)),
        call_of(tool(None)),
        executor.clone(),
    )
    .await
    .unwrap();
    assert_eq!(executor.seen(), [json!({"checked": {"a": 2}})]);
    assert_eq!(
        hooks.records()[0].input_bytes,
        json_len(&json!({"checked": {"a": 2}}))
    );
    // Nothing to check it against: as the hook wrote it.
    gated(hooked(&hooks, None), call_of(tool(None)), executor.clone())
        .await
        .unwrap();
    assert_eq!(executor.seen()[1], json!({"a": 2}));
    // Refused by the check: denied, never started.
    let recheck: Recheck = Box::new(|_| Err("a: must be a string".into()));
    let err = gated(
        hooked(&hooks, Some(recheck)),
        call_of(tool(None)),
        executor.clone(),
    )
    .await
    .unwrap_err();
    assert_denied(
        &err,
        &format!(
            "a before_tool_call hook rewrote the input of {TOOL} into one the tool does not accept: a: must be a string"
        ),
    );
    assert_eq!(executor.seen().len(), 2);
}

#[tokio::test]
async fn a_call_its_run_cancelled_never_starts() {
    let executor = Recorder::new(Ok(json!(1)));
    let gate = Gate {
        state: GateState::new(),
        hooks: None,
        approval: None,
        recheck: None,
    };
    gate.state.cancel();
    let err = gated(gate, call_of(tool(None)), executor.clone())
        .await
        .unwrap_err();
    assert_denied(
        &err,
        &format!("the call of {TOOL} was not started: its run ended first"),
    );
    assert!(executor.seen().is_empty());
}

#[test]
fn the_gate_moves_through_its_stages_and_cancelling_is_final() {
    let state = GateState::new();
    let at = |s: &GateState| {
        (
            s.not_started(),
            s.awaiting_approval(),
            s.awaiting_decision(),
        )
    };
    assert_eq!(at(&state), (true, false, false), "gating");
    state.set(STAGE_ASKING);
    assert_eq!(at(&state), (true, true, false), "asking an approver");
    state.set(STAGE_AWAITING);
    assert_eq!(at(&state), (true, true, true), "awaiting a decision");
    assert!(state.decided());
    assert_eq!(at(&state), (false, false, false), "running");
    state.cancel();
    assert_eq!(at(&state), (false, false, false), "cancelled");
    assert!(!state.decided(), "nothing starts once cancelled");
    state.set(STAGE_AWAITING);
    assert_eq!(
        at(&state),
        (false, false, false),
        "cancelled stays cancelled"
    );
    assert!(state.summary().is_none() && state.held().is_none());

    let store: Arc<dyn RunBackend> = Arc::new(MemoryBackend::new());
    let restored = GateState::held_in_store(
        Published {
            backend: store,
            run_id: Arc::from("run_1"),
            request_id: 3,
        },
        HeldInput {
            input: json!({"a": 1}),
            reason: "listed".into(),
            summary: "{\"a\":1}".into(),
        },
    );
    assert_eq!(at(&restored), (true, true, true));
    assert_eq!(restored.summary().as_deref(), Some("{\"a\":1}"));
    assert_eq!(restored.published().map(|p| p.request_id), Some(3));
}

#[tokio::test]
async fn resource_and_prompt_requests_go_through_the_hooks() {
    let request = || McpServerCall {
        context: Arc::new(RunContext::default()),
        parent_call_id: "exec_1".into(),
        call_id: "exec_1.2".into(),
        server: "notes".into(),
        method: McpMethod::ResourcesRead,
        params: json!({"uri": "note://1"}),
    };
    let id = "mcp:notes:resources/read";
    let allow = Scripted::new(HookDecision::Allow);
    let executor = Recorder::new(Ok(json!({"contents": []})));
    hooked_request(allow.clone(), request(), executor.clone())
        .await
        .unwrap();
    let event = &allow.events()[0];
    assert_eq!(
        (event.tool_kind, event.tool_id.as_str()),
        ("mcp_request", id)
    );
    assert_eq!(event.parent_call_id.as_deref(), Some("exec_1"));
    assert_eq!(event.input, json!({"uri": "note://1"}));
    assert_audited(
        &allow.records()[0],
        ("mcp_request", id, "exec_1.2", "ok"),
        &json!({"uri": "note://1"}),
        &json!({"contents": []}),
    );

    let rewrite = Scripted::new(HookDecision::Rewrite {
        input: json!({"uri": "note://2"}),
    });
    hooked_request(rewrite.clone(), request(), executor.clone())
        .await
        .unwrap();
    assert_eq!(executor.seen()[1], json!({"uri": "note://2"}));

    let not_params = Scripted::new(HookDecision::Rewrite { input: json!([1]) });
    let err = hooked_request(not_params, request(), executor.clone())
        .await
        .unwrap_err();
    assert_denied(
        &err,
        &format!(
            "a before_tool_call hook rewrote the params of {id} into something that is not an object"
        ),
    );
    let block = Scripted::new(HookDecision::Block {
        reason: "no".into(),
    });
    let err = hooked_request(block.clone(), request(), executor.clone())
        .await
        .unwrap_err();
    assert_denied(
        &err,
        &format!("the request {id} was blocked by a before_tool_call hook: no"),
    );
    assert_eq!(
        executor.seen().len(),
        2,
        "refused requests never reach the server"
    );
    assert!(block.records().is_empty());
}

/// Answers with what the test sends it; `None` once the sender is gone.
struct Asking {
    answer: Mutex<Option<tokio::sync::oneshot::Receiver<Option<ApprovalDecision>>>>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Asking {
    /// An approver, and where the test sends its answer.
    fn new() -> (
        Arc<Asking>,
        tokio::sync::oneshot::Sender<Option<ApprovalDecision>>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let approver = Arc::new(Asking {
            answer: Mutex::new(Some(rx)),
            asked: Mutex::default(),
        });
        (approver, tx)
    }
}

impl Approver for Asking {
    fn ask(&self, request: ApprovalRequest) -> ApprovalFuture {
        self.asked.lock().unwrap().push(request);
        let answer = self.answer.lock().unwrap().take();
        Box::pin(async move {
            match answer {
                Some(rx) => rx.await.ok().flatten(),
                None => None,
            }
        })
    }
}

/// `f`, or a failed test when it hangs (a hung mutant costs a timeout).
async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("still waiting after 20 s"))
}

/// Once the approver was asked.
async fn asked(approver: &Asking) {
    within(async {
        while approver.asked.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

struct Held {
    state: Arc<GateState>,
    run: RunTag,
    woke: flume::Receiver<Msg>,
    task: tokio::task::JoinHandle<Result<Value, ToolCallError>>,
}

/// Starts a call that needs approval, as its own task.
fn held_call(
    registry: &Arc<ApprovalRegistry>,
    approver: Option<Arc<dyn Approver>>,
    executor: Arc<dyn ToolExecutor>,
) -> Held {
    let state = GateState::new();
    let run: RunTag = Arc::new(OnceLock::new());
    let (wake, woke) = flume::unbounded();
    let gate = Gate {
        state: Arc::clone(&state),
        hooks: None,
        approval: Some(GateApproval {
            approver,
            registry: Arc::clone(registry),
            scope: Scope::of(&RunContext::default()),
            owner_key: Arc::from("principal:alice"),
            run: Arc::clone(&run),
            state: Arc::clone(&state),
            wake,
        }),
        recheck: None,
    };
    let task = tokio::spawn(gated(
        gate,
        call_of(tool(Some(ApprovalReason::Declared))),
        executor,
    ));
    Held {
        state,
        run,
        woke,
        task,
    }
}

#[tokio::test]
async fn a_held_call_waits_for_a_decision_and_runs_once_approved() {
    let registry = Arc::new(ApprovalRegistry::default());
    let executor = Recorder::new(Ok(json!(42)));
    let held = held_call(&registry, None, executor.clone());
    assert!(matches!(
        within(held.woke.recv_async()).await,
        Ok(Msg::AwaitingApproval)
    ));
    assert!(held.state.awaiting_decision());
    let held_input = held.state.held().unwrap();
    assert_eq!(held_input.input, json!({"a": 1}));
    assert_eq!(held_input.summary, "{\"a\":1}");
    let [listed] = registry.list(None).try_into().unwrap();
    assert_eq!(listed.run_id, None, "not suspended yet: no run id");
    assert_eq!(
        (listed.call_id.as_str(), listed.tool_id.as_str()),
        ("exec_1.1", TOOL)
    );
    assert_eq!(listed.reason, ApprovalReason::Declared.describe());
    assert_eq!(listed.input_summary, "{\"a\":1}");
    assert!(
        executor.seen().is_empty(),
        "nothing runs before the decision"
    );
    held.run.set("run_1".into()).unwrap();
    registry
        .decide(None, "run_1", "exec_1.1", ApprovalDecision::Approve)
        .unwrap();
    assert_eq!(within(held.task).await.unwrap(), Ok(json!(42)));
    assert_eq!(executor.seen().len(), 1);
    assert!(registry.list(None).is_empty());
}

#[tokio::test]
async fn a_denied_call_rejects_with_the_reason_and_never_runs() {
    let registry = Arc::new(ApprovalRegistry::default());
    let executor = Recorder::new(Ok(json!(42)));
    let held = held_call(&registry, None, executor.clone());
    within(held.woke.recv_async()).await.unwrap();
    held.run.set("run_1".into()).unwrap();
    let deny = ApprovalDecision::Deny {
        reason: "too risky".into(),
    };
    registry.decide(None, "run_1", "exec_1.1", deny).unwrap();
    let err = within(held.task).await.unwrap().unwrap_err();
    assert_eq!(err, denied_call(TOOL, "too risky"));
    assert_denied(
        &err,
        &format!("the call of {TOOL} was denied approval: too risky"),
    );
    assert!(executor.seen().is_empty());
}

#[tokio::test]
async fn an_approvers_answer_decides_and_a_late_one_after_cancelling_denies() {
    for (answer, expect) in [
        (Some(ApprovalDecision::Approve), Ok(json!(7))),
        (
            Some(ApprovalDecision::Deny {
                reason: "no".into(),
            }),
            Err(denied_call(TOOL, "no")),
        ),
    ] {
        let registry = Arc::new(ApprovalRegistry::default());
        let (approver, tx) = Asking::new();
        let held = held_call(
            &registry,
            Some(approver.clone()),
            Recorder::new(Ok(json!(7))),
        );
        asked(&approver).await;
        // Asking: held, but not yet only for approve / deny.
        assert!(held.state.awaiting_approval() && !held.state.awaiting_decision());
        let request = approver.asked.lock().unwrap()[0].clone();
        assert_eq!(
            (
                request.call_id.as_str(),
                request.parent_call_id.as_str(),
                request.tool.id.as_str()
            ),
            ("exec_1.1", "exec_1", TOOL)
        );
        assert_eq!(request.input_summary, "{\"a\":1}");
        tx.send(answer).unwrap();
        assert_eq!(within(held.task).await.unwrap(), expect);
    }

    // An approver that answers nothing leaves the call to approve / deny.
    let registry = Arc::new(ApprovalRegistry::default());
    let (approver, tx) = Asking::new();
    let held = held_call(&registry, Some(approver), Recorder::new(Ok(json!(7))));
    tx.send(None).unwrap();
    assert!(matches!(
        within(held.woke.recv_async()).await,
        Ok(Msg::AwaitingApproval)
    ));
    assert!(held.state.awaiting_decision());
    assert_eq!(registry.list(None).len(), 1);
    held.task.abort();
    assert!(within(held.task).await.unwrap_err().is_cancelled());
    assert!(
        registry.list(None).is_empty(),
        "a dropped call leaves the list"
    );

    // The run cancels the call while the approver thinks; its yes comes
    // too late: the call is denied, not started.
    let registry = Arc::new(ApprovalRegistry::default());
    let (approver, tx) = Asking::new();
    let executor = Recorder::new(Ok(json!(7)));
    let held = held_call(&registry, Some(approver.clone()), executor.clone());
    asked(&approver).await;
    held.state.cancel();
    tx.send(Some(ApprovalDecision::Approve)).unwrap();
    let err = within(held.task).await.unwrap().unwrap_err();
    assert_eq!(err, denied_call(TOOL, "no decision can arrive any more"));
    assert!(executor.seen().is_empty());
}

/// A store that cannot be reached.
struct Down(MemoryBackend);

fn down() -> StoreError {
    StoreError::Unavailable {
        store: "down".into(),
        reason: "connection refused".into(),
    }
}

impl RunBackend for Down {
    fn describe(&self) -> String {
        "down".into()
    }
    fn instance(&self) -> &str {
        self.0.instance()
    }
    fn put(
        &self,
        _: &str,
        _: &str,
        _: &[u8],
        _: Duration,
        _: codemode_store::Bounds,
    ) -> Result<u64, StoreError> {
        Err(down())
    }
    fn claim(
        &self,
        _: &str,
        _: &str,
        _: Option<u64>,
    ) -> Result<codemode_store::Claimed, StoreError> {
        Err(down())
    }
    fn remove(&self, _: &str) -> Result<(), StoreError> {
        Err(down())
    }
    fn put_result(&self, _: &str, _: u32, _: &[u8]) -> Result<(), StoreError> {
        Err(down())
    }
    fn await_result(&self, _: &str, _: u32, _: Duration) -> Result<Option<Vec<u8>>, StoreError> {
        Err(down())
    }
    fn put_held(&self, _: &str, _: u32, _: &[u8]) -> Result<(), StoreError> {
        Err(down())
    }
    fn list_held(&self) -> Result<Vec<codemode_store::HeldCall>, StoreError> {
        Err(down())
    }
    fn decide_held(&self, _: &str, _: u32, _: &[u8]) -> Result<bool, StoreError> {
        Err(down())
    }
    fn start_held(&self, _: &str, _: u32) -> Result<Option<String>, StoreError> {
        Err(down())
    }
    fn await_decision(&self, _: &str, _: u32, _: Duration) -> Result<Option<Vec<u8>>, StoreError> {
        Err(down())
    }
    fn instance_alive(&self, _: &str) -> bool {
        false
    }
    fn stats(&self) -> Result<codemode_store::StoreStats, StoreError> {
        Err(down())
    }
    fn expire(&self) -> Result<usize, StoreError> {
        Err(down())
    }
}

/// A run `run_p` waiting in `store` with call 3 held there.
fn stored_run(store: &Arc<dyn RunBackend>) -> Published {
    let bounds = codemode_store::Bounds {
        max_runs: 10,
        max_bytes: 1 << 20,
    };
    store
        .put(
            "run_p",
            "principal:alice",
            b"rec",
            Duration::from_secs(60),
            bounds,
        )
        .unwrap();
    store.put_held("run_p", 3, b"{}").unwrap();
    Published {
        backend: Arc::clone(store),
        run_id: Arc::from("run_p"),
        request_id: 3,
    }
}

/// A local entry for call `call_id` of `run_p`, published where `published` says.
fn published_entry(
    registry: &Arc<ApprovalRegistry>,
    call_id: &str,
    published: Option<Published>,
) -> (
    PendingGuard,
    tokio::sync::oneshot::Receiver<ApprovalDecision>,
) {
    let gate = GateState::new();
    if let Some(p) = published {
        gate.publish(p);
    }
    let run: RunTag = Arc::new(OnceLock::new());
    run.set("run_p".into()).unwrap();
    let (decide, decided) = tokio::sync::oneshot::channel();
    let guard = registry.insert(Pending {
        gate,
        scope: Scope::of(&RunContext::default()),
        owner_key: Arc::from("principal:alice"),
        run,
        call_id: call_id.into(),
        tool_id: TOOL.into(),
        reason: String::new(),
        summary: "{}".into(),
        context: Arc::new(RunContext::default()),
        decide,
    });
    (guard, decided)
}

#[test]
fn a_published_call_is_decided_in_the_store_first() {
    let store: Arc<dyn RunBackend> = Arc::new(MemoryBackend::new());
    let registry = Arc::new(ApprovalRegistry::default());
    let published = stored_run(&store);
    let (_guard, mut decided) = published_entry(&registry, "c.1", Some(published.clone()));
    let deny = ApprovalDecision::Deny {
        reason: "the store keeps why".into(),
    };
    registry.decide(None, "run_p", "c.1", deny.clone()).unwrap();
    let kept = store
        .await_decision("run_p", 3, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(decode_decision(&kept), deny, "kept with its reason");
    assert_eq!(decided.try_recv().unwrap(), deny);

    // Decided in the store already (by another process): nothing here.
    let (_guard, mut decided) = published_entry(&registry, "c.2", Some(published.clone()));
    assert_eq!(
        registry.decide(None, "run_p", "c.2", ApprovalDecision::Approve),
        Err(ApprovalError::NotPending {
            run_id: "run_p".into(),
            call_id: "c.2".into(),
        })
    );
    assert!(decided.try_recv().is_err(), "the local call was not told");

    // Kept in the store, the decision stands even when this process's
    // call is gone (its watch on the store delivers it wherever it is).
    let other: Arc<dyn RunBackend> = Arc::new(MemoryBackend::new());
    let (_guard, decided) = published_entry(&registry, "c.3", Some(stored_run(&other)));
    drop(decided);
    registry
        .decide(None, "run_p", "c.3", ApprovalDecision::Approve)
        .unwrap();
    // Not listed anywhere: a lost entry is not decided.
    let (_guard, decided) = published_entry(&registry, "c.4", None);
    drop(decided);
    assert!(
        registry
            .decide(None, "run_p", "c.4", ApprovalDecision::Approve)
            .is_err()
    );
}

#[test]
fn a_store_that_cannot_record_the_decision_decides_nothing() {
    let store: Arc<dyn RunBackend> = Arc::new(Down(MemoryBackend::new()));
    let registry = Arc::new(ApprovalRegistry::new(Some(Arc::clone(&store))));
    let published = Published {
        backend: Arc::clone(&store),
        run_id: Arc::from("run_p"),
        request_id: 3,
    };
    let (_guard, mut decided) = published_entry(&registry, "c.1", Some(published));
    let err = registry
        .decide(None, "run_p", "c.1", ApprovalDecision::Approve)
        .unwrap_err();
    assert!(
        matches!(&err, ApprovalError::Store { reason } if reason.contains("connection refused")),
        "{err}"
    );
    assert!(err.to_string().contains("decide again"), "{err}");
    assert!(decided.try_recv().is_err());
    // Still pending here, and listed though the store cannot list.
    assert_eq!(registry.list(None).len(), 1);
    // A call only the store could hold: its error, not "not pending".
    let err = registry
        .decide(None, "run_x", "c.9", ApprovalDecision::Approve)
        .unwrap_err();
    assert!(matches!(err, ApprovalError::Store { .. }), "{err}");
}

#[test]
fn the_list_is_sorted_and_names_each_held_call_once() {
    let store: Arc<dyn RunBackend> = Arc::new(MemoryBackend::new());
    let registry = Arc::new(ApprovalRegistry::new(Some(Arc::clone(&store))));
    let published = stored_run(&store);
    let entry = |call_id: &str| {
        serde_json::to_vec(&StoredApproval {
            call_id: call_id.into(),
            tool_id: TOOL.into(),
            reason: String::new(),
            input_summary: "{}".into(),
            context: RunContext::default(),
            owner_key: "principal:alice".into(),
        })
        .unwrap()
    };
    // c.2 is held here and listed in the store: listed once.
    store.put_held("run_p", 3, &entry("c.2")).unwrap();
    let (_g2, _d2) = published_entry(&registry, "c.2", Some(published));
    let (_g1, _d1) = published_entry(&registry, "c.1", None);
    let bounds = codemode_store::Bounds {
        max_runs: 10,
        max_bytes: 1 << 20,
    };
    let ttl = Duration::from_secs(60);
    // Held only in the store (another process's), in a run sorted first.
    store.put("run_a", "x", b"r", ttl, bounds).unwrap();
    store.put_held("run_a", 1, &entry("c.5")).unwrap();
    // Held only in the store, in a run held here too: listed.
    store.put_held("run_p", 4, &entry("c.6")).unwrap();
    // An entry that is not one of ours is skipped.
    store.put("run_q", "x", b"r", ttl, bounds).unwrap();
    store.put_held("run_q", 1, b"not json").unwrap();
    let listed: Vec<(Option<String>, String)> = registry
        .list(None)
        .into_iter()
        .map(|p| (p.run_id, p.call_id))
        .collect();
    let at = |run: &str, call: &str| (Some(run.to_owned()), call.to_owned());
    assert_eq!(
        listed,
        [
            at("run_a", "c.5"),
            at("run_p", "c.1"),
            at("run_p", "c.2"),
            at("run_p", "c.6")
        ]
    );
    // A cancelled call is no longer listed nor decidable.
    let (_g3, _d3) = published_entry(&registry, "c.0", None);
    let cancelled = registry
        .lock()
        .values()
        .find(|p| p.call_id == "c.0")
        .map(|p| Arc::clone(&p.gate))
        .unwrap();
    cancelled.cancel();
    assert_eq!(registry.list(None).len(), 4);
    assert!(
        registry
            .decide(None, "run_p", "c.0", ApprovalDecision::Approve)
            .is_err()
    );
}

#[tokio::test]
async fn a_held_call_starts_at_most_once_over_every_process() {
    let memory = MemoryBackend::new();
    let elsewhere: Arc<dyn RunBackend> = Arc::new(memory.another_process());
    let store: Arc<dyn RunBackend> = Arc::new(memory);
    let published = stored_run(&store);
    store
        .decide_held("run_p", 3, &encode_decision(&ApprovalDecision::Approve))
        .unwrap();
    start_once(&published, TOOL).await.unwrap();
    // Started by this process: the store says so to whoever asks again.
    start_once(&published, TOOL).await.unwrap();
    let there = Published {
        backend: Arc::clone(&elsewhere),
        ..published.clone()
    };
    let err = start_once(&there, TOOL).await.unwrap_err();
    assert!(err.is_interrupted() && !err.denied);
    assert_eq!(
        err.message,
        format!(
            "the call to {TOOL} was started by another process ({}) that resumed the run; it was not started again here",
            store.instance()
        )
    );
    // The run left the store: nobody else can start it.
    store.remove("run_p").unwrap();
    start_once(&there, TOOL).await.unwrap();
    // A store that cannot record the start: the call does not start.
    let down: Arc<dyn RunBackend> = Arc::new(Down(MemoryBackend::new()));
    let err = start_once(
        &Published {
            backend: down,
            ..published
        },
        TOOL,
    )
    .await
    .unwrap_err();
    assert!(!err.is_interrupted());
    assert!(
        err.message.starts_with(&format!(
            "the run store could not record that the call to {TOOL} starts ("
        )),
        "{}",
        err.message
    );
    assert!(
        err.message.ends_with("); it was not started"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_decision_made_in_the_store_reaches_the_held_call() {
    for (decision, expect) in [
        (encode_decision(&ApprovalDecision::Approve), Ok(json!(5))),
        (
            b"garbage".to_vec(),
            Err(denied_call(
                TOOL,
                "the decision stored for this call cannot be read",
            )),
        ),
    ] {
        let memory = MemoryBackend::new();
        let elsewhere = memory.another_process();
        let store: Arc<dyn RunBackend> = Arc::new(memory);
        let registry = Arc::new(ApprovalRegistry::new(Some(Arc::clone(&store))));
        let executor = Recorder::new(Ok(json!(5)));
        let held = held_call(&registry, None, executor.clone());
        within(held.woke.recv_async()).await.unwrap();
        // The run suspends into the store; another process decides there.
        held.state.publish(stored_run(&store));
        assert!(elsewhere.decide_held("run_p", 3, &decision).unwrap());
        assert_eq!(within(held.task).await.unwrap(), expect);
        assert_eq!(executor.seen().len(), usize::from(expect.is_ok()));
    }
}

#[test]
fn decisions_survive_the_store_and_anything_else_denies() {
    for decision in [
        ApprovalDecision::Approve,
        ApprovalDecision::Deny {
            reason: "why \"quoted\" ✓".into(),
        },
    ] {
        assert_eq!(decode_decision(&encode_decision(&decision)), decision);
    }
    for bytes in [&b""[..], b"{}", b"\"deny\"", b"null"] {
        assert_eq!(
            decode_decision(bytes),
            ApprovalDecision::Deny {
                reason: "the decision stored for this call cannot be read".into()
            }
        );
    }
}

#[test]
fn the_reason_shown_names_the_policy_or_the_hooks() {
    assert_eq!(approval_reason(&tool(None)), "the run's hooks hold it");
    let listed = ApprovalReason::Listed("notes:*".into());
    assert_eq!(
        approval_reason(&tool(Some(listed.clone()))),
        listed.describe()
    );
}

#[test]
fn redaction_keeps_its_bounds_exactly() {
    let bounds = |bytes| Bounds {
        depth: 4,
        string: 8,
        bytes,
    };
    // Exactly at the byte bound, with a string exactly at its bound:
    // shown whole, no note.
    let whole = json!({"k": "12345678"});
    let text = whole.to_string();
    assert_eq!(redacted_json(&whole, bounds(text.len()), "it"), text);
    // One byte more of string: cut and said so.
    let cut = redacted_json(&json!({"k": "123456789"}), bounds(1000), "it");
    assert!(cut.contains("it is 17 bytes"), "{cut}");
    // Four levels are shown, the fifth elided (objects and arrays alike).
    let four = json!({"a": {"b": {"c": {"d": 1}}}});
    assert_eq!(redacted_json(&four, bounds(1000), "it"), four.to_string());
    let five = redacted_json(
        &json!({"a": {"b": {"c": {"d": [1, 2, 3]}}}}),
        bounds(1000),
        "it",
    );
    assert!(five.contains("[…3 items]"), "{five}");
    let arrays = redacted_json(&json!([[[[[1]]]]]), bounds(1000), "it");
    assert!(arrays.starts_with("[[[[\"[…1 items]\"]]]]"), "{arrays}");
    // Cut at every length through multi-byte text: within the bound,
    // never in the middle of a character. On a thread: a cut that never
    // finds a character boundary fails the test instead of hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let wide = json!(["é".repeat(100)]);
        let at = |bytes| {
            let bounds = Bounds {
                depth: 4,
                string: 1000,
                bytes,
            };
            redacted_json(&wide, bounds, "x")
        };
        let note_len = at(0).len();
        let cuts: Vec<(usize, String)> = (note_len..note_len + 12).map(|b| (b, at(b))).collect();
        let _ = done.send((json_len(&wide), cuts));
    });
    let (len, cuts) = finished
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("cutting the summary panicked or did not end within 20 s"));
    for (bytes, text) in cuts {
        assert!(text.len() <= bytes, "{bytes}: {text}");
        assert!(
            text.len() + 1 >= bytes,
            "{bytes}: cut more than a character: {text}"
        );
        let note =
            format!("x is {len} bytes; long strings, deep nesting or the rest are not shown]");
        assert!(text.ends_with(&note), "{text}");
    }
}
