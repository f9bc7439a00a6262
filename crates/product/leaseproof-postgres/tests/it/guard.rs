//! The lease guard on the real server: the keep-alive holds a lease past its
//! TTL on the server's clock, *lost* fires the moment the lease is gone or
//! may be, release hands it over at once, drop stops renewing, and a future
//! dropped mid-acquire, mid-renew or mid-commit leaks no connection and leaves
//! no lease believed held that is not.
//!
//! Method: TTLs of a few hundred ms, a rival's acquisition as the judge of
//! who holds the scope, and another session's row lock (an open `SELECT …
//! FOR UPDATE`) to hold a statement mid-flight while its future is dropped.
//! Invariant: the guard never believes past what the server confirmed — its
//! *lost* fires no later than `sent + ttl` of the last confirmed renewal, also
//! while a renewal hangs.

use std::time::{Duration, Instant};

use leaseproof_postgres::keep_alive::LostReason;
use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::{InvalidInput, LeaseError, Owner, Scope, Ttl};
use sqlx::PgConnection;

use crate::connection_loss::{backends, lock_lease_row, lock_waiter, own_pid};
use crate::fresh;

fn ttl_ms(millis: i64) -> Ttl {
    Ttl::from_millis(millis).unwrap()
}

async fn rival_is_refused(leases: &PostgresLeases, scope: &Scope) -> bool {
    matches!(
        leases
            .acquire(scope, &Owner::generate(), ttl_ms(60_000))
            .await,
        Err(LeaseError::Held { .. })
    )
}

/// *Lost* fires at `sent + ttl`, and the server started the TTL a little
/// later (when the statement ran): within a round trip it agrees the lease
/// is over — a second, on a loaded machine.
async fn server_agrees_soon(leases: &PostgresLeases, lease: &leaseproof_protocol::Lease) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while leases.holds(lease).await.unwrap() {
        assert!(
            Instant::now() < deadline,
            "the server still holds it a second after lost"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn the_keep_alive_holds_the_lease_past_its_ttl_and_release_hands_it_over_at_once() {
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    let scope = Scope::new("keep-alive").unwrap();
    let guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(1_000))
        .await
        .unwrap()
        .with_keep_alive();
    let granted_until = guard.expires_at();
    // Renewed every 333 ms: a loaded machine may delay one by 600 ms.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(rival_is_refused(&leases, &scope).await, "held past 2 TTLs");
    assert!(!guard.is_lost());
    assert!(guard.expires_at() > granted_until, "the keep-alive renewed");
    let shown = format!("{guard:?}");
    assert!(shown.starts_with("LeaseGuard {"), "{shown}");
    assert!(shown.contains("lost: None"), "{shown}");
    assert!(shown.contains(scope.as_str()), "{shown}");
    let row = leases.row(&scope).await.unwrap().unwrap();
    assert_eq!(row.token, guard.token(), "renewals keep the token");
    assert_eq!(
        row.expires_at,
        guard.expires_at(),
        "the guard knows the server's end"
    );

    let released_at = guard.release().await.unwrap();
    assert!(released_at.is_some());
    let rival = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .expect("free the moment it is released");
    assert!(rival.token() > row.token);
}

#[tokio::test]
async fn lost_fires_when_a_renewal_finds_the_lease_taken_over() {
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    let scope = Scope::new("taken-over").unwrap();
    let guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(1_500))
        .await
        .unwrap()
        .with_keep_alive();
    assert!(leases.force_expire(&scope).await.unwrap());
    let rival = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap();
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost fires");
    // `Gone` is a renewal's finding (every 500 ms); the deadline would say
    // `Unconfirmed`, and only at the 1.5 s TTL.
    assert_eq!(reason, LostReason::Gone, "after {:?}", started.elapsed());
    assert!(guard.is_lost());
    assert!(*guard.lost_signal().borrow());
    // The belief and the fence agree: the guard's commit is refused.
    let refused = guard
        .commit_cycle(|_connection: &mut PgConnection| Box::pin(async { Ok::<_, sqlx::Error>(()) }))
        .await;
    assert!(matches!(
        refused,
        Err(CycleError::Lease(LeaseError::Lost { .. }))
    ));
    assert_eq!(
        guard.release().await.unwrap(),
        None,
        "nothing of the rival's is touched"
    );
    assert!(leases.holds(&rival).await.unwrap());
}

