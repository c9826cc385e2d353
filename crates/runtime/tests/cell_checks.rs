//! What exec refuses before a VM starts, and what it must not refuse:
//! input rules, shell command lines, module access (a corpus of cells that
//! only mention `import`/`require`, and real module-loader forms), and the
//! second layer inside the sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::exec_hook_metadata;
use common::{Scripted, exec, run, session, shared};
use serde_json::{Value, json};

#[tokio::test]
async fn code_and_command_rules() {
    let s = session(shared(), Vec::new(), Scripted::default());
    let cases = [
        (json!({ "command": "return 1" }), Some(json!(1)), None),
        (
            json!({ "code": "return 2", "command": "return 2" }),
            Some(json!(2)),
            None,
        ),
        (
            json!({ "code": "return 2", "command": "return 3" }),
            None,
            Some(("invalid_input", "differ")),
        ),
        (
            json!({ "code": "  " }),
            None,
            Some(("invalid_input", "`code` is missing or empty")),
        ),
        (
            json!({}),
            None,
            Some(("invalid_input", "`code` is missing or empty")),
        ),
        (
            json!({ "code": 5 }),
            None,
            Some(("invalid_input", "`code` must be a string")),
        ),
        (
            json!({ "code": "return 1", "language": "python" }),
            None,
            Some(("unsupported_language", "\"python\"")),
        ),
        (
            json!({ "code": "return 1", "language": 7 }),
            None,
            Some(("invalid_input", "`language` must be a string")),
        ),
        (
            json!({ "code": "return 1", "timeout": 5 }),
            None,
            Some(("invalid_input", "`timeout` is not supported")),
        ),
        (
            json!("return 1"),
            None,
            Some(("invalid_input", "must be an object")),
        ),
    ];
    for (input, value, failure) in cases {
        let r = s.exec(&input).await.to_json();
        match (value, failure) {
            (Some(v), _) => assert_eq!(r["value"], v, "{input}: {r}"),
            (None, Some((code, text))) => {
                assert_eq!(r["code"], code, "{input}: {r}");
                assert!(r["error"].as_str().unwrap().contains(text), "{input}: {r}");
            }
            _ => unreachable!(),
        }
    }
    let r = s.exec(&json!({ "code": "return 1" })).await.to_json();
    assert_eq!(
        r["telemetry"]["language"], "javascript",
        "language defaults to javascript"
    );
}

#[tokio::test]
async fn a_language_outside_the_config_is_unsupported() {
    let runtime = common::runtime_with(
        "{tools:{codeMode:{enabled:true, languages:['javascript']}}}",
        codemode_runtime::RuntimeOptions::default(),
    );
    let s = session(&runtime, Vec::new(), Scripted::default());
    let r = s
        .exec(&json!({ "code": "return 1", "language": "typescript" }))
        .await
        .to_json();
    assert_eq!(r["code"], "unsupported_language", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("tools.codeMode.languages"),
        "{r}"
    );
}

#[tokio::test]
async fn shell_command_lines_are_refused_with_a_hint() {
    for line in [
        "ls -la",
        "cat README.md | head",
        "git status",
        "pwd",
        "npm test",
        "grep -rn TODO .",
    ] {
        let r = run(line, "javascript").await;
        assert_eq!(r["code"], "invalid_input", "{line}: {r}");
        let error = r["error"].as_str().unwrap();
        assert!(
            error.contains("JavaScript") && error.contains("tools."),
            "{line}: {error}"
        );
        assert!(
            r["telemetry"].get("vmMemoryBytes").is_none(),
            "no VM started for {line}"
        );
    }
    for code in [
        "const ls = ['a', 'b']; return ls.length",
        "const git = { status: () => 'clean' }; return git.status()",
        "text('ls -la'); return 'cat README.md | head'",
        "// git status\nreturn 1",
    ] {
        assert_eq!(
            run(code, "javascript").await["status"],
            "completed",
            "{code}"
        );
    }
}

