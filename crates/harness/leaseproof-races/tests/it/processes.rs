//! Process races: the same worker loop as 4 OS processes racing for one scope.
//!
//! Goal: rule out that the task races pass only because the tasks share a pool,
//! a runtime and an address space. Method: the test re-executes its own test
//! binary once per worker (`--exact processes::process_race_worker_entry`)
//! with the worker's configuration in `LEASEPROOF_RACE_WORKER`; each process
//! opens its own pool of two connections, waits for the agreed start instant,
//! runs the shared worker loop, and writes its history as JSON lines; the
//! histories are merged and checked against the guarded table. Invariant: no
//! violation of I1–I4, and the race was real (distinct winners, takeovers,
//! refused acquisitions, commits) — every process did its rounds.

use leaseproof_races::process::run_worker_process_checked;
use leaseproof_races::{process_race, RaceConfig, WorkerLauncher, WORKER_CONFIG_ENV};

const WORKER_ENTRY: &str = "processes::process_race_worker_entry";
const PROCESSES: usize = 4;
const ROUNDS: u32 = 16;

/// The worker processes' entry point, not a test of its own: with
/// `LEASEPROOF_RACE_WORKER` unset (a normal `cargo test`) it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_race_worker_entry() {
    let Ok(config_json) = std::env::var(WORKER_CONFIG_ENV) else {
        eprintln!(
            "process_race_worker_entry: entry point of the process race's workers; \
             runs a worker only with {WORKER_CONFIG_ENV} set"
        );
        return;
    };
    let counts = run_worker_process_checked(&config_json)
        .await
        .unwrap_or_else(|error| panic!("the worker process failed: {error}"));
    assert!(counts.operations > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_racing_keep_a_single_holder() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let config = RaceConfig {
        pool_connections_max: 2,
        ..RaceConfig::new(PROCESSES, ROUNDS)
    };
    let launcher = WorkerLauncher::test_entry(WORKER_ENTRY).unwrap();
    let outcome = process_race(&database.url, PROCESSES, &config, &launcher)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    eprint!("{}", outcome.summary());
    assert!(outcome.report.is_ok(), "{}", outcome.report);
    assert!(
        outcome.realness_problems().is_empty(),
        "{:?}",
        outcome.realness_problems()
    );
    assert_eq!(outcome.summaries.len(), PROCESSES);
    for (worker, summary) in &outcome.summaries {
        assert_eq!(summary.commits, ROUNDS, "{worker} did its rounds");
        assert_eq!(summary.unknown, 0, "{worker}: no fault was injected");
    }
    // Histories of different processes, merged: every worker appears, and the
    // owners (one per process start) are distinct.
    let workers: std::collections::BTreeSet<&str> = outcome
        .history
        .events
        .iter()
        .map(|event| event.worker.as_str())
        .collect();
    assert_eq!(workers.len(), PROCESSES);
    // Held start: no process acts before the common start, so the race
    // collides by construction however each process's start-up went.
    let first_us = outcome
        .history
        .events
        .iter()
        .map(|event| event.true_time_us)
        .min();
    let start_us = leaseproof_races::process::START_DELAY_MS * 1_000;
    assert!(first_us >= Some(start_us), "{first_us:?} before {start_us}");
    assert_eq!(outcome.report.stats.distinct_holders, PROCESSES as u64);
    assert_eq!(
        outcome.history.guarded_rows.len(),
        PROCESSES * ROUNDS as usize * config.items_per_cycle as usize
    );
}
