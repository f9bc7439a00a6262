//! The guarded transaction: `begin`, the fence (`hold_for_update`), and
//! `commit_cycle`, which runs the caller's writes under it.

use std::fmt;
use std::sync::Arc;

use futures_core::future::BoxFuture;
use leaseproof_protocol::{Lease, LeaseError, ServerTime};
use sqlx::{Connection, PgConnection, Postgres};

use crate::errors::{after_send, connection_lost, sqlstate, unavailable, without_effect};
use crate::reuse::Checkout;
use crate::statements::{begin_with_inline, simple_query, Arg, Statements};
use crate::{observe, sql};

use super::{Domain, PostgresLeases};

/// Which row lock the commit-time fence takes on the lease row. Either way a
/// rival's takeover (and a renewal) queues behind the fenced transaction's
/// commit; they differ in how writers under *one* lease meet each other.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FenceMode {
    /// `SELECT … FOR UPDATE` ([`sql::HOLD_FOR_UPDATE`]): writers under one
    /// lease serialise on its row. The default: also keeps the holder's own
    /// cycles from interleaving.
    #[default]
    Exclusive,
    /// `SELECT … FOR SHARE` ([`sql::HOLD_FOR_SHARE`]): writers under one lease
    /// run side by side. A renewal waits for the writers in flight, so a
    /// keep-alive under a continuous stream of overlapping cycles can be
    /// delayed; give the TTL room for the longest cycle.
    Shared,
}

impl FenceMode {
    /// The fence statement of this mode.
    pub fn statement(self) -> &'static str {
        match self {
            FenceMode::Exclusive => sql::HOLD_FOR_UPDATE,
            FenceMode::Shared => sql::HOLD_FOR_SHARE,
        }
    }

    /// The name the commit cycle prepares [`cycle_fence`] under, once per
    /// session (SQL's `PREPARE`, so a simple query can `EXECUTE` it). It
    /// carries a hash of the statement's text: a session another version
    /// of the library prepared (a pooler's shared server connection) never
    /// runs this version's fence under an old text.
    fn prepared_name(self) -> &'static str {
        static NAMES: std::sync::OnceLock<[String; 2]> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            [FenceMode::Exclusive, FenceMode::Shared].map(|mode| {
                let text = prepared_fence(mode);
                // FNV-1a: stable across builds and platforms, unlike std's hasher.
                let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                    (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
                });
                format!("leaseproof_fence_{hash:016x}")
            })
        });
        match self {
            FenceMode::Exclusive => &names[0],
            FenceMode::Shared => &names[1],
        }
    }
}

/// What a refused cycle fence's error says (SQLSTATE `22P02`).
const CYCLE_FENCE_REFUSED: &str =
    "leaseproof: the commit cycle fence found the lease no longer held";

/// The fence of `mode` as the commit cycle sends it: sqlx's `begin_with`
/// discards rows, so a lease no longer held must be an error. The fence
/// statement is unchanged inside; the `ELSE` arm holds an aggregate, so the
/// planner cannot fold it into an error at plan time. A fence that holds
/// marks its transaction (`leaseproof.cycle`, transaction-local) for
/// [`sql::CYCLE_PROBE`].
fn cycle_fence(mode: FenceMode) -> String {
    format!(
        "SELECT CASE WHEN count(*) = 1 \
         THEN length(set_config('leaseproof.cycle', 'fenced', true)) \
         ELSE ('{CYCLE_FENCE_REFUSED} (' || count(*) || ' rows)')::int END \
         FROM ({}) AS fence",
        mode.statement()
    )
}

