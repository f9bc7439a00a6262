//! leaseproof-sim's integration tests: one binary, a module per topic.
//!
//! Seeds: every scenario sweeps the fixed window `0..200` by default
//! (`LEASEPROOF_SEEDS=n` sweeps `0..n`, `LEASEPROOF_SEEDS=a..b` sweeps `a..b`,
//! `LEASEPROOF_SEED=s` runs the one seed `s`), and the safety sweeps also run
//! a *moving* window: 100 seeds from a base derived from the commit under
//! test, so every commit looks somewhere new (200 fixed seeds per scenario
//! missed the delayed-retry bug 3,000 found). A failure prints its replay line;
//! the window is printed on stderr (`LEASEPROOF SEED WINDOW …`) and set by
//! hand with `LEASEPROOF_SEED_BASE=b`; `LEASEPROOF_SEED_WINDOW=n` changes its
//! size, `0` turns it off.
mod advisory;
mod browser;
mod determinism;
mod fence_lock;
mod locks;
mod regressions;
mod scenarios;
mod sweeps;
mod teeth;
mod tidy;
mod timeline;

use std::ops::Range;

/// The fixed seeds the sweeps run, from the environment (see the module docs).
pub fn seeds() -> Range<u64> {
    if let Ok(seed) = std::env::var("LEASEPROOF_SEED") {
        let seed: u64 = seed.parse().expect("LEASEPROOF_SEED is a number");
        return seed..seed + 1;
    }
    let Ok(text) = std::env::var("LEASEPROOF_SEEDS") else {
        return 0..200;
    };
    match text.split_once("..") {
        Some((start, end)) => {
            let start: u64 = start.parse().expect("LEASEPROOF_SEEDS is a..b");
            let end: u64 = end.parse().expect("LEASEPROOF_SEEDS is a..b");
            assert!(start < end, "LEASEPROOF_SEEDS={text} is empty");
            start..end
        }
        None => 0..text.parse().expect("LEASEPROOF_SEEDS is a number or a..b"),
    }
}

/// The moving window of this commit, `None` when turned off (or when one
/// seed was asked for). Printed once on stderr, past the test capture.
pub fn moving_seeds() -> Option<Range<u64>> {
    static WINDOW: std::sync::OnceLock<Option<Range<u64>>> = std::sync::OnceLock::new();
    WINDOW.get_or_init(moving_window).clone()
}

fn moving_window() -> Option<Range<u64>> {
    if std::env::var_os("LEASEPROOF_SEED").is_some() {
        return None;
    }
    let count: u64 = std::env::var("LEASEPROOF_SEED_WINDOW").map_or(100, |text| {
        text.parse().expect("LEASEPROOF_SEED_WINDOW is a number")
    });
    if count == 0 {
        return None;
    }
    let (base, source) = match std::env::var("LEASEPROOF_SEED_BASE") {
        Ok(text) => (
            text.parse().expect("LEASEPROOF_SEED_BASE is a number"),
            "LEASEPROOF_SEED_BASE".to_string(),
        ),
        Err(_) => {
            let commit = commit_under_test();
            (
                leaseproof_sim::seed_window_base(&commit),
                format!("commit {commit}"),
            )
        }
    };
    let window = base..base + count;
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "LEASEPROOF SEED WINDOW: seeds {}..{} from {source}; rerun: LEASEPROOF_SEED_BASE={base} cargo test -p leaseproof-sim, or cargo run --release -- sim all --seeds {}..{}",
        window.start, window.end, window.start, window.end
    );
    Some(window)
}

/// The commit the tests run on (`git rev-parse HEAD`), or `"unknown"` outside
/// a git checkout — the window is then still fixed and printed.
fn commit_under_test() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}
