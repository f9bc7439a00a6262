//! A lease written outside leaseproof (`examples/foreign-lease/design.rs`),
//! raced and judged through the public drivers.
//!
//! Goal: the harness judges any lock behind `LeasePort` + `RaceSubject`, not
//! only the reference. Method: eight tasks race the foreign lease; worker 0
//! pauses after its writes, before `COMMIT`, for three TTLs; every worker's
//! clock is offset and drifting. Invariant: the
//! correct fence (`FOR UPDATE`) leaves a clean history; a fence that only
//! checks (no row lock) lets the paused rows commit under a rival's grant,
//! and the checker convicts it from the rows' commit times (I3).

#[path = "../../../../examples/foreign-lease/design.rs"]
#[allow(dead_code, reason = "the example's design, shared with its binary")]
mod design;

use std::time::Duration;

use design::{Fence, ForeignLease};
use leaseproof_history::Invariant;
use leaseproof_protocol::CyclePoint;
use leaseproof_races::hooks::PauseOnce;
use leaseproof_races::race::{connect_pool, task_race_on, RaceOutcome};
use leaseproof_races::RaceConfig;
use leaseproof_worker::Step;

async fn race(url: &str, fence: Fence) -> RaceOutcome {
    // The workers' own clocks are skewed too (a minute, ±25 %): this design
    // compares times on the server only, so skew changes beliefs, not grants.
    let config = RaceConfig {
        clock_offset_ms_max: 60_000,
        clock_drift_ppm_max: 250_000,
        ..RaceConfig::default()
    };
    let pool = connect_pool(
        url,
        config.pool_size(),
        Duration::from_millis(config.acquire_timeout_ms),
    )
    .await
    .unwrap();
    let subject = ForeignLease::new(pool, fence);
    let pause = Duration::from_millis(3 * config.ttl_ms as u64);
    task_race_on(&subject, &config, |worker| match worker {
        0 => PauseOnce::inside_cycle(CyclePoint::Written, pause),
        _ => PauseOnce::never(),
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_lease_with_a_locking_fence_passes() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let outcome = race(&database.url, Fence::ForUpdate).await;
    assert!(outcome.report.is_ok(), "{}", outcome.report);
    assert_eq!(outcome.realness_problems(), Vec::<String>::new());
    assert!(outcome.report.stats.takeovers >= 1, "{}", outcome.report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_lease_whose_fence_takes_no_lock_is_caught() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let outcome = race(&database.url, Fence::CheckOnly).await;
    let stale = outcome.report.violations_of(Invariant::FencedWrites);
    assert!(
        stale
            .iter()
            .any(|violation| violation.message.contains("committed out of token order")),
        "{}",
        outcome.report
    );
    // Grants stay exclusive: only the fence is broken.
    assert!(outcome
        .report
        .violations_of(Invariant::MutualExclusion)
        .is_empty());
}

#[path = "../../../../examples/foreign-lease/app_clock.rs"]
mod app_clock;

/// Eight workers race the app-clock lock (ShedLock style; no fence, so the
/// workers run unfenced), their clocks offset by up to `offset_ms_max`.
/// Workers hold for ~100 ms (two cycles of 50 ms work); the upper half
/// (the clocks ahead, when skewed) joins 300 ms late, while the others hold.
async fn app_clock_race(url: &str, offset_ms_max: i64) -> RaceOutcome {
    let config = RaceConfig {
        ttl_ms: 500,
        work_ms: 50,
        rounds: 4,
        unfenced: true,
        clock_offset_ms_max: offset_ms_max,
        ..RaceConfig::default()
    };
    let pool = connect_pool(
        url,
        config.pool_size(),
        Duration::from_millis(config.acquire_timeout_ms),
    )
    .await
    .unwrap();
    let subject = app_clock::AppClockLock::new(pool);
    let workers = config.workers;
    task_race_on(&subject, &config, |worker| {
        if worker >= workers / 2 {
            PauseOnce::at(Step::Acquire, Duration::from_millis(300))
        } else {
            PauseOnce::never()
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_clock_lock_with_synchronised_clocks_passes() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let outcome = app_clock_race(&database.url, 0).await;
    assert!(outcome.report.is_ok(), "{}", outcome.report);
    // Judged as a lock without server times, and the race was real.
    assert!(outcome.report.stats.grants >= 8, "{}", outcome.report);
    let holders: std::collections::BTreeSet<&str> = outcome
        .history
        .guarded_rows
        .iter()
        .map(|row| row.owner.as_str())
        .collect();
    assert!(holders.len() >= 2, "{holders:?}");
    assert!(outcome.totals().held > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_clock_lock_under_clock_skew_grants_twice_and_is_caught() {
    // Clocks a second apart, a 500 ms TTL: a worker whose clock runs ahead
    // finds a live lock expired and takes it. The checker proves the double
    // hold in real time, without trusting either client's timestamps.
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let outcome = app_clock_race(&database.url, 1_000).await;
    let report = &outcome.report;
    assert!(
        report
            .violations_of(Invariant::MutualExclusion)
            .iter()
            .any(|violation| violation.message.contains("certainly held")),
        "{report}"
    );
    // Only what follows from two holders: I1, their stale rows, their beliefs.
    for violation in &report.violations {
        assert!(
            matches!(
                violation.invariant,
                Invariant::MutualExclusion | Invariant::FencedWrites | Invariant::BeliefOverlap
            ),
            "{violation}"
        );
    }
}
