//! Belief overlaps: counted always, a violation only for unfenced workers; a
//! crashed incarnation's unclosed belief ends when the worker restarts.

use leaseproof_history::{check, CheckConfig, Invariant};

use crate::builder::{assert_passes, Builder};

fn overlapping_beliefs() -> (Builder, u64, u64) {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let a_believes = builder.belief_start("a", "s", 1);
    // a pauses past its ttl; b takes over while a still believes.
    builder.acquire_ok("b", "s", 2, 1_100);
    let b_believes = builder.belief_start("b", "s", 2);
    builder.belief_end("a", "s", 1);
    builder.belief_end("b", "s", 2);
    (builder, a_believes, b_believes)
}

#[test]
fn belief_overlap_of_fenced_workers_is_counted_not_a_violation() {
    let (builder, _, _) = overlapping_beliefs();
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.belief_overlaps, 1);
}

#[test]
fn belief_overlap_of_an_unfenced_worker_is_a_violation() {
    let (builder, a_believes, b_believes) = overlapping_beliefs();
    let config = CheckConfig {
        unfenced_workers: ["a".to_string()].into(),
        ..CheckConfig::default()
    };
    let report = check(&builder.build(), &config);
    assert_eq!(report.violations.len(), 1, "{report}");
    let violation = &report.violations[0];
    assert_eq!(violation.invariant, Invariant::BeliefOverlap);
    assert_eq!(violation.events, vec![a_believes, b_believes]);
    assert_eq!(report.stats.belief_overlaps, 1);
}

#[test]
fn successive_beliefs_do_not_overlap() {
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1);
    builder.belief_end("a", "s", 1);
    builder.belief_start("b", "s", 2);
    builder.belief_end("b", "s", 2);
    builder.belief_start("c", "t", 1);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.belief_overlaps, 0);
}

#[test]
fn crashed_incarnation_belief_ends_at_its_restart() {
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1); // then a crashes: no BeliefEnd
    builder.incarnation(1);
    builder.acquire_held("a", "s"); // the restarted a
    builder.incarnation(0);
    builder.belief_start("b", "s", 2);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.belief_overlaps, 0);

    // Without a restart the unclosed belief lasts to the end of the history.
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1);
    builder.belief_start("b", "s", 2);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.belief_overlaps, 1);
}
