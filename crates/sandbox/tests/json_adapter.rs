//! The JSON adapter: everything leaving the VM is JSON-safe with documented
//! conversions; nothing from the host carries prototypes or functions in.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;
use codemode_sandbox::{FailureKind, Settlement, Step};
use common::*;
use serde_json::json;

#[test]
fn numbers_that_json_cannot_hold_become_null() {
    assert_eq!(
        value("return [NaN, Infinity, -Infinity, 1.5, -0]"),
        json!([null, null, null, 1.5, 0])
    );
}

#[test]
fn bigint_becomes_a_string() {
    assert_eq!(
        value("return { big: 12345678901234567890n }"),
        json!({"big": "12345678901234567890"})
    );
}

#[test]
fn dates_become_iso_strings() {
    assert_eq!(
        value("return [new Date(0), new Date(NaN)]"),
        json!(["1970-01-01T00:00:00.000Z", null])
    );
}

#[test]
fn maps_and_sets_become_plain_forms() {
    assert_eq!(
        value("return new Map([['a', 1], [2, 'b']])"),
        json!({"a": 1, "2": "b"})
    );
    assert_eq!(
        value("return new Map([[{ k: 1 }, 'v']])"),
        json!([[{"k": 1}, "v"]])
    );
    assert_eq!(value("return new Set([1, 'x', 1])"), json!([1, "x"]));
}

#[test]
fn functions_and_symbols_are_dropped_or_nulled() {
    assert_eq!(
        value("return { f() {}, s: Symbol('x'), u: undefined, k: 1 }"),
        json!({"k": 1})
    );
    assert_eq!(
        value("return [() => 1, Symbol('y'), undefined]"),
        json!([null, null, null])
    );
    assert_eq!(value("return () => 1"), json!(null));
}

#[test]
fn other_builtins_have_fixed_forms() {
    assert_eq!(value("return /a+b/gi"), json!("/a+b/gi"));
    assert_eq!(
        value("return new Uint8Array([1, 2, 255])"),
        json!([1, 2, 255])
    );
    assert_eq!(
        value("return new TypeError('bad')"),
        json!({"name": "TypeError", "message": "bad"})
    );
    assert_eq!(
        value("return { toJSON() { return 'custom' } }"),
        json!("custom")
    );
    assert_eq!(
        value("return Promise.resolve(1).then(() => ({ p: Promise.resolve(2) }))"),
        json!({"p": "[Promise: await it to get its value]"})
    );
}

#[test]
fn shared_references_are_fine_and_cycles_are_a_clear_error() {
    assert_eq!(
        value("const s = { v: 1 }; return [s, s, { s }]"),
        json!([{"v": 1}, {"v": 1}, {"s": {"v": 1}}])
    );
    let f = failure("const a = { b: {} }; a.b.back = a; return a");
    assert_eq!(f.kind, FailureKind::Exception);
    assert!(
        f.message.contains("cyclic") && f.message.contains("value.b.back"),
        "{}",
        f.message
    );
}

#[test]
fn throwing_getters_are_a_clear_error() {
    let f = failure("return { get secret() { throw new Error('denied') } }");
    assert!(
        f.message.contains("value.secret") && f.message.contains("denied"),
        "{}",
        f.message
    );
}

#[test]
fn very_deep_values_are_a_clear_error() {
    let f = failure("let v = {}; for (let i = 0; i < 500; i++) v = { v }; return v");
    assert!(f.message.contains("nests deeper"), "{}", f.message);
}

#[test]
fn json_output_goes_through_the_same_adapter() {
    let (_, output) = run(
        "json({ n: NaN, b: 1n, d: new Date(0) }); const c = {}; c.c = c; try { json(c) } catch (e) { text(e.message) }",
    );
    assert_eq!(
        output[0],
        codemode_sandbox::OutputItem::Json(
            json!({"n": null, "b": "1", "d": "1970-01-01T00:00:00.000Z"})
        )
    );
    assert!(matches!(&output[1], codemode_sandbox::OutputItem::Text(t) if t.contains("cyclic")));
}

#[test]
fn host_values_enter_as_plain_data() {
    let (mut vm, step) = start(
        "const v = await yield_control();
         return v;",
    );
    assert_eq!(step, Step::Pending);
    let id = vm.take_new_requests()[0].id;
    // yield_control resolves to undefined whatever the host sends.
    assert_eq!(
        vm.settle(id, Settlement::Resolve(json!({"x": 1}))).unwrap(),
        Step::Completed(json!(null))
    );
}

