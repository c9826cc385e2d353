//! The TypeScript transformer is set up only when a TypeScript cell arrives:
//! JavaScript-only use never touches it. One test in its own process, so no
//! other test can set the flag first.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::ToolSource;
use common::{Behaviour, Scripted, session, shared, tool};
use serde_json::json;

#[tokio::test]
async fn javascript_never_sets_up_the_transformer_and_typescript_does() {
    let executor = Scripted::default().with("openclaw:core:double", Behaviour::Double);
    let s = session(
        shared(),
        vec![tool(ToolSource::Openclaw, "core", "double", "")],
        executor,
    );
    for code in [
        "return 1",
        "const x = await tools.double({ n: 2 }); return x.n",
        "const requireAuth = 'import'; return requireAuth",
        "import fs from 'fs'",
        "ls -la",
    ] {
        s.exec(&json!({ "code": code })).await;
    }
    assert!(
        !codemode_runtime::typescript_transformer_initialised(),
        "JavaScript cells set up the TypeScript transformer"
    );
    let r = s
        .exec(&json!({ "code": "const n: number = 1; return n", "language": "typescript" }))
        .await
        .to_json();
    assert_eq!(r["value"], 1, "{r}");
    assert!(codemode_runtime::typescript_transformer_initialised());
}
