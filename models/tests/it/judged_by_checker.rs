//! The model's paths judged by the history checker.
//!
//! Goal: one vocabulary with teeth — every broken variant's counterexample,
//! recorded as a history, is convicted by `leaseproof_history::check` of the
//! invariant the model found broken; and the checker convicts no path of the
//! reference model (it never cries wolf on what the protocol can do).
//! Method: `leaseproof_models::judged` records model paths as histories; the
//! variant search is breadth-first for the shortest convicted path; the
//! reference is sampled over its whole reachable state space, in the default
//! configuration and with lost replies and late statements (unknown outcomes).
//! Invariant: same invariant both sides; no conviction of the reference.

use leaseproof_history::Invariant;
use leaseproof_models::judged::{expected_invariant, judge_sample, shortest_convicted_path};
use leaseproof_models::{LeaseModel, Variant};

#[test]
fn every_variant_counterexample_is_convicted_of_its_invariant_by_the_checker() {
    let mut convicted = Vec::new();
    for variant in Variant::ALL {
        let Some(invariant) = expected_invariant(variant) else {
            continue;
        };
        let model = LeaseModel::new(2, variant);
        let (path, report) = shortest_convicted_path(&model, invariant)
            .unwrap_or_else(|| panic!("{variant}: no path the checker convicts of {invariant}"));
        let codes: Vec<&str> = report
            .violations
            .iter()
            .map(|violation| violation.invariant.code())
            .collect();
        convicted.push(format!(
            "{variant}: {} steps, {}",
            path.len() - 1,
            codes.join(" ")
        ));
    }
    // Pinned: the shortest convicted path per variant and every invariant the
    // checker found on it (the expected one among them).
    let expected = [
        "worker-clock-expiry: 8 steps, I1",
        "read-then-write: 9 steps, I1",
        "unfenced-commit: 7 steps, I3",
        "fence-then-write: 13 steps, I3 I3",
        "no-owner-check: 12 steps, I1",
        "token-not-advanced: 7 steps, I2",
        "fence-owner-only: 12 steps, I3 I3",
        "shortening-extension: 11 steps, I1",
        "session-lock-learns-late: 7 steps, I3",
        "token-fence-at-store: 7 steps, I3",
        "backoff-beyond-interval: 13 steps, I5",
    ];
    assert_eq!(convicted, expected);
}

#[test]
fn schema_failures_are_the_one_variant_a_history_cannot_show() {
    // A worker that fails to start records nothing: the checker has no
    // start-up invariant, and the model's property stays the model's.
    let unjudgeable: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|&variant| variant != Variant::Reference)
        .filter(|&variant| expected_invariant(variant).is_none())
        .collect();
    assert_eq!(unjudgeable, vec![Variant::SchemaNoRetry]);
    assert_eq!(expected_invariant(Variant::Reference), None);
    assert_eq!(
        expected_invariant(Variant::UnfencedCommit),
        Some(Invariant::FencedWrites)
    );
}

#[test]
fn the_checker_convicts_no_path_of_the_reference_model() {
    for (name, model, every) in [
        ("default", LeaseModel::new(2, Variant::Reference), 7),
        (
            "lost replies",
            LeaseModel::with_lost_replies(2, Variant::Reference),
            7,
        ),
        (
            "late statements",
            LeaseModel::with_late_statements(2, Variant::Reference),
            7,
        ),
        (
            "retry interval",
            LeaseModel::with_retry_interval(2, Variant::Reference),
            7,
        ),
    ] {
        let verdict = judge_sample(&model, every);
        if let Some((path, report)) = &verdict.convicted {
            panic!("{name}: the checker cried wolf on a reference path of {} steps:\n{report:#?}\n{path:#?}", path.len() - 1);
        }
        assert!(
            verdict.judged >= verdict.states / every,
            "{name}: {verdict:?}"
        );
        assert!(
            verdict.with_unknown_outcomes > 0,
            "{name}: no unknown outcome judged"
        );
        println!("{name}: {verdict:?}");
    }
}

/// A convicted path's history, for the recorder's own rules below.
fn a_recorded_history() -> leaseproof_history::History {
    let model = LeaseModel::new(2, Variant::UnfencedCommit);
    let (path, _) = shortest_convicted_path(&model, Invariant::FencedWrites).expect("a path");
    leaseproof_models::judged::history_of(&model, &path)
}

#[test]
fn recorded_local_times_are_the_local_tick_plus_the_events_order() {
    let history = a_recorded_history();
    assert!(history
        .events
        .iter()
        .any(|event| event.true_time_us >= leaseproof_models::judged::TICK_US));
    for event in &history.events {
        // Local and true time share the order within the tick: they differ
        // by whole ticks of clock skew, nothing else.
        assert_eq!(
            (event.local_time_us - event.true_time_us) % leaseproof_models::judged::TICK_US,
            0,
            "{event:?}"
        );
    }
}

#[test]
fn statements_get_server_times_of_their_own() {
    use leaseproof_history::{EventKind, OpResult, Outcome};
    let history = a_recorded_history();
    let event_times: std::collections::BTreeSet<i64> = history
        .events
        .iter()
        .map(|event| event.true_time_us)
        .collect();
    let stamps: Vec<i64> = history
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Complete {
                outcome: Outcome::Ok { result },
                ..
            } => match result {
                OpResult::Lease { granted_at_us, .. } => Some(*granted_at_us),
                OpResult::Committed {
                    committed_at_us: Some(at),
                } => Some(*at),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(stamps.len() >= 2, "{stamps:?}");
    for stamp in &stamps {
        assert!(
            !event_times.contains(stamp),
            "a statement stamped at an event's time: {stamp}"
        );
    }
}

#[test]
fn a_sample_judges_every_nth_state_of_the_reference() {
    let model = LeaseModel::new(2, Variant::Reference);
    let verdict = judge_sample(&model, 50);
    assert!(verdict.convicted.is_none());
    assert!(verdict.states > 1_000, "{} states", verdict.states);
    // No ghost monitor fires in the reference: exactly every 50th state.
    assert_eq!(verdict.judged, verdict.states / 50);
    assert!(verdict.with_unknown_outcomes <= verdict.judged);
}