/// Cells that mention import/require in names, strings, comments, regexes
/// and templates, in both languages: never module access.
const MENTIONS: &[&str] = &[
    "const requireAuth = true; return requireAuth",
    "const importance = 3; return importance",
    "const imported = [1]; return imported.length",
    "const required = { a: 1 }; return required.a",
    "const importer = (x) => x; return importer(1)",
    "let requirements = ['x']; return requirements[0]",
    "const isRequired = (f) => !!f; return isRequired(1)",
    "const importMap = new Map(); return importMap.size",
    "const reimport = 1; return reimport",
    "function requireNonEmpty(s) { return s.length > 0 } return requireNonEmpty('a')",
    "return 'import fs from \"fs\"'",
    "return \"require('child_process')\"",
    "return 'import(\"x\")'",
    "return 'import.meta.url'",
    "return `import ${'x'} from y`",
    "return `require(${JSON.stringify('fs')})`",
    "const t = `\n import a from 'b'\n`; return t.length",
    "// import fs from 'fs'\nreturn 1",
    "/* require('fs') */ return 1",
    "/** @see import('x') */ return 1",
    "// const x = require('y');\nreturn 2",
    "/*\nimport a from 'a';\nexport default a;\n*/ return 3",
    "return /import\\s+\\w+/.test('import x')",
    "return /require\\(/.source",
    "return 'a'.replace(/import/g, 'b')",
    "return new RegExp('require\\\\(').test('require(')",
    "const o = { import: 1, require: 2 }; return o.import + o.require",
    "const o = { 'import': 1 }; return o['import']",
    "class C { import() { return 1 } require() { return 2 } } return new C().import() + new C().require()",
    "const o = { import() { return 'i' } }; return o.import()",
    "const { require: r = 5 } = {}; return r",
    "const meta = { import: { meta: 1 } }; return meta.import.meta",
    "return ALL_TOOLS.filter(t => t.name.includes('import')).length",
    "return ALL_TOOLS.filter(t => /require/.test(t.description)).length",
    "const label = 'exports'; return label",
    "const exported = 1; return exported",
    "return typeof require",
    "return typeof import_fn",
    "function require(x) { return x + 1 } return require(1)",
    "const require = (x) => x * 2; return require(21)",
    "let module = { require: (x) => x }; return module.require(3)",
    "const System = { import: (x) => x }; return System.import(4)",
    "const importScripts = (x) => x; return importScripts(5)",
    "const createRequire = () => () => 6; return createRequire()()",
    "text('import and require are words'); return 1",
    "json({ import: 'x', require: 'y' }); return 1",
    "const s = 'imp' + 'ort'; return s",
    "return ['import', 'require', 'export'].join(',')",
    "label: { break label; } return 'import'",
    "const x = 1; // trailing require('x')\nreturn x",
];

const TS_MENTIONS: &[&str] = &[
    "import type { Foo } from './foo';\nconst x: Foo | number = 1;\nreturn x",
    "import { type Bar } from './bar';\nconst b: Bar | null = null;\nreturn b",
    "export type { Baz } from './baz';\nreturn 1",
    "type T = typeof import('./x');\nreturn 1",
    "export type Shape = { kind: 'import' };\nconst s: Shape = { kind: 'import' };\nreturn s.kind",
    "export interface Req { require: boolean }\nconst r: Req = { require: true };\nreturn r.require",
    "const requireAuth: boolean = true;\nreturn requireAuth",
    "// import x from 'y'\nconst n: number = 2;\nreturn n",
];

#[tokio::test]
async fn mentions_of_import_and_require_are_not_module_access() {
    assert!(MENTIONS.len() + TS_MENTIONS.len() >= 50);
    for (cells, language) in [(MENTIONS, "javascript"), (TS_MENTIONS, "typescript")] {
        for cell in cells {
            let r = run(cell, language).await;
            assert_eq!(
                r["status"], "completed",
                "{language} cell was refused or failed:\n{cell}\n{r}"
            );
        }
    }
}

