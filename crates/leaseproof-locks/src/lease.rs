//! [`LeaseLockManager`]: the reference lease as a [`LockManager`].
//!
//! A guard is a lease under a fresh owner id (one per acquisition, so two
//! acquisitions in one process never share a grant); an optional keep-alive
//! renews it every `ttl / 3` on the server's clock and fires *lost* when a
//! renewal finds it gone (or cannot reach the server before the TTL would
//! have run out). The fence is the lease's own: pass [`LockGuard::lease`] to
//! `PostgresLeases::commit_cycle`, and a holder paused past its TTL has its
//! commit refused instead of landing after a rival's.

use futures_core::future::BoxFuture;
use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{Lease, LeaseError, Owner, Scope, Ttl};
use tokio::sync::watch;

use crate::{AbortOnDrop, Extension, LockError, LockGuard, LockManager, Releaser, TableName};

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
        LeaseError::Held { scope } => LockError::Held { scope },
        LeaseError::Lost { scope, .. } => LockError::Lost { scope },
        LeaseError::Invalid(invalid) => LockError::Invalid(invalid),
        LeaseError::Unavailable { source } => LockError::Unavailable { source },
        other => LockError::Backend {
            source: Box::new(other),
        },
    }
}

impl LeaseLockManager {
    /// Locks as leases of `ttl` on `leases` (whose schema must exist:
    /// `PostgresLeases::ensure_schema`), renewed while held when `keep_alive`.
    pub fn new(
        leases: PostgresLeases,
        prefix: impl Into<String>,
        ttl: Ttl,
        keep_alive: bool,
    ) -> Self {
        LeaseLockManager {
            leases,
            prefix: prefix.into(),
            ttl,
            keep_alive,
        }
    }

    /// The lease library underneath (its pool is the fence's transaction domain).
    pub fn leases(&self) -> &PostgresLeases {
        &self.leases
    }

    async fn acquire(&self, table: &TableName) -> Result<LockGuard, LockError> {
        let scope = table.scope(&self.prefix)?;
        let owner = Owner::generate();
        let lease = self
            .leases
            .acquire(&scope, &owner, self.ttl)
            .await
            .map_err(lock_error)?;
        let (lost_tx, lost_rx) = watch::channel(false);
        let keep_alive = self.keep_alive.then(|| {
            tokio::spawn(keep_alive(
                self.leases.clone(),
                lease.clone(),
                self.ttl,
                lost_tx,
            ))
        });
        Ok(LockGuard::new(
            scope.clone(),
            Some(lease.token),
            Some(lease.clone()),
            lost_rx,
            Box::new(LeaseReleaser {
                leases: self.leases.clone(),
                lease,
                scope,
                keep_alive: keep_alive.map(AbortOnDrop),
            }),
        ))
    }

    async fn locked(&self, table: &TableName) -> Result<bool, LockError> {
        let scope = table.scope(&self.prefix)?;
        let row = self.leases.row(&scope).await.map_err(lock_error)?;
        let Some(row) = row else {
            return Ok(false);
        };
        // Read-only: is the row's current grant live on the server's clock?
        let lease = Lease {
            scope,
            owner: row.owner,
            token: row.token,
            granted_at: row.granted_at,
            expires_at: row.expires_at,
        };
        self.leases.holds(&lease).await.map_err(lock_error)
    }
}

/// Renews `lease` through the shared keep-alive rule; a renewal keeps its token.
async fn keep_alive(leases: PostgresLeases, lease: Lease, ttl: Ttl, lost: watch::Sender<bool>) {
    crate::keep_alive(ttl.as_duration(), lost, || {
        let (leases, lease) = (leases.clone(), lease.clone());
        async move {
            match leases.renew(&lease, ttl).await {
                Ok(renewed) => {
                    assert_eq!(renewed.token, lease.token, "a renewal keeps its token");
                    Extension::Extended
                }
                Err(LeaseError::Lost { .. }) => Extension::Gone,
                Err(_) => Extension::Unreachable,
            }
        }
    })
    .await;
}

struct LeaseReleaser {
    leases: PostgresLeases,
    lease: Lease,
    scope: Scope,
    keep_alive: Option<AbortOnDrop>,
}

impl Releaser for LeaseReleaser {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        Box::pin(async move {
            let LeaseReleaser {
                leases,
                lease,
                scope,
                keep_alive,
            } = *self;
            drop(keep_alive);
            match leases.release(&lease).await.map_err(lock_error)? {
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
        Box::pin(self.acquire(table))
    }

    fn is_locked<'a>(&'a self, table: &'a TableName) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.locked(table))
    }

    fn name(&self) -> &'static str {
        "lease"
    }
}
