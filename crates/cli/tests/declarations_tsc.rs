//! The virtual declaration files are valid TypeScript whatever the
//! upstream servers send: awkward server and tool names (reserved words,
//! collisions, punctuation) and schemas (nesting, refs, unions, odd
//! property names, comment closers in descriptions), plus a few hundred
//! random schemas, all rendered and checked by the real TypeScript
//! compiler (pinned in `e2e/package-lock.json`).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use codemode_runtime::{Catalog, McpServerInfo, ToolDefinition, ToolPolicy, ToolSource};
use serde_json::{Value, json};

fn tool(server: &str, name: &str, description: &str, schema: Value) -> ToolDefinition {
    ToolDefinition::new(ToolSource::Mcp, server, name)
        .with_description(description)
        .with_parameters(schema)
}

fn awkward_tools() -> Vec<ToolDefinition> {
    let schema = json!({
        "type": "object",
        "properties": {
            "plain": { "type": "string", "description": "multi\nline */ description /* with closers" },
            "dash-key": { "type": ["string", "null"] },
            "quote\"key": { "enum": ["a\"b", "line\nbreak", 3, true, null] },
            "*/": { "const": "x" },
            "nested": {
                "type": "object",
                "properties": {
                    "list": { "type": "array", "items": { "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] } },
                    "tuple": { "type": "array", "prefixItems": [{ "type": "string" }, { "type": "number" }] },
                    "map": { "type": "object", "additionalProperties": { "type": "boolean" } },
                },
                "additionalProperties": true,
            },
            "union": { "anyOf": [{ "type": "string" }, { "type": "array", "items": { "type": "string" } }, { "type": "null" }] },
            "choice": { "oneOf": [{ "$ref": "#/$defs/node" }, { "type": "number" }] },
            "both": { "allOf": [{ "type": "object", "properties": { "a": { "type": "string" } } }, { "type": "object", "properties": { "b": { "type": "number" } } }] },
            "never": false,
            "anything": true,
            "nullable": { "type": "string", "nullable": true },
            "empty_enum": { "enum": [] },
            "weird_default": { "type": "string", "default": "*/ oops" },
            "remote": { "$ref": "https://example.com/schema.json" },
        },
        "required": ["plain", "*/"],
        "$defs": { "node": { "type": "object", "properties": { "next": { "$ref": "#/$defs/node" } } } },
    });
    vec![
        tool(
            "chrome-devtools",
            "take_snapshot",
            "Take a snapshot",
            json!({"type": "object", "properties": {"output": {"enum": ["markdown", "json"]}}}),
        ),
        tool(
            "chrome-devtools",
            "take-snapshot",
            "Collides with take_snapshot",
            json!({}),
        ),
        tool(
            "class",
            "delete",
            "A reserved word as tool and server",
            json!(null),
        ),
        tool(
            "class",
            "then",
            "Would make the server thenable",
            json!({"type": "object"}),
        ),
        tool(
            "class",
            "constructor",
            "Prototype-like",
            json!({"type": "object"}),
        ),
        tool(
            "class",
            "__proto__",
            "Prototype-like",
            json!({"type": "object"}),
        ),
        tool(
            "class",
            "resources",
            "Shadows the resources namespace",
            json!({"type": "object"}),
        ),
        tool("class", "$api", "Shadows $api", json!({"type": "object"})),
        tool("2fa", "weird.name!", "Punctuation", schema),
        tool(
            "über",
            "ünïcode",
            "Non-ASCII names",
            json!({"type": "object", "properties": {"ключ": {"type": "string"}}}),
        ),
        tool("deep", "deep", "Deep nesting", deep_schema(30)),
    ]
}

fn deep_schema(levels: usize) -> Value {
    let mut schema = json!({ "type": "string" });
    for _ in 0..levels {
        schema = json!({ "type": "object", "properties": { "inner": schema } });
    }
    schema
}

/// A small deterministic generator of random JSON Schemas.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn word(&mut self) -> String {
        const PARTS: [&str; 12] = [
            "id",
            "name",
            "*/",
            "a b",
            "x-y",
            "q\"",
            "\\",
            "new",
            "__proto__",
            "0",
            "ü",
            "",
        ];
        (0..1 + self.below(3))
            .map(|_| PARTS[self.below(PARTS.len() as u64) as usize])
            .collect()
    }

    fn schema(&mut self, depth: u32) -> Value {
        let pick = if depth > 4 {
            self.below(6)
        } else {
            self.below(12)
        };
        match pick {
            0 => json!({ "type": "string", "description": self.word() }),
            1 => json!({ "type": "integer", "default": self.below(100) }),
            2 => json!({ "type": "boolean" }),
            3 => json!({ "type": "null" }),
            4 => json!({ "enum": [self.word(), self.below(9), false] }),
            5 => json!({ "const": self.word() }),
            6 => json!({ "type": "array", "items": self.schema(depth + 1) }),
            7 => json!({ "anyOf": [self.schema(depth + 1), self.schema(depth + 1)] }),
            8 => json!({ "allOf": [self.object(depth + 1), self.object(depth + 1)] }),
            9 => json!({ "type": ["string", "number", "null"] }),
            10 => json!({ "type": "object", "additionalProperties": self.schema(depth + 1) }),
            _ => self.object(depth + 1),
        }
    }

    fn object(&mut self, depth: u32) -> Value {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for _ in 0..self.below(5) {
            let key = self.word();
            if self.below(2) == 0 {
                required.push(Value::String(key.clone()));
            }
            properties.insert(key, self.schema(depth));
        }
        json!({ "type": "object", "properties": properties, "required": required, "description": self.word() })
    }
}

