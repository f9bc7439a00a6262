//! A lease written outside leaseproof, the way many libraries write one: a
//! `foreign_lock` row per name, taken in a transaction that reads the row
//! `FOR UPDATE` and then decides in Rust, with a fencing token in the row.
//!
//! It is here to be judged, not used: leaseproof's race drivers take it
//! through [`LeasePort`] and [`RaceSubject`] exactly as they take the
//! reference lease, and the one checker judges its histories. The fence is
//! configurable so the harness can show what it catches: [`Fence::ForUpdate`]
//! keeps the row locked until `COMMIT` (correct); [`Fence::CheckOnly`] reads
//! the row without locking it — a check that is true when it runs and proves
//! nothing at `COMMIT`.

use leaseproof_postgres::errors::{after_send, unavailable};
use leaseproof_postgres::GuardedTable;
use leaseproof_protocol::semantics::GuardedRow;
use leaseproof_protocol::{
    CommitReceipt, CycleFaults, Fencing, FencingToken, GuardedCycle, Lease, LeaseError, LeasePort,
    Owner, Scope, ServerTime, Ttl,
};
use leaseproof_races::race::RaceSubject;
use sqlx::{PgPool, Row as _};

/// How the commit checks the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// `SELECT … FOR UPDATE`: the row stays locked until `COMMIT`.
    ForUpdate,
    /// A plain `SELECT`: the broken fence.
    CheckOnly,
}

/// The foreign lease over one pool.
#[derive(Clone, Debug)]
pub struct ForeignLease {
    pool: PgPool,
    fence: Fence,
}

const CREATE: &str = "\
CREATE TABLE IF NOT EXISTS foreign_lock (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    token      bigint      NOT NULL,
    lock_until timestamptz NOT NULL
)";

/// µs since the epoch of a timestamptz expression.
macro_rules! micros {
    ($expression:literal) => {
        concat!("(extract(epoch FROM ", $expression, ") * 1000000)::int8")
    };
}

impl ForeignLease {
    /// The lease over `pool`, fencing with `fence`.
    pub fn new(pool: PgPool, fence: Fence) -> ForeignLease {
        ForeignLease { pool, fence }
    }

    fn lease(scope: &Scope, row: &sqlx::postgres::PgRow) -> Result<Lease, LeaseError> {
        Ok(Lease::from_server_reply(
            scope.clone(),
            Owner::new(row.get::<String, _>("holder"))?,
            FencingToken(row.get("token")),
            ServerTime::from_micros(row.get("granted_at_us")),
            ServerTime::from_micros(row.get("lock_until_us")),
        ))
    }
}

impl LeasePort for ForeignLease {
    async fn ensure_schema(&self) -> Result<(), LeaseError> {
        super::common::ensure_tables(&self.pool, CREATE).await
    }

