//! What both foreign designs share: creating their lock table and the
//! guarded table the harness reads back, the guarded writes and their
//! commit, and reading a renewal's reply.

use leaseproof_postgres::errors::after_send;
use leaseproof_postgres::GuardedTable;
use leaseproof_protocol::{CycleFaults, CyclePoint, GuardedCycle, Lease, LeaseError};
use sqlx::{PgPool, Postgres, Transaction};

/// Runs `create` (a `CREATE TABLE IF NOT EXISTS`), retrying once: workers
/// start together, and two sessions creating one table at the same instant
/// collide on `pg_type` — the retry finds the table there.
pub async fn ensure_tables(pool: &PgPool, create: &str) -> Result<(), LeaseError> {
    if sqlx::query(create).execute(pool).await.is_err() {
        sqlx::query(create)
            .execute(pool)
            .await
            .map_err(|error| LeaseError::Schema {
                source: Box::new(error),
            })?;
    }
    GuardedTable::new(pool.clone()).ensure().await
}

/// The lease a renewal of `lease` answered with `reply`: the reply's token
/// and end, `lease`'s grant time — neither design keeps the time of the
/// grant, and a reply stamped at the renewal would move the grant's start.
pub fn renewed(lease: &Lease, reply: Lease) -> Lease {
    Lease::from_server_reply(
        reply.scope().clone(),
        reply.owner().clone(),
        reply.token(),
        lease.granted_at(),
        reply.expires_at(),
    )
}

/// The cycle's rows written in `transaction` (already fenced, or not: the
/// design decides), then `COMMIT`; the first row's `seq`. An error before
/// `COMMIT` was sent rolls back; one after it leaves the outcome unknown.
pub async fn write_and_commit(
    mut transaction: Transaction<'_, Postgres>,
    lease: &Lease,
    cycle: GuardedCycle,
    faults: &dyn CycleFaults,
) -> Result<i64, LeaseError> {
    faults.at(CyclePoint::Fenced).await;
    let seq_first = GuardedTable::insert(&mut transaction, lease, cycle)
        .await
        .map_err(|error| LeaseError::Database {
            source: Box::new(error),
        })?;
    faults.at(CyclePoint::Written).await;
    transaction
        .commit()
        .await
        .map_err(|error| after_send("commit", error))?;
    Ok(seq_first)
}
