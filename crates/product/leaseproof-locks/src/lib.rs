//! The lock managers of pg_partsmith behind one [`LockManager`]
//! contract, for scheduled maintenance that must run on one replica at a time.
//!
//! | manager | holds the lock by | how it is lost | fence |
//! |---|---|---|---|
//! | [`PostgresAdvisoryLockManager`] | `pg_try_advisory_lock` on a dedicated autocommit connection | the connection dies (noticed by the guard's probe, late) | none: work on another connection is unprotected |
//! | [`RedisDistributedLockManager`] | `SET key value NX PX ttl`, released / extended by compare-and-delete / -pexpire in Lua | the TTL runs out (a pause), the server restarts without persistence | a token from `INCR`, taken atomically with the `SET`, checked where the work writes |
//! | [`LeaseLockManager`] | the reference lease's row | expiry | the lease's `FOR UPDATE` fence in the guarded transaction ([`LockGuard::lease`]) |
//!
//! The contract: [`LockManager::acquire_lock`] never queues — a collision is
//! [`LockError::Held`] at once, as pg_partsmith's `LockAcquisitionError`, and a
//! scheduler skips the tick; the [`LockGuard`] releases on
//! [`LockGuard::release`], exposes the fencing token where the backend has one
//! and a *lost* signal that fires when the manager learns the lock is gone.
//! Scopes are `{prefix}:{schema}.{table}` ([`Scope::for_table`]), so tables are
//! maintained in parallel. The trait is object-safe: a scheduler holds an
//! `Arc<dyn LockManager>`. `conformance` (feature `conformance`) is the suite
//! any implementation (yours too) runs from its own tests.
//!
//! **Dropping a guard without `release`** (there is no async drop in Rust):
//! the advisory manager's connection task sees the guard gone, unlocks and
//! closes the connection (the server frees the lock with the session anyway);
//! the Redis and lease managers stop their keep-alive and the lock expires at
//! its TTL. Nothing is released twice, and no other holder's lock is touched.
//!
//! # Choosing a lock manager
//!
//! The README's sample, run as a doc-test against throwaway servers (the
//! hidden lines start them; a test keeps the README's copy identical to the
//! visible lines):
//!
//! ```rust
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(database) = leaseproof_pgcluster::test_database().await else { return Ok(()) };
//! # let Some(redis_url) = leaseproof_redis_server::test_redis_url() else { return Ok(()) };
//! # let database_url = database.url.clone();
//! # use leaseproof_postgres::PostgresLeases;
//! # use leaseproof_protocol::Ttl;
//! # let leases = PostgresLeases::connect(&database_url, 8).await?;
//! # leases.ensure_schema().await?;
//! # sqlx::query("CREATE TABLE IF NOT EXISTS results (job text)").execute(leases.pool()).await?;
//! use std::sync::Arc;
//! use leaseproof_locks::{LeaseLockManager, LeaseLockOptions, LockError, LockManager};
//! use leaseproof_locks::{PostgresAdvisoryLockManager, RedisDistributedLockManager, RedisLockOptions, TableName};
//!
//! let ttl = Ttl::from_millis(30_000)?;
//! let managers: [Arc<dyn LockManager>; 3] = [
//!     Arc::new(LeaseLockManager::new(leases.clone(), "myapp", LeaseLockOptions { ttl, keep_alive: true })), // the lease, kept alive
//!     Arc::new(PostgresAdvisoryLockManager::new(&database_url, "myapp")?), // a dedicated lock connection
//!     Arc::new(RedisDistributedLockManager::connect(&redis_url, "myapp", RedisLockOptions::default()).await?),
//! ];
//! for locks in managers {
//!     match locks.acquire_lock(&TableName::new("public", "events")).await {
//!         Ok(guard) => {
//!             match guard.lease() {
//!                 Some(lease) => leases.commit_cycle(lease, |connection| Box::pin(async move {
//!                     sqlx::query("INSERT INTO results (job) VALUES ('events')").execute(connection).await
//!                 })).await.map(drop)?,                   // under the lease's fence
//!                 None => { /* advisory, Redis: no fence; race the work against guard.lost() */ }
//!             }
//!             guard.release().await?;
//!         }
//!         Err(LockError::Held { holder, .. }) => println!("held by {holder:?}: skip this tick"),
//!         Err(error) => return Err(error.into()),
//!     }
//! }
//! # let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM results").fetch_one(leases.pool()).await?;
//! # assert_eq!(rows, 1);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod advisory;
#[cfg(feature = "conformance")]
pub mod conformance;
mod lease;
mod redis_lock;

