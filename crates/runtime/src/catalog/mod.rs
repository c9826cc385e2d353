//! The hidden, per-run tool catalog (`docs/guest-api.md`): effective tools after policy,
//! with stable ids, the compact guest view (`ALL_TOOLS`, conveniences),
//! search ranking and `describe` lookups.
//!
//! The catalog is data only: it never runs a tool. What the guest may see
//! is decided here; the bridge ([`crate::run::drive`]) asks it for every request,
//! so a guest cannot reach an entry that this module left out.

pub(crate) mod declarations;
pub mod entry;
pub mod gate;
pub(crate) mod guest_api;
pub(crate) mod mcp;
pub mod namespaces;
pub(crate) mod surface;
pub(crate) mod tool;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::catalog::declarations::ApiFiles;
use crate::catalog::mcp::{McpNamespace, McpServerInfo, McpServerView, McpToolView};
use crate::suggest::levenshtein;
pub use entry::CatalogEntry;
pub use gate::*;
pub use tool::*;

/// The hidden catalog of one run. Build it with [`Catalog::build`]; share
/// it read-only (`Arc`).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: Vec<Arc<CatalogEntry>>,
    by_id: HashMap<String, usize>,
    conveniences: Vec<(String, String)>,
    excluded: Vec<Excluded>,
    mcp: McpNamespace,
    /// Rendered on the first `API.*` / `$api` request of any run.
    api_files: OnceLock<ApiFiles>,
    /// The ranker over guest-visible entries (positions in `entries`),
    /// built on the first `tools.search` of any run: its term statistics
    /// belong to this catalog version, not to a query.
    guest_index: OnceLock<(codemode_search::Index, Vec<usize>)>,
    /// The ranker over MCP tools (`(server, tool)` positions in the `MCP`
    /// namespace), built on the first `API.search`.
    mcp_index: OnceLock<(codemode_search::Index, Vec<(usize, usize)>)>,
    guest_context: String,
}

/// Property names a convenience function must never take.
const RESERVED_CONVENIENCE_NAMES: [&str; 7] = [
    "search",
    "describe",
    "call",
    "__proto__",
    "constructor",
    "prototype",
    "then",
];

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

impl Catalog {
    /// Builds the catalog from the run's effective tools.
    ///
    /// Policy is applied first; control tools are dropped; duplicates keep
    /// the first definition. Entries are ordered by source (core, plugin,
    /// MCP, client) and then by id, so equal tool sets give equal catalogs
    /// whatever order they arrive in.
    ///
    /// # Errors
    /// [`CatalogError`] for a definition that cannot form an id.
    pub fn build(tools: Vec<ToolDefinition>, policy: &ToolPolicy) -> Result<Catalog, CatalogError> {
        Catalog::build_with_mcp_servers(tools, policy, &[])
    }

