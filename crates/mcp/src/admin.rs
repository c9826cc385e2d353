//! The operator endpoint: a separate HTTP listener (off by default) where
//! an operator lists the calls awaiting approval in every client session
//! and approves or denies them. Every request needs the bearer token the
//! gateway was started with; `codemode approvals` drives it.
//!
//! - `GET /approvals` → `{"pending": [{runId, callId, toolId, reason, inputSummary, context}]}`
//! - `POST /approvals/approve` with `{"runId", "callId"}`
//! - `POST /approvals/deny` with `{"runId", "callId", "reason"?}`

use std::net::SocketAddr;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use codemode_runtime::{ApprovalDecision, CodeModeRuntime};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::info;

/// The shortest token the endpoint accepts.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 16;

#[derive(Clone)]
struct Admin {
    runtime: CodeModeRuntime,
    token: String,
}

/// Serves the endpoint on `listener` until `stop`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    runtime: CodeModeRuntime,
    token: String,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let bound: SocketAddr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/approvals", get(list))
        .route("/approvals/approve", post(approve))
        .route("/approvals/deny", post(deny))
        .with_state(Admin { runtime, token });
    info!(%bound, "operator endpoint listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn unauthorized() -> Response {
    problem(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token (Authorization: Bearer <the gateway's admin token>)",
    )
}

/// Checks the bearer token in constant time over its length.
fn authorized(admin: &Admin, headers: &HeaderMap) -> bool {
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let expected = admin.token.as_bytes();
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn list(State(admin): State<Admin>, headers: HeaderMap) -> Response {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    // The run store may be read (held calls of every replica): off the
    // async workers.
    let runtime = admin.runtime.clone();
    match tokio::task::spawn_blocking(move || runtime.pending_approvals()).await {
        Ok(pending) => Json(json!({ "pending": pending })).into_response(),
        Err(_) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "listing the calls awaiting approval failed",
        ),
    }
}

/// `{runId, callId}` of a decision request.
fn target(body: &Value) -> Option<(&str, &str)> {
    let field = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    Some((field("runId")?, field("callId")?))
}

async fn decide(
    admin: Admin,
    headers: HeaderMap,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
    approve: bool,
) -> Response {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    let Ok(Json(body)) = body else {
        return problem(
            StatusCode::BAD_REQUEST,
            "the body is not JSON; expected {\"runId\": \"...\", \"callId\": \"...\"}",
        );
    };
    let Some((run_id, call_id)) = target(&body) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "expected a JSON body with string fields runId and callId (as GET /approvals lists them)",
        );
    };
    let decision = if approve {
        ApprovalDecision::Approve
    } else {
        ApprovalDecision::Deny {
            reason: body
                .get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.trim().is_empty())
                .map_or_else(
                    || "an operator denied it".to_owned(),
                    |r| format!("an operator denied it: {r}"),
                ),
        }
    };
    let runtime = admin.runtime.clone();
    let (run, call) = (run_id.to_owned(), call_id.to_owned());
    // The decision may be written to the run store: off the async workers.
    let decided =
        tokio::task::spawn_blocking(move || runtime.decide_approval(&run, &call, decision)).await;
    match decided {
        Ok(Ok(())) => {
            info!(%run_id, %call_id, approve, "operator decided a call");
            Json(json!({ "decided": true, "runId": run_id, "callId": call_id })).into_response()
        }
        Ok(Err(e @ codemode_runtime::ApprovalError::Store { .. })) => {
            problem(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Ok(Err(e)) => problem(StatusCode::NOT_FOUND, e.to_string()),
        Err(_) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "deciding the call failed; list the calls again to see whether it was decided",
        ),
    }
}

async fn approve(
    State(admin): State<Admin>,
    headers: HeaderMap,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    decide(admin, headers, body, true).await
}

