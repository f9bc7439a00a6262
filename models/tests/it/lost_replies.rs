//! Lost replies of renewals and fenced commits: unknown outcomes the worker
//! lives with.
//!
//! Goal: the model covers what ships — a renewal whose reply is lost may have
//! extended the grant or not, a commit whose reply is lost may have committed
//! or been refused, and the worker carries on not knowing (the worker loop
//! keeps its old deadline after an unknown renewal, and counts an unknown
//! commit as attempted). Method: [`LeaseModel::with_lost_replies`] (one lost
//! reply per run), exhaustive symmetric BFS with a pinned state count.
//! Invariant: every property holds, its witnesses stay reachable, and a lost
//! reply really happens in the explored space (not vacuous).

use leaseproof_models::{check, CheckConfig, LeaseModel, Search, Variant};

const LOST_REPLY_REFERENCE_STATES: usize = 274_172;

#[test]
fn reference_keeps_every_property_when_renew_and_commit_replies_are_lost() {
    let report = check(&CheckConfig {
        model: LeaseModel::with_lost_replies(2, Variant::Reference),
        search: Search::ExhaustiveSymmetric,
    });
    assert!(report.complete);
    for (name, outcome) in &report.properties {
        assert!(outcome.is_good(), "{name}: {outcome:?}");
    }
    assert!(report.as_expected());
    assert_eq!(report.unique_states, LOST_REPLY_REFERENCE_STATES);
    // Not vacuous: the same bounds without lost replies reach fewer states.
    let mut without = LeaseModel::with_lost_replies(2, Variant::Reference);
    without.lost_replies_max = 0;
    let baseline = check(&CheckConfig {
        model: without,
        search: Search::ExhaustiveSymmetric,
    });
    assert!(baseline.complete);
    assert!(
        baseline.unique_states < report.unique_states,
        "{} states without lost replies, {} with",
        baseline.unique_states,
        report.unique_states
    );
}

#[test]
fn the_unfenced_commit_is_still_caught_with_lost_replies() {
    // Negative space: the lost replies add behaviour, not excuses.
    let report = check(&CheckConfig::new(LeaseModel::with_lost_replies(
        2,
        Variant::UnfencedCommit,
    )));
    assert!(report.as_expected(), "{:?}", report.properties);
}
