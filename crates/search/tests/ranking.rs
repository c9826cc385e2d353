//! Ranking behaviour pinned on small hand-made catalogs.

use codemode_search::{Document, Hit, Index, MAX_QUERY_BYTES, tokens};

/// `(owner, name, description, parameters)`.
type Tool = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

struct Catalog {
    tools: Vec<Tool>,
    ids: Vec<String>,
    index: Index,
}

impl Catalog {
    fn new(tools: &[Tool]) -> Catalog {
        let ids: Vec<String> = tools
            .iter()
            .map(|(owner, name, _, _)| format!("plugin:{owner}:{name}"))
            .collect();
        let index = Index::build(tools.iter().zip(&ids).map(
            |((owner, name, description, parameters), id)| Document {
                name,
                id,
                title: None,
                description,
                parameters: parameters.to_vec(),
                owner,
            },
        ));
        Catalog {
            tools: tools.to_vec(),
            ids,
            index,
        }
    }

    /// `owner/name` of the hits, best first.
    fn search(&self, query: &str) -> Vec<String> {
        self.index
            .search(query, 10)
            .iter()
            .map(|h| format!("{}/{}", self.tools[h.doc].0, self.tools[h.doc].1))
            .collect()
    }

    fn first(&self, query: &str) -> Option<String> {
        self.search(query).into_iter().next()
    }
}

/// A small catalog in the style of real MCP servers.
fn catalog() -> Catalog {
    Catalog::new(&[
        (
            "weather",
            "get_weather",
            "Get the current weather of a city. Returns the temperature, the humidity, the wind and the forecast of the day for the location, with details of the alerts in the area.",
            &["city", "units"],
        ),
        (
            "weather",
            "get_forecast",
            "Get the weather forecast of the next days for a location: temperature, rain and wind of each day.",
            &["latitude", "longitude", "days"],
        ),
        (
            "deepwiki",
            "read_wiki_structure",
            "List the documentation topics of a GitHub repository.",
            &["repoName"],
        ),
        (
            "deepwiki",
            "read_wiki_contents",
            "View the documentation of a GitHub repository.",
            &["repoName"],
        ),
        (
            "deepwiki",
            "ask_question",
            "Ask any question about a GitHub repository and get an answer grounded in its code.",
            &["repoName", "question"],
        ),
        (
            "time",
            "get_current_time",
            "Get the current time in a time zone, with the details of the zone.",
            &["timezone"],
        ),
        (
            "filesystem",
            "read_file",
            "Read the complete contents of a file from the file system.",
            &["path"],
        ),
        (
            "filesystem",
            "list_directory",
            "Get a detailed listing of all files and directories in a path.",
            &["path"],
        ),
        (
            "notes",
            "deleteNote",
            "Remove a note from the notebook for good.",
            &["noteId"],
        ),
        (
            "notes",
            "delete_notes_bulk",
            "Delete many notes at once: delete note after note, each deleted note gone.",
            &["noteIds"],
        ),
        (
            "calculator",
            "calculate",
            "Evaluate a mathematical expression.",
            &["expression"],
        ),
        (
            "registry",
            "search_servers",
            "Search the 'MCP' registry for servers; tell me which ones match.",
            &["query"],
        ),
        (
            "bing-cn",
            "bing_search",
            "使用必应搜索指定的关键词，并返回搜索结果列表",
            &["query", "num_results"],
        ),
        (
            "github",
            "get_issue",
            "Get the details of an issue in a GitHub repository.",
            &["owner", "repo", "issue_number"],
        ),
        (
            "github",
            "get_pull_request",
            "Get the details of a pull request.",
            &["owner", "repo", "pull_number"],
        ),
        (
            "slack",
            "get_channel_history",
            "Get the recent messages of a channel.",
            &["channel_id", "limit"],
        ),
        (
            "slack",
            "get_user_profile",
            "Get the profile of a user.",
            &["user_id"],
        ),
        (
            "stocks",
            "get_stock_price",
            "Get the current price of a stock by its ticker symbol.",
            &["symbol"],
        ),
        (
            "vercel",
            "list_deployments",
            "List the deployments of a Vercel project.",
            &["projectId"],
        ),
    ])
}

