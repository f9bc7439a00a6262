//! Goal: on the real server, a same-owner acquire or renewal that decides with
//! a stale `now()` never shortens a live grant (the delayed-retry bug; chaos seeds 345 and
//! 1171 found the shape in the simulation).
//!
//! Method: PostgreSQL's `now()` is the start of the statement's transaction.
//! A single statement that queues on a row lock keeps the `now()` it started
//! with, and when the lock's transaction ends every waiter wakes and competes
//! for the row in no promised order — so an older statement of an owner can
//! land after its newer retry, but not on cue. The test forces the same
//! stale `now()` deterministically with an explicit transaction: session S
//! begins (its `now()` is fixed), the library then grants or renews at a later
//! `now()` and the owner is told the later end, and only then does S run the
//! library's own statement ([`sql::ACQUIRE`], [`sql::RENEW`]) and commit. The
//! row's `expires_at` must still be the end the owner was told. A negative
//! control runs the pre-fix statement (`expires_at = EXCLUDED.expires_at`) in
//! the same sequence and shows it does shorten the grant, so the reproduction
//! is real and not vacuous.

use std::time::Duration;

use leaseproof_postgres::{sql, PostgresLeases};
use leaseproof_protocol::{Lease, Owner, Scope, ServerTime, Ttl};
use sqlx::{Connection, Executor, PgConnection};

use crate::fresh;

const TTL_MS: i64 = 10_000;

/// The acquisition before the fix: the same-owner branch assigned the
/// statement's own end, whatever the row said.
fn acquire_before_the_fix() -> String {
    let fixed = "expires_at = greatest(l.expires_at, EXCLUDED.expires_at)";
    assert!(
        sql::ACQUIRE.contains(fixed),
        "the fix is where the test expects it"
    );
    sql::ACQUIRE.replace(fixed, "expires_at = EXCLUDED.expires_at")
}

/// Opens session S and begins its transaction: every statement it runs from
/// now on decides with this `now()`, however late it runs.
async fn stale_session(url: &str) -> (PgConnection, i64) {
    let mut connection = PgConnection::connect(url)
        .await
        .expect("session S connects");
    connection.execute("BEGIN").await.expect("BEGIN");
    let begun_at_us: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000000)::int8")
        .fetch_one(&mut connection)
        .await
        .expect("now()");
    (connection, begun_at_us)
}

/// Session S runs `statement` (an acquisition, `$1` scope `$2` owner `$3` ttl)
/// with its stale `now()`, then commits; returns the `expires_at` it reported.
async fn late_acquire(mut connection: PgConnection, statement: &str, lease: &Lease) -> i64 {
    let (_, _, expires_at_us): (i64, i64, i64) = sqlx::query_as(statement)
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(Ttl::from_millis(TTL_MS).unwrap().as_micros())
        .fetch_one(&mut connection)
        .await
        .expect("the same owner's late acquisition is granted");
    connection.execute("COMMIT").await.expect("COMMIT");
    expires_at_us
}

async fn row_expires_at(leases: &PostgresLeases, scope: &Scope) -> ServerTime {
    leases
        .row(scope)
        .await
        .unwrap()
        .expect("the row exists")
        .expires_at
}

/// Runs the sequence with `statement` as the late acquisition;
/// returns the end the owner was told and the row's end afterwards.
async fn told_then_late(statement: &str) -> Option<(ServerTime, ServerTime, i64)> {
    let (database, leases) = fresh(4).await?;
    let scope = Scope::new("late-statements").unwrap();
    let owner = Owner::generate();
    let ttl = Ttl::from_millis(TTL_MS).unwrap();
    leases.acquire(&scope, &owner, ttl).await.unwrap();
    let (stale, begun_at_us) = stale_session(&database.url).await;
    // The retry that lands first, at a later now(): what the owner is told.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let told = leases.acquire(&scope, &owner, ttl).await.unwrap();
    assert!(told.expires_at().micros > begun_at_us + ttl.as_micros());
    let reported_us = late_acquire(stale, statement, &told).await;
    Some((
        told.expires_at(),
        row_expires_at(&leases, &scope).await,
        reported_us,
    ))
}

#[tokio::test]
async fn a_late_same_owner_acquisition_never_shortens_the_grant_it_was_told() {
    let Some((told, row, reported_us)) = told_then_late(sql::ACQUIRE).await else {
        return;
    };
    assert_eq!(row, told, "the row keeps the end the owner was told");
    assert_eq!(
        reported_us, told.micros,
        "and the late reply reports it too"
    );
}

#[tokio::test]
async fn the_pre_fix_acquisition_shortens_the_grant_when_it_lands_late() {
    let Some((told, row, _)) = told_then_late(&acquire_before_the_fix()).await else {
        return;
    };
    assert!(
        row < told,
        "negative control: the pre-fix statement must move the end back ({row} vs {told})"
    );
}

#[tokio::test]
async fn a_late_renewal_never_shortens_the_grant_and_a_rival_stays_out() {
    let Some((database, leases)) = fresh(4).await else {
        return;
    };
    let scope = Scope::new("late-renewal").unwrap();
    let owner = Owner::generate();
    let ttl = Ttl::from_millis(TTL_MS).unwrap();
    let lease = leases.acquire(&scope, &owner, ttl).await.unwrap();
    let (mut stale, _) = stale_session(&database.url).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let told = leases.renew(&lease, ttl).await.unwrap();
    let late: Option<(i64, i64)> = sqlx::query_as(sql::RENEW)
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(lease.token().0)
        .bind(ttl.as_micros())
        .fetch_optional(&mut stale)
        .await
        .unwrap();
    stale.execute("COMMIT").await.unwrap();
    assert_eq!(
        late.map(|(_, expires_at_us)| expires_at_us),
        Some(told.expires_at().micros)
    );
    assert_eq!(row_expires_at(&leases, &scope).await, told.expires_at());
    let rival = Owner::generate();
    assert!(
        leases.acquire(&scope, &rival, ttl).await.is_err(),
        "still held"
    );
}
