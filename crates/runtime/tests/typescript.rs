//! TypeScript cells end to end: the transform handles the TypeScript-only
//! syntax and errors name TypeScript positions. (That JavaScript never sets
//! up the transformer is pinned in `typescript_lazy.rs`, its own process.)
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::ToolSource;
use common::{Behaviour, Scripted, session, shared, tool};
use serde_json::{Value, json};

async fn ts(s: &codemode_runtime::CodeModeSession, code: &str) -> Value {
    s.exec(&json!({ "code": code, "language": "typescript" }))
        .await
        .to_json()
}

#[tokio::test]
async fn typescript_only_syntax_is_transformed_and_runs() {
    let executor = Scripted::default().with("openclaw:core:double", Behaviour::Double);
    let s = session(
        shared(),
        vec![tool(ToolSource::Openclaw, "core", "double", "")],
        executor,
    );
    let r = ts(
        &s,
        r#"
interface Doubled { n: number }
type Input = { n: number };
import type { Unused } from "./types";
export type { Unused };
enum Level { Low = 1, High = 10 }
class Scaler {
  constructor(private readonly factor: number, public label: string = "x") {}
  scale<T extends number>(v: T): number { return v * this.factor; }
}
const input = { n: Level.High } satisfies Input;
const res = (await tools.double(input)) as Doubled;
const maybe: number | undefined = res.n;
const scaler = new Scaler(3);
return { doubled: maybe!, scaled: scaler.scale<number>(2), label: scaler.label, level: Level[1] };
"#,
    )
    .await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["value"],
        json!({ "doubled": 20, "scaled": 6, "label": "x", "level": "Low" })
    );
    assert_eq!(r["telemetry"]["language"], "typescript");
}

#[tokio::test]
async fn transform_errors_fail_with_their_typescript_position() {
    let s = session(shared(), Vec::new(), Scripted::default());
    let r = ts(&s, "const a: number = 1;\nconst b: = 2;\nreturn a;").await;
    assert_eq!(r["code"], "typescript_transform_failed", "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(error.contains("line 2, column"), "{error}");
    assert!(r["telemetry"].get("vmMemoryBytes").is_none());
}

#[tokio::test]
async fn runtime_errors_name_the_typescript_line() {
    let s = session(shared(), Vec::new(), Scripted::default());
    let code = "interface A {\n  x: number;\n}\ntype B = A & { y: string };\n\nconst a: A = { x: 1 };\nconst b = a as unknown as B;\nb.y.toUpperCase();\nreturn 1;";
    let r = ts(&s, code).await;
    assert_eq!(r["status"], "failed", "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(error.starts_with("TypeError"), "{error}");
    assert!(
        error.contains("(line 8, column"),
        "the TypeScript line is 8: {error}"
    );
}
