//! Every broken variant is refuted by a short counterexample.
//!
//! Goal: show the harness has teeth: each deliberate mistake breaks the
//! property it is named for, with a pinned shortest counterexample.
//! Method: BFS that stops at the expected property's first violation.
//! Invariant: `report.as_expected()` for every variant.

use leaseproof_models::{
    check, properties, CheckConfig, LeaseModel, PropertyOutcome, Search, Variant,
};

/// Checks `variant` with 2 workers, default bounds, until its expected property fails;
/// returns the counterexample's length.
fn counterexample_steps(variant: Variant) -> usize {
    let report = check(&CheckConfig::new(LeaseModel::new(2, variant)));
    let expected = variant.expected_violation().expect("a broken variant");
    assert!(
        report.as_expected(),
        "{variant} was not refuted: {:?}",
        report.properties
    );
    let steps = report
        .counterexample
        .as_ref()
        .expect("a counterexample")
        .steps
        .len();
    assert_eq!(
        report.counterexample.as_ref().map(|trace| trace.property),
        Some(expected)
    );
    assert_eq!(
        report.outcome(expected),
        Some(PropertyOutcome::Violated { steps })
    );
    steps
}

#[test]
fn worker_clock_expiry_lets_a_clock_ahead_take_over_a_live_grant() {
    assert_eq!(counterexample_steps(Variant::WorkerClockExpiry), 6);
}

#[test]
fn read_then_write_lets_two_readers_both_win() {
    assert_eq!(counterexample_steps(Variant::ReadThenWrite), 7);
}

#[test]
fn unfenced_commit_writes_after_the_grant_expired() {
    assert_eq!(counterexample_steps(Variant::UnfencedCommit), 7);
}

#[test]
fn fence_then_write_writes_after_the_grant_expired() {
    assert_eq!(counterexample_steps(Variant::FenceThenWrite), 8);
}

#[test]
fn release_without_owner_check_frees_a_rivals_live_grant() {
    assert_eq!(counterexample_steps(Variant::NoOwnerCheck), 10);
}

#[test]
fn token_not_advanced_reissues_a_token() {
    assert_eq!(counterexample_steps(Variant::TokenNotAdvanced), 6);
}

#[test]
fn fence_owner_only_admits_a_dead_incarnations_commit() {
    assert_eq!(counterexample_steps(Variant::FenceOwnerOnly), 8);
}

#[test]
fn schema_without_retry_fails_a_worker_that_lost_the_creation_race() {
    assert_eq!(counterexample_steps(Variant::SchemaNoRetry), 4);
}

/// Exhaustive check of `variant` (2 workers, a shorter clock to stay fast).
fn exhaustive(variant: Variant) -> leaseproof_models::ModelReport {
    let mut model = LeaseModel::new(2, variant);
    model.time_ticks_max = 3;
    check(&CheckConfig {
        model,
        search: Search::Exhaustive,
    })
}

fn assert_holds(report: &leaseproof_models::ModelReport, names: &[&str]) {
    for name in names {
        assert_eq!(report.outcome(name), Some(PropertyOutcome::Holds), "{name}");
    }
}

#[test]
fn schema_without_retry_breaks_only_start_up() {
    let report = exhaustive(Variant::SchemaNoRetry);
    assert!(matches!(
        report.outcome(properties::EVERY_WORKER_STARTS),
        Some(PropertyOutcome::Violated { .. })
    ));
    assert_holds(
        &report,
        &[
            properties::MUTUAL_EXCLUSION,
            properties::TOKEN_ORDER,
            properties::FENCED_WRITES,
        ],
    );
}

#[test]
fn unfenced_commit_keeps_grants_exclusive_but_not_writes() {
    let report = exhaustive(Variant::UnfencedCommit);
    assert!(matches!(
        report.outcome(properties::FENCED_WRITES),
        Some(PropertyOutcome::Violated { .. })
    ));
    assert_holds(
        &report,
        &[properties::MUTUAL_EXCLUSION, properties::TOKEN_ORDER],
    );
}

#[test]
fn fence_then_write_keeps_grants_exclusive_but_not_writes() {
    let report = exhaustive(Variant::FenceThenWrite);
    assert!(matches!(
        report.outcome(properties::FENCED_WRITES),
        Some(PropertyOutcome::Violated { .. })
    ));
    assert_holds(
        &report,
        &[properties::MUTUAL_EXCLUSION, properties::TOKEN_ORDER],
    );
}