#[tokio::test]
async fn lost_fires_at_the_deadline_while_a_renewal_hangs() {
    // A pool of one: the test takes the only connection, so every renewal
    // waits for the pool (5 s timeout) — far past the 600 ms TTL.
    let Some((_database, leases)) = fresh(1).await else {
        return;
    };
    let scope = Scope::new("unreachable").unwrap();
    let sent = Instant::now();
    let guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(600))
        .await
        .unwrap()
        .with_keep_alive();
    let taken = leases.pool().acquire().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost fires before the hanging renewal gives up");
    let at = sent.elapsed();
    assert_eq!(reason, LostReason::Unconfirmed);
    assert!(
        at >= Duration::from_millis(600),
        "not before the TTL: {at:?}"
    );
    assert!(
        // The hanging renewal gives up only at the pool's 5 s timeout: 2.5 s
        // leaves a loaded machine room and still tells the two apart.
        at < Duration::from_millis(2_500),
        "at the TTL, not when the renewal fails: {at:?}"
    );
    drop(taken);
    server_agrees_soon(&leases, &guard).await;
}

#[tokio::test]
async fn without_a_keep_alive_lost_fires_when_the_ttl_runs_out_and_renew_moves_it() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("no-keep-alive").unwrap();
    let sent = Instant::now();
    let mut guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(1_000))
        .await
        .unwrap();
    let lost = guard.lost_signal();
    tokio::time::sleep(Duration::from_millis(600)).await;
    guard.renew().await.unwrap();
    assert!(!*lost.borrow());
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost fires");
    assert_eq!(reason, LostReason::Unconfirmed);
    let at = sent.elapsed();
    assert!(
        at >= Duration::from_millis(1_600),
        "the renewal moved the deadline: {at:?}"
    );
    assert!(*lost.borrow(), "the receiver handed out before sees it");
    server_agrees_soon(&leases, &guard).await;
}

#[tokio::test]
async fn a_dropped_guard_stops_renewing_and_the_lease_ends_at_its_ttl() {
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    let scope = Scope::new("dropped").unwrap();
    let guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(1_000))
        .await
        .unwrap()
        .with_keep_alive();
    // Between the renewals at 333 ms and 667 ms: none is in flight at the drop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(guard);
    let row = leases.row(&scope).await.unwrap().unwrap();
    assert!(
        rival_is_refused(&leases, &scope).await,
        "dropping sends nothing"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = leases.row(&scope).await.unwrap().unwrap();
    assert_eq!(
        after.expires_at, row.expires_at,
        "no renewal after the drop"
    );
    leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .expect("taken over once its TTL ran out");
}

#[tokio::test]
async fn a_keep_alive_interval_not_below_the_ttl_is_refused() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("interval").unwrap();
    let owner = Owner::generate();
    for interval in [
        Duration::ZERO,
        Duration::from_millis(1_000),
        Duration::from_secs(5),
    ] {
        let guard = leases.acquire(&scope, &owner, ttl_ms(1_000)).await.unwrap();
        let refused = guard.with_keep_alive_every(interval).unwrap_err();
        assert!(
            matches!(
                refused,
                LeaseError::Invalid(InvalidInput::KeepAliveInterval {
                    ttl_us: 1_000_000,
                    ..
                })
            ),
            "{interval:?}: {refused}"
        );
    }
    let guard = leases.acquire(&scope, &owner, ttl_ms(1_000)).await.unwrap();
    assert!(guard
        .with_keep_alive_every(Duration::from_millis(999))
        .is_ok());
}

