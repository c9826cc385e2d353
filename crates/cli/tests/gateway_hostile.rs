//! `codemode serve` over stdio against hostile input, spoken as raw
//! JSON-RPC lines (the protocol itself is what is under test): a cell deep
//! enough to overflow a parser's stack fails alone, a client's
//! `notifications/cancelled` stops a CPU-busy cell, and end of input stops
//! running cells instead of waiting for their timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Gateway {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
}

impl Gateway {
    /// `codemode serve` with no upstreams and a long cell timeout,
    /// initialized.
    fn start() -> Gateway {
        let config = std::env::temp_dir().join(format!(
            "codemode-hostile-{}-{}.json5",
            std::process::id(),
            codemode_sandbox_nonce()
        ));
        std::fs::write(
            &config,
            // A server that never starts: a config with no tool source is
            // refused, and these cells need none.
            r#"{ tools: { codeMode: { enabled: true, timeoutMs: 60000 } }, mcpServers: { ghost: { command: "/nonexistent/codemode-test-server" } } }"#,
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
            // Data (the default run store) of this test process, not the user's.
            .env(
                "CODEMODE_DATA_DIR",
                std::env::temp_dir().join(format!("codemode-test-data-{}", std::process::id())),
            )
            .args(["serve", "--config", config.to_str().unwrap()])
            .env("CODEMODE_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("codemode serve starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(value);
                }
            }
        });
        let stdin = child.stdin.take();
        let mut gateway = Gateway {
            child,
            stdin,
            lines,
        };
        gateway.send(&json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } }
        }));
        let init = gateway.response(0, Duration::from_secs(30));
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        gateway.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        gateway
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn exec(&mut self, id: u64, code: &str) {
        self.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "exec", "arguments": { "code": code } }
        }));
    }

    /// The response to request `id` (other messages are skipped).
    fn response(&mut self, id: u64, limit: Duration) -> Value {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let message = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no response to request {id} within {limit:?}"));
            if message["id"] == id {
                return message;
            }
        }
    }

    /// CPU time the gateway process used so far (user + system).
    /// Waits until the gateway has burned 100 ms of CPU more (a busy cell
    /// runs).
    fn wait_until_burning(&self) {
        let start = self.cpu_time();
        let until = Instant::now() + Duration::from_secs(30);
        while self.cpu_time().saturating_sub(start) < Duration::from_millis(100) {
            assert!(Instant::now() < until, "the busy cell never started");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the gateway burns under a quarter of a core over a
    /// 400 ms window; fails after `limit`.
    fn wait_until_idle(&self, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            let before = self.cpu_time();
            std::thread::sleep(Duration::from_millis(400));
            let burned = self.cpu_time().saturating_sub(before);
            if burned < Duration::from_millis(100) {
                return;
            }
            assert!(
                Instant::now() < until,
                "the cancelled cell still runs: {burned:?} of CPU in the last 400 ms"
            );
        }
    }

    fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf only reads a constant.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Duration::from_millis(ticks * 1000 / per_second)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn codemode_sandbox_nonce() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn result_of(response: &Value) -> Value {
    response["result"]["structuredContent"].clone()
}

#[test]
fn a_cell_too_deep_for_a_parser_fails_alone_and_the_gateway_answers_on() {
    let mut gateway = Gateway::start();
    let deep = format!(
        "// import\nreturn {}1{}",
        "[".repeat(1500),
        "]".repeat(1500)
    );
    gateway.exec(1, &deep);
    let failed = result_of(&gateway.response(1, Duration::from_secs(30)));
    assert_eq!(failed["code"], "invalid_input", "{failed}");
    let typescript = format!("return {}1{}", "[".repeat(50_000), "]".repeat(50_000));
    gateway.send(&json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "exec", "arguments": { "code": typescript, "language": "typescript" } }
    }));
    let failed = result_of(&gateway.response(2, Duration::from_secs(30)));
    assert_eq!(failed["code"], "invalid_input", "{failed}");
    gateway.exec(3, "return 40 + 2");
    let ok = result_of(&gateway.response(3, Duration::from_secs(30)));
    assert_eq!(ok["value"], 42, "{ok}");
}

#[test]
fn a_cancelled_exec_stops_its_busy_cell() {
    let mut gateway = Gateway::start();
    gateway.exec(1, "for (;;) {}");
    // Once it burns a core, cancel it as MCP clients do.
    gateway.wait_until_burning();
    gateway.send(&json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 1, "reason": "the user pressed stop" }
    }));
    // The gateway still answers, and stops burning a core (the cell's own
    // timeout is 60 s, far past the 10 s this waits).
    gateway.exec(2, "return 'still here'");
    let ok = result_of(&gateway.response(2, Duration::from_secs(30)));
    assert_eq!(ok["value"], "still here", "{ok}");
    gateway.wait_until_idle(Duration::from_secs(10));
}

#[test]
fn end_of_input_stops_running_cells() {
    let mut gateway = Gateway::start();
    gateway.exec(1, "for (;;) {}");
    gateway.wait_until_burning();
    let closed = Instant::now();
    drop(gateway.stdin.take());
    // The cell is aborted at once, and its answer still goes out (the
    // SDK's drain would otherwise hold a 60 s cell for 5 s, then drop it).
    let aborted = result_of(&gateway.response(1, Duration::from_secs(10)));
    assert_eq!(aborted["code"], "aborted", "{aborted}");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = gateway.child.try_wait().unwrap() {
            assert!(status.success() || status.code().is_some(), "{status:?}");
            break;
        }
        assert!(
            Instant::now() < until,
            "the gateway still runs 10 s after its input closed (the cell's timeout is 60 s)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(closed.elapsed() < Duration::from_secs(10));
}

/// One raw HTTP/1.1 POST of an MCP `initialize`; the status line and body.
fn http_initialize(addr: &str) -> (String, String) {
    http_initialize_from(addr, None)
}

fn http_initialize_from(addr: &str, origin: Option<&str>) -> (String, String) {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "1" } }
    })
    .to_string();
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    http_request(addr, "POST", &origin, &body)
}

