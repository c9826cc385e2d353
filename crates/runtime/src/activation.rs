//! Activation: from the config, a run's effective tools (after allow/deny
//! policy) and the kind of run to what the model sees, in the reference's
//! order (`docs/embedding.md`):
//!
//! 1. code mode disabled → the run's tools, unchanged;
//! 2. enabled, but the run has no tools (a raw model call, tools disabled,
//!    an empty allowlist) → no tools and no code-mode surface;
//! 3. enabled with tools, but no runtime → `runtime_unavailable` (never a
//!    fallback to the tools themselves);
//! 4. enabled with tools → exactly `exec` and `wait` (plus tools marked
//!    direct-only), every other tool in the run's catalog.
//!
//! The provider payload built from the surface is then checked by
//! [`ModelSurface::check_payload`] before it leaves.

use std::sync::Arc;

use serde_json::Value;

use crate::catalog::surface::{ModelTool, model_tools_with};
use crate::catalog::{Catalog, CatalogError, ToolDefinition, ToolPolicy};
use crate::config::{CodeModeConfig, ConfigError};
use crate::debug::DebugSwitches;
use crate::result::{CodeModeResult, ErrorCode, Telemetry};
use crate::runtime::CodeModeRuntime;

/// What kind of model call a run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// An agent turn that may use tools.
    Agent,
    /// A raw model call: never tools.
    RawModelCall,
    /// Tools are disabled for this run (`disableTools`).
    ToolsDisabled,
}

/// What the model sees for one run.
#[derive(Debug)]
pub enum ModelSurface {
    /// Code mode is off: the run's tools go to the model as they came in.
    Normal(Vec<ToolDefinition>),
    /// The run has no tools: no tools at all, no `exec`, no `wait`.
    NoTools,
    /// Code mode: `exec` and `wait` (and the direct-only tools) are the
    /// model's tools; every other tool is in `catalog`, for the run's
    /// [`crate::CodeModeSession`].
    CodeMode {
        /// `exec` and `wait`, as the runtime defines them for this catalog.
        model_tools: Vec<ModelTool>,
        /// Tools marked direct-only, shown beside `exec` and `wait`.
        direct_tools: Vec<ToolDefinition>,
        /// The run's hidden catalog.
        catalog: Arc<Catalog>,
    },
}

/// Activation failed: the run must fail closed with [`ActivationError::code`].
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// The config is wrong (`invalid_config`).
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    /// The run's tools cannot form a catalog (`invalid_config`).
    #[error("the run's tools cannot be catalogued: {0}")]
    Catalog(#[from] CatalogError),
    /// Code mode is on and the run has tools, but there is no runtime
    /// (`runtime_unavailable`).
    #[error(
        "code mode is enabled but its runtime is unavailable ({0}); the run fails closed instead of showing its tools to the model directly"
    )]
    RuntimeUnavailable(String),
}

impl ActivationError {
    /// The contract's error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ActivationError::InvalidConfig(_) | ActivationError::Catalog(_) => {
                ErrorCode::InvalidConfig
            }
            ActivationError::RuntimeUnavailable(_) => ErrorCode::RuntimeUnavailable,
        }
    }

    /// The failed result a run reports.
    pub fn to_result(&self) -> CodeModeResult {
        CodeModeResult::failure(self.code(), self.to_string(), Telemetry::default())
    }
}

