//! The bodies of the fuzz targets. Each takes arbitrary bytes, drives one
//! parser or serializer that guest or network input reaches, and panics
//! only when an invariant breaks (a panic in the code under test counts as
//! a finding too). `fuzz/` wraps each in `fuzz_target!` for cargo-fuzz
//! (`cargo xtask fuzz`); `tests/corpus.rs` replays the kept corpus in
//! `fuzz/corpus/<target>/` on every `cargo test`.

use std::sync::LazyLock;

use codemode_runtime::fuzzing::BridgeFuzzer;
use codemode_runtime::{
    Catalog, CodeModeConfig, McpServerInfo, ToolDefinition, ToolPolicy, ToolSource,
};
use codemode_sandbox::{Sandbox, SandboxConfig, Snapshot};
use serde_json::Value;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The targets, by name (the folder names under `fuzz/corpus/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("source_checks", source_checks),
    ("bridge_request", bridge_request),
    ("snapshot", snapshot),
    ("config", config),
    ("declarations", declarations),
    ("guest_json", guest_json),
];

/// A catalog for the pre-run name check: MCP tools with schemas (required
/// keys, typed properties, a default, a combinator) on two servers and a
/// plugin tool with a convenience.
static NAMES_CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "id": { "type": "string" }, "n": { "type": ["integer", "null"] },
            "mode": { "type": "string", "default": "a" }, "any": { "anyOf": [{ "type": "string" }] }
        },
        "required": ["id", "mode"]
    });
    Catalog::build_with_mcp_servers(
        vec![
            ToolDefinition::new(ToolSource::Mcp, "notes", "delete_note")
                .with_parameters(schema.clone()),
            ToolDefinition::new(ToolSource::Mcp, "git-hub", "search")
                .with_parameters(schema.clone()),
            ToolDefinition::new(ToolSource::Plugin, "files", "read_file").with_parameters(schema),
        ],
        &ToolPolicy::default(),
        &[McpServerInfo::new("notes").with_resources(true)],
    )
    .unwrap_or_else(|_| Catalog::empty())
});

/// The pre-VM checks on any source, deep and long inputs included, with the
/// pre-run name check against a small catalog: they answer (run or refuse)
/// and never overflow the stack.
pub fn source_checks(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let code = String::from_utf8_lossy(rest);
    let _ =
        codemode_runtime::fuzzing::prepare_and_check_names(&code, flags & 1 == 1, &NAMES_CATALOG);
}

static BRIDGE: LazyLock<BridgeFuzzer> = LazyLock::new(BridgeFuzzer::new);

/// Raw guest request bytes through the bridge: always answered, never a
/// tool outside the run's catalog.
pub fn bridge_request(data: &[u8]) {
    BRIDGE.answer(data);
}

static SANDBOX: LazyLock<Sandbox> = LazyLock::new(|| {
    #[allow(
        clippy::expect_used,
        reason = "a fuzz harness without a sandbox is useless"
    )]
    // The product's guest API: the header cell below waits with
    // `yield_control`, which the sandbox's default (empty) API lacks.
    Sandbox::new(SandboxConfig {
        guest_api: codemode_runtime::guest_api(),
        ..SandboxConfig::default()
    })
    .expect("sandbox starts")
});

/// The header of a real snapshot of this build: structure-aware inputs get
/// past the magic, version and build id checks.
static HEADER: LazyLock<Vec<u8>> = LazyLock::new(|| {
    #[allow(clippy::expect_used, reason = "fixture")]
    let (vm, _) = SANDBOX
        .start("await yield_control(); return 1", &Default::default())
        .expect("a cell starts");
    #[allow(clippy::expect_used, reason = "fixture")]
    let bytes = vm.suspend().expect("suspends").to_bytes();
    bytes[..40].to_vec()
});

/// Snapshot bytes: a real header with a fuzzed (compressed) body, or raw
/// bytes; what parses must restore without panicking.
pub fn snapshot(data: &[u8]) {
    let build_id = SANDBOX.build_id();
    let limit = 1 << 24;
    let raw = Snapshot::from_bytes(data, &build_id, limit);
    let mut framed = HEADER.clone();
    framed.extend_from_slice(&zstd::bulk::compress(data, 1).unwrap_or_default());
    for snapshot in [raw, Snapshot::from_bytes(&framed, &build_id, limit)]
        .into_iter()
        .flatten()
    {
        let _ = SANDBOX.restore(&snapshot, &Default::default());
    }
}

/// Config text: `tools.codeMode` and the gateway's file.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = CodeModeConfig::from_json5(&text);
    let _ = codemode_mcp::parse_config(&text, &|name| (name == "SET").then(|| "value".to_owned()));
}

/// An upstream-controlled JSON Schema rendered into declaration files.
pub fn declarations(data: &[u8]) {
    let Ok(schema) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tools = vec![
        ToolDefinition::new(ToolSource::Mcp, "up", "fuzzed").with_parameters(schema.clone()),
        ToolDefinition::new(ToolSource::Mcp, "up", "other").with_parameters(schema),
    ];
    let Ok(catalog) =
        Catalog::build_with_mcp_servers(tools, &ToolPolicy::default(), &[McpServerInfo::new("up")])
    else {
        return;
    };
    for file in catalog.api_files().iter() {
        // A budget holds whatever the schema: two tools never render to
        // more than a few megabytes.
        assert!(
            file.text.len() < 8 << 20,
            "{} is {} bytes",
            file.path,
            file.text.len()
        );
    }
}

/// JSON text as the guest sends it: parses or is refused with a reason;
/// what parses survives a round trip.
pub fn guest_json(data: &[u8]) {
    if let Ok(value) = codemode_sandbox::parse_guest_json(data) {
        let text = value.to_string();
        let again = codemode_sandbox::parse_guest_json(text.as_bytes());
        assert_eq!(again.as_ref().ok(), Some(&value), "round trip of {text}");
    }
}
