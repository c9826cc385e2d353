//! `hooks.beforeToolCall` of the gateway config: a program (the event as
//! JSON on stdin, the decision as JSON on stdout) or an HTTP endpoint (the
//! event POSTed, the decision in the body), asked before every nested call
//! and every exec. A hook that fails, times out or answers something that
//! is not a decision blocks the call (fail closed) and says why.
//!
//! The decision: `{"decision": "allow"}`, `{"decision": "block", "reason":
//! "..."}` or `{"decision": "rewrite", "input": {...}}`.

use std::process::Stdio;

use codemode_runtime::{HookDecision, HookFuture, ToolCallEvent, ToolHooks};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::warn;

use crate::config::{HookConfig, HookTarget};

/// The longest decision a hook may print or return.
pub const MAX_HOOK_REPLY_BYTES: usize = 1024 * 1024;

/// How long the rest of a command hook's output is read for after it
/// exited (what it wrote before exiting is already in the pipe).
const EXITED_READ_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// The gateway's `before_tool_call` hook.
pub struct ConfiguredHook {
    config: HookConfig,
    http: reqwest::Client,
}

impl ConfiguredHook {
    /// A hook as configured.
    pub fn new(config: HookConfig) -> ConfiguredHook {
        crate::install_tls_provider();
        ConfiguredHook {
            config,
            http: reqwest::Client::new(),
        }
    }
}

impl ToolHooks for ConfiguredHook {
    fn before_tool_call(&self, event: ToolCallEvent) -> HookFuture {
        let timeout = self.config.timeout;
        let target = self.config.target.clone();
        let http = self.http.clone();
        let tool = event.tool_id.clone();
        Box::pin(async move {
            let body = serde_json::json!({ "hook": "before_tool_call", "event": event });
            let asked = match &target {
                HookTarget::Command(command) => {
                    tokio::time::timeout(timeout, run_command(command, &body)).await
                }
                HookTarget::Url(url) => {
                    tokio::time::timeout(timeout, post(&http, url, &body)).await
                }
            };
            let reply = match asked {
                Ok(Ok(reply)) => reply,
                Ok(Err(why)) => return blocked(&tool, why),
                Err(_) => {
                    return blocked(
                        &tool,
                        format!(
                            "it did not answer within timeoutMs ({} ms)",
                            timeout.as_millis()
                        ),
                    );
                }
            };
            match parse_decision(&reply) {
                Ok(decision) => decision,
                Err(why) => blocked(&tool, why),
            }
        })
    }
}

/// A failing hook blocks: the reason names the hook's failure, not a
/// policy decision, so the model can tell the two apart.
fn blocked(tool: &str, why: String) -> HookDecision {
    warn!(%tool, %why, "before_tool_call hook failed; the call is blocked");
    HookDecision::Block {
        reason: format!(
            "the gateway's before_tool_call hook failed, so the call is blocked (fail closed): {why}"
        ),
    }
}

