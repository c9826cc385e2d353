//! The gateway's stdio, between the client and the MCP SDK.
//!
//! The SDK drops a line it cannot decode without answering, so a client
//! that sent garbage, an over-deep or an oversized message waits forever.
//! Every line from the client passes here first: one that is not a JSON
//! object the SDK can read gets the JSON-RPC error it deserves (`-32700`
//! parse error, `-32600` invalid request, `-32602` for `tools/call`
//! `arguments` that are not an object), with the request's id when it can
//! be recovered, and a log line; the rest goes on to the SDK unchanged.
//! Lines longer than [`MAX_LINE_BYTES`] are never buffered whole.
//! Output from the SDK and these errors share stdout one whole line at a
//! time.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tracing::warn;

/// The largest JSON-RPC message the gateway reads from a client.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Deepest nesting of a message (the SDK's parser refuses deeper ones).
const MAX_MESSAGE_DEPTH: usize = 120;

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Hand it to the SDK.
    Forward,
    /// Nothing to do (an empty line).
    Skip,
    /// Answer with this JSON-RPC error line instead (`None`: a broken
    /// notification, which gets no answer, only a log line).
    Answer(Option<String>),
}

fn error_line(id: Value, code: i64, message: String) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

/// The `"id"` of a message that does not parse, when its text shows one
/// plainly (`"id": 5` or `"id": "abc"`); else `null`, as JSON-RPC says.
pub(crate) fn recover_id(line: &[u8]) -> Value {
    let text = String::from_utf8_lossy(&line[..line.len().min(1 << 16)]);
    let Some(at) = text.find("\"id\"") else {
        return Value::Null;
    };
    let rest = text[at + 4..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return Value::Null;
    };
    let rest = rest.trim_start();
    if let Some(body) = rest.strip_prefix('"') {
        if let Some(end) = body.find('"') {
            return Value::String(body[..end].chars().take(256).collect());
        }
        return Value::Null;
    }
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse::<i64>().map_or(Value::Null, Value::from)
}

/// How deeply `line` nests (objects and arrays), counted without parsing.
pub(crate) fn depth_of(line: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in line {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Judges one complete line (without its newline).
pub(crate) fn judge(line: &[u8]) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    let depth = depth_of(line);
    if depth > MAX_MESSAGE_DEPTH {
        let id = recover_id(line);
        warn!(
            depth,
            "client message nests too deeply; answered with a parse error"
        );
        return Verdict::Answer(Some(error_line(
            id,
            -32700,
            format!(
                "Parse error: the message nests {depth} levels deep, more than {MAX_MESSAGE_DEPTH}"
            ),
        )));
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            warn!(error = %e, "client sent a line that is not JSON; answered with a parse error");
            return Verdict::Answer(Some(error_line(
                recover_id(line),
                -32700,
                format!("Parse error: the message is not JSON ({e})"),
            )));
        }
    };
    let messages = match &value {
        Value::Array(items) if !items.is_empty() => items.iter().collect::<Vec<_>>(),
        Value::Object(_) => vec![&value],
        _ => {
            return Verdict::Answer(Some(error_line(
                Value::Null,
                -32600,
                "Invalid Request: a JSON-RPC message is an object".into(),
            )));
        }
    };
    for message in messages {
        let id = message.get("id").cloned();
        let Some(object) = message.as_object() else {
            return Verdict::Answer(Some(error_line(
                Value::Null,
                -32600,
                "Invalid Request: a JSON-RPC message is an object".into(),
            )));
        };
        let is_call = object.get("method").and_then(Value::as_str) == Some("tools/call");
        let arguments = object.get("params").and_then(|p| p.get("arguments"));
        if is_call && arguments.is_some_and(|a| !a.is_object() && !a.is_null()) {
            return Verdict::Answer(id.map(|id| {
                error_line(
                    id,
                    -32602,
                    "Invalid params: tools/call `arguments` must be an object, like {\"code\": \"return 1\"}".into(),
                )
            }));
        }
    }
    Verdict::Forward
}

/// The process's stdin and stdout as async streams. When they are pipes
/// or sockets (how MCP clients start servers: Node gives a socketpair,
/// Python a pipe) they are read and written through the reactor directly;
/// `tokio::io::stdin()`/`stdout()` would move every read and write to a
/// blocking thread and back, two thread hops per message. Anything else
/// (a terminal, a file) keeps tokio's blocking stdio.
pub(crate) fn process_stdio() -> (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
) {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let input = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .and_then(|fd| reactor_stream(fd, StdioEnd::Read));
        let output = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .and_then(|fd| reactor_stream(fd, StdioEnd::Write));
        match (input, output) {
            (Some(ReactorStream::Read(input)), Some(ReactorStream::Write(output))) => {
                return (input, output);
            }
            (Some(ReactorStream::Read(input)), _) => return (input, Box::new(tokio::io::stdout())),
            (_, Some(ReactorStream::Write(output))) => {
                return (Box::new(tokio::io::stdin()), output);
            }
            _ => {}
        }
    }
    (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))
}

#[cfg(unix)]
#[derive(Clone, Copy)]
enum StdioEnd {
    Read,
    Write,
}

#[cfg(unix)]
enum ReactorStream {
    Read(Box<dyn AsyncRead + Unpin + Send>),
    Write(Box<dyn AsyncWrite + Unpin + Send>),
}

