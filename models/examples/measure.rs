//! Measures the models: unique states, states per second and time to exhaust
//! the reference, and each broken variant's shortest counterexample.
//!
//! Goal: the benchmark the brief asks for, run by hand in release mode
//! (`cargo run --release -p leaseproof-models --example measure -- [workers] [time_ticks_max] [symmetric]`).
//! Method: one `check` per configuration, timings from `ModelReport`.
//! Invariant: prints the reference's verdict on every property; nothing is asserted here
//! (the tests assert, this measures).

use leaseproof_models::{check, CheckConfig, LeaseModel, Search, Variant};

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let workers: usize = arguments
        .first()
        .map_or(2, |text| text.parse().expect("workers"));
    let mut model = LeaseModel::new(workers, Variant::Reference);
    if let Some(text) = arguments.get(1) {
        model.time_ticks_max = text.parse().expect("time_ticks_max");
    }
    let symmetric = arguments.get(2).is_some_and(|text| text == "symmetric");
    let mut config = CheckConfig::new(model);
    if symmetric {
        config.search = Search::ExhaustiveSymmetric;
    }
    let report = check(&config);
    println!(
        "reference workers={} time_ticks_max={} search={:?}: {} unique states in {:.2?} ({:.0} states/s)",
        workers, model.time_ticks_max, config.search, report.unique_states, report.elapsed, report.states_per_second
    );
    for (name, outcome) in &report.properties {
        println!("  {name:<40} {outcome:?}");
    }
    if arguments.get(3).is_some_and(|text| text == "only") {
        return;
    }
    for variant in Variant::ALL.into_iter().skip(1) {
        let report = check(&CheckConfig::new(LeaseModel { variant, ..model }));
        let steps = report
            .counterexample
            .as_ref()
            .map(|trace| trace.steps.len());
        println!(
            "{:<22} expected {:<28} refuted={} steps={:?} states={} in {:.2?}",
            variant.name(),
            variant.expected_violation().unwrap_or("-"),
            report.as_expected(),
            steps,
            report.unique_states,
            report.elapsed
        );
        if std::env::var_os("TRACE").is_some() {
            if let Some(trace) = &report.counterexample {
                println!("{trace}");
            }
        }
    }
}
