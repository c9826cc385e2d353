//! Did-you-mean: the edit distance every suggestion of the product uses
//! (tool names, `MCP.<server>.<tool>`, config keys).

/// Edit distance (insert, delete, substitute one character).
pub(crate) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The candidate `word` most likely misspells, if one is close: equal but
/// for case, or within an edit distance that grows with the word (none
/// for words under 3 characters, 1 under 6, else 2).
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let folded = word.to_ascii_lowercase();
    let allowed = match word.chars().count() {
        0..3 => 0,
        3..6 => 1,
        _ => 2,
    };
    candidates
        .iter()
        .filter(|c| **c != word)
        .map(|c| (levenshtein(&folded, &c.to_ascii_lowercase()), *c))
        .filter(|&(d, _)| d <= allowed)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_words_are_suggested_far_ones_are_not() {
        let known = ["allowTools", "denyTools", "approveTools", "command", "url"];
        assert_eq!(closest("denyToolsX", &known), Some("denyTools"));
        assert_eq!(closest("denytools", &known), Some("denyTools"));
        assert_eq!(closest("comand", &known), Some("command"));
        assert_eq!(closest("autoApprove", &known), None);
        assert_eq!(closest("env", &known), None);
        assert_eq!(closest("uri", &known), Some("url"));
        assert_eq!(closest("ur", &known), None, "too short to guess");
        assert_eq!(closest("url", &known), None, "a known word is no typo");
    }

    #[test]
    fn levenshtein_counts_edits() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }
}