async fn run_command(command: &[String], body: &Value) -> Result<Vec<u8>, String> {
    let Some((program, args)) = command.split_first() else {
        return Err("the hook command is empty".into());
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, killed whole when the hook is abandoned
        // (timeout): a `sh -c` hook's children must not outlive it.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("could not start `{program}`: {e}"))?;
    let _group = child.id().map(KillGroup);
    let input = body.to_string();
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that exits without reading its input is not an error.
        let _ = stdin.write_all(input.as_bytes()).await;
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let out = child.stdout.take();
    let err = child.stderr.take();
    let read_out = async {
        if let Some(out) = out {
            let _ = out
                .take(MAX_HOOK_REPLY_BYTES as u64 + 1)
                .read_to_end(&mut stdout)
                .await;
        }
    };
    let read_err = async {
        if let Some(err) = err {
            let _ = err.take(4096).read_to_end(&mut stderr).await;
        }
    };
    let status = {
        let reading = async { tokio::join!(read_out, read_err) };
        tokio::pin!(reading);
        tokio::select! {
            ((), ()) = &mut reading => child.wait().await,
            status = child.wait() => {
                // The hook has exited: its answer is in the pipe. A child
                // it left behind may hold the pipe open, so EOF is not
                // waited for long (the process group is killed on return).
                let _ = tokio::time::timeout(EXITED_READ_GRACE, &mut reading).await;
                status
            }
        }
    }
    .map_err(|e| format!("waiting for `{program}` failed: {e}"))?;
    if !status.success() {
        let said = String::from_utf8_lossy(&stderr);
        let first = said.lines().next().unwrap_or("").trim();
        return Err(format!(
            "`{program}` exited with {status}{}",
            if first.is_empty() {
                String::new()
            } else {
                format!(": {first}")
            }
        ));
    }
    if stdout.len() > MAX_HOOK_REPLY_BYTES {
        return Err(format!(
            "`{program}` printed more than {MAX_HOOK_REPLY_BYTES} bytes"
        ));
    }
    Ok(stdout)
}

/// The hook URL as it may be shown: no credentials, query or fragment.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "the hook URL".into(),
    }
}

/// Kills a process group when dropped (the hook ended or was abandoned).
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Ok(pgid) = libc::pid_t::try_from(self.0) {
            // SAFETY: kill(2) with a negative pid signals that process
            // group; no memory is involved. The group is the hook's own
            // (process_group(0)), so nothing else is hit.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> Result<Vec<u8>, String> {
    let response = http
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("POST {} failed: {}", shown(url), e.without_url()))?;
    let url = shown(url);
    let status = response.status();
    if !status.is_success() {
        return Err(format!("POST {url} answered {status}"));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_HOOK_REPLY_BYTES as u64)
    {
        return Err(format!(
            "POST {url} answered more than {MAX_HOOK_REPLY_BYTES} bytes"
        ));
    }
    let mut response = response;
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the answer of {url} failed: {}", e.without_url()))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_HOOK_REPLY_BYTES {
            return Err(format!(
                "POST {url} answered more than {MAX_HOOK_REPLY_BYTES} bytes"
            ));
        }
    }
    Ok(body)
}

/// Reads a hook's answer.
///
/// # Errors
/// What is wrong with it, for the model and the log.
pub fn parse_decision(reply: &[u8]) -> Result<HookDecision, String> {
    const EXPECTED: &str = "expected {\"decision\": \"allow\"}, {\"decision\": \"block\", \"reason\": \"...\"} or {\"decision\": \"rewrite\", \"input\": {...}}";
    let value: Value = serde_json::from_slice::<UniqueKeys>(reply)
        .map(|UniqueKeys(value)| value)
        .map_err(|e| {
            if reply.iter().all(u8::is_ascii_whitespace) {
                format!("it answered nothing; {EXPECTED}")
            } else {
                format!("its answer is not JSON with unique keys ({e}); {EXPECTED}")
            }
        })?;
    let Some(object) = value.as_object() else {
        return Err(format!("its answer is not an object; {EXPECTED}"));
    };
    match object.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(HookDecision::Allow),
        Some("block") => {
            let reason = object
                .get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.trim().is_empty())
                .unwrap_or("no reason given");
            Ok(HookDecision::Block {
                reason: bounded_reason(reason),
            })
        }
        Some("rewrite") => match object.get("input") {
            Some(input @ Value::Object(_)) => Ok(HookDecision::Rewrite {
                input: input.clone(),
            }),
            _ => Err(format!(
                "it asked to rewrite without an object `input`; {EXPECTED}"
            )),
        },
        _ => Err(format!("its answer has no known `decision`; {EXPECTED}")),
    }
}

/// A JSON value read with every object's keys unique. A decision is a
/// security answer: `{"decision":"block","decision":"allow"}` means
/// different things to different parsers (serde_json keeps the last), so
/// it is refused rather than guessed.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<UniqueKeys, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let UniqueKeys(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key `{}` appears twice",
                    bounded_reason(&key)
                )));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The longest block reason passed on to the model.
