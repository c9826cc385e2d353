//! The `agentId` a client session's runs carry: the gateway's hooks (and
//! traces) see the `--agent` id the gateway was started for, else
//! `codemode-gateway`. A real rmcp client calls `exec` over streamable
//! HTTP; a `beforeToolCall` command hook records the event it was given.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use codemode_mcp::config::parse_config_for_agent;
use codemode_mcp::{Gateway, GatewayOptions};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

/// Starts a gateway for `agent`, runs one exec through it and returns the
/// hook events the exec produced.
async fn hook_events_for(agent: Option<&str>) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("events");
    let hook = format!(
        "cat >> '{}'; echo; echo '{{\"decision\":\"allow\"}}'",
        seen.display()
    );
    let text = json!({
        "hooks": { "beforeToolCall": { "command": ["sh", "-c", hook] } },
        "agents": { "list": [{ "id": "ops" }] },
    })
    .to_string();
    let (config, _) = parse_config_for_agent(&text, &|_| None, agent).unwrap();
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
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(format!(
            "http://{at}/mcp"
        )))
        .await
        .unwrap();
    let result = client
        .call_tool(
            CallToolRequestParams::new("exec")
                .with_arguments(serde_json::from_value(json!({ "code": "return 1" })).unwrap()),
        )
        .await
        .unwrap();
    let model = result.structured_content.clone().unwrap();
    assert_eq!(model["status"], "completed", "{model}");
    client.cancel().await.unwrap();
    gateway.shutdown();
    std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_see_the_agent_the_gateway_serves() {
    let events = hook_events_for(Some("ops")).await;
    assert!(!events.is_empty(), "the exec was shown to the hook");
    for event in &events {
        assert_eq!(event["event"]["context"]["agentId"], "ops", "{event}");
    }
    let events = hook_events_for(None).await;
    assert!(!events.is_empty(), "the exec was shown to the hook");
    for event in &events {
        assert_eq!(
            event["event"]["context"]["agentId"], "codemode-gateway",
            "{event}"
        );
    }
}
