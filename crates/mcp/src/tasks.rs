//! The MCP Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) for
//! `exec` and `wait`.
//!
//! A client that declares the extension gets an `exec` or `wait` that would
//! answer `waiting` as a task instead: the task id is the run id, and the
//! gateway drives the run itself (`wait` after `wait`, each bounded by
//! `timeoutMs`) until it ends. `tasks/get` reports `working`,
//! `input_required` while the run waits only for an approval (decided at
//! the operator endpoint: 2026 clients cannot be asked mid-call),
//! `completed` with the same tool result `exec` would have returned (a
//! failed run is a completed task whose result has `isError`), `failed`
//! (the gateway itself could not drive it) or `cancelled`; `tasks/cancel`
//! aborts the run (its nested calls are cancelled). Clients without the
//! extension keep `waiting` + `wait`.
//!
//! A cell that yields again at once is resumed after a pause that doubles
//! up to 2 s (and such rounds of one holder's tasks start at least 100 ms
//! apart over all of them), and a run still waiting after the runs' TTL is
//! aborted (its
//! task completes with `snapshot_expired`): no task spins a core or runs
//! forever.
//!
//! Tasks live in the process that created them (the run itself may move
//! between replicas through the run store); a finished task is kept for the
//! runs' TTL. Only the principal that created a task sees it; without
//! authentication the task id (the run id: 128 random bits) is the
//! capability.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use codemode_runtime::{CodeModeResult, CodeModeSession};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
};
use serde_json::json;

/// How often a client should poll.
const POLL_INTERVAL_MS: u64 = 500;
/// A cell that yields again at once is resumed after a pause that doubles
/// from the first to the last of these: a task never spins a core.
const FIRST_YIELD_PAUSE: Duration = Duration::from_millis(50);
const LAST_YIELD_PAUSE: Duration = Duration::from_secs(2);
/// Rounds of one holder's tasks that only yielded start at least this far
/// apart, over all its tasks: a client that starts many tasks whose cells
/// yield forever gets about ten such rounds a second, not one per task.
const HOLDER_YIELD_ROUND_SPACING: Duration = Duration::from_millis(100);
/// Tasks held at once; past it the oldest finished one goes first, and
/// with none finished a new task is refused (the run stays a plain
/// `waiting` result).
const MAX_TASKS: usize = 4096;
/// Tasks one holder (a principal, else a client address) may hold at once:
/// an eighth of the table, so one client cannot take it from the others.
const MAX_TASKS_PER_HOLDER: usize = MAX_TASKS / 8;

/// Who asked for a task.
pub(crate) struct Requester {
    /// The principal (`None`: no authentication): only it sees the task.
    pub(crate) principal: Option<String>,
    /// Whose share of the table the task takes (the principal, else the
    /// client's address).
    pub(crate) holder: String,
    /// Admits each `wait` of the driver like a call of the requester
    /// (`auth.maxConcurrentExecs`): a guard held while it runs, or `None`
    /// while the requester is at its limit (the driver waits its turn).
    pub(crate) admit: Admission,
}

/// See [`Requester::admit`].
pub(crate) type Admission = Arc<dyn Fn() -> Option<Box<dyn Send>> + Send + Sync>;

/// The tasks of one gateway process.
#[derive(Default)]
pub(crate) struct Tasks {
    entries: Mutex<HashMap<String, Arc<TaskEntry>>>,
    pacer: Arc<HolderPacer>,
}

/// When each holder's next round of a task that only yields may start.
#[derive(Default)]
struct HolderPacer {
    next: Mutex<HashMap<String, Instant>>,
}

impl HolderPacer {
    /// Takes `holder`'s next turn: when its round may start (now, or
    /// [`HOLDER_YIELD_ROUND_SPACING`] after the turn taken before).
    fn turn(&self, holder: &str) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        if next.len() > 1024 {
            next.retain(|_, at| *at > now);
        }
        let at = next.get(holder).map_or(now, |&at| at.max(now));
        next.insert(holder.to_owned(), at + HOLDER_YIELD_ROUND_SPACING);
        at
    }
}