/// The model-visible surface of one run (see the module docs for the
/// order). `runtime` is the process's runtime, or why it could not be
/// built.
///
/// ```
/// use codemode_runtime::{activate, CodeModeConfig, ModelSurface, RunKind, ToolDefinition, ToolSource};
/// let tools = vec![ToolDefinition::new(ToolSource::Openclaw, "core", "read")];
/// let off = CodeModeConfig::default();
/// let surface = activate(&off, Err("not started"), tools.clone(), RunKind::Agent).unwrap();
/// assert!(matches!(surface, ModelSurface::Normal(ref t) if *t == tools));
/// let on = CodeModeConfig { enabled: true, ..CodeModeConfig::default() };
/// let surface = activate(&on, Err("not started"), vec![], RunKind::Agent).unwrap();
/// assert!(matches!(surface, ModelSurface::NoTools));
/// let err = activate(&on, Err("the engine failed to start"), tools, RunKind::Agent).unwrap_err();
/// assert_eq!(err.code().as_str(), "runtime_unavailable");
/// ```
///
/// # Errors
/// [`ActivationError`] (`invalid_config`, `runtime_unavailable`).
pub fn activate(
    config: &CodeModeConfig,
    runtime: Result<&CodeModeRuntime, &str>,
    tools: Vec<ToolDefinition>,
    run: RunKind,
) -> Result<ModelSurface, ActivationError> {
    let debug = DebugSwitches::current();
    if !config.enabled {
        if debug.code_mode {
            tracing::info!(target: "codemode::debug", tools = tools.len(), "code mode disabled: the run's tools go to the model unchanged");
        }
        return Ok(ModelSurface::Normal(tools));
    }
    if run != RunKind::Agent || tools.is_empty() {
        if debug.code_mode {
            tracing::info!(target: "codemode::debug", run = ?run, tools = tools.len(), "code mode enabled, but the run has no tools: no code-mode surface");
        }
        return Ok(ModelSurface::NoTools);
    }
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(why) => {
            if debug.code_mode {
                tracing::info!(target: "codemode::debug", why, "code mode enabled, runtime unavailable: the run fails closed");
            }
            return Err(ActivationError::RuntimeUnavailable(why.to_owned()));
        }
    };
    let (direct_tools, hidden): (Vec<_>, Vec<_>) = tools.into_iter().partition(|t| t.direct_only);
    // The tools come after the run's policy: nothing more to filter.
    let catalog = Catalog::build(hidden, &ToolPolicy::default())?;
    let visible = runtime.inner.namespaces.visible(&catalog);
    let model_tools = model_tools_with(
        config,
        &catalog,
        &crate::catalog::namespaces::describe_for_model(&visible),
    );
    if debug.code_mode {
        tracing::info!(
            target: "codemode::debug",
            visible = ?visible_names(&model_tools, &direct_tools),
            catalog = catalog.len(),
            by_source = ?catalog.count_by_source(),
            "code mode active"
        );
    }
    Ok(ModelSurface::CodeMode {
        model_tools,
        direct_tools,
        catalog: Arc::new(catalog),
    })
}

/// [`activate`] for agent `agent_id` of a whole config document (its
/// `tools.codeMode` with the agent's block merged over it).
///
/// # Errors
/// As [`activate`]; a wrong config is `invalid_config` naming the field.
pub fn activate_document(
    root: &Value,
    agent_id: &str,
    runtime: Result<&CodeModeRuntime, &str>,
    tools: Vec<ToolDefinition>,
    run: RunKind,
) -> Result<ModelSurface, ActivationError> {
    let (config, diagnostics) = CodeModeConfig::for_agent(root, agent_id)?;
    for d in diagnostics {
        tracing::warn!(target: "codemode::config", "{d}");
    }
    activate(&config, runtime, tools, run)
}

fn visible_names<'a>(model_tools: &'a [ModelTool], direct: &'a [ToolDefinition]) -> Vec<&'a str> {
    model_tools
        .iter()
        .map(|t| t.name)
        .chain(direct.iter().map(|t| t.name.as_str()))
        .collect()
}

impl ModelSurface {
    /// The names the model sees, in order.
    pub fn visible_names(&self) -> Vec<&str> {
        match self {
            ModelSurface::Normal(tools) => tools.iter().map(|t| t.name.as_str()).collect(),
            ModelSurface::NoTools => Vec::new(),
            ModelSurface::CodeMode {
                model_tools,
                direct_tools,
                ..
            } => visible_names(model_tools, direct_tools),
        }
    }

    /// Whether code mode is active for the run.
    pub fn is_code_mode(&self) -> bool {
        matches!(self, ModelSurface::CodeMode { .. })
    }
}
