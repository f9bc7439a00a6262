//! Goal: the replay path — the function `leaseproof replay` calls —
//! reproduces a failing seed and writes its whole trace. Method: find the
//! first failing unfenced gc-pause seed by sweeping, replay it through
//! `cli::run_replay`, and compare the file with a fresh traced run.

use std::process::ExitCode;

use leaseproof_sim::cli::{run_replay, ReplayArgs};
use leaseproof_sim::{run, sweep, RunOptions, Scenario, SweepConfig};

#[test]
fn replay_reproduces_a_failing_unfenced_seed() {
    let scenario = Scenario::load("gc-pause").expect("gc-pause loads");
    let config = SweepConfig {
        seeds: 0..50,
        shard: None,
        jobs: 1,
        unfenced: true,
    };
    let summary = sweep(&scenario, &config, &|_| {});
    let failure = summary.failures.first().expect("an unfenced seed fails");

    let directory = tempfile::tempdir().expect("a temp dir");
    let path = directory.path().join("replay.trace");
    let code = run_replay(ReplayArgs {
        scenario: "gc-pause".to_string(),
        seed: failure.seed,
        unfenced: true,
        no_schema_retry: false,
        out: Some(path.clone()),
        quiet: true,
    });
    assert_eq!(code, ExitCode::FAILURE, "the replayed seed fails again");
    let written = std::fs::read_to_string(&path).expect("replay wrote the trace");
    let first_line = written.lines().next().expect("a non-empty trace");
    assert!(
        first_line.starts_with(&format!("SEED={} scenario=gc-pause", failure.seed)),
        "{first_line}"
    );
    assert!(written.contains("PAUSE"), "the trace shows the pause");
    assert!(written.contains(failure.first_problem.split(" (events").next().unwrap_or("")));

    let outcome = run(
        &scenario,
        failure.seed,
        RunOptions {
            unfenced: true,
            trace: true,
        },
    );
    assert_eq!(written, outcome.trace.join("\n") + "\n");
    assert_eq!(
        outcome.first_problem().as_deref(),
        Some(failure.first_problem.as_str())
    );
    assert_eq!(
        outcome.replay_command(),
        format!(
            "cargo run --release -- replay gc-pause --seed {} --unfenced",
            failure.seed
        )
    );
    assert!(!outcome.trace_excerpt(30).is_empty());
}

#[test]
fn replay_of_a_passing_seed_succeeds() {
    let directory = tempfile::tempdir().expect("a temp dir");
    let path = directory.path().join("pass.trace");
    let code = run_replay(ReplayArgs {
        scenario: "partition".to_string(),
        seed: 3,
        unfenced: false,
        no_schema_retry: false,
        out: Some(path.clone()),
        quiet: true,
    });
    assert_eq!(code, ExitCode::SUCCESS);
    let written = std::fs::read_to_string(&path).expect("replay wrote the trace");
    assert!(written.contains("verdict: 0 violation(s)"));
}