/// The lease database's client backends other than `except`, once they
/// number at most `max` (waits up to 5 s): the pool gave its connections back.
async fn backends_settle(admin: &mut PgConnection, database: &str, except: i32, max: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let count = backends(admin, database, except).await.len();
        if count <= max {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{count} backends, at most {max} expected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_acquire_dropped_mid_statement_returns_no_guard_and_leaks_no_connection() {
    let Some((database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("cancelled-acquire").unwrap();
    let first = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap()
        .into_lease();
    assert!(leases.force_expire(&scope).await.unwrap());
    // The takeover's `ON CONFLICT DO UPDATE` queues behind this row lock.
    let mut blocker = lock_lease_row(&database.url, &scope).await;
    let blocker_pid = own_pid(&mut blocker).await;
    let owner = Owner::generate();
    let acquisition = tokio::spawn({
        let (leases, scope, owner) = (leases.clone(), scope.clone(), owner.clone());
        async move {
            leases
                .acquire(&scope, &owner, ttl_ms(60_000))
                .await
                .map(drop)
        }
    });
    let mut admin = database.connect().await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    lock_waiter(&mut admin, &database.name, [admin_pid, blocker_pid]).await;
    acquisition.abort();
    assert!(
        acquisition.await.unwrap_err().is_cancelled(),
        "no guard was returned"
    );
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    drop(blocker);

    // The pool works again with no more connections than it may have.
    for _ in 0..4 {
        assert!(!leases.holds(&first).await.unwrap());
    }
    backends_settle(&mut admin, &database.name, admin_pid, 2).await;
    // The dropped statement may have landed: if so the same owner gets that
    // grant back (idempotent), and a rival waits for its TTL; either way no
    // one believes in a grant the server does not have.
    let again = leases
        .acquire(&scope, &owner, ttl_ms(60_000))
        .await
        .unwrap();
    assert!(again.token() > first.token());
    assert_eq!(
        leases.row(&scope).await.unwrap().unwrap().token,
        again.token()
    );
}

#[tokio::test]
async fn a_renew_dropped_mid_statement_leaves_the_guards_deadline_where_it_was() {
    let Some((database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("cancelled-renew").unwrap();
    let mut guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap();
    let before = guard.expires_at();
    let mut blocker = lock_lease_row(&database.url, &scope).await;
    let renewal = tokio::time::timeout(Duration::from_millis(300), guard.renew()).await;
    assert!(
        renewal.is_err(),
        "the renewal waited on the row lock and was dropped"
    );
    assert_eq!(
        guard.expires_at(),
        before,
        "nothing unconfirmed is believed"
    );
    assert!(!guard.is_lost());
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    // The guard is usable after the cancelled call.
    guard.renew().await.unwrap();
    assert!(guard.expires_at() >= before);
    let mut admin = database.connect().await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    drop(blocker);
    backends_settle(&mut admin, &database.name, admin_pid, 2).await;
}

#[tokio::test]
async fn a_commit_dropped_mid_work_rolls_back_and_releases_the_fence() {
    let Some((database, leases)) = fresh(2).await else {
        return;
    };
    sqlx::query("CREATE TABLE results (value int NOT NULL)")
        .execute(leases.pool())
        .await
        .unwrap();
    let scope = Scope::new("cancelled-commit").unwrap();
    let guard = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap();
    let cycle = guard.commit_cycle(|connection: &mut PgConnection| {
        Box::pin(async move {
            sqlx::query("INSERT INTO results VALUES (1)")
                .execute(&mut *connection)
                .await?;
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, sqlx::Error>(())
        })
    });
    assert!(tokio::time::timeout(Duration::from_millis(300), cycle)
        .await
        .is_err());
    // The fence's row lock went with the dropped transaction: neither an
    // operator's expiry nor a takeover queues behind it.
    let expired = tokio::time::timeout(Duration::from_secs(2), leases.force_expire(&scope))
        .await
        .expect("force_expire does not wait for a dropped cycle");
    assert!(expired.unwrap());
    let rival = tokio::time::timeout(
        Duration::from_secs(2),
        leases.acquire(&scope, &Owner::generate(), ttl_ms(60_000)),
    )
    .await
    .expect("the takeover does not wait for a dropped cycle")
    .unwrap();
    assert!(rival.token() > guard.token());
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM results")
        .fetch_one(leases.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0, "the dropped cycle wrote nothing");
    let mut admin = database.connect().await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    backends_settle(&mut admin, &database.name, admin_pid, 2).await;
}
