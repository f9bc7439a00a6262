//! Leader election on the lease: one leader at a time, with a fence.
//!
//! Goal: what client-go's `leaderelection` gives — campaign, lead while
//! renewing, step down when the leadership is lost, watch who leads — with
//! two things it does not: every term carries a **fencing token** that the
//! lease's fence checks where the leader writes (a leader paused past its
//! term has its commit refused, not landed after its successor's), and every
//! time comparison is made on the **server's clock** (client-go times a
//! lease on each candidate's own clock, which its documentation says is not
//! tolerant to clock rate skew).
//! Method: a term is a lease of the election's scope. [`Election::campaign`]
//! waits for it ([`PostgresLeases::acquire_wait`]: woken by the previous
//! leader's release, polling as the floor) and keeps it alive;
//! [`Leadership::lost`] fires the moment a renewal fails or may have failed,
//! which is when a leader must step down; [`Leadership::resign`] releases
//! it, waking the next candidate. [`Election::observe`] follows the leader
//! by the same wake-ups and polls.
//! Invariant: a leader's writes go through [`Leadership::commit_cycle`] (the
//! lease's fence), so two terms never both write, whatever the clocks and
//! pauses.
//!
//! # Leader election
//!
//! The README's sample (with the metrics every operation reports), run as a
//! doc-test against a throwaway cluster; a test keeps the README's copy
//! identical to the visible lines:
//!
//! ```rust
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(database) = leaseproof_pgcluster::test_database().await else { return Ok(()) };
//! # let leases = leaseproof_postgres::PostgresLeases::connect(&database.url, 8).await?;
//! # leases.ensure_schema().await?;
//! # sqlx::query("CREATE TABLE results (job text)").execute(leases.pool()).await?;
//! # use std::time::Duration;
//! # use leaseproof_protocol::{Owner, Scope, Ttl};
//! # let recorder = metrics_util::debugging::DebuggingRecorder::new();
//! # let snapshotter = recorder.snapshotter();
//! use leaseproof_postgres::Election;
//!
//! metrics::set_global_recorder(recorder)?;              // your exporter (optional): leaseproof_acquisitions_total, …
//! let election = Election::new(leases.clone(), Scope::new("scheduler")?, Ttl::from_millis(15_000)?);
//! let leadership = election.campaign(&Owner::generate(), Duration::from_secs(60)).await?; // waits its turn
//! let tick = leadership.commit_cycle(|connection| Box::pin(async move { // only a current term's writes land
//!     sqlx::query("INSERT INTO results (job) VALUES ('tick')").execute(connection).await
//! }));
//! tokio::select! {
//!     done = tick => drop(done?),
//!     reason = leadership.lost() => return Err(format!("step down: {reason:?}").into()), // at once
//! }
//! leadership.resign().await?;                           // the next candidate is woken at once
//! # let counted = snapshotter.snapshot().into_vec().into_iter()
//! #     .any(|(key, ..)| key.key().name() == "leaseproof_acquisitions_total");
//! # assert!(counted, "the recorder saw the campaign's acquisition");
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use leaseproof_protocol::{FencingToken, Holder, Lease, LeaseError, Owner, Scope, ServerTime, Ttl};
use sqlx::PgConnection;
use tokio::sync::watch;

use crate::keep_alive::LostReason;
use crate::wake::Releases;
use crate::{CycleError, LeaseGuard, PostgresLeases};

/// One election: the candidates for one scope.
///
/// ```rust
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let Some(database) = leaseproof_pgcluster::test_database().await else { return Ok(()) };
/// # let leases = leaseproof_postgres::PostgresLeases::connect(&database.url, 8).await?;
/// # leases.ensure_schema().await?;
/// use std::time::Duration;
/// use leaseproof_postgres::Election;
/// use leaseproof_protocol::{Owner, Scope, Ttl};
///
/// let election = Election::new(leases.clone(), Scope::new("scheduler")?, Ttl::from_millis(15_000)?);
/// let mut leader = election.observe(Duration::from_millis(500)); // who leads, as it changes
/// let leadership = election.campaign(&Owner::generate(), Duration::from_secs(60)).await?;
/// tokio::select! {
///     reason = leadership.lost() => println!("step down: {reason:?}"),
///     _ = leader.wait_for(|holder| holder.is_some()) => {
///         // Lead. Writes only the leader may make go through the term's fence:
///         leadership.commit_cycle(|connection| Box::pin(async move {
///             sqlx::query("SELECT 1").execute(connection).await
///         })).await?;
///     }
/// }
/// leadership.resign().await?; // the next candidate is woken at once
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    leases: PostgresLeases,
    scope: Scope,
    term_ttl: Ttl,
}

