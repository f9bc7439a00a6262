//! [`LeaseGuard`]: a held lease that owns itself — it can keep itself alive,
//! says the moment it may be lost, and cannot be used after release.
//!
//! The anchors: .NET DistributedLock's handles (renewed until disposed, a
//! "handle lost" token), etcd's session keep-alive, ShedLock's `SimpleLock`.
//!
//! **What "lost" means here.** The guard fires *lost* when a renewal or a
//! fenced commit finds the lease gone, or when the lease may have expired
//! unseen: no renewal was confirmed before `sent + ttl`, where `sent` is when
//! the last confirmed grant or renewal was *sent* (the server measured the TTL
//! from a moment no earlier; see [`crate::keep_alive`]). Without a keep-alive
//! that deadline is the grant's own end. *Lost* is a belief, not the fence:
//! a holder that raced its work against it still commits through
//! [`LeaseGuard::commit_cycle`], whose fence decides on the server.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::future::BoxFuture;
use leaseproof_protocol::{InvalidInput, Lease, LeaseError, ServerTime, Ttl};
use sqlx::PgConnection;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::keep_alive::{self, Extension, LostReason, Schedule};
use crate::{CycleError, PostgresLeases};

/// A lease this process holds, from [`PostgresLeases::acquire`].
///
/// Dereferences to the [`Lease`] as granted (its `expires_at` is the grant's,
/// or this guard's last [`LeaseGuard::renew`]; [`LeaseGuard::expires_at`] also
/// knows the keep-alive's renewals). Scope, owner, token and `granted_at`
/// never change for the guard's life: a renewal keeps the token.
///
/// **Dropping** the guard without [`LeaseGuard::release`] stops its keep-alive
/// and its deadline timer at once and sends nothing: the lease stays held on
/// the server until its `expires_at`, then any rival takes it over — the
/// crash-recovery path, taken on purpose. Release to hand it over early.
///
/// **Cancellation.** Every method is cancel-safe in the sense that dropping
/// its future leaks no connection (sqlx returns or closes it) and never leaves
/// a lease *believed* held that is not: [`PostgresLeases::acquire`] dropped
/// mid-statement returns no guard, though the grant may have landed (it
/// expires at its TTL; retrying with the same owner returns it);
/// [`LeaseGuard::renew`] dropped mid-statement leaves the guard's deadline
/// where the last confirmed renewal put it; [`LeaseGuard::commit_cycle`]
/// dropped mid-work rolls back (the transaction is dropped, so its writes and
/// the fence's row lock go with it); [`LeaseGuard::release`] dropped
/// mid-statement may or may not have expired the row — either way the guard
/// is gone and the lease ends at the latest at its TTL.
pub struct LeaseGuard {
    leases: PostgresLeases,
    lease: Lease,
    ttl: Ttl,
    shared: Arc<Shared>,
    /// The keep-alive or the deadline timer; aborted on drop and on release.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the guard and its background task both see.
struct Shared {
    lost: watch::Sender<bool>,
    known: Mutex<Known>,
    /// The lease, for what the guard reports about itself.
    lease: Lease,
    /// When the grant was sent: its hold time runs from here.
    granted_sent: Instant,
}

#[derive(Clone, Copy)]
struct Known {
    /// The latest `expires_at` the server confirmed.
    expires_at: ServerTime,
    /// When the last confirmed grant or renewal was sent.
    confirmed_sent: Instant,
    lost_reason: Option<LostReason>,
}

impl Shared {
    fn known(&self) -> Known {
        *self.known.lock().expect("guard state lock")
    }

    fn confirmed(&self, sent: Instant, expires_at: ServerTime) {
        let mut known = self.known.lock().expect("guard state lock");
        known.confirmed_sent = known.confirmed_sent.max(sent);
        known.expires_at = known.expires_at.max(expires_at);
    }