use std::fmt;

/// The future type [`LockManager`]'s methods return: implement a manager
/// with `Box::pin(async move { … })`.
pub use futures_core::future::BoxFuture;
use leaseproof_protocol::{BackendError, FencingToken, InvalidInput, Lease, Scope};
/// The channel of a guard's *lost* signal ([`LockGuard::custom`] takes its
/// receiver): a manager written elsewhere needs nothing else from tokio.
pub use tokio::sync::watch;

pub use advisory::{
    advisory_key, AdvisorySession, AdvisorySessions, PgSessions, PostgresAdvisoryLockManager,
    TransactionPooling,
};
pub use lease::{LeaseLockManager, LeaseLockOptions};
pub use redis_lock::{
    promised_lifetime as redis_promised_lifetime, RedisDistributedLockManager, RedisLockOptions,
    REDIS_ACQUIRE_SCRIPT, REDIS_EXTEND_SCRIPT, REDIS_RELEASE_SCRIPT,
};

/// A table to maintain: `schema.table`, validated before any IO.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableName {
    schema: String,
    table: String,
}

impl TableName {
    /// `schema.table`; empty parts, NUL bytes or a scope over 255 bytes (with
    /// its prefix) are refused when the scope is built.
    pub fn new(schema: impl Into<String>, table: impl Into<String>) -> TableName {
        TableName {
            schema: schema.into(),
            table: table.into(),
        }
    }

    /// The scope `{prefix}:{schema}.{table}`, or a typed error.
    pub fn scope(&self, prefix: &str) -> Result<Scope, InvalidInput> {
        Scope::for_table(prefix, &self.schema, &self.table)
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

/// Why a lock operation did not succeed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the lock: pg_partsmith's `LockAcquisitionError`.
    /// Returned at once, never after waiting.
    #[error("{scope} is locked by {}", holder.as_deref().unwrap_or("someone else"))]
    Held {
        /// The contended scope.
        scope: Scope,
        /// Who holds it, where the store tells in the same round trip: the
        /// lease's holder with its token and expiry, the Redis key's owner;
        /// `None` for an advisory lock (PostgreSQL names no session).
        holder: Option<String>,
    },
    /// The input was rejected before anything was sent.
    #[error("invalid input: {0}")]
    Invalid(#[from] InvalidInput),
    /// The lock's store could not be reached; nothing was taken.
    #[error("lock store unavailable: {source}")]
    Unavailable {
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
    /// The store answered with an error.
    #[error("lock store error: {source}")]
    Backend {
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
    /// The lock was already gone when the guard tried to release it.
    #[error("the lock on {scope} was lost before it was released")]
    Lost {
        /// The scope.
        scope: Scope,
    },
}

impl LockError {
    /// Whether making the same call again, unchanged, may succeed: the lock
    /// was held (a later tick may find it free) or its store could not be
    /// reached. A lost lock, bad input or an error the store answered (the
    /// advisory manager's refusal of a transaction pooler among them) will
    /// fail the same way.
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::Held { .. } | LockError::Unavailable { .. } => true,
            LockError::Invalid(_) | LockError::Backend { .. } | LockError::Lost { .. } => false,
        }
    }
}

/// A lock manager: non-blocking acquisition per table, and a read-only check.
pub trait LockManager: Send + Sync + fmt::Debug {
    /// Takes the lock of `table`, or fails at once with [`LockError::Held`].
    fn acquire_lock<'a>(
        &'a self,
        table: &'a TableName,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>>;

    /// Waits up to `timeout` for the lock of `table`: tries now, and after
    /// each refusal again after a jittered pause (20 ms to 200 ms), until
    /// granted or the deadline, when it returns the last `Held` (with its
    /// holder where the store names it). For a job that must run rather than
    /// skip its tick; [`LockManager::acquire_lock`] stays the non-blocking
    /// form. Dropping the future holds nothing (each attempt is an
    /// `acquire_lock`). A manager whose store can wake waiters overrides it.
    fn acquire_lock_wait<'a>(
        &'a self,
        table: &'a TableName,
        timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(async move {
            use rand::Rng as _;
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                match self.acquire_lock(table).await {
                    Err(held @ LockError::Held { .. }) => {
                        let now = tokio::time::Instant::now();
                        if now >= deadline {
                            return Err(held);
                        }
                        let pause = std::time::Duration::from_millis(
                            rand::thread_rng().gen_range(20..=200),
                        );
                        tokio::time::sleep(pause.min(deadline - now)).await;
                    }
                    other => return other,
                }
            }
        })
    }

