//! Goal: `leaseproof replay` reproduces a failing seed and writes its whole
//! trace. Method: find the first failing unfenced gc-pause seed by sweeping,
//! replay it with the binary as a user does, and compare the file with a
//! fresh traced run.

use std::process::Command;

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
    let history_path = directory.path().join("replay.jsonl");
    let seed = failure.seed.to_string();
    let history_arg = history_path.to_string_lossy().into_owned();
    let code = replay(
        &[
            "gc-pause",
            "--seed",
            &seed,
            "--unfenced",
            "--history",
            &history_arg,
        ],
        &path,
    );
    assert_eq!(code, Some(1), "the replayed seed fails again");
    // The history file, judged on its own (as `leaseproof check --unfenced-worker`
    // would), shows the same violation: the format carries everything.
    let history = leaseproof_history::History::load(&history_path).expect("the history file");
    let unfenced_workers = history
        .events
        .iter()
        .map(|event| event.worker.clone())
        .collect();
    let report = leaseproof_history::check(
        &history,
        &leaseproof_history::CheckConfig {
            unfenced_workers,
            ..Default::default()
        },
    );
    let mut invariants: Vec<_> = report
        .violations
        .iter()
        .map(|violation| violation.invariant)
        .collect();
    invariants.sort();
    invariants.dedup();
    assert_eq!(invariants, failure.invariants, "{report}");
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
            ..RunOptions::default()
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
    let code = replay(&["partition", "--seed", "3"], &path);
    assert_eq!(code, Some(0));
    let written = std::fs::read_to_string(&path).expect("replay wrote the trace");
    assert!(written.contains("verdict: 0 violation(s)"));
}

/// Runs `leaseproof replay` with `args`, writing the trace to `out`; its
/// exit code.
fn replay(args: &[&str], out: &std::path::Path) -> Option<i32> {
    Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .arg("replay")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .current_dir(super::repository())
        .status()
        .expect("run leaseproof replay")
        .code()
}

/// Runs the printed replay line (its words after `replay`) with the binary.
fn run_replay_line(line: &str, out: std::path::PathBuf) -> Option<i32> {
    let (_, rest) = line.split_once(" replay ").expect("a replay line");
    let words: Vec<&str> = rest.split_whitespace().collect();
    replay(&words, &out)
}

#[test]
fn replay_line_of_a_run_without_the_schema_retry_reproduces_it() {
    let scenario = Scenario::load("concurrent-schema").expect("concurrent-schema loads");
    let directory = tempfile::tempdir().expect("a temp dir");
    // With the retry, seed 0 passes: the flag is what makes it fail.
    let fenced = run(&scenario, 0, RunOptions::default());
    assert!(fenced.is_ok(), "{:?}", fenced.first_problem());
    assert!(!fenced.replay_command().contains("--no-schema-retry"));

    let without_retry = run(
        &scenario,
        0,
        RunOptions {
            no_schema_retry: true,
            ..RunOptions::default()
        },
    );
    assert!(!without_retry.is_ok(), "the schema race is caught");
    let line = without_retry.replay_command();
    assert_eq!(
        line,
        "cargo run --release -- replay concurrent-schema --seed 0 --no-schema-retry"
    );
    // `leaseproof sim --no-schema-retry` turns the retry off in the scenario
    // itself: its replay line carries the flag all the same.
    let mut edited = scenario.clone();
    edited.schema_retry = false;
    assert_eq!(
        run(&edited, 0, RunOptions::default()).replay_command(),
        line
    );

    let code = run_replay_line(&line, directory.path().join("schema.trace"));
    assert_eq!(code, Some(1), "the printed line reproduces the failure");
    let code = run_replay_line(&fenced.replay_command(), directory.path().join("ok.trace"));
    assert_eq!(code, Some(0));
}

/// The trace is the replay's evidence: it must show every server
/// incarnation (numbered as they start) and every grant the server made.
#[test]
fn the_trace_shows_each_server_incarnation_and_every_grant_the_server_made() {
    use leaseproof_history::{EventKind, OpResult, Outcome};
    use leaseproof_sim::{FaultEvent, FaultPlan};
    let scenario = Scenario::load("chaos").unwrap();
    let crashes = |seed: u64| {
        FaultPlan::draw(&scenario, seed)
            .schedule
            .iter()
            .filter(|(_, event)| matches!(event, FaultEvent::CrashDb))
            .count()
    };
    let seed = (0..100)
        .find(|&seed| crashes(seed) >= 1)
        .expect("a chaos seed below 100 crashes the database");
    let outcome = run(
        &scenario,
        seed,
        RunOptions {
            trace: true,
            ..RunOptions::default()
        },
    );
    let trace = outcome.trace.join("\n");
    for incarnation in 1..=crashes(seed) + 1 {
        assert!(
            trace.contains(&format!("db: server incarnation {incarnation} starts")),
            "seed {seed}: incarnation {incarnation} missing"
        );
    }
    assert!(!trace.contains(&format!(
        "db: server incarnation {} starts",
        crashes(seed) + 2
    )));
    // Every token a worker was granted appears in a server line granting it.
    let mut tokens = std::collections::BTreeSet::new();
    for event in &outcome.history.events {
        if let EventKind::Complete {
            outcome:
                Outcome::Ok {
                    result: OpResult::Lease { token, .. },
                },
            ..
        } = &event.kind
        {
            tokens.insert(*token);
        }
    }
    assert!(tokens.len() >= 2, "seed {seed}: a takeover happened");
    for token in tokens {
        let granting = format!(" token #{token} until");
        assert!(
            trace
                .lines()
                .any(|line| line.contains("=> GRANTED") && line.contains(&granting)),
            "seed {seed}: no server line grants token {token}"
        );
    }
}

/// Concurrent schema creation in the trace: every session that lost the
/// race says once that it waited for the creator, then got the 23505.
#[test]
fn the_trace_shows_each_schema_racer_waiting_once_before_its_23505() {
    let scenario = Scenario::load("concurrent-schema").unwrap();
    let outcome = run(
        &scenario,
        0,
        RunOptions {
            trace: true,
            ..RunOptions::default()
        },
    );
    let count = |needle: &str| {
        outcome
            .trace
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    };
    let raced = count("CREATE TABLE IF NOT EXISTS => 23505");
    assert!(raced >= 1, "seed 0 of concurrent-schema races the creation");
    assert_eq!(count("CREATE TABLE IF NOT EXISTS waits for s"), raced);
    assert_eq!(count("CREATE TABLE IF NOT EXISTS creates the table"), 1);
}
