//! Prometheus metrics of the gateway (`/metrics`, text format). Counters
//! and histograms are recorded where things happen; gauges (runs held,
//! sessions, upstream state) are read from the gateway when a scrape
//! renders them. Labels carry ids and codes only, never inputs or
//! principals' tokens. Built without the `metrics` feature, recording does
//! nothing and a scrape says so.

#[cfg(feature = "metrics")]
mod exposition;
#[cfg(feature = "metrics")]
pub(crate) use exposition::{auth_failure, record_call, record_nested, render, upstream_restart};

/// The gateway's state at scrape time.
#[cfg_attr(
    not(feature = "metrics"),
    allow(
        dead_code,
        reason = "read by the exposition, which this build leaves out"
    )
)]
pub(crate) struct Snapshot<'a> {
    pub(crate) suspended_runs: usize,
    pub(crate) store_bytes: usize,
    pub(crate) sessions: usize,
    pub(crate) upstreams: Vec<(&'a str, bool)>,
    /// The durable store's counts (`None`: store memory; `Err`: down).
    pub(crate) durable: Option<Result<codemode_runtime::codemode_store::StoreStats, ()>>,
}

#[cfg(not(feature = "metrics"))]
mod off {
    use codemode_runtime::CodeModeResult;

    use super::Snapshot;

    pub(crate) fn record_call(_tool: &str, _result: &CodeModeResult, _seconds: f64) {}

    pub(crate) fn record_nested(_server: &str, _seconds: f64) {}

    pub(crate) fn upstream_restart(_server: &str) {}

    pub(crate) fn auth_failure() {}

    /// An exposition with no metrics that says why.
    pub(crate) fn render(_now: Snapshot<'_>) -> String {
        "# codemode was built without metrics (the `metrics` feature of codemode-mcp)\n# EOF\n"
            .to_owned()
    }
}
#[cfg(not(feature = "metrics"))]
pub(crate) use off::{auth_failure, record_call, record_nested, render, upstream_restart};