    /// Like [`Catalog::build`], with what is known of the run's MCP servers
    /// (instructions, resources, prompts) for the `MCP` namespace.
    ///
    /// ```
    /// use codemode_runtime::*;
    /// let catalog = Catalog::build_with_mcp_servers(
    ///     vec![ToolDefinition::new(ToolSource::Mcp, "chrome-devtools", "take_snapshot")],
    ///     &ToolPolicy::default(),
    ///     &[McpServerInfo::new("docs").with_resources(true)],
    /// ).unwrap();
    /// let servers: Vec<&str> = catalog.mcp().servers().iter().map(|s| s.js_name.as_str()).collect();
    /// assert_eq!(servers, ["chromeDevtools", "docs"]);
    /// ```
    ///
    /// # Errors
    /// [`CatalogError`] for a definition that cannot form an id.
    pub fn build_with_mcp_servers(
        tools: Vec<ToolDefinition>,
        policy: &ToolPolicy,
        mcp_servers: &[McpServerInfo],
    ) -> Result<Catalog, CatalogError> {
        let mut excluded = Vec::new();
        let mut kept: Vec<CatalogEntry> = Vec::new();
        let mut seen: HashMap<String, ()> = HashMap::new();
        for tool in tools {
            let id = tool.id()?;
            let shell_exec = id == "openclaw:core:exec";
            if CONTROL_TOOL_NAMES.contains(&tool.name.as_str()) && !shell_exec {
                excluded.push(Excluded {
                    tool: id,
                    reason: "code-mode control tools are never catalogued",
                });
                continue;
            }
            let gate = match policy.decide(&tool, &id) {
                Decision::Admitted(gate) => gate,
                Decision::Refused(reason) => {
                    excluded.push(Excluded { tool: id, reason });
                    continue;
                }
            };
            if seen.insert(id.clone(), ()).is_some() {
                excluded.push(Excluded {
                    tool: id,
                    reason: "a tool with the same id is already catalogued",
                });
                continue;
            }
            let source_name = tool.owner().unwrap_or_default().to_owned();
            kept.push(CatalogEntry {
                id,
                name: tool.name,
                label: tool.label.filter(|l| !l.is_empty()),
                description: tool.description,
                source: tool.source,
                source_name,
                parameters: tool.parameters,
                gate,
                annotations: tool.annotations,
                output_schema: tool.output_schema,
            });
        }
        kept.sort_by(|a, b| (a.source, &a.id).cmp(&(b.source, &b.id)));
        let entries: Vec<Arc<CatalogEntry>> = kept.into_iter().map(Arc::new).collect();
        let by_id = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        let mut name_counts: HashMap<&str, usize> = HashMap::new();
        for e in entries.iter().filter(|e| e.guest_visible()) {
            *name_counts.entry(e.name.as_str()).or_default() += 1;
        }
        let conveniences: Vec<(String, String)> = entries
            .iter()
            .filter(|e| e.guest_visible())
            .filter(|e| {
                is_identifier(&e.name)
                    && !RESERVED_CONVENIENCE_NAMES.contains(&e.name.as_str())
                    && name_counts.get(e.name.as_str()) == Some(&1)
            })
            .map(|e| (e.name.clone(), e.id.clone()))
            .collect();
        let guest_tools: Vec<Value> = entries
            .iter()
            .filter(|e| e.guest_visible())
            .map(|e| e.compact_json())
            .collect();
        let mcp = McpNamespace::build(&entries, mcp_servers);
        let guest_context =
            crate::catalog::guest_api::run_context(guest_tools, &conveniences, mcp.guest_json());
        Ok(Catalog {
            entries,
            by_id,
            conveniences,
            excluded,
            mcp,
            api_files: OnceLock::new(),
            guest_index: OnceLock::new(),
            mcp_index: OnceLock::new(),
            guest_context,
        })
    }

    /// The run's `MCP` namespace (servers and tools by JavaScript name).
    pub fn mcp(&self) -> &McpNamespace {
        &self.mcp
    }

    /// The virtual declaration files of `API.list` / `API.read`.
    pub fn api_files(&self) -> &ApiFiles {
        self.api_files.get_or_init(|| ApiFiles::render(&self.mcp))
    }

    /// An empty catalog (a run without tools).
    pub fn empty() -> Catalog {
        Catalog {
            guest_context: crate::catalog::guest_api::EMPTY_CONTEXT.to_owned(),
            ..Catalog::default()
        }
    }

    /// All entries, MCP included, in catalog order.
    pub fn entries(&self) -> &[Arc<CatalogEntry>] {
        &self.entries
    }

    /// Number of entries, MCP included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog holds no tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry with this exact id.
    pub fn get(&self, id: &str) -> Option<&Arc<CatalogEntry>> {
        self.by_id.get(id).map(|&i| &self.entries[i])
    }

    /// Tools left out, and why.
    pub fn excluded(&self) -> &[Excluded] {
        &self.excluded
    }

    /// `(name, id)` of every `tools.<name>` convenience function.
    pub fn conveniences(&self) -> &[(String, String)] {
        &self.conveniences
    }

    /// Entry counts by source (`openclaw`, `plugin`, `mcp`, `client`).
    pub fn count_by_source(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for e in &self.entries {
            *counts.entry(e.source.as_str().to_owned()).or_insert(0) += 1;
        }
        counts
    }

    /// The run context (`crate::catalog::guest_api::run_context`) the guest API turns
    /// into `ALL_TOOLS`, `tools` and `MCP`.
    pub(crate) fn guest_context(&self) -> &str {
        &self.guest_context
    }

