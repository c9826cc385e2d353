//! Cell semantics: return values, output order, scopes, guest errors.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;
use codemode_sandbox::{FailureKind, OutputItem, Step};
use common::*;
use serde_json::json;

#[test]
fn return_value_becomes_the_value_and_undefined_is_null() {
    assert_eq!(value("return 1 + 1"), json!(2));
    assert_eq!(
        value("return { a: [1, 'x', true, null] }"),
        json!({"a": [1, "x", true, null]})
    );
    assert_eq!(value("return undefined"), json!(null));
    assert_eq!(value("const x = 5;"), json!(null));
}

#[test]
fn top_level_await_works() {
    assert_eq!(
        value("const v = await Promise.resolve(41); return v + 1"),
        json!(42)
    );
    assert_eq!(
        value(
            "async function f(x) { await null; return x * 2 } return await Promise.all([f(1), f(2)])"
        ),
        json!([2, 4])
    );
}

#[test]
fn text_and_json_append_output_in_call_order() {
    let (step, output) = run("text('one'); json({ n: 2 }); text(3); text({ a: 1 }); return 'done'");
    assert_eq!(step, Step::Completed(json!("done")));
    assert_eq!(
        output,
        vec![
            OutputItem::Text("one".into()),
            OutputItem::Json(json!({"n": 2})),
            OutputItem::Text("3".into()),
            OutputItem::Text("{\"a\":1}".into()),
        ]
    );
}

#[test]
fn every_cell_has_its_own_scope() {
    for _ in 0..2 {
        assert_eq!(
            value("let x = 1; const f = () => x; class C {}; return f()"),
            json!(1)
        );
    }
    // Output helpers cannot be clobbered for later code in the same cell.
    assert_eq!(
        value("try { text = null } catch (e) {} return typeof text"),
        json!("function")
    );
}

#[test]
fn syntax_errors_report_name_message_and_line() {
    let f = failure("const a = 1;\nconst b = ;\n");
    assert_eq!(f.kind, FailureKind::Exception);
    assert_eq!(f.name.as_deref(), Some("SyntaxError"));
    assert!(f.message.contains("unexpected token"), "{}", f.message);
    assert_eq!(f.line, Some(2));
}

#[test]
fn first_line_columns_are_the_models_columns() {
    let f = failure("let x = ;");
    assert_eq!((f.line, f.column), (Some(1), Some(9)));
}

#[test]
fn runtime_errors_report_name_message_and_line() {
    let f = failure("const o = null;\n\nreturn o.x;");
    assert_eq!(f.name.as_deref(), Some("TypeError"));
    assert!(f.message.contains("'x'"), "{}", f.message);
    assert_eq!(f.line, Some(3));
    let f = failure(
        "class NotFound extends Error { constructor(m) { super(m); this.name = 'NotFound' } }\nthrow new NotFound('no such user')",
    );
    assert_eq!(
        (f.name.as_deref(), f.message.as_str(), f.line),
        (Some("NotFound"), "no such user", Some(2))
    );
    let f = failure("await Promise.reject(new RangeError('bad range'))");
    assert_eq!(f.name.as_deref(), Some("RangeError"));
}

#[test]
fn thrown_non_errors_are_described_plainly() {
    let f = failure("throw 'just a string'");
    assert_eq!(f.message, "uncaught string: just a string");
    let f = failure("throw { code: 7 }");
    assert_eq!(f.message, "uncaught object: {\"code\":7}");
}

#[test]
fn errors_never_mention_the_host() {
    for code in [
        "null.x",
        "let x = ;",
        "throw new Error('e')",
        "function f(){ return f() } f()",
        "while(true){}",
    ] {
        let mut l = limits();
        l.timeout = std::time::Duration::from_millis(200);
        let f = failure_with(code, &l);
        let text = format!("{} {:?}", f.message, f.name).to_lowercase();
        for word in ["wasm", "rust", "panick", "wasmtime", "codemode_", "0x"] {
            assert!(!text.contains(word), "{code:?} leaked {word:?}: {text}");
        }
    }
}

#[test]
fn guest_errors_are_catchable_by_the_cell() {
    assert_eq!(
        value("try { null.x } catch (e) { return e instanceof TypeError }"),
        json!(true)
    );
}
