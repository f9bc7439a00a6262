//! What both foreign designs share: creating their lock table and the
//! guarded table the harness reads back, and reading a renewal's reply.

use leaseproof_postgres::GuardedTable;
use leaseproof_protocol::{Lease, LeaseError};
use sqlx::PgPool;

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
