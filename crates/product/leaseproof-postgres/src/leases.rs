//! [`PostgresLeases`]: the library API of the reference lease.

use std::fmt;
use std::sync::Arc;

use futures_core::future::BoxFuture;
use leaseproof_protocol::semantics::LeaseRow;
use leaseproof_protocol::{
    client, FencingToken, Holder, InvalidInput, Lease, LeaseError, Owner, Scope, ServerTime, Ttl,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use crate::errors::{after_send, connection_lost, sqlstate, unavailable, without_effect};
use crate::read_first::{ReadFirst, RefusedScopes};
use crate::reuse::{Checkout, Parked};
use crate::statements::{Arg, Statements};
use crate::wake::{ReleaseHub, Releases};
use crate::LeaseGuard;
use crate::{observe, sql};

/// Leases on one PostgreSQL pool: its database holds the lease table, and its
/// transactions are the only ones the fence will run in.
///
/// Cheap to clone; clones share the pool and count as the same transaction domain.
#[derive(Clone)]
pub struct PostgresLeases {
    pool: PgPool,
    fence_mode: FenceMode,
    holder_reports: bool,
    read_first: ReadFirst,
    /// Scopes this value (and its clones) saw refused, for
    /// [`ReadFirst::AfterRefusal`].
    refused: Arc<RefusedScopes>,
    /// Connections whose statement completed, kept for the next statement
    /// (`None`: every statement goes back through the pool). See [`crate::reuse`].
    parked: Option<Arc<Parked>>,
    /// Prepared, or inline for a pooler in transaction mode.
    statements: Statements,
    /// The one connection that listens for releases, for every waiter.
    pub(crate) releases: Arc<ReleaseHub>,
    /// Identity of this value's transaction domain: a [`LeaseTransaction`]
    /// remembers the domain that began it, and the fence refuses another's.
    pub(crate) domain: Arc<Domain>,
}

pub(crate) struct Domain;

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
}

impl fmt::Debug for PostgresLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLeases")
            .field("pool_size", &self.pool.size())
            .field("fence_mode", &self.fence_mode)
            .field("read_first", &self.read_first)
            .finish_non_exhaustive()
    }
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

/// A table of the lease's name exists with other columns than the lease needs.
#[derive(Debug)]
pub struct SchemaMismatch {
    /// The table.
    pub table: &'static str,
    /// Its columns as found (`name`, `type`), in order.
    pub found: Vec<(String, String)>,
    /// The columns the lease needs.
    pub expected: Vec<String>,
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found: Vec<String> = self
            .found
            .iter()
            .map(|(name, kind)| format!("{name} {kind}"))
            .collect();
        write!(
            f,
            "table {} exists with columns ({}) but the lease needs ({})",
            self.table,
            found.join(", "),
            self.expected.join(", ")
        )
    }
}

