//! Goal: measure simulation speed — simulated seconds per wall second per
//! core — for the 5-worker scenarios. Method: criterion times whole runs of
//! one seed (single-threaded); divide the run's simulated time (printed once)
//! by the measured time. Target: at least 1,000 simulated s per wall s.
use criterion::{criterion_group, criterion_main, Criterion};
use leaseproof_sim::{run, RunOptions, Scenario};

fn bench_runs(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("sim_run");
    group.sample_size(20);
    for name in ["skewed-clocks", "chaos"] {
        let scenario = Scenario::load(name).expect("the scenario loads");
        let simulated = run(&scenario, 1, RunOptions::default()).simulated;
        println!(
            "{name}: one run simulates {:.1} s (5 workers, {} ms tick)",
            simulated.as_secs_f64(),
            scenario.tick_ms
        );
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

criterion_group!(benches, bench_runs);
criterion_main!(benches);
