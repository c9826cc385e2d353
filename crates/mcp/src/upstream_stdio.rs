//! The transport to a stdio upstream, with a guard on its replies.
//!
//! The SDK's own stdio transport drops a line it cannot decode (over
//! 64 MiB, nested past `serde_json`'s 128 levels, a bare `NaN`, ...) and a
//! reply whose id matches no request; the call waiting for it then fails
//! only at the upstream timeout, as "did not answer". Here the child's
//! stdout is read and decoded by us, so such a reply fails its call at
//! once with the real reason:
//! - a reply that cannot be read fails the request whose id it shows (or,
//!   without a readable id, the only request in flight);
//! - a reply to an id nobody asked for fails the only request in flight
//!   (with several in flight it cannot be attributed, and is logged);
//! - a late real answer to a request already failed here is dropped.
//!
//! Writing (and its framing) stays the SDK's.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, ClientRequest, ErrorCode, ErrorData, JsonRpcError, JsonRpcMessage,
    JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use tokio::io::BufReader;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::stdio_guard::{depth_of, read_line_capped, recover_id};

/// The largest message an upstream server may send (a tool result of a
/// large document: the runtime hands results this large to cells as
/// handles they read in slices).
pub const MAX_UPSTREAM_MESSAGE_BYTES: usize = 64 << 20;

/// How long a closing server gets to exit after its stdin closed.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// Ids of requests failed here whose late answers are still dropped.
const REMEMBERED_FAILED: usize = 256;

/// The requests sent to the server and not yet answered.
#[derive(Default)]
pub(crate) struct InFlight {
    pending: HashSet<RequestId>,
    /// Those of `pending` that are `tools/call` requests.
    tool_calls: HashSet<RequestId>,
    /// Requests this guard failed (oldest first): their real answers, if
    /// they ever come, are not strays.
    failed_here: VecDeque<RequestId>,
}

impl InFlight {
    fn sent(&mut self, id: RequestId, tool_call: bool) {
        if tool_call {
            self.tool_calls.insert(id.clone());
        }
        self.pending.insert(id);
    }

    /// `id` answered or failed: no longer in flight.
    fn settled(&mut self, id: &RequestId) -> bool {
        self.tool_calls.remove(id);
        self.pending.remove(id)
    }

    /// Fails `id` here: the message the SDK sees in place of its answer.
    fn fail(&mut self, id: RequestId, message: String) -> RxJsonRpcMessage<RoleClient> {
        self.settled(&id);
        if self.failed_here.len() == REMEMBERED_FAILED {
            self.failed_here.pop_front();
        }
        self.failed_here.push_back(id.clone());
        JsonRpcMessage::Error(JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id: Some(id),
            error: ErrorData::new(ErrorCode::INTERNAL_ERROR, message, None),
        })
    }

    fn only_pending(&self) -> Option<RequestId> {
        match self.pending.len() {
            1 => self.pending.iter().next().cloned(),
            _ => None,
        }
    }

    /// What to hand the SDK for one line from the server (`None`: nothing).
    pub(crate) fn judge(
        &mut self,
        server: &str,
        line: &[u8],
        oversized: bool,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if !oversized && line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        if !oversized
            && !self.tool_calls.is_empty()
            && let Some(message) = tool_call_reply(line)
            && let JsonRpcMessage::Response(response) = &message
            && self.tool_calls.contains(&response.id)
        {
            return self.received(server, message);
        }
        let problem = if oversized {
            format!(
                "a message larger than {MAX_UPSTREAM_MESSAGE_BYTES} bytes (the gateway's limit per upstream message)"
            )
        } else {
            match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
                Ok(message) => return self.received(server, message),
                Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
                    match without_deep_tools(line) {
                        Some((pruned, left_out)) => {
                            for tool in &left_out {
                                warn!(
                                    server,
                                    tool,
                                    "tool left out: its definition nests deeper than {MAX_TOOL_DEPTH} levels"
                                );
                            }
                            match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(&pruned) {
                                Ok(message) => return self.received(server, message),
                                Err(e) => format!("a message that is not valid JSON-RPC ({e})"),
                            }
                        }
                        None => format!("a message that is not valid JSON-RPC ({e})"),
                    }
                }
                Err(e) => {
                    if is_unknown_notification(line) {
                        debug!(server, error = %e, "ignoring a notification the SDK cannot read");
                        return None;
                    }
                    format!("a message that is not valid JSON-RPC ({e})")
                }
            }
        };
        let target = match id_of(&recover_id(line)) {
            Some(id) if self.pending.contains(&id) => Some(id),
            Some(_) => None,
            None => self.only_pending(),
        };
        match target {
            Some(id) => {
                warn!(server, %problem, "unreadable reply from an MCP server; failing its request");
                Some(self.fail(id, format!("the server sent {problem}")))
            }
            None => {
                warn!(server, %problem, "unreadable message from an MCP server; no request to attribute it to");
                None
            }
        }
    }

    fn received(
        &mut self,
        server: &str,
        message: RxJsonRpcMessage<RoleClient>,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let id = match &message {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            // Requests and notifications from the server go to the SDK.
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => {
                return Some(message);
            }
        };
        let Some(id) = id else {
            // An error without an id answers nothing in particular.
            return match self.only_pending() {
                Some(only) => {
                    let text = match &message {
                        JsonRpcMessage::Error(e) => e.error.message.to_string(),
                        _ => String::new(),
                    };
                    Some(self.fail(
                        only,
                        format!("the server answered with an error without an id: {text}"),
                    ))
                }
                None => Some(message),
            };
        };
        if self.settled(&id) {
            return Some(message);
        }
        if let Some(at) = self.failed_here.iter().position(|f| f == &id) {
            self.failed_here.remove(at);
            debug!(server, %id, "dropping a late answer to a request already failed");
            return None;
        }
        match self.only_pending() {
            Some(only) => {
                warn!(server, %id, expected = %only, "reply with an id no request has; failing the one request in flight");
                Some(self.fail(
                    only.clone(),
                    format!(
                        "the server answered request {only} with id {id}, which matches no request"
                    ),
                ))
            }
            None => {
                warn!(server, %id, "reply with an id no request has; dropped");
                None
            }
        }
    }
}