impl std::error::Error for SchemaMismatch {}

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
    /// Leases over `pool`. The lease table must exist ([`Self::ensure_schema`]).
    ///
    /// Any pool size works; a caller that keeps a [`LeaseTransaction`] open
    /// while renewing needs two. Pool exhaustion is `Unavailable` after the
    /// pool's acquire timeout, never a hang.
    ///
    /// A connection whose statement completed is kept for the next statement
    /// instead of going back to the pool, because sqlx pings every connection
    /// it takes back (a second round trip per statement); it returns to the
    /// pool at most 250 ms
    /// after it left, however busy, so another user of the same pool waits at
    /// most that long for it. [`Self::with_connection_reuse`] sets how long or
    /// turns it off; [`Self::close`] hands everything back.
    pub fn new(pool: PgPool) -> PostgresLeases {
        PostgresLeases {
            pool,
            fence_mode: FenceMode::Exclusive,
            holder_reports: true,
            read_first: ReadFirst::default(),
            refused: Arc::new(RefusedScopes::default()),
            parked: Some(Arc::new(Parked::new(crate::reuse::KEEP_FOR_DEFAULT))),
            statements: Statements::Prepared,
            releases: Arc::new(ReleaseHub::default()),
            domain: Arc::new(Domain),
        }
    }

    /// The same leases sending their statements as `statements` says:
    /// [`Statements::Inline`] behind a connection pooler in transaction mode
    /// (PgBouncer's `pool_mode = transaction`), where prepared statements do
    /// not survive from one message to the next. The statements are the
    /// same; only how their values travel changes. Waiting then polls only
    /// (a `LISTEN` does not follow the client through such a pooler), and
    /// your own statements inside [`Self::commit_cycle`] must not be named
    /// prepared statements either (`.persistent(false)` in sqlx).
    pub fn with_statements(mut self, statements: Statements) -> PostgresLeases {
        self.statements = statements;
        self
    }

    /// How the statements are sent.
    pub fn statements(&self) -> Statements {
        self.statements
    }

    /// The same leases keeping finished connections for the next statement
    /// for up to `keep_for` after each left the pool, or, with
    /// `Duration::ZERO`, handing each back at once (every statement then pays
    /// sqlx's release ping). Same pool, same transaction domain; connections
    /// kept so far go back to the pool now.
    pub fn with_connection_reuse(mut self, keep_for: std::time::Duration) -> PostgresLeases {
        if let Some(parked) = self.parked.take() {
            parked.release_all();
        }
        if !keep_for.is_zero() {
            self.parked = Some(Arc::new(Parked::new(keep_for)));
        }
        self
    }

    /// How long a connection may serve statements before it goes back to
    /// the pool (`Duration::ZERO`: one statement).
    pub fn connection_reuse(&self) -> std::time::Duration {
        self.parked
            .as_ref()
            .map_or(std::time::Duration::ZERO, |parked| parked.keep_for())
    }

    /// How many finished connections this value and its clones keep now
    /// (checked out from the pool, idle, waiting for the next statement).
    pub fn connections_parked(&self) -> usize {
        self.parked.as_ref().map_or(0, |parked| parked.count())
    }

    /// Stops listening for releases, hands the kept connections back and
    /// closes the pool (`PgPool::close`, which would otherwise wait for the
    /// kept ones to come back by themselves).
    pub async fn close(&self) {
        self.releases.close().await;
        if let Some(parked) = &self.parked {
            parked.release_all();
        }
        self.pool.close().await;
    }

    /// The same leases whose fence takes `mode`'s row lock (the default is
    /// [`FenceMode::Exclusive`]). Same pool, same transaction domain.
    pub fn with_fence_mode(mut self, mode: FenceMode) -> PostgresLeases {
        self.fence_mode = mode;
        self
    }

    /// The fence's row lock mode.
    pub fn fence_mode(&self) -> FenceMode {
        self.fence_mode
    }

    /// The same leases, acquiring under `mode`: whether an acquisition reads
    /// the row before it sends the acquisition statement
    /// ([`ReadFirst::AfterRefusal`] by default: a polling loser costs a
    /// primary-key read, a first attempt or a winner one statement; see
    /// [`crate::read_first`]). The decision is the statement's either way.
    pub fn with_read_first(mut self, mode: ReadFirst) -> PostgresLeases {
        self.read_first = mode;
        self
    }

    /// When acquisitions read first.
    pub fn read_first(&self) -> ReadFirst {
        self.read_first
    }

    /// How many scopes this value and its clones saw refused since they last
    /// won them: those [`ReadFirst::AfterRefusal`] reads first on.
    pub fn scopes_read_first(&self) -> usize {
        self.refused.count()
    }

    /// The same leases, whose refused acquisitions say who holds the scope:
    /// `Err(Held { holder: Some(…) })`. The default. A refusal by the
    /// read-first check ([`Self::with_read_first`]) names the holder for
    /// free; a refusal by the acquisition statement costs one read-only round
    /// trip ([`Self::holder`]) — with read-first after a refusal (the
    /// default), only the first refusal of a scope is refused by the
    /// statement, so a polling loser pays that read once per losing streak.
    pub fn with_holder_reports(mut self) -> PostgresLeases {
        self.holder_reports = true;
        self
    }

    /// The same leases, whose refusals by the acquisition statement do not
    /// name the holder (`holder: None`): a loser costs exactly one statement.
    pub fn without_holder_reports(mut self) -> PostgresLeases {
        self.holder_reports = false;
        self
    }

    /// The scope's live holder as the server reads it now (read-only, one
    /// round trip, on the server's clock); `None` when nobody holds it.
    pub async fn holder(&self, scope: &Scope) -> Result<Option<Holder>, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(scope.as_str())];
        let row: Option<(String, i64, i64)> = self
            .statements
            .fetch_optional(&mut connection, sql::SELECT_HOLDER, &args)
            .await
            .map_err(without_effect)?;
        self.park(connection);
        row.map(|(owner, token, expires_at_us)| {
            Ok(Holder {
                owner: Owner::new(owner)?,
                token: FencingToken(token),
                expires_at: ServerTime::from_micros(expires_at_us),
            })
        })
        .transpose()
    }

    /// Pool options the lease works best with: no ping when a connection is
    /// handed out (sqlx's default `test_before_acquire` costs every acquisition
    /// a second round trip; a dead connection still surfaces as an error on
    /// use, which the lease maps to `Unavailable` or `OutcomeUnknown`), and a
    /// finite acquire timeout so an exhausted pool is an error, never a hang.
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .test_before_acquire(false)
            .acquire_timeout(std::time::Duration::from_secs(5))
    }

    /// Connects a pool of at most `connections` with [`Self::pool_options`].
    /// Connecting fails with `Unavailable`; no statement is sent. A pool of
    /// zero connections could serve nothing: `Invalid(PoolTooSmall)` before
    /// any connection is tried.
    pub async fn connect(url: &str, connections: u32) -> Result<PostgresLeases, LeaseError> {
        if connections == 0 {
            return Err(LeaseError::Invalid(InvalidInput::PoolTooSmall {
                connections_max: 0,
                connections_min: 1,
            }));
        }
        let pool = Self::pool_options()
            .max_connections(connections)
            .connect(url)
            .await
            .map_err(unavailable)?;
        Ok(PostgresLeases::new(pool))
    }

    /// The pool this lease speaks through, and so its transaction domain. Public
    /// so a caller can prove its other writes live in the same domain.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A connection for one statement: the most recently parked one, else the
    /// pool's. Give it back with [`Self::park`] once the statement completed
    /// `Ok`; dropped instead, it goes back through sqlx's ping.
    pub(crate) async fn connection(&self) -> Result<Checkout, LeaseError> {
        if let Some(checkout) = self.parked.as_ref().and_then(|parked| parked.take()) {
            return Ok(checkout);
        }
        let connection = self.pool.acquire().await.map_err(unavailable)?;
        Ok(Checkout::from_pool(connection))
    }

    /// Keeps `connection`, whose statement completed `Ok`, for the next one.
    pub(crate) fn park(&self, connection: Checkout) {
        if let Some(parked) = &self.parked {
            parked.park(connection, &self.pool);
        }
    }

    /// Creates the lease table if it is not there.
    ///
    /// `IF NOT EXISTS` is idempotent across time and not across concurrency: two
    /// sessions running it at the same instant both pass the existence check,
    /// both insert into `pg_type`, and one fails with `23505` on
    /// `pg_type_typname_nsp_index`. Here that is the expected case — the workers
    /// this table coordinates are exactly the ones that start together — so a
    /// failure is retried once against a table that exists by then, and only
    /// then raised.
    ///
    /// Only that race is retried ([`client::CONCURRENT_CREATION_SQLSTATES`]);
    /// any other failure — permission denied, a read-only server, a lost
    /// connection — is a `Schema` error at once. A table of the same name with
    /// other columns (which `IF NOT EXISTS` accepts silently) is a `Schema`
    /// error too: the lease would otherwise fail later, statement by statement.
    pub async fn ensure_schema(&self) -> Result<(), LeaseError> {
        self.ensure_table(sql::CREATE_LEASES, "leaseproof_leases", sql::LEASES_COLUMNS)
            .await
    }

    /// [`Self::ensure_schema`] without the retry: one attempt. Exists so a test
    /// can show the race the retry survives; not for production use.
    // Hidden from the API docs: a harness entry point (the schema-race test,
    // `verify`), public only because those live in other crates.
    #[doc(hidden)]
    pub async fn ensure_schema_once(&self) -> Result<(), LeaseError> {
        self.create_table_once(sql::CREATE_LEASES).await?;
        self.verify_columns("leaseproof_leases", sql::LEASES_COLUMNS)
            .await
    }

    pub(crate) async fn ensure_table(
        &self,
        ddl: &'static str,
        table: &'static str,
        columns: &'static [(&'static str, &'static str)],
    ) -> Result<(), LeaseError> {
        client::ensure_schema_with_retry(
            true,
            PostgresLeases::sqlstate,
            |error| {
                // Somebody else is creating it right now: the retry finds it.
                tracing::debug!(%error, "table creation raced another worker; retrying once");
            },
            || self.create_table_once(ddl),
        )
        .await?;
        self.verify_columns(table, columns).await
    }

    async fn create_table_once(&self, ddl: &'static str) -> Result<(), LeaseError> {
        let mut connection = self.connection().await?;
        self.statements
            .execute(&mut connection, ddl, &[])
            .await
            .map_err(|error| LeaseError::Schema {
                source: Box::new(error),
            })?;
        self.park(connection);
        Ok(())
    }

    /// The table's columns must be exactly `expected`.
    async fn verify_columns(
        &self,
        table: &'static str,
        expected: &[(&str, &str)],
    ) -> Result<(), LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(table)];
        let found: Vec<(String, String)> = self
            .statements
            .fetch_all(&mut connection, sql::TABLE_COLUMNS, &args)
            .await
            .map_err(|error| LeaseError::Schema {
                source: Box::new(error),
            })?;
        self.park(connection);
        let matches = found.len() == expected.len()
            && found
                .iter()
                .zip(expected)
                .all(|((name, kind), (want_name, want_kind))| {
                    name == want_name && kind == want_kind
                });
        if matches {
            return Ok(());
        }
        Err(LeaseError::Schema {
            source: Box::new(SchemaMismatch {
                table,
                found,
                expected: expected
                    .iter()
                    .map(|(name, kind)| format!("{name} {kind}"))
                    .collect(),
            }),
        })
    }

    /// Tries to take `scope` for `owner` for `ttl` (server time): one statement,
    /// one round trip ([`sql::ACQUIRE`]). `Err(Held)` when another owner holds a
    /// live grant — a read, with no row lock and no WAL. On a scope this
    /// client saw refused, a read-only check goes first and a loser costs
    /// only that read ([`Self::with_read_first`]); the statement still decides
    /// every grant.
    ///
    /// The [`LeaseGuard`] owns the lease: keep it alive
    /// ([`LeaseGuard::with_keep_alive`]), race the work against
    /// [`LeaseGuard::lost`], commit through [`LeaseGuard::commit_cycle`],
    /// [`LeaseGuard::release`] it. Dropped, it stops renewing and the lease
    /// ends at its TTL.
    ///
    /// Idempotent for the same owner: after a lost reply (`OutcomeUnknown`),
    /// retrying with the same `owner` returns the grant the lost reply carried —
    /// same token, same `granted_at`, `expires_at` extended to `now + ttl` (never
    /// shortened: a stale retry landing late keeps the later end) — or,
    /// if it expired meanwhile, a new grant with the next token.
    ///
    /// Cancel-safe: a future dropped mid-statement returns no guard and leaks
    /// no connection; the grant may have landed, and then expires at its TTL.
    pub async fn acquire(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<LeaseGuard, LeaseError> {
        // Before the statement is sent, so `sent + ttl` bounds the grant's end
        // from below on this process's clock.
        let sent = tokio::time::Instant::now();
        let lease = self.acquire_lease(scope, owner, ttl).await?;
        Ok(LeaseGuard::new(self.clone(), lease, ttl, sent))
    }

    /// Waits up to `timeout` for the lease of `scope`, then holds it as
    /// [`Self::acquire`] does: for a job that must run, not skip its tick.
    ///
    /// It tries at once; refused, it listens for releases of the scope (one
    /// `LISTEN` connection shared by these leases' waiters, outside the
    /// pool, kept until [`Self::close`]: [`sql::RELEASE`] notifies) and
    /// tries again the moment one is released, or after a jittered pause of
    /// about an eighth of the TTL (10 ms to 500 ms, ±50 %, so waiters do not
    /// march in step), until granted or the deadline. A waiter that was
    /// refused reads first ([`ReadFirst::AfterRefusal`]): polling costs a
    /// primary-key read, never a write or a row lock. A holder that releases
    /// is followed at once; one that dies, within one pause of its expiry
    /// (an expiry notifies nobody). Without the listener (it could not
    /// connect) the pauses alone pace the wait. An
    /// acquisition whose outcome is unknown (a lost reply) is retried too:
    /// acquiring is idempotent for one owner, so the retry finds the grant
    /// if the first attempt made it. At the deadline it returns the last
    /// refusal (`Held`, with the holder when the read named it) or error.
    /// Cancel-safe as [`Self::acquire`] is: a dropped wait holds nothing.
    ///
    /// It is not a queue: a holder that asks again the moment it released
    /// can win before a waiter's pause ends (measured: four clients that did
    /// so got 87, 1, 1 and 3 grants in two seconds; with 40 ms of other work
    /// between a release and the next wait, 7 to 21 each).
    pub async fn acquire_wait(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
        timeout: std::time::Duration,
    ) -> Result<LeaseGuard, LeaseError> {
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
        let pause = wait_pause(ttl);
        // Listening starts after the first refusal (most acquisitions are
        // granted at once), then the scope is asked again at once: a release
        // between the refusal and the LISTEN notified nobody.
        let mut releases: Option<Option<Releases>> = None;
        loop {
            // In line before the attempt: a release between a refusal and
            // the wait still wakes this waiter.
            let mut place = match &releases {
                Some(Some(listening)) => Some(listening.line_up(scope)),
                _ => None,
            };
            let error = match self.acquire(scope, owner, ttl).await {
                Ok(guard) => {
                    observe::waited(scope, true, started.elapsed());
                    return Ok(guard);
                }
                Err(
                    error @ (LeaseError::Held { .. }
                    | LeaseError::OutcomeUnknown { .. }
                    | LeaseError::Unavailable { .. }),
                ) => error,
                Err(error) => return Err(error),
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                observe::waited(scope, false, started.elapsed());
                return Err(error);
            }
            let pause = jittered(pause).min(deadline - now);
            match (&releases, &mut place) {
                (None, _) => releases = Some(Releases::listen(self).await),
                (_, Some(place)) => {
                    tokio::select! {
                        () = place.woken() => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                (_, None) => tokio::time::sleep(pause).await,
            }
        }
    }

    /// [`Self::acquire`] returning the lease as a value, with no guard: for
    /// callers that renew and release by hand (the harness's port, the worker
    /// loop, which record every statement themselves).
    pub async fn acquire_lease(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        let started = std::time::Instant::now();
        let result = self.acquire_lease_unobserved(scope, owner, ttl).await;
        observe::acquired(scope, owner, &result, started.elapsed());
        result
    }

    async fn acquire_lease_unobserved(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        let read_first = self.refused.reads_first(self.read_first, scope);
        let mut connection = self.connection().await?;
        let decision = acquire_decision(
            &mut connection,
            self.statements,
            read_first,
            scope,
            owner,
            ttl,
        )
        .await?;
        // Parked before the refusal's holder read, which then reuses it.
        self.park(connection);
        self.concluded(scope, owner, decision).await
    }

    /// What an acquisition's decision means for the caller, and for which
    /// scopes this client reads first from now on.
    async fn concluded(
        &self,
        scope: &Scope,
        owner: &Owner,
        decision: Decision,
    ) -> Result<Lease, LeaseError> {
        match decision {
            Decision::Granted(row) => {
                self.refused.granted(scope);
                Ok(granted(scope, owner, row))
            }
            Decision::Refused(holder) => {
                self.refused.refused(scope);
                match holder {
                    Some(holder) => {
                        assert!(&holder.owner != owner, "a read refuses only another owner");
                        Err(LeaseError::Held {
                            scope: scope.clone(),
                            holder: Some(holder),
                        })
                    }
                    None => Err(self.held(scope).await?),
                }
            }
        }
    }

    // Hidden from the API docs: the benchmarks' entry point for comparing
    // statement forms, public only because they live in another crate.
    #[doc(hidden)]
    /// Acquisition through another statement of the same shape (the seed's bare
    /// upsert, [`sql::ACQUIRE_UNGUARDED`]); for tests and benchmarks that compare forms.
    pub async fn acquire_with(
        &self,
        statement: &'static str,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        let mut connection = self.connection().await?;
        let row = acquire_row(
            &mut connection,
            self.statements,
            statement,
            scope,
            owner,
            ttl,
        )
        .await
        .map_err(|error| after_send("acquire", error))?;
        // Parked before the refusal's holder read, which then reuses it.
        self.park(connection);
        match row {
            Some(row) => Ok(granted(scope, owner, row)),
            None => Err(self.held(scope).await?),
        }
    }

    /// [`Self::acquire_lease`] on the caller's own connection — a dedicated
    /// one in a polling loop, say. The same statement, and no pool at all
    /// (the pooled path keeps its connections between statements, see
    /// [`Self::new`], so the two measure alike in `leaseproof bench`). Refuses (`TransactionDomain`) a connection inside a
    /// transaction: the grant would be stamped with the transaction's start
    /// and its row lock held to the caller's commit.
    pub async fn acquire_on(
        &self,
        connection: &mut PgConnection,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        if connection.is_in_transaction() {
            return Err(LeaseError::TransactionDomain {
                reason: "acquire runs as its own transaction; this connection is inside one",
            });
        }
        let started = std::time::Instant::now();
        let read_first = self.refused.reads_first(self.read_first, scope);
        let result = match acquire_decision(
            connection,
            self.statements,
            read_first,
            scope,
            owner,
            ttl,
        )
        .await
        {
            Ok(decision) => self.concluded(scope, owner, decision).await,
            Err(error) => Err(error),
        };
        observe::acquired(scope, owner, &result, started.elapsed());
        result
    }

    /// The refusal of `scope`, naming the holder when asked to
    /// ([`Self::with_holder_reports`]). The read may find nobody: the grant
    /// can have ended in between.
    async fn held(&self, scope: &Scope) -> Result<LeaseError, LeaseError> {
        // The refusal is certain; the report is a courtesy: a report that
        // fails (a dropped connection, an owner that does not decode) leaves
        // the holder unnamed, never turns the refusal into an error.
        let holder = if self.holder_reports {
            self.holder(scope).await.ok().flatten()
        } else {
            None
        };
        Ok(LeaseError::Held {
            scope: scope.clone(),
            holder,
        })
    }

    /// Extends a live lease to `now + ttl` (never shortens it: a renewal that
    /// landed late keeps the end a newer one set), keeping its token. `Err(Lost)` when
    /// the lease expired, was released, or was taken over.
    pub async fn renew(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        let started = std::time::Instant::now();
        let result = self.renew_unobserved(lease, ttl).await;
        observe::renewed(lease, &result, started.elapsed());
        result
    }

    async fn renew_unobserved(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
            Arg::Int8(ttl.as_micros()),
        ];
        let row: Option<(i64, i64)> = self
            .statements
            .fetch_optional(&mut connection, sql::RENEW, &args)
            .await
            .map_err(|error| after_send("renew", error))?;
        self.park(connection);
        let Some((granted_at_us, expires_at_us)) = row else {
            return Err(LeaseError::Lost {
                scope: lease.scope().clone(),
                token: lease.token(),
            });
        };
        let renewed = Lease::from_server_reply(
            lease.scope().clone(),
            lease.owner().clone(),
            lease.token(),
            ServerTime::from_micros(granted_at_us),
            ServerTime::from_micros(expires_at_us),
        );
        lease.assert_renewed_as(&renewed);
        Ok(renewed)
    }

    /// Expires the lease now (server time). The row stays so the token never
    /// restarts. Returns the server time the grant ended; `Ok(None)` when it was
    /// no longer held (released before, expired, or taken over).
    pub async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        let started = std::time::Instant::now();
        let result = self.release_unobserved(lease).await;
        let seen = result.as_ref().map(Option::is_some);
        observe::released(lease, &seen, started.elapsed());
        result
    }

    async fn release_unobserved(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
        ];
        let row: Option<(i64,)> = self
            .statements
            .fetch_optional(&mut connection, sql::RELEASE, &args)
            .await
            .map_err(|error| after_send("release", error))?;
        self.park(connection);
        Ok(row.map(|(released_at_us,)| ServerTime::from_micros(released_at_us)))
    }

    /// Whether the lease was current when the server read it. Past tense: to
    /// act on the answer, use the fence inside the transaction that acts.
    pub async fn holds(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
        ];
        let (held,): (bool,) = self
            .statements
            .fetch_one(&mut connection, sql::HOLDS, &args)
            .await
            .map_err(without_effect)?;
        self.park(connection);
        Ok(held)
    }

    /// The scope's row as it is now, if the scope was ever granted.
    pub async fn row(&self, scope: &Scope) -> Result<Option<LeaseRow>, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(scope.as_str())];
        let row: Option<(String, i64, i64, i64)> = self
            .statements
            .fetch_optional(&mut connection, sql::SELECT_ROW, &args)
            .await
            .map_err(without_effect)?;
        self.park(connection);
        row.map(|(owner, token, granted_at_us, expires_at_us)| {
            Ok(LeaseRow {
                owner: Owner::new(owner)?,
                token: FencingToken(token),
                granted_at: ServerTime::from_micros(granted_at_us),
                expires_at: ServerTime::from_micros(expires_at_us),
            })
        })
        .transpose()
    }

    /// Expires a scope's live grant now, as if its TTL had run out: an
    /// operator's tool for a stuck lease, and the tests' way to skip waiting.
    /// The token is untouched, so the next grant still gets a greater one.
    pub async fn force_expire(&self, scope: &Scope) -> Result<bool, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(scope.as_str())];
        let result = self
            .statements
            .execute(&mut connection, sql::FORCE_EXPIRE, &args)
            .await
            .map_err(|error| after_send("force_expire", error))?;
        self.park(connection);
        Ok(result == 1)
    }

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
    /// `ROLLBACK`: `CycleError::Lease(Database)`, SQLSTATE 25P02).
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
    pub async fn commit_cycle<T, E, F>(&self, lease: &Lease, work: F) -> Result<T, CycleError<E>>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    {
        self.commit_cycle_at(lease, work)
            .await
            .map(|(value, _fenced_at)| value)
    }

    /// [`Self::commit_cycle`], also returning the server time at which the
    /// fence proved the lease ours (the harness records it with the commit).
    /// The harness's guarded writes go through this, so every race and
    /// conformance check drives the commit path users call.
    pub async fn commit_cycle_at<T, E, F>(
        &self,
        lease: &Lease,
        work: F,
    ) -> Result<(T, ServerTime), CycleError<E>>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    {
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

    async fn commit_cycle_unobserved<T, E, F>(
        &self,
        lease: &Lease,
        work: F,
    ) -> Result<(T, ServerTime), CycleError<E>>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    {
        let mut transaction = self.begin().await.map_err(CycleError::Lease)?;
        let fenced = self
            .fence(&mut transaction, lease)
            .await
            .map_err(CycleError::Lease)?;
        let Some(fenced_at) = fenced else {
            // Dropping the transaction rolls it back; nothing was written.
            return Err(CycleError::Lease(LeaseError::Lost {
                scope: lease.scope().clone(),
                token: lease.token(),
            }));
        };
        let value = match work(transaction.connection()).await {
            Ok(value) => value,
            Err(error) => {
                let _ = transaction.rollback().await;
                return Err(CycleError::Work(error));
            }
        };
        // A `work` that swallowed a failed statement leaves the transaction
        // aborted, and PostgreSQL answers its COMMIT with ROLLBACK and no error:
        // a cycle reported committed would be missing (I4). One cheap probe
        // tells an aborted transaction (25P02) from a live one.
        if let Err(error) = self
            .statements
            .execute(transaction.connection(), sql::TRANSACTION_PROBE, &[])
            .await
        {
            let _ = transaction.rollback().await;
            return Err(CycleError::Lease(without_effect(error)));
        }
        transaction.commit().await.map_err(CycleError::Lease)?;
        Ok((value, fenced_at))
    }

    /// SQLSTATE of the error behind a `LeaseError`, when the database sent one.
    pub fn sqlstate(error: &LeaseError) -> Option<String> {
        client::backend_source(error)?
            .downcast_ref::<sqlx::Error>()
            .and_then(sqlstate)
    }
}

