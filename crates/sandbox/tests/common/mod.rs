//! Shared helpers: one sandbox per test binary, and `check`-style runners.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::OnceLock;

use codemode_sandbox::{Failure, GuestApi, Limits, OutputItem, Sandbox, SandboxConfig, Step, Vm};

/// The tests' guest API (`yield_control` only): the sandbox's default one
/// defines no globals.
pub const TEST_GUEST_API: &str = include_str!("guest_api.js");

pub fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            guest_api: GuestApi::new(TEST_GUEST_API),
            ..SandboxConfig::default()
        })
        .expect("sandbox starts")
    })
}

pub fn limits() -> Limits {
    Limits {
        timeout: std::time::Duration::from_secs(5),
        ..Limits::default()
    }
}

pub fn start(code: &str) -> (Vm, Step) {
    sandbox().start(code, &limits()).expect("vm starts")
}

pub fn run(code: &str) -> (Step, Vec<OutputItem>) {
    run_with(code, &limits())
}

pub fn run_with(code: &str, limits: &Limits) -> (Step, Vec<OutputItem>) {
    let (mut vm, step) = sandbox().start(code, limits).expect("vm starts");
    (step, vm.take_output())
}

/// The value of a cell that must complete.
pub fn value(code: &str) -> serde_json::Value {
    match run(code).0 {
        Step::Completed(v) => v,
        other => panic!("expected completion of {code:?}, got {other:?}"),
    }
}

/// The failure of a cell that must fail.
pub fn failure(code: &str) -> Failure {
    failure_with(code, &limits())
}

pub fn failure_with(code: &str, limits: &Limits) -> Failure {
    match run_with(code, limits).0 {
        Step::Failed(f) => f,
        other => panic!("expected failure of {code:?}, got {other:?}"),
    }
}