/// A plain result to a `tools/call`, read straight as a `CallToolResult`.
///
/// The SDK's message type is an untagged union tried variant by variant
/// (and its result type is another, with fifteen variants before
/// `CallToolResult`): 7.9 % of the gateway's samples in a loop of nested
/// calls went to that parse (BENCHMARKS.md). A line that is not exactly
/// such a reply (a `method` or `error` beside the result, a result key a
/// tool result does not have, a task or `input_required` result) gives
/// `None` and takes the SDK's path.
fn tool_call_reply(line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Reply {
        jsonrpc: JsonRpcVersion2_0,
        id: RequestId,
        result: Box<serde_json::value::RawValue>,
        method: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
    }
    /// Only a tool result's own keys: with any other (`action`, `task`,
    /// ...) the SDK's union may read an earlier variant.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct ToolResultKeys {
        content: Option<IgnoredAny>,
        structured_content: Option<IgnoredAny>,
        is_error: Option<IgnoredAny>,
        result_type: Option<IgnoredAny>,
        #[serde(rename = "_meta")]
        meta: Option<IgnoredAny>,
    }
    let reply: Reply = serde_json::from_slice(line).ok()?;
    if reply.method.is_some() || reply.error.is_some() {
        return None;
    }
    serde_json::from_str::<ToolResultKeys>(reply.result.get()).ok()?;
    let result: CallToolResult = serde_json::from_str(reply.result.get()).ok()?;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: reply.jsonrpc,
        id: reply.id,
        result: ServerResult::CallToolResult(result),
    }))
}

/// Deepest nesting of one tool definition in a `tools/list` reply: the
/// SDK reads a message to 128 levels, and a tool sits 4 levels down.
const MAX_TOOL_DEPTH: usize = 120;

