//! Faults in combination: a late statement, a lost reply and a crash in one
//! history.
//!
//! Goal: the exhaustive model sees the faults together, not one class at a
//! time: a statement that lands late *and* a lost reply *and* a crash.
//! Method: [`LeaseModel::with_combined_faults`] (one of each per run, clocks
//! without skew or drift), exhaustive symmetric BFS with a pinned state
//! count; each fault class is shown to be reached (removing it shrinks the
//! space), and every broken variant is still refuted under the same bounds.
//! Invariant: every property holds and every witness is reached.

use leaseproof_models::{check, CheckConfig, LeaseModel, Search, Variant};

/// Takes one fault class out of a model's bounds.
type Removal = fn(&mut LeaseModel);

/// Measured: 3.7 s in release on a 2-core machine.
const COMBINED_REFERENCE_STATES: usize = 1_074_161;

#[test]
fn reference_keeps_every_property_with_late_statements_lost_replies_and_crashes_together() {
    let started = std::time::Instant::now();
    let report = check(&CheckConfig {
        model: LeaseModel::with_combined_faults(2, Variant::Reference),
        search: Search::ExhaustiveSymmetric,
    });
    eprintln!(
        "combined faults: {} states in {:.1} s",
        report.unique_states,
        started.elapsed().as_secs_f64()
    );
    assert!(report.complete);
    for (name, outcome) in &report.properties {
        assert!(outcome.is_good(), "{name}: {outcome:?}");
    }
    assert!(report.as_expected());
    assert_eq!(report.unique_states, COMBINED_REFERENCE_STATES);
    // Not vacuous: each fault class adds states of its own.
    let without: [(&str, Removal); 3] = [
        ("late statements", |model| model.late_statements_max = 0),
        ("lost replies", |model| model.lost_replies_max = 0),
        ("crashes", |model| model.crashes_max = 0),
    ];
    for (class, remove) in without {
        let mut model = LeaseModel::with_combined_faults(2, Variant::Reference);
        remove(&mut model);
        let smaller = check(&CheckConfig {
            model,
            search: Search::ExhaustiveSymmetric,
        });
        // (Without crashes, the witness of a commit after a holder's crash
        // is out of reach: only completeness is asked here.)
        assert!(smaller.complete, "without {class}");
        assert!(
            smaller.unique_states < report.unique_states,
            "without {class}: {} states, with: {}",
            smaller.unique_states,
            report.unique_states
        );
    }
}

#[test]
fn every_broken_variant_is_still_refuted_with_the_faults_combined() {
    for variant in Variant::ALL {
        if variant == Variant::Reference {
            continue;
        }
        // Every fault at once, the clock faults too: a search for the first
        // violation stops early, so the full bounds stay affordable.
        let standard = LeaseModel::new(2, Variant::Reference);
        let mut model = LeaseModel {
            skew_ticks_max: standard.skew_ticks_max,
            drift_period_ticks: standard.drift_period_ticks,
            ..LeaseModel::with_combined_faults(2, variant)
        };
        // The retry-interval variant needs its interval (and the clock to
        // reach it) to show its mistake.
        if variant == Variant::BackoffBeyondInterval {
            let retry = LeaseModel::with_retry_interval(2, variant);
            model.retry_interval_ticks = retry.retry_interval_ticks;
            model.time_ticks_max = retry.time_ticks_max;
        }
        let report = check(&CheckConfig::new(model));
        assert!(
            report.as_expected(),
            "{variant}: not refuted with the faults combined: {:?}",
            report.properties
        );
    }
}
