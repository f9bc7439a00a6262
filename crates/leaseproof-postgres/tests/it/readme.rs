//! The README's "Using the lease" sample is the crate's doc-test, line for
//! line: the doc-test compiles and runs it against the throwaway cluster, and
//! this test keeps the copy users read identical to the code that ran.

use std::path::Path;

/// The README's first `rust` block under "## Using the lease".
fn readme_sample() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let section = readme
        .split("## Using the lease")
        .nth(1)
        .expect("the README has a \"Using the lease\" section");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section opens with a rust block");
    block.lines().map(str::to_string).collect()
}

/// The visible lines of the crate's "Using the lease" doc-test.
fn doc_test_sample() -> Vec<String> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let docs: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect();
    let start = docs
        .iter()
        .position(|line| *line == "# Using the lease")
        .expect("the crate docs have a \"Using the lease\" section");
    let fence = start
        + docs[start..]
            .iter()
            .position(|line| *line == "```rust")
            .unwrap();
    docs[fence + 1..]
        .iter()
        .take_while(|line| **line != "```")
        .filter(|line| !(line.starts_with("# ") || **line == "#"))
        .map(|line| line.to_string())
        .collect()
}

#[test]
fn the_readme_sample_is_the_doc_test_that_runs() {
    let readme = readme_sample();
    assert!(readme.len() > 5, "{readme:?}");
    assert_eq!(readme, doc_test_sample());
}
