//! [`HarnessPort`]: the reference lease as the harness's worker loop drives it.

use futures_core::future::BoxFuture;
use leaseproof_protocol::semantics::GuardedRow;
use leaseproof_protocol::{
    client, CommitReceipt, CycleFaults, CyclePoint, Fencing, FencingToken, GuardedCycle, Lease,
    LeaseError, LeasePort, Owner, Scope, ServerTime, Ttl,
};
use sqlx::PgConnection;

use crate::errors::{connection_lost, unavailable, without_effect};
use crate::statements::{Arg, Statements};
use crate::{sql, CycleError, GuardedInsert, PostgresLeases};

/// [`PostgresLeases`] plus the harness's guarded table (`leaseproof_guarded`),
/// implementing [`LeasePort`] so the same worker loop runs here and in the
/// simulation. The guarded table is test infrastructure, which is why it is
/// not part of `PostgresLeases` itself.
#[derive(Clone, Debug)]
pub struct HarnessPort {
    /// The lease the port drives (its fence mode is the cycle's).
    pub leases: PostgresLeases,
    commit_path: CommitPath,
}

/// How the port's guarded writes commit: both are the library's code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommitPath {
    /// [`PostgresLeases::commit_cycle_at`]: `BEGIN`, the fence in the leases'
    /// [`FenceMode`](crate::FenceMode), the writes, `COMMIT`.
    #[default]
    Cycle,
    /// [`PostgresLeases::guarded_insert`]: the fence and the writes in one
    /// statement. The cycle's fault points both fall before the statement
    /// (there is no moment between its fence and its write).
    SingleStatement,
}

impl HarnessPort {
    /// A port over `leases`, committing through the commit cycle.
    pub fn new(leases: PostgresLeases) -> HarnessPort {
        HarnessPort {
            leases,
            commit_path: CommitPath::Cycle,
        }
    }

    /// The same port committing through `path`.
    pub fn with_commit_path(mut self, path: CommitPath) -> HarnessPort {
        self.commit_path = path;
        self
    }

    /// The guarded table's rows in commit (`seq`) order: the ground truth the
    /// checker compares reported commits with.
    pub async fn guarded_rows(&self) -> Result<Vec<GuardedRow>, LeaseError> {
        GuardedTable::over(self.leases.clone()).rows().await
    }
}

/// The harness's guarded table (`leaseproof_guarded`) on a pool of your own:
/// what a port for a foreign design needs to create it, write its rows under
/// the design's own lock, and read them back as the checker's ground truth —
/// without a lease table or a [`HarnessPort`].
#[derive(Clone, Debug)]
pub struct GuardedTable {
    // Only for its pool handling and its schema creation with retry: no
    // lease table is created or read.
    leases: PostgresLeases,
}

impl GuardedTable {
    /// The guarded table on `pool`.
    pub fn new(pool: sqlx::PgPool) -> GuardedTable {
        GuardedTable::over(PostgresLeases::new(pool))
    }

    fn over(leases: PostgresLeases) -> GuardedTable {
        GuardedTable { leases }
    }

    /// Creates the table if it does not exist — safe when many workers start
    /// at once (a concurrent creation is retried once) — and checks its
    /// columns.
    pub async fn ensure(&self) -> Result<(), LeaseError> {
        self.leases
            .ensure_table(
                sql::CREATE_GUARDED,
                "leaseproof_guarded",
                sql::GUARDED_COLUMNS,
            )
            .await
    }

    /// Writes `cycle.items` rows for `lease` on `connection` — inside the
    /// caller's transaction, after the design's fence — and returns the
    /// first row's `seq`.
    pub async fn insert(
        connection: &mut PgConnection,
        lease: &Lease,
        cycle: GuardedCycle,
    ) -> Result<i64, sqlx::Error> {
        insert_guarded(connection, Statements::Prepared, lease.clone(), cycle).await
    }

    /// The rows in commit (`seq`) order, with their commit times where the
    /// server tracks them.
    pub async fn rows(&self) -> Result<Vec<GuardedRow>, LeaseError> {
        let mut connection = self.leases.connection().await?;
        let rows: Vec<GuardedRecord> = self
            .leases
            .statements()
            .fetch_all(&mut connection, sql::SELECT_GUARDED, &[])
            .await
            .map_err(without_effect)?;
        self.leases.park(connection);
        rows.into_iter()
            .map(
                |(seq, scope, owner, token, cycle_id, item, written_at_us, committed_at_us)| {
                    Ok(GuardedRow {
                        scope: Scope::new(scope)?,
                        owner: Owner::new(owner)?,
                        token: FencingToken(token),
                        cycle_id,
                        item,
                        seq,
                        written_at: ServerTime::from_micros(written_at_us),
                        committed_at: committed_at_us.map(ServerTime::from_micros),
                    })
                },
            )
            .collect()
    }
}

/// A row of `sql::SELECT_GUARDED`: seq, scope, owner, token, cycle_id, item,
/// written_at and (with `track_commit_timestamp`) committed_at, in µs.
type GuardedRecord = (i64, String, String, i64, i64, i32, i64, Option<i64>);

