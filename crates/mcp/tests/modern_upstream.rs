//! An upstream server that speaks only the stateless 2026-07-28 protocol
//! (an rmcp server over streamable HTTP that refuses every older version):
//! the gateway reaches it through `server/discover` instead of the
//! `initialize` handshake, calls its tools, and answers its
//! multi-round-trip elicitation (`input_required`) by relaying it to the
//! client whose run made the call, then sending the call again with the
//! answer. A real rmcp client with elicitation drives the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use codemode_mcp::{Gateway, GatewayOptions, parse_config};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest,
    InputRequests, InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientHandler, ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// Speaks 2026-07-28 only.
#[derive(Clone, Default)]
struct Modern {
    confirm_rounds: Arc<AtomicUsize>,
}

fn tool(name: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    // Read-only: what this test pins is the relay, not approvals.
    Tool::new(
        name.to_owned(),
        format!("The {name} tool"),
        Arc::new(schema),
    )
    .with_annotations(rmcp::model::ToolAnnotations::new().read_only(true))
}

impl ServerHandler for Modern {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "add",
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
            ),
            tool("confirm", json!({"type": "object", "properties": {}})),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let number = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        match request.name.as_ref() {
            "add" => Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{}",
                number("a") + number("b")
            ))])
            .into()),
            "confirm" => {
                self.confirm_rounds.fetch_add(1, Ordering::SeqCst);
                match request.request_state.as_deref() {
                    None => {
                        let mut asked = InputRequests::new();
                        asked.insert(
                            "ok".into(),
                            InputRequest::Elicitation(ElicitRequest::new(
                                ElicitRequestParams::FormElicitationParams {
                                    meta: None,
                                    message: "Launch?".into(),
                                    requested_schema: serde_json::from_value(json!({
                                        "type": "object",
                                        "properties": { "ok": { "type": "boolean" } },
                                        "required": ["ok"]
                                    }))
                                    .unwrap(),
                                },
                            )),
                        );
                        Ok(InputRequiredResult::new(Some(asked), Some("asked".into())).into())
                    }
                    Some("asked") => {
                        let answer = request
                            .input_responses
                            .as_ref()
                            .and_then(|r| r.get("ok"))
                            .cloned()
                            .unwrap_or(Value::Null);
                        let ok = answer["action"] == "accept" && answer["content"]["ok"] == true;
                        let text = if ok { "confirmed" } else { "declined" };
                        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
                    }
                    Some(other) => Err(ErrorData::invalid_params(
                        format!("unexpected state {other}"),
                        None,
                    )),
                }
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// A 2025 session client that accepts every elicitation with `ok: true`.
#[derive(Clone)]
struct Accepting {
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for Accepting {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(rmcp::model::ElicitationCapability::new());
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("accepting", "1.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Err(ErrorData::invalid_params("form only", None));
        };
        assert_eq!(message, "Launch?");
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "ok": true })))
    }
}

async fn serve_modern(server: Modern) -> String {
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_only_upstream_is_reached_and_its_input_requests_are_relayed() {
    codemode_mcp::install_tls_provider();
    let modern = Modern::default();
    let upstream = serve_modern(modern.clone()).await;
    let (config, _) = parse_config(
        &json!({
            "tools": { "codeMode": { "enabled": true, "timeoutMs": 10000 } },
            "mcpServers": { "modern": { "url": upstream } },
        })
        .to_string(),
        &|_| None,
    )
    .unwrap();
    let gateway = Gateway::start(
        config,
        GatewayOptions {
            store: Some(codemode_mcp::config::StoreSetting::Memory),
            ..GatewayOptions::default()
        },
    )
    .unwrap();
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let serving = gateway.clone();
    tokio::spawn(async move {
        serving
            .serve_http("127.0.0.1:0".parse().unwrap(), |at| {
                let _ = bound_tx.send(at);
            })
            .await
    });
    let at = bound_rx.await.unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Accepting {
        asked: Arc::clone(&asked),
    }
    .serve(StreamableHttpClientTransport::from_uri(format!(
        "http://{at}/mcp"
    )))
    .await
    .unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("exec").with_arguments(
            serde_json::from_value(json!({
                "code": "return [(await MCP.modern.add({ a: 2, b: 3 })).content[0].text, (await MCP.modern.confirm({})).content[0].text]"
            }))
            .unwrap(),
        ))
        .await
        .unwrap();
    let model = result.structured_content.clone().unwrap();
    assert_eq!(model["status"], "completed", "{model}");
    assert_eq!(model["value"], json!(["5", "confirmed"]));
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the client was asked once");
    assert_eq!(
        modern.confirm_rounds.load(Ordering::SeqCst),
        2,
        "the call was sent again with the answer"
    );
    client.cancel().await.unwrap();
    gateway.shutdown();
}
