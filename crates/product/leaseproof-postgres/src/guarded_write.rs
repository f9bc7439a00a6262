//! The single-statement guarded write: the fence and the write are one
//! statement, so they are one round trip and one implicit transaction.
//!
//! `INSERT INTO target SELECT … FROM leaseproof_leases AS lease WHERE (the
//! lease is ours, on the server's clock) FOR SHARE OF lease`: the `SELECT`
//! produces the rows only while the grant is current, and its share lock on
//! the lease row lasts until the statement's transaction commits, so a
//! rival's takeover queues behind the commit exactly as behind the
//! transaction fence (`conformance::takeover_finishes_before_commit` runs it).
//! A lost lease inserts nothing and is `Err(Lost)`.

use leaseproof_protocol::{Lease, LeaseError, ServerTime};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row};

use crate::errors::{after_send, connection_lost, unavailable};
use crate::{LeaseTransaction, PostgresLeases};

/// A guarded `INSERT` whose fence is part of the statement. Built only here,
/// so a statement run by [`PostgresLeases::guarded_insert`] always carries
/// the lease check and its lock.
///
/// `$1`, `$2`, `$3` are the lease's scope, owner and token (bound by the
/// library); the caller's parameters start at `$4`. The values may read the
/// lease row as `lease` (`lease.token`, for a fencing column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedInsert {
    sql: String,
}

impl GuardedInsert {
    /// `INSERT INTO {target} SELECT {values} FROM leaseproof_leases AS lease …`:
    /// one row, written while the lease is ours. `target` is a table with an
    /// optional column list (`results (job, token)`), `values` the select list
    /// (`$4, lease.token`).
    pub fn new(target: &str, values: &str) -> GuardedInsert {
        GuardedInsert::build(target, values, None)
    }

    /// [`Self::new`] writing one row per row of `rows`, a `FROM` item joined to
    /// the lease row (`unnest($4::int[]) AS item`, `generate_series(1, $4) AS
    /// n`). The write must insert at least one row: zero rows means lost.
    pub fn with_rows(target: &str, values: &str, rows: &str) -> GuardedInsert {
        GuardedInsert::build(target, values, Some(rows))
    }

    fn build(target: &str, values: &str, rows: Option<&str>) -> GuardedInsert {
        let joined = rows
            .map(|rows| format!(" CROSS JOIN {rows}"))
            .unwrap_or_default();
        // The CTE wraps the insert so one reply carries both the row count
        // and the statement's time, at which the fence held.
        GuardedInsert {
            sql: format!(
                "WITH written AS (\
                 INSERT INTO {target} SELECT {values} \
                 FROM leaseproof_leases AS lease{joined} \
                 WHERE lease.scope = $1 AND lease.owner = $2 AND lease.token = $3 \
                 AND lease.expires_at > statement_timestamp() \
                 FOR SHARE OF lease RETURNING 1) \
                 SELECT count(*)::int8, \
                 (extract(epoch FROM statement_timestamp()) * 1000000)::int8 FROM written"
            ),
        }
    }

    /// The statement as sent.
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// What a guarded insert wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardedWrite {
    /// Rows inserted (at least one).
    pub rows: u64,
    /// The server time at which the statement found the lease ours.
    pub fenced_at: ServerTime,
}

type Bound<'q> = Query<'q, Postgres, PgArguments>;

impl PostgresLeases {
    /// Runs `insert` as its own transaction: the fence and the write in one
    /// statement and one round trip. `bind` binds the caller's parameters
    /// (`$4` on). `Err(Lost)` when the lease is not ours (nothing written);
    /// a reply lost after sending is `OutcomeUnknown` (it may have committed).
    ///
    /// Cancel-safe as a statement is: dropped mid-flight, it commits or not
    /// on the server, and the connection is not leaked.
    ///
    /// With [`Statements::Inline`](crate::Statements::Inline) (behind a
    /// transaction pooler) your bound values still travel as parameters,
    /// which takes two round trips that must reach one server connection:
    /// the statement then runs inside `BEGIN` … `COMMIT`, unnamed.
    pub async fn guarded_insert<'q>(
        &self,
        lease: &Lease,
        insert: &'q GuardedInsert,
        bind: impl FnOnce(Bound<'q>) -> Bound<'q>,
    ) -> Result<GuardedWrite, LeaseError> {
        if self.statements() == crate::Statements::Inline {
            let mut transaction = self.begin().await?;
            let written = self
                .guarded_insert_in(&mut transaction, lease, insert, bind)
                .await?;
            transaction.commit().await?;
            return Ok(written);
        }
        let mut connection = self.connection().await?;
        let written = run(&mut connection, lease, insert, bind, true, true).await?;
        self.park(connection);
        Ok(written)
    }

    /// [`Self::guarded_insert`] inside `transaction` (its other writes commit
    /// with it; the share lock lasts to the transaction's end). Refuses a
    /// transaction of another lease pool (`TransactionDomain`).
    pub async fn guarded_insert_in<'q>(
        &self,
        transaction: &mut LeaseTransaction,
        lease: &Lease,
        insert: &'q GuardedInsert,
        bind: impl FnOnce(Bound<'q>) -> Bound<'q>,
    ) -> Result<GuardedWrite, LeaseError> {
        if !std::sync::Arc::ptr_eq(&self.domain, &transaction.domain) {
            return Err(LeaseError::TransactionDomain {
                reason: "the transaction was begun on another lease pool; the fence and the writes would not commit together",
            });
        }
        // Inside a transaction a pooler keeps the server connection; an
        // unnamed statement leaves nothing behind on it for another client.
        let persistent = self.statements() == crate::Statements::Prepared;
        run(
            transaction.connection(),
            lease,
            insert,
            bind,
            false,
            persistent,
        )
        .await
    }
}

async fn run<'q>(
    connection: &mut PgConnection,
    lease: &Lease,
    insert: &'q GuardedInsert,
    bind: impl FnOnce(Bound<'q>) -> Bound<'q>,
    commits: bool,
    persistent: bool,
) -> Result<GuardedWrite, LeaseError> {
    let query = sqlx::query(insert.sql())
        .persistent(persistent)
        .bind(lease.scope().as_str().to_owned())
        .bind(lease.owner().as_str().to_owned())
        .bind(lease.token().0);
    let row = bind(query)
        .fetch_one(&mut *connection)
        .await
        .map_err(|error| map_error(error, commits))?;
    let decode = |error| LeaseError::Database {
        source: Box::new(error),
    };
    let rows: i64 = row.try_get(0).map_err(decode)?;
    let fenced_at_us: i64 = row.try_get(1).map_err(decode)?;
    if rows == 0 {
        return Err(LeaseError::lost(lease));
    }
    Ok(GuardedWrite {
        rows: u64::try_from(rows).expect("a count is not negative"),
        fenced_at: ServerTime::from_micros(fenced_at_us),
    })
}

fn map_error(error: sqlx::Error, commits: bool) -> LeaseError {
    if commits {
        // Autocommit: the statement is its own COMMIT, so a reply lost after
        // sending leaves the outcome unknown.
        after_send("guarded_insert", error)
    } else if connection_lost(&error) {
        // Inside a transaction nothing commits with a lost connection.
        unavailable(error)
    } else {
        LeaseError::Database {
            source: Box::new(error),
        }
    }
}