struct TaskEntry {
    /// The principal that created it (`None`: no authentication).
    owner: Option<String>,
    /// Whose share of the table it takes (the principal, else the client's
    /// address).
    holder: String,
    admit: Admission,
    /// Shared by every task of the process (see [`HolderPacer`]).
    pacer: Arc<HolderPacer>,
    created_at: String,
    ttl: Duration,
    state: Mutex<TaskState>,
    /// The session driving the run; let go when the task ends (so a
    /// finished task does not keep its client's session alive).
    session: Mutex<Option<Arc<CodeModeSession>>>,
}

struct TaskState {
    payload: TaskPayload,
    message: Option<String>,
    updated_at: String,
    finished: Option<Instant>,
    cancel_requested: bool,
    /// The call id of the `wait` driving the run now.
    driving: Option<String>,
}

/// Makes room for one more task of `holder`: past its share, its oldest
/// finished task goes; past the table's size, the oldest finished task of
/// anyone. `false` when that would take a running task.
fn make_room(entries: &mut HashMap<String, Arc<TaskEntry>>, holder: &str) -> bool {
    let oldest_finished = |entries: &HashMap<String, Arc<TaskEntry>>, of: Option<&str>| {
        entries
            .iter()
            .filter(|(_, e)| of.is_none_or(|h| e.holder == h))
            .filter_map(|(id, e)| e.lock().finished.map(|at| (at, id.clone())))
            .min()
            .map(|(_, id)| id)
    };
    let held = entries.values().filter(|e| e.holder == holder).count();
    if held >= MAX_TASKS_PER_HOLDER {
        match oldest_finished(entries, Some(holder)) {
            Some(id) => entries.remove(&id),
            None => return false,
        };
    }
    if entries.len() >= MAX_TASKS {
        match oldest_finished(entries, None) {
            Some(id) => entries.remove(&id),
            None => return false,
        };
    }
    true
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl TaskEntry {
    fn lock(&self) -> std::sync::MutexGuard<'_, TaskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn task(&self, id: &str) -> DetailedTask {
        let state = self.lock();
        let mut task = Task::new(
            id,
            state.payload.status(),
            &self.created_at,
            &state.updated_at,
        )
        .with_ttl_ms(self.ttl.as_millis() as u64)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
        if let Some(message) = &state.message {
            task = task.with_status_message(message.clone());
        }
        DetailedTask::new(task, state.payload.clone())
    }

    /// The session driving the run, while the task has not ended.
    fn session(&self) -> Option<Arc<CodeModeSession>> {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, payload: TaskPayload, message: Option<String>) {
        let mut state = self.lock();
        if state.payload.status().is_terminal() {
            return;
        }
        if payload.status().is_terminal() {
            state.finished = Some(Instant::now());
            state.driving = None;
            self.session
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
        }
        state.payload = payload;
        state.message = message;
        state.updated_at = now();
    }
}

fn unknown_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no task \"{}\" here (it finished more than snapshotTtlSeconds ago, belongs to another principal, was created on another gateway replica, or never existed)",
            id.chars().take(80).collect::<String>()
        ),
        None,
    )
}

/// The status of a run that waits, as a task status.
fn waiting_payload(result: &CodeModeResult) -> (TaskPayload, Option<String>) {
    match result.to_json().get("reason").and_then(|r| r.as_str()) {
        Some("approval") => (
            TaskPayload::InputRequired {
                input_requests: Default::default(),
            },
            Some(
                "a nested call awaits approval: an operator decides it at the gateway's operator endpoint (codemode approvals)"
                    .into(),
            ),
        ),
        _ => (TaskPayload::Working, Some("the run waits for its nested calls".into())),
    }
}

impl Tasks {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskEntry>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops finished tasks past their TTL.
    fn prune(entries: &mut HashMap<String, Arc<TaskEntry>>) {
        entries.retain(|_, e| e.lock().finished.is_none_or(|at| at.elapsed() < e.ttl));
    }