/// A `tools/list` reply nesting past the SDK's limit, with the tools that
/// nest too deeply left out (so one such tool does not take its server's
/// other tools with it), and the names of those left out. `None` when the
/// line is not such a reply or nothing is left out. Only shallow levels
/// are decoded: `RawValue` skips the rest without recursion.
fn without_deep_tools(line: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    use serde_json::value::RawValue;
    type RawObject = std::collections::BTreeMap<String, Box<RawValue>>;
    #[derive(serde::Deserialize)]
    struct Named {
        name: Option<String>,
    }
    let mut message: RawObject = serde_json::from_slice(line).ok()?;
    let mut result: RawObject = serde_json::from_str(message.get("result")?.get()).ok()?;
    let tools: Vec<Box<RawValue>> = serde_json::from_str(result.get("tools")?.get()).ok()?;
    let mut left_out = Vec::new();
    let kept: Vec<Box<RawValue>> = tools
        .into_iter()
        .filter(|tool| {
            let fits = depth_of(tool.get().as_bytes()) <= MAX_TOOL_DEPTH;
            if !fits {
                let name = serde_json::from_str::<Named>(tool.get())
                    .ok()
                    .and_then(|n| n.name)
                    .unwrap_or_else(|| "(unnamed)".into());
                left_out.push(name.chars().take(128).collect());
            }
            fits
        })
        .collect();
    if left_out.is_empty() {
        return None;
    }
    result.insert("tools".into(), serde_json::value::to_raw_value(&kept).ok()?);
    message.insert(
        "result".into(),
        serde_json::value::to_raw_value(&result).ok()?,
    );
    Some((serde_json::to_vec(&message).ok()?, left_out))
}

fn id_of(value: &Value) -> Option<RequestId> {
    match value {
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        Value::String(s) => Some(RequestId::String(s.as_str().into())),
        _ => None,
    }
}

/// A well-formed notification of a kind the SDK does not know (it would
/// ignore it too).
fn is_unknown_notification(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(line)
        .is_ok_and(|v| v.get("method").is_some_and(Value::is_string) && v.get("id").is_none())
}

/// The running child and its guarded transport.
pub(crate) struct GuardedChild {
    child: Option<Box<dyn ChildWrapper>>,
    /// Only its `send` is used: the SDK's framing on the child's stdin.
    writer: AsyncRwTransport<RoleClient, tokio::io::Empty, ChildStdin>,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    in_flight: Arc<Mutex<InFlight>>,
    reader: tokio::task::JoinHandle<()>,
}

impl GuardedChild {
    /// Spawns `command` with piped stdio; returns the transport, the
    /// child's stderr and its pid.
    pub(crate) fn spawn(
        mut command: CommandWrap,
        server: String,
    ) -> std::io::Result<(GuardedChild, Option<ChildStderr>, Option<u32>)> {
        command
            .command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let stdin = child
            .inner_mut()
            .stdin()
            .take()
            .ok_or_else(|| std::io::Error::other("the child has no stdin"))?;
        let stdout = child
            .inner_mut()
            .stdout()
            .take()
            .ok_or_else(|| std::io::Error::other("the child has no stdout"))?;
        let stderr = child.inner_mut().stderr().take();
        let pid = child.id();
        let in_flight = Arc::new(Mutex::new(InFlight::default()));
        let (tx, incoming) = mpsc::channel(64);
        let reader = tokio::spawn(read_replies(server, stdout, Arc::clone(&in_flight), tx));
        let transport = GuardedChild {
            child: Some(child),
            writer: AsyncRwTransport::new_client(tokio::io::empty(), stdin),
            incoming,
            in_flight,
            reader,
        };
        Ok((transport, stderr, pid))
    }
}

async fn read_replies(
    server: String,
    stdout: ChildStdout,
    in_flight: Arc<Mutex<InFlight>>,
    tx: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
) {
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let Ok((complete, oversized)) =
            read_line_capped(&mut reader, &mut line, MAX_UPSTREAM_MESSAGE_BYTES).await
        else {
            break;
        };
        if !complete && line.is_empty() && !oversized {
            break; // the server closed its stdout
        }
        let message = in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .judge(&server, &line, oversized);
        if let Some(message) = message
            && tx.send(message).await.is_err()
        {
            break;
        }
        if !complete {
            break;
        }
    }
}

impl Transport<RoleClient> for GuardedChild {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &item {
            self.in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .sent(
                    request.id.clone(),
                    matches!(request.request, ClientRequest::CallToolRequest(_)),
                );
        }
        self.writer.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // As the MCP stdio shutdown says: close stdin, give the server a
        // moment to exit, then kill it.
        self.writer.close().await?;
        self.reader.abort();
        // The child stays in `self` until it is gone, so a cancelled close
        // still kills it on drop.
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let exited = matches!(
            tokio::time::timeout(EXIT_GRACE, child.wait()).await,
            Ok(Ok(_))
        );
        if !exited {
            Box::into_pin(child.kill()).await?;
        }
        self.child = None;
        Ok(())
    }
}