/// `fd` (a duplicate of stdin or stdout) registered with the reactor, if
/// it is a pipe or a socket; `None` leaves the end to tokio's stdio.
#[cfg(unix)]
fn reactor_stream(fd: std::os::fd::OwnedFd, end: StdioEnd) -> Option<ReactorStream> {
    use std::os::unix::fs::FileTypeExt;
    let file = std::fs::File::from(fd);
    let kind = file.metadata().ok()?.file_type();
    let fd = std::os::fd::OwnedFd::from(file);
    if kind.is_fifo() {
        // Checks the access mode and sets O_NONBLOCK.
        return match end {
            StdioEnd::Read => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                .ok()
                .map(|r| ReactorStream::Read(Box::new(r))),
            StdioEnd::Write => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
                .ok()
                .map(|w| ReactorStream::Write(Box::new(w))),
        };
    }
    if kind.is_socket() {
        let socket = std::os::unix::net::UnixStream::from(fd);
        socket.set_nonblocking(true).ok()?;
        let stream = tokio::net::UnixStream::from_std(socket).ok()?;
        return Some(match end {
            StdioEnd::Read => ReactorStream::Read(Box::new(stream)),
            StdioEnd::Write => ReactorStream::Write(Box::new(stream)),
        });
    }
    None
}

/// Starts the guard between `input`/`output` (the process's stdin and
/// stdout) and returns the pair the SDK serves on. `input_ended` is
/// cancelled when the client's input ends (EOF or a read error).
pub(crate) fn guard<R, W>(
    input: R,
    output: W,
    input_ended: tokio_util::sync::CancellationToken,
) -> (DuplexStream, DuplexStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (sdk_in, mut to_sdk) = tokio::io::duplex(1 << 20);
    let (from_sdk, sdk_out) = tokio::io::duplex(1 << 20);
    let (errors_tx, mut errors_rx) = mpsc::unbounded_channel::<String>();

    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(1 << 16, input);
        let mut line = Vec::new();
        loop {
            line.clear();
            let (complete, oversized) =
                match read_line_capped(&mut reader, &mut line, MAX_LINE_BYTES).await {
                    Ok(read) => read,
                    Err(_) => break,
                };
            if !complete && line.is_empty() && !oversized {
                break; // end of input
            }
            if oversized {
                warn!(
                    limit = MAX_LINE_BYTES,
                    "client message too large; answered with an error"
                );
                let _ = errors_tx.send(error_line(
                    recover_id(&line),
                    -32600,
                    format!("Invalid Request: the message is larger than {MAX_LINE_BYTES} bytes"),
                ));
                if !complete {
                    break;
                }
                continue;
            }
            match judge(&line) {
                Verdict::Skip => {}
                Verdict::Answer(Some(answer)) => {
                    let _ = errors_tx.send(answer);
                }
                Verdict::Answer(None) => {}
                Verdict::Forward => {
                    line.push(b'\n');
                    if to_sdk.write_all(&line).await.is_err() {
                        break;
                    }
                }
            }
            if !complete {
                break;
            }
        }
        // End of input reaches the SDK as end of its input.
        input_ended.cancel();
        let _ = to_sdk.shutdown().await;
    });

    tokio::spawn(async move {
        let mut output = output;
        let mut from_sdk = BufReader::new(from_sdk);
        let mut line = Vec::new();
        loop {
            tokio::select! {
                read = from_sdk.read_until(b'\n', &mut line) => {
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                                break;
                            }
                            line.clear();
                        }
                    }
                }
                Some(answer) = errors_rx.recv() => {
                    let text = format!("{answer}\n");
                    if output.write_all(text.as_bytes()).await.is_err() || output.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    (sdk_in, sdk_out)
}

/// Reads one line into `line` (without the newline), keeping at most `cap`
/// bytes: `(ended with a newline, was longer than the cap)`.
pub(crate) async fn read_line_capped<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<(bool, bool)> {
    let mut oversized = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok((false, oversized));
        }
        let (chunk, found) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], true),
            None => (buffer, false),
        };
        if line.len() + chunk.len() > cap {
            oversized = true;
        } else {
            line.extend_from_slice(chunk);
        }
        let used = chunk.len() + usize::from(found);
        reader.consume(used);
        if found {
            return Ok((true, oversized));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert_eq!(depth_of(b"1"), 0);
        assert_eq!(depth_of(br#"{"a":[1,{"b":"]]]{{"}]}"#), 3);
        assert_eq!(depth_of(br#"["\"[[["]"#), 1);
    }

    fn answer(line: &str) -> Value {
        match judge(line.as_bytes()) {
            Verdict::Answer(Some(text)) => serde_json::from_str(&text).unwrap(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn good_messages_pass() {
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Verdict::Forward
        );
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"code":"return 1"}}}"#),
            Verdict::Forward
        );
        assert_eq!(judge(b"   "), Verdict::Skip);
    }

    #[test]
    fn garbage_gets_a_parse_error_with_the_id_when_it_shows() {
        let a = answer(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list""#);
        assert_eq!(a["id"], 7);
        assert_eq!(a["error"]["code"], -32700);
        let a = answer("hello");
        assert_eq!(a["id"], Value::Null);
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"x","method":"m","params":{}{}}}"#,
            "[".repeat(500),
            "]".repeat(500)
        );
        let a = answer(&deep);
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!("x"), json!(-32700))
        );
        assert!(a["error"]["message"].as_str().unwrap().contains("nests"));
    }

    #[test]
    fn non_object_arguments_are_invalid_params() {
        let a = answer(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":[1]}}"#,
        );
        assert_eq!(a["error"]["code"], -32602);
        assert_eq!(a["id"], 3);
        let a = answer("5");
        assert_eq!(a["error"]["code"], -32600);
    }
}
