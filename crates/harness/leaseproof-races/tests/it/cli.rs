//! The CLI's side of the races: `leaseproof race` arguments, exit codes, and
//! the short race of `leaseproof verify`.
//!
//! Goal: the CLI reports the checker's verdict honestly. Method: parse
//! [`RaceArgs`] through clap as the binary does, run races on a fresh test
//! database with tasks and with processes, and one that cannot be real (a
//! single worker). Invariant: success only for a clean AND real race.

use std::process::ExitCode;

use clap::Parser;
use leaseproof_races::{run_race_with, verify_race, RaceArgs, WorkerLauncher};

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    race: RaceArgs,
}

fn parse(args: &[&str]) -> RaceArgs {
    Cli::try_parse_from(std::iter::once("leaseproof-race").chain(args.iter().copied()))
        .unwrap()
        .race
}

#[test]
fn race_arguments_parse_with_defaults() {
    let defaults = parse(&[]);
    assert_eq!(defaults.workers, 8);
    assert_eq!(defaults.rounds, 10);
    assert_eq!(defaults.processes, 0);
    assert_eq!(defaults.database_url, None);
    let given = parse(&[
        "--workers",
        "3",
        "--rounds",
        "5",
        "--processes",
        "4",
        "--database-url",
        "postgres://h/db",
    ]);
    assert_eq!(given.workers, 3);
    assert_eq!(given.rounds, 5);
    assert_eq!(given.processes, 4);
    assert_eq!(given.database_url.as_deref(), Some("postgres://h/db"));
    // Processes replace tasks: one worker per process, two connections each.
    let config = given.race_config();
    assert_eq!(config.workers, 4);
    assert_eq!(config.pool_size(), 2);
    assert!(Cli::try_parse_from(["leaseproof-race", "--workers", "many"]).is_err());
    for bad in [
        ["--workers", "0"],
        ["--workers", "257"],
        ["--rounds", "0"],
        ["--processes", "1"],
        ["--processes", "1000000"],
        ["--ttl-ms", "0"],
        ["--ttl-ms", "-5"],
    ] {
        let error = Cli::try_parse_from(std::iter::once("leaseproof-race").chain(bad))
            .expect_err(&format!("{bad:?} must be refused"));
        let text = error.to_string();
        assert!(text.contains(bad[0]), "{bad:?}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_command_succeeds_on_a_clean_real_race() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("race.jsonl");
    let args = parse(&[
        "--workers",
        "4",
        "--rounds",
        "4",
        "--database-url",
        &database.url,
        "--history",
        path.to_str().unwrap(),
    ]);
    assert_eq!(run_race_with(args, None).await, ExitCode::SUCCESS);
    // The judged history, in the format `leaseproof check` reads: it passes
    // again when read back, guarded rows and all.
    let history = leaseproof_history::History::load(&path).unwrap();
    assert_eq!(history.guarded_rows.len(), 4 * 4 * 2);
    let report = leaseproof_history::check(&history, &Default::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.commits, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_command_with_processes_succeeds() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let args = parse(&[
        "--processes",
        "4",
        "--rounds",
        "4",
        "--database-url",
        &database.url,
    ]);
    let launcher = WorkerLauncher::test_entry("processes::process_race_worker_entry").unwrap();
    assert_eq!(run_race_with(args, Some(launcher)).await, ExitCode::SUCCESS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_command_fails_when_the_race_cannot_be_real() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    // One worker never loses and never is taken over: a vacuous pass is a
    // failure. The CLI refuses `--workers 1` before anything runs; the
    // library behind it still judges such a race vacuous.
    assert!(Cli::try_parse_from(["leaseproof-race", "--workers", "1"]).is_err());
    let mut args = parse(&["--rounds", "2", "--database-url", &database.url]);
    args.workers = 1;
    assert_eq!(run_race_with(args, None).await, ExitCode::FAILURE);
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
async fn race_with_a_lock_manager_judges_it_through_its_public_api() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    for lock in ["advisory", "lease"] {
        let args = parse(&[
            "--lock",
            lock,
            "--workers",
            "6",
            "--rounds",
            "4",
            "--database-url",
            &database.url,
        ]);
        assert_eq!(args.lock.as_deref(), Some(lock));
        assert_eq!(run_race_with(args, None).await, ExitCode::SUCCESS, "{lock}");
    }
    assert!(Cli::try_parse_from(["leaseproof-race", "--lock", "zookeeper"]).is_err());
}
