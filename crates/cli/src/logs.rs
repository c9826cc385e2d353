//! Logs to stderr and, when asked, traces to an OTLP receiver.

use std::sync::OnceLock;

use anyhow::{Context, Result};

/// Whether stderr carries JSON log lines (`--log-format json`).
static JSON_LOGS: OnceLock<bool> = OnceLock::new();

/// A line for whoever runs the command (the bound address, a URL to open,
/// an error, a config diagnostic), never filtered: `codemode: MESSAGE` in
/// text mode; with `--log-format json` one JSON object shaped like the log
/// lines (`timestamp`, `level`, `fields.message`, `target`), so stderr
/// stays one format a log shipper can read.
pub(crate) fn say(level: tracing::Level, message: &str) {
    if JSON_LOGS.get() == Some(&true) {
        use tracing_subscriber::fmt::time::FormatTime;
        let mut timestamp = String::new();
        let _ = tracing_subscriber::fmt::time::SystemTime.format_time(
            &mut tracing_subscriber::fmt::format::Writer::new(&mut timestamp),
        );
        let line = serde_json::json!({
            "timestamp": timestamp,
            "level": level.as_str(),
            "fields": { "message": message },
            "target": "codemode",
        });
        eprintln!("{line}");
    } else {
        eprintln!("codemode: {message}");
    }
}

/// Logs on stderr (text or JSON, filtered by `CODEMODE_LOG`/`RUST_LOG`),
/// and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is
/// set, the `codemode::trace` spans (exec, wait, nested calls) exported
/// over OTLP/HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the
/// default, or `http/json`).
pub(crate) fn init_logs_and_traces(
    filter: &str,
    json: bool,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    let _ = JSON_LOGS.set(json);
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // Colours only for a terminal: piped logs are read by programs.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt: Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> = if json {
        Box::new(fmt.json().with_current_span(false))
    } else {
        Box::new(fmt)
    };
    let (otel, provider, problem) = match otel_tracer() {
        Ok(Some((tracer, provider))) => (
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(
                        tracing_subscriber::filter::Targets::new()
                            .with_target("codemode::trace", tracing::Level::INFO),
                    ),
            ),
            Some(provider),
            None,
        ),
        Ok(None) => (None, None, None),
        Err(e) => (None, None, Some(e)),
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(tracing_subscriber::EnvFilter::new(filter)))
        .with(otel)
        .init();
    if let Some(e) = problem {
        tracing::warn!(error = %e, "OpenTelemetry export is off: the exporter could not be built");
    }
    provider
}

pub(crate) fn otel_tracer() -> Result<
    Option<(
        opentelemetry_sdk::trace::Tracer,
        opentelemetry_sdk::trace::SdkTracerProvider,
    )>,
> {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    codemode_mcp::install_tls_provider();
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => opentelemetry_otlp::Protocol::HttpJson,
        _ => opentelemetry_otlp::Protocol::HttpBinary,
    };
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
        .unwrap_or_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .context("building the OTLP span exporter")?;
    let exporter = ReportingExporter::new(exporter, endpoint);
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("codemode")
                .build(),
        )
        .build();
    // W3C `traceparent` from clients (the gateway reads it per request).
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(Some((provider.tracer("codemode"), provider)))
}

/// An exporter that says when export fails: the SDK drops an export
/// error silently, so a wrong endpoint or a receiver that is down would
/// lose every span unseen. The first failure is logged at `warn`, then at
/// most one line a minute (with the count since), and recovery once.
#[derive(Debug)]
struct ReportingExporter<E> {
    inner: E,
    endpoint: String,
    failures: std::sync::Mutex<ExportFailures>,
}

#[derive(Debug, Default)]
struct ExportFailures {
    /// Failed exports not yet reported, and spans they held.
    unreported: u64,
    lost_spans: u64,
    last_report: Option<std::time::Instant>,
    failing: bool,
}

/// At most one failure line per this long.
const EXPORT_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl<E> ReportingExporter<E> {
    fn new(inner: E, endpoint: String) -> Self {
        ReportingExporter {
            inner,
            endpoint,
            failures: std::sync::Mutex::new(ExportFailures::default()),
        }
    }

    fn record(&self, spans: u64, result: &opentelemetry_sdk::error::OTelSdkResult) {
        let Ok(mut failures) = self.failures.lock() else {
            return;
        };
        match result {
            Ok(()) => {
                if failures.failing {
                    *failures = ExportFailures::default();
                    tracing::warn!(
                        target: "codemode",
                        endpoint = %self.endpoint,
                        "OpenTelemetry export works again"
                    );
                }
            }
            Err(e) => {
                failures.failing = true;
                failures.unreported += 1;
                failures.lost_spans += spans;
                let due = failures
                    .last_report
                    .is_none_or(|at| at.elapsed() >= EXPORT_REPORT_EVERY);
                if due {
                    tracing::warn!(
                        target: "codemode",
                        endpoint = %self.endpoint,
                        failed_exports = failures.unreported,
                        lost_spans = failures.lost_spans,
                        "OpenTelemetry export failed, spans are lost: {e} (check OTEL_EXPORTER_OTLP_ENDPOINT and that the receiver is up)"
                    );
                    failures.unreported = 0;
                    failures.lost_spans = 0;
                    failures.last_report = Some(std::time::Instant::now());
                }
            }
        }
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for ReportingExporter<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        self.record(spans, &result);
        result
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}
