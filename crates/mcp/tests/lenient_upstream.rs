//! An upstream that answers every method it does not know with an empty
//! result (`{}`), `server/discover` included — as the MCP conformance
//! suite's `initialize` scenario server does. The gateway connects as the
//! official clients do by default, with the `initialize` handshake (a
//! session), so such a server is reached; it is never misread as a 2026
//! server ("expect initialized result, but received: EmptyResult").
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use codemode_mcp::{Upstreams, parse_config};
use serde_json::{Value, json};

/// Answers JSON-RPC over streamable HTTP (plain JSON responses), noting
/// every method it was sent.
async fn serve_lenient(seen: Arc<Mutex<Vec<String>>>) -> String {
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |Json(message): Json<Value>| {
            let seen = Arc::clone(&seen);
            async move {
                let method = message["method"].as_str().unwrap_or("").to_owned();
                seen.lock().unwrap().push(method.clone());
                let Some(id) = message.get("id").cloned() else {
                    // A notification.
                    return StatusCode::ACCEPTED.into_response();
                };
                let result = match method.as_str() {
                    "initialize" => json!({
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "lenient", "version": "1.0.0"},
                    }),
                    "tools/list" => json!({"tools": [{
                        "name": "echo",
                        "description": "Echoes its text",
                        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                    }]}),
                    "tools/call" => json!({"content": [{
                        "type": "text",
                        "text": message["params"]["arguments"]["text"],
                    }]}),
                    // Everything else, `server/discover` and `ping` included.
                    _ => json!({}),
                };
                let reply: Response =
                    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
                reply
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answers_every_method_with_an_empty_result_is_reached_by_initialize() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = serve_lenient(Arc::clone(&seen)).await;
    let (config, _) = parse_config(
        &format!(r#"{{ mcpServers: {{ lenient: {{ url: "{url}", startupTimeoutMs: 20000 }} }} }}"#),
        &|_| None,
    )
    .unwrap();
    let upstreams = Upstreams::start(config.servers, Default::default());
    upstreams.started().await;
    let server = &upstreams.servers()[0];
    assert!(
        server.is_ready(),
        "the server is down: {:?}",
        server.down_reason()
    );
    let catalog = upstreams.catalog();
    assert!(
        catalog.get("mcp:lenient:echo").is_some(),
        "its tool is catalogued"
    );
    let mut input = serde_json::Map::new();
    input.insert("text".into(), json!("hello"));
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        server.call_tool("echo", input, None, None),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(result["content"][0]["text"], "hello", "{result}");
    let methods = seen.lock().unwrap().clone();
    assert_eq!(
        methods.first().map(String::as_str),
        Some("initialize"),
        "a session first: {methods:?}"
    );
    assert!(
        !methods.iter().any(|m| m == "server/discover"),
        "a server that takes the handshake is not probed: {methods:?}"
    );
    upstreams.shutdown();
}
