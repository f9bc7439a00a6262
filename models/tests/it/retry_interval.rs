//! The bounded takeover (I5) with the worker loop's retry interval.
//!
//! Goal: check in the model, not only in sweeps, that a crashed holder's
//! scope is taken over within TTL plus one retry interval while a rival
//! waits. Method: [`LeaseModel::with_retry_interval`]: a refused acquisition
//! is a step that schedules the next attempt exactly one interval later, and
//! time cannot pass a due attempt (the worker loop sleeps its interval, then
//! tries); exhaustive symmetric search with a pinned state count.
//! Invariant: every property holds for the reference and its witnesses stay
//! reachable; a waiting rival really takes a crashed holder's scope over in
//! the explored space (not vacuous); the backoff variant breaks only I5.

use leaseproof_models::{
    check, properties, CheckConfig, LeaseModel, PropertyOutcome, Search, Variant,
};

const RETRY_INTERVAL_REFERENCE_STATES: usize = 105_262;

#[test]
fn reference_takes_a_crashed_holders_scope_over_within_ttl_plus_one_retry_interval() {
    let report = check(&CheckConfig {
        model: LeaseModel::with_retry_interval(2, Variant::Reference),
        search: Search::ExhaustiveSymmetric,
    });
    assert!(report.complete);
    for (name, outcome) in &report.properties {
        assert!(outcome.is_good(), "{name}: {outcome:?}");
    }
    assert_eq!(report.unique_states, RETRY_INTERVAL_REFERENCE_STATES);
    assert!(matches!(
        report.outcome(properties::COMMIT_AFTER_HOLDER_CRASH),
        Some(PropertyOutcome::Witnessed { .. })
    ));
}

#[test]
fn without_the_interval_the_bounded_takeover_is_only_an_enabledness_rule() {
    // Negative space: the default bounds never schedule a retry, so the
    // stricter rule of the retry configuration is not what they check.
    let model = LeaseModel::new(2, Variant::Reference);
    assert_eq!(model.retry_interval_ticks, 0);
    let backoff = LeaseModel::new(2, Variant::BackoffBeyondInterval);
    assert_eq!(backoff.retry_interval_ticks, 1);
    // The backoff variant under the default bounds (no retries as steps)
    // keeps every property: its mistake needs the interval to show.
    let report = check(&CheckConfig {
        model: LeaseModel {
            retry_interval_ticks: 0,
            ..LeaseModel::with_retry_interval(2, Variant::BackoffBeyondInterval)
        },
        search: Search::ExhaustiveSymmetric,
    });
    assert!(report
        .properties
        .iter()
        .all(|(_, outcome)| !matches!(outcome, PropertyOutcome::Violated { .. })));
}
