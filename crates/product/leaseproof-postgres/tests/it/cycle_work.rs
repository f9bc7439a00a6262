//! What a commit cycle's `work` may do with the fenced transaction.
//!
//! Goal: a cycle reports committed only writes that committed inside the
//! transaction its fence held. Method: works that nest a transaction, end
//! the fenced one by hand (`COMMIT`, `ROLLBACK`, `COMMIT; BEGIN`) or leak
//! a transaction they began, each on a one-connection pool; the rows show
//! what committed, a second cycle shows the connection came back clean.
//! Invariant: a nested transaction is a savepoint; every other way out of
//! the fenced transaction fails the cycle with `TransactionDomain`, and a
//! leaked one commits nothing and keeps no row lock.

use std::time::Duration;

use futures_core::future::BoxFuture;
use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::{Lease, LeaseError, Ttl};
use sqlx::{Connection as _, PgConnection};

use crate::round_trips::leased_with_results;

#[tokio::test]
async fn a_transaction_the_work_begins_is_a_savepoint_inside_the_fenced_one() {
    let Some((_database, leases, lease)) = leased_with_results("nested-transaction").await else {
        return;
    };
    leases
        .commit_cycle(&lease, |connection| nest(connection, false))
        .await
        .unwrap();
    // As a savepoint: the inner rollback undid 2 alone. Had the inner
    // `begin` been a second `BEGIN`, its rollback would have ended the
    // fenced transaction (1 lost, the fence gone) and 3 would have
    // committed on its own, unfenced.
    assert_eq!(values(&leases).await, [1, 3]);

    // And the fenced transaction is still the one that decides: the same
    // work failing at its end commits nothing, 1 and 3 included.
    let failed = leases
        .commit_cycle(&lease, |connection| nest(connection, true))
        .await;
    assert!(matches!(failed, Err(CycleError::Work(_))), "{failed:?}");
    assert_eq!(values(&leases).await, [1, 3]);
}

/// Writes 1, 2 in a nested transaction rolled back, 3; fails at the end if
/// `fail`.
fn nest(connection: &mut PgConnection, fail: bool) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move {
        insert(connection, 1).await?;
        let mut inner = connection.begin().await?;
        insert(&mut inner, 2).await?;
        inner.rollback().await?;
        insert(connection, 3).await?;
        if fail {
            return Err(sqlx::Error::RowNotFound);
        }
        Ok(())
    })
}

#[tokio::test]
async fn a_work_that_ends_the_fenced_transaction_itself_fails_the_cycle() {
    // (what the work sends between its two writes, what stays committed)
    let cases: [(&str, &[i32]); 3] = [
        ("COMMIT", &[1, 2]),
        ("ROLLBACK", &[2]),
        // Its own transaction, rolled back by the cycle, 2 with it.
        ("COMMIT; BEGIN", &[1]),
    ];
    for (index, (between, committed)) in cases.into_iter().enumerate() {
        let scope = format!("ends-by-hand-{index}");
        let Some((_database, leases, lease)) = leased_with_results(&scope).await else {
            return;
        };
        let cycle = leases
            .commit_cycle(&lease, |connection| end_by_hand(connection, between))
            .await;
        assert!(
            matches!(
                cycle,
                Err(CycleError::Lease(LeaseError::TransactionDomain { .. }))
            ),
            "{between}: {cycle:?}"
        );
        assert_eq!(values(&leases).await, committed, "{between}");
        // The connection came back outside any transaction: the next cycle
        // on the one-connection pool commits.
        next_cycle_commits(&leases, &lease).await;
    }
}

/// Writes 1, sends `between`, writes 2.
fn end_by_hand<'c>(
    connection: &'c mut PgConnection,
    between: &'static str,
) -> BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move {
        insert(connection, 1).await?;
        sqlx::Executor::execute(&mut *connection, between).await?;
        insert(connection, 2).await
    })
}

#[tokio::test]
async fn a_work_that_leaks_a_transaction_commits_nothing_and_keeps_no_row_lock() {
    let Some((_database, leases, lease)) = leased_with_results("leaked-transaction").await else {
        return;
    };
    let cycle = leases
        .commit_cycle(&lease, |connection| {
            Box::pin(async move {
                insert(connection, 1).await?;
                let mut inner = connection.begin().await?;
                insert(&mut inner, 2).await?;
                // The cycle's COMMIT now only releases this savepoint.
                std::mem::forget(inner);
                Ok::<(), sqlx::Error>(())
            })
        })
        .await;
    assert!(
        matches!(
            cycle,
            Err(CycleError::Lease(LeaseError::TransactionDomain { .. }))
        ),
        "{cycle:?}"
    );
    assert_eq!(values(&leases).await, [] as [i32; 0]);
    // The fenced transaction's row lock went with its connection: a renewal
    // (which updates the lease row) does not wait for it.
    let renewed = tokio::time::timeout(
        Duration::from_secs(2),
        leases.renew(&lease, Ttl::from_millis(60_000).unwrap()),
    )
    .await
    .expect("the row lock of the leaked transaction was released");
    renewed.unwrap();
    next_cycle_commits(&leases, &lease).await;
}

async fn next_cycle_commits(leases: &PostgresLeases, lease: &Lease) {
    leases
        .commit_cycle(lease, |connection| {
            Box::pin(async move {
                sqlx::query("DELETE FROM results")
                    .execute(&mut *connection)
                    .await?;
                insert(connection, 10).await
            })
        })
        .await
        .unwrap();
    assert_eq!(values(leases).await, [10]);
}

async fn insert(connection: &mut PgConnection, value: i32) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO results VALUES ($1)")
        .bind(value)
        .execute(connection)
        .await
        .map(|_| ())
}

async fn values(leases: &PostgresLeases) -> Vec<i32> {
    sqlx::query_scalar("SELECT value FROM results ORDER BY value")
        .fetch_all(leases.pool())
        .await
        .unwrap()
}
