//! The timeline picture of a run, opened in a real browser.
//!
//! Goal: the HTML a failing seed produces is a working page — it loads in
//! headless Chromium without a console error, marks the violation's
//! evidence, and links every event the checker names; a clean run's page
//! marks nothing. Method: run a failing seed (unfenced `gc-pause`) and a
//! clean one, write `RunOutcome::timeline_html`, and have Chromium
//! `--dump-dom` each page after its script ran, with console logging on; a
//! page that throws on purpose shows the console capture works (negative
//! control). Screenshots go to the test's temp dir (or
//! `LEASEPROOF_SCREENSHOT_DIR`). Without Chromium the test prints a loud
//! skip line; `LEASEPROOF_REQUIRE_CHROMIUM=1` (CI) makes that a failure.
//! Invariant: no console error; every violation's events have an element.

use std::path::PathBuf;

use leaseproof_sim::{run, RunOptions, RunOutcome, Scenario};

use crate::browser::{assert_failing_timeline, chromium_or_skip, open, screenshot};

fn first_failing_unfenced_seed(scenario: &Scenario) -> RunOutcome {
    let options = RunOptions {
        unfenced: true,
        trace: true,
        ..RunOptions::default()
    };
    (0..100)
        .map(|seed| run(scenario, seed, options))
        .find(|outcome| !outcome.report.violations.is_empty())
        .expect("an unfenced gc-pause seed in 0..100 fails")
}

#[test]
fn a_failing_seeds_timeline_loads_in_a_browser_and_marks_its_evidence() {
    let Some(chromium) = chromium_or_skip("the timeline browser test") else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("LEASEPROOF_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| directory.path().to_path_buf());
    let scenario = Scenario::embedded("gc-pause").unwrap();

    // Negative control: the console capture sees an error when there is one.
    let broken = directory.path().join("broken.html");
    std::fs::write(
        &broken,
        "<!DOCTYPE html><html><body><script>throw new Error('leaseproof-probe');</script></body></html>",
    )
    .unwrap();
    let (_, console) = open(&chromium, &broken);
    assert!(
        console.iter().any(|line| line.contains("leaseproof-probe")),
        "the console capture missed a thrown error: {console:?}"
    );

    let failing = first_failing_unfenced_seed(&scenario);
    let page = directory.path().join("failing.html");
    std::fs::write(&page, failing.timeline_html()).unwrap();
    let dom = assert_failing_timeline(&chromium, &page, &failing.report.violations);
    assert!(
        dom.contains("class=\"fault\""),
        "the injected pauses are drawn"
    );
    assert!(dom.contains("<title>"), "every mark carries its record");
    screenshot(&chromium, &page, &shots.join("timeline-failing.png"));

    let clean = run(
        &scenario,
        0,
        RunOptions {
            trace: true,
            ..RunOptions::default()
        },
    );
    assert!(clean.is_ok(), "gc-pause seed 0 is clean");
    let page = directory.path().join("clean.html");
    std::fs::write(&page, clean.timeline_html()).unwrap();
    let (dom, console) = open(&chromium, &page);
    assert!(
        console.is_empty(),
        "console output on the clean page: {console:?}"
    );
    assert!(dom.contains("class=\"verdict pass\""));
    assert!(!dom.contains(" violation\""), "a clean run marks nothing");
    assert!(dom.contains("class=\"op ok"), "the operations are drawn");
    screenshot(&chromium, &page, &shots.join("timeline-clean.png"));
}
