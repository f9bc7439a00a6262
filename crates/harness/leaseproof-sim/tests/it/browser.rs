//! Headless Chromium for the timeline tests: find it, open a page on disk,
//! read its DOM after its scripts ran and the console lines it logged, take
//! a screenshot. Shared by the simulation's, the races' and the CLI's
//! timeline tests (included with `#[path]`: test support, not a crate).

#![allow(dead_code, reason = "each including test uses what it needs")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Chromium, or `None` after the loud skip line; a failure instead under
/// `LEASEPROOF_REQUIRE_CHROMIUM=1` (CI).
pub fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var("LEASEPROOF_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "LEASEPROOF_REQUIRE_CHROMIUM=1 but no chromium on PATH"
        );
        eprintln!("LEASEPROOF SKIP: no chromium on PATH for {test}");
    }
    found
}

/// Chromium from `LEASEPROOF_CHROMIUM` or `PATH`.
pub fn chromium() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("LEASEPROOF_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Chromium's flags for a page on disk, as root in a container.
pub fn headless(chromium: &Path) -> Command {
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
pub fn open(chromium: &Path, page: &Path) -> (String, Vec<String>) {
    open_at(chromium, page, "")
}

/// As [`open`], with `fragment` (`#…`) appended to the page's address.
pub fn open_at(chromium: &Path, page: &Path, fragment: &str) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    let output = headless(chromium)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}{fragment}", page.display()))
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

pub fn screenshot(chromium: &Path, page: &Path, png: &Path) {
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

/// A timeline page's DOM checked as every test checks it: no console
/// output, the verdict shown, every event and row a violation names marked.
pub fn assert_failing_timeline(
    chromium: &Path,
    page: &Path,
    violations: &[leaseproof_history::Violation],
) -> String {
    let (dom, console) = open(chromium, page);
    assert!(
        console.is_empty(),
        "console output on {}: {console:?}",
        page.display()
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
    assert!(!violations.is_empty());
    for violation in violations {
        let (events, rows) = (&violation.events, &violation.rows);
        for event in events {
            assert!(
                dom.contains(&format!("id=\"ev-{event}\"")),
                "event {event} has no mark"
            );
        }
        for row in rows {
            assert!(
                dom.contains(&format!("id=\"row-{row}\"")),
                "row {row} has no mark"
            );
        }
    }
    dom
}