/// `BEGIN` and the cycle's fence as one simple query (one round trip).
/// With prepared statements the fence is `EXECUTE`d from the session's
/// SQL-level prepared statement: planning the fence afresh costs more than
/// the round trip it saves (`docs/performance.md`). Behind a pooler in
/// transaction mode ([`Statements::Inline`]) a session's prepared statements
/// may be on another server connection, so the fence is planned each time.
fn begin_and_fence(statements: Statements, mode: FenceMode, args: &[Arg<'_>]) -> String {
    match statements {
        Statements::Prepared => begin_with_inline(
            &format!("EXECUTE {}($1, $2, $3)", mode.prepared_name()),
            args,
        ),
        Statements::Inline => begin_with_inline(&cycle_fence(mode), args),
    }
}

/// The first cycle on a session (or after `DISCARD ALL`) finds no prepared
/// fence (`26000`) inside the transaction it just began: roll that back,
/// prepare, and begin again, in one simple query.
fn prepare_then_begin_and_fence(mode: FenceMode, args: &[Arg<'_>]) -> String {
    format!(
        "ROLLBACK; PREPARE {} {}; {}",
        mode.prepared_name(),
        prepared_fence(mode),
        begin_and_fence(Statements::Prepared, mode, args)
    )
}

/// What `PREPARE <name>` is followed by: the parameter types and the
/// statement, the whole of what the name's hash stands for.
fn prepared_fence(mode: FenceMode) -> String {
    format!("(text, text, int8) AS {}", cycle_fence(mode))
}

/// A transaction begun by [`PostgresLeases::begin`] on the lease pool: the
/// transaction domain the fence and the guarded writes share.
pub struct LeaseTransaction {
    transaction: sqlx::Transaction<'static, Postgres>,
    pub(crate) domain: Arc<Domain>,
}

impl fmt::Debug for LeaseTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseTransaction").finish_non_exhaustive()
    }
}

impl LeaseTransaction {
    /// The connection, for the guarded writes.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.transaction
    }

    /// Commits. A connection lost during `COMMIT` is `OutcomeUnknown`: the
    /// server may have committed before the reply was lost.
    pub async fn commit(self) -> Result<(), LeaseError> {
        self.transaction
            .commit()
            .await
            .map_err(|error| after_send("commit", error))
    }

    /// Rolls back (dropping the transaction also does, without waiting).
    pub async fn rollback(self) -> Result<(), LeaseError> {
        match self.transaction.rollback().await {
            Ok(()) => Ok(()),
            // A dead connection has rolled back by dying.
            Err(error) if connection_lost(&error) => Ok(()),
            Err(error) => Err(LeaseError::Database {
                source: Box::new(error),
            }),
        }
    }
}

/// Why a commit cycle did not commit.
#[derive(Debug)]
pub enum CycleError<E> {
    /// The lease layer refused or failed: `Lost` (the fence found the lease no
    /// longer ours; nothing was written), `Unavailable`, `OutcomeUnknown` (the
    /// commit's reply was lost), ...
    Lease(LeaseError),
    /// The caller's writes failed; the transaction was rolled back.
    Work(E),
}

impl<E: fmt::Display> fmt::Display for CycleError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CycleError::Lease(error) => write!(f, "commit cycle: {error}"),
            CycleError::Work(error) => write!(f, "commit cycle: guarded writes failed: {error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CycleError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CycleError::Lease(error) => Some(error),
            CycleError::Work(error) => Some(error),
        }
    }
}

type ServerIdentity = (String, i64, String, i64);

impl PostgresLeases {
    /// Begins a transaction on the lease pool: the domain in which the fence
    /// and the guarded writes commit together.
    pub async fn begin(&self) -> Result<LeaseTransaction, LeaseError> {
        // sqlx begins an owned transaction only on a connection of its own
        // choosing, never on a parked one: a pool with nothing left to give
        // gets one parked connection back (a round trip later, through its
        // ping) rather than make this wait for the reaper or time out.
        if let Some(parked) = &self.parked {
            let exhausted = self.pool.num_idle() == 0
                && self.pool.size() >= self.pool.options().get_max_connections();
            if exhausted {
                parked.release_one();
            }
        }
        let transaction = self.pool.begin().await.map_err(unavailable)?;
        Ok(LeaseTransaction {
            transaction,
            domain: Arc::clone(&self.domain),
        })
    }

    /// The commit-time fence: whether `lease` is ours, *and* keep it ours until
    /// `transaction` ends. Takes the lease row's lock (`SELECT … FOR UPDATE`,
    /// or `FOR SHARE` under [`FenceMode::Shared`]), so a rival acquisition
    /// queues behind this transaction's commit instead of landing between the
    /// answer and the writes it authorises.
    ///
    /// Refuses (`TransactionDomain`) a transaction begun by another
    /// `PostgresLeases` (another pool): its writes would not commit with the lock.
    pub async fn hold_for_update(
        &self,
        transaction: &mut LeaseTransaction,
        lease: &Lease,
    ) -> Result<bool, LeaseError> {
        Ok(self.fence(transaction, lease).await?.is_some())
    }

