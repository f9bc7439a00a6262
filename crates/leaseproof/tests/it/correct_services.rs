//! Soundness by generation: histories that correct lease and lock services
//! could record, drawn per seed by `tests/history_fuzz.py` (a discrete-event
//! model of one store and its clients: lost requests and replies, retries,
//! pauses, crashes, queueing behind row locks, coarse and tied stamps, both
//! grant stamps, both forms), are never convicted by `leaseproof check`; the
//! same histories with one real violation planted always are.
//!
//! Method: the generator runs the binary users run, one file per seed, and
//! exits non-zero naming the seed of any history judged otherwise (`--emit
//! SEED` replays it). The seeds are fixed here; `ci/nightly.sh` sweeps wider.

use std::process::Command;

use super::python_recorder::python3;
use super::repository;

fn sweep(extra: &[&str]) -> String {
    let Some(python) = python3() else {
        return String::new();
    };
    let output = Command::new(python)
        .arg(repository().join("crates/leaseproof/tests/history_fuzz.py"))
        .args(["--binary", env!("CARGO_BIN_EXE_leaseproof")])
        .args(extra)
        .output()
        .expect("run the generator");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn histories_of_correct_services_are_never_convicted() {
    let summary = sweep(&["--seeds", "0..200"]);
    assert!(
        summary.is_empty() || summary.contains("200 histories"),
        "{summary}"
    );
}

#[test]
fn a_violation_planted_in_such_a_history_is_always_convicted() {
    let summary = sweep(&["--plant", "--seeds", "0..100"]);
    assert!(
        summary.is_empty() || summary.contains("100 histories"),
        "{summary}"
    );
}
