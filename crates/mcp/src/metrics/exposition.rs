//! The metrics themselves, kept with the maintained `prometheus-client`
//! crate (feature `metrics`).

use std::sync::OnceLock;

use super::Snapshot;

use codemode_runtime::CodeModeResult;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    /// `exec` or `wait`.
    tool: String,
    /// `completed`, `waiting`, `failed`.
    status: String,
    /// The error code, `none` without one.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NestedLabels {
    server: String,
    /// `ok`, `failed`, `denied`, `cancelled`, `unknown`.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    call_seconds: HistogramFamily<ToolLabels>,
    nested: Family<NestedLabels, Counter>,
    nested_seconds: HistogramFamily<ServerLabels>,
    suspended_runs: Gauge,
    store_bytes: Gauge,
    sessions: Gauge,
    upstream_up: Family<ServerLabels, Gauge>,
    upstream_restarts: Family<ServerLabels, Counter>,
    auth_failures: Counter,
    run_store_up: Gauge,
    run_store_runs: Family<StateLabels, Gauge>,
    run_store_bytes: Gauge,
    run_store_results: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … about 33 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut registry = Registry::with_prefix("codemode");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "calls",
            "exec and wait calls by status and error code",
            calls.clone(),
        );
        let call_seconds: HistogramFamily<ToolLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "call_duration_seconds",
            "duration of exec and wait calls",
            call_seconds.clone(),
        );
        let nested = Family::<NestedLabels, Counter>::default();
        registry.register(
            "nested_calls",
            "nested MCP calls by server and outcome",
            nested.clone(),
        );
        let nested_seconds: HistogramFamily<ServerLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "nested_call_duration_seconds",
            "duration of nested calls at the upstream server",
            nested_seconds.clone(),
        );
        let suspended_runs = Gauge::default();
        registry.register(
            "suspended_runs",
            "runs waiting for wait",
            suspended_runs.clone(),
        );
        let store_bytes = Gauge::default();
        registry.register(
            "store_bytes",
            "snapshot bytes held by waiting runs",
            store_bytes.clone(),
        );
        let sessions = Gauge::default();
        registry.register("sessions", "MCP client sessions open", sessions.clone());
        let upstream_up = Family::<ServerLabels, Gauge>::default();
        registry.register(
            "upstream_up",
            "1 when the upstream server is connected, 0 while it starts, restarts or is down",
            upstream_up.clone(),
        );
        let upstream_restarts = Family::<ServerLabels, Counter>::default();
        registry.register(
            "upstream_restarts",
            "upstream connections lost or failed to start",
            upstream_restarts.clone(),
        );
        let auth_failures = Counter::default();
        registry.register(
            "auth_failures",
            "HTTP requests refused for a missing or wrong token or another principal's session",
            auth_failures.clone(),
        );
        let run_store_up = Gauge::default();
        registry.register(
            "run_store_up",
            "1 when the durable run store answers, 0 when it cannot be reached (absent with store: memory)",
            run_store_up.clone(),
        );
        let run_store_runs = Family::<StateLabels, Gauge>::default();
        registry.register(
            "run_store_runs",
            "runs in the durable run store (over every process sharing it), by state",
            run_store_runs.clone(),
        );
        let run_store_bytes = Gauge::default();
        registry.register(
            "run_store_bytes",
            "bytes of run records in the durable run store",
            run_store_bytes.clone(),
        );
        let run_store_results = Gauge::default();
        registry.register(
            "run_store_results",
            "nested-call results held in the durable run store for waiting runs",
            run_store_results.clone(),
        );
        Metrics {
            run_store_up,
            run_store_runs,
            run_store_bytes,
            run_store_results,
            registry,
            calls,
            call_seconds,
            nested,
            nested_seconds,
            suspended_runs,
            store_bytes,
            sessions,
            upstream_up,
            upstream_restarts,
            auth_failures,
        }
    })
}

