//! What both criterion benches share: the server, the runtime, and one
//! function that benchmarks a workload with its rig prepared outside the timing.
//!
//! Goal: criterion's figures for a workload at N contenders, from the same
//! load generator as `leaseproof bench`. Method: `iter_custom` runs `iters`
//! operations spread over the N contenders concurrently and returns the wall
//! time, so criterion's "time per iteration" is wall time per operation under
//! N-way concurrency (its throughput line is the aggregate rate).
//! Invariant: a run with a wrong outcome (a loser granted) panics instead of
//! producing a figure.

use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use leaseproof_benches::{Rig, Workload};
use leaseproof_pgcluster::TestDatabase;
use tokio::runtime::Runtime;

/// A multi-threaded runtime, as the CLI uses.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A fresh database on `DATABASE_URL` or the throwaway cluster; `None` (after
/// the skip line) when there is no PostgreSQL.
pub fn database(runtime: &Runtime) -> Option<TestDatabase> {
    runtime.block_on(leaseproof_pgcluster::test_database())
}

/// Criterion with short measurements, so a full `cargo bench` takes minutes.
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args()
}

/// Benchmarks `workload` at `contenders` within `group`.
pub fn bench_workload(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    url: &str,
    workload: Workload,
    contenders: usize,
) {
    let rig = Arc::new(
        runtime
            .block_on(Rig::prepare(url, workload, contenders))
            .unwrap_or_else(|error| panic!("preparing {workload} x{contenders}: {error}")),
    );
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new(workload.name(), contenders), |bencher| {
        bencher.to_async(runtime).iter_custom(|operations| {
            let rig = Arc::clone(&rig);
            async move {
                rig.run_count(operations)
                    .await
                    .unwrap_or_else(|error| panic!("{workload} x{contenders}: {error}"))
            }
        });
    });
    let rig = Arc::into_inner(rig).expect("criterion dropped its closures");
    runtime.block_on(rig.close());
}