#[test]
fn whole_words_only() {
    let c = catalog();
    // "me" is in "time" and "ai" is in "details", but neither as a word.
    assert_eq!(c.search("me"), ["registry/search_servers"]);
    assert!(c.search("ai").is_empty());
    assert!(c.search("ime").is_empty());
}

#[test]
fn punctuation_is_ignored() {
    let c = catalog();
    assert_eq!(c.first("'mcp'").as_deref(), Some("registry/search_servers"));
    assert_eq!(
        c.first("(mcp),").as_deref(),
        Some("registry/search_servers")
    );
    assert_eq!(
        c.first("vercel,").as_deref(),
        Some("vercel/list_deployments")
    );
}

#[test]
fn camel_case_names_split() {
    let c = catalog();
    assert_eq!(c.first("remove note").as_deref(), Some("notes/deleteNote"));
    // Parameter names split too: `repoName` holds "repo".
    let repo = c.search("repo");
    for tool in [
        "deepwiki/read_wiki_structure",
        "deepwiki/read_wiki_contents",
        "deepwiki/ask_question",
    ] {
        assert!(repo.contains(&tool.to_owned()), "{repo:?}");
    }
}

#[test]
fn stemming_matches_word_forms() {
    let c = catalog();
    // "files" finds the tool about a "file", "listings" the "listing".
    assert!(
        c.search("files")
            .contains(&"filesystem/read_file".to_owned())
    );
    assert_eq!(
        c.first("directory listings").as_deref(),
        Some("filesystem/list_directory")
    );
    assert_eq!(
        c.first("forecasts").as_deref(),
        Some("weather/get_forecast")
    );
}

#[test]
fn stop_words_do_not_rank() {
    let c = catalog();
    assert_eq!(
        c.search("the weather of the city"),
        c.search("weather city")
    );
    // A query of stop words only still finds what holds them.
    let the = c.search("the");
    assert!(!the.is_empty());
    assert!(the.contains(&"weather/get_weather".to_owned()));
}

#[test]
fn cjk_text_matches_by_bigrams() {
    let c = catalog();
    assert_eq!(c.search("搜索关键词"), ["bing-cn/bing_search"]);
    assert_eq!(c.search("返回结果"), ["bing-cn/bing_search"]);
    assert!(c.search("天气预报").is_empty());
}

#[test]
fn exact_name_ranks_first() {
    let c = catalog();
    // `delete_notes_bulk` says "delete" and "note" many times; the tool
    // named exactly so still comes first.
    assert_eq!(c.first("deleteNote").as_deref(), Some("notes/deleteNote"));
    assert_eq!(c.first("DELETENOTE").as_deref(), Some("notes/deleteNote"));
    assert_eq!(c.first("delete note").as_deref(), Some("notes/deleteNote"));
    assert_eq!(c.first("delete_note").as_deref(), Some("notes/deleteNote"));
    assert_eq!(c.first("delete-notes").as_deref(), Some("notes/deleteNote"));
    assert_eq!(
        c.first("plugin:notes:deleteNote").as_deref(),
        Some("notes/deleteNote")
    );
    assert_eq!(
        c.first("get_forecast").as_deref(),
        Some("weather/get_forecast")
    );
}

#[test]
fn exact_id_picks_the_owner() {
    let c = Catalog::new(&[
        ("a", "search", "Search the web.", &[]),
        ("b", "search", "Search the web, the news, the images.", &[]),
    ]);
    assert_eq!(c.first("plugin:b:search").as_deref(), Some("b/search"));
    assert_eq!(c.first("plugin:a:search").as_deref(), Some("a/search"));
    assert_eq!(c.ids.len(), 2);
    // The name alone: both exact, the better text match first, then by
    // position.
    assert_eq!(c.search("search"), ["a/search", "b/search"]);
}

#[test]
fn rare_name_word_beats_common_description_words() {
    let mut tools: Vec<Tool> = (0..20)
        .map(|_| {
            (
                "crm",
                "get_record",
                "Get the list of data for a user file.",
                &["id"][..],
            )
        })
        .collect();
    tools.push((
        "dump",
        "dump_everything",
        "Get a list of all the data of every user and every file, get the list, get the data.",
        &[],
    ));
    tools.push((
        "k8s",
        "describe_kubernetes",
        "Describe a cluster resource.",
        &["kind"],
    ));
    let c = Catalog::new(&tools);
    assert_eq!(
        c.first("get list data user file kubernetes").as_deref(),
        Some("k8s/describe_kubernetes")
    );
}