pub(crate) type GrantRow = (i64, i64, i64);

/// How one acquisition ended on the server.
enum Decision {
    /// The statement granted: (token, granted_at, expires_at) in µs.
    Granted(GrantRow),
    /// Refused: by the read-first check, which names the holder, or by the
    /// statement (`None`).
    Refused(Option<Holder>),
}

/// One acquisition on `connection`: the read-only check first when
/// `read_first` (a live grant of another owner refuses at once), then the
/// statement, which decides.
async fn acquire_decision(
    connection: &mut PgConnection,
    statements: Statements,
    read_first: bool,
    scope: &Scope,
    owner: &Owner,
    ttl: Ttl,
) -> Result<Decision, LeaseError> {
    if read_first {
        // Read-only: a connection lost under it changed nothing.
        let rival = rival_row(connection, statements, scope, owner)
            .await
            .map_err(without_effect)?;
        if let Some((holder, token, expires_at_us)) = rival {
            return Ok(Decision::Refused(Some(Holder {
                owner: Owner::new(holder)?,
                token: FencingToken(token),
                expires_at: ServerTime::from_micros(expires_at_us),
            })));
        }
    }
    let row = acquire_row(connection, statements, sql::ACQUIRE, scope, owner, ttl)
        .await
        .map_err(|error| after_send("acquire", error))?;
    Ok(match row {
        Some(row) => Decision::Granted(row),
        None => Decision::Refused(None),
    })
}

