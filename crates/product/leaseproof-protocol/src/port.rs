//! The operations the worker loop drives, whatever the backend.

use std::future::Future;
use std::pin::Pin;

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
    /// Server time of the fence; `None` when the design has none on the
    /// store's clock (an unfenced write, a lock on the application's clock):
    /// never a client's clock passed off as the server's.
    pub fenced_at: Option<crate::ServerTime>,
}

/// A point inside a commit cycle where a harness may inject a fault: the
/// stretches a fence must cover. A fence whose row lock ends before `COMMIT`
/// lets a rival take over during a pause at either point, and the stale writes
/// then land under the rival's grant.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CyclePoint {
    /// The fence proved the lease current (a fenced cycle holds its row lock
    /// from here); the guarded writes come next. An unfenced cycle passes it
    /// right after `BEGIN`.
    Fenced,
    /// The guarded writes are done; `COMMIT` comes next.
    Written,
}

/// A fault to run at a [`CyclePoint`] (a pause, usually); `'static` so a port
/// can carry it into a closure the library runs (`commit_cycle`'s work).
pub type CycleFault = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Faults inside a commit cycle, handed to [`LeasePort::commit`].
///
/// A port calls [`CycleFaults::at`] once per point and cycle, in point order,
/// at the point or before the cycle starts (the draw), and awaits the returned
/// future exactly at the point. A cycle that ends early (a refused fence, a
/// failed write) may never await a drawn fault.
pub trait CycleFaults: Send + Sync {
    /// The fault for `point` of the cycle about to run.
    fn at(&self, point: CyclePoint) -> CycleFault;
}

/// No faults inside the cycle.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCycleFaults;

impl CycleFaults for NoCycleFaults {
    fn at(&self, _point: CyclePoint) -> CycleFault {
        Box::pin(async {})
    }
}

/// A lease backend as the verification harness drives it: PostgreSQL, or the
/// simulated database host. The worker loop (ensure_schema → acquire → work →
/// fenced commit → renew / release) is written once against this trait.
///
/// Futures are `Send` so workers can be spawned on any tokio runtime.
pub trait LeasePort: Send + Sync {
    /// Whether the grant times this port returns (`granted_at`, `expires_at`,
    /// release times) come from one server clock. A design that stamps them
    /// with its clients' clocks says `false`: the worker then records its
    /// grants as locks without server times (the token, and the TTL as the
    /// promised lifetime), and the checker judges them in real time instead
    /// of comparing timestamps from different clocks.
    fn reports_server_times(&self) -> bool {
        true
    }

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

    /// Writes `cycle` to the guarded table in one transaction. With
    /// [`Fencing::Fenced`], under the fence: `Err(LeaseError::Lost)` — and
    /// nothing written — when the fence refuses. `faults` run at each
    /// [`CyclePoint`] of the cycle (unfenced: `Fenced` right after `BEGIN`).
    fn commit(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        fencing: Fencing,
        faults: &dyn CycleFaults,
    ) -> impl Future<Output = Result<CommitReceipt, LeaseError>> + Send;
}

/// Whether a guarded cycle takes the fence. Only the harness's `unfenced`
/// worker configuration skips it, to prove the checker catches what the
/// fence prevents; a design without a fence writes the same either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fencing {
    /// The fence is taken in the cycle's transaction before its writes.
    Fenced,
    /// The writes go in without the fence.
    Unfenced,
}
