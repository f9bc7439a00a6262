//! [`LeaseLockManager`]: the reference lease as a [`LockManager`].
//!
//! A guard is a [`LeaseGuard`] under a fresh owner id (one per acquisition, so
//! two acquisitions in one process never share a grant); the optional
//! keep-alive is the lease guard's own (every `ttl / 3`, *lost* when a renewal
//! finds the lease gone or none was confirmed before the TTL since the last
//! confirmed one — see `leaseproof_postgres::keep_alive`). Without it, *lost*
//! fires when the grant's TTL has run out. The fence is the lease's own: pass [`LockGuard::lease`] to
//! `PostgresLeases::commit_cycle`, and a holder paused past its TTL has its
//! commit refused instead of landing after a rival's.

use futures_core::future::BoxFuture;
use leaseproof_postgres::{LeaseGuard, PostgresLeases};
use leaseproof_protocol::{InvalidInput, Lease, LeaseError, Owner, Scope, Ttl};

use crate::{LockError, LockGuard, LockManager, Releaser, TableName};

/// The reference lease behind the lock-manager contract.
#[derive(Clone, Debug)]
pub struct LeaseLockManager {
    leases: PostgresLeases,
    prefix: String,
    ttl: Ttl,
    keep_alive: bool,
}

fn lock_error(error: LeaseError) -> LockError {
    match error {
        LeaseError::Held { scope, holder } => LockError::Held {
            scope,
            holder: holder.map(|holder| holder.to_string()),
        },
        LeaseError::Lost { scope, .. } => LockError::Lost { scope },
        LeaseError::Invalid(invalid) => LockError::Invalid(invalid),
        LeaseError::Unavailable { source } => LockError::Unavailable { source },
        other => LockError::Backend {
            source: Box::new(other),
        },
    }
}

/// How a [`LeaseLockManager`] holds its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseLockOptions {
    /// Each lock's lease TTL.
    pub ttl: Ttl,
    /// Renew the lease every `ttl / 3` while the guard lives. Without it the
    /// guard's *lost* fires when the TTL runs out.
    pub keep_alive: bool,
}

impl Default for LeaseLockOptions {
    /// A 30 s lease, kept alive.
    fn default() -> Self {
        LeaseLockOptions {
            ttl: Ttl::from_millis(30_000).expect("30 s is a valid TTL"),
            keep_alive: true,
        }
    }
}

impl LeaseLockManager {
    /// Locks as leases on `leases` (whose schema must exist:
    /// `PostgresLeases::ensure_schema`), held as `options` say. A refusal
    /// names the holder (`LockError::Held { holder }`) as `leases` are
    /// configured to: by default, at most one read-only round trip on the
    /// skip path; `leases.without_holder_reports()` saves it.
    pub fn new(
        leases: PostgresLeases,
        prefix: impl Into<String>,
        options: LeaseLockOptions,
    ) -> Self {
        LeaseLockManager {
            leases,
            prefix: prefix.into(),
            ttl: options.ttl,
            keep_alive: options.keep_alive,
        }
    }

    /// The lease library underneath (its pool is the fence's transaction domain).
    pub fn leases(&self) -> &PostgresLeases {
        &self.leases
    }

    /// Takes the lock now, or within `wait` (the lease's waiting form: woken
    /// by the holder's release, polling as the floor).
    async fn acquire(
        &self,
        table: &TableName,
        wait: Option<std::time::Duration>,
    ) -> Result<LockGuard, LockError> {
        let scope = table.scope(&self.prefix)?;
        // The keep-alive renews on a pool connection while the work's guarded
        // transaction holds another: with one connection the renewal would
        // wait out the pool's timeout and the lease would lapse mid-work.
        let connections_max = self.leases.pool().options().get_max_connections();
        if self.keep_alive && connections_max < 2 {
            return Err(LockError::Invalid(InvalidInput::PoolTooSmall {
                connections_max,
                connections_min: 2,
            }));
        }
        let owner = Owner::generate();
        let guard = match wait {
            None => self.leases.acquire(&scope, &owner, self.ttl).await,
            Some(timeout) => {
                self.leases
                    .acquire_wait(&scope, &owner, self.ttl, timeout)
                    .await
            }
        }
        .map_err(lock_error)?;
        let guard = if self.keep_alive {
            guard.with_keep_alive()
        } else {
            guard
        };
        let lease = guard.lease().clone();
        Ok(LockGuard::new(
            scope.clone(),
            Some(lease.token()),
            Some(lease),
            guard.lost_signal(),
            Box::new(LeaseReleaser { guard, scope }),
        ))
    }

    async fn locked(&self, table: &TableName) -> Result<bool, LockError> {
        let scope = table.scope(&self.prefix)?;
        let row = self.leases.row(&scope).await.map_err(lock_error)?;
        let Some(row) = row else {
            return Ok(false);
        };
        // Read-only: is the row's current grant live on the server's clock?
        let lease =
            Lease::from_server_reply(scope, row.owner, row.token, row.granted_at, row.expires_at);
        self.leases.holds(&lease).await.map_err(lock_error)
    }
}

/// Releasing the lock releases the lease guard (which stops its keep-alive first).
struct LeaseReleaser {
    guard: LeaseGuard,
    scope: Scope,
}

impl Releaser for LeaseReleaser {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        Box::pin(async move {
            let LeaseReleaser { guard, scope } = *self;
            match guard.release().await.map_err(lock_error)? {
                Some(_) => Ok(()),
                None => Err(LockError::Lost { scope }),
            }
        })
    }
}

impl LockManager for LeaseLockManager {
    fn acquire_lock<'a>(
        &'a self,
        table: &'a TableName,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(self.acquire(table, None))
    }

    /// [`PostgresLeases::acquire_wait`]: woken the moment the holder
    /// releases, polling (a read) as the floor.
    fn acquire_lock_wait<'a>(
        &'a self,
        table: &'a TableName,
        timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(self.acquire(table, Some(timeout)))
    }

    fn is_locked<'a>(&'a self, table: &'a TableName) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.locked(table))
    }

    fn name(&self) -> &'static str {
        "lease"
    }
}
