//! The public conformance suite, run for each manager on the real server.

use std::sync::Arc;
use std::time::Duration;

use leaseproof_locks::conformance::{
    collision_is_refused_at_once, tasks_never_hold_one_table_at_once,
};
use leaseproof_locks::{
    LeaseLockManager, LockManager, PostgresAdvisoryLockManager, RedisDistributedLockManager,
    RedisLockOptions, TableName,
};
use leaseproof_pgcluster::TestDatabase;
use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::Ttl;

use crate::table;

const LEASE_TTL_MS: i64 = 30_000;

async fn advisory() -> Option<(TestDatabase, Arc<dyn LockManager>)> {
    let database = leaseproof_pgcluster::test_database().await?;
    let manager = PostgresAdvisoryLockManager::new(&database.url, "conformance").unwrap();
    Some((database, Arc::new(manager)))
}

async fn redis() -> Option<Arc<dyn LockManager>> {
    let url = leaseproof_redis_server::test_redis_url()?;
    let manager =
        RedisDistributedLockManager::connect(&url, "conformance", RedisLockOptions::default())
            .await
            .unwrap();
    Some(Arc::new(manager))
}

async fn lease() -> Option<(TestDatabase, Arc<dyn LockManager>)> {
    let database = leaseproof_pgcluster::test_database().await?;
    let leases = PostgresLeases::connect(&database.url, 16).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let manager = LeaseLockManager::new(
        leases,
        "conformance",
        leaseproof_locks::LeaseLockOptions {
            ttl: Ttl::from_millis(LEASE_TTL_MS).unwrap(),
            keep_alive: true,
        },
    );
    Some((database, Arc::new(manager)))
}

/// The whole suite through its one entry point, as a user's manager runs it.
/// `test` is also the name the manager must report: every sentence the suite
/// fails with, and every line `verify` prints, names the manager by it.
async fn whole_suite(manager: Arc<dyn LockManager>, test: &str, lifetime_min: Option<Duration>) {
    assert_eq!(manager.name(), test);
    let prefix = format!("{test}_{}", rand_suffix());
    let report =
        leaseproof_locks::conformance::run_suite(Arc::clone(&manager), &prefix, lifetime_min)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
    println!("{}: {report}", manager.name());
    assert!(report.race.holds >= 6, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_manager_passes_the_conformance_suite() {
    let Some((_database, manager)) = advisory().await else {
        return;
    };
    whole_suite(manager, "advisory", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_manager_passes_the_conformance_suite() {
    let Some(manager) = redis().await else {
        return;
    };
    whole_suite(manager, "redis", Some(RedisLockOptions::default().ttl)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_manager_passes_the_conformance_suite() {
    let Some((_database, manager)) = lease().await else {
        return;
    };
    whole_suite(
        manager,
        "lease",
        Some(Duration::from_millis(LEASE_TTL_MS as u64)),
    )
    .await;
}

#[tokio::test]
async fn the_manager_is_usable_as_a_shared_trait_object() {
    // A scheduler holds `Arc<dyn LockManager>` and picks the manager at start.
    let Some((_database, manager)) = advisory().await else {
        return;
    };
    let managers: Vec<Arc<dyn LockManager>> = vec![Arc::clone(&manager), manager];
    let table = TableName::new("public", "shared");
    let guard = managers[0].acquire_lock(&table).await.unwrap();
    assert!(managers[1].acquire_lock(&table).await.is_err());
    guard.release().await.unwrap();
}

/// A "lock" that grants everyone: the suite must catch it (teeth).
#[derive(Debug)]
struct GrantsEveryone;

impl LockManager for GrantsEveryone {
    fn acquire_lock<'a>(
        &'a self,
        table: &'a TableName,
    ) -> futures_core::future::BoxFuture<
        'a,
        Result<leaseproof_locks::LockGuard, leaseproof_locks::LockError>,
    > {
        Box::pin(async move {
            // Borrow a real guard from a private lock per call: every caller wins.
            let url = leaseproof_redis_server::test_redis_url().expect("redis");
            let private = RedisDistributedLockManager::connect(
                &url,
                format!("everyone-{}", rand_suffix()),
                RedisLockOptions::default(),
            )
            .await?;
            private.acquire_lock(table).await
        })
    }

    fn is_locked<'a>(
        &'a self,
        _table: &'a TableName,
    ) -> futures_core::future::BoxFuture<'a, Result<bool, leaseproof_locks::LockError>> {
        Box::pin(async { Ok(false) })
    }

    fn name(&self) -> &'static str {
        "grants-everyone"
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_catches_a_lock_that_grants_everyone() {
    if leaseproof_redis_server::test_redis_url().is_none() {
        return;
    }
    let broken: Arc<dyn LockManager> = Arc::new(GrantsEveryone);
    let table = table("everyone");
    let collision = collision_is_refused_at_once(&*broken, &table).await;
    assert!(
        collision.is_err_and(|error| error.what.contains("granted twice")),
        "the collision check must fail"
    );
    let race =
        tasks_never_hold_one_table_at_once(broken, &table, 4, 3, Duration::from_millis(20), None)
            .await;
    let error = race.expect_err("the race must find two holders");
    assert!(error.what.contains("certainly held"), "{error}");
}

#[path = "../../examples/custom_manager.rs"]
mod custom_manager;

/// The example custom manager passes the whole suite through its one entry
/// point, as a user's manager would from its tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_custom_manager_passes_the_whole_suite() {
    let report = custom_manager::check_memory_locks()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(report.contains("holds by"), "{report}");
}
