//! Connection reuse on the real server: a statement that completed leaves its
//! connection with the lease for the next statement instead of handing it to
//! sqlx (whose return path pings it: a second round trip), and a kept
//! connection goes back to the pool `keep_for` after it left it — however
//! busy the lease keeps it —, when `begin` finds the pool exhausted, on
//! `close`, and never stays kept after its statement failed or was dropped
//! mid-flight.
//!
//! Method: pools of one connection; `pg_stat_activity` (one backend, its last
//! statement the library's) and the pool's idle count tell a kept connection
//! from a returned one; a terminated backend for the failed statement and
//! another session's row lock for the dropped one. Invariant: a kept
//! connection is one whose last statement completed `Ok`; nothing kept makes
//! a caller of the same pool wait past `keep_for`, and `begin` never waits
//! for it at all.

use std::time::{Duration, Instant};

use leaseproof_pgcluster::TestDatabase;
use leaseproof_postgres::{sql, PostgresLeases};
use leaseproof_protocol::{Lease, LeaseError, Owner, Scope, Ttl};
use sqlx::PgConnection;

use crate::connection_loss::{lock_lease_row, own_pid};
use crate::fresh;

const KEEP_LONG: Duration = Duration::from_secs(60);

fn scope() -> Scope {
    Scope::new("reuse").unwrap()
}

fn ttl() -> Ttl {
    Ttl::from_millis(60_000).unwrap()
}

/// A fresh database, leases on a pool of `connections` keeping finished
/// connections for `keep_for`, and a lease acquired through them (its
/// connection now kept).
async fn leased(
    connections: u32,
    keep_for: Duration,
) -> Option<(TestDatabase, PostgresLeases, Lease)> {
    let (database, leases) = fresh(connections).await?;
    let leases = leases.with_connection_reuse(keep_for);
    let lease = leases
        .acquire_lease(&scope(), &Owner::generate(), ttl())
        .await
        .unwrap();
    Some((database, leases, lease))
}

/// The last statement of every client backend of `database` but `admin`'s own.
async fn last_statements(admin: &mut PgConnection, database: &str) -> Vec<String> {
    let admin_pid = own_pid(admin).await;
    sqlx::query_scalar(
        "SELECT query FROM pg_stat_activity WHERE datname = $1 AND pid <> $2 \
         AND backend_type = 'client backend' ORDER BY pid",
    )
    .bind(database)
    .bind(admin_pid)
    .fetch_all(admin)
    .await
    .unwrap()
}