    /// [`Self::hold_for_update`] returning the fence's server time, `None` when lost.
    pub async fn fence(
        &self,
        transaction: &mut LeaseTransaction,
        lease: &Lease,
    ) -> Result<Option<ServerTime>, LeaseError> {
        if !Arc::ptr_eq(&self.domain, &transaction.domain) {
            return Err(LeaseError::TransactionDomain {
                reason: "the transaction was begun on another lease pool; the fence and the writes would not commit together",
            });
        }
        fence_on(
            transaction.connection(),
            self.statements,
            lease,
            self.fence_mode,
        )
        .await
    }

    /// The fence on a caller's own connection, for code that manages its own
    /// sqlx transaction (`&mut *tx`). Refuses (`TransactionDomain`) when the
    /// connection is not inside a transaction — the lock would be released with
    /// the statement and the fence would only pretend — or when its database is
    /// not the lease pool's (compared by database, oid, port and server start).
    /// Costs two extra round trips for the domain check; [`Self::begin`] +
    /// [`Self::hold_for_update`] is free of them.
    pub async fn hold_for_update_on(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
    ) -> Result<bool, LeaseError> {
        if !connection.is_in_transaction() {
            return Err(LeaseError::TransactionDomain {
                reason: "not inside a transaction: the row lock would end with the statement",
            });
        }
        let theirs = server_identity(connection, self.statements).await?;
        let mut ours_on = self.connection().await?;
        let ours = server_identity(&mut ours_on, self.statements).await?;
        self.park(ours_on);
        if theirs != ours {
            return Err(LeaseError::TransactionDomain {
                reason: "the transaction is in another database than the lease table's pool",
            });
        }
        Ok(
            fence_on(connection, self.statements, lease, self.fence_mode)
                .await?
                .is_some(),
        )
    }

    /// The fenced commit cycle: begins a transaction on the lease pool, fences,
    /// runs `work` on the same connection, commits. All or nothing: a lost
    /// lease (`CycleError::Lease(Lost)`) or a failing `work` rolls back, and so
    /// does a `work` that swallowed a failed statement (the aborted transaction
    /// is detected before `COMMIT`, which PostgreSQL would silently turn into
    /// `ROLLBACK`: `CycleError::Lease(Database)`, SQLSTATE 25P02). A `work`
    /// leaves the transaction to the cycle: a transaction it begins is a
    /// savepoint, and one that sends `COMMIT` or `ROLLBACK` itself (its later
    /// writes would run unfenced) or leaks a transaction it began fails the
    /// cycle with `CycleError::Lease(TransactionDomain)`.
    ///
    /// ```no_run
    /// # async fn example(leases: leaseproof_postgres::PostgresLeases, lease: leaseproof_protocol::Lease) {
    /// let committed = leases
    ///     .commit_cycle(&lease, |connection| {
    ///         Box::pin(async move {
    ///             sqlx::query("INSERT INTO results VALUES ($1)").bind(42).execute(connection).await
    ///         })
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn commit_cycle<T, E>(
        &self,
        lease: &Lease,
        work: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    ) -> Result<T, CycleError<E>> {
        self.commit_cycle_at(lease, work)
            .await
            .map(|(value, _fenced_at)| value)
    }

    /// [`Self::commit_cycle`], also returning the server time at which the
    /// fence proved the lease ours (the harness records it with the commit).
    /// The harness's guarded writes go through this, so every race and
    /// conformance check drives the commit path users call.
    pub async fn commit_cycle_at<T, E>(
        &self,
        lease: &Lease,
        work: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    ) -> Result<(T, ServerTime), CycleError<E>> {
        let started = std::time::Instant::now();
        let result = self.commit_cycle_unobserved(lease, work).await;
        let outcome = match &result {
            Ok(_) => "committed",
            Err(CycleError::Lease(LeaseError::Lost { .. })) => "lost",
            Err(_) => "error",
        };
        observe::committed(lease, outcome, started.elapsed());
        result
    }

