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
