//! Criterion: renew, release + re-acquire, and the fenced commit cycle against
//! the same write without the fence, each beside `SELECT 1` of the same run;
//! takeover latency from a crashed holder's `expires_at` to the next grant.
//!
//! Goal: what the rest of a lease's life costs, and what the fence adds to a
//! guarded write (goal: at most 1.3x). Method: `support::bench_workload`;
//! takeover latency uses `iter_custom` returning the summed server-time delays
//! of `iters` takeovers. Invariant: renewals and fences that find their lease
//! gone, and overlapping grants, fail the bench.

mod support;

use std::time::Duration;

use criterion::BenchmarkId;
use leaseproof_benches::{Rig, Workload};

fn main() {
    let runtime = support::runtime();
    let Some(database) = support::database(&runtime) else {
        return;
    };
    let url = database.url.as_str();
    let mut criterion = support::criterion();
    for contenders in [1, 8] {
        let mut group = criterion.benchmark_group(format!("lifecycle/{contenders}"));
        for workload in [
            Workload::SelectOne,
            Workload::Renew,
            Workload::ReleaseReacquire,
        ] {
            support::bench_workload(&mut group, &runtime, url, workload, contenders);
        }
        group.finish();
    }
    for writers in [1, 4] {
        let mut group = criterion.benchmark_group(format!("guarded-write/{writers}"));
        for workload in [Workload::UnfencedWrite, Workload::FencedCommit] {
            support::bench_workload(&mut group, &runtime, url, workload, writers);
        }
        group.finish();
    }

    // Criterion plans iterations from the reported time (the sub-millisecond
    // delays), while each takeover waits out a 20 ms TTL: keep the target small.
    let mut group = criterion.benchmark_group("takeover-latency");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(10))
        .measurement_time(Duration::from_millis(50));
    let contenders = 8;
    let rig = runtime
        .block_on(Rig::prepare(url, Workload::TakeoverLatency, contenders))
        .expect("preparing the takeover rig");
    group.bench_function(
        BenchmarkId::new("expires_at to next grant (server time)", contenders),
        |bencher| {
            bencher.to_async(&runtime).iter_custom(|takeovers| {
                let rig = &rig;
                async move {
                    let measurement = rig
                        .run_until_grants(takeovers + 1)
                        .await
                        .expect("takeover run");
                    let latency = measurement.takeover.expect("consecutive grants were seen");
                    latency.server_mean * u32::try_from(takeovers).unwrap_or(u32::MAX)
                }
            });
        },
    );
    group.finish();
    runtime.block_on(rig.close());
    criterion.final_summary();
}
