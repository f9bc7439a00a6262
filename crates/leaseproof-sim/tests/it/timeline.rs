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

use std::path::{Path, PathBuf};
use std::process::Command;

use leaseproof_sim::{run, RunOptions, RunOutcome, Scenario};

fn chromium() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("LEASEPROOF_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Chromium's flags for a page on disk, as root in a container.
fn headless(chromium: &Path) -> Command {
    let mut command = Command::new(chromium);
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=3000",
    ]);
    command
}

/// The page's DOM after its scripts ran, and the console lines Chromium logged.
fn open(chromium: &Path, page: &Path) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    let output = headless(chromium)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(output.status.success(), "chromium failed: {output:?}");
    let console = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        console,
    )
}

fn screenshot(chromium: &Path, page: &Path, png: &Path) {
    let profile = tempfile::tempdir().unwrap();
    let status = headless(chromium)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--window-size=1640,900")
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium")
        .status;
    assert!(status.success());
    assert!(
        std::fs::metadata(png).unwrap().len() > 1_000,
        "an empty screenshot"
    );
}

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
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var("LEASEPROOF_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "LEASEPROOF_REQUIRE_CHROMIUM=1 but no chromium on PATH"
        );
        eprintln!("LEASEPROOF SKIP: no chromium on PATH for the timeline browser test");
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
    let (dom, console) = open(&chromium, &page);
    assert!(
        console.is_empty(),
        "console output on the failing page: {console:?}"
    );
    assert!(
        dom.contains("class=\"verdict fail\""),
        "the verdict is shown"
    );
    assert!(dom.contains(" violation\""), "the evidence is marked");
    assert!(
        dom.contains("class=\"violation-item\""),
        "the violations are listed"
    );
    for violation in &failing.report.violations {
        for event in &violation.events {
            assert!(
                dom.contains(&format!("id=\"ev-{event}\"")),
                "event {event} has no mark"
            );
        }
        for row in &violation.rows {
            assert!(
                dom.contains(&format!("id=\"row-{row}\"")),
                "row {row} has no mark"
            );
        }
    }
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
