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

    // Without a restart an unclosed belief is certain while its incarnation
    // is seen alive: through its last event, and no further (it may have
    // crashed any time after).
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1);
    builder.belief_start("b", "s", 2);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.belief_overlaps, 0);
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1);
    builder.belief_start("b", "s", 2);
    builder.acquire_held("a", "t"); // a, alive and still believing
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.belief_overlaps, 1);
}

#[test]
fn an_unclosed_belief_seen_last_in_the_microsecond_a_rival_begins_proves_no_overlap() {
    // a (unfenced) never closes its belief; its last event is at 31.
    let config = CheckConfig {
        unfenced_workers: ["a".to_string()].into_iter().collect(),
        ..CheckConfig::default()
    };
    let mut builder = Builder::new();
    builder.at(10).belief_start("a", "s", 1);
    builder.at(30).acquire_held("a", "t"); // invoked at 30, refused at 31
    builder.belief_start("b", "s", 2);
    let mut history = builder.build();
    // b's belief in the microsecond a was last seen: a may have died first.
    history.events.last_mut().unwrap().true_time_us = 31;
    let report = check(&history, &config);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.belief_overlaps, 0, "{report}");
    // b's belief while a was still seen alive after it: proven.
    let mut builder = Builder::new();
    builder.at(10).belief_start("a", "s", 1);
    builder.at(20).belief_start("b", "s", 2);
    builder.at(30).acquire_held("a", "t");
    let report = check(&builder.build(), &config);
    assert_eq!(
        report.violations_of(Invariant::BeliefOverlap).len(),
        1,
        "{report}"
    );
}

#[test]
fn an_unfenced_belief_overlap_needs_both_seen_alive() {
    // a (unfenced) believes, is never heard from again; b believes later:
    // nothing proves a still believed. Once a is seen after b's start, it did.
    let config = leaseproof_history::CheckConfig {
        unfenced_workers: ["a".to_string()].into_iter().collect(),
        ..leaseproof_history::CheckConfig::default()
    };
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1);
    builder.belief_start("b", "s", 2);
    let report = leaseproof_history::check(&builder.build(), &config);
    assert!(report.is_ok(), "{report}");
    builder.acquire_held("a", "t");
    let report = leaseproof_history::check(&builder.build(), &config);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].invariant, Invariant::BeliefOverlap);
}

#[test]
fn beliefs_pair_per_incarnation_and_scope_and_either_unfenced_worker_makes_b() {
    // The later believer unfenced is a violation too: its writes are the
    // unprotected ones.
    let (builder, a_believes, b_believes) = overlapping_beliefs();
    let config = CheckConfig {
        unfenced_workers: ["b".to_string()].into(),
        ..CheckConfig::default()
    };
    let report = check(&builder.build(), &config);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].events, vec![a_believes, b_believes]);

    // A stray end (a lock reporting its loss twice) ends nothing; a second
    // start while one is open continues it, from the first.
    let mut builder = Builder::new();
    builder.belief_end("a", "s", 1);
    let a_believes = builder.belief_start("a", "s", 1);
    builder.belief_start("a", "s", 1);
    builder.belief_end("b", "s", 2);
    let b_believes = builder.belief_start("b", "s", 2);
    builder.belief_end("a", "s", 1);
    builder.belief_end("a", "s", 1);
    builder.belief_end("b", "s", 2);
    let report = check(&builder.build(), &config);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].events, vec![a_believes, b_believes]);
    assert_eq!(report.stats.belief_overlaps, 1);
}