/// Waits (up to 5 s) until the pool has its one connection back: sqlx put
/// it there after its release ping.
async fn until_back_in_the_pool(leases: &PostgresLeases) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while leases.pool().num_idle() != 1 {
        assert!(Instant::now() < deadline, "not back in the pool after 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_finished_statement_keeps_its_connection_without_the_release_ping() {
    let Some((database, leases, lease)) = leased(1, KEEP_LONG).await else {
        return;
    };
    let mut admin = database.connect().await.unwrap();
    assert_eq!(leases.connections_parked(), 1);
    // Give a return, were one under way, time to land: the connection stays
    // out of the pool (sqlx pings only what it takes back) and its backend's
    // last statement is the library's own.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(leases.pool().num_idle(), 0);
    assert_eq!(
        last_statements(&mut admin, &database.name).await,
        [sql::ACQUIRE]
    );
    assert!(leases.holds(&lease).await.unwrap());
    let renewed = leases.renew(&lease, ttl()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        last_statements(&mut admin, &database.name).await,
        [sql::RENEW]
    );
    assert_eq!(leases.connections_parked(), 1);
    assert_eq!(leases.pool().num_idle(), 0);
    assert_eq!(leases.pool().size(), 1, "one connection served them all");
    leases.release(&renewed).await.unwrap();
}

#[tokio::test]
async fn without_reuse_every_statement_hands_its_connection_back_to_the_pool() {
    // The control: what the library avoids is really there.
    let Some((database, leases, _lease)) = leased(1, Duration::ZERO).await else {
        return;
    };
    assert_eq!(leases.connection_reuse(), Duration::ZERO);
    let mut admin = database.connect().await.unwrap();
    assert_eq!(leases.connections_parked(), 0);
    until_back_in_the_pool(&leases).await;
    assert_eq!(
        last_statements(&mut admin, &database.name).await,
        [sql::ACQUIRE]
    );
}

#[tokio::test]
async fn a_kept_connection_goes_back_to_the_pool_after_keep_for() {
    let Some((_database, leases)) = fresh(1).await else {
        return;
    };
    let keep_for = Duration::from_millis(100);
    let leases = leases.with_connection_reuse(keep_for);
    assert_eq!(leases.connection_reuse(), keep_for);
    let started = Instant::now();
    leases
        .acquire_lease(&scope(), &Owner::generate(), ttl())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while leases.connections_parked() > 0 {
        assert!(Instant::now() < deadline, "still kept after 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(started.elapsed() >= keep_for, "handed back before keep_for");
    until_back_in_the_pool(&leases).await;
    // Back in the pool: another user of it gets the connection at once.
    let mut theirs = tokio::time::timeout(Duration::from_secs(1), leases.pool().acquire())
        .await
        .expect("the pool has the connection back")
        .unwrap();
    sqlx::query("SELECT 1").execute(&mut *theirs).await.unwrap();
}

#[tokio::test]
async fn a_lease_busy_without_pause_does_not_starve_another_user_of_its_pool() {
    let Some((_database, leases)) = fresh(1).await else {
        return;
    };
    let keep_for = Duration::from_millis(200);
    let leases = leases.with_connection_reuse(keep_for);
    let lease = leases
        .acquire_lease(&scope(), &Owner::generate(), ttl())
        .await
        .unwrap();
    // Statement after statement on the pool's only connection: it is never
    // idle, so only the bound on its time out of the pool hands it over.
    let busy = {
        let leases = leases.clone();
        let lease = lease.clone();
        tokio::spawn(async move {
            let until = Instant::now() + Duration::from_secs(3);
            let mut statements = 0_u32;
            while Instant::now() < until {
                assert!(leases.holds(&lease).await.unwrap());
                statements += 1;
            }
            statements
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let theirs = leases
        .pool()
        .acquire()
        .await
        .expect("the pool hands it over (5 s timeout)");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(1_500),
        "waited {waited:?} for a connection kept at most {keep_for:?}"
    );
    drop(theirs);
    assert!(busy.await.unwrap() > 0);
}

#[tokio::test]
async fn begin_on_an_exhausted_pool_takes_a_kept_connection_back() {
    // Kept far longer than the pool's 5 s acquire timeout: only `begin`
    // handing it back lets the transaction start.
    let Some((_database, leases, lease)) = leased(1, KEEP_LONG).await else {
        return;
    };
    assert_eq!(leases.connections_parked(), 1);
    let started = Instant::now();
    let mut transaction = leases.begin().await.expect("begin on a pool of one");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(leases.connections_parked(), 0);
    assert!(leases
        .hold_for_update(&mut transaction, &lease)
        .await
        .unwrap());
    transaction.commit().await.unwrap();
    // The cycle's connection went back through the pool: statements go on.
    assert!(leases.holds(&lease).await.unwrap());
    leases
        .commit_cycle(&lease, |connection| {
            Box::pin(async move { sqlx::query("SELECT 1").execute(connection).await })
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn close_hands_kept_connections_back_at_once() {
    let Some((_database, leases, _lease)) = leased(1, KEEP_LONG).await else {
        return;
    };
    assert_eq!(leases.connections_parked(), 1);
    // The pool's own close waits for every checked-out connection, the kept
    // one included: that is why the lease has its own.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), leases.pool().close())
            .await
            .is_err()
    );
    tokio::time::timeout(Duration::from_secs(2), leases.close())
        .await
        .expect("close returns once the kept connection is handed back");
    assert_eq!(leases.connections_parked(), 0);
    assert!(leases.pool().is_closed());
}

#[tokio::test]
async fn a_statement_on_a_dead_kept_connection_fails_and_drops_it() {
    let Some((database, leases, lease)) = leased(1, KEEP_LONG).await else {
        return;
    };
    let mut admin = database.connect().await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> $2 AND backend_type = 'client backend') AS terminated",
    )
    .bind(&database.name)
    .bind(admin_pid)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(killed, 1, "the kept connection's backend");
    // A read that failed changed nothing: Unavailable (retry is safe), never
    // an unknown outcome.
    let failed = leases.holds(&lease).await;
    assert!(
        matches!(failed, Err(LeaseError::Unavailable { .. })),
        "{failed:?}"
    );
    assert_eq!(
        leases.connections_parked(),
        0,
        "a failed statement's connection is not kept"
    );
    // The next statement gets a new connection from the pool.
    assert!(leases.holds(&lease).await.unwrap());
    assert_eq!(leases.connections_parked(), 1);
}

#[tokio::test]
async fn a_statement_dropped_mid_flight_does_not_keep_its_connection() {
    let Some((database, leases, lease)) = leased(2, KEEP_LONG).await else {
        return;
    };
    assert_eq!(leases.connections_parked(), 1);
    let mut blocker = lock_lease_row(&database.url, &scope()).await;
    // The renewal takes the kept connection and queues behind the row lock.
    let renewal =
        tokio::time::timeout(Duration::from_millis(300), leases.renew(&lease, ttl())).await;
    assert!(renewal.is_err(), "the renewal waited on the row lock");
    assert_eq!(
        leases.connections_parked(),
        0,
        "a dropped statement's connection is not kept"
    );
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    assert!(leases.holds(&lease).await.unwrap());
}

#[test]
fn a_lease_value_dropped_outside_any_runtime_hands_its_connections_back_quietly() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kept = runtime.block_on(async {
        let (database, leases) = fresh(1).await?;
        leases
            .acquire_lease(&scope(), &Owner::generate(), ttl())
            .await
            .unwrap();
        assert_eq!(leases.connections_parked(), 1);
        Some((database, leases))
    });
    drop(runtime);
    // sqlx's own return path would panic here (it spawns onto a runtime);
    // the kept connection is detached and closed instead.
    drop(kept);
}

#[tokio::test]
async fn a_statement_finishing_after_the_pool_closed_is_not_kept() {
    let Some((database, leases, lease)) = leased(2, KEEP_LONG).await else {
        return;
    };
    let mut blocker = lock_lease_row(&database.url, &scope()).await;
    let renewal = tokio::spawn({
        let (leases, lease) = (leases.clone(), lease.clone());
        async move { leases.renew(&lease, ttl()).await }
    });
    // The renewal holds the kept connection, queued behind the row lock.
    let deadline = Instant::now() + Duration::from_secs(5);
    while leases.connections_parked() > 0 {
        assert!(Instant::now() < deadline, "the renewal never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The pool's own close waits for the checked-out connection; the
    // renewal then completes and must hand it back, not keep it for 60 s.
    let closing = tokio::spawn({
        let pool = leases.pool().clone();
        async move { pool.close().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    renewal.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(2), closing)
        .await
        .expect("close finishes once the statement's connection is handed back")
        .unwrap();
    assert_eq!(leases.connections_parked(), 0);
}
