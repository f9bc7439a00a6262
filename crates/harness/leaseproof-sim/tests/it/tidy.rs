//! Goal: the simulation cannot read wall time, OS entropy or unordered maps.
//! Method: grep the sources of every crate that runs inside the simulation —
//! this one (except `src/wall.rs`, the stopwatch for sweep speed, which
//! decides nothing), the shared worker loop and the history checker — for
//! the banned names. The other crates are only read.

use std::path::{Path, PathBuf};

/// Names that bring wall time, OS entropy or hash-order iteration.
const BANNED: [&str; 11] = [
    "Instant::",
    "SystemTime",
    "thread_rng",
    "OsRng",
    "HashMap",
    "HashSet",
    "from_entropy",
    "rand::random",
    "RandomState",
    "getrandom",
    "std::time::Instant",
];

/// `(file, line number, banned name)` for every hit under `dir`, and the
/// number of files read.
fn banned_names_under(dir: &Path) -> (Vec<String>, usize) {
    let mut found = Vec::new();
    let mut checked = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("{} is unreadable: {error}", dir.display()));
        for entry in entries {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            if path.ends_with("leaseproof-sim/src/wall.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            checked += 1;
            for (number, line) in text.lines().enumerate() {
                for name in BANNED {
                    if line.contains(name) {
                        found.push(format!("{}:{}: {name}", path.display(), number + 1));
                    }
                }
            }
        }
    }
    (found, checked)
}

fn crate_sources(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn simulated_crates_use_no_wall_clock_entropy_or_hash_maps() {
    let mut found = Vec::new();
    for (name, files_min) in [
        ("leaseproof-sim", 8),
        ("leaseproof-worker", 1),
        ("leaseproof-history", 4),
    ] {
        let (hits, checked) = banned_names_under(&crate_sources(name));
        assert!(checked >= files_min, "{name}: only {checked} files checked");
        found.extend(hits);
    }
    assert!(
        found.is_empty(),
        "banned in the simulation:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_a_banned_name() {
    // The wall stopwatch is the one allowed use: scanning it must hit.
    let wall = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/wall.rs");
    let text = std::fs::read_to_string(wall).expect("wall.rs");
    assert!(BANNED.iter().any(|name| text.contains(name)));
}
