//! Whether a tool may run, and whether a human must say yes first. One
//! owner for the question: [`ToolPolicy::decide`] answers it once per tool
//! when the catalog is built, and the answer rides on the catalog entry as
//! its [`GatePolicy`]. Nothing else (the gateway, its config, an executor)
//! decides again.
//!
//! The inputs, in order: control tools are never catalogued (the catalog
//! checks that); then the run's allow/deny globs and the owner's (an MCP
//! server's `allowTools`/`denyTools`), deny winning; then approval — the
//! tool's own declaration, an `approveTools` glob, or the approval mode
//! over the tool's annotations.

use serde_json::Value;

use crate::catalog::tool::{ToolDefinition, ToolSource};

/// Whether `text` matches the glob `pattern` (`*` any run of characters,
/// `?` one character, nothing else special).
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    wildmatch::WildMatch::new(pattern).matches(text)
}

/// Which calls need a human's yes, read from a tool's annotations
/// (`readOnlyHint`, `destructiveHint`; the gateway's `approvals.mode`).
/// A missing hint has the MCP specification's default: `readOnlyHint:
/// false`, `destructiveHint: true`, so a tool without annotations may be
/// destructive (most tools in the wild carry none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
    /// None (a declaration or an `approve` glob still asks).
    Never,
    /// Tools that may be destructive: not marked `readOnlyHint: true`,
    /// and not marked `destructiveHint: false` (unannotated tools too).
    Destructive,
    /// Every tool not marked `readOnlyHint: true`.
    Writes,
    /// Every tool.
    Always,
}

impl ApprovalMode {
    /// Every mode, from asking least to asking most.
    pub const ALL: [ApprovalMode; 4] = [
        ApprovalMode::Never,
        ApprovalMode::Destructive,
        ApprovalMode::Writes,
        ApprovalMode::Always,
    ];

    /// The config's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Never => "never",
            ApprovalMode::Destructive => "destructive",
            ApprovalMode::Writes => "writes",
            ApprovalMode::Always => "always",
        }
    }

    /// Parses the config's word.
    pub fn parse(text: &str) -> Option<ApprovalMode> {
        match text {
            "never" => Some(ApprovalMode::Never),
            "destructive" => Some(ApprovalMode::Destructive),
            "writes" => Some(ApprovalMode::Writes),
            "always" => Some(ApprovalMode::Always),
            _ => None,
        }
    }

    /// Whether this mode asks before calls of a tool with these
    /// annotations (an MCP tool's `annotations` object, or null).
    pub fn asks_for(self, annotations: &Value) -> bool {
        let hint = |key: &str| annotations.get(key).and_then(Value::as_bool);
        self.asks(hint("readOnlyHint"), hint("destructiveHint"))
    }

    /// Whether a tool with these annotations needs approval; a missing
    /// hint has the specification's default (see [`ApprovalMode`]).
    fn asks(self, read_only: Option<bool>, destructive: Option<bool>) -> bool {
        let read_only = read_only == Some(true);
        match self {
            ApprovalMode::Never => false,
            ApprovalMode::Destructive => destructive != Some(false) && !read_only,
            ApprovalMode::Writes => !read_only,
            ApprovalMode::Always => true,
        }
    }
}

/// The globs one owner (an MCP server, a plugin) puts on its tools, over
/// the tools' own names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerPolicy {
    /// When set, only these of the owner's tools are kept.
    pub allow: Option<Vec<String>>,
    /// These of the owner's tools are removed (deny wins).
    pub deny: Vec<String>,
    /// Calls of these need approval whatever the mode says.
    pub approve: Vec<String>,
}

/// Allow, deny and approval policy, applied when the catalog is built. A
/// pattern is a glob (`*` any run of characters, `?` one character) that
/// matches a tool's name or its full id; deny wins over allow. A denied
/// tool is absent from the catalog, so nothing can call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// When set, only these tools are kept.
    pub allow: Option<Vec<String>>,
    /// These tools are removed.
    pub deny: Vec<String>,
    /// Calls of these tools need approval.
    pub approve: Vec<String>,
    /// Which calls of MCP servers' tools need approval by their
    /// annotations (default: none). Other tools declare it themselves
    /// ([`ToolDefinition::needs_approval`]) or match `approve`.
    pub approvals: ApprovalMode,
    /// Per-owner globs, e.g. an MCP server's `allowTools` / `denyTools` /
    /// `approveTools` (see [`ToolPolicy::with_owner`]).
    pub owners: Vec<(ToolSource, String, OwnerPolicy)>,
}

impl Default for ToolPolicy {
    fn default() -> ToolPolicy {
        ToolPolicy {
            allow: None,
            deny: Vec::new(),
            approve: Vec::new(),
            approvals: ApprovalMode::Never,
            owners: Vec::new(),
        }
    }
}

