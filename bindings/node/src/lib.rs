//! The npm package's native addon (`codemode.node`): codemode's runtime
//! in-process for Node.js, and the `codemode` command line.
//!
//! The surface here is small and JSON-shaped on purpose; `index.js` (the
//! package's entry) builds the friendly API on it: `new CodeMode({ tools,
//! mcpServers, config, store })`, `exec`, `wait`, `surface`. The session
//! itself, the options and the answer protocol are `codemode-bindings`'
//! (shared with the Python package); this crate only connects them to
//! Node: requests go to one JS dispatcher through a thread-safe function
//! (Node's event loop is never blocked), answers come back by
//! `completeRequest`.

use std::sync::Arc;

use codemode_bindings::{Callbacks, Control, Host, Opened};
use napi::Status;
use napi::bindgen_prelude::{Error, Result, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;

/// A JS `(json: string) => void`, called without waiting; unref'd, so it
/// does not keep Node alive by itself (a pending `exec` does).
type JsNotify = ThreadsafeFunction<String, Unknown<'static>, String, Status, false, true>;

/// Node's side of a session: the dispatcher for tool calls, approvals
/// and hooks, or a progress callback.
struct NodeHost {
    callback: JsNotify,
}

impl Host for NodeHost {
    fn send(&self, request: String) -> bool {
        self.callback
            .call(request, ThreadsafeFunctionCallMode::NonBlocking)
            == Status::Ok
    }

    fn progress(&self, event: String) {
        // A full queue or a closing environment loses one update, never the run.
        let _ = self
            .callback
            .call(event, ThreadsafeFunctionCallMode::NonBlocking);
    }
}

fn host(callback: JsNotify) -> Arc<dyn Host> {
    Arc::new(NodeHost { callback })
}

fn error(message: impl Into<String>) -> Error {
    Error::from_reason(message.into())
}

/// Runs the `codemode` command line with `args` (the program name
/// first) on the calling thread and returns its exit status. The npm
/// package's `codemode` bin calls it once, then exits with the status.
#[napi]
pub fn run_cli(args: Vec<String>) -> u32 {
    u32::from(codemode::run_main(args).0)
}

/// The answer (JSON) of request `token`; `false` when nobody waits for it
/// any more (cancelled, or answered already).
#[napi]
pub fn complete_request(token: i64, answer: String) -> bool {
    u64::try_from(token).is_ok_and(|token| codemode_bindings::complete(token, answer))
}

/// An open code-mode session (JS: the native half of `CodeMode`).
#[napi]
pub struct NativeCodeMode {
    opened: Opened,
}

/// Opens a session (see `codemode_bindings::open`): `dispatch` receives
/// every tool call, approval and hook request.
#[napi]
pub async fn open(
    options: String,
    dispatch: JsNotify,
    approve: bool,
    before_tool_call: bool,
) -> Result<NativeCodeMode> {
    let callbacks = Callbacks {
        approve,
        hook: before_tool_call,
    };
    let opened = codemode_bindings::open(&options, host(dispatch), callbacks)
        .await
        .map_err(|e| error(e.to_string()))?;
    Ok(NativeCodeMode { opened })
}

#[napi]
impl NativeCodeMode {
    /// Runs `exec` with its JSON input (`{ code, language? }`); resolves
    /// to the result's JSON.
    #[napi]
    pub async fn exec(
        &self,
        input: String,
        call_id: Option<String>,
        progress: Option<JsNotify>,
    ) -> Result<String> {
        self.opened
            .call(Control::Exec, &input, call_id, progress.map(host))
            .await
            .map_err(error)
    }

    /// Runs `wait` with its JSON input (`{ runId }`).
    #[napi]
    pub async fn wait(
        &self,
        input: String,
        call_id: Option<String>,
        progress: Option<JsNotify>,
    ) -> Result<String> {
        self.opened
            .call(Control::Wait, &input, call_id, progress.map(host))
            .await
            .map_err(error)
    }

    /// The model-visible tools, `exec` and `wait`, as JSON.
    #[napi]
    pub fn surface(&self) -> String {
        self.opened.surface()
    }

    /// The hidden catalog's ids, for the embedder (never the model).
    #[napi]
    pub fn catalog_ids(&self) -> Vec<String> {
        self.opened.catalog_ids()
    }

    /// Config warnings and MCP servers that did not start.
    #[napi]
    pub fn diagnostics(&self) -> Vec<String> {
        self.opened.diagnostics()
    }

    /// Calls awaiting approval, as JSON.
    #[napi]
    pub fn pending_approvals(&self) -> String {
        self.opened.pending_approvals()
    }

    /// Approves a waiting call: it starts now.
    #[napi]
    pub fn approve(&self, run_id: String, call_id: String) -> Result<()> {
        self.opened.approve(&run_id, &call_id).map_err(error)
    }

    /// Denies a waiting call: the guest sees `approval_denied`.
    #[napi]
    pub fn deny(&self, run_id: String, call_id: String, reason: String) -> Result<()> {
        self.opened.deny(&run_id, &call_id, &reason).map_err(error)
    }

    /// Ends the session: running cells are aborted, MCP servers stopped.
    #[napi]
    pub fn close(&self) {
        self.opened.close();
    }
}
