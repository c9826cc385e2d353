//! Hard limits: deadline, memory, stack, output, requests. A guest can reach
//! each of them but not catch it, and the next cell still works.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;
use std::time::{Duration, Instant};

use codemode_sandbox::{FailureKind, Limits, OutputItem, Step};
use common::*;
use serde_json::json;

fn with(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut l = limits();
    f(&mut l);
    l
}

#[test]
fn an_infinite_loop_stops_at_the_deadline() {
    let l = with(|l| l.timeout = Duration::from_millis(300));
    for code in [
        "while (true) {}",
        "for (;;) { try { while(true){} } catch (e) {} }",
        "async function f() { while(true) await null } await f()",
    ] {
        let started = Instant::now();
        let f = failure_with(code, &l);
        let elapsed = started.elapsed();
        assert_eq!(f.kind, FailureKind::Timeout, "{code}");
        assert!(f.message.contains("timeoutMs"), "{}", f.message);
        assert!(
            elapsed >= Duration::from_millis(290) && elapsed < Duration::from_millis(1500),
            "{code}: {elapsed:?}"
        );
    }
    assert_eq!(value("return 'next cell works'"), json!("next cell works"));
}

/// The nice value of thread `tid` of this process, from /proc.
#[cfg(target_os = "linux")]
fn nice_of(tid: i64) -> i64 {
    nice_while_alive(tid).unwrap()
}

/// The thread's nice value, or `None` once it has exited.
#[cfg(target_os = "linux")]
fn nice_while_alive(tid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the parenthesised name; nice is field 19 of the line.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    Some(after.split(' ').nth(16).unwrap().parse().unwrap())
}

#[cfg(target_os = "linux")]
#[test]
fn a_long_guest_call_yields_priority_and_gives_its_thread_back_unchanged() {
    // SAFETY: gettid and getpriority have no preconditions.
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let before = nice_of(tid);
        tx.send(tid).unwrap();
        let l = with(|l| l.timeout = Duration::from_millis(600));
        let f = failure_with("while (true) {}", &l);
        assert_eq!(f.kind, FailureKind::Timeout);
        (before, nice_of(tid))
    });
    let tid = rx.recv().unwrap();
    let before = nice_of(tid);
    // Sample for as long as the call runs (it is demoted after ~20 ms of
    // CPU). Not a fixed window: on a loaded machine making the VM alone
    // can take longer than any window would allow.
    let mut highest = before;
    while !worker.is_finished() {
        highest = highest.max(nice_while_alive(tid).unwrap_or(highest));
        std::thread::sleep(Duration::from_millis(5));
    }
    let (at_start, after) = worker.join().unwrap();
    assert_eq!(
        after, at_start,
        "the thread's priority is restored after the call"
    );
    // As root (CI) the process may restore priorities, so it demotes.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(highest, (before + 10).min(19), "the busy call ran demoted");
    }
    // A short cell on the same kind of thread is not demoted.
    assert_eq!(value("return 1"), json!(1));
}

#[test]
fn a_memory_bomb_hits_the_memory_limit_and_host_memory_stays_bounded() {
    let l = with(|l| l.memory_limit_bytes = 16 << 20);
    for code in [
        "const a = []; while (true) a.push('x'.repeat(1 << 20) + Math.random())",
        "const a = []; for (let i = 0; ; i++) a.push({ i, more: [i, i, i] })",
        "return new ArrayBuffer(1 << 30).byteLength",
        "let s = 'ab'; while (true) s = s + s + Math.random();",
    ] {
        let (mut vm, step) = sandbox().start(code, &l).unwrap();
        let Step::Failed(f) = step else {
            panic!("{code}: {step:?}")
        };
        assert!(
            f.kind == FailureKind::MemoryLimit
                || (f.name.as_deref() == Some("InternalError")
                    && f.message.contains("string too long")),
            "{code}: {f:?}"
        );
        assert!(
            vm.memory_bytes() <= sandbox().base_memory_bytes() + (16 << 20) * 2,
            "{code}: {} bytes",
            vm.memory_bytes()
        );
        let _ = vm.take_output();
    }
    assert_eq!(value("return 'still fine'"), json!("still fine"));
}

