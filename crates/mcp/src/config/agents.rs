//! `agents.list[]`: the reference config's per-agent blocks. The gateway
//! reads each agent's `id` and `tools.codeMode`; selecting an agent
//! (`--agent ID`) merges its block over the global `tools.codeMode`, key
//! by key ([`codemode_runtime::CodeModeConfig::for_agent`]). Every agent's
//! block is checked whichever agent is selected, as a disabled server's
//! settings are; the other keys of an entry (`model`, `workspace`, its
//! other `tools` settings, ...) are ordinary diagnostics: they have no
//! effect here.

use codemode_runtime::config_reader::{Section, Strictness, join};
use codemode_runtime::{CodeModeConfig, ConfigError, Diagnostic};
use serde_json::Value;

use crate::config::reader::{error, section};

const AGENTS: Section = section(&["list"], Strictness::Ordinary);
const AGENT: Section = section(&["id", "tools"], Strictness::Ordinary);
const AGENT_TOOLS: Section = section(&["codeMode"], Strictness::Ordinary);

/// One entry of `agents.list`, as the gateway knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentEntry {
    /// Its `id`.
    pub(crate) id: String,
    /// Whether it has a `tools.codeMode` block.
    pub(crate) has_code_mode: bool,
}

/// Reads `agents`: every entry's id and `tools.codeMode` block checked,
/// every problem named by its path.
pub(crate) fn parse_agents(
    value: &Value,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<AgentEntry> {
    let Value::Object(agents) = value else {
        errors.push(error(
            "agents",
            "expected an object like { list: [{ id: \"main\", tools: { codeMode: true } }] }",
        ));
        return Vec::new();
    };
    AGENTS.check("agents", agents, errors, diagnostics);
    let list = match agents.get("list") {
        None => return Vec::new(),
        Some(Value::Array(list)) => list,
        Some(_) => {
            errors.push(error(
                "agents.list",
                "expected an array of agents, each { id, tools: { codeMode } }",
            ));
            return Vec::new();
        }
    };
    let mut entries: Vec<AgentEntry> = Vec::new();
    for (index, agent) in list.iter().enumerate() {
        let path = format!("agents.list[{index}]");
        let Value::Object(agent) = agent else {
            errors.push(error(
                &path,
                "expected an object { id, tools: { codeMode } }",
            ));
            continue;
        };
        AGENT.check(&path, agent, errors, diagnostics);
        let id_path = join(&path, "id");
        let id = match agent.get("id") {
            Some(Value::String(id)) if !id.trim().is_empty() => Some(id.clone()),
            Some(Value::String(_)) => {
                errors.push(error(&id_path, "the agent's id is empty"));
                None
            }
            Some(_) => {
                errors.push(error(&id_path, "expected a string: the agent's id"));
                None
            }
            None => {
                errors.push(error(
                    &id_path,
                    "missing: every agent needs an id (--agent ID selects it)",
                ));
                None
            }
        };
        let has_code_mode = check_tools(&path, agent.get("tools"), errors, diagnostics);
        let Some(id) = id else { continue };
        if let Some(first) = entries.iter().position(|e| e.id == id) {
            errors.push(error(
                &id_path,
                &format!(
                    "agent id {} is also the id of agents.list[{first}]; ids must be unique",
                    quoted(&id)
                ),
            ));
            continue;
        }
        entries.push(AgentEntry { id, has_code_mode });
    }
    entries
}

/// Checks an agent's `tools` (at `path`.tools); whether it holds a
/// `codeMode` block.
fn check_tools(
    path: &str,
    tools: Option<&Value>,
    errors: &mut Vec<ConfigError>,
    diagnostics: &mut Vec<Diagnostic>,
) -> bool {
    let tools_path = join(path, "tools");
    let tools = match tools {
        None => return false,
        Some(Value::Object(tools)) => tools,
        Some(_) => {
            errors.push(error(&tools_path, "expected an object"));
            return false;
        }
    };
    AGENT_TOOLS.check(&tools_path, tools, errors, diagnostics);
    let Some(block) = tools.get("codeMode") else {
        return false;
    };
    let (_, d, e) = CodeModeConfig::check_block(block, &join(&tools_path, "codeMode"));
    diagnostics.extend(d);
    errors.extend(e);
    true
}

/// The problem with selecting agent `id` that `agents` does not hold,
/// naming the ids that exist.
pub(crate) fn unknown_agent(id: &str, agents: &[AgentEntry]) -> ConfigError {
    if agents.is_empty() {
        return error(
            "agents.list",
            &format!(
                "no agent {}: the config lists no agents (agents.list[].id)",
                quoted(id)
            ),
        );
    }
    let ids: Vec<String> = agents.iter().map(|a| quoted(&a.id)).collect();
    let known: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    let meant = codemode_runtime::config_reader::closest(id, &known)
        .map(|m| format!(" (did you mean {}?)", quoted(m)))
        .unwrap_or_default();
    error(
        "agents.list",
        &format!(
            "no agent {}{meant}; the agents are: {}",
            quoted(id),
            ids.join(", ")
        ),
    )
}

/// `text` as a JSON string: an id with quotes or control characters
/// cannot forge the message around it.
fn quoted(text: &str) -> String {
    Value::String(text.chars().take(128).collect()).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

    use crate::config::{parse_config, parse_config_for_agent};

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// A reference-style config: the gateway's keys beside an agent
    /// runtime's own.
    const REFERENCE: &str = r#"{
      tools: { codeMode: { enabled: true, timeoutMs: 5000 } },
      agents: {
        defaults: { model: "openai/gpt-5" },
        list: [
          { id: "main", default: true },
          { id: "ops", model: "x", tools: { profile: "coding", codeMode: { timeoutMs: 30000, maxPendingToolCalls: 4 } } },
          { id: "chat", tools: { codeMode: false } },
        ],
      },
      mcpServers: { fs: { command: "fs" } },
    }"#;

    #[test]
    fn agents_are_read_and_an_agent_block_merges_over_the_global_one() {
        let (global, diagnostics) = parse_config(REFERENCE, &no_env).unwrap();
        assert_eq!(global.agent, None);
        assert!(global.code_mode.enabled && global.code_mode_given);
        assert_eq!(global.code_mode.timeout_ms, 5000);
        let paths: Vec<&str> = diagnostics.iter().map(|d| d.path.as_str()).collect();
        // Keys that are not the gateway's: said, never refused.
        assert_eq!(
            paths,
            [
                "agents.defaults",
                "agents.list[0].default",
                "agents.list[1].model",
                "agents.list[1].tools.profile"
            ],
            "{diagnostics:?}"
        );
        assert!(
            !diagnostics.iter().any(|d| d.path == "agents"),
            "agents is known now"
        );

        let (ops, _) = parse_config_for_agent(REFERENCE, &no_env, Some("ops")).unwrap();
        assert_eq!(ops.agent.as_deref(), Some("ops"));
        assert!(ops.code_mode.enabled, "the global switch holds");
        assert_eq!(
            (
                ops.code_mode.timeout_ms,
                ops.code_mode.max_pending_tool_calls
            ),
            (30_000, 4)
        );
        let (main, _) = parse_config_for_agent(REFERENCE, &no_env, Some("main")).unwrap();
        assert_eq!(main.code_mode, global.code_mode, "no block: the global one");
        let (chat, _) = parse_config_for_agent(REFERENCE, &no_env, Some("chat")).unwrap();
        assert!(!chat.code_mode.enabled && chat.code_mode_given);
    }

    #[test]
    fn an_agent_block_alone_counts_as_given() {
        let text = r#"{ agents: { list: [ { id: "a", tools: { codeMode: { timeoutMs: 2000 } } }, { id: "b" } ] } }"#;
        let (a, _) = parse_config_for_agent(text, &no_env, Some("a")).unwrap();
        // Present, without enabled: true: off, as tools.codeMode would be.
        assert!(a.code_mode_given && !a.code_mode.enabled);
        assert_eq!(a.code_mode.timeout_ms, 2000);
        let (b, _) = parse_config_for_agent(text, &no_env, Some("b")).unwrap();
        assert!(!b.code_mode_given, "nothing said: the gateway turns it on");
    }

    #[test]
    fn an_unknown_agent_names_the_agents_that_exist() {
        let err = parse_config_for_agent(REFERENCE, &no_env, Some("opz")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("agents.list"), "{text}");
        assert!(text.contains("no agent \"opz\""), "{text}");
        assert!(text.contains("(did you mean \"ops\"?)"), "{text}");
        assert!(text.contains("\"main\", \"ops\", \"chat\""), "{text}");
        let err = parse_config_for_agent("{}", &no_env, Some("ops")).unwrap_err();
        assert!(err.to_string().contains("lists no agents"), "{err}");
    }

    #[test]
    fn every_agent_block_is_checked_whichever_is_selected() {
        let text = r#"{
          tools: { codeMode: { maxSearchLimit: 10 } },
          agents: { list: [
            { id: "a", tools: { codeMode: { timeoutMs: "soon", memoryLimitBytes: 1, colour: 1 } } },
            { id: "a" },
            { tools: 1 },
            "b",
            { id: "c", tools: { codeMode: { searchDefaultLimit: 20 } } },
          ] },
        }"#;
        let err = parse_config(text, &no_env).unwrap_err();
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "agents.list[0].tools.codeMode.timeoutMs",
                "agents.list[1].id",
                "agents.list[2].id",
                "agents.list[2].tools",
                "agents.list[3]"
            ],
            "{err}"
        );
        let fixed = text
            .replace("timeoutMs: \"soon\",", "")
            .replace("{ id: \"a\" },", "")
            .replace("{ tools: 1 },", "")
            .replace("\"b\",", "");
        let (config, diagnostics) = parse_config(&fixed, &no_env).unwrap();
        assert_eq!(config.code_mode.search_default_limit, 8);
        let paths: Vec<&str> = diagnostics.iter().map(|d| d.path.as_str()).collect();
        assert!(
            paths.contains(&"agents.list[0].tools.codeMode.memoryLimitBytes")
                && paths.contains(&"agents.list[0].tools.codeMode.colour"),
            "{paths:?}"
        );
        // A clamp that only the merge makes is said for the selected agent.
        let (c, diagnostics) = parse_config_for_agent(&fixed, &no_env, Some("c")).unwrap();
        assert_eq!(c.code_mode.search_default_limit, 10);
        assert!(
            diagnostics.iter().any(|d| d.path
                == "agents.list[1].tools.codeMode.searchDefaultLimit"
                && d.message.contains("above maxSearchLimit")),
            "{diagnostics:?}"
        );
        for (bad, path) in [
            ("{ agents: [] }", "agents"),
            ("{ agents: { list: {} } }", "agents.list"),
            ("{ agents: { list: [{ id: \"\" }] } }", "agents.list[0].id"),
            ("{ agents: { list: [{ id: 7 }] } }", "agents.list[0].id"),
            (
                "{ agents: { list: [{ id: \"a\", tools: { codeMode: 7 } }] } }",
                "agents.list[0].tools.codeMode",
            ),
        ] {
            let err = parse_config(bad, &no_env).unwrap_err();
            assert_eq!(err.errors[0].path, path, "{bad}: {err}");
        }
    }
}
