//! [`PostgresLeases`]: the library API of the reference lease.
//!
//! One type, its methods in four files: this one builds and configures it
//! and lends its connections; `schema.rs` creates the table; `grants.rs`
//! acquires (also waiting), renews, releases and reads; `fence.rs` runs the
//! guarded transaction and its fence.

use std::fmt;
use std::sync::Arc;

use leaseproof_protocol::{
    client, FencingToken, Holder, InvalidInput, LeaseError, Owner, Scope, ServerTime,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::errors::{sqlstate, unavailable, without_effect};
use crate::read_first::{ReadFirst, RefusedScopes};
use crate::reuse::{Checkout, Parked};
use crate::sql;
use crate::statements::{Arg, Statements};
use crate::wake::ReleaseHub;

mod fence;
mod grants;
mod schema;

pub use fence::{CycleError, FenceMode, LeaseTransaction};
#[cfg(feature = "harness")]
pub(crate) use grants::{acquire_row, rival_row, GrantRow};
pub use schema::SchemaMismatch;

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

impl fmt::Debug for PostgresLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLeases")
            .field("pool_size", &self.pool.size())
            .field("fence_mode", &self.fence_mode)
            .field("read_first", &self.read_first)
            .finish_non_exhaustive()
    }
}

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
    /// [`ReadFirst`]). The decision is the statement's either way.
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

    /// SQLSTATE of the error behind a `LeaseError`, when the database sent one.
    pub fn sqlstate(error: &LeaseError) -> Option<String> {
        client::backend_source(error)?
            .downcast_ref::<sqlx::Error>()
            .and_then(sqlstate)
    }
}