/// Real module-loader forms: each must be refused before a VM starts.
const MODULE_ACCESS: &[(&str, &str)] = &[
    ("import fs from 'fs';\nreturn 1", "javascript"),
    (
        "import { readFile } from 'node:fs/promises';\nreturn 1",
        "javascript",
    ),
    ("import * as path from 'path';\nreturn 1", "javascript"),
    ("import 'side-effect';\nreturn 1", "javascript"),
    (
        "import data from './data.json' with { type: 'json' };\nreturn data",
        "javascript",
    ),
    ("const m = await import('fs');\nreturn 1", "javascript"),
    (
        "const name = 'fs';\nconst m = await import(name);\nreturn 1",
        "javascript",
    ),
    ("return import.meta.url", "javascript"),
    ("const fs = require('fs');\nreturn 1", "javascript"),
    (
        "const { exec } = require('child_process');\nreturn 1",
        "javascript",
    ),
    ("const r = require;\nreturn r('fs')", "javascript"),
    ("return require.resolve('fs')", "javascript"),
    ("return globalThis.require('fs')", "javascript"),
    ("return globalThis['require']('fs')", "javascript"),
    ("return window.require('fs')", "javascript"),
    ("return module.require('fs')", "javascript"),
    ("return process.mainModule.require('fs')", "javascript"),
    ("return createRequire(import.meta.url)('fs')", "javascript"),
    (
        "importScripts('https://example.org/x.js');\nreturn 1",
        "javascript",
    ),
    ("return System.import('x')", "javascript"),
    ("export const x = 1;", "javascript"),
    ("export default 1;", "javascript"),
    ("export * from 'x';", "javascript"),
    (
        "if (true) { const m = await import('os'); }\nreturn 1",
        "javascript",
    ),
    (
        "import fs from 'fs';\nconst x: number = 1;\nreturn x",
        "typescript",
    ),
    ("import fs = require('fs');\nreturn 1", "typescript"),
    ("const m = await import('fs');\nreturn 1", "typescript"),
    ("export const y: number = 1;", "typescript"),
];

#[tokio::test]
async fn module_loader_forms_are_module_access_denied() {
    assert!(MODULE_ACCESS.len() >= 20);
    for (cell, language) in MODULE_ACCESS {
        let r = run(cell, language).await;
        assert_eq!(
            r["code"], "module_access_denied",
            "{language} cell was not refused:\n{cell}\n{r}"
        );
        let error = r["error"].as_str().unwrap();
        assert!(
            error.contains("(line ") && error.contains("call tools instead"),
            "{error}"
        );
        assert!(
            r["telemetry"].get("vmMemoryBytes").is_none(),
            "no VM for:\n{cell}"
        );
    }
}

#[tokio::test]
async fn hook_metadata_names_the_exec_kind_and_language() {
    for (input, kind) in [
        (json!({ "code": "return 1" }), "javascript"),
        (
            json!({ "code": "return 1", "language": "typescript" }),
            "typescript",
        ),
        (
            json!({ "command": "return 1", "language": "javascript" }),
            "javascript",
        ),
    ] {
        assert_eq!(
            exec_hook_metadata(&input).to_json(),
            json!({ "toolKind": "code_mode_exec", "toolInputKind": kind })
        );
    }
    let s = session(shared(), Vec::new(), Scripted::default());
    exec(&s, "return 1").await;
    s.exec(&json!({ "code": "const n: number = 1; return n", "language": "typescript" }))
        .await;
    let events: Vec<Value> = s
        .trajectory()
        .to_json_lines()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["toolKind"].as_str().unwrap(),
                e["toolInputKind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("code_mode_exec", "javascript"),
            ("code_mode_exec", "typescript")
        ]
    );
}