/// Why a call needs approval, shown to whoever approves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalReason {
    /// The tool's definition asks for it (`needsApproval`).
    Declared,
    /// The tool matches this `approve` / `approveTools` glob.
    Listed(String),
    /// The approval mode asks, by the tool's annotations.
    Annotations(ApprovalMode),
}

impl ApprovalReason {
    /// One line for the approver.
    pub fn describe(&self) -> String {
        match self {
            ApprovalReason::Declared => "the tool's definition asks for approval".into(),
            ApprovalReason::Listed(pattern) => {
                format!("it matches the approval list's pattern \"{pattern}\"")
            }
            ApprovalReason::Annotations(ApprovalMode::Destructive) => {
                "the tool may be destructive: it is not marked readOnlyHint: true nor destructiveHint: false, and MCP treats a tool without those hints as destructive (approvals.mode \"destructive\")".into()
            }
            ApprovalReason::Annotations(ApprovalMode::Writes) => {
                "the tool is not marked read-only (approvals.mode \"writes\")".into()
            }
            ApprovalReason::Annotations(mode) => {
                format!("approvals.mode \"{}\" asks for every call", mode.as_str())
            }
        }
    }
}

/// What the policy says of one catalogued tool: whether its calls need
/// approval, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatePolicy {
    /// Why calls need a human's yes (`None`: they run unasked).
    pub approval: Option<ApprovalReason>,
}

impl GatePolicy {
    /// Calls need a human's yes before they start.
    pub fn needs_approval(&self) -> bool {
        self.approval.is_some()
    }
}

/// [`ToolPolicy::decide`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Kept, with what its calls go through.
    Admitted(GatePolicy),
    /// Left out of the catalog, and why.
    Refused(&'static str),
}

impl ToolPolicy {
    /// Adds the globs of one owner's tools (e.g. an MCP server).
    pub fn with_owner(
        mut self,
        source: ToolSource,
        owner: &str,
        policy: OwnerPolicy,
    ) -> ToolPolicy {
        self.owners.push((source, owner.to_owned(), policy));
        self
    }

    /// Whether a tool with this name and id passes the run's allow and deny
    /// globs (the owners' globs aside).
    pub fn permits(&self, name: &str, id: &str) -> bool {
        let hit = |p: &String| glob_matches(p, name) || glob_matches(p, id);
        !self.deny.iter().any(hit)
            && self
                .allow
                .as_ref()
                .is_none_or(|allow| allow.iter().any(hit))
    }

    fn owner(&self, tool: &ToolDefinition) -> Option<&OwnerPolicy> {
        let owner = tool.owner()?;
        self.owners
            .iter()
            .find(|(source, name, _)| *source == tool.source && name == owner)
            .map(|(_, _, policy)| policy)
    }

    /// Whether `tool` (whose catalog id is `id`) is kept, and if so whether
    /// its calls need approval and why.
    pub fn decide(&self, tool: &ToolDefinition, id: &str) -> Decision {
        let owner = self.owner(tool);
        let owner_hit = |p: &String| glob_matches(p, &tool.name);
        if !self.permits(&tool.name, id) {
            return Decision::Refused("denied by policy");
        }
        if let Some(owner) = owner {
            let allowed = owner
                .allow
                .as_ref()
                .is_none_or(|allow| allow.iter().any(owner_hit));
            if owner.deny.iter().any(owner_hit) || !allowed {
                return Decision::Refused("denied by its server's policy (allowTools/denyTools)");
            }
        }
        let hit = |p: &&String| glob_matches(p, &tool.name) || glob_matches(p, id);
        let listed = self
            .approve
            .iter()
            .find(hit)
            .or_else(|| owner.and_then(|o| o.approve.iter().find(|p| owner_hit(p))));
        let approval = if tool.needs_approval {
            Some(ApprovalReason::Declared)
        } else if let Some(pattern) = listed {
            Some(ApprovalReason::Listed(pattern.clone()))
        } else if tool.source == ToolSource::Mcp && self.approvals.asks_for(&tool.annotations) {
            Some(ApprovalReason::Annotations(self.approvals))
        } else {
            None
        };
        Decision::Admitted(GatePolicy { approval })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, annotations: Value) -> ToolDefinition {
        ToolDefinition::new(ToolSource::Mcp, "fs", name).with_annotations(annotations)
    }

    /// The config's words are the modes, both ways; anything else is no
    /// mode (the config reader then names the field and the choices).
    #[test]
    fn each_mode_is_read_from_its_own_word_and_no_other() {
        let words: Vec<&str> = ApprovalMode::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(words, ["never", "destructive", "writes", "always"]);
        for mode in ApprovalMode::ALL {
            assert_eq!(ApprovalMode::parse(mode.as_str()), Some(mode));
        }
        for other in ["", "Never", "xyzzy", "destructive "] {
            assert_eq!(ApprovalMode::parse(other), None, "{other:?}");
        }
    }

