//! Code mode for agent runtimes: the `tools.codeMode` config, the `exec` /
//! `wait` contract and its result union, on top of [`codemode_sandbox`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use codemode_runtime::{CodeModeConfig, CodeModeRuntime};
//!
//! let (config, diagnostics) = CodeModeConfig::from_json5("{ tools: { codeMode: { enabled: true } } }")?;
//! for d in &diagnostics { eprintln!("config: {d}"); }
//! let runtime = CodeModeRuntime::new(config)?;
//!
//! let result = runtime.exec(&serde_json::json!({ "code": "text('hi'); return [1, 2].map(x => x * 2)" })).await;
//! println!("{}", result.to_json()); // {"status":"completed","value":[2,4],"output":[...],"telemetry":{...}}
//!
//! // A cell that yields comes back as `waiting`; `wait` resumes it.
//! let waiting = runtime.exec(&serde_json::json!({ "code": "await yield_control('checkpoint'); return 'done'" })).await;
//! let run_id = waiting.to_json()["runId"].as_str().unwrap_or_default().to_owned();
//! let done = runtime.wait(&serde_json::json!({ "runId": run_id })).await;
//! assert_eq!(done.to_json()["value"], "done");
//! # Ok(()) }
//! ```

mod calls;
mod catalog;
mod config;
mod drive;
mod input;
mod result;
mod runtime;
mod session;
mod store;
mod surface;
mod trajectory;

pub use catalog::{
    CONTROL_TOOL_NAMES, Catalog, CatalogEntry, CatalogError, Excluded, ToolDefinition, ToolPolicy,
    ToolSource,
};
pub use session::{
    CodeModeSession, NestedCall, RunContext, ToolCallError, ToolExecutor, ToolFuture,
};
pub use surface::{ModelTool, SurfaceError, check_model_tools, model_tools};
pub use trajectory::{Trajectory, TrajectoryEvent};

pub use config::{CodeModeConfig, ConfigError, Diagnostic, Language};
pub use input::{ExecInput, InputError, WaitInput};
pub use result::{
    CodeModeResult, ErrorCode, Output, PendingToolCall, SnapshotEvent, Telemetry, WaitReason,
};
pub use runtime::{CodeModeRuntime, RuntimeError, RuntimeOptions};
