//! A holder whose lock became a rival's, for every manager.
//!
//! Goal: once a holder's lock is gone — its key expired during a pause, a
//! restart forgot it, an operator broke the lease, its session was
//! terminated — and a rival holds it, nothing the old holder still runs may
//! touch the rival's lock: its keep-alive must fire *lost* instead of
//! extending (or shortening) the rival's lock, its release must report
//! `Lost` and leave the rival's lock standing, and where the manager has a
//! fence its write is refused. Method: the rival's lock is read back from the
//! store itself (the key's value and remaining TTL, the lease row) before and
//! after the old holder acts, so a compare step that was dropped shows as a
//! changed value, a changed expiry or a freed lock.

use std::time::Duration;

use leaseproof_locks::{
    LeaseLockManager, LockError, LockGuard, LockManager, RedisDistributedLockManager,
    RedisLockOptions,
};
use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::Ttl;
use redis::aio::MultiplexedConnection;

use crate::table;

async fn redis_manager(url: &str, ttl_ms: u64, keep_alive: bool) -> RedisDistributedLockManager {
    RedisDistributedLockManager::connect(
        url,
        "rival-test",
        RedisLockOptions {
            ttl: Duration::from_millis(ttl_ms),
            keep_alive,
        },
    )
    .await
    .unwrap()
}

