//! A history recorded by a Python program with the shipped recorder
//! (`leaseproof.recorder`, `python/src/leaseproof/recorder.py`) is judged by
//! `leaseproof check`: a correct lock passes, a check-then-set lock is
//! convicted (I1), both from files written outside Rust.

use std::process::Command;

use super::repository;

/// `python3`, or `None` after the skip line (a failure under
/// `LEASEPROOF_REQUIRE_CLIENTS=1`, which CI sets).
pub(crate) fn python3() -> Option<&'static str> {
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

/// `PYTHONPATH` naming the Python package's sources, as `pip install` would.
fn package_path() -> std::path::PathBuf {
    repository().join("python/src")
}

fn record(python: &str, out: &std::path::Path, broken: bool) {
    let mut command = Command::new(python);
    command
        .env("PYTHONPATH", package_path())
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

/// A lease's history in Python: grants with server times, fenced commits and
/// the guarded table read back. Written by every helper the recorder has
/// for leases (acquire, renew, commit, release; lease, committed, released;
/// guarded_row). The holder's commit and rows land inside its grant: clean.
/// With `stale`, the holder's rows commit after a rival's under a larger
/// token — a stale write the checker must convict (I3) from the rows alone.
const LEASE_HISTORY: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
from leaseproof.recorder import Recorder as R

stale = sys.argv[3] == "stale"
h = R(design={"grant_stamps": "decision"})
S = 1_000_000_000  # server clock, µs
op = h.invoke("a", R.acquire("job", "a", 1_000_000))
h.ok("a", op, R.lease(1, "a", S, S + 1_000_000))
op = h.invoke("a", R.renew("job", "a", 1, 1_000_000))
h.ok("a", op, R.lease(1, "a", S + 100, S + 1_000_100))
op = h.invoke("a", R.commit("job", "a", 1, 1, 1))
h.ok("a", op, R.committed(S + 200))
op = h.invoke("a", R.release("job", "a", 1))
h.ok("a", op, R.released(S + 300))
op = h.invoke("b", R.acquire("job", "b", 1_000_000))
h.ok("b", op, R.lease(2, "b", S + 400, S + 1_000_400))
op = h.invoke("b", R.commit("job", "b", 2, 2, 1))
h.ok("b", op, R.committed(S + 500))
h.guarded_row(1, "job", "a", 1, 1, 0, S + 210, S + (900 if stale else 220))
h.guarded_row(2, "job", "b", 2, 2, 0, S + 510, S + 520)
h.save(sys.argv[2])
"#;

#[test]
fn a_lease_history_recorded_in_python_with_guarded_rows_is_judged() {
    let Some(python) = python3() else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    for (variant, expected) in [("clean", 0), ("stale", 1)] {
        let file = directory.path().join(format!("{variant}.jsonl"));
        let output = Command::new(python)
            .arg("-c")
            .arg(LEASE_HISTORY)
            .arg(package_path())
            .arg(&file)
            .arg(variant)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (code, said) = check(&file);
        assert_eq!(code, expected, "{variant}: {said}");
        if expected == 1 {
            assert!(said.contains("I3"), "{said}");
            assert!(!said.contains("I1"), "grants never overlapped: {said}");
        }
    }
}

/// The recorder refuses, as it is recorded, what `check` would refuse in the
/// file: a completion by another process than the invoker's, a second
/// completion, an incarnation going back, a failure of an unknown kind or
/// an error that does not say what failed.
#[test]
fn the_python_recorder_refuses_what_check_refuses_as_it_happens() {
    let Some(python) = python3() else {
        return;
    };
    let script = r#"
from leaseproof.recorder import Recorder
r = Recorder()
op = r.invoke("w1", r.acquire("s", "w1", 1000), incarnation=1)
for name, attempt in [
    ("another worker", lambda: r.ok("w2", op, r.lock())),
    ("a later incarnation", lambda: r.ok("w1", op, r.lock(), incarnation=2)),
    ("an earlier incarnation", lambda: r.invoke("w1", r.acquire("s", "w1", 1000), incarnation=0)),
    ("an error without its detail", lambda: r.fail("w1", op, "error", incarnation=1)),
    ("a kind of failure check does not know", lambda: r.fail("w1", op, "timeout", "t", incarnation=1)),
]:
    try:
        attempt()
        print(name, "accepted")
    except ValueError as error:
        print(name, "refused:", error)
r.ok("w1", op, r.lock(), incarnation=1)
try:
    r.ok("w1", op, r.lock(), incarnation=1)
    print("a second completion accepted")
except ValueError as error:
    print("a second completion refused:", error)
granted = r.invoke("w1", r.acquire("t", "w1", 1000), incarnation=1)
r.ok("w1", granted, r.lease(3, "w1", 5, 1005), incarnation=1)
try:
    r.invoke("w1", r.release("t", "w1"), incarnation=1)
    print("a release naming token 0 accepted")
except ValueError as error:
    print("a release naming token 0 refused:", error)
renewal = r.invoke("w1", r.renew("u", "w1", 0, 1000), incarnation=1)
try:
    r.ok("w1", renewal, r.lease(1, "w1", 5, 1005), incarnation=1)
    print("a token answering token 0 accepted")
except ValueError as error:
    print("a token answering token 0 refused:", error)
typo = Recorder(design={"unfenced_workers": ["W1"]})
typo.ok("w1", typo.invoke("w1", typo.acquire("s", "w1", 1000)), typo.lock())
try:
    typo.save("/dev/null")
    print("an unfenced worker without events accepted")
except ValueError as error:
    print("an unfenced worker without events refused:", error)
"#;
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .env("PYTHONPATH", package_path())
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        text.lines()
            .map(|line| line.split(':').next().unwrap())
            .collect::<Vec<_>>(),
        [
            "another worker refused",
            "a later incarnation refused",
            "an earlier incarnation refused",
            "an error without its detail refused",
            "a kind of failure check does not know refused",
            "a second completion refused",
            "a release naming token 0 refused",
            "a token answering token 0 refused",
            "an unfenced worker without events refused"
        ],
        "{text}"
    );
    assert!(
        text.contains("invoked by 'w1' incarnation 1, completed by 'w2' incarnation 0"),
        "{text}"
    );
    assert!(text.contains("incarnation 0 after 1"), "{text}");
}
