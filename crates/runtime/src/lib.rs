//! Code mode for agent runtimes: the `tools.codeMode` config, the hidden
//! per-run tool catalog, nested tool calls, and the `exec` / `wait` contract
//! with its result union, on top of [`codemode_sandbox`].
//!
//! # Embedding
//!
//! One [`CodeModeRuntime`] per process; one [`CodeModeSession`] per agent
//! run, made from the run's [`RunContext`], its [`Catalog`] (built from the
//! effective [`ToolDefinition`]s after policy) and a [`ToolExecutor`] that
//! runs nested calls through the host's normal tool path.
//!
//! ```no_run
//! use std::sync::Arc;
//! use codemode_runtime::*;
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let (config, _diagnostics) = CodeModeConfig::from_json5("{ tools: { codeMode: true } }")?;
//! let runtime = CodeModeRuntime::new(config)?; // once per process
//!
//! // Per agent run: context, effective tools, executor.
//! let tools = vec![ToolDefinition::new(ToolSource::Openclaw, "core", "weather")
//!     .with_description("Weather for a city")
//!     .with_parameters(json!({"type": "object", "properties": {"city": {"type": "string"}}}))];
//! let executor = |call: NestedCall| -> ToolFuture {
//!     Box::pin(async move { Ok(json!({ "city": call.input["city"], "tempC": 21 })) })
//! };
//! let context = RunContext { session_id: Some("s1".into()), agent_run_id: Some("r1".into()), ..Default::default() };
//! let session = runtime.session(context, Catalog::build(tools, &ToolPolicy::default())?, Arc::new(executor));
//!
//! // The provider payload holds exactly these two tools.
//! let model_tools = session.model_tools();
//!
//! // The model's exec call: nested calls run through the executor.
//! let result = session
//!     .exec_call("toolu_1", &json!({ "code": "const w = await tools.weather({ city: 'Oslo' }); return w.tempC" }), CallOptions::default())
//!     .await;
//! match &result {
//!     CodeModeResult::Waiting { run_id, .. } => {
//!         // Slow calls: answer the model with `result`; its `wait` resumes.
//!         let _ = session.wait_call("toolu_2", &json!({ "runId": run_id }), CallOptions::default()).await;
//!     }
//!     _ => println!("{}", result.to_json()),
//! }
//! # let _ = model_tools; Ok(()) }
//! ```
//!
//! A complete program: `examples/embed.rs`
//! (`cargo run -p codemode-runtime --example embed`).
//!
//! # Guarantees
//! - The guest sees only its run's catalog (`ALL_TOOLS`, `tools.*`; MCP
//!   entries only through the `MCP` namespace); every bridge request is
//!   re-validated by the host; denied and control tools do not exist there.
//! - Nested calls that finish within `timeoutMs` are delivered in the same
//!   exec/wait; calls still running at the deadline keep running while the
//!   run waits as a snapshot.
//! - Runs are bound to their scope (agent, session, agent run); abort,
//!   expiry, run end and shutdown cancel in-flight calls and drop snapshots.

mod activation;
mod catalog;
mod config;
mod control;
pub mod debug;
mod executor;
#[doc(hidden)]
pub mod fuzzing;
mod handles;
mod input;
mod payload;
pub mod progress;
mod result;
mod run;
mod runtime;
mod session;
mod slots;
mod suggest;
mod trajectory;

pub use catalog::namespaces;

pub use activation::{ActivationError, ModelSurface, RunKind, activate, activate_document};
pub use catalog::surface::{
    ExecHookMetadata, ModelTool, SurfaceError, check_model_tools, exec_hook_metadata, model_tools,
    result_schema,
};
pub use catalog::{
    ApprovalMode, ApprovalReason, CONTROL_TOOL_NAMES, Catalog, CatalogEntry, CatalogError,
    Decision, Excluded, GatePolicy, OwnerPolicy, ToolDefinition, ToolPolicy, ToolSource,
    glob_matches,
};
/// The run store interface and its durable backends.
pub use codemode_store;
pub use executor::live::CallCanceller;
pub use executor::{
    McpServerCall, NestedCall, RunContext, ToolCallError, ToolExecutor, ToolFuture,
};
pub use namespaces::{
    NamespaceError, NamespaceRegistration, NamespaceRegistry, ScopeContext, ScopeValue,
    namespace_tool, namespace_tool_with,
};
pub use payload::{PayloadError, PayloadShape};
pub use progress::{CallProgress, ProgressSink, ProgressUpdate};
pub use session::{CallOptions, CodeModeSession};
pub use trajectory::{Trajectory, TrajectoryEvent};

/// Whether the TypeScript transformer was ever set up in this process: it is
/// set up by the first TypeScript cell, never by JavaScript cells.
pub fn typescript_transformer_initialised() -> bool {
    codemode_transform::typescript_transformer_initialised()
}

pub use catalog::declarations::{ApiFile, ApiFiles, ApiPathError};
pub use catalog::guest_api::guest_api;
pub use catalog::mcp::{
    McpMethod, McpNamespace, McpServerInfo, McpServerView, McpToolView, js_identifier,
};
pub use config::reader as config_reader;
pub use config::{CodeModeConfig, ConfigError, Diagnostic, Language};
pub use control::{
    ApprovalDecision, ApprovalError, ApprovalFuture, ApprovalRequest, Approver, HookDecision,
    HookFuture, MAX_INPUT_SUMMARY_BYTES, PendingApproval, ToolCallEvent, ToolCallRecord, ToolHooks,
    approval_reason, input_summary,
};
pub use input::{ExecInput, InputError, WaitInput};
pub use result::{
    CallOutcome, CallReceipt, CodeModeResult, ErrorCode, MAX_CALL_RECEIPTS, Output,
    PendingToolCall, Receipts, SnapshotEvent, Telemetry, WaitReason,
};
pub use run::host::{DurableStore, RuntimeOptions};
pub use runtime::{CodeModeRuntime, RuntimeError};
