//! Goal: the simulation cannot read wall time, OS entropy or unordered maps.
//! Method: grep this crate's sources (except `src/wall.rs`, the stopwatch
//! for sweep speed, which decides nothing) for the banned names.

#[test]
fn simulation_sources_use_no_wall_clock_entropy_or_hash_maps() {
    let banned = [
        "Instant::now",
        "SystemTime::now",
        "thread_rng",
        "OsRng",
        "HashMap",
        "HashSet",
        "from_entropy",
    ];
    let source_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    let mut found = Vec::new();
    let mut stack = vec![source_dir];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.file_name().is_some_and(|name| name == "wall.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            checked += 1;
            for (number, line) in text.lines().enumerate() {
                for name in banned {
                    if line.contains(name) {
                        found.push(format!("{}:{}: {name}", path.display(), number + 1));
                    }
                }
            }
        }
    }
    assert!(checked >= 8, "only {checked} files checked");
    assert!(
        found.is_empty(),
        "banned in the simulation:\n{}",
        found.join("\n")
    );
}