#[test]
fn token_not_advanced_still_fences_by_owner() {
    let report = exhaustive(Variant::TokenNotAdvanced);
    assert!(matches!(
        report.outcome(properties::TOKEN_ORDER),
        Some(PropertyOutcome::Violated { .. })
    ));
    assert_holds(
        &report,
        &[properties::MUTUAL_EXCLUSION, properties::FENCED_WRITES],
    );
}

#[test]
fn worker_clock_expiry_keeps_tokens_increasing() {
    let report = exhaustive(Variant::WorkerClockExpiry);
    assert!(matches!(
        report.outcome(properties::MUTUAL_EXCLUSION),
        Some(PropertyOutcome::Violated { .. })
    ));
    assert_holds(&report, &[properties::TOKEN_ORDER]);
}

#[test]
fn no_owner_check_also_lets_a_stale_renewal_keep_a_crashed_holders_scope() {
    // Needs TTL of server time after the crash: the default clock bound.
    let report = check(&CheckConfig {
        model: LeaseModel::new(2, Variant::NoOwnerCheck),
        search: Search::Exhaustive,
    });
    assert!(matches!(
        report.outcome(properties::CRASHED_HOLDER_TAKEN_OVER),
        Some(PropertyOutcome::Violated { .. })
    ));
    assert_holds(&report, &[properties::TOKEN_ORDER]);
}

#[test]
fn a_session_lock_whose_holder_learns_late_lets_a_stale_write_land() {
    // pg_partsmith's advisory lock: the server frees it with the dead session, a
    // rival takes it, and the unaware holder's unfenced write lands (I3).
    let steps = counterexample_steps(Variant::SessionLockLearnsLate);
    let report = check(&CheckConfig::new(LeaseModel::new(
        2,
        Variant::SessionLockLearnsLate,
    )));
    let trace = report.counterexample.expect("a counterexample");
    assert!(
        trace
            .steps
            .iter()
            .any(|step| step.action.starts_with("SessionDies")),
        "the session dies in the counterexample"
    );
    assert_eq!(steps, 6);
}

#[test]
fn a_token_checked_only_at_the_store_lets_a_stale_write_land_before_the_new_holders_first() {
    // leaseproof's `redis-fenced`: the store refuses a token below the last
    // it committed, so a paused holder whose successor has not written yet
    // still lands its write (I3) — what the simulation finds by seed.
    let report = check(&CheckConfig::new(LeaseModel::new(
        2,
        Variant::TokenFenceAtStore,
    )));
    assert!(report.as_expected());
    let trace = report.counterexample.expect("a counterexample");
    let commits = trace
        .steps
        .iter()
        .filter(|step| step.action.contains("Commit"))
        .count();
    assert!(commits >= 1, "{trace}");
    // Pinned: the shortest counterexample.
    assert_eq!(counterexample_steps(Variant::TokenFenceAtStore), 7);
    // A stale commit after the successor wrote is refused: the fence works,
    // only its window is open (the refusal is reachable).
    let exhaustive = check(&CheckConfig {
        model: LeaseModel::new(2, Variant::TokenFenceAtStore),
        search: Search::Exhaustive,
    });
    assert!(matches!(
        exhaustive.outcome(properties::STALE_COMMIT_REFUSED),
        Some(PropertyOutcome::Witnessed { .. })
    ));
    assert_holds(
        &exhaustive,
        &[properties::MUTUAL_EXCLUSION, properties::TOKEN_ORDER],
    );
}

#[test]
fn a_backoff_beyond_the_retry_interval_leaves_a_crashed_holders_scope_unclaimed_too_long() {
    // With the retry interval modelled: safe (I1–I3 hold), but a rival that
    // backs off a TTL beyond its interval misses the bounded takeover (I5).
    let steps = counterexample_steps(Variant::BackoffBeyondInterval);
    assert_eq!(steps, 10);
    let report = check(&CheckConfig {
        model: LeaseModel::new(2, Variant::BackoffBeyondInterval),
        search: Search::ExhaustiveSymmetric,
    });
    assert_holds(
        &report,
        &[
            properties::MUTUAL_EXCLUSION,
            properties::TOKEN_ORDER,
            properties::FENCED_WRITES,
        ],
    );
}
