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
