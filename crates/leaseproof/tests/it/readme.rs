//! The README's code samples are doc-tests, line for line.
//!
//! Goal: a newcomer copies code that ran. Method: each `rust` block of the
//! README named here is the visible part of a crate's doc-test (whose hidden
//! lines start throwaway servers and check what the sample did); this test
//! keeps the copy users read identical to the code that ran. Invariant: no
//! README sample drifts from its doc-test.

use super::repository;

/// The first `rust` block under the README's `## {section}`.
fn readme_sample(section: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let heading = format!("## {section}\n");
    let text = readme
        .split(heading.as_str())
        .nth(1)
        .unwrap_or_else(|| panic!("the README has a {section:?} section"));
    let block = text
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section has a rust block");
    block.lines().map(str::to_string).collect()
}

/// The visible lines of the doc-test under `# {section}` in `crate_lib`.
fn doc_test_sample(crate_lib: &str, section: &str) -> Vec<String> {
    let lib = std::fs::read_to_string(repository().join(crate_lib)).unwrap();
    let docs: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect();
    let heading = format!("# {section}");
    let start = docs
        .iter()
        .position(|line| *line == heading)
        .unwrap_or_else(|| panic!("{crate_lib} has a {section:?} section"));
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
fn the_readme_samples_are_the_doc_tests_that_run() {
    for (section, crate_lib) in [
        (
            "Using the lease",
            "crates/product/leaseproof-postgres/src/lib.rs",
        ),
        (
            "Choosing a lock manager",
            "crates/product/leaseproof-locks/src/lib.rs",
        ),
        (
            "Leader election",
            "crates/product/leaseproof-postgres/src/election.rs",
        ),
    ] {
        let readme = readme_sample(section);
        assert!(readme.len() > 5, "{section}: {readme:?}");
        assert_eq!(readme, doc_test_sample(crate_lib, section), "{section}");
    }
}
