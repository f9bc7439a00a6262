//! The operations the worker loop drives, whatever the backend.

use std::future::Future;

use crate::{Lease, LeaseError, Owner, Scope, Ttl};

/// One guarded cycle for the harness's guarded table: `items` rows written in
/// one transaction under the lease's fence.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct GuardedCycle {
    /// Unique id of the cycle (the worker draws it).
    pub cycle_id: i64,
    /// Rows to write.
    pub items: u32,
}

/// What a committed cycle reports.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct CommitReceipt {
    /// Sequence number of the first row written.
    pub seq_first: i64,
    /// Server time of the fence.
    pub fenced_at: crate::ServerTime,
}

/// A lease backend as the verification harness drives it: PostgreSQL, or the
/// simulated database host. The worker loop (ensure_schema → acquire → work →
/// fenced commit → renew / release) is written once against this trait.
///
/// Futures are `Send` so workers can be spawned on any tokio runtime.
pub trait LeasePort: Send + Sync {
    /// Creates the lease (and guarded) tables if absent; survives concurrent creation.
    fn ensure_schema(&self) -> impl Future<Output = Result<(), LeaseError>> + Send;

    /// Tries to take `scope` for `owner`; `Err(LeaseError::Held)` when another
    /// owner holds it. Re-acquiring with the same owner is idempotent.
    fn acquire(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send;

    /// Extends a live lease by `ttl` from the server's now, keeping its token.
    fn renew(
        &self,
        lease: &Lease,
        ttl: Ttl,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send;

    /// Expires the lease now; returns the server time it ended, `Ok(None)` when
    /// it was no longer held (released before, expired, or taken over).
    fn release(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Option<crate::ServerTime>, LeaseError>> + Send;

    /// Whether the lease was current when the server read it.
    fn holds(&self, lease: &Lease) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Writes `cycle` to the guarded table under the fence, in one transaction;
    /// `Err(LeaseError::Lost)` — and nothing written — when the fence refuses.
    fn commit(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
    ) -> impl Future<Output = Result<CommitReceipt, LeaseError>> + Send;

    /// The same writes without the fence. Only the harness's `unfenced` worker
    /// configuration calls it, to prove the checker catches what the fence prevents.
    fn commit_unfenced(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
    ) -> impl Future<Output = Result<CommitReceipt, LeaseError>> + Send;
}
