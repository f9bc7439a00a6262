//! A history recorded by a Python program with the shipped recorder
//! (`examples/recorders/python/leaseproof_history.py`) is judged by
//! `leaseproof check`: a correct lock passes, a check-then-set lock is
//! convicted (I1), both from files written outside Rust.

use std::process::Command;

use super::repository;

/// `python3`, or `None` after the skip line (a failure under
/// `LEASEPROOF_REQUIRE_CLIENTS=1`, which CI sets).
fn python3() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if found {
        return Some("python3");
    }
    assert!(
        std::env::var("LEASEPROOF_REQUIRE_CLIENTS").as_deref() != Ok("1"),
        "LEASEPROOF_REQUIRE_CLIENTS=1 but there is no python3"
    );
    eprintln!("LEASEPROOF SKIP: no python3 for the Python recorder test");
    None
}

fn record(python: &str, out: &std::path::Path, broken: bool) {
    let mut command = Command::new(python);
    command
        .arg(repository().join("examples/recorders/python/example.py"))
        .arg(out);
    if broken {
        command.arg("--broken");
    }
    let output = command.output().expect("run the example");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn check(file: &std::path::Path) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .arg("check")
        .arg(file)
        .output()
        .expect("run leaseproof");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

#[test]
fn a_history_recorded_in_python_is_judged() {
    let Some(python) = python3() else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let correct = directory.path().join("correct.jsonl");
    record(python, &correct, false);
    let (code, text) = check(&correct);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("PASS"), "{text}");
    assert!(!text.contains("distinct_holders=1 "), "a real race: {text}");

    // Threads make the broken lock's race likely, not certain: a few runs.
    let broken = directory.path().join("broken.jsonl");
    let caught = (0..5).any(|_| {
        record(python, &broken, true);
        let (code, text) = check(&broken);
        assert_ne!(code, 2, "a well-formed file: {text}");
        code == 1 && text.contains("I1 mutual exclusion")
    });
    assert!(caught, "check-then-set never caught in five runs");

    // Its timeline marks every row a violation cites (the work rows of the
    // unfenced writes, placed by their commit times) and lists lanes w0, w1, w2.
    let html = directory.path().join("broken.html");
    let output = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .arg("check")
        .arg(&broken)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let page = std::fs::read_to_string(&html).unwrap();
    let cited: Vec<&str> = stdout
        .split("(rows seq [")
        .skip(1)
        .filter_map(|rest| rest.split(']').next())
        .flat_map(|list| list.split(", "))
        .collect();
    for seq in &cited {
        assert!(
            page.contains(&format!("id=\"row-{seq}\"")),
            "row {seq} is not drawn"
        );
    }
    let lanes: Vec<usize> = ["w0 #0", "w1 #0", "w2 #0"]
        .iter()
        .map(|label| {
            page.find(label)
                .unwrap_or_else(|| panic!("no lane {label}"))
        })
        .collect();
    assert!(lanes.windows(2).all(|pair| pair[0] < pair[1]), "{lanes:?}");
}
