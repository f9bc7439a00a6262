//! Functions that fit on a screen: no function outside the tests is longer
//! than [`LINES_MAX`] lines unless it is listed here with its reason.
//!
//! Method: every `.rs` file of the repository outside `tests/` directories
//! is read with its comments, strings and character literals blanked (so a
//! brace in SQL text or a doc comment counts for nothing); each `fn` with a
//! body is measured from its `fn` line to its closing brace. A listed function
//! that shrank under the limit, or disappeared, fails the test too: the list
//! stays true. A negative control proves the scanner measures what it says.

use std::path::{Path, PathBuf};

use super::repository;

/// The most lines a function may span without a reason.
const LINES_MAX: usize = 120;

/// Functions allowed over [`LINES_MAX`]: (path, function, why).
const LONG_ON_PURPOSE: &[(&str, &str, &str)] = &[
    (
        "models/src/model/steps.rs",
        "apply_lease_step",
        "the model's transition table: one arm per step, read against the protocol table",
    ),
    (
        "crates/harness/leaseproof-history/src/check/mutual_exclusion.rs",
        "check_grant_intervals",
        "I1 over grant intervals: certain and possible overlaps decided in one comparison per pair",
    ),
    (
        "crates/harness/leaseproof-history/src/timeline.rs",
        "new",
        "lays out the page's lanes in one pass over the history; split, the pass's state would travel in a struct of its own",
    ),
    (
        "crates/harness/leaseproof-history/src/check/token_order.rs",
        "collect_grants",
        "one pass in the order outcomes arrived, every arm of an operation's outcome beside the others",
    ),
    (
        "crates/harness/leaseproof-history/src/check/takeover.rs",
        "check_takeovers",
        "I5's bound: the crash, the next grant and the retry allowance read together, as the property is stated",
    ),
    (
        "crates/product/leaseproof-postgres/src/conformance.rs",
        "differential_with",
        "the differential's script: one statement after another against the SQL and the executable spec",
    ),
    (
        "crates/product/leaseproof-locks/src/conformance.rs",
        "tasks_never_hold_one_table_at_once",
        "a conformance race told as one scene: tasks, rounds, the history and its verdict",
    ),
    (
        "benches/rig.rs",
        "prepare",
        "one arm per workload's set-up, next to the workload list",
    ),
    (
        "crates/harness/leaseproof-races/src/clients/run.rs",
        "run_clients",
        "a client run's order: servers, processes, faults, the drive and the verdict, each a call",
    ),
    (
        "crates/harness/leaseproof-races/src/process.rs",
        "process_race",
        "a process race's order: children, their hand-shake, the shared start and the collected history",
    ),
];

/// Blanks comments, string and character literals, keeping every newline.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, part: &[u8]| {
        out.extend(part.iter().map(|&b| if b == b'\n' { b'\n' } else { b' ' }));
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        let after_identifier =
            i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            rest.windows(2)
                .position(|w| w == b"*/")
                .map_or(rest.len(), |at| at + 2)
        } else if !after_identifier
            && (rest.starts_with(b"r\"")
                || rest.starts_with(b"r#")
                || rest.starts_with(b"br\"")
                || rest.starts_with(b"br#"))
        {
            let open = rest.iter().position(|&b| b == b'"').unwrap_or(0);
            let hashes = rest[..open].iter().filter(|&&b| b == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            rest[open + 1..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |at| open + 1 + at + close.len())
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if rest[0] == b'\'' {
            // A character literal ('{', '\n', '\u{7b}'), not a lifetime.
            match rest.get(1) {
                Some(b'\\') => rest[2..]
                    .iter()
                    .position(|&b| b == b'\'')
                    .map_or(1, |at| at + 3),
                Some(_) if rest.get(2) == Some(&b'\'') => 3,
                _ => 1,
            }
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    String::from_utf8(out).expect("blanking keeps ASCII structure")
}

/// Each function with a body: (name, first line, lines spanned).
fn functions(source: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(source);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut search = 0;
    while let Some(at) = code[search..].find("fn ") {
        let start = search + at;
        search = start + 3;
        let word_start =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if !word_start {
            continue;
        }
        let name: String = code[start + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let Some(open) = code[start..].find(['{', ';']).map(|at| start + at) else {
            break;
        };
        if bytes[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (offset, &b) in bytes[open..].iter().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + offset;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = code[..start].matches('\n').count() + 1;
        let last = code[..close].matches('\n').count() + 1;
        found.push((name, first, last - first + 1));
    }
    found
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "tests" | "node_modules") {
                rust_files(&path, files);
            }
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
}

#[test]
fn no_function_is_longer_than_a_screen_without_a_reason() {
    let root = repository().canonicalize().unwrap();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 100, "only {} Rust files found", files.len());
    let mut too_long = Vec::new();
    let mut listed_and_long = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let source = std::fs::read_to_string(&file).unwrap();
        for (name, line, lines) in functions(&source) {
            if lines <= LINES_MAX {
                continue;
            }
            let listed = LONG_ON_PURPOSE
                .iter()
                .any(|(path, function, _)| *path == relative && *function == name);
            if listed {
                listed_and_long.push((relative.clone(), name));
            } else {
                too_long.push(format!("{relative}:{line}: fn {name} spans {lines} lines"));
            }
        }
    }
    assert!(
        too_long.is_empty(),
        "functions over {LINES_MAX} lines (split them, or list them with a reason):\n{}",
        too_long.join("\n")
    );
    for (path, function, why) in LONG_ON_PURPOSE {
        assert!(!why.is_empty());
        assert!(
            listed_and_long
                .iter()
                .any(|(listed_path, name)| listed_path == path && name == function),
            "{path}: fn {function} is listed as long but is not over {LINES_MAX} lines (or is gone): drop it from the list"
        );
    }
}

#[test]
fn the_length_scanner_measures_bodies_not_text() {
    let source = "fn short() {\n    let sql = \"}{ {{\";\n    let c = '{';\n    // }\n}\n\
                  fn declared();\n\
                  fn long<'a>(x: &'a str) -> &'a str {\n    /* { */\n    let r = r#\"}\"#;\n    x\n}\n";
    let found = functions(source);
    assert_eq!(
        found,
        vec![("short".to_string(), 1, 5), ("long".to_string(), 7, 5)]
    );
}