/// The read-first check ([`sql::SELECT_RIVAL`]): another owner's live grant
/// of `scope` as (owner, token, expires_at in µs). Also the conformance
/// differential's, so the read it holds to the semantics is the library's.
pub(crate) async fn rival_row(
    connection: &mut PgConnection,
    statements: Statements,
    scope: &Scope,
    owner: &Owner,
) -> Result<Option<(String, i64, i64)>, sqlx::Error> {
    let args = [Arg::Text(scope.as_str()), Arg::Text(owner.as_str())];
    statements
        .fetch_optional(connection, sql::SELECT_RIVAL, &args)
        .await
}

/// One acquisition statement: the grant's (token, granted_at, expires_at) in
/// µs when it won. Also the conformance differential's, so both forms it
/// compares run exactly as the library sends them.
pub(crate) async fn acquire_row(
    connection: &mut PgConnection,
    statements: Statements,
    statement: &'static str,
    scope: &Scope,
    owner: &Owner,
    ttl: Ttl,
) -> Result<Option<GrantRow>, sqlx::Error> {
    let args = [
        Arg::Text(scope.as_str()),
        Arg::Text(owner.as_str()),
        Arg::Int8(ttl.as_micros()),
    ];
    statements
        .fetch_optional(connection, statement, &args)
        .await
}

