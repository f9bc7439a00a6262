//! Criterion: a losing `acquire_lock` under 8-way contention for each lock
//! manager of pg_partsmith's design, beside the round-trip baselines of the same run —
//! `SELECT 1` through a pool and Redis `PING` — so the figures read as ratios.
//!
//! Goal: what a scheduler tick that collides costs with each manager. Method:
//! a holder keeps the table locked; each iteration runs 8 concurrent losing
//! acquisitions (each must be `Held`) and criterion reports wall time per
//! iteration; the baselines run 8 concurrent round trips the same way.
//! Invariant: a loser that is granted panics the bench instead of producing
//! a figure. (The advisory manager opens a connection per attempt — its
//! figure includes the connection setup, which is the point of showing it.)

#[allow(dead_code)] // shared with the other benches; `bench_workload` is theirs
mod support;

use std::sync::Arc;
use std::time::Duration;

use criterion::BenchmarkId;
use leaseproof_locks::{LockError, LockManager, TableName};
use leaseproof_postgres::PostgresLeases;
use leaseproof_races::{build_manager, ManagerKind, ManagerSpec};

const CONTENDERS: usize = 8;

fn main() {
    let runtime = support::runtime();
    let Some(database) = support::database(&runtime) else {
        return;
    };
    let Some(redis_url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let url = database.url.clone();
    let (pool, redis, managers) = runtime.block_on(async {
        let leases = PostgresLeases::connect(&url, CONTENDERS as u32 + 2)
            .await
            .expect("lease pool");
        leases.ensure_schema().await.expect("schema");
        let redis = redis::Client::open(redis_url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let mut managers: Vec<Arc<dyn LockManager>> = Vec::new();
        for kind in [
            ManagerKind::Advisory,
            ManagerKind::Redis,
            ManagerKind::Lease,
        ] {
            let spec = ManagerSpec {
                redis_url: Some(redis_url.clone()),
                ttl: Duration::from_secs(600),
                leases: Some(leases.clone()),
                ..ManagerSpec::new(kind, "bench", url.clone())
            };
            managers.push(build_manager(spec).await.expect("manager").manager);
        }
        (leases.pool().clone(), redis, managers)
    });
    let table = TableName::new("public", "bench");
    let mut criterion = support::criterion();
    let mut group = criterion.benchmark_group(format!("lock-collision/{CONTENDERS}"));
    group.bench_function(
        BenchmarkId::new("SELECT 1 (baseline)", CONTENDERS),
        |bencher| {
            bencher.to_async(&runtime).iter(|| {
                let pool = pool.clone();
                async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..CONTENDERS {
                        let pool = pool.clone();
                        tasks.spawn(async move {
                            sqlx::query("SELECT 1").execute(&pool).await.map(drop)
                        });
                    }
                    while let Some(done) = tasks.join_next().await {
                        done.expect("task").expect("SELECT 1");
                    }
                }
            });
        },
    );
    group.bench_function(
        BenchmarkId::new("Redis PING (baseline)", CONTENDERS),
        |bencher| {
            bencher.to_async(&runtime).iter(|| {
                let redis = redis.clone();
                async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..CONTENDERS {
                        let mut redis = redis.clone();
                        tasks.spawn(async move {
                            redis::cmd("PING").query_async::<String>(&mut redis).await
                        });
                    }
                    while let Some(done) = tasks.join_next().await {
                        done.expect("task").expect("PING");
                    }
                }
            });
        },
    );
    for manager in managers {
        let holder = runtime
            .block_on(manager.acquire_lock(&table))
            .expect("the holder takes the table");
        group.bench_function(
            BenchmarkId::new(
                format!("{} losing acquire_lock", manager.name()),
                CONTENDERS,
            ),
            |bencher| {
                bencher.to_async(&runtime).iter(|| {
                    let (manager, table) = (Arc::clone(&manager), table.clone());
                    async move {
                        let mut tasks = tokio::task::JoinSet::new();
                        for _ in 0..CONTENDERS {
                            let (manager, table) = (Arc::clone(&manager), table.clone());
                            tasks
                                .spawn(async move { manager.acquire_lock(&table).await.map(drop) });
                        }
                        while let Some(done) = tasks.join_next().await {
                            match done.expect("task") {
                                Err(LockError::Held { .. }) => {}
                                other => panic!("a loser must be refused, got {other:?}"),
                            }
                        }
                    }
                });
            },
        );
        runtime.block_on(holder.release()).expect("release");
    }
    group.finish();
    criterion.final_summary();
}
