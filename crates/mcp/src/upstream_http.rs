//! The HTTP client of `url` upstreams: `reqwest` with the SDK's own
//! settings (no idle pooling, same-origin 307/308 redirects only, so
//! headers never follow a redirect to another host), wrapped so each
//! request that carries W3C trace context in its `_meta` (SEP-414; set by
//! [`set_trace_context`] from the nested call's span) also carries it as
//! `traceparent`/`tracestate` HTTP headers, which is where HTTP servers
//! and proxies look for it.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetMeta as _, JsonRpcMessage, RequestParamsMeta,
};
use rmcp::transport::streamable_http_client::SseError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// Redirect hops followed for one request.
const MAX_REDIRECTS: usize = 10;

/// The reqwest client every `url` upstream (and its OAuth) uses.
pub(crate) fn reqwest_client() -> reqwest::Client {
    crate::install_tls_provider();
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        // A 301/302/303 turns the POST into a bodyless GET, and another
        // origin would get the headers (tokens among them): stop there.
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(policy)
        .build()
        .unwrap_or_default()
}

/// Puts the current span's W3C trace context (if any: only when traces
/// are exported) into a request's `_meta`.
#[cfg(feature = "otel")]
pub(crate) fn set_trace_context(params: &mut impl RequestParamsMeta) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let mut carrier = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&span.context(), &mut carrier);
    });
    if let Some(parent) = carrier.get("traceparent") {
        params.set_traceparent(parent);
        if let Some(state) = carrier.get("tracestate").filter(|s| !s.is_empty()) {
            params.set_tracestate(state);
        }
    }
}

/// Without OpenTelemetry no trace context is exported, so none is sent.
#[cfg(not(feature = "otel"))]
pub(crate) fn set_trace_context(_params: &mut impl RequestParamsMeta) {}

/// The trace context a message carries in `_meta`, if it is a request.
fn trace_context(message: &ClientJsonRpcMessage) -> Option<(String, Option<String>)> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    let request = &request.request;
    let typed = match request {
        ClientRequest::CallToolRequest(r) => r.params.meta(),
        ClientRequest::ReadResourceRequest(r) => r.params.meta(),
        ClientRequest::GetPromptRequest(r) => r.params.meta(),
        _ => None,
    };
    let meta = typed.unwrap_or(request.get_meta());
    let parent = meta.get_traceparent()?.to_owned();
    Some((parent, meta.get_tracestate().map(str::to_owned)))
}

/// Adds `message`'s trace context to the request headers.
fn with_trace_headers(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let Some((parent, state)) = trace_context(message) {
        if let Ok(value) = HeaderValue::from_str(&parent) {
            headers.insert(HeaderName::from_static("traceparent"), value);
        }
        if let Some(Ok(value)) = state.as_deref().map(HeaderValue::from_str) {
            headers.insert(HeaderName::from_static("tracestate"), value);
        }
    }
    headers
}

/// An upstream HTTP client that sends trace context as headers too.
#[derive(Clone, Debug)]
pub(crate) struct TraceHeaders(pub(crate) reqwest::Client);

type Error = StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for TraceHeaders {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        // As the inner client's own `post_message`: the default limits.
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    // `post_message_with_max_sse_event_size` keeps its default: the
    // transport sends through `post_message_with_response_limits` only.

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let headers = with_trace_headers(&message, custom_headers);
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequestParams, JsonRpcRequest, NumberOrString, Request};

    #[test]
    fn trace_context_in_meta_becomes_headers() {
        let mut params = CallToolRequestParams::new("search");
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        params.set_traceparent(parent);
        params.set_tracestate("vendor=1");
        let message: ClientJsonRpcMessage = JsonRpcMessage::Request(JsonRpcRequest::new(
            NumberOrString::Number(1),
            ClientRequest::CallToolRequest(Request::new(params)),
        ));
        let headers = with_trace_headers(&message, HashMap::new());
        let header = |name: &'static str| headers.get(&HeaderName::from_static(name)).cloned();
        assert_eq!(header("traceparent").unwrap(), parent);
        assert_eq!(header("tracestate").unwrap(), "vendor=1");
        // Without trace context nothing is added.
        let plain: ClientJsonRpcMessage = JsonRpcMessage::Request(JsonRpcRequest::new(
            NumberOrString::Number(2),
            ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("search"))),
        ));
        assert!(with_trace_headers(&plain, HashMap::new()).is_empty());
    }
}