    fn mark_lost(&self, reason: LostReason) {
        let mut known = self.known.lock().expect("guard state lock");
        let first = known.lost_reason.is_none();
        known.lost_reason.get_or_insert(reason);
        drop(known);
        if first {
            let reason = match reason {
                LostReason::Gone => "gone",
                LostReason::Unconfirmed => "unconfirmed",
            };
            crate::observe::lost(&self.lease, reason);
        }
        self.lost.send_replace(true);
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = self.shared.known();
        f.debug_struct("LeaseGuard")
            .field("lease", &self.lease)
            .field("expires_at", &known.expires_at)
            .field("lost", &known.lost_reason)
            .finish_non_exhaustive()
    }
}

impl Deref for LeaseGuard {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.stop_task();
    }
}

impl LeaseGuard {
    pub(crate) fn new(leases: PostgresLeases, lease: Lease, ttl: Ttl, sent: Instant) -> LeaseGuard {
        let reported = lease.clone();
        let (lost, _) = watch::channel(false);
        let known = Known {
            expires_at: lease.expires_at(),
            confirmed_sent: sent,
            lost_reason: None,
        };
        LeaseGuard {
            leases,
            lease,
            ttl,
            shared: Arc::new(Shared {
                lost,
                known: Mutex::new(known),
                lease: reported,
                granted_sent: sent,
            }),
            task: Mutex::new(None),
        }
    }

    /// The lease as granted (see the type's docs for `expires_at`).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The TTL every renewal asks for.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// The latest end of the grant the server confirmed (server time),
    /// including the keep-alive's renewals.
    pub fn expires_at(&self) -> ServerTime {
        self.shared.known().expires_at
    }

    /// Renews the lease every `ttl / 3` in a background task until the guard
    /// is released or dropped (retrying a renewal that could not reach the
    /// server every `ttl / 12`), firing *lost* when one finds the lease gone
    /// or none was confirmed in time.
    pub fn with_keep_alive(self) -> LeaseGuard {
        let schedule = Schedule::for_ttl(self.ttl.as_duration());
        self.start_keep_alive(schedule)
    }

    /// [`Self::with_keep_alive`] renewing every `interval`. `interval` must be
    /// shorter than the TTL (and not zero), or the lease would lapse between
    /// renewals: `Invalid(KeepAliveInterval)` otherwise.
    pub fn with_keep_alive_every(self, interval: Duration) -> Result<LeaseGuard, LeaseError> {
        let ttl = self.ttl.as_duration();
        if interval.is_zero() || interval >= ttl {
            return Err(LeaseError::Invalid(InvalidInput::KeepAliveInterval {
                interval_us: i64::try_from(interval.as_micros()).unwrap_or(i64::MAX),
                ttl_us: self.ttl.as_micros(),
            }));
        }
        Ok(self.start_keep_alive(Schedule::every(ttl, interval)))
    }

    fn start_keep_alive(self, schedule: Schedule) -> LeaseGuard {
        let (leases, lease, ttl) = (self.leases.clone(), self.lease.clone(), self.ttl);
        let shared = Arc::clone(&self.shared);
        let confirmed_sent = shared.known().confirmed_sent;
        self.replace_task(tokio::spawn(async move {
            let reason = keep_alive::run(schedule, confirmed_sent, || {
                let (leases, lease, shared) = (leases.clone(), lease.clone(), Arc::clone(&shared));
                async move {
                    let sent = Instant::now();
                    match leases.renew(&lease, ttl).await {
                        Ok(renewed) => {
                            shared.confirmed(sent, renewed.expires_at());
                            Extension::Extended
                        }
                        Err(LeaseError::Lost { .. }) => Extension::Gone,
                        Err(_) => Extension::Unreachable,
                    }
                }
            })
            .await;
            shared.mark_lost(reason);
        }));
        self
    }

