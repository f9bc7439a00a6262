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

#[path = "../../../harness/leaseproof-sim/tests/it/browser.rs"]
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

/// The page zooms: opened at `#t=5..15` (µs from the first event) the
/// 30 µs run is drawn three times wider, the ticks are redrawn inside the
/// window, and the evidence stays marked. Fails if the script breaks (a
/// console error), ignores the address, or stretches nothing.
#[test]
fn a_timeline_opened_at_a_window_is_zoomed_to_it() {
    let Some(chromium) = browser::chromium_or_skip("the timeline's zoom") else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let page = directory.path().join("broken.html");
    let status = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .args(["check", "examples/histories/broken.jsonl", "--html"])
        .arg(&page)
        .current_dir(repository())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let (whole, console) = browser::open(&chromium, &page);
    assert!(console.is_empty(), "{console:?}");
    assert!(
        !whole.contains("data-view="),
        "no window asked, none applied"
    );
    let (zoomed, console) = browser::open_at(&chromium, &page, "#t=5..15");
    assert!(console.is_empty(), "{console:?}");
    assert!(
        zoomed.contains("data-view=\"5..15\""),
        "the address's window is applied"
    );
    assert!(
        zoomed.contains("+5 µs to +15 µs (×3.0)"),
        "the window is named"
    );
    let width = |dom: &str| -> f64 {
        let bar = &dom[dom.find("id=\"ev-1\"").expect("the evidence is drawn")..];
        let width = &bar[bar.find("width=\"").unwrap() + 7..];
        width[..width.find('"').unwrap()].parse().unwrap()
    };
    let stretch = width(&zoomed) / width(&whole);
    assert!(
        (2.9..3.1).contains(&stretch),
        "stretched {stretch}×, not 3×"
    );
    let labels: Vec<&str> = zoomed
        .split("class=\"tick-label\"")
        .skip(1)
        .map(|tail| &tail[tail.find('>').unwrap() + 1..tail.find('<').unwrap()])
        .collect();
    assert_eq!(
        labels,
        [
            "+5 µs", "+6 µs", "+7 µs", "+8 µs", "+9 µs", "+10 µs", "+11 µs", "+12 µs", "+13 µs",
            "+14 µs", "+15 µs"
        ],
        "the ticks are redrawn for the window"
    );
    assert!(
        zoomed.contains("class=\"op ok violation\""),
        "the evidence stays marked"
    );
}