/// One `exec` or `wait` ended with `result` after `seconds`; its receipts
/// count the nested calls by server and outcome.
pub(crate) fn record_call(tool: &str, result: &CodeModeResult, seconds: f64) {
    let m = metrics();
    m.calls
        .get_or_create(&CallLabels {
            tool: tool.to_owned(),
            status: result.status().to_owned(),
            code: result.code().map_or("none", |c| c.as_str()).to_owned(),
        })
        .inc();
    m.call_seconds
        .get_or_create(&ToolLabels {
            tool: tool.to_owned(),
        })
        .observe(seconds);
    for receipt in &result.receipts().calls {
        // `mcp:<server>:<tool or method>`; anything else is not an upstream's.
        let server = receipt
            .tool_id
            .strip_prefix("mcp:")
            .and_then(|rest| rest.split(':').next())
            .unwrap_or("other");
        let outcome = serde_json::to_value(receipt.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".into());
        m.nested
            .get_or_create(&NestedLabels {
                server: label(server),
                outcome,
            })
            .inc();
    }
}

/// `text` as a label value of the text exposition: `prometheus-client`
/// writes label values as they are, and a server name may hold `"` or `\`
/// (or a scrape would not parse).
fn label(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A nested call took `seconds` at upstream `server`.
pub(crate) fn record_nested(server: &str, seconds: f64) {
    metrics()
        .nested_seconds
        .get_or_create(&ServerLabels {
            server: label(server),
        })
        .observe(seconds);
}

/// An upstream's connection was lost or its start failed.
pub(crate) fn upstream_restart(server: &str) {
    metrics()
        .upstream_restarts
        .get_or_create(&ServerLabels {
            server: label(server),
        })
        .inc();
}

/// An HTTP request was refused by authentication.
pub(crate) fn auth_failure() {
    metrics().auth_failures.inc();
}

/// The text exposition of every metric, with the gauges set from `now`.
pub(crate) fn render(now: Snapshot<'_>) -> String {
    let m = metrics();
    m.suspended_runs.set(now.suspended_runs as i64);
    m.store_bytes.set(now.store_bytes as i64);
    m.sessions.set(now.sessions as i64);
    for (server, up) in now.upstreams {
        m.upstream_up
            .get_or_create(&ServerLabels {
                server: label(server),
            })
            .set(i64::from(up));
    }
    match now.durable {
        None => {}
        Some(Err(())) => {
            m.run_store_up.set(0);
        }
        Some(Ok(stats)) => {
            m.run_store_up.set(1);
            for (state, n) in [("waiting", stats.waiting), ("resuming", stats.resuming)] {
                m.run_store_runs
                    .get_or_create(&StateLabels { state })
                    .set(n as i64);
            }
            m.run_store_bytes.set(stats.bytes as i64);
            m.run_store_results.set(stats.results as i64);
        }
    }
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &m.registry).is_err() {
        text.clear();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_runtime::{ErrorCode, Telemetry};

    #[test]
    fn server_names_are_escaped_in_labels() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("a\nb"), r"a\nb");
        record_nested(r#"quote"and\slash"#, 0.001);
        let text = render(Snapshot {
            suspended_runs: 0,
            durable: None,
            store_bytes: 0,
            sessions: 0,
            upstreams: vec![],
        });
        assert!(text.contains(r#"server="quote\"and\\slash""#), "{text}");
    }

    #[test]
    fn results_and_scrapes_render_as_prometheus_text() {
        let failed = CodeModeResult::failure(ErrorCode::Timeout, "slow", Telemetry::default());
        record_call("exec", &failed, 0.25);
        record_nested("unit-test-server", 0.002);
        let text = render(Snapshot {
            suspended_runs: 3,
            durable: Some(Ok(codemode_runtime::codemode_store::StoreStats {
                waiting: 4,
                resuming: 1,
                bytes: 9000,
                results: 2,
            })),
            store_bytes: 4096,
            sessions: 2,
            upstreams: vec![("unit-test-server", true)],
        });
        assert!(
            text.contains(r#"codemode_calls_total{tool="exec",status="failed",code="timeout"}"#),
            "{text}"
        );
        assert!(text.contains("codemode_suspended_runs 3"), "{text}");
        assert!(text.contains("codemode_run_store_up 1"), "{text}");
        assert!(
            text.contains(r#"codemode_run_store_runs{state="waiting"} 4"#),
            "{text}"
        );
        assert!(text.contains("codemode_run_store_bytes 9000"), "{text}");
        assert!(text.contains("codemode_store_bytes 4096"), "{text}");
        assert!(
            text.contains(r#"codemode_upstream_up{server="unit-test-server"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"codemode_nested_call_duration_seconds_count{server="unit-test-server"} 1"#
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
