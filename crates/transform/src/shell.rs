//! Detecting a cell that is a shell command line, not JavaScript.
//!
//! Models used to a shell tool named `exec` sometimes send `ls -la` or
//! `git status`. Those must get a clear "write JavaScript" answer instead of
//! a confusing `ReferenceError`, without rejecting JavaScript that merely
//! uses such words (`const ls = await tools.call(...)`, `git.status()`).

use oxc_allocator::Allocator;
use oxc_ast::ast::{BinaryOperator, Expression, Statement};
use oxc_parser::{ParseOptions, Parser};
use oxc_span::SourceType;

use crate::Dialect;

/// Commands a model typically sends as a shell line.
const COMMANDS: &[&str] = &[
    "apt", "apt-get", "awk", "bash", "brew", "bun", "cargo", "cat", "cd", "chmod", "chown", "cp",
    "curl", "date", "deno", "df", "diff", "docker", "du", "echo", "egrep", "env", "fd", "find",
    "gh", "git", "go", "grep", "head", "kill", "kubectl", "less", "ls", "make", "man", "mkdir",
    "more", "mv", "nano", "node", "npm", "npx", "pip", "pip3", "pnpm", "printf", "ps", "pwd",
    "python", "python3", "rg", "rm", "rmdir", "rustc", "scp", "sed", "sh", "sort", "ssh", "sudo",
    "tail", "tar", "top", "touch", "tree", "uniq", "unzip", "vim", "wc", "wget", "which", "whoami",
    "xargs", "yarn", "zip", "zsh",
];

/// Why `source` looks like a shell command line, or `None` for (anything
/// that may be) a program in `dialect`.
///
/// ```
/// use codemode_transform::{looks_like_shell_command, Dialect};
/// assert!(looks_like_shell_command("ls -la", Dialect::JavaScript).is_some());
/// assert!(looks_like_shell_command("cat README.md | head", Dialect::JavaScript).is_some());
/// assert!(looks_like_shell_command("const ls = 1; return ls - 1", Dialect::JavaScript).is_none());
/// ```
pub fn looks_like_shell_command(source: &str, dialect: Dialect) -> Option<String> {
    let text = source.trim();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() || lines.len() > 3 {
        return None;
    }
    let first_line = lines[0].trim();
    let first_word = first_line.split_whitespace().next()?;
    let command = first_word.trim_start_matches("./");
    let known = COMMANDS.contains(&command)
        || (first_word.starts_with("./") && first_word.len() > 2)
        || first_word.starts_with("#!");
    if !known {
        return None;
    }
    let shell_like = match parse_shape(text, dialect) {
        // Not JavaScript at all: `git status`, `cat a.md | head`.
        Shape::NotJavaScript => true,
        // JavaScript only by accident: `pwd`, `ls -la` (`ls - la`).
        Shape::Accidental => true,
        Shape::Program => false,
    };
    shell_like.then(|| {
        format!(
            "exec runs JavaScript, not shell commands: `{}` looks like a shell command line. Write a JavaScript program instead, and reach tools through the catalog (e.g. `const hits = await tools.search(\"shell\"); return await tools.call(hits[0].id, {{ command: \"...\" }})`)",
            truncate(first_line, 80)
        )
    })
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    }
}

enum Shape {
    NotJavaScript,
    /// A lone identifier or identifiers joined by `-`, `|`, `>`, `<`, `&&`.
    Accidental,
    Program,
}

fn parse_shape(text: &str, dialect: Dialect) -> Shape {
    let allocator = Allocator::default();
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let source_type = match dialect {
        Dialect::JavaScript => SourceType::mjs(),
        Dialect::TypeScript => SourceType::ts(),
    };
    let parsed = Parser::new(&allocator, text, source_type)
        .with_options(options)
        .parse();
    if parsed.panicked || !parsed.diagnostics.is_empty() {
        return Shape::NotJavaScript;
    }
    match parsed.program.body.as_slice() {
        [Statement::ExpressionStatement(statement)] if accidental(&statement.expression) => {
            Shape::Accidental
        }
        _ => Shape::Program,
    }
}

fn accidental(expr: &Expression<'_>) -> bool {
    match expr {
        Expression::Identifier(_) => true,
        Expression::BinaryExpression(b) => {
            matches!(
                b.operator,
                BinaryOperator::Subtraction
                    | BinaryOperator::BitwiseOR
                    | BinaryOperator::GreaterThan
                    | BinaryOperator::LessThan
                    | BinaryOperator::Division
            ) && accidental(&b.left)
                && accidental(&b.right)
        }
        Expression::LogicalExpression(l) => accidental(&l.left) && accidental(&l.right),
        Expression::StaticMemberExpression(m) => accidental(&m.object),
        Expression::UnaryExpression(u) => accidental(&u.argument),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_are_recognised() {
        for line in [
            "ls -la",
            "ls",
            "pwd",
            "git status",
            "cat README.md | head",
            "cat README.md | head -20",
            "grep -rn foo src/",
            "npm install",
            "cd /tmp && ls",
            "echo hello world",
            "./run.sh --fast",
            "curl https://example.org",
            "find . -name '*.rs'",
            "python3 -m http.server",
            "sudo apt-get install jq",
        ] {
            assert!(
                looks_like_shell_command(line, Dialect::JavaScript).is_some(),
                "{line}"
            );
        }
    }

    #[test]
    fn javascript_with_such_words_is_not() {
        for code in [
            "const ls = await tools.call('openclaw:core:exec', { command: 'ls -la' }); return ls",
            "return git.status()",
            "const cat = 1; return cat",
            "echo('hi')",
            "cat + 1",
            "find(x => x > 1)",
            "date = new Date(); return date",
            "ls = 5",
            "return 'ls -la'",
            "// ls -la\nreturn 1",
            "text('git status')",
            "const files = ALL_TOOLS.map(t => t.id);\nreturn files;",
            "node.children.length",
            "env.HOME",
            "export const x = 1;",
        ] {
            assert!(
                looks_like_shell_command(code, Dialect::JavaScript).is_none(),
                "{code}"
            );
        }
    }

    #[test]
    fn the_message_says_what_to_do() {
        let message = looks_like_shell_command("ls -la", Dialect::JavaScript).unwrap_or_default();
        assert!(
            message.contains("JavaScript") && message.contains("tools.search"),
            "{message}"
        );
    }
}