    fn approval(policy: &ToolPolicy, tool: &ToolDefinition) -> Option<ApprovalReason> {
        let id = tool.id().unwrap();
        match policy.decide(tool, &id) {
            Decision::Admitted(gate) => gate.approval,
            Decision::Refused(why) => panic!("{id} refused: {why}"),
        }
    }

    #[test]
    fn approval_modes_follow_the_annotations() {
        use ApprovalMode::*;
        // (read_only, destructive) → needs approval under each mode.
        let cases = [
            // No annotations: the spec's defaults, possibly destructive.
            (json!({}), [false, true, true, true]),
            (json!({"readOnlyHint": false}), [false, true, true, true]),
            (
                json!({"destructiveHint": false}),
                [false, false, true, true],
            ),
            (json!({"readOnlyHint": true}), [false, false, false, true]),
            (json!({"destructiveHint": true}), [false, true, true, true]),
            (
                json!({"readOnlyHint": true, "destructiveHint": true}),
                [false, false, false, true],
            ),
            (
                json!({"readOnlyHint": false, "destructiveHint": false}),
                [false, false, true, true],
            ),
        ];
        for (annotations, expected) in cases {
            let t = tool("write", annotations.clone());
            let got = [Never, Destructive, Writes, Always].map(|mode| {
                let policy = ToolPolicy {
                    approvals: mode,
                    ..ToolPolicy::default()
                };
                approval(&policy, &t).is_some()
            });
            assert_eq!(got, expected, "annotations {annotations}");
        }
    }

    #[test]
    fn the_reason_names_the_first_rule_that_asks() {
        let policy = ToolPolicy {
            approve: vec!["mcp:fs:move_*".into()],
            approvals: ApprovalMode::Writes,
            ..ToolPolicy::default()
        }
        .with_owner(
            ToolSource::Mcp,
            "fs",
            OwnerPolicy {
                approve: vec!["read_secret*".into()],
                ..OwnerPolicy::default()
            },
        );
        let read_only = json!({"readOnlyHint": true});
        assert_eq!(
            approval(&policy, &tool("move_file", read_only.clone())),
            Some(ApprovalReason::Listed("mcp:fs:move_*".into()))
        );
        assert_eq!(
            approval(&policy, &tool("read_secrets", read_only.clone())),
            Some(ApprovalReason::Listed("read_secret*".into()))
        );
        assert_eq!(
            approval(&policy, &tool("read_file", read_only.clone())),
            None
        );
        assert_eq!(
            approval(&policy, &tool("write_file", json!({}))),
            Some(ApprovalReason::Annotations(ApprovalMode::Writes))
        );
        assert_eq!(
            approval(&policy, &tool("read_file", read_only).with_approval(true)),
            Some(ApprovalReason::Declared)
        );
        // The mode reads MCP tools' annotations only.
        let plugin = ToolDefinition::new(ToolSource::Plugin, "fs", "write_file");
        assert_eq!(approval(&policy, &plugin), None);
        // An owner's globs apply to that owner's tools only.
        let other = ToolDefinition::new(ToolSource::Mcp, "docs", "read_secrets")
            .with_annotations(json!({"readOnlyHint": true}));
        assert_eq!(approval(&policy, &other), None);
    }

    #[test]
    fn owner_globs_deny_and_allow_only_their_own_tools() {
        let policy = ToolPolicy::default().with_owner(
            ToolSource::Mcp,
            "fs",
            OwnerPolicy {
                allow: Some(vec!["read_*".into(), "list_dir".into()]),
                deny: vec!["read_secrets".into()],
                approve: Vec::new(),
            },
        );
        let decide = |owner: &str, name: &str| {
            let t = ToolDefinition::new(ToolSource::Mcp, owner, name);
            matches!(policy.decide(&t, &t.id().unwrap()), Decision::Admitted(_))
        };
        assert!(decide("fs", "read_file"));
        assert!(decide("fs", "list_dir"));
        assert!(!decide("fs", "read_secrets"), "deny wins over allow");
        assert!(!decide("fs", "write_file"), "not in the owner's allow list");
        assert!(decide("docs", "write_file"), "another owner is untouched");
        // A plugin that happens to share the server's name is another owner.
        let plugin = ToolDefinition::new(ToolSource::Plugin, "fs", "write_file");
        assert!(matches!(
            policy.decide(&plugin, &plugin.id().unwrap()),
            Decision::Admitted(_)
        ));
    }
}