fn granted(scope: &Scope, owner: &Owner, (token, granted_at_us, expires_at_us): GrantRow) -> Lease {
    let lease = Lease::from_server_reply(
        scope.clone(),
        owner.clone(),
        FencingToken(token),
        ServerTime::from_micros(granted_at_us),
        ServerTime::from_micros(expires_at_us),
    );
    assert!(lease.token() >= FencingToken::FIRST);
    assert!(lease.expires_at() > lease.granted_at());
    lease
}

async fn fence_on(
    connection: &mut PgConnection,
    statements: Statements,
    lease: &Lease,
    mode: FenceMode,
) -> Result<Option<ServerTime>, LeaseError> {
    let args = [
        Arg::Text(lease.scope().as_str()),
        Arg::Text(lease.owner().as_str()),
        Arg::Int8(lease.token().0),
    ];
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

/// How long a waiter pauses between attempts: an eighth of the TTL, at least
/// 10 ms (a busy loop costs the server), at most 500 ms (a released lease is
/// taken within half a second).
fn wait_pause(ttl: Ttl) -> std::time::Duration {
    (ttl.as_duration() / 8).clamp(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_millis(500),
    )
}

/// `pause` ±50 %, so waiters that were refused together do not retry together.
fn jittered(pause: std::time::Duration) -> std::time::Duration {
    use rand::Rng as _;
    pause.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
}