#[test]
fn rendered_declarations_compile_with_the_typescript_compiler() {
    let mut tools = awkward_tools();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    for i in 0..300 {
        let schema = random.object(0);
        tools.push(tool(
            &format!("random{}", i % 7),
            &format!("tool_{i}"),
            &random.word(),
            schema,
        ));
    }
    let catalog = Catalog::build_with_mcp_servers(
        tools,
        &ToolPolicy::default(),
        &[McpServerInfo::new("docs")
            .with_resources(true)
            .with_prompts(true)
            .with_description("Docs server */ with instructions\nover lines")],
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("codemode-dts-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("mcp")).unwrap();
    let mut paths = Vec::new();
    for file in catalog.api_files().iter() {
        let path = dir.join(&file.path);
        std::fs::write(&path, &file.text).unwrap();
        paths.push(path.to_string_lossy().into_owned());
    }
    // The names a model types: checked against the declarations.
    let servers: Vec<&str> = catalog
        .mcp()
        .servers()
        .iter()
        .map(|s| s.js_name.as_str())
        .collect();
    assert!(
        servers.contains(&"chromeDevtools")
            && servers.contains(&"class_")
            && servers.contains(&"_2fa"),
        "{servers:?}"
    );
    let class = catalog.mcp().server("class_").unwrap();
    let names: Vec<&str> = class.tools.iter().map(|t| t.js_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "api",
            "proto",
            "constructor_",
            "delete_",
            "resources_",
            "then_"
        ]
    );
    let usage = dir.join("use.ts");
    std::fs::write(
        &usage,
        "async function main() {\n\
           await MCP.chromeDevtools.takeSnapshot({ output: \"markdown\" });\n\
           await MCP.chromeDevtools.takeSnapshot2();\n\
           await MCP.class_.delete_();\n\
           await MCP.class_.then_({});\n\
           await MCP.docs.resources.read({ uri: \"x\" });\n\
           await MCP.docs.prompts.get({ name: \"p\", arguments: { a: \"b\" } });\n\
           const h: McpApiHeader = await MCP.deep.$api(\"deep\", { schema: true });\n\
           return h.declarations;\n\
         }\n\
         main();\n",
    )
    .unwrap();
    paths.push(usage.to_string_lossy().into_owned());
    let files: Vec<std::path::PathBuf> = paths.iter().map(std::path::PathBuf::from).collect();
    let out = tsc(&files);
    assert!(
        out.status.success(),
        "tsc rejected the declarations:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Runs the pinned TypeScript compiler (strict, no emit) over `files`.
fn tsc(files: &[std::path::PathBuf]) -> std::process::Output {
    let tsc = common::e2e_dir().join("node_modules/typescript/bin/tsc");
    common::ensure_npm_installed();
    let mut args: Vec<String> = [
        tsc.to_str().unwrap(),
        "--noEmit",
        "--strict",
        "--target",
        "es2022",
        "--lib",
        "es2022",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(files.iter().map(|p| p.to_string_lossy().into_owned()));
    std::process::Command::new("node")
        .args(&args)
        .output()
        .unwrap()
}

/// Tools with an `outputSchema` resolve to `McpToolResult<T>`: a program
/// using the typed fields (directly and through `unwrap`) compiles, and one
/// that gets a field's type wrong does not.
#[test]
fn typed_results_from_output_schemas_check_with_the_typescript_compiler() {
    let forecast = tool(
        "weather",
        "forecast",
        "Forecast for a city",
        json!({ "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] }),
    )
    .with_output_schema(json!({
        "type": "object",
        "properties": {
            "temperature": { "type": "number", "description": "°C" },
            "conditions": { "type": "string" },
            "hourly": { "type": "array", "items": { "type": "number" } }
        },
        "required": ["temperature", "conditions"]
    }));
    let untyped = tool(
        "weather",
        "untyped",
        "No output schema",
        json!({ "type": "object" }),
    );
    let catalog =
        Catalog::build_with_mcp_servers(vec![forecast, untyped], &ToolPolicy::default(), &[])
            .unwrap();
    let dir = std::env::temp_dir().join(format!("codemode-typed-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("mcp")).unwrap();
    let mut declarations = Vec::new();
    for file in catalog.api_files().iter() {
        let path = dir.join(&file.path);
        std::fs::write(&path, &file.text).unwrap();
        declarations.push(path);
    }
    let weather = catalog.api_files().read("mcp/weather.d.ts").unwrap();
    assert!(
        weather.contains("}): Promise<McpToolResult<{")
            && weather.contains("temperature: number;")
            && weather.contains("}): Promise<McpToolResult>;"),
        "{weather}"
    );
    let good = dir.join("good.ts");
    std::fs::write(
        &good,
        "async function main() {\n\
           const r = await MCP.weather.forecast({ city: \"Oslo\" });\n\
           const t: number | undefined = r.structuredContent?.temperature;\n\
           const u = unwrap(r);\n\
           const c: string = u.conditions;\n\
           const h: number[] | undefined = u.hourly;\n\
           const plain: unknown = unwrap(await MCP.weather.untyped({}));\n\
           return [t, c, h, plain];\n\
         }\n\
         main();\n",
    )
    .unwrap();
    let mut files = declarations.clone();
    files.push(good);
    let out = tsc(&files);
    assert!(
        out.status.success(),
        "tsc rejected a program using the typed fields:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let bad = dir.join("bad.ts");
    std::fs::write(
        &bad,
        "async function main() {\n\
           const wrong: string = unwrap(await MCP.weather.forecast({ city: \"x\" })).temperature;\n\
           return wrong;\n\
         }\n\
         main();\n",
    )
    .unwrap();
    let mut files = declarations;
    files.push(bad);
    let out = tsc(&files);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success()
            && report.contains("Type 'number' is not assignable to type 'string'"),
        "tsc must reject the wrong type:\n{report}"
    );
}
