//! Statements that start now and land later (the delayed-retry bug).
//!
//! Goal: the model must find what the chaos sweep found at seeds 345 and 1171:
//! a same-owner statement whose `now()` is fixed when it starts and whose
//! effect lands after a newer statement of the same owner. Under the pre-fix
//! rule (`expires_at = now + ttl`) it moves a live grant's end back and a
//! rival is granted inside the interval the holder was told (I1); under the
//! protocol's `greatest(expires_at, now + ttl)` nothing breaks.
//! Method: [`LeaseModel::with_late_statements`] (one late acquire or renewal
//! per run); exhaustive BFS for the reference with a pinned state count, BFS
//! to the first violation for the variant with a pinned counterexample.
//! Invariant: the reference keeps every property with late statements; the
//! variant breaks I1 only when they exist.

use leaseproof_models::{
    check, properties, CheckConfig, LeaseModel, PropertyOutcome, Search, Step, Variant,
};

#[test]
fn reference_keeps_every_property_when_statements_land_late() {
    let report = check(&CheckConfig {
        model: LeaseModel::with_late_statements(2, Variant::Reference),
        search: Search::ExhaustiveSymmetric,
    });
    assert!(report.complete);
    for (name, outcome) in &report.properties {
        assert!(outcome.is_good(), "{name}: {outcome:?}");
    }
    assert!(report.as_expected());
    assert_eq!(report.unique_states, LATE_REFERENCE_STATES);
}

const LATE_REFERENCE_STATES: usize = 482_047;

#[test]
fn a_late_same_owner_statement_shortens_the_grant_under_the_pre_fix_rule() {
    let report = check(&CheckConfig::new(LeaseModel::new(
        2,
        Variant::ShorteningExtension,
    )));
    assert!(report.as_expected(), "{:?}", report.properties);
    let trace = report.counterexample.as_ref().expect("a counterexample");
    assert_eq!(trace.property, properties::MUTUAL_EXCLUSION);
    let actions: Vec<&str> = trace
        .steps
        .iter()
        .map(|step| step.action.as_str())
        .collect();
    let started = actions
        .iter()
        .position(|action| {
            action.starts_with(&format!("{:?}", Step::StartLateAcquire))
                || action.starts_with(&format!("{:?}", Step::StartLateRenew))
        })
        .expect("a late statement starts");
    let landed = actions
        .iter()
        .position(|action| action.starts_with(&format!("{:?}", Step::LandLate)))
        .expect("and lands");
    assert!(started < landed, "{actions:?}");
    assert!(trace.last_state.ghost.grants_overlapped);
    assert_eq!(
        report.outcome(properties::MUTUAL_EXCLUSION),
        Some(PropertyOutcome::Violated {
            steps: trace.steps.len()
        })
    );
    assert_eq!(trace.steps.len(), 9, "{actions:#?}");
}

#[test]
fn the_pre_fix_rule_is_harmless_when_every_statement_lands_at_once() {
    // Negative space, and why the model missed the bug before: with atomic
    // statements `now()` only grows, so `now + ttl` never shortens a grant.
    let mut model = LeaseModel::with_late_statements(2, Variant::ShorteningExtension);
    model.late_statements_max = 0;
    let report = check(&CheckConfig {
        model,
        search: Search::ExhaustiveSymmetric,
    });
    assert!(report.complete);
    assert!(
        report
            .outcome(properties::MUTUAL_EXCLUSION)
            .is_some_and(|outcome| outcome.is_good()),
        "{:?}",
        report.properties
    );
}