    /// Whether someone holds the lock of `table` (past tense: when it was read).
    fn is_locked<'a>(&'a self, table: &'a TableName) -> BoxFuture<'a, Result<bool, LockError>>;

    /// A short name for reports (`advisory`, `redis`, `lease`).
    fn name(&self) -> &'static str;
}

/// A background task (a keep-alive) that ends with the guard holding this,
/// whether the guard is released or dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a backend does when its guard is released.
trait Releaser: Send {
    /// Releases the lock; `Err(Lost)` when it was already gone.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>>;
}

/// A held lock. Release it with [`LockGuard::release`]; see the crate docs for
/// what dropping it does.
pub struct LockGuard {
    scope: Scope,
    fencing_token: Option<FencingToken>,
    lease: Option<Lease>,
    lost: watch::Receiver<bool>,
    releaser: Option<Box<dyn Releaser>>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("scope", &self.scope)
            .field("fencing_token", &self.fencing_token)
            .field("lost", &*self.lost.borrow())
            .finish_non_exhaustive()
    }
}

/// A [`Releaser`] from a closure: how a manager written outside this crate
/// says what its release does.
struct ReleaseWith<F>(F);

impl<F> Releaser for ReleaseWith<F>
where
    F: FnOnce() -> BoxFuture<'static, Result<(), LockError>> + Send,
{
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        (self.0)()
    }
}

impl LockGuard {
    /// A guard for a [`LockManager`] written outside this crate (a ZooKeeper
    /// or etcd manager, a lock under test): its scope, its fencing token if it
    /// has one, a *lost* signal its manager sets to `true` when it learns the
    /// lock is gone (keep the sender; a dropped sender is not a loss), and
    /// what releasing it does — `Err(LockError::Lost)` when it was already
    /// gone. Dropping the guard without [`LockGuard::release`] does not run
    /// `release`.
    pub fn custom<F>(
        scope: Scope,
        fencing_token: Option<FencingToken>,
        lost: watch::Receiver<bool>,
        release: F,
    ) -> LockGuard
    where
        F: FnOnce() -> BoxFuture<'static, Result<(), LockError>> + Send + 'static,
    {
        LockGuard::new(
            scope,
            fencing_token,
            None,
            lost,
            Box::new(ReleaseWith(release)),
        )
    }

    fn new(
        scope: Scope,
        fencing_token: Option<FencingToken>,
        lease: Option<Lease>,
        lost: watch::Receiver<bool>,
        releaser: Box<dyn Releaser>,
    ) -> LockGuard {
        LockGuard {
            scope,
            fencing_token,
            lease,
            lost,
            releaser: Some(releaser),
        }
    }

    /// The locked scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The fencing token, where the backend has one (Redis, the lease): check
    /// it where the work writes, or a holder paused past its TTL writes after
    /// a rival took over.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing_token
    }

    /// The lease behind the guard ([`LeaseLockManager`] only), for
    /// `PostgresLeases::commit_cycle`: the fence in the guarded transaction.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Whether the manager has learnt the lock is gone.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// A receiver that turns `true` when the lock is lost: race the work
    /// against it (`tokio::select!`) to stop before a fence would refuse.
    pub fn lost_signal(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// Resolves when the manager learns the lock is gone (never, if it is
    /// released first).
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        // An error means the manager's task ended without losing the lock.
        if lost.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Releases the lock. `Err(Lost)` when it was already gone — the work it
    /// guarded may have overlapped another holder's.
    pub async fn release(mut self) -> Result<(), LockError> {
        let releaser = self.releaser.take().expect("a guard releases once");
        releaser.release().await
    }
}