    async fn acquire(&self, scope: &Scope, owner: &Owner, ttl: Ttl) -> Result<Lease, LeaseError> {
        let mut transaction = self.pool.begin().await.map_err(unavailable)?;
        sqlx::query(
            "INSERT INTO foreign_lock (name, holder, token, lock_until) \
             VALUES ($1, '', 0, '-infinity') ON CONFLICT (name) DO NOTHING",
        )
        .bind(scope.as_str())
        .execute(&mut *transaction)
        .await
        .map_err(|error| after_send("acquire", error))?;
        let row = sqlx::query(concat!(
            "SELECT holder, token, lock_until > now() AS live FROM foreign_lock ",
            "WHERE name = $1 FOR UPDATE"
        ))
        .bind(scope.as_str())
        .fetch_one(&mut *transaction)
        .await
        .map_err(|error| after_send("acquire", error))?;
        let (holder, live): (String, bool) = (row.get("holder"), row.get("live"));
        let statement = if !live {
            // Free: the next token, a fresh grant.
            concat!(
                "UPDATE foreign_lock SET holder = $2, token = token + 1, ",
                "lock_until = now() + $3 * interval '1 microsecond' WHERE name = $1 ",
                "RETURNING holder, token, ",
                "(extract(epoch FROM now()) * 1000000)::int8 AS granted_at_us, ",
                "(extract(epoch FROM lock_until) * 1000000)::int8 AS lock_until_us"
            )
        } else if holder == owner.as_str() {
            // Ours: idempotent, never shortened. (The grant time is not kept
            // in this design; the statement's now() stands in for it.)
            concat!(
                "UPDATE foreign_lock SET lock_until = greatest(lock_until, ",
                "now() + $3 * interval '1 microsecond') WHERE name = $1 AND holder = $2 ",
                "RETURNING holder, token, ",
                "(extract(epoch FROM now()) * 1000000)::int8 AS granted_at_us, ",
                "(extract(epoch FROM lock_until) * 1000000)::int8 AS lock_until_us"
            )
        } else {
            return Err(LeaseError::Held {
                scope: scope.clone(),
                holder: None,
            });
        };
        let row = sqlx::query(statement)
            .bind(scope.as_str())
            .bind(owner.as_str())
            .bind(ttl.as_micros())
            .fetch_one(&mut *transaction)
            .await
            .map_err(|error| after_send("acquire", error))?;
        let lease = ForeignLease::lease(scope, &row)?;
        transaction
            .commit()
            .await
            .map_err(|error| after_send("acquire", error))?;
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        let row = sqlx::query(concat!(
            "UPDATE foreign_lock SET lock_until = greatest(lock_until, ",
            "now() + $4 * interval '1 microsecond') ",
            "WHERE name = $1 AND holder = $2 AND token = $3 AND lock_until > now() ",
            "RETURNING holder, token, ",
            "(extract(epoch FROM now()) * 1000000)::int8 AS granted_at_us, ",
            "(extract(epoch FROM lock_until) * 1000000)::int8 AS lock_until_us"
        ))
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(lease.token().0)
        .bind(ttl.as_micros())
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| after_send("renew", error))?;
        match row {
            // This design does not keep the grant time: keep ours.
            Some(row) => Ok(super::common::renewed(
                lease,
                ForeignLease::lease(lease.scope(), &row)?,
            )),
            None => Err(LeaseError::lost(lease)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        let released: Option<i64> = sqlx::query_scalar(concat!(
            "UPDATE foreign_lock SET lock_until = now() ",
            "WHERE name = $1 AND holder = $2 AND token = $3 AND lock_until > now() ",
            "RETURNING ",
            micros!("now()")
        ))
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(lease.token().0)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| after_send("release", error))?;
        Ok(released.map(ServerTime::from_micros))
    }

    async fn holds(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let live: Option<bool> = sqlx::query_scalar(
            "SELECT lock_until > now() FROM foreign_lock WHERE name = $1 AND holder = $2 AND token = $3",
        )
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(lease.token().0)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| after_send("holds", error))?;
        Ok(live.unwrap_or(false))
    }

    async fn commit(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        fencing: Fencing,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        let fence = (fencing == Fencing::Fenced).then_some(self.fence);
        self.cycle(lease, cycle, fence, faults).await
    }
}

impl ForeignLease {
    async fn cycle(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        fence: Option<Fence>,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        let mut transaction = self.pool.begin().await.map_err(unavailable)?;
        let rolled_back = |error: sqlx::Error| LeaseError::Database {
            source: Box::new(error),
        };
        let mut fenced_at = ServerTime::from_micros(0);
        if let Some(fence) = fence {
            let statement = match fence {
                Fence::ForUpdate => concat!(
                    "SELECT (extract(epoch FROM now()) * 1000000)::int8 FROM foreign_lock ",
                    "WHERE name = $1 AND holder = $2 AND token = $3 AND lock_until > now() ",
                    "FOR UPDATE"
                ),
                Fence::CheckOnly => concat!(
                    "SELECT (extract(epoch FROM now()) * 1000000)::int8 FROM foreign_lock ",
                    "WHERE name = $1 AND holder = $2 AND token = $3 AND lock_until > now()"
                ),
            };
            let fenced: Option<i64> = sqlx::query_scalar(statement)
                .bind(lease.scope().as_str())
                .bind(lease.owner().as_str())
                .bind(lease.token().0)
                .fetch_optional(&mut *transaction)
                .await
                .map_err(rolled_back)?;
            let Some(at_us) = fenced else {
                return Err(LeaseError::lost(lease));
            };
            fenced_at = ServerTime::from_micros(at_us);
        }
        let seq_first = super::common::write_and_commit(transaction, lease, cycle, faults).await?;
        Ok(CommitReceipt {
            seq_first,
            fenced_at: Some(fenced_at),
        })
    }
}

impl RaceSubject for ForeignLease {
    async fn guarded_rows(&self) -> Result<Vec<GuardedRow>, LeaseError> {
        // The guarded table is the harness's; read it as the harness does.
        GuardedTable::new(self.pool.clone()).rows().await
    }
}
