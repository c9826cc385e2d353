//! Isolation: no filesystem, network, process, environment, module loader or
//! host objects; the ordinary language works.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;
use common::*;
use serde_json::json;

#[test]
fn host_facilities_are_absent() {
    assert_eq!(
        value(
            "return [typeof process, typeof Deno, typeof Bun, typeof std, typeof os, typeof WebAssembly, typeof XMLHttpRequest]"
        ),
        json!([
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined"
        ])
    );
}

#[test]
fn require_and_fetch_throw_clearly() {
    for call in ["require('fs')", "fetch('http://example.com')"] {
        let f = failure(call);
        assert!(
            f.message.contains("not available in code mode"),
            "{call}: {}",
            f.message
        );
    }
}

#[test]
fn there_is_no_module_loader() {
    let f = failure("await import('fs')");
    assert!(f.message.contains("could not load module"), "{}", f.message);
    let f = failure("import fs from 'fs';");
    assert_eq!(f.name.as_deref(), Some("SyntaxError"));
}

#[test]
fn the_bridge_natives_are_unreachable() {
    let names = value("return Object.getOwnPropertyNames(globalThis)");
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for forbidden in ["natives", "request", "emit", "__codemode_native"] {
        assert!(!names.contains(&forbidden), "global {forbidden} is visible");
    }
    assert!(names.contains(&"text") && names.contains(&"json") && names.contains(&"yield_control"));
}

#[test]
fn the_environment_is_empty() {
    // QuickJS has no environment access at all; the WASI stubs report none.
    assert_eq!(value("return typeof scriptArgs"), json!("undefined"));
}

#[test]
fn clocks_and_randomness_work() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let guest = value("return Date.now()").as_f64().unwrap();
    assert!(
        (guest - now).abs() < 60_000.0,
        "guest clock {guest} vs host {now}"
    );
    let a = value("return [Math.random(), Math.random()]");
    let b = value("return [Math.random(), Math.random()]");
    assert_ne!(
        a, b,
        "two VMs from one base image must not share a random sequence"
    );
    assert_eq!(
        value("const r = Math.random(); return r >= 0 && r < 1"),
        json!(true)
    );
}

#[test]
fn the_ordinary_language_works() {
    assert_eq!(
        value(
            "const re = /(\\d+)-(\\d+)/u;
             const m = '10-20'.match(re);
             const big = 2n ** 64n;
             const ta = new Float64Array([1.5, 2.5]);
             const parsed = JSON.parse(JSON.stringify({ a: [1, 2] }));
             const chained = await Promise.resolve(1).then(x => x + 1).then(x => x * 10);
             const sorted = [3, 1, 2].sort((a, b) => a - b);
             const s = new Set([1, 2]); const mp = new Map([[1, 'a']]);
             return [m[1], big.toString(), ta[1], parsed.a.length, chained, sorted, s.has(2), mp.get(1), `t${1 + 1}`];"
        ),
        json!(["10", "18446744073709551616", 2.5, 2, 20, [1, 2, 3], true, "a", "t2"])
    );
}

#[test]
fn set_timeout_free_async_work_is_fine() {
    assert_eq!(value("return typeof setTimeout"), json!("undefined"));
    assert_eq!(
        value(
            "let n = 0; await Promise.all([1, 2, 3].map(async (x) => { await null; n += x })); return n"
        ),
        json!(6)
    );
}

/// Pool slots are reused: a cell must find nothing of the cells before it —
/// not their globals, not their output, not the bytes they wrote into
/// memory (fresh buffers are zero), whichever slot it lands in. Some VMs
/// are held alive at once so that cells spread over several slots.
#[test]
fn nothing_of_a_previous_cell_survives_in_its_pool_slot() {
    let writer = "globalThis.leak = 'secret'; Object.prototype.leaked = 1; text('private');\n\
                  const b = new Uint8Array(4 << 20); b.fill(0xab); globalThis.keep = b; return b.length";
    let reader = "const seen = [typeof globalThis.leak, typeof ({}).leaked, typeof globalThis.keep];\n\
                  let dirty = 0; for (let round = 0; round < 4; round++) { const b = new Uint8Array(4 << 20);\n\
                  for (let i = 0; i < b.length; i += 4096) if (b[i] !== 0) dirty++; }\n\
                  return { seen, dirty }";
    for round in 0..60 {
        // Hold a few VMs so the next ones take other slots.
        let held: Vec<_> = (0..round % 4)
            .map(|_| start("await yield_control(); return 0"))
            .collect();
        assert_eq!(value(writer), json!(4 << 20));
        let (step, output) = run(reader);
        assert_eq!(
            step,
            codemode_sandbox::Step::Completed(
                json!({ "seen": ["undefined", "undefined", "undefined"], "dirty": 0 })
            ),
            "round {round}"
        );
        assert!(output.is_empty(), "round {round}: {output:?}");
        drop(held);
    }
}