    /// Without a keep-alive, a timer fires *lost* at the deadline the last
    /// confirmation set (moved on by [`Self::renew`]).
    fn ensure_deadline_timer(&self) {
        let mut task = self.task.lock().expect("guard task lock");
        if task.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let ttl = self.ttl.as_duration();
        *task = Some(tokio::spawn(async move {
            // One deadline, read afresh each round: a renewal moves it on
            // while the timer sleeps.
            loop {
                let deadline = shared.known().confirmed_sent + ttl;
                if deadline <= Instant::now() {
                    shared.mark_lost(LostReason::Unconfirmed);
                    return;
                }
                tokio::time::sleep_until(deadline).await;
            }
        }));
    }

    fn replace_task(&self, new: tokio::task::JoinHandle<()>) {
        let old = self.task.lock().expect("guard task lock").replace(new);
        if let Some(old) = old {
            old.abort();
        }
    }

    fn stop_task(&self) {
        if let Some(task) = self.task.lock().expect("guard task lock").take() {
            task.abort();
        }
    }

    /// Whether the guard has learnt the lease is gone or may be (see the
    /// module docs). Also true once the deadline passed, timer or not.
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the guard stopped believing it holds the lease, if it did.
    pub fn lost_reason(&self) -> Option<LostReason> {
        let known = self.shared.known();
        known.lost_reason.or_else(|| {
            (known.confirmed_sent + self.ttl.as_duration() <= Instant::now())
                .then_some(LostReason::Unconfirmed)
        })
    }

    /// A receiver that turns `true` when the lease is lost: race the work
    /// against it (`tokio::select!`) to stop before the fence would refuse.
    pub fn lost_signal(&self) -> watch::Receiver<bool> {
        self.ensure_deadline_timer();
        self.shared.lost.subscribe()
    }

    /// Resolves when the lease is lost, with why. Cancel-safe.
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost_signal();
        // The sender lives in `self.shared`, so it outlives this wait.
        let _ = lost.wait_for(|lost| *lost).await;
        self.lost_reason()
            .expect("lost was signalled with its reason")
    }

    /// Renews now for the guard's TTL (on the server's clock, keeping the
    /// token), moving the deadline on. `Err(Lost)` also fires *lost*.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        let sent = Instant::now();
        match self.leases.renew(&self.lease, self.ttl).await {
            Ok(renewed) => {
                self.shared.confirmed(sent, renewed.expires_at());
                self.lease = renewed;
                Ok(())
            }
            Err(error) => {
                if matches!(error, LeaseError::Lost { .. }) {
                    self.shared.mark_lost(LostReason::Gone);
                }
                Err(error)
            }
        }
    }

    /// The fenced commit cycle under this lease
    /// ([`PostgresLeases::commit_cycle`]); a fence that finds the lease gone
    /// (`CycleError::Lease(Lost)`) also fires *lost*.
    pub async fn commit_cycle<T, E>(
        &self,
        work: impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    ) -> Result<T, CycleError<E>> {
        let result = self.leases.commit_cycle(&self.lease, work).await;
        if let Err(CycleError::Lease(LeaseError::Lost { .. })) = result {
            self.shared.mark_lost(LostReason::Gone);
        }
        result
    }

    /// Stops the keep-alive, then expires the lease now (server time) so a
    /// rival can take over at once. Consumes the guard: a released lease
    /// cannot be used. `Ok(None)` when it was no longer held — the work it
    /// guarded may have overlapped a rival's, and only fenced writes are safe.
    pub async fn release(self) -> Result<Option<ServerTime>, LeaseError> {
        self.stop_task();
        let released = self.leases.release(&self.lease).await;
        if let Ok(Some(_)) = released {
            crate::observe::held_for(self.shared.granted_sent.elapsed());
        }
        released
    }

    /// Stops the keep-alive and gives up the guard, keeping the lease as a
    /// value (for a caller that renews and releases it by hand). The lease
    /// stays held until its `expires_at`.
    pub fn into_lease(self) -> Lease {
        self.stop_task();
        self.lease.clone()
    }
}