#[test]
fn deepwiki_of_vercel_ai() {
    let c = catalog();
    // Every tool holds "get", "the" or "of"; the weather tools hold them
    // all, many times. The rare words decide: "deepwiki" (the owner of
    // three tools) and "vercel" (one tool's owner and description).
    let hits = c.search("get the deepwiki of vercel/ai");
    let mut top: Vec<&str> = hits.iter().take(4).map(String::as_str).collect();
    top.sort_unstable();
    assert_eq!(
        top,
        [
            "deepwiki/ask_question",
            "deepwiki/read_wiki_contents",
            "deepwiki/read_wiki_structure",
            "vercel/list_deployments",
        ],
        "{hits:?}"
    );
    assert_eq!(
        c.first("deepwiki structure of vercel/ai").as_deref(),
        Some("deepwiki/read_wiki_structure")
    );
}

#[test]
fn partial_names_and_typos_still_find_something() {
    let c = catalog();
    assert_eq!(c.first("calc").as_deref(), Some("calculator/calculate"));
    assert_eq!(c.first("caculate").as_deref(), Some("calculator/calculate"));
    assert_eq!(
        c.first("deploymnts").as_deref(),
        Some("vercel/list_deployments")
    );
    // Short words are never taken as prefixes or typos.
    assert!(c.search("cal").is_empty());
}

#[test]
fn camel_case_brands_match_their_lowercase() {
    let c = catalog();
    // "GitHub" in a description is found by "github" (and the reverse).
    let hits = c.search("github");
    assert_eq!(hits.len(), 5, "{hits:?}");
    assert!(hits.contains(&"deepwiki/read_wiki_structure".to_owned()));
    assert_eq!(c.search("GitHub"), hits);
    assert_eq!(tokens("GitHub"), ["git", "hub", "github"]);
}

#[test]
fn blank_and_unmatched_queries_find_nothing() {
    let c = catalog();
    for q in ["", "   ", "\n\t", "?!", "zzzz qqqq", "ai ml"] {
        assert!(c.search(q).is_empty(), "{q:?}");
    }
    assert!(c.index.search("weather", 0).is_empty());
    assert!(Index::build(Vec::new()).search("weather", 10).is_empty());
    assert!(Index::build(Vec::new()).is_empty());
    assert_eq!(c.index.len(), 19);
}

#[test]
fn results_are_deterministic_and_ties_go_by_position() {
    let tools: Vec<Tool> = (0..5)
        .map(|_| ("same", "copy", "An identical tool.", &[][..]))
        .collect();
    let c = Catalog::new(&tools);
    let hits = c.index.search("identical", 10);
    let docs: Vec<usize> = hits.iter().map(|h| h.doc).collect();
    assert_eq!(docs, [0, 1, 2, 3, 4]);
    assert!(hits.windows(2).all(|w| w[0].score == w[1].score));

    let a = catalog();
    let b = catalog();
    for q in [
        "get the deepwiki of vercel/ai",
        "weather",
        "read files in a directory",
        "delete note",
        "搜索",
    ] {
        let x: Vec<Hit> = a.index.search(q, 10);
        let y: Vec<Hit> = b.index.search(q, 10);
        assert_eq!(x, y, "{q:?}");
        assert!(
            x.windows(2)
                .all(|w| w[0].score > w[1].score
                    || (w[0].score == w[1].score && w[0].doc < w[1].doc))
        );
    }
}

#[test]
fn limit_is_respected() {
    let c = catalog();
    assert_eq!(c.index.search("get", 2).len(), 2);
    let all = c.index.search("get", 100);
    assert_eq!(&c.index.search("get", 2)[..], &all[..2]);
}

#[test]
fn hostile_queries_stay_bounded() {
    let c = catalog();
    let long = "weather ".repeat(200_000);
    let hits = c.index.search(&long, 10);
    assert_eq!(hits.first().map(|h| h.doc), Some(0));
    let words: String = (0..10_000).map(|i| format!("word{i} ")).collect();
    assert!(words.len() > MAX_QUERY_BYTES);
    let start = std::time::Instant::now();
    assert!(c.index.search(&words, 10).is_empty());
    assert!(start.elapsed().as_secs() < 5);
}