    /// Four round trips at one guarded statement, one more than the same
    /// writes unfenced (`BEGIN`, the writes, `COMMIT`): `BEGIN` and the fence
    /// go as one simple query ([`begin_and_fence`]), then the writes, the
    /// aborted-transaction probe (which also reads the fence's time: `now()`
    /// is the start of the transaction, the instant of that query) and
    /// `COMMIT`. The transaction is sqlx's own (`begin_with`), so a `work`
    /// that begins a transaction of its own gets a savepoint inside the
    /// fenced one, as with any sqlx transaction. Merging the probe into
    /// `COMMIT` would save one more round trip, but only by ending the
    /// transaction behind sqlx's back, which turns such a nested begin into
    /// a second `BEGIN` and its commit into the end of the fence.
    async fn commit_cycle_unobserved<T, E>(
        &self,
        lease: &Lease,
        work: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    ) -> Result<(T, ServerTime), CycleError<E>> {
        let checkout = self.connection().await.map_err(CycleError::Lease)?;
        let mut cycle = OpenCycle {
            checkout: Some(checkout),
        };
        let (result, after) = fenced_transaction(
            cycle.connection(),
            self.statements,
            self.fence_mode,
            lease,
            work,
        )
        .await;
        // A `work` that leaked a transaction it began (`mem::forget`) leaves
        // sqlx one level deep after `COMMIT`, which then only released a
        // savepoint: the fenced transaction, and its row lock, are still open.
        let (result, after) = match after {
            After::Clean if cycle.connection().is_in_transaction() => (
                result.and(Err(CycleError::Lease(LeaseError::TransactionDomain {
                    reason: WORK_LEFT_A_TRANSACTION,
                }))),
                After::Unknown,
            ),
            after => (result, after),
        };
        match after {
            After::Clean => self.park(cycle.finish()),
            After::MaybeAborted => self.end_without_commit(cycle).await,
            // Dropped: closed, the server rolls back with the session.
            After::Unknown => {}
        }
        result
    }

    /// Rolls `cycle` back and keeps its connection; a connection that fails
    /// even that is closed (the server rolls back with the session).
    async fn end_without_commit(&self, mut cycle: OpenCycle) {
        if simple_query(cycle.connection(), sql::ROLLBACK)
            .await
            .is_ok()
        {
            self.park(cycle.finish());
        }
    }
}

/// What a cycle left its connection in.
enum After {
    /// Outside any transaction, as sqlx knows: fit for the next statement.
    Clean,
    /// Outside sqlx's knowledge, perhaps inside an aborted transaction: a
    /// `ROLLBACK` makes it clean.
    MaybeAborted,
    /// Anything else (a lost connection, a failed `COMMIT`): close it.
    Unknown,
}

/// The commit cycle's transaction on `connection`: `BEGIN` with the fence,
/// `work`, the probe, `COMMIT` (see `commit_cycle_unobserved`).
async fn fenced_transaction<T, E>(
    connection: &mut PgConnection,
    statements: Statements,
    mode: FenceMode,
    lease: &Lease,
    work: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
) -> (Result<(T, ServerTime), CycleError<E>>, After) {
    let args = fence_args(lease);
    match connection
        .begin_with(begin_and_fence(statements, mode, &args))
        .await
    {
        Ok(transaction) => return under_fence(transaction, statements, work).await,
        // The session has not prepared the fence (its first cycle, or after
        // `DISCARD ALL`): prepare it and begin again, one round trip more.
        Err(error)
            if statements == Statements::Prepared
                && sqlstate(&error).as_deref() == Some("26000") => {}
        Err(error) => return begin_failed(lease, error),
    }
    match connection
        .begin_with(prepare_then_begin_and_fence(mode, &args))
        .await
    {
        Ok(transaction) => under_fence(transaction, statements, work).await,
        Err(error) => begin_failed(lease, error),
    }
}

/// `work`, the probe and `COMMIT` in the fenced `transaction`.
async fn under_fence<T, E>(
    mut transaction: sqlx::Transaction<'_, Postgres>,
    statements: Statements,
    work: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
) -> (Result<(T, ServerTime), CycleError<E>>, After) {
    let value = match work(&mut transaction).await {
        Ok(value) => value,
        Err(error) => return (Err(CycleError::Work(error)), roll_back(transaction).await),
    };
    // A `work` that swallowed a failed statement leaves the transaction
    // aborted, and PostgreSQL answers its COMMIT with ROLLBACK and no error:
    // a cycle reported committed would be missing (I4). The probe tells an
    // aborted transaction (25P02) from a live one, reads the fence's time,
    // and its mark (gone if `work` ended the fenced transaction itself).
    let probe = statements.fetch_one::<(i64, bool)>(&mut transaction, sql::CYCLE_PROBE, &[]);
    let refusal = match probe.await {
        Ok((at_us, true)) => {
            return commit(transaction, value, ServerTime::from_micros(at_us)).await
        }
        Ok((_, false)) => LeaseError::TransactionDomain {
            reason: WORK_ENDED_THE_FENCE,
        },
        Err(error) => without_effect(error),
    };
    (
        Err(CycleError::Lease(refusal)),
        roll_back(transaction).await,
    )
}

