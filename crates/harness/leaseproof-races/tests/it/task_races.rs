//! Task races: N = 2, 8 and 32 tokio tasks racing for one scope.
//!
//! Goal: show the reference lease keeps the single-holder invariant under real
//! contention on a real server. Method: the shared worker loop as N tasks over
//! one pool, short TTLs (150 ms), many rounds of acquire → fenced commit →
//! renew → release; grants are recorded from `RETURNING` (token and server
//! times), guarded writes land in `leaseproof_guarded` through the fenced
//! commit cycle, whose rows are the ground truth. Invariant: the checker finds
//! no violation of I1–I4, and the race was real — several distinct winners,
//! takeovers, refused acquisitions (losers lost) and commits.

use leaseproof_races::{task_race, RaceConfig, RaceOutcome};

async fn race(workers: usize, rounds: u32) -> Option<RaceOutcome> {
    let database = leaseproof_pgcluster::test_database().await?;
    let outcome = task_race(&database.url, &RaceConfig::new(workers, rounds))
        .await
        .expect("the race runs");
    eprint!("{}", outcome.summary());
    Some(outcome)
}

fn assert_clean_and_real(outcome: &RaceOutcome, workers: usize, rounds: u32) {
    assert!(outcome.report.is_ok(), "{}", outcome.report);
    let problems = outcome.realness_problems();
    assert!(problems.is_empty(), "the race was vacuous: {problems:?}");
    let totals = outcome.totals();
    // Every worker finished its rounds: the race ended by work, not by the bound.
    let rounds_total = u32::try_from(workers).unwrap() * rounds;
    assert_eq!(totals.commits, rounds_total);
    assert_eq!(outcome.report.stats.commits, u64::from(rounds_total));
    assert_eq!(totals.unknown, 0, "no fault was injected");
    assert_eq!(totals.errors, 0, "no fault was injected");
    // Every committed cycle is whole in the table, nothing more.
    let items = RaceConfig::default().items_per_cycle;
    assert_eq!(
        outcome.history.guarded_rows.len(),
        usize::try_from(rounds_total * items).unwrap()
    );
    assert!(outcome.report.stats.distinct_holders >= 2);
    assert!(outcome.report.stats.takeovers > 0);
    assert!(totals.held > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_racing_keep_a_single_holder() {
    let Some(outcome) = race(2, 24).await else {
        return;
    };
    assert_clean_and_real(&outcome, 2, 24);
    assert_eq!(outcome.report.stats.distinct_holders, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_racing_keep_a_single_holder() {
    let Some(outcome) = race(8, 10).await else {
        return;
    };
    assert_clean_and_real(&outcome, 8, 10);
    assert!(outcome.report.stats.distinct_holders >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_racing_keep_a_single_holder() {
    let Some(outcome) = race(32, 6).await else {
        return;
    };
    assert_clean_and_real(&outcome, 32, 6);
    assert!(outcome.report.stats.distinct_holders >= 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_worker_clocks_change_beliefs_not_the_verdict() {
    // Offsets of up to a minute and drifts of ±25 % on every worker's own
    // clock: the lease compares times only on the server, so the race stays
    // clean; the clocks really were skewed (the history's local times say so).
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let config = RaceConfig {
        clock_offset_ms_max: 60_000,
        clock_drift_ppm_max: 250_000,
        ..RaceConfig::new(8, 6)
    };
    let outcome = task_race(&database.url, &config)
        .await
        .expect("the race runs");
    eprint!("{}", outcome.summary());
    assert_clean_and_real(&outcome, 8, 6);
    let skews_ms: std::collections::BTreeSet<i64> = outcome
        .history
        .events
        .iter()
        .map(|event| (event.local_time_us - event.true_time_us) / 60_000_000)
        .collect();
    assert!(
        skews_ms.contains(&-1) && skews_ms.contains(&1),
        "local clocks a minute behind and ahead: {skews_ms:?}"
    );
    assert_eq!(config.clock_skew(0).offset_us, -60_000_000);
    assert_eq!(config.clock_skew(7).offset_us, 60_000_000);
    assert_eq!(config.clock_skew(0).drift_ppm, -250_000);
    assert_eq!(config.clock_skew(1).drift_ppm, 250_000);
}

/// Eight tasks committing under each of the library's other fences: the
/// shared fence (`FOR SHARE` in the commit cycle) and the single-statement
/// guarded insert keep the same verdict as `FOR UPDATE`.
async fn race_under(fence: leaseproof_races::RaceFence) {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let config = RaceConfig {
        fence,
        ..RaceConfig::new(8, 10)
    };
    let outcome = task_race(&database.url, &config)
        .await
        .expect("the race runs");
    eprint!("{fence:?}: {}", outcome.summary());
    assert_clean_and_real(&outcome, 8, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_under_the_shared_fence_keep_a_single_holder() {
    race_under(leaseproof_races::RaceFence::ForShare).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_under_the_single_statement_guarded_insert_keep_a_single_holder() {
    race_under(leaseproof_races::RaceFence::SingleStatement).await;
}

/// Eight tasks acquiring through each of the library's acquisition paths:
/// the one statement every time, and the read-only check first every time.
/// (`after-refusal`, the default, is what every other race here runs.) The
/// read changes what a loser costs, never the verdict.
async fn race_reading_first(read_first: leaseproof_races::RaceReadFirst) {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let config = RaceConfig {
        read_first,
        ..RaceConfig::new(8, 10)
    };
    let outcome = task_race(&database.url, &config)
        .await
        .expect("the race runs");
    eprint!("{read_first:?}: {}", outcome.summary());
    assert_clean_and_real(&outcome, 8, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_reading_first_every_time_keep_a_single_holder() {
    race_reading_first(leaseproof_races::RaceReadFirst::Always).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_sending_the_one_statement_every_time_keep_a_single_holder() {
    race_reading_first(leaseproof_races::RaceReadFirst::Never).await;
}
