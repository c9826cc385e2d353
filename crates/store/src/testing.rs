//! Test support: a real `redis-server` of one test alone, on a free port,
//! with an append-only file in a directory of its own; stopped (SIGKILL)
//! and its directory removed when dropped. Used by this crate's, the
//! runtime's and the gateway's tests; `cargo xtask ci` installs Debian's
//! `redis-server`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    fsync: &'static str,
}

impl RedisServer {
    /// Starts one and waits until it accepts connections.
    ///
    /// # Panics
    /// When `redis-server` is not installed or does not start in 20 s
    /// (tests must not pass without the real component).
    pub fn start() -> RedisServer {
        RedisServer::start_with_fsync("always")
    }

    /// Starts one with `appendfsync` set to `fsync` (`always`: every write
    /// on disk before the reply; `everysec`: the production default, which
    /// loses nothing when the server process restarts and at most a second
    /// when the machine crashes).
    #[allow(
        clippy::expect_used,
        reason = "test support: failing loudly is the point"
    )]
    pub fn start_with_fsync(fsync: &'static str) -> RedisServer {
        // A port found free can be taken before redis-server binds it (by
        // another test's connection): then the server exits and another
        // port is tried.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port");
            let dir = std::env::temp_dir().join(format!(
                "codemode-redis-{}-{port}-{}",
                std::process::id(),
                crate::new_instance_id()
            ));
            std::fs::create_dir_all(&dir).expect("a directory for redis-server");
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                fsync,
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Empties the server (`FLUSHALL`), as a restart without persistence
    /// would.
    #[cfg(feature = "redis")]
    #[allow(
        clippy::expect_used,
        reason = "test support: failing loudly is the point"
    )]
    pub fn flush_all(&self) {
        let mut connection = redis::Client::open(self.url())
            .and_then(|client| client.get_connection())
            .expect("connects to the test's redis-server");
        redis::cmd("FLUSHALL")
            .exec(&mut connection)
            .expect("FLUSHALL");
    }

    /// Kills it and starts it again on the same port and append-only file.
    ///
    /// # Panics
    /// When it does not start again.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not start again on port {}",
            self.port
        );
    }

    /// Starts the server on its port; false when it exited or did not
    /// accept connections within 20 s.
    #[allow(
        clippy::expect_used,
        reason = "test support: failing loudly is the point"
    )]
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            // Durable settings: every write is on disk before the reply.
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                self.fsync,
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server must be installed (cargo xtask ci installs Debian's redis-server)",
            );
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self
                .child
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            if exited || started.elapsed() > Duration::from_secs(20) {
                self.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
