//! Goal: a run is a pure function of (scenario, seed). Method: trace the
//! same seed twice (in this process and in a child process) and compare byte
//! for byte; different seeds must differ.

use leaseproof_sim::{run, RunOptions, Scenario};

const CHILD_ENV: &str = "LEASEPROOF_SIM_TRACE_CHILD";

fn chaos_trace(seed: u64) -> String {
    let scenario = Scenario::load("chaos").expect("chaos loads");
    let options = RunOptions {
        unfenced: false,
        trace: true,
        ..RunOptions::default()
    };
    run(&scenario, seed, options).trace.join("\n")
}

#[test]
fn same_seed_gives_a_byte_identical_trace() {
    let first = chaos_trace(7);
    let second = chaos_trace(7);
    assert!(
        first.starts_with("SEED=7 scenario=chaos"),
        "{}",
        &first[..80]
    );
    assert!(
        first.lines().count() > 1_000,
        "the trace is too short to mean anything"
    );
    assert!(first == second, "two runs of seed 7 differ");
}

#[test]
fn different_seeds_give_different_traces() {
    let seven = chaos_trace(7);
    let eight = chaos_trace(8);
    assert_ne!(seven, eight);
    // Not just the SEED line: the bodies differ too.
    assert_ne!(
        seven.lines().skip(10).collect::<Vec<_>>(),
        eight.lines().skip(10).collect::<Vec<_>>()
    );
}

#[test]
fn trace_is_identical_across_processes() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        // We are the child: write the trace for the parent to compare.
        std::fs::write(path, chaos_trace(11)).expect("the child writes its trace");
        return;
    }
    let directory = tempfile::tempdir().expect("a temp dir");
    let path = directory.path().join("child.trace");
    let status = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "determinism::trace_is_identical_across_processes",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .env_remove("LEASEPROOF_SEED")
        .status()
        .expect("the child runs");
    assert!(status.success());
    let child = std::fs::read_to_string(&path).expect("the child wrote its trace");
    assert!(
        child == chaos_trace(11),
        "the child process traced seed 11 differently"
    );
}

/// Two runs of `name` under `seed` trace byte for byte alike, and show
/// `marker` (the manager's own traffic); another seed traces otherwise.
fn lock_run_replays_byte_for_byte(name: &str, seed: u64, marker: &str) {
    let scenario = Scenario::load(name).expect("the scenario loads");
    let options = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let first = run(&scenario, seed, options).trace.join("\n");
    let second = run(&scenario, seed, options).trace.join("\n");
    assert!(
        first.lines().count() > 1_000,
        "the trace is too short to mean anything"
    );
    assert!(
        first.contains(marker),
        "{name} seed {seed} never shows {marker}"
    );
    assert!(first == second, "two runs of {name} seed {seed} differ");
    assert_ne!(first, run(&scenario, seed + 1, options).trace.join("\n"));
}

#[test]
fn a_redis_lock_run_replays_byte_for_byte() {
    // The manager's scripts ran on the simulated Redis.
    lock_run_replays_byte_for_byte("redis-chaos", 5, "EVALSHA");
}

#[test]
fn an_advisory_lock_run_replays_byte_for_byte() {
    // The fault plan terminated a session holding a lock.
    lock_run_replays_byte_for_byte(
        "advisory-session-kill",
        3,
        "pg_terminate_backend of the advisory lock holders {",
    );
}
