//! Criterion: acquisition on one contended scope (1, 2, 8, 32 contenders) and
//! on many uncontended scopes, each group beside `SELECT 1` (the round-trip
//! limit) and `pg_try_advisory_xact_lock` measured in the same run.
//!
//! Goal: the cost of a losing attempt on a held lease (guarded and the seed's
//! bare upsert) and of constant takeover, as ratios to the baselines. Method:
//! `support::bench_workload` for each workload at each contention level.
//! Invariant: losers are checked to have lost (the rig errors otherwise).
//! Needs PostgreSQL (`DATABASE_URL` or the system's binaries); without it the
//! bench prints the skip line and measures nothing.

mod support;

use leaseproof_benches::Workload;

fn main() {
    let runtime = support::runtime();
    let Some(database) = support::database(&runtime) else {
        return;
    };
    let mut criterion = support::criterion();
    for contenders in [1, 2, 8, 32] {
        let mut group = criterion.benchmark_group(format!("contended/{contenders}"));
        for workload in [
            Workload::SelectOne,
            Workload::AdvisoryXactLock,
            Workload::AcquireHeld,
            Workload::AcquireHeldUnguarded,
            Workload::AcquireHeldViaLibrary,
            Workload::AcquireHeldViaLibraryNoPing,
            Workload::AcquireTakeover,
        ] {
            support::bench_workload(&mut group, &runtime, &database.url, workload, contenders);
        }
        group.finish();
    }
    let mut group = criterion.benchmark_group("uncontended/8");
    for workload in [Workload::SelectOne, Workload::AcquireUncontended] {
        support::bench_workload(&mut group, &runtime, &database.url, workload, 8);
    }
    group.finish();
    criterion.final_summary();
}
