//! `ensure_schema` under concurrent creation, reproduced deterministically
//! with two sessions as DESIGN.md describes: A holds `CREATE TABLE IF NOT
//! EXISTS` open in a transaction, B runs the same statement and blocks on the
//! `pg_type` unique index, A commits, and B fails with 23505 — unless it
//! retries, in which case the retry finds the table.

use std::time::Duration;

use leaseproof_pgcluster::test_database;
use leaseproof_postgres::{sql, PostgresLeases};
use leaseproof_protocol::LeaseError;
use sqlx::{Connection, PgConnection};

/// Waits until some session other than `observer` is blocked on a lock.
async fn wait_for_blocked_session(observer: &mut PgConnection) {
    for _ in 0..500 {
        let blocked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut *observer)
        .await
        .unwrap();
        if blocked > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the second session never blocked on the first one's catalog insert");
}

/// Runs `create` in session B while session A holds the same DDL uncommitted,
/// then commits A and returns B's result.
async fn race_against_open_creation(
    create: impl FnOnce(PostgresLeases) -> tokio::task::JoinHandle<Result<(), LeaseError>>,
) -> Option<(Result<(), LeaseError>, PostgresLeases)> {
    let database = test_database().await?;
    let pool = crate::pool(&database, 2).await;
    let leases = PostgresLeases::new(pool);
    let mut session_a = database.connect().await.unwrap();
    let mut observer = database.connect().await.unwrap();
    let mut transaction = session_a.begin().await.unwrap();
    sqlx::query(sql::CREATE_LEASES)
        .execute(&mut *transaction)
        .await
        .unwrap();
    let session_b = create(leases.clone());
    wait_for_blocked_session(&mut observer).await;
    transaction.commit().await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), session_b)
        .await
        .expect("B finished")
        .unwrap();
    Some((result, leases))
}

#[tokio::test]
async fn ensure_schema_without_retry_fails_on_concurrent_creation() {
    let Some((result, _)) = race_against_open_creation(|leases| {
        tokio::spawn(async move { leases.ensure_schema_once().await })
    })
    .await
    else {
        return;
    };
    let error = result.expect_err("a single attempt racing an open creation must fail");
    assert!(matches!(error, LeaseError::Schema { .. }), "{error:?}");
    assert_eq!(
        PostgresLeases::sqlstate(&error).as_deref(),
        Some("23505"),
        "{error}"
    );
    assert!(
        format!("{error}").contains("pg_type_typname_nsp_index"),
        "{error}"
    );
}

#[tokio::test]
async fn ensure_schema_survives_concurrent_creation() {
    let Some((result, leases)) = race_against_open_creation(|leases| {
        tokio::spawn(async move { leases.ensure_schema().await })
    })
    .await
    else {
        return;
    };
    result.expect("the retry finds the table the other session created");
    // And the table is usable.
    let scope = leaseproof_protocol::Scope::new("job").unwrap();
    let owner = leaseproof_protocol::Owner::generate();
    leases
        .acquire(
            &scope,
            &owner,
            leaseproof_protocol::Ttl::from_millis(1_000).unwrap(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn ensure_schema_is_idempotent_across_time() {
    let Some(database) = test_database().await else {
        return;
    };
    let leases = PostgresLeases::new(crate::pool(&database, 1).await);
    for _ in 0..3 {
        leases.ensure_schema().await.unwrap();
        leases.ensure_schema_once().await.unwrap();
    }
}
