//! The lease manager: keep-alive, the lost signal, and its fence.

use std::time::Duration;

use leaseproof_locks::{LeaseLockManager, LockError, LockManager};
use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::{LeaseError, Ttl};
use sqlx::PgConnection;

use crate::table;

async fn manager(
    ttl_ms: i64,
    keep_alive: bool,
) -> Option<(leaseproof_pgcluster::TestDatabase, LeaseLockManager)> {
    let database = leaseproof_pgcluster::test_database().await?;
    let leases = PostgresLeases::connect(&database.url, 8).await.unwrap();
    leases.ensure_schema().await.unwrap();
    sqlx::query("CREATE TABLE maintenance (token bigint NOT NULL, note text NOT NULL)")
        .execute(leases.pool())
        .await
        .unwrap();
    let manager = LeaseLockManager::new(
        leases,
        "lease-test",
        leaseproof_locks::LeaseLockOptions {
            ttl: Ttl::from_millis(ttl_ms).unwrap(),
            keep_alive,
        },
    );
    Some((database, manager))
}

#[tokio::test]
async fn the_keep_alive_renews_past_the_ttl_on_the_servers_clock() {
    // TTL 1.5 s renewed every 0.5 s: room for a loaded machine.
    let Some((_database, locks)) = manager(1_500, true).await else {
        return;
    };
    let maintained = table("kept");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    // The loser is told who holds it: owner, token and the end of its grant.
    match locks.acquire_lock(&maintained).await {
        Err(LockError::Held {
            holder: Some(named),
            ..
        }) => {
            assert!(named.contains("under token #1 until 20"), "{named}");
        }
        other => panic!("expected Held naming the holder, got {other:?}"),
    }
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
    assert!(!locks.is_locked(&maintained).await.unwrap());
}

#[tokio::test]
async fn a_paused_holders_fenced_commit_is_refused_after_a_takeover() {
    let Some((_database, locks)) = manager(300, false).await else {
        return;
    };
    let maintained = table("paused");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await; // the pause
    let rival = locks
        .acquire_lock(&maintained)
        .await
        .expect("the lease expired");
    assert!(rival.fencing_token() > holder.fencing_token());
    let (rival_token, holder_token) = (
        rival.fencing_token().unwrap().0,
        holder.fencing_token().unwrap().0,
    );
    let leases = locks.leases();
    leases
        .commit_cycle(rival.lease().unwrap(), |connection| {
            write(connection, rival_token, "rival")
        })
        .await
        .unwrap();
    let stale = leases
        .commit_cycle(holder.lease().unwrap(), |connection| {
            write(connection, holder_token, "stale")
        })
        .await;
    assert!(
        matches!(stale, Err(CycleError::Lease(LeaseError::Lost { .. }))),
        "{stale:?}"
    );
    let notes: Vec<String> = sqlx::query_scalar("SELECT note FROM maintenance")
        .fetch_all(leases.pool())
        .await
        .unwrap();
    assert_eq!(notes, vec!["rival".to_string()]);
    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
    rival.release().await.unwrap();
}

#[tokio::test]
async fn lost_fires_when_a_renewal_finds_the_lease_taken_over() {
    let Some((_database, locks)) = manager(600, true).await else {
        return;
    };
    let maintained = table("taken");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    // An operator breaks the stuck lease and a rival takes it.
    assert!(locks.leases().force_expire(holder.scope()).await.unwrap());
    let rival = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), holder.lost())
        .await
        .expect("the keep-alive's renewal is refused");
    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
    rival.release().await.unwrap();
}

fn write<'c>(
    connection: &'c mut PgConnection,
    token: i64,
    note: &'static str,
) -> futures_core::future::BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move {
        sqlx::query("INSERT INTO maintenance VALUES ($1, $2)")
            .bind(token)
            .bind(note)
            .execute(connection)
            .await
            .map(drop)
    })
}

#[tokio::test]
async fn a_keep_alive_on_a_one_connection_pool_is_refused_before_any_sql() {
    // The renewal would wait for the pool while the guarded transaction holds
    // its only connection, and the lease would lapse mid-work.
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let leases = PostgresLeases::connect(&database.url, 1).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let ttl = Ttl::from_millis(1_000).unwrap();
    let kept = LeaseLockManager::new(
        leases.clone(),
        "small",
        leaseproof_locks::LeaseLockOptions {
            ttl,
            keep_alive: true,
        },
    );
    assert!(matches!(
        kept.acquire_lock(&table("small")).await,
        Err(LockError::Invalid(
            leaseproof_protocol::InvalidInput::PoolTooSmall {
                connections_max: 1,
                connections_min: 2
            }
        ))
    ));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM leaseproof_leases")
        .fetch_one(leases.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing was written");
    let unkept = LeaseLockManager::new(
        leases,
        "small",
        leaseproof_locks::LeaseLockOptions {
            ttl,
            keep_alive: false,
        },
    );
    unkept
        .acquire_lock(&table("small"))
        .await
        .expect("without a keep-alive one connection is enough");
    // Two connections are enough for the keep-alive: the boundary is taken.
    let two = PostgresLeases::connect(&database.url, 2).await.unwrap();
    let kept = LeaseLockManager::new(
        two,
        "two",
        leaseproof_locks::LeaseLockOptions {
            ttl,
            keep_alive: true,
        },
    );
    kept.acquire_lock(&table("two"))
        .await
        .expect("a keep-alive on two connections")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_manager_over_leases_without_holder_reports_keeps_that_choice() {
    // The manager takes the leases as configured: a user who opted out of
    // the holder read (a loser costs exactly one statement) keeps it off.
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let leases = PostgresLeases::connect(&database.url, 8).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let quiet = leases
        .clone()
        .without_holder_reports()
        .with_read_first(leaseproof_postgres::ReadFirst::Never);
    let ttl = Ttl::from_millis(20_000).unwrap();
    let holder_locks = LeaseLockManager::new(
        leases,
        "quiet",
        leaseproof_locks::LeaseLockOptions {
            ttl,
            keep_alive: false,
        },
    );
    let quiet_locks = LeaseLockManager::new(
        quiet,
        "quiet",
        leaseproof_locks::LeaseLockOptions {
            ttl,
            keep_alive: false,
        },
    );
    let maintained = table("quiet");
    let holder = holder_locks.acquire_lock(&maintained).await.unwrap();
    match quiet_locks.acquire_lock(&maintained).await {
        Err(LockError::Held { holder: None, .. }) => {}
        other => panic!("expected Held without a holder read, got {other:?}"),
    }
    holder.release().await.unwrap();
}
