//! The harness's own speed: how fast the simulation and the model checker go.
//!
//! Goal: the figures that size a sweep — seeds per second per core for every
//! embedded scenario (goal ≥ 50 in release) with the wall time of 10⁶ seeds on
//! one core and on 100 shards, simulated seconds per wall second for the
//! 5-worker scenarios, and the model checker's states per second. Method:
//! criterion times whole runs; the throughput is declared in the unit that
//! matters, so criterion's "elements/s" reads as *seeds per second* for
//! `seeds_per_second` (one thread: per core), *simulated milliseconds per
//! second* for `sim_run` and *unique states per second* for `model_check`.
//! Before each scenario's measurement a 20-seed sweep prints the same
//! projection `sim` prints. Nothing is asserted here: the tests assert, this
//! measures.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use leaseproof_models::{check, CheckConfig, LeaseModel, Search, Variant};
use leaseproof_sim::{run, sweep, RunOptions, Scenario, SweepConfig, EMBEDDED};

fn seeds_per_second(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("seeds_per_second");
    group.sample_size(10);
    group.throughput(Throughput::Elements(1));
    for (name, _) in EMBEDDED {
        let scenario = Scenario::load(name).expect("the scenario loads");
        let config = SweepConfig {
            seeds: 0..20,
            shard: None,
            jobs: 1,
            unfenced: false,
        };
        let summary = sweep(&scenario, &config, &|_| {});
        if let Some(line) = leaseproof_sim::speed_line(&[summary]) {
            println!("{name}: {line}");
        }
        let mut seed = 0;
        group.bench_function(name, |bencher| {
            bencher.iter(|| {
                seed += 1;
                run(&scenario, seed, RunOptions::default())
                    .report
                    .stats
                    .commits
            })
        });
    }
    group.finish();
}

fn sim_run(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("sim_run");
    group.sample_size(20);
    for name in ["skewed-clocks", "chaos"] {
        let scenario = Scenario::load(name).expect("the scenario loads");
        let simulated = run(&scenario, 1, RunOptions::default()).simulated;
        println!(
            "{name}: one run simulates {:.1} s ({} workers, {} ms tick); elements/s = simulated ms per wall s",
            simulated.as_secs_f64(),
            scenario.workers,
            scenario.tick_ms
        );
        group.throughput(Throughput::Elements(simulated.as_millis() as u64));
        group.bench_function(name, |bencher| {
            bencher.iter(|| {
                run(&scenario, 1, RunOptions::default())
                    .report
                    .stats
                    .commits
            })
        });
    }
    group.finish();
}

fn model_check(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("model_check");
    group.sample_size(10);
    let reference = CheckConfig {
        model: LeaseModel::new(2, Variant::Reference),
        search: Search::ExhaustiveSymmetric,
    };
    let states = check(&reference).unique_states;
    println!(
        "reference, 2 workers, symmetric: {states} unique states; elements/s = states per second"
    );
    group.throughput(Throughput::Elements(states as u64));
    group.bench_function("reference_2_workers_exhaustive", |bencher| {
        bencher.iter(|| check(&reference).unique_states)
    });
    group.throughput(Throughput::Elements(1));
    for variant in [Variant::UnfencedCommit, Variant::FenceOwnerOnly] {
        let config = CheckConfig::new(LeaseModel::new(2, variant));
        group.bench_function(format!("counterexample_{}", variant.name()), |bencher| {
            bencher.iter(|| check(&config).counterexample.map(|trace| trace.steps.len()))
        });
    }
    group.finish();
}

criterion_group!(benches, seeds_per_second, sim_run, model_check);
criterion_main!(benches);