impl Drop for GuardedChild {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(mut child) = self.child.take() {
            // kill() also reaps the child (no zombie); without a runtime
            // left, at least send the signal.
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(async move {
                        let _ = Box::into_pin(child.kill()).await;
                    });
                }
                Err(_) => {
                    let _ = child.start_kill();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(message: Option<RxJsonRpcMessage<RoleClient>>) -> (Option<RequestId>, String) {
        match message {
            Some(JsonRpcMessage::Error(e)) => (e.id, e.error.message.to_string()),
            Some(other) => panic!("expected an error, got {other:?}"),
            None => panic!("expected an error, got nothing"),
        }
    }

    fn in_flight(ids: &[i64]) -> InFlight {
        let mut f = InFlight::default();
        for id in ids {
            f.sent(RequestId::Number(*id), true);
        }
        f
    }

    #[test]
    fn good_replies_pass_and_end_their_request() {
        let mut f = in_flight(&[1, 2]);
        let line = br#"{"jsonrpc":"2.0","id":2,"result":{}}"#;
        assert!(matches!(
            f.judge("s", line, false),
            Some(JsonRpcMessage::Response(_))
        ));
        assert_eq!(f.only_pending(), Some(RequestId::Number(1)));
        let note = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        assert!(matches!(
            f.judge("s", note, false),
            Some(JsonRpcMessage::Notification(_))
        ));
        assert!(f.judge("s", b"  ", false).is_none());
    }

    #[test]
    fn unreadable_replies_fail_their_request_with_the_reason() {
        let mut f = in_flight(&[1, 2]);
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"content":[],"structuredContent":{}1{}}}}}"#,
            "[".repeat(130),
            "]".repeat(130)
        );
        let (id, message) = error_of(f.judge("s", deep.as_bytes(), false));
        assert_eq!(id, Some(RequestId::Number(2)));
        assert!(message.contains("recursion limit"), "{message}");
        let (id, message) =
            error_of(f.judge("s", br#"{"jsonrpc":"2.0","id":1,"result":NaN}"#, false));
        assert_eq!(id, Some(RequestId::Number(1)));
        assert!(message.contains("not valid JSON-RPC"), "{message}");
        // Their real answers, arriving late, are dropped.
        assert!(
            f.judge("s", br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, false)
                .is_none()
        );
    }

    /// The SDK's own reading of a line, as JSON.
    fn sdk_reading(line: &[u8]) -> Option<Value> {
        serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line)
            .ok()
            .map(|m| serde_json::to_value(m).unwrap())
    }

    #[test]
    fn tool_call_replies_read_directly_are_what_the_sdk_reads() {
        let direct = [
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"The sum of 1 and 2 is 3."}]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"structuredContent":null,"isError":true,"_meta":{"k":1}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete","structuredContent":{"a":[1,2]}},"extra":5}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}]}}"#,
        ];
        for line in direct {
            let read = tool_call_reply(line.as_bytes()).map(|m| serde_json::to_value(m).unwrap());
            assert_eq!(read, sdk_reading(line.as_bytes()), "{line}");
            assert!(read.is_some(), "{line}");
            let mut f = in_flight(&[3]);
            assert!(matches!(
                f.judge("s", line.as_bytes(), false),
                Some(JsonRpcMessage::Response(_))
            ));
            assert!(f.pending.is_empty() && f.tool_calls.is_empty());
        }
        // Not plain tool results: left to the SDK's reading.
        let other = [
            r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"input_required","inputRequests":{}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"task":{"taskId":"t","status":"working"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"x","result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"},"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            // The SDK reads this as an elicitation result (found by the
            // property test below).
            r#"{"jsonrpc":"2.0","id":9,"result":{"action":"accept","structuredContent":[]},"x":1}"#,
            r#"{"jsonrpc":"1.0","id":3,"result":{"content":[]}}"#,
        ];
        for line in other {
            assert!(tool_call_reply(line.as_bytes()).is_none(), "{line}");
        }
        // A reply to a request that is not a tools/call takes the SDK's path.
        let mut f = InFlight::default();
        f.sent(RequestId::Number(3), false);
        assert!(f.tool_calls.is_empty());
        assert!(matches!(
            f.judge("s", direct[0].as_bytes(), false),
            Some(JsonRpcMessage::Response(_))
        ));
    }

    proptest::proptest! {
        /// Whatever a server sends, the direct reading is the SDK's or
        /// nothing.
        #[test]
        fn the_direct_reading_never_differs_from_the_sdks(
            fields in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "content", "structuredContent", "isError", "_meta", "resultType",
                        "task", "tools", "action", "messages", "inputRequests",
                    ]),
                    proptest::sample::select(vec![
                        "[]", "{}", "null", "true", "1", "\"complete\"", "\"input_required\"",
                        "[{\"type\":\"text\",\"text\":\"x\"}]", "[{\"type\":\"nope\"}]",
                        "{\"a\":[1]}", "\"accept\"",
                    ]),
                ),
                0..5,
            ),
            outer in proptest::sample::select(vec!["", ",\"method\":\"m\"", ",\"error\":{\"code\":1,\"message\":\"m\"}", ",\"x\":1"]),
        ) {
            let result = fields
                .iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect::<Vec<_>>()
                .join(",");
            let line = format!(r#"{{"jsonrpc":"2.0","id":9,"result":{{{result}}}{outer}}}"#);
            if let Some(read) = tool_call_reply(line.as_bytes()) {
                proptest::prop_assert_eq!(Some(serde_json::to_value(read).unwrap()), sdk_reading(line.as_bytes()), "{}", line);
            }
        }
    }

    /// A schema nesting `levels` objects deep.
    fn deep_schema(levels: usize) -> String {
        let mut schema = r#"{"type":"string"}"#.to_owned();
        for _ in 0..levels {
            schema = format!(r#"{{"type":"object","properties":{{"a":{schema}}}}}"#);
        }
        schema
    }

    #[test]
    fn a_tool_nesting_too_deeply_is_left_out_alone() {
        let mut f = in_flight(&[4]);
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":4,"result":{{"tools":[{{"name":"shallow","inputSchema":{{"type":"object"}}}},{{"name":"deep \"one\" [","inputSchema":{}}},{{"name":"fine","inputSchema":{}}}]}}}}"#,
            deep_schema(100),
            deep_schema(20),
        );
        let Some(JsonRpcMessage::Response(response)) = f.judge("s", line.as_bytes(), false) else {
            panic!("the reply should pass without the deep tool");
        };
        let tools = serde_json::to_value(&response.result).unwrap();
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["shallow", "fine"]);
        assert!(f.pending.is_empty(), "the request was answered");
        assert_eq!(
            without_deep_tools(line.as_bytes()).unwrap().1,
            [r#"deep "one" ["#]
        );
        // A deep reply that lists no tools still fails its request.
        assert!(
            without_deep_tools(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#).is_none()
        );
    }

    #[test]
    fn oversized_replies_fail_by_their_id_or_the_only_request() {
        let mut f = in_flight(&[7]);
        let (id, message) = error_of(f.judge("s", br#"{"jsonrpc":"2.0","id":7,"result":{"#, true));
        assert_eq!(id, Some(RequestId::Number(7)));
        assert!(message.contains("larger than 67108864 bytes"), "{message}");
        let mut f = in_flight(&[8]);
        let (id, _) = error_of(f.judge("s", b"xxxxxxxx", true));
        assert_eq!(id, Some(RequestId::Number(8)));
        // With two in flight and no readable id nothing can be failed.
        let mut f = in_flight(&[8, 9]);
        assert!(f.judge("s", b"garbage", false).is_none());
        assert_eq!(f.pending.len(), 2);
    }

    #[test]
    fn a_stray_id_fails_the_only_request_in_flight() {
        let mut f = in_flight(&[3]);
        let (id, message) =
            error_of(f.judge("s", br#"{"jsonrpc":"2.0","id":1003,"result":{}}"#, false));
        assert_eq!(id, Some(RequestId::Number(3)));
        assert!(message.contains("with id 1003"), "{message}");
        let mut f = in_flight(&[3, 4]);
        assert!(
            f.judge("s", br#"{"jsonrpc":"2.0","id":1003,"result":{}}"#, false)
                .is_none()
        );
        assert_eq!(f.pending.len(), 2);
    }
}
