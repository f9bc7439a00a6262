//! A history file's timeline, as `leaseproof check --html` writes it, opened
//! in a real browser.
//!
//! Goal: a user who records a history with their own program and asks for
//! the picture gets a working page. Method: the built binary checks the
//! documentation's failing example with `--html` and `--json`; headless
//! Chromium loads the page (console captured) and every event and row each
//! violation names in the JSON verdict must have its mark on the page.
//! Invariant: no console output; the evidence the checker cites is drawn.

use std::process::{Command, Stdio};

use leaseproof_history::{CheckDocument, Document as _};

use super::repository;

#[path = "../../../leaseproof-sim/tests/it/browser.rs"]
mod browser;

#[test]
fn a_failing_history_files_timeline_opens_in_a_browser_with_its_evidence_marked() {
    let Some(chromium) = browser::chromium_or_skip("the history file's timeline") else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let page = directory.path().join("broken.html");
    let verdict = directory.path().join("broken.json");
    let status = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .args(["check", "examples/histories/broken.jsonl", "--html"])
        .arg(&page)
        .arg("--json")
        .arg(&verdict)
        .current_dir(repository())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "the example is a failing history");
    let document = CheckDocument::from_json(&std::fs::read_to_string(&verdict).unwrap()).unwrap();
    browser::assert_failing_timeline(&chromium, &page, &document.report.violations);
}