#[test]
fn a_caught_out_of_memory_error_is_the_cells_business() {
    let l = with(|l| l.memory_limit_bytes = 8 << 20);
    let (step, _) = run_with(
        "try { const a = []; for (;;) a.push(new Array(1e5).fill(1)) } catch (e) { return String(e) }",
        &l,
    );
    assert_eq!(step, Step::Completed(json!("InternalError: out of memory")));
}

#[test]
fn deep_recursion_is_a_clear_stack_overflow() {
    for code in [
        "function f() { return f() + 1 } return f()",
        "const g = (n) => [g(n + 1)]; g(0)",
        "let o = {}; o.toString = () => `${o}`; return `${o}`",
    ] {
        let f = failure(code);
        assert_eq!(f.kind, FailureKind::StackOverflow, "{code}: {f:?}");
        assert!(f.message.contains("call stack"), "{}", f.message);
    }
    assert_eq!(
        value("function f(n) { return n === 0 ? 0 : 1 + f(n - 1) } return f(1000)"),
        json!(1000)
    );
}

#[test]
fn output_past_the_limit_fails_and_keeps_what_came_before() {
    let l = with(|l| l.max_output_bytes = 4096);
    let (mut vm, step) = sandbox()
        .start(
            "for (let i = 0; ; i++) text('line ' + i + ' ' + 'x'.repeat(90))",
            &l,
        )
        .unwrap();
    let Step::Failed(f) = step else {
        panic!("{step:?}")
    };
    assert_eq!(f.kind, FailureKind::OutputLimit);
    let output = vm.take_output();
    let bytes: usize = output
        .iter()
        .map(|o| match o {
            OutputItem::Text(t) => t.len(),
            OutputItem::Json(v) => v.to_string().len(),
        })
        .sum();
    assert!(
        !output.is_empty() && bytes <= 4096,
        "{} items, {bytes} bytes",
        output.len()
    );
    assert_eq!(
        output[0],
        OutputItem::Text(format!("line 0 {}", "x".repeat(90)))
    );
    // The guest cannot catch the limit.
    let (step, _) = run_with(
        "try { for (;;) text('y'.repeat(1000)) } catch (e) { return 'caught' }",
        &l,
    );
    assert!(
        matches!(step, Step::Failed(ref f) if f.kind == FailureKind::OutputLimit),
        "{step:?}"
    );
}

#[test]
fn a_promise_nothing_settles_is_pending_with_no_work() {
    let (vm, step) = start("await new Promise(() => {}); return 1");
    assert_eq!(step, Step::Pending);
    assert!(vm.outstanding_requests().is_empty());
}

#[test]
fn outstanding_requests_are_bounded() {
    let l = with(|l| l.max_outstanding_requests = 4);
    let f = failure_with(
        "await Promise.all(Array.from({ length: 10 }, () => yield_control()))",
        &l,
    );
    assert_eq!(f.kind, FailureKind::TooManyRequests);
    let (vm, step) = sandbox()
        .start(
            "await Promise.all(Array.from({ length: 4 }, () => yield_control()))",
            &l,
        )
        .unwrap();
    assert_eq!(step, Step::Pending);
    assert_eq!(vm.outstanding_requests().len(), 4);
}

#[test]
fn request_payloads_are_bounded() {
    let l = with(|l| l.max_request_bytes = 1024);
    // Refused without being read, but the VM lives on: the caller rejects
    // the request and the cell may catch that.
    let (mut vm, step) = sandbox()
        .start("await yield_control('x'.repeat(5000))", &l)
        .unwrap();
    assert_eq!(step, Step::Pending);
    let requests = vm.take_new_requests();
    let refused = requests[0].payload.as_ref().unwrap_err();
    assert!(refused.0.contains("more than the 1024 bytes"), "{refused}");
}

#[test]
fn other_cells_run_at_normal_speed_beside_a_runaway_one() {
    let l = with(|l| l.timeout = Duration::from_millis(1500));
    let runaway = std::thread::spawn(move || failure_with("while (true) {}", &l).kind);
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(value("return 1"), json!(1));
    }
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !runaway.is_finished(),
        "the quick cells must not wait for the runaway one"
    );
    assert_eq!(runaway.join().unwrap(), FailureKind::Timeout);
}