/// A candidate's term as leader. Dropping it without [`Leadership::resign`]
/// stops the renewals: the term ends at its TTL and another candidate leads.
#[derive(Debug)]
pub struct Leadership {
    guard: LeaseGuard,
}

impl Election {
    /// An election for `scope` on `leases` (whose schema must exist), each
    /// term a lease of `term_ttl` renewed every third of it.
    pub fn new(leases: PostgresLeases, scope: Scope, term_ttl: Ttl) -> Election {
        Election {
            leases,
            scope,
            term_ttl,
        }
    }

    /// Runs for leader as `candidate` (one owner id per process start:
    /// [`Owner::generate`]) for up to `timeout`; `Err(Held)` naming the
    /// leader when the time runs out. Cancel-safe: a dropped campaign leads
    /// nothing.
    pub async fn campaign(
        &self,
        candidate: &Owner,
        timeout: Duration,
    ) -> Result<Leadership, LeaseError> {
        let guard = self
            .leases
            .acquire_wait(&self.scope, candidate, self.term_ttl, timeout)
            .await?;
        Ok(Leadership {
            guard: guard.with_keep_alive(),
        })
    }

    /// The leader as the server reads it now (past tense), or `None`.
    pub async fn leader(&self) -> Result<Option<Holder>, LeaseError> {
        self.leases.holder(&self.scope).await
    }

    /// Follows the leader: the receiver holds the current leader (or
    /// `None`) and changes when another term starts or the last one ends,
    /// seen within `poll` — at once for a resignation (its release wakes the
    /// observer). The observing task ends when every receiver is dropped; a
    /// read that fails keeps the last value and retries at the next poll.
    pub fn observe(&self, poll: Duration) -> watch::Receiver<Option<Holder>> {
        let (sender, receiver) = watch::channel(None);
        let election = self.clone();
        tokio::spawn(async move {
            let mut releases = Releases::listen(&election.leases).await;
            loop {
                if let Ok(leader) = election.leader().await {
                    // Only a new term (or its end) is a change: a renewal
                    // moves `expires_at`, not the leader.
                    sender.send_if_modified(|current: &mut Option<Holder>| {
                        let term = |holder: &Holder| (holder.owner.clone(), holder.token);
                        let changed = current.as_ref().map(term) != leader.as_ref().map(term);
                        *current = leader;
                        changed
                    });
                }
                let wait = async {
                    match releases.as_mut() {
                        Some(releases) => releases.released(&election.scope).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = sender.closed() => return,
                    () = wait => {}
                    () = tokio::time::sleep(poll) => {}
                }
            }
        });
        receiver
    }
}

impl Leadership {
    /// This term's fencing token: larger than every earlier term's.
    pub fn token(&self) -> FencingToken {
        self.guard.lease().token()
    }

    /// The candidate that leads.
    pub fn leader(&self) -> &Owner {
        self.guard.lease().owner()
    }

    /// The term as a lease: its token and its times on the server's clock.
    pub fn lease(&self) -> &Lease {
        self.guard.lease()
    }

    /// Whether the leadership is (or may be) lost: a renewal failed, or the
    /// last confirmed renewal's send time plus the TTL has passed.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the leadership is (or may be) lost: step down at once.
    pub async fn lost(&self) -> LostReason {
        self.guard.lost().await
    }

    /// The leader's writes, fenced by this term: committed only while it
    /// still leads (`Err(Lease(Lost))` and nothing written otherwise).
    pub async fn commit_cycle<T, E, F>(&self, work: F) -> Result<T, CycleError<E>>
    where
        F: for<'c> FnOnce(
            &'c mut PgConnection,
        ) -> futures_core::future::BoxFuture<'c, Result<T, E>>,
    {
        self.guard.commit_cycle(work).await
    }

    /// Steps down: ends the term now (the next candidate is woken) and
    /// returns when it ended on the server's clock; `Ok(None)` when it had
    /// already ended (lost).
    pub async fn resign(self) -> Result<Option<ServerTime>, LeaseError> {
        self.guard.release().await
    }
}