/// Ends a cycle that will not commit; a connection that fails even that
/// is closed.
async fn roll_back(transaction: sqlx::Transaction<'_, Postgres>) -> After {
    match transaction.rollback().await {
        Ok(()) => After::Clean,
        Err(_) => After::Unknown,
    }
}

/// Commits a cycle whose probe found it fenced at `fenced_at`.
async fn commit<T, E>(
    transaction: sqlx::Transaction<'_, Postgres>,
    value: T,
    fenced_at: ServerTime,
) -> (Result<(T, ServerTime), CycleError<E>>, After) {
    match transaction.commit().await {
        Ok(()) => (Ok((value, fenced_at)), After::Clean),
        Err(error) => (
            Err(CycleError::Lease(after_send("commit", error))),
            After::Unknown,
        ),
    }
}

/// Why a cycle whose `work` ended the fenced transaction by hand fails.
const WORK_ENDED_THE_FENCE: &str = "the work ended the fenced transaction itself (a COMMIT or \
     ROLLBACK of its own): what it wrote before is committed or not, what it wrote after ran \
     unfenced; a work must leave the transaction to the cycle";

/// Why a cycle whose `work` left a transaction of its own open fails.
const WORK_LEFT_A_TRANSACTION: &str = "the work left a transaction of its own open, so the \
     cycle's COMMIT only ended that savepoint: nothing was committed (the connection is closed, \
     the server rolls the fenced transaction back)";

/// A failed `begin_with`: the fence refused (`Lost`), or it failed before
/// `COMMIT` was sent (no effect). A server's error leaves the session
/// perhaps in an aborted transaction, which a `ROLLBACK` ends; a broken
/// connection (or a desynchronised protocol) is closed, never reused.
fn begin_failed<T, E>(
    lease: &Lease,
    error: sqlx::Error,
) -> (Result<(T, ServerTime), CycleError<E>>, After) {
    let after = if connection_lost(&error) {
        After::Unknown
    } else {
        After::MaybeAborted
    };
    let error = if refused_fence(&error) {
        LeaseError::lost(lease)
    } else {
        without_effect(error)
    };
    (Err(CycleError::Lease(error)), after)
}

/// Whether `error` is the cycle fence's refusal ([`cycle_fence`]).
fn refused_fence(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database)
        if database.code().as_deref() == Some("22P02")
            && database.message().contains(CYCLE_FENCE_REFUSED))
}

/// A commit cycle's connection while its transaction may be open: after a
/// failed `begin_with` the server can be inside an aborted transaction sqlx
/// does not know of, and a cycle's future may be dropped mid-flight.
/// Dropped before [`OpenCycle::finish`], the connection is closed, never
/// returned to the pool or parked, and the server rolls back with the
/// session.
struct OpenCycle {
    checkout: Option<Checkout>,
}

impl OpenCycle {
    fn connection(&mut self) -> &mut PgConnection {
        self.checkout
            .as_mut()
            .expect("a cycle's connection until finish")
    }

    /// The connection, its transaction ended (committed or rolled back).
    fn finish(mut self) -> Checkout {
        self.checkout.take().expect("a cycle finishes once")
    }
}

impl Drop for OpenCycle {
    fn drop(&mut self) {
        if let Some(mut checkout) = self.checkout.take() {
            checkout.close_on_drop();
        }
    }
}

/// The fence's values: `$1` scope, `$2` owner, `$3` token.
fn fence_args(lease: &Lease) -> [Arg<'_>; 3] {
    [
        Arg::Text(lease.scope().as_str()),
        Arg::Text(lease.owner().as_str()),
        Arg::Int8(lease.token().0),
    ]
}

async fn fence_on(
    connection: &mut PgConnection,
    statements: Statements,
    lease: &Lease,
    mode: FenceMode,
) -> Result<Option<ServerTime>, LeaseError> {
    let args = fence_args(lease);
    let fenced_at: Option<(i64,)> = statements
        .fetch_optional(connection, mode.statement(), &args)
        .await
        // A fence that lost its connection lost its transaction too: nothing
        // can commit, so the outcome is known — no effect.
        .map_err(without_effect)?;
    Ok(fenced_at.map(|(at_us,)| ServerTime::from_micros(at_us)))
}

async fn server_identity(
    connection: &mut PgConnection,
    statements: Statements,
) -> Result<ServerIdentity, LeaseError> {
    statements
        .fetch_one(connection, sql::SERVER_IDENTITY, &[])
        .await
        .map_err(|error| after_send("hold_for_update", error))
}
