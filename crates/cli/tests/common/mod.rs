//! Shared by the tests that need the real MCP components of `e2e/` (the
//! reference MCP servers, the official TypeScript client, the TypeScript
//! compiler), installed from the npm registry at the pinned versions of
//! `e2e/package-lock.json`.
#![allow(dead_code, reason = "each test binary uses part of this")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The data directory (the default run store's `runs.db`) of this test
/// process's `codemode` children, never the user's.
pub fn data_dir() -> PathBuf {
    std::env::temp_dir().join(format!("codemode-test-data-{}", std::process::id()))
}

/// The `e2e/` folder.
pub fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e")
}

/// Runs `npm ci` in `e2e/` unless its `node_modules` matches the lock
/// file; one test process at a time (a file lock), since test binaries
/// run in parallel.
pub fn ensure_npm_installed() -> PathBuf {
    let dir = e2e_dir();
    let lock = File::create(std::env::temp_dir().join("codemode-e2e-npm.lock")).unwrap();
    lock.lock().expect("lock the npm install");
    let installed = dir.join("node_modules/.package-lock.json");
    let fresh = match (
        installed.metadata(),
        dir.join("package-lock.json").metadata(),
    ) {
        (Ok(i), Ok(l)) => i.modified().unwrap() >= l.modified().unwrap(),
        _ => false,
    };
    if !fresh {
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("npm is needed for the MCP end-to-end tests (Node.js 20 or newer): {e}")
            });
        assert!(
            out.status.success(),
            "npm ci in e2e/ failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// The Python of `e2e/.venv`, with the official Python MCP SDK installed
/// from PyPI at the pins of `e2e/python/requirements.txt` (made once; one
/// test process at a time).
pub fn ensure_python_installed() -> PathBuf {
    let dir = e2e_dir();
    let lock = File::create(std::env::temp_dir().join("codemode-e2e-python.lock")).unwrap();
    lock.lock().expect("lock the Python install");
    let venv = dir.join(".venv");
    let python = venv.join("bin/python");
    let requirements = dir.join("python/requirements.txt");
    let marker = venv.join(".installed");
    let fresh = match (marker.metadata(), requirements.metadata()) {
        (Ok(m), Ok(r)) => m.modified().unwrap() >= r.modified().unwrap(),
        _ => false,
    };
    if !fresh {
        let run = |cmd: &mut Command| {
            let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
            assert!(
                out.status.success(),
                "{cmd:?} failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements));
        std::fs::write(&marker, "").unwrap();
    }
    python
}

/// Runs a Python script of `e2e/` with the SDK's venv, failing the test
/// with its output when it fails; returns its stdout.
pub fn python(script: &str, env: &[(&str, &str)]) -> String {
    let python = ensure_python_installed();
    ensure_npm_installed();
    let mut cmd = Command::new(python);
    cmd.arg(script).current_dir(e2e_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a node script in `e2e/`, failing the test with its output when it
/// fails.
pub fn node(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = ensure_npm_installed();
    let mut cmd = Command::new("node");
    cmd.args(args).current_dir(&dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("node is needed for the MCP end-to-end tests: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "node {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