    /// Ranked guest-visible hits for `query` (at most `limit`), by
    /// [`codemode_search`]: whole words of the name (split at case and
    /// separators), label, description, parameter names and owner,
    /// weighted per field with BM25-style saturation and this catalog's
    /// word rarity; an exact name or id first. Ties go by catalog order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<&Arc<CatalogEntry>> {
        let (index, positions) = self.guest_index.get_or_init(|| {
            let positions: Vec<usize> = (0..self.entries.len())
                .filter(|&i| self.entries[i].guest_visible())
                .collect();
            let index = codemode_search::Index::build(
                positions
                    .iter()
                    .map(|&i| search_document(&self.entries[i], &self.entries[i].source_name)),
            );
            (index, positions)
        });
        index
            .search(query, limit)
            .into_iter()
            .filter_map(|hit| positions.get(hit.doc).map(|&i| &self.entries[i]))
            .collect()
    }

    /// Ranked MCP tools for `API.search` (at most `limit`), optionally on
    /// one server (its JavaScript or MCP name), by the same ranker as
    /// [`Catalog::search`].
    ///
    /// # Errors
    /// A message for the model when `server` names no visible server.
    pub(crate) fn search_mcp(
        &self,
        query: &str,
        limit: usize,
        server: Option<&str>,
    ) -> Result<Vec<(&McpServerView, &McpToolView)>, String> {
        let servers = self.mcp.servers();
        let only = match server {
            None => None,
            Some(name) => Some(
                servers
                    .iter()
                    .position(|s| s.js_name == name || s.info.name == name)
                    .ok_or_else(|| self.mcp.unknown_server_message(name))?,
            ),
        };
        let (index, positions) = self.mcp_index.get_or_init(|| {
            let positions: Vec<(usize, usize)> = servers
                .iter()
                .enumerate()
                .flat_map(|(s, server)| (0..server.tools.len()).map(move |t| (s, t)))
                .collect();
            let index =
                codemode_search::Index::build(positions.iter().map(|&(s, t)| {
                    search_document(&servers[s].tools[t].entry, &servers[s].info.name)
                }));
            (index, positions)
        });
        // The server filter applies after ranking, so scores (and rarity)
        // stay those of the whole catalog.
        let wanted = if only.is_some() { index.len() } else { limit };
        Ok(index
            .search(query, wanted)
            .into_iter()
            .filter_map(|hit| positions.get(hit.doc).copied())
            .filter(|&(s, _)| only.is_none_or(|o| o == s))
            .take(limit)
            .map(|(s, t)| (&servers[s], &servers[s].tools[t]))
            .collect())
    }

    /// The guest-visible entry for an id or a unique name.
    ///
    /// # Errors
    /// A message for the model: ambiguous name (with the ids), MCP entry
    /// (use the `MCP` namespace), or unknown (with up to three suggestions).
    pub fn describe(&self, id_or_name: &str) -> Result<&Arc<CatalogEntry>, String> {
        if let Some(entry) = self.get(id_or_name) {
            if !entry.guest_visible() {
                return Err(mcp_message(entry));
            }
            return Ok(entry);
        }
        let named: Vec<&Arc<CatalogEntry>> = self
            .entries
            .iter()
            .filter(|e| e.guest_visible() && e.name == id_or_name)
            .collect();
        match named.as_slice() {
            [one] => Ok(one),
            [] => Err(self.unknown_message(id_or_name)),
            many => Err(format!(
                "the tool name \"{id_or_name}\" is ambiguous in this run: it matches {}; pass the full id",
                many.iter()
                    .map(|e| format!("\"{}\"", e.id))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The guest-visible entry a `tools.call` may target (exact id only).
    ///
    /// # Errors
    /// A message for the model, as [`Catalog::describe`].
    pub fn callable(&self, id: &str) -> Result<&Arc<CatalogEntry>, String> {
        match self.get(id) {
            Some(entry) if entry.guest_visible() => Ok(entry),
            Some(entry) => Err(mcp_message(entry)),
            None => {
                let by_name: Vec<_> = self
                    .entries
                    .iter()
                    .filter(|e| e.guest_visible() && e.name == id)
                    .collect();
                if let [one] = by_name.as_slice() {
                    return Err(format!(
                        "tools.call needs a catalog id, not a name: call tools.call(\"{}\", input)",
                        one.id
                    ));
                }
                Err(self.unknown_message(id))
            }
        }
    }

    fn unknown_message(&self, asked: &str) -> String {
        let suggestions = self.suggest(asked);
        let mut message = format!("no tool \"{asked}\" in this run's catalog");
        if !suggestions.is_empty() {
            message.push_str(&format!(
                "; did you mean {}?",
                suggestions
                    .iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        message.push_str(" Use tools.search(query) or read ALL_TOOLS for the exact ids.");
        message
    }

    /// Up to three guest-visible ids closest to `asked`.
    fn suggest(&self, asked: &str) -> Vec<&str> {
        // Nothing real is this long; and the distance work below stays
        // bounded by (catalog size × this²) whatever a guest asks.
        if asked.len() > MAX_SUGGEST_BYTES {
            return Vec::new();
        }
        let asked = asked.to_lowercase();
        let tail = asked.rsplit(':').next().unwrap_or(&asked).to_owned();
        let mut scored: Vec<(usize, &str)> = self
            .entries
            .iter()
            .filter(|e| e.guest_visible())
            .filter_map(|e| {
                let name = e.name.to_lowercase();
                let id = e.id.to_lowercase();
                let related = name.contains(&tail) || tail.contains(&name);
                let threshold = (tail.chars().count().max(3) / 2).max(2);
                // The distance is at least the length difference: skip the
                // quadratic work when it cannot be close.
                let d = if related
                    || name.len().abs_diff(tail.len()) <= threshold
                    || id.len().abs_diff(asked.len()) <= threshold
                {
                    levenshtein(&tail, &name).min(levenshtein(&asked, &id))
                } else {
                    usize::MAX
                };
                let close = d <= threshold;
                (related || close).then_some((if related { 0 } else { d }, e.id.as_str()))
            })
            .collect();
        scored.sort();
        scored.into_iter().take(3).map(|(_, id)| id).collect()
    }
}

fn mcp_message(entry: &CatalogEntry) -> String {
    format!(
        "\"{}\" is an MCP tool: MCP tools are not reachable through tools.*; call it as MCP.<server>.<tool>({{...}}) (see API.list(\"mcp\"))",
        entry.id
    )
}

/// What the ranker sees of an entry: its name, id, label, description,
/// the names of its input's top-level keys and its owner.
fn search_document<'a>(entry: &'a CatalogEntry, owner: &'a str) -> codemode_search::Document<'a> {
    codemode_search::Document {
        name: &entry.name,
        id: &entry.id,
        title: entry.label.as_deref(),
        description: &entry.description,
        parameters: entry
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default(),
        owner,
    }
}

/// Longer asked-for ids get no suggestions.
const MAX_SUGGEST_BYTES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(source: ToolSource, owner: &str, name: &str, description: &str) -> ToolDefinition {
        ToolDefinition::new(source, owner, name).with_description(description)
    }

    /// One tool per `(source, owner, name, description)`.
    fn tools(rows: &[(ToolSource, &str, &str, &str)]) -> Vec<ToolDefinition> {
        rows.iter()
            .map(|&(source, owner, name, description)| tool(source, owner, name, description))
            .collect()
    }

    /// Core, plugin, MCP and client tools, two control tools, and `read`
    /// twice (core and plugin).
    fn sample() -> Catalog {
        use ToolSource::{Client, Mcp, Openclaw, Plugin};
        let rows = [
            (Client, "app", "select_file", "Let the user pick a file"),
            (Openclaw, "core", "read", "Read a local file"),
            (Plugin, "browser", "browser_request", "Fetch a web page"),
            (Mcp, "github", "create_issue", "Create a GitHub issue"),
            (Openclaw, "core", "exec", "Run a shell command"),
            (Openclaw, "core", "tool_search", "search"),
            (Plugin, "x", "wait", "wait"),
            (Plugin, "files", "read", "Read a file from storage"),
        ];
        Catalog::build(tools(&rows), &ToolPolicy::default()).unwrap()
    }

    #[test]
    fn ids_order_and_control_tools() {
        let c = sample();
        let ids: Vec<&str> = c.entries().iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "openclaw:core:exec",
                "openclaw:core:read",
                "plugin:browser:browser_request",
                "plugin:files:read",
                "mcp:github:create_issue",
                "client:app:select_file"
            ]
        );
        assert_eq!(c.excluded().len(), 2);
    }

    #[test]
    fn equal_tool_sets_give_equal_catalogs() {
        let mut tools = vec![
            tool(ToolSource::Client, "app", "b", ""),
            tool(ToolSource::Openclaw, "core", "a", ""),
            tool(ToolSource::Plugin, "p", "c", ""),
        ];
        let one = Catalog::build(tools.clone(), &ToolPolicy::default()).unwrap();
        tools.reverse();
        let two = Catalog::build(tools, &ToolPolicy::default()).unwrap();
        assert_eq!(one.guest_context(), two.guest_context());
    }

    #[test]
    fn conveniences_need_a_unique_identifier_name() {
        let c = sample();
        let names: Vec<&str> = c.conveniences().iter().map(|(n, _)| n.as_str()).collect();
        // `read` collides (core and plugin), MCP tools are left out.
        assert_eq!(names, ["exec", "browser_request", "select_file"]);
    }

    #[test]
    fn policy_globs_match_names_and_ids() {
        assert!(glob_matches("read_*", "read_file"));
        assert!(glob_matches("*delete*", "bulk_delete_rows"));
        assert!(glob_matches("mcp:fs:*", "mcp:fs:write"));
        assert!(glob_matches("get?", "getx"));
        assert!(!glob_matches("get?", "get"));
        assert!(!glob_matches("read_*", "unread_file"));
        // Only `*` and `?` are special: brackets are literal.
        assert!(!glob_matches("[ab]", "a"));
        let policy = ToolPolicy {
            allow: Some(vec!["mcp:fs:*".into(), "lookup".into()]),
            deny: vec!["*write*".into()],
            ..ToolPolicy::default()
        };
        assert!(policy.permits("read", "mcp:fs:read"));
        assert!(!policy.permits("write", "mcp:fs:write"));
        assert!(policy.permits("lookup", "client:app:lookup"));
        assert!(!policy.permits("other", "client:app:other"));
    }

    #[test]
    fn policy_removes_by_name_or_id() {
        let policy = ToolPolicy {
            allow: None,
            deny: vec!["exec".into(), "plugin:files:read".into()],
            ..ToolPolicy::default()
        };
        let c = Catalog::build(
            vec![
                tool(ToolSource::Openclaw, "core", "exec", ""),
                tool(ToolSource::Plugin, "files", "read", ""),
                tool(ToolSource::Openclaw, "core", "read", ""),
            ],
            &policy,
        )
        .unwrap();
        assert_eq!(c.len(), 1);
        assert!(c.callable("openclaw:core:exec").is_err());
    }

    #[test]
    fn search_ranks_exact_then_name_then_id_label_description() {
        use ToolSource::{Openclaw, Plugin};
        let mut defs = tools(&[
            (Openclaw, "core", "notes", "mentions file in text"),
            (Openclaw, "core", "file", ""),
            (Openclaw, "core", "file_read", ""),
            (Plugin, "file", "zzz", ""),
        ]);
        defs.push(ToolDefinition::new(Openclaw, "core", "yyy").with_label("File picker"));
        let c = Catalog::build(defs, &ToolPolicy::default()).unwrap();
        let ids: Vec<&str> = c.search("file", 10).iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "openclaw:core:file",
                "openclaw:core:file_read",
                "plugin:file:zzz",
                "openclaw:core:yyy",
                "openclaw:core:notes"
            ]
        );
        assert_eq!(c.search("file", 2).len(), 2);
        assert!(c.search("   ", 5).is_empty());
    }

    #[test]
    fn search_by_words_and_never_mcp() {
        let c = sample();
        let hits: Vec<&str> = c
            .search("read local file", 3)
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(hits[0], "openclaw:core:read");
        assert!(c.search("issue", 5).is_empty());
    }

    #[test]
    fn describe_suggests_and_explains() {
        let c = sample();
        assert_eq!(
            c.describe("select_file").unwrap().id,
            "client:app:select_file"
        );
        let err = c.describe("read").unwrap_err();
        assert!(
            err.contains("ambiguous") && err.contains("plugin:files:read"),
            "{err}"
        );
        let err = c.describe("openclaw:core:brwser_request").unwrap_err();
        assert!(
            err.contains("did you mean \"plugin:browser:browser_request\""),
            "{err}"
        );
        let err = c.describe("mcp:github:create_issue").unwrap_err();
        assert!(err.contains("MCP."), "{err}");
        let err = c.callable("select_file").unwrap_err();
        assert!(err.contains("client:app:select_file"), "{err}");
    }

    #[test]
    fn bad_definitions_are_named() {
        let err = Catalog::build(
            vec![ToolDefinition {
                source_name: None,
                ..ToolDefinition::new(ToolSource::Plugin, "", "x")
            }],
            &ToolPolicy::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("needs a sourceName"));
        let err = ToolDefinition::new(ToolSource::Plugin, "a:b", "x")
            .id()
            .unwrap_err();
        assert!(err.to_string().contains("sourceName contains `:`"));
    }
}
