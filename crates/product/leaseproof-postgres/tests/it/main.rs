//! The reference lease against a real PostgreSQL server.
//!
//! Goal: prove the SQL does what the protocol says, on the server users run.
//! Method: every test gets a fresh database on a throwaway cluster (or
//! `DATABASE_URL`); with none available the tests print a loud skip line, and
//! fail instead under `LEASEPROOF_REQUIRE_PG=1` (CI). Invariants checked: the
//! SQL decides exactly like the executable semantics (differential), tokens
//! never go backwards or restart, a loser writes nothing, the fence makes a
//! takeover wait for the commit, a stale commit is refused and rolled back,
//! and the schema survives concurrent creation.

mod arbitrary_input;
mod connection_loss;
mod cycle_work;
mod differential;
mod election;
mod fence;
mod guard;
mod input;
mod late_statements;
mod metrics;
mod operations;
mod read_first;
mod reuse;
mod round_trips;
mod schema;
mod schema_failures;
mod wait;

use leaseproof_pgcluster::{test_database, TestDatabase};
use leaseproof_postgres::PostgresLeases;
use sqlx::PgPool;

/// A fresh database with the lease table, and a pool of `connections` on it.
/// `None` when no PostgreSQL is available (the skip line is already printed).
pub async fn fresh(connections: u32) -> Option<(TestDatabase, PostgresLeases)> {
    let database = test_database().await?;
    let pool = pool(&database, connections).await;
    let leases = PostgresLeases::new(pool);
    leases
        .ensure_schema()
        .await
        .expect("ensure_schema on a fresh database");
    Some((database, leases))
}

/// A pool on `database` built as users build it ([`PostgresLeases::pool_options`]),
/// with a short acquire timeout, so exhaustion is an error quickly.
pub async fn pool(database: &TestDatabase, connections: u32) -> PgPool {
    PostgresLeases::pool_options()
        .max_connections(connections)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(&database.url)
        .await
        .expect("connect to the test database")
}
