//! What the runtime benches share: a runtime from a JSON5 config, and a
//! gate that nested calls wait at until the bench lets them through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use codemode_runtime::{CodeModeConfig, CodeModeRuntime, RuntimeOptions, ToolFuture};
use serde_json::json;
use tokio::sync::Semaphore;

/// A runtime over a JSON5 `config`.
pub fn runtime(config: &str, options: RuntimeOptions) -> CodeModeRuntime {
    let (config, _) = CodeModeConfig::from_json5(config).unwrap();
    CodeModeRuntime::with_options(config, options).unwrap()
}

/// Nested calls wait here, one permit each, then answer `"done"`.
#[derive(Clone)]
pub struct Gate {
    permits: Arc<Semaphore>,
    /// Calls that got their permit (about to return their result).
    passed: Arc<AtomicUsize>,
}

/// A closed gate.
impl Default for Gate {
    fn default() -> Gate {
        Gate {
            permits: Arc::new(Semaphore::new(0)),
            passed: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Gate {
    /// One call: waits for a permit, then answers `"done"`.
    pub fn call(&self) -> ToolFuture {
        let gate = self.clone();
        Box::pin(async move {
            // One permit per call: forget it instead of returning it.
            if let Ok(permit) = gate.permits.acquire().await {
                permit.forget();
            }
            gate.passed.fetch_add(1, Ordering::SeqCst);
            Ok(json!("done"))
        })
    }

    /// Lets one call through.
    pub fn open_one(&self) {
        self.permits.add_permits(1);
    }

    /// How many calls got through so far.
    pub fn passed(&self) -> usize {
        self.passed.load(Ordering::SeqCst)
    }
}