    /// Makes `run_id` (whose exec/wait answered `waiting`) a task driven by
    /// the gateway; `None` when the table is full (the caller answers
    /// `waiting` as usual).
    pub(crate) fn start(
        self: &Arc<Self>,
        run_id: &str,
        waiting: &CodeModeResult,
        who: Requester,
        session: Arc<CodeModeSession>,
        ttl: Duration,
        to_result: impl Fn(&CodeModeResult) -> CallToolResult + Send + Sync + 'static,
    ) -> Option<CreateTaskResult> {
        let created_at = now();
        let (payload, message) = waiting_payload(waiting);
        let entry = Arc::new(TaskEntry {
            owner: who.principal,
            holder: who.holder,
            admit: who.admit,
            pacer: Arc::clone(&self.pacer),
            created_at: created_at.clone(),
            ttl,
            state: Mutex::new(TaskState {
                payload,
                message,
                updated_at: created_at,
                finished: None,
                cancel_requested: false,
                driving: None,
            }),
            session: Mutex::new(Some(session)),
        });
        {
            let mut entries = self.entries();
            Tasks::prune(&mut entries);
            if !make_room(&mut entries, &entry.holder) {
                tracing::warn!(
                    holder = %entry.holder,
                    tasks = entries.len(),
                    "no room in the task table for {} (its share is {MAX_TASKS_PER_HOLDER} running tasks, the table's {MAX_TASKS}): answering waiting instead of a task",
                    entry.holder
                );
                return None;
            }
            entries.insert(run_id.to_owned(), Arc::clone(&entry));
        }
        let seed = entry.task(run_id).task;
        let run_id = run_id.to_owned();
        tokio::spawn(drive(entry, run_id, to_result));
        Some(CreateTaskResult::new(seed))
    }

    fn find(&self, id: &str, principal: Option<&str>) -> Result<Arc<TaskEntry>, ErrorData> {
        let mut entries = self.entries();
        Tasks::prune(&mut entries);
        match entries.get(id) {
            Some(entry) if entry.owner.as_deref() == principal => Ok(Arc::clone(entry)),
            _ => Err(unknown_task(id)),
        }
    }