/// Host answers are decoded with `JSON.parse` inside the VM: a `__proto__`
/// key stays an own property and no prototype is polluted.
#[test]
fn host_json_cannot_smuggle_prototypes() {
    assert_eq!(
        value(
            "const o = JSON.parse('{\"__proto__\": {\"polluted\": true}}'); return [Object.getPrototypeOf(o) === Object.prototype, ({}).polluted === undefined, Object.keys(o)]"
        ),
        json!([true, true, ["__proto__"]])
    );
}

#[test]
fn rejected_host_requests_arrive_as_plain_errors() {
    let (mut vm, _) = start(
        "try { await yield_control() } catch (e) {
           return [e instanceof Error, e.message, Object.getPrototypeOf(e) === Error.prototype, typeof e.stack];
         }",
    );
    let id = vm.take_new_requests()[0].id;
    assert_eq!(
        vm.settle(id, Settlement::reject("tool said no")).unwrap(),
        Step::Completed(json!([true, "tool said no", true, "string"]))
    );
}

mod native_fast_path {
    //! The guest's native encoder (plain objects, arrays and primitives)
    //! must give exactly what `JSON.stringify` gives for such values, and
    //! hand everything else to the JavaScript adapter.
    use super::*;
    use proptest::prelude::*;

    /// A JavaScript expression for a plain value (arrays, objects made with
    /// `Object.fromEntries` so that `__proto__` is an ordinary key).
    fn plain_value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("undefined".to_owned()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<i32>().prop_map(|n| format!("({n})")),
            any::<i64>().prop_map(|n| format!("({n})")),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| format!("({f:?})")),
            Just("(-0)".to_owned()),
            Just("NaN".to_owned()),
            Just("(() => 1)".to_owned()),
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just("\"\\u2028 \\\" \\\\ \\n \\u0000 é 😀\"".to_owned()),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6)
                    .prop_map(|items| format!("[{}]", items.join(", "))),
                prop::collection::vec(
                    (
                        prop_oneof![
                            any::<String>(),
                            Just("__proto__".to_owned()),
                            Just("0".to_owned())
                        ],
                        inner
                    ),
                    0..6
                )
                .prop_map(|entries| {
                    let entries: Vec<String> = entries
                        .iter()
                        .map(|(k, v)| format!("[{}, {v}]", serde_json::to_string(k).unwrap()))
                        .collect();
                    format!("Object.fromEntries([{}])", entries.join(", "))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
        #[test]
        fn fast_encoding_equals_json_stringify(expr in plain_value()) {
            let code = format!("const v = {expr};\nreturn {{ encoded: [v], text: JSON.stringify([v]) }};");
            let out = value(&code);
            let text = out["text"].as_str().unwrap();
            let expected: serde_json::Value = serde_json::from_str(text).unwrap();
            prop_assert!(same(&out["encoded"], &expected), "{} gave {} but JSON.stringify {}", expr, out["encoded"], expected);
        }
    }

    /// Equal JSON, except that numbers may differ in the last bits: QuickJS's
    /// own number printing is not always the shortest round trip (it printed
    /// `2.167418650819271e+254` for `2.1674186508192707e254`), while the
    /// native encoder writes the exact double.
    fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
        use serde_json::Value as V;
        match (a, b) {
            (V::Number(x), V::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                x == y || ((x - y).abs() / x.abs().max(y.abs())) < 1e-15
            }
            (V::Array(x), V::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
            }
            (V::Object(x), V::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .zip(y)
                        .all(|((kx, vx), (ky, vy))| kx == ky && same(vx, vy))
            }
            _ => a == b,
        }
    }

    #[test]
    fn values_that_are_not_plain_still_use_the_adapter() {
        assert_eq!(
            value(
                "class P { constructor() { this.x = 1; } }\nreturn [new P(), Object.assign(Object.create(null), { y: 2 }), { d: new Date(0) }, { toJSON() { return 'j'; } }, new Proxy({ z: 3 }, {})]"
            ),
            json!([{"x": 1}, {"y": 2}, {"d": "1970-01-01T00:00:00.000Z"}, "j", {"z": 3}])
        );
        let failure = failure("const o = { get boom() { throw new Error('no'); } };\nreturn o");
        assert!(
            failure.message.contains("value.boom"),
            "{}",
            failure.message
        );
    }
}