const MAX_REASON_BYTES: usize = 1024;

fn bounded_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_owned();
    }
    let mut cut = MAX_REASON_BYTES;
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &reason[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_runtime::RunContext;
    use std::sync::Arc;
    use std::time::Duration;

    fn event(tool: &str) -> ToolCallEvent {
        ToolCallEvent {
            tool_kind: "tool",
            tool_id: tool.into(),
            tool_input_kind: None,
            call_id: "exec_1.1".into(),
            parent_call_id: Some("exec_1".into()),
            context: RunContext::default(),
            input: serde_json::json!({ "path": "/x" }),
        }
    }

    /// A hook endpoint: allows `a`, blocks `b`, rewrites `c`, answers 500
    /// for `d`, never answers `e`; records what it was sent.
    async fn endpoint(seen: Arc<std::sync::Mutex<Vec<Value>>>) -> String {
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let seen = Arc::clone(&seen);
                async move {
                    let tool = body["event"]["toolId"].as_str().unwrap_or("").to_owned();
                    seen.lock().unwrap().push(body);
                    let decision = match tool.as_str() {
                        "a" => serde_json::json!({ "decision": "allow" }),
                        "b" => serde_json::json!({ "decision": "block", "reason": "not b" }),
                        "c" => serde_json::json!({ "decision": "rewrite", "input": { "path": "/safe" } }),
                        "d" => {
                            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(Value::Null));
                        }
                        _ => {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            Value::Null
                        }
                    };
                    (axum::http::StatusCode::OK, axum::Json(decision))
                }
            }),
        );
        format!("{}/hook", serve_on_loopback(app).await)
    }

    #[tokio::test]
    async fn a_url_hook_decides_and_fails_closed() {
        let seen = Arc::default();
        let url = endpoint(Arc::clone(&seen)).await;
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Url(url),
            timeout: Duration::from_millis(500),
        });
        assert_eq!(hook.before_tool_call(event("a")).await, HookDecision::Allow);
        assert_eq!(
            hook.before_tool_call(event("b")).await,
            HookDecision::Block {
                reason: "not b".into()
            }
        );
        assert_eq!(
            hook.before_tool_call(event("c")).await,
            HookDecision::Rewrite {
                input: serde_json::json!({ "path": "/safe" })
            }
        );
        for (tool, why) in [("d", "500"), ("e", "timeoutMs (500 ms)")] {
            match hook.before_tool_call(event(tool)).await {
                HookDecision::Block { reason } => {
                    assert!(
                        reason.contains("fail closed") && reason.contains(why),
                        "{reason}"
                    )
                }
                other => panic!("{tool}: {other:?}"),
            }
        }
        let sent = seen.lock().unwrap();
        assert_eq!(sent[0]["hook"], "before_tool_call");
        assert_eq!(sent[0]["event"]["input"]["path"], "/x");
        assert_eq!(sent[0]["event"]["parentCallId"], "exec_1");
    }

    #[tokio::test]
    async fn a_command_hook_that_fails_blocks_with_its_words() {
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Command(vec![
                "sh".into(),
                "-c".into(),
                "echo 'policy store unreachable' >&2; exit 3".into(),
            ]),
            timeout: Duration::from_secs(5),
        });
        match hook.before_tool_call(event("a")).await {
            HookDecision::Block { reason } => {
                assert!(reason.contains("policy store unreachable"), "{reason}");
                assert!(reason.contains("exit status: 3"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let missing = ConfiguredHook::new(HookConfig {
            target: HookTarget::Command(vec!["/nonexistent/hook".into()]),
            timeout: Duration::from_secs(5),
        });
        match missing.before_tool_call(event("a")).await {
            HookDecision::Block { reason } => {
                assert!(reason.contains("could not start"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// An endpoint answering `allow` padded past the reply limit, streamed
    /// in chunks (no `Content-Length`) or in one piece (with it).
    async fn oversized_endpoint() -> String {
        let padded = || {
            let pad = "x".repeat(MAX_HOOK_REPLY_BYTES);
            format!(r#"{{"decision":"allow","pad":"{pad}"}}"#)
        };
        let app = axum::Router::new()
            .route(
                "/chunked",
                axum::routing::post(move || async move {
                    let text = padded();
                    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = text
                        .into_bytes()
                        .chunks(64 << 10)
                        .map(|c| Ok(c.to_vec()))
                        .collect();
                    axum::body::Body::from_stream(futures::stream::iter(chunks))
                }),
            )
            .route(
                "/whole",
                axum::routing::post(move || async move { padded() }),
            );
        serve_on_loopback(app).await
    }

    /// Serves `app` on a loopback port: its base URL.
    async fn serve_on_loopback(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_answer_past_the_reply_limit_blocks_chunked_or_not() {
        let base = oversized_endpoint().await;
        for path in ["chunked", "whole"] {
            let hook = ConfiguredHook::new(HookConfig {
                target: HookTarget::Url(format!("{base}/{path}")),
                timeout: Duration::from_secs(20),
            });
            match hook.before_tool_call(event("a")).await {
                HookDecision::Block { reason } => assert!(
                    reason.contains(&format!("more than {MAX_HOOK_REPLY_BYTES} bytes")),
                    "{path}: {reason}"
                ),
                other => panic!("{path}: an oversized answer was accepted: {other:?}"),
            }
        }
    }

    /// Whether process `pid` still runs (a zombie does not).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // `pid (comm) state ...`: the state follows the last `)`.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|state| state != 'Z' && state != 'X')
        })
    }

    #[tokio::test]
    async fn a_hook_that_times_out_takes_its_children_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let script = format!("sleep 30 & echo $! > '{}'; wait", pid_file.display());
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Command(vec!["sh".into(), "-c".into(), script]),
            timeout: Duration::from_millis(500),
        });
        match hook.before_tool_call(event("a")).await {
            HookDecision::Block { reason } => assert!(reason.contains("timeoutMs"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The kill is sent when the hook is abandoned; give the kernel a
        // moment to deliver it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while running(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!running(pid), "the hook's child {pid} outlived it");
    }

    #[test]
    fn hook_urls_are_shown_without_credentials_query_or_fragment() {
        assert_eq!(
            shown("https://ops:s3cret@hooks.example.com/check?token=abc#frag"),
            "https://hooks.example.com/check"
        );
        assert_eq!(shown("not a url ops:s3cret"), "the hook URL");
    }

    #[tokio::test]
    async fn a_command_hook_counts_when_it_exits_though_a_child_holds_its_output() {
        // `sleep` inherits stdout and keeps it open long after `sh` exits:
        // waiting for EOF would turn the answer into a timeout.
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Command(vec![
                "sh".into(),
                "-c".into(),
                r#"echo '{"decision":"block","reason":"said before exit"}'; sleep 30 & exit 0"#
                    .into(),
            ]),
            timeout: Duration::from_secs(10),
        });
        // Waiting for EOF would end in the timeout's block reason instead.
        assert_eq!(
            hook.before_tool_call(event("a")).await,
            HookDecision::Block {
                reason: "said before exit".into()
            }
        );
    }

    #[test]
    fn decisions_parse_and_everything_else_is_refused_with_the_expected_form() {
        assert_eq!(
            parse_decision(br#"{"decision":"allow"}"#),
            Ok(HookDecision::Allow)
        );
        assert_eq!(
            parse_decision(br#"{"decision":"block","reason":"no"}"#),
            Ok(HookDecision::Block {
                reason: "no".into()
            })
        );
        assert_eq!(
            parse_decision(br#"{"decision":"rewrite","input":{"a":1}}"#),
            Ok(HookDecision::Rewrite {
                input: serde_json::json!({"a": 1})
            })
        );
        for bad in [
            &b""[..],
            b"  \n",
            b"yes",
            b"[1]",
            br#"{"decision":"maybe"}"#,
            br#"{"decision":"rewrite","input":3}"#,
        ] {
            let err = parse_decision(bad).unwrap_err();
            assert!(err.contains("expected {\"decision\""), "{err}");
        }
        for twice in [
            &br#"{"decision":"block","decision":"allow"}"#[..],
            br#"{"decision":"rewrite","input":{"path":"/tmp","path":"/etc"}}"#,
        ] {
            let err = parse_decision(twice).unwrap_err();
            assert!(err.contains("appears twice"), "{err}");
            assert!(err.contains("expected {\"decision\""), "{err}");
        }
        // Every kind of JSON value inside a rewritten input comes through
        // as sent, and keys are unique at every depth, inside arrays too.
        assert_eq!(
            parse_decision(
                br#"{"decision":"rewrite","input":{"t":true,"f":false,"neg":-3,"pos":7,"big":18446744073709551615,"x":1.5,"s":"a\"b\u00e9","plain":"p","z":null,"list":[1,[2,{"k":"v"}],"w",[]],"o":{}}}"#
            ),
            Ok(HookDecision::Rewrite {
                input: serde_json::json!({
                    "t": true, "f": false, "neg": -3, "pos": 7, "big": u64::MAX, "x": 1.5,
                    "s": "a\"b\u{e9}", "plain": "p", "z": null,
                    "list": [1, [2, {"k": "v"}], "w", []], "o": {}
                })
            })
        );
        let err = parse_decision(
            br#"{"decision":"rewrite","input":{"list":[0,[{"path":"/tmp","path":"/etc"}]]}}"#,
        )
        .unwrap_err();
        assert!(err.contains("the key `path` appears twice"), "{err}");
        let long = format!(r#"{{"decision":"block","reason":"{}"}}"#, "é".repeat(2000));
        match parse_decision(long.as_bytes()) {
            Ok(HookDecision::Block { reason }) => assert!(reason.len() <= MAX_REASON_BYTES + 3),
            other => panic!("{other:?}"),
        }
    }

    /// `{"decision":"allow","pad":"xx…"}` exactly `len` bytes long.
    fn allow_padded_to(len: usize) -> Vec<u8> {
        const HEAD: &str = r#"{"decision":"allow","pad":""#;
        const TAIL: &str = r#""}"#;
        let mut reply = HEAD.as_bytes().to_vec();
        reply.resize(len - TAIL.len(), b'x');
        reply.extend_from_slice(TAIL.as_bytes());
        assert_eq!(reply.len(), len);
        reply
    }

    /// A raw HTTP/1.1 endpoint answering every POST with `body`, chunked
    /// (no `Content-Length`) in chunks of `chunk` bytes, except that the
    /// bytes from `last` on go out in one final chunk, written after a
    /// pause so the client has read everything before it: then no read
    /// of the answer ends anywhere but on those chunk bounds.
    async fn raw_chunked_endpoint(body: Vec<u8>, chunk: usize, last: usize) -> String {
        use tokio::io::AsyncBufReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = Arc::new(body);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let body = Arc::clone(&body);
                tokio::spawn(async move {
                    let mut socket = tokio::io::BufReader::new(socket);
                    // The request: headers, then `Content-Length` bytes
                    // (all of it read, so closing never resets the
                    // connection under the answer).
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap();
                        }
                    }
                    let mut request = vec![0; length];
                    if socket.read_exact(&mut request).await.is_err() {
                        return;
                    }
                    let socket = socket.get_mut();
                    let frame = |data: &[u8]| {
                        let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
                        framed.extend_from_slice(data);
                        framed.extend_from_slice(b"\r\n");
                        framed
                    };
                    let mut head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                    for piece in body[..last].chunks(chunk) {
                        head.extend(frame(piece));
                    }
                    if socket.write_all(&head).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let mut tail = frame(&body[last..]);
                    tail.extend_from_slice(b"0\r\n\r\n");
                    if socket.write_all(&tail).await.is_err() {
                        return;
                    }
                    // Held open until the client is done with it.
                    let mut rest = [0; 1024];
                    while socket.read(&mut rest).await.is_ok_and(|n| n > 0) {}
                });
            }
        });
        format!("http://{addr}/hook")
    }

    #[tokio::test]
    async fn a_streamed_answer_passing_the_limit_between_chunk_bounds_blocks() {
        // 1000-byte chunks up to 400 bytes short of the limit, then one
        // chunk of 1000 crossing it: no read ends exactly on the limit.
        let body = allow_padded_to(MAX_HOOK_REPLY_BYTES + 600);
        let url = raw_chunked_endpoint(body, 1000, MAX_HOOK_REPLY_BYTES - 400).await;
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Url(url),
            timeout: Duration::from_secs(20),
        });
        match hook.before_tool_call(event("a")).await {
            HookDecision::Block { reason } => assert!(
                reason.contains("fail closed")
                    && reason.contains(&format!("more than {MAX_HOOK_REPLY_BYTES} bytes")),
                "{reason}"
            ),
            other => panic!("an oversized streamed answer was accepted: {other:?}"),
        }
        // The same server with an answer within the limit is heard.
        let url = raw_chunked_endpoint(br#"{"decision":"allow"}"#.to_vec(), 7, 10).await;
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Url(url),
            timeout: Duration::from_secs(20),
        });
        assert_eq!(hook.before_tool_call(event("a")).await, HookDecision::Allow);
    }

    /// An endpoint answering `allow` padded to exactly `n` bytes at
    /// `/whole/{n}` (with `Content-Length`) and `/chunked/{n}` (streamed
    /// in 64 KiB chunks, without it).
    async fn sized_endpoint() -> String {
        let app = axum::Router::new()
            .route(
                "/whole/{n}",
                axum::routing::post(
                    |axum::extract::Path(n): axum::extract::Path<usize>| async move {
                        allow_padded_to(n)
                    },
                ),
            )
            .route(
                "/chunked/{n}",
                axum::routing::post(
                    |axum::extract::Path(n): axum::extract::Path<usize>| async move {
                        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = allow_padded_to(n)
                            .chunks(64 << 10)
                            .map(|c| Ok(c.to_vec()))
                            .collect();
                        axum::body::Body::from_stream(futures::stream::iter(chunks))
                    },
                ),
            );
        serve_on_loopback(app).await
    }

    #[tokio::test]
    async fn a_url_hook_answer_of_exactly_the_limit_is_heard_and_one_byte_more_blocks() {
        let base = sized_endpoint().await;
        for form in ["whole", "chunked"] {
            for (len, allowed) in [
                (MAX_HOOK_REPLY_BYTES - 1, true),
                (MAX_HOOK_REPLY_BYTES, true),
                (MAX_HOOK_REPLY_BYTES + 1, false),
            ] {
                let hook = ConfiguredHook::new(HookConfig {
                    target: HookTarget::Url(format!("{base}/{form}/{len}")),
                    timeout: Duration::from_secs(20),
                });
                heard_only_within_the_limit(&hook, len, allowed, "").await;
            }
        }
    }

    /// The hook's answer of `len` bytes is heard (`allowed`) or blocks
    /// with a reason naming the limit (after `verb`).
    async fn heard_only_within_the_limit(
        hook: &ConfiguredHook,
        len: usize,
        allowed: bool,
        verb: &str,
    ) {
        match hook.before_tool_call(event("a")).await {
            HookDecision::Allow if allowed => {}
            HookDecision::Block { reason } if !allowed => assert!(
                reason.contains(&format!("{verb}more than {MAX_HOOK_REPLY_BYTES} bytes")),
                "{len}: {reason}"
            ),
            other => panic!("an answer of {len} bytes: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_command_hook_answer_of_exactly_the_limit_is_heard_and_one_byte_more_blocks() {
        // The limit docs/configuration.md promises: a rewritten input of
        // most of a mebibyte is an answer, not an overflow.
        assert_eq!(MAX_HOOK_REPLY_BYTES, 1 << 20);
        let dir = tempfile::tempdir().unwrap();
        for (len, allowed) in [
            (MAX_HOOK_REPLY_BYTES - 1, true),
            (MAX_HOOK_REPLY_BYTES, true),
            (MAX_HOOK_REPLY_BYTES + 1, false),
        ] {
            let reply = dir.path().join(format!("reply-{len}.json"));
            std::fs::write(&reply, allow_padded_to(len)).unwrap();
            let hook = ConfiguredHook::new(HookConfig {
                target: HookTarget::Command(vec!["cat".into(), reply.display().to_string()]),
                timeout: Duration::from_secs(20),
            });
            heard_only_within_the_limit(&hook, len, allowed, "printed ").await;
        }
    }

    #[tokio::test]
    async fn a_failing_url_hook_names_its_url_without_credentials_query_or_fragment() {
        const SECRETS: [&str; 4] = ["ops-user", "hunter2-pw", "tok-secret-42", "frag-secret"];
        let url = endpoint(Arc::default()).await;
        let bare = url.clone();
        let with_secrets = |url: &str| {
            format!(
                "{}?token=tok-secret-42#frag-secret",
                url.replacen("http://", "http://ops-user:hunter2-pw@", 1)
            )
        };
        // Answered 500 ("d"), and a connection closed without an answer.
        let closed = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { while listener.accept().await.is_ok() {} });
            format!("http://{addr}/hook")
        };
        for (url, tool, why) in [(&bare, "d", "answered 500"), (&closed, "a", "failed")] {
            let hook = ConfiguredHook::new(HookConfig {
                target: HookTarget::Url(with_secrets(url)),
                timeout: Duration::from_secs(10),
            });
            match hook.before_tool_call(event(tool)).await {
                HookDecision::Block { reason } => {
                    assert!(reason.contains(&format!("POST {url} {why}")), "{reason}");
                    for secret in SECRETS {
                        assert!(!reason.contains(secret), "{secret} shown: {reason}");
                    }
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_long_reason_is_cut_on_the_character_boundary_below_the_bound() {
        // One ASCII byte first: every `é` (2 bytes) then straddles an even
        // offset, so byte MAX_REASON_BYTES is inside one.
        let reason = format!("a{}", "é".repeat(MAX_REASON_BYTES));
        assert!(!reason.is_char_boundary(MAX_REASON_BYTES));
        let reply = serde_json::json!({ "decision": "block", "reason": reason }).to_string();
        // In a thread, so a cut that never ends fails the test instead of
        // hanging it.
        let (sent, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sent.send(parse_decision(reply.as_bytes()));
        });
        let decision = got
            .recv_timeout(Duration::from_secs(10))
            .expect("the reason is cut in time");
        let kept = (MAX_REASON_BYTES - 1) / 2;
        assert_eq!(
            decision,
            Ok(HookDecision::Block {
                reason: format!("a{}…", "é".repeat(kept))
            })
        );
        assert_eq!(
            bounded_reason(&"é".repeat(2000)).len(),
            MAX_REASON_BYTES + 3
        );
        assert_eq!(
            bounded_reason(&"x".repeat(MAX_REASON_BYTES)),
            "x".repeat(MAX_REASON_BYTES)
        );
    }

    #[tokio::test]
    async fn a_command_hook_that_answers_takes_the_children_it_left_behind_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let script = format!(
            r#"sleep 30 >/dev/null 2>&1 & echo $! > '{}'; echo '{{"decision":"allow"}}'"#,
            pid_file.display()
        );
        let hook = ConfiguredHook::new(HookConfig {
            target: HookTarget::Command(vec!["sh".into(), "-c".into(), script]),
            timeout: Duration::from_secs(10),
        });
        assert_eq!(hook.before_tool_call(event("a")).await, HookDecision::Allow);
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while running(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!running(pid), "the hook's child {pid} outlived it");
    }
}