    /// `tasks/get`.
    pub(crate) fn get(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> Result<GetTaskResult, ErrorData> {
        let entry = self.find(id, principal)?;
        Ok(GetTaskResult::new(entry.task(id)))
    }

    /// `tasks/cancel`: aborts the run (its drive stops within
    /// milliseconds, its nested calls are cancelled).
    pub(crate) fn cancel(&self, id: &str, principal: Option<&str>) -> Result<(), ErrorData> {
        let entry = self.find(id, principal)?;
        let driving = {
            let mut state = entry.lock();
            if state.payload.status().is_terminal() {
                return Ok(());
            }
            state.cancel_requested = true;
            state.driving.clone()
        };
        let session = entry.session();
        if let Some(session) = session {
            if let Some(call_id) = driving {
                session.cancel_call(&call_id);
            }
            session.abort_run(id);
        }
        entry.set(
            TaskPayload::Cancelled,
            Some("cancelled by the client".into()),
        );
        tracing::info!(task = %id, "task cancelled: run aborted");
        Ok(())
    }
}

/// Drives the run of a task to its end, one `wait` at a time.
async fn drive(
    entry: Arc<TaskEntry>,
    run_id: String,
    to_result: impl Fn(&CodeModeResult) -> CallToolResult,
) {
    let mut round = 0u64;
    // A `runtime_busy` that ended the run (its store could not keep
    // it) is the task's result, not the "unknown run" of the next wait.
    let mut unavailable: Option<CodeModeResult> = None;
    let started = Instant::now();
    let mut yield_pause = Duration::ZERO;
    loop {
        if started.elapsed() > entry.ttl {
            // The run had the runs' whole TTL and still waits (a cell that
            // yields forever): the gateway stops driving it.
            give_up(&entry, &run_id, &to_result);
            return;
        }
        round += 1;
        let call_id = format!("task:{run_id}:{round}");
        {
            let mut state = entry.lock();
            if state.cancel_requested || state.payload.status().is_terminal() {
                return;
            }
            state.driving = Some(call_id.clone());
        }
        // Counted like the requester's own calls; at its limit, wait.
        let Some(running) = (entry.admit)() else {
            tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
            round -= 1;
            continue;
        };
        let session = entry.session();
        let Some(session) = session else { return };
        let result = session
            .wait_call(
                &call_id,
                &json!({ "runId": run_id }),
                codemode_runtime::CallOptions::default(),
            )
            .await;
        drop(session);
        drop(running);
        if entry.lock().cancel_requested {
            entry.set(
                TaskPayload::Cancelled,
                Some("cancelled by the client".into()),
            );
            return;
        }
        match &result {
            CodeModeResult::Waiting { .. } => {
                let (payload, message) = waiting_payload(&result);
                entry.set(payload, message);
                if result.to_json().get("reason").and_then(|r| r.as_str()) == Some("yield") {
                    yield_pause = (yield_pause * 2).clamp(FIRST_YIELD_PAUSE, LAST_YIELD_PAUSE);
                    tokio::time::sleep(yield_pause).await;
                    // And its turn among its holder's other yielding tasks.
                    let turn = entry.pacer.turn(&entry.holder);
                    tokio::time::sleep_until(turn.into()).await;
                } else {
                    yield_pause = Duration::ZERO;
                }
            }
            CodeModeResult::Failed {
                code: Some(codemode_runtime::ErrorCode::RuntimeBusy),
                ..
            } => {
                // The run keeps waiting (a full VM queue, an unreachable
                // store): try again shortly.
                unavailable = Some(result);
                tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
            }
            _ => {
                let result = match (&result, unavailable) {
                    (
                        CodeModeResult::Failed {
                            code: Some(codemode_runtime::ErrorCode::InvalidInput),
                            ..
                        },
                        Some(ended),
                    ) => ended,
                    _ => result,
                };
                let tool_result = to_result(&result);
                let payload = match serde_json::to_value(&tool_result) {
                    Ok(serde_json::Value::Object(result)) => TaskPayload::Completed { result },
                    _ => TaskPayload::Failed {
                        error: failed_error("the run's result could not be encoded"),
                    },
                };
                entry.set(payload, None);
                return;
            }
        }
    }
}

/// Ends a task whose run outlived the runs' TTL while the gateway drove
/// it: the run is aborted (its nested calls cancelled) and the task
/// completes with a `snapshot_expired` result saying why.
fn give_up(
    entry: &TaskEntry,
    run_id: &str,
    to_result: &impl Fn(&CodeModeResult) -> CallToolResult,
) {
    let session = entry.session();
    if let Some(session) = session {
        session.abort_run(run_id);
    }
    let result = CodeModeResult::failure(
        codemode_runtime::ErrorCode::SnapshotExpired,
        format!(
            "the gateway drove this run for snapshotTtlSeconds ({} s) and it has not finished (it kept yielding or waiting); it was aborted",
            entry.ttl.as_secs()
        ),
        codemode_runtime::Telemetry::default(),
    );
    let payload = match serde_json::to_value(to_result(&result)) {
        Ok(serde_json::Value::Object(result)) => TaskPayload::Completed { result },
        _ => TaskPayload::Failed {
            error: failed_error("the run's result could not be encoded"),
        },
    };
    entry.set(payload, None);
    tracing::info!(task = %run_id, "task ended: its run outlived snapshotTtlSeconds");
}

fn failed_error(message: &str) -> JsonObject {
    match json!({ "code": -32603, "message": message }) {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
    use super::*;

    fn entry(holder: &str, finished: Option<Instant>) -> Arc<TaskEntry> {
        let waiting = CodeModeResult::failure(
            codemode_runtime::ErrorCode::Timeout,
            "x",
            codemode_runtime::Telemetry::default(),
        );
        let (payload, message) = waiting_payload(&waiting);
        Arc::new(TaskEntry {
            owner: None,
            holder: holder.to_owned(),
            admit: Arc::new(|| Some(Box::new(()) as Box<dyn Send>)),
            pacer: Arc::default(),
            created_at: now(),
            ttl: Duration::from_secs(60),
            state: Mutex::new(TaskState {
                payload,
                message,
                updated_at: now(),
                finished,
                cancel_requested: false,
                driving: None,
            }),
            session: Mutex::new(None),
        })
    }

    fn fill(entries: &mut HashMap<String, Arc<TaskEntry>>, holder: &str, n: usize, finished: bool) {
        let start = Instant::now();
        for i in 0..n {
            let at = finished.then(|| start + Duration::from_millis(i as u64));
            entries.insert(format!("{holder}-{i}"), entry(holder, at));
        }
    }

    #[test]
    fn one_holder_gets_its_share_of_the_table_and_no_more() {
        let mut entries = HashMap::new();
        fill(&mut entries, "addr:10.0.0.1", MAX_TASKS_PER_HOLDER, false);
        assert!(
            !make_room(&mut entries, "addr:10.0.0.1"),
            "its share is running"
        );
        assert!(
            make_room(&mut entries, "principal:bob"),
            "others still get tasks"
        );
        assert_eq!(entries.len(), MAX_TASKS_PER_HOLDER, "nothing was taken");
    }

    #[test]
    fn a_holder_at_its_share_makes_room_with_its_own_oldest_finished_task() {
        let mut entries = HashMap::new();
        fill(&mut entries, "principal:alice", MAX_TASKS_PER_HOLDER, true);
        entries.insert("bob-0".into(), entry("principal:bob", Some(Instant::now())));
        assert!(make_room(&mut entries, "principal:alice"));
        assert!(
            !entries.contains_key("principal:alice-0"),
            "its oldest went"
        );
        assert!(entries.contains_key("principal:alice-1"));
        assert!(entries.contains_key("bob-0"), "another holder's task stays");
    }

    #[test]
    fn a_full_table_makes_room_with_the_oldest_finished_task_or_refuses() {
        let mut entries = HashMap::new();
        for h in 0..8 {
            fill(
                &mut entries,
                &format!("addr:10.0.0.{h}"),
                MAX_TASKS_PER_HOLDER,
                h == 3,
            );
        }
        assert_eq!(entries.len(), MAX_TASKS);
        assert!(make_room(&mut entries, "principal:new"));
        assert!(
            !entries.contains_key("addr:10.0.0.3-0"),
            "the oldest finished went"
        );
        assert_eq!(entries.len(), MAX_TASKS - 1);
        let mut running = HashMap::new();
        for h in 0..8 {
            fill(
                &mut running,
                &format!("addr:10.0.1.{h}"),
                MAX_TASKS_PER_HOLDER,
                false,
            );
        }
        assert!(
            !make_room(&mut running, "principal:new"),
            "no running task is taken"
        );
    }

    /// One holder's yielding tasks take turns over all of them; another
    /// holder's turns do not wait for them.
    #[test]
    fn a_holders_yield_rounds_are_spaced_over_all_its_tasks() {
        let pacer = HolderPacer::default();
        let start = Instant::now();
        let turns: Vec<Instant> = (0..5).map(|_| pacer.turn("mallory")).collect();
        for pair in turns.windows(2) {
            assert_eq!(pair[1] - pair[0], HOLDER_YIELD_ROUND_SPACING);
        }
        assert!(turns[4] - start >= HOLDER_YIELD_ROUND_SPACING * 4);
        let other = pacer.turn("alice");
        assert!(
            other - start < HOLDER_YIELD_ROUND_SPACING,
            "alice does not queue behind mallory"
        );
    }
}