fn insert_guarded(
    connection: &mut PgConnection,
    statements: Statements,
    lease: Lease,
    cycle: GuardedCycle,
) -> BoxFuture<'_, Result<i64, sqlx::Error>> {
    Box::pin(async move {
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
            Arg::Int8(cycle.cycle_id),
            Arg::Int4(i32::try_from(cycle.items).expect("items per cycle fit i32")),
        ];
        let seqs: Vec<(i64,)> = statements
            .fetch_all(connection, sql::INSERT_GUARDED, &args)
            .await?;
        Ok(seqs.first().map_or(0, |(seq,)| *seq))
    })
}

impl LeasePort for HarnessPort {
    async fn ensure_schema(&self) -> Result<(), LeaseError> {
        self.leases.ensure_schema().await?;
        GuardedTable::over(self.leases.clone()).ensure().await
    }

    async fn acquire(&self, scope: &Scope, owner: &Owner, ttl: Ttl) -> Result<Lease, LeaseError> {
        self.leases.acquire_lease(scope, owner, ttl).await
    }

    async fn renew(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        self.leases.renew(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        self.leases.release(lease).await
    }

    async fn holds(&self, lease: &Lease) -> Result<bool, LeaseError> {
        self.leases.holds(lease).await
    }

    async fn commit(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        fencing: Fencing,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        if fencing == Fencing::Unfenced {
            return self.commit_unfenced(lease, cycle, faults).await;
        }
        if self.commit_path == CommitPath::SingleStatement {
            return self.commit_single_statement(lease, cycle, faults).await;
        }
        // The library's own commit cycle, exactly as users call it: a bug in
        // the fence, the aborted-transaction probe or the commit mapping is a
        // bug every race and conformance check runs into. The faults run
        // inside the caller's work, which `commit_cycle` runs after the fence
        // and before its probe and COMMIT: exactly the stretch the row lock
        // must cover.
        let guarded = lease.clone();
        let statements = self.leases.statements();
        let after_fence = faults.at(CyclePoint::Fenced);
        let after_writes = faults.at(CyclePoint::Written);
        let committed = self
            .leases
            .commit_cycle_at(lease, move |connection| {
                Box::pin(async move {
                    after_fence.await;
                    let seq_first = insert_guarded(connection, statements, guarded, cycle).await?;
                    after_writes.await;
                    Ok(seq_first)
                })
            })
            .await;
        match committed {
            Ok((seq_first, fenced_at)) => Ok(CommitReceipt {
                seq_first,
                fenced_at: Some(fenced_at),
            }),
            Err(CycleError::Lease(error)) => Err(error),
            // COMMIT was never sent, so the transaction rolled back: a
            // definite failure either way. Over a lost connection it is typed
            // as the fence types it (`Unavailable`: the server went away,
            // nothing took effect); with the pool users get (no ping on
            // checkout) a restarted server surfaces exactly here.
            Err(CycleError::Work(error)) if connection_lost(&error) => Err(unavailable(error)),
            Err(CycleError::Work(error)) => Err(client::broken_exchange(
                "commit",
                client::Broke::BeforeCommit,
                Box::new(error),
            )),
        }
    }
}

impl HarnessPort {
    /// The cycle's writes without the fence (the `unfenced` configuration).
    async fn commit_unfenced(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        let mut transaction = self.leases.begin().await?;
        faults.at(CyclePoint::Fenced).await;
        let seq_first = insert_guarded(
            transaction.connection(),
            self.leases.statements(),
            lease.clone(),
            cycle,
        )
        .await
        .map_err(|error| LeaseError::Database {
            source: Box::new(error),
        })?;
        faults.at(CyclePoint::Written).await;
        transaction.commit().await?;
        Ok(CommitReceipt {
            seq_first,
            // Nothing fenced it: no fence time to report.
            fenced_at: None,
        })
    }

    /// One cycle as one guarded statement: the library's `guarded_insert`.
    async fn commit_single_statement(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        // Zero rows written is how the statement says "lost".
        assert!(cycle.items > 0, "a single-statement cycle writes rows");
        faults.at(CyclePoint::Fenced).await;
        faults.at(CyclePoint::Written).await;
        let insert = GuardedInsert::with_rows(
            "leaseproof_guarded (scope, owner, token, cycle_id, item, written_at)",
            "lease.scope, lease.owner, lease.token, $4, item, now()",
            "generate_series(0, $5::int - 1) AS item",
        );
        let items = i32::try_from(cycle.items).expect("items per cycle fit i32");
        let written = self
            .leases
            .guarded_insert(lease, &insert, |query| {
                query.bind(cycle.cycle_id).bind(items)
            })
            .await?;
        assert_eq!(written.rows, u64::from(cycle.items), "a cycle is whole");
        Ok(CommitReceipt {
            // The statement returns no `seq`; nothing reads it back.
            seq_first: 0,
            fenced_at: Some(written.fenced_at),
        })
    }
}
