//! Test tools for runtime integration tests: a scripted executor whose
//! tools answer at once, after a delay, when a gate opens, with an error or
//! with a panic, and which records what it saw.
#![allow(dead_code, reason = "each test file uses a different part")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use codemode_runtime::{
    Catalog, CodeModeConfig, CodeModeRuntime, CodeModeSession, NestedCall, RunContext,
    RuntimeOptions, ToolCallError, ToolDefinition, ToolExecutor, ToolFuture, ToolPolicy,
    ToolSource,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// How a scripted tool answers.
#[derive(Clone)]
pub enum Behaviour {
    /// This value, at once.
    Value(Value),
    /// The call's input, at once.
    Echo,
    /// `{ n: input.n * 2 }`, at once.
    Double,
    /// Fails with this message.
    Fail(String),
    /// This value after a delay.
    Delay(Duration, Value),
    /// Its input once a permit of the gate is available.
    Gate(Arc<Semaphore>),
    /// Panics.
    Panic,
}

/// An executor over scripted tools, keyed by catalog id.
#[derive(Clone, Default)]
pub struct Scripted {
    behaviours: Arc<Mutex<HashMap<String, Behaviour>>>,
    pub calls: Arc<Mutex<Vec<NestedCall>>>,
    pub finished: Arc<AtomicUsize>,
    pub cancelled: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    pub max_running: Arc<AtomicUsize>,
}

/// Counts a call as cancelled when its future is dropped unfinished.
struct CancelGuard {
    done: bool,
    cancelled: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        if !self.done {
            self.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Scripted {
    pub fn with(self, id: &str, behaviour: Behaviour) -> Scripted {
        self.behaviours
            .lock()
            .unwrap()
            .insert(id.to_owned(), behaviour);
        self
    }

    pub fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

impl ToolExecutor for Scripted {
    fn call(&self, call: NestedCall) -> ToolFuture {
        self.calls.lock().unwrap().push(call.clone());
        let behaviour = self.behaviours.lock().unwrap().get(&call.tool.id).cloned();
        let n = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(n, Ordering::SeqCst);
        let guard = CancelGuard {
            done: false,
            cancelled: Arc::clone(&self.cancelled),
            running: Arc::clone(&self.running),
        };
        let finished = Arc::clone(&self.finished);
        Box::pin(async move {
            // Move the whole guard in (not just the field the body writes).
            let mut guard = guard;
            let out = match behaviour {
                None => Err(ToolCallError::new("no such scripted tool")),
                Some(Behaviour::Value(v)) => Ok(v),
                Some(Behaviour::Echo) => Ok(call.input.clone()),
                Some(Behaviour::Double) => {
                    Ok(json!({ "n": call.input["n"].as_i64().unwrap_or(0) * 2 }))
                }
                Some(Behaviour::Fail(m)) => Err(ToolCallError::new(m)),
                Some(Behaviour::Delay(d, v)) => {
                    tokio::time::sleep(d).await;
                    Ok(v)
                }
                Some(Behaviour::Gate(gate)) => {
                    // One permit opens one call.
                    if let Ok(permit) = gate.acquire().await {
                        permit.forget();
                    }
                    Ok(call.input.clone())
                }
                Some(Behaviour::Panic) => panic!("scripted panic"),
            };
            guard.done = true;
            finished.fetch_add(1, Ordering::SeqCst);
            out
        })
    }
}

pub fn tool(source: ToolSource, owner: &str, name: &str, description: &str) -> ToolDefinition {
    ToolDefinition::new(source, owner, name)
        .with_description(description)
        .with_parameters(json!({"type": "object", "properties": {"n": {"type": "number"}}}))
}

/// A tool from its catalog id `source:owner:name`, as [`tool`] makes it.
pub fn tool_at(id: &str, description: &str) -> ToolDefinition {
    let parts: Vec<&str> = id.splitn(3, ':').collect();
    let [source, owner, name] = parts[..] else {
        panic!("{id} is not source:owner:name")
    };
    let source = ToolSource::parse(source).unwrap_or_else(|| panic!("{id}: unknown source"));
    tool(source, owner, name, description)
}

/// Asserts that `messages` is an array of as many strings as `expected`,
/// each containing its counterpart.
pub fn assert_each_contains(messages: &Value, expected: &[&str]) {
    let messages: Vec<&str> = messages
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {messages}"))
        .iter()
        .map(|m| m.as_str().unwrap_or_else(|| panic!("not a string: {m}")))
        .collect();
    assert_eq!(messages.len(), expected.len(), "{messages:?}");
    for (message, part) in messages.iter().zip(expected) {
        assert!(message.contains(part), "{part:?} not in {messages:?}");
    }
}

pub fn runtime_with(config: &str, options: RuntimeOptions) -> CodeModeRuntime {
    let (config, _) = CodeModeConfig::from_json5(config).unwrap();
    CodeModeRuntime::with_options(config, options).expect("runtime starts")
}

/// A shared runtime: timeout 1 s, 4 pending calls, search default 3.
pub fn shared() -> &'static CodeModeRuntime {
    static RUNTIME: OnceLock<CodeModeRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        runtime_with(
            "{tools:{codeMode:{enabled:true, timeoutMs: 1000, maxPendingToolCalls: 4, searchDefaultLimit: 3, maxSearchLimit: 10}}}",
            RuntimeOptions::default(),
        )
    })
}

pub fn context(agent: &str, session: &str, run: &str) -> RunContext {
    RunContext {
        agent_id: Some(agent.into()),
        session_id: Some(session.into()),
        session_key: Some(format!("key-{session}")),
        agent_run_id: Some(run.into()),
        sender: Some("tester".into()),
        channel: Some("test".into()),
    }
}

/// A session over `tools` with a scripted executor, in a unique scope.
pub fn session(
    runtime: &CodeModeRuntime,
    tools: Vec<ToolDefinition>,
    executor: Scripted,
) -> CodeModeSession {
    let run = format!("run-{}", codemode_sandbox::random_u64());
    session_in(
        runtime,
        context("agent", "s1", &run),
        tools,
        &ToolPolicy::default(),
        executor,
    )
}

pub fn session_in(
    runtime: &CodeModeRuntime,
    context: RunContext,
    tools: Vec<ToolDefinition>,
    policy: &ToolPolicy,
    executor: Scripted,
) -> CodeModeSession {
    let catalog = Catalog::build(tools, policy).unwrap();
    runtime.session(context, catalog, Arc::new(executor))
}

pub async fn exec(session: &CodeModeSession, code: &str) -> Value {
    session.exec(&json!({ "code": code })).await.to_json()
}

pub async fn wait(session: &CodeModeSession, run_id: &Value) -> Value {
    session.wait(&json!({ "runId": run_id })).await.to_json()
}

/// Waits until `condition` holds (checked every 5 ms), failing after 10 s:
/// tests wait for what they check, not for a fixed time.
pub async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            std::time::Instant::now() < until,
            "timed out after 10 s waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One cell in `language` in a fresh session of the shared runtime with no
/// tools; its result as JSON.
pub async fn run(code: &str, language: &str) -> Value {
    let s = session(shared(), Vec::new(), Scripted::default());
    s.exec(&json!({ "code": code, "language": language }))
        .await
        .to_json()
}