/// One raw HTTP/1.1 request to `/mcp` (`headers`: extra `Name: value\r\n`
/// lines); the status line and the whole response.
fn http_request(addr: &str, method: &str, headers: &str, body: &str) -> (String, String) {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response.lines().next().unwrap_or_default().to_owned();
    (status, response)
}

/// `codemode serve --http 127.0.0.1:0` with no upstreams; the child and
/// the address it bound.
fn start_http_gateway(extra: &[&str]) -> (std::process::Child, String) {
    let config = std::env::temp_dir().join(format!(
        "codemode-http-{}-{}.json5",
        std::process::id(),
        codemode_sandbox_nonce()
    ));
    std::fs::write(
        &config,
        r#"{ mcpServers: { ghost: { command: "/nonexistent/codemode-test-server" } } }"#,
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        // Data (the default run store) of this test process, not the user's.
        .env(
            "CODEMODE_DATA_DIR",
            std::env::temp_dir().join(format!("codemode-test-data-{}", std::process::id())),
        )
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env("CODEMODE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the gateway starts");
        if let Some(at) = line.find("http://") {
            let url = &line[at + "http://".len()..];
            break url.split('/').next().unwrap().to_owned();
        }
    };
    (child, addr)
}

#[test]
fn http_sessions_are_capped_and_foreign_origins_refused() {
    let (mut child, addr) = start_http_gateway(&["--max-http-sessions", "3"]);
    // A page on another site may not drive the gateway from a browser.
    let (status, response) = http_initialize_from(&addr, Some("http://evil.example"));
    assert!(
        status.contains("403"),
        "a foreign Origin was admitted: {response}"
    );
    let (status, response) = http_initialize_from(&addr, Some("http://localhost:5173"));
    assert!(status.contains("200"), "{response}");
    for _ in 0..2 {
        let (status, response) = http_initialize(&addr);
        assert!(status.contains("200"), "{response}");
    }
    let (status, response) = http_initialize(&addr);
    assert!(
        status.contains("503"),
        "a fourth session gets 503 (a full house, not a server error): {response}"
    );
    assert!(response.contains("the limit is 3"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("retry-after: 5"),
        "{response}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn http_answers_bad_bodies_and_deletes_as_the_transport_spec_says() {
    let (mut child, addr) = start_http_gateway(&[]);
    // A JSON body that does not parse is the client's error (400), not a
    // wrong Content-Type (415); valid JSON of the wrong shape likewise.
    let (status, response) = http_request(&addr, "POST", "", "{\"jsonrpc\": \"2.0\", \"id\": 1,");
    assert!(status.contains("400"), "{response}");
    assert!(response.contains("-32700"), "{response}");
    let (status, response) = http_request(&addr, "POST", "", "[1, 2]");
    assert!(status.contains("400"), "{response}");
    assert!(response.contains("-32600"), "{response}");
    // DELETE of a session nobody opened: 404, like any request naming it.
    let (status, response) =
        http_request(&addr, "DELETE", "Mcp-Session-Id: no-such-session\r\n", "");
    assert!(status.contains("404"), "{response}");
    // A real session ends with DELETE; after that its id is unknown.
    let (status, response) = http_initialize(&addr);
    assert!(status.contains("200"), "{response}");
    let session = response
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {response}"));
    let header = format!("Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n");
    let (status, response) = http_request(&addr, "DELETE", &header, "");
    assert!(status.starts_with("HTTP/1.1 2"), "{response}");
    let (status, response) = http_request(&addr, "DELETE", &header, "");
    assert!(status.contains("404"), "a second DELETE: {response}");
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }).to_string();
    let (status, response) = http_request(&addr, "POST", &header, &list);
    assert!(
        status.contains("404"),
        "a request on an ended session: {response}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn broken_messages_over_stdio_get_an_answer_instead_of_silence() {
    let mut gateway = Gateway::start();
    let stdin = gateway.stdin.as_mut().unwrap();
    // Not JSON, with a visible id.
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":11,"method":"tools/list""#).unwrap();
    // Nested far too deep.
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{{"name":"exec","arguments":{{"code":{}1{}}}}}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    )
    .unwrap();
    // `arguments` that is not an object.
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{{"name":"exec","arguments":[1]}}}}"#
    )
    .unwrap();
    // Larger than any message the gateway reads (16 MiB).
    let big = "x".repeat(17 << 20);
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":14,"method":"ping","params":{{"pad":"{big}"}}}}"#
    )
    .unwrap();
    stdin.flush().unwrap();
    for (id, code) in [(11, -32700), (12, -32700), (13, -32602), (14, -32600)] {
        let answer = gateway.response(id, Duration::from_secs(30));
        assert_eq!(answer["error"]["code"], code, "{answer}");
    }
    gateway.exec(15, "return 'fine'");
    let ok = result_of(&gateway.response(15, Duration::from_secs(30)));
    assert_eq!(ok["value"], "fine", "{ok}");
}