async fn admin(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn lock_key(guard: &LockGuard) -> String {
    format!("{{{}}}:lock", guard.scope().as_str())
}

/// The key's value and its remaining time to live in milliseconds.
async fn key_state(connection: &mut MultiplexedConnection, key: &str) -> (Option<String>, i64) {
    let value: Option<String> = redis::cmd("GET")
        .arg(key)
        .query_async(connection)
        .await
        .unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(connection)
        .await
        .unwrap();
    (value, pttl)
}

/// Asserts the rival's key is untouched: same value, and a remaining TTL that
/// only ran down — neither extended to the old holder's TTL nor cut to it.
async fn assert_rivals_key_stands(
    connection: &mut MultiplexedConnection,
    key: &str,
    rival_value: &str,
    pttl_before: i64,
    what: &str,
) {
    let (value, pttl) = key_state(connection, key).await;
    assert_eq!(
        value.as_deref(),
        Some(rival_value),
        "{what}: the rival's key was deleted or overwritten"
    );
    assert!(
        pttl <= pttl_before,
        "{what}: the rival's key was extended ({pttl_before} ms -> {pttl} ms)"
    );
    assert!(
        pttl > pttl_before - 5_000,
        "{what}: the rival's key was cut short ({pttl_before} ms -> {pttl} ms)"
    );
}

#[tokio::test]
async fn a_redis_keep_alive_meeting_a_rivals_key_fires_lost_and_leaves_the_key_alone() {
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    // The holder renews every 200 ms; the rival holds for 20 s without a
    // keep-alive, so any extension the holder sends would move the rival's
    // expiry to ~600 ms from then: visible in PTTL.
    let holder_locks = redis_manager(&url, 600, true).await;
    let rival_locks = redis_manager(&url, 20_000, false).await;
    let maintained = table("redis_keep_alive");
    let holder = holder_locks.acquire_lock(&maintained).await.unwrap();
    let key = lock_key(&holder);
    let mut connection = admin(&url).await;
    // The holder's key expires as if it had been paused past its TTL.
    let deleted: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let rival = rival_locks.acquire_lock(&maintained).await.unwrap();
    let (rival_value, pttl_before) = key_state(&mut connection, &key).await;
    let rival_value = rival_value.expect("the rival set the key");
    assert!(
        rival.fencing_token() > holder.fencing_token(),
        "tokens grow"
    );

    tokio::time::timeout(Duration::from_secs(3), holder.lost())
        .await
        .expect("the holder's keep-alive finds the key is not its own and fires lost");
    assert_rivals_key_stands(
        &mut connection,
        &key,
        &rival_value,
        pttl_before,
        "after the holder's keep-alive",
    )
    .await;

    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
    assert_rivals_key_stands(
        &mut connection,
        &key,
        &rival_value,
        pttl_before,
        "after the holder's release",
    )
    .await;
    assert!(rival_locks.is_locked(&maintained).await.unwrap());
    assert!(matches!(
        holder_locks.acquire_lock(&maintained).await,
        Err(LockError::Held { .. })
    ));

    rival.release().await.unwrap();
    assert!(!rival_locks.is_locked(&maintained).await.unwrap());
}

#[tokio::test]
async fn a_redis_holder_paused_past_its_ttl_releases_nothing_of_its_rivals() {
    // No keep-alive, the plainest pause: the key runs out, a rival sets it.
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = redis_manager(&url, 300, false).await;
    let rival_locks = redis_manager(&url, 20_000, false).await;
    let maintained = table("redis_paused_release");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    let key = lock_key(&holder);
    tokio::time::sleep(Duration::from_millis(450)).await; // the pause
    let rival = rival_locks.acquire_lock(&maintained).await.unwrap();
    let mut connection = admin(&url).await;
    let (rival_value, pttl_before) = key_state(&mut connection, &key).await;
    let rival_value = rival_value.expect("the rival set the key");
    assert!(holder.is_lost(), "no keep-alive: lost fired at the TTL");
    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
    assert_rivals_key_stands(
        &mut connection,
        &key,
        &rival_value,
        pttl_before,
        "after the paused holder's release",
    )
    .await;
    rival.release().await.unwrap();
}

#[tokio::test]
async fn after_a_redis_restart_forgot_the_key_the_holder_is_told_and_never_frees_the_rivals() {
    let Some(mut server) = crate::throwaway_redis() else {
        return;
    };
    let holder_locks = redis_manager(&server.url, 900, true).await;
    let maintained = table("redis_restarted");
    let holder = holder_locks.acquire_lock(&maintained).await.unwrap();
    let key = lock_key(&holder);
    server.restart().unwrap();
    let rival_locks = redis_manager(&server.url, 20_000, false).await;
    let rival = rival_locks
        .acquire_lock(&maintained)
        .await
        .expect("the restart forgot the key");
    let mut connection = admin(&server.url).await;
    let (rival_value, pttl_before) = key_state(&mut connection, &key).await;
    let rival_value = rival_value.expect("the rival set the key");

    // Whether the holder's connection comes back or not, its keep-alive must
    // stop believing within the TTL of its last confirmed extension.
    tokio::time::timeout(Duration::from_secs(3), holder.lost())
        .await
        .expect("the holder is told its lock is gone");
    assert!(
        holder.release().await.is_err(),
        "a release after the restart cannot have released anything of ours"
    );
    assert_rivals_key_stands(
        &mut connection,
        &key,
        &rival_value,
        pttl_before,
        "after the restarted holder's keep-alive and release",
    )
    .await;
    rival.release().await.unwrap();
}

async fn lease_manager(leases: &PostgresLeases, ttl_ms: i64, keep_alive: bool) -> LeaseLockManager {
    LeaseLockManager::new(
        leases.clone(),
        "rival-test",
        leaseproof_locks::LeaseLockOptions {
            ttl: Ttl::from_millis(ttl_ms).unwrap(),
            keep_alive,
        },
    )
}

#[tokio::test]
async fn a_lease_holder_whose_lease_was_taken_over_neither_renews_nor_releases_the_rivals() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let leases = PostgresLeases::connect(&database.url, 8).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let holder_locks = lease_manager(&leases, 600, true).await;
    let rival_locks = lease_manager(&leases, 20_000, false).await;
    let maintained = table("lease_taken");
    let holder = holder_locks.acquire_lock(&maintained).await.unwrap();
    // An operator breaks the lease (as an expiry during a pause would).
    assert!(leases.force_expire(holder.scope()).await.unwrap());
    let rival = rival_locks.acquire_lock(&maintained).await.unwrap();
    let rival_lease = rival.lease().unwrap().clone();
    assert!(rival.fencing_token() > holder.fencing_token());
    let before = leases.row(rival.scope()).await.unwrap().unwrap();

    tokio::time::timeout(Duration::from_secs(3), holder.lost())
        .await
        .expect("the holder's renewal is refused and lost fires");
    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
    let after = leases.row(rival.scope()).await.unwrap().unwrap();
    assert_eq!(after.owner, before.owner, "the row is still the rival's");
    assert_eq!(after.token, before.token, "the rival's token stands");
    assert_eq!(
        after.expires_at, before.expires_at,
        "the old holder moved the rival's expiry"
    );
    assert!(leases.holds(&rival_lease).await.unwrap());
    rival.release().await.unwrap();
}
