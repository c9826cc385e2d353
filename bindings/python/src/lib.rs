//! The pip package's native module (`codemode._native`): codemode's
//! runtime in-process for Python, and the `codemode` command line.
//!
//! Small and JSON-shaped on purpose; `codemode/__init__.py` builds the
//! friendly API on it. The session, the options and the answer protocol
//! are `codemode-bindings`' (shared with the Node package); this crate
//! connects them to Python: every call that runs a cell releases the GIL
//! and blocks on the module's tokio runtime; requests for Python (tool
//! calls, approvals, hooks) go to one Python dispatcher, called with the
//! GIL from the runtime's threads, which schedules the work and answers
//! by `complete_request`.

use std::sync::{Arc, LazyLock};

use codemode_bindings::{Callbacks, Control, Host, Opened};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The runtime every session of this process runs on.
static RUNTIME: LazyLock<std::io::Result<tokio::runtime::Runtime>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("codemode")
        .build()
});

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    RUNTIME.as_ref().map_err(|e| {
        PyRuntimeError::new_err(format!(
            "runtime_unavailable: the async runtime did not start: {e}"
        ))
    })
}

/// Python's side of a session: the dispatcher for requests, or a
/// progress callback.
struct PythonHost {
    callback: Py<PyAny>,
}

impl PythonHost {
    /// Calls the callback with `text`; `false` when Python is gone
    /// (interpreter shutting down) or the callback raised.
    fn call(&self, text: String) -> bool {
        Python::try_attach(|py| match self.callback.call1(py, (text,)) {
            Ok(_) => true,
            Err(e) => {
                e.print(py);
                false
            }
        })
        .unwrap_or(false)
    }
}

impl Host for PythonHost {
    fn send(&self, request: String) -> bool {
        self.call(request)
    }

    fn progress(&self, event: String) {
        let _ = self.call(event);
    }
}

fn host(callback: Py<PyAny>) -> Arc<dyn Host> {
    Arc::new(PythonHost { callback })
}

/// Runs the `codemode` command line with `args` (the program name first)
/// and returns its exit status; the GIL is released meanwhile.
#[pyfunction]
fn run_cli(py: Python<'_>, args: Vec<String>) -> u8 {
    py.detach(|| codemode::run_main(args).0)
}

/// The answer (JSON) of request `token`; `False` when nobody waits for it
/// any more (cancelled, or answered already).
#[pyfunction]
fn complete_request(token: u64, answer: String) -> bool {
    codemode_bindings::complete(token, answer)
}

/// An open code-mode session (Python: the native half of `CodeMode`).
#[pyclass(frozen, module = "codemode._native")]
struct NativeCodeMode {
    opened: Arc<Opened>,
}

/// Opens a session (see `codemode_bindings::open`); `dispatch` receives
/// every tool call, approval and hook request. Blocks while the MCP
/// servers start, with the GIL released.
#[pyfunction]
fn open(
    py: Python<'_>,
    options: String,
    dispatch: Py<PyAny>,
    approve: bool,
    before_tool_call: bool,
) -> PyResult<NativeCodeMode> {
    let runtime = runtime()?;
    let callbacks = Callbacks {
        approve,
        hook: before_tool_call,
    };
    let dispatch = host(dispatch);
    let opened = py
        .detach(|| runtime.block_on(codemode_bindings::open(&options, dispatch, callbacks)))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(NativeCodeMode {
        opened: Arc::new(opened),
    })
}

impl NativeCodeMode {
    fn call(
        &self,
        py: Python<'_>,
        control: Control,
        input: String,
        call_id: Option<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let runtime = runtime()?;
        let opened = Arc::clone(&self.opened);
        let progress = progress.map(host);
        py.detach(|| runtime.block_on(opened.call(control, &input, call_id, progress)))
            .map_err(PyValueError::new_err)
    }
}

#[pymethods]
impl NativeCodeMode {
    /// Runs `exec` with its JSON input (`{ code, language? }`) and returns
    /// the result's JSON. Blocks with the GIL released.
    #[pyo3(signature = (input, call_id=None, progress=None))]
    fn exec(
        &self,
        py: Python<'_>,
        input: String,
        call_id: Option<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        self.call(py, Control::Exec, input, call_id, progress)
    }

    /// Runs `wait` with its JSON input (`{ runId }`).
    #[pyo3(signature = (input, call_id=None, progress=None))]
    fn wait(
        &self,
        py: Python<'_>,
        input: String,
        call_id: Option<String>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        self.call(py, Control::Wait, input, call_id, progress)
    }

    /// The model-visible tools, `exec` and `wait`, as JSON.
    fn surface(&self) -> String {
        self.opened.surface()
    }

    /// The hidden catalog's ids, for the embedder (never the model).
    fn catalog_ids(&self) -> Vec<String> {
        self.opened.catalog_ids()
    }

    /// Config warnings and MCP servers that did not start.
    fn diagnostics(&self) -> Vec<String> {
        self.opened.diagnostics()
    }

    /// Calls awaiting approval, as JSON.
    fn pending_approvals(&self) -> String {
        self.opened.pending_approvals()
    }

    /// Approves a waiting call: it starts now.
    fn approve(&self, run_id: &str, call_id: &str) -> PyResult<()> {
        self.opened
            .approve(run_id, call_id)
            .map_err(PyValueError::new_err)
    }

    /// Denies a waiting call: the guest sees `approval_denied`.
    fn deny(&self, run_id: &str, call_id: &str, reason: &str) -> PyResult<()> {
        self.opened
            .deny(run_id, call_id, reason)
            .map_err(PyValueError::new_err)
    }

    /// Ends the session: running cells are aborted, MCP servers stopped.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let runtime = runtime()?;
        let opened = Arc::clone(&self.opened);
        // Inside the runtime: stopping servers may spawn their shutdown.
        py.detach(|| {
            let _entered = runtime.enter();
            opened.close();
        });
        Ok(())
    }
}

/// The native module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(run_cli, module)?)?;
    module.add_function(wrap_pyfunction!(complete_request, module)?)?;
    module.add_function(wrap_pyfunction!(open, module)?)?;
    module.add_class::<NativeCodeMode>()?;
    Ok(())
}
