//! The races the front end runs: `leaseproof race` (tasks, processes, a lock
//! manager) and the short race of `leaseproof verify`, through the library
//! functions the binary calls.
//!
//! Goal: a race reports the checker's verdict honestly. Method: run races on
//! a fresh test database with tasks and with processes, one that cannot be
//! real (a single worker), and the lock managers' race. Invariant: a pass
//! only for a clean AND real race. (The arguments themselves are the
//! binary's: `crates/leaseproof/tests/it/misuse.rs` refuses the bad ones.)

use leaseproof_races::{
    lock_race, race_on, verify_race, LockRace, ManagerKind, RaceConfig, WorkerLauncher,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_real_race_passes_and_its_history_passes_again() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let outcome = race_on(Some(&database.url), 0, &RaceConfig::new(4, 4), None)
        .await
        .unwrap();
    let summary = outcome.summary();
    assert!(summary.passed(), "{summary}");
    // The judged history, saved in the format `leaseproof check` reads: it
    // passes again when read back, guarded rows and all.
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("race.jsonl");
    outcome.history.save(&path).unwrap();
    let history = leaseproof_history::History::load(&path).unwrap();
    assert_eq!(history.guarded_rows.len(), 4 * 4 * 2);
    let report = leaseproof_history::check(&history, &Default::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.commits, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_of_processes_passes() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let config = RaceConfig {
        pool_connections_max: 2,
        ..RaceConfig::new(4, 4)
    };
    let launcher = WorkerLauncher::test_entry("processes::process_race_worker_entry").unwrap();
    let outcome = race_on(Some(&database.url), 4, &config, Some(launcher))
        .await
        .unwrap();
    let summary = outcome.summary();
    assert!(summary.passed(), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_that_cannot_be_real_fails() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    // One worker never loses and never is taken over: a vacuous pass is a
    // failure. The binary refuses `--workers 1` before anything runs; the
    // library behind it still judges such a race vacuous.
    let outcome = race_on(Some(&database.url), 0, &RaceConfig::new(1, 2), None)
        .await
        .unwrap();
    let summary = outcome.summary();
    assert!(!summary.passed(), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_runs_a_short_clean_race() {
    if leaseproof_pgcluster::test_database().await.is_none() {
        return;
    }
    let summary = verify_race()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(summary.passed(), "{summary}");
    assert_eq!(summary.workers, 4);
    assert!(summary.report.stats.commits >= 24);
    assert!(summary.to_string().contains("verdict: PASS"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_manager_is_raced_through_its_public_api() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    for lock in [ManagerKind::Advisory, ManagerKind::Lease] {
        let race = LockRace {
            lock,
            tasks: 6,
            rounds: 4,
            ttl_ms: 150,
            database_url: Some(database.url.clone()),
            redis_url: None,
        };
        let document = lock_race(&race)
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", lock.name()));
        assert!(document.passed);
        assert_eq!(document.lock, lock.name());
        assert_eq!(document.tasks, 6);
        assert!(document.holds > 0);
    }
}