async fn deny(
    State(admin): State<Admin>,
    headers: HeaderMap,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    decide(admin, headers, body, false).await
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use codemode_runtime::{
        Catalog, CodeModeConfig, CodeModeSession, NestedCall, RunContext, ToolDefinition,
        ToolFuture, ToolPolicy, ToolSource,
    };
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TOKEN: &str = "operator-token-0123456789";

    struct Endpoint {
        addr: SocketAddr,
        session: CodeModeSession,
        _stop: tokio_util::sync::DropGuard,
    }

    /// A runtime whose `app.remove` needs approval, one session on it,
    /// and the endpoint serving the runtime on a loopback port.
    async fn endpoint() -> Endpoint {
        let (config, _) =
            CodeModeConfig::from_json5("{tools:{codeMode:{enabled:true, timeoutMs: 10000}}}")
                .expect("config");
        let runtime = CodeModeRuntime::new(config).expect("runtime");
        let tools = vec![
            ToolDefinition::new(ToolSource::Client, "app", "remove")
                .with_description("Deletes things")
                .with_parameters(json!({"type": "object"}))
                .with_approval(true),
        ];
        let catalog = Catalog::build(tools, &ToolPolicy::default()).expect("catalog");
        let echo = |call: NestedCall| -> ToolFuture { Box::pin(async move { Ok(call.input) }) };
        let context = RunContext {
            agent_id: Some("agent".into()),
            session_id: Some("s".into()),
            ..RunContext::default()
        };
        let session = runtime.session(context, catalog, Arc::new(echo));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("address");
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, runtime, TOKEN.into(), stop.clone()));
        Endpoint {
            addr,
            session,
            _stop: stop.drop_guard(),
        }
    }

    /// One HTTP/1.1 request; the status and the body as JSON (`Null` when
    /// it is not JSON).
    async fn request(
        addr: SocketAddr,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: &str,
    ) -> (u16, Value) {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let auth = authorization.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: admin\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("writes");
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.expect("reads");
        let status = reply
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }

    /// Starts a cell whose call waits for approval; its run and call ids.
    async fn held_call(session: &CodeModeSession) -> (String, String) {
        let r = session
            .exec(&json!({ "code": "try { return await tools.remove({ n: 1 }); } catch (e) { return 'failed: ' + e.message; }" }))
            .await
            .to_json();
        assert_eq!(r["status"], "waiting", "{r}");
        let call = &r["pendingToolCalls"][0];
        (
            r["runId"].as_str().expect("run id").to_owned(),
            call["id"].as_str().expect("call id").to_owned(),
        )
    }

    async fn resumed(session: &CodeModeSession, run_id: &str) -> Value {
        let r = session.wait(&json!({ "runId": run_id })).await.to_json();
        assert_eq!(r["status"], "completed", "{r}");
        r["value"].clone()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_the_exact_bearer_token_is_let_in() {
        let e = endpoint().await;
        let wrong_same_length: String = TOKEN.chars().rev().collect();
        for authorization in [
            None,
            Some(String::new()),
            Some(TOKEN.to_owned()),
            Some(bearer("")),
            Some(bearer(&wrong_same_length)),
            Some(bearer(&TOKEN[..TOKEN.len() - 1])),
            Some(bearer(&format!("{TOKEN}x"))),
            Some(format!("Basic {TOKEN}")),
        ] {
            for (method, path) in [
                ("GET", "/approvals"),
                ("POST", "/approvals/approve"),
                ("POST", "/approvals/deny"),
            ] {
                let (status, body) = request(
                    e.addr,
                    method,
                    path,
                    authorization.as_deref(),
                    r#"{"runId":"r","callId":"c"}"#,
                )
                .await;
                assert_eq!(status, 401, "{method} {path} with {authorization:?}");
                assert!(
                    body["error"].as_str().unwrap().contains("bearer token"),
                    "{body}"
                );
            }
        }
        let (status, body) = request(e.addr, "GET", "/approvals", Some(&bearer(TOKEN)), "").await;
        assert_eq!((status, body), (200, json!({ "pending": [] })));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_operator_lists_approves_and_denies_held_calls() {
        let e = endpoint().await;
        let auth = bearer(TOKEN);
        let (approved_run, approved_call) = held_call(&e.session).await;
        let (denied_run, denied_call) = held_call(&e.session).await;
        let (blank_run, blank_call) = held_call(&e.session).await;

        let (status, listed) = request(e.addr, "GET", "/approvals", Some(&auth), "").await;
        assert_eq!(status, 200);
        let pending = listed["pending"].as_array().expect("a list");
        assert_eq!(pending.len(), 3, "{listed}");
        assert!(
            pending.iter().any(|p| p["runId"] == approved_run.as_str()
                && p["callId"] == approved_call.as_str()
                && p["toolId"] == "client:app:remove"),
            "{listed}"
        );

        let target = |run: &str, call: &str, reason: Option<&str>| {
            let mut body = json!({ "runId": run, "callId": call });
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            body.to_string()
        };
        let (status, body) = request(
            e.addr,
            "POST",
            "/approvals/approve",
            Some(&auth),
            &target(&approved_run, &approved_call, None),
        )
        .await;
        assert_eq!(
            (status, body),
            (
                200,
                json!({ "decided": true, "runId": approved_run, "callId": approved_call })
            )
        );
        assert_eq!(resumed(&e.session, &approved_run).await, json!({ "n": 1 }));

        // Denied with a reason, it is passed on; a blank one is left out.
        for (run, call, reason, says) in [
            (
                &denied_run,
                &denied_call,
                "too risky",
                "an operator denied it: too risky",
            ),
            (&blank_run, &blank_call, "  ", "an operator denied it"),
        ] {
            let (status, _) = request(
                e.addr,
                "POST",
                "/approvals/deny",
                Some(&auth),
                &target(run, call, Some(reason)),
            )
            .await;
            assert_eq!(status, 200);
            let value = resumed(&e.session, run).await;
            let text = value.as_str().unwrap();
            assert!(text.contains(says), "{value}");
            assert_eq!(
                text.contains("denied it:"),
                says.contains("denied it:"),
                "{value}"
            );
        }

        // Decided calls are gone; deciding one again names what is wrong.
        let (status, listed) = request(e.addr, "GET", "/approvals", Some(&auth), "").await;
        assert_eq!((status, listed), (200, json!({ "pending": [] })));
        let (status, body) = request(
            e.addr,
            "POST",
            "/approvals/approve",
            Some(&auth),
            &target(&approved_run, &approved_call, None),
        )
        .await;
        assert_eq!(status, 404, "{body}");
        assert!(body["error"].is_string(), "{body}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_request_without_its_ids_is_refused_with_the_expected_form() {
        let e = endpoint().await;
        let auth = bearer(TOKEN);
        let (run, call) = held_call(&e.session).await;
        for (path, body, says) in [
            ("/approvals/approve", "not json", "not JSON"),
            ("/approvals/deny", "{", "not JSON"),
            (
                "/approvals/approve",
                r#"{"callId":"c"}"#,
                "runId and callId",
            ),
            (
                "/approvals/approve",
                &*json!({"runId": run}).to_string(),
                "runId and callId",
            ),
            (
                "/approvals/deny",
                &*json!({"runId": "", "callId": call}).to_string(),
                "runId and callId",
            ),
            (
                "/approvals/deny",
                &*json!({"runId": run, "callId": ""}).to_string(),
                "runId and callId",
            ),
            (
                "/approvals/approve",
                &*json!({"runId": run, "callId": 7}).to_string(),
                "runId and callId",
            ),
        ] {
            let (status, reply) = request(e.addr, "POST", path, Some(&auth), body).await;
            assert_eq!(status, 400, "{path} {body}: {reply}");
            assert!(
                reply["error"].as_str().unwrap().contains(says),
                "{path} {body}: {reply}"
            );
        }
        // Nothing was decided on the way.
        let (_, listed) = request(e.addr, "GET", "/approvals", Some(&auth), "").await;
        assert_eq!(
            listed["pending"].as_array().map(Vec::len),
            Some(1),
            "{listed}"
        );
    }
}
