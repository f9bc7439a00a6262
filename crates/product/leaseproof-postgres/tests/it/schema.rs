//! `ensure_schema` under concurrent creation, reproduced deterministically
//! with two sessions as docs/protocol.md describes: A holds `CREATE TABLE IF NOT
//! EXISTS` open in a transaction, B runs the same statement and blocks on the
//! `pg_type` unique index, A commits, and B fails with 23505 — unless it
//! retries, in which case the retry finds the table.

use leaseproof_pgcluster::test_database;
use leaseproof_postgres::conformance::schema_race;
use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::LeaseError;

async fn race_against_open_creation(
    retry: bool,
) -> Option<(Result<(), LeaseError>, PostgresLeases)> {
    let database = test_database().await?;
    Some(
        schema_race(&database.url, retry)
            .await
            .unwrap_or_else(|error| panic!("{error}")),
    )
}

#[tokio::test]
async fn ensure_schema_without_retry_fails_on_concurrent_creation() {
    let Some((result, _)) = race_against_open_creation(false).await else {
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
    let Some((result, leases)) = race_against_open_creation(true).await else {
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
