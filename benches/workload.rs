//! What the load generator can run: one variant per statement shape measured.
//!
//! Goal: name every workload of the benchmark once, with the statement it sends
//! and the contention it sets up, so the criterion benches, the CLI table and
//! the test all mean the same thing by "AcquireHeld at 8 contenders".
//! Invariant: the baselines (`SelectOne`, `AdvisoryXactLock`) run through the
//! same contender loop, connections and timing as the lease workloads, so their
//! ratios compare statements, not harnesses.

use std::fmt;
use std::time::Duration;

/// One benchmark workload. Every contender has its own connection and loops
/// one operation; what the operation is and what it contends on is below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// `SELECT 1`: the round-trip limit, the baseline of every ratio.
    SelectOne,
    /// `SELECT pg_try_advisory_xact_lock(key)` on one key shared by all
    /// contenders: PostgreSQL's own lock, the second baseline.
    AdvisoryXactLock,
    /// The guarded acquire ([`sql::ACQUIRE`](leaseproof_postgres::sql::ACQUIRE))
    /// on one scope held by an owner outside the benchmark: every attempt loses.
    AcquireHeld,
    /// The seed's bare upsert ([`sql::ACQUIRE_UNGUARDED`](leaseproof_postgres::sql::ACQUIRE_UNGUARDED))
    /// on the same held scope: every attempt loses after locking the row.
    AcquireHeldUnguarded,
    /// [`AcquireHeld`](Workload::AcquireHeld) through the library,
    /// `PostgresLeases::acquire` on a default sqlx pool of `contenders`
    /// connections: what a user calling the API gets.
    AcquireHeldViaLibrary,
    /// [`AcquireHeldViaLibrary`](Workload::AcquireHeldViaLibrary) on a pool
    /// with `test_before_acquire(false)`: without sqlx's default ping (one
    /// extra round trip) on every checkout.
    AcquireHeldViaLibraryNoPing,
    /// The guarded acquire on one scope with the shortest TTL
    /// ([`TAKEOVER_TTL`]): the lease keeps expiring and being taken over. A
    /// winner continues as a new owner (a new incarnation), so every grant is
    /// a takeover with the next token.
    AcquireTakeover,
    /// The guarded acquire, each contender on its own scope: every attempt wins
    /// (the same owner re-acquiring extends its grant).
    AcquireUncontended,
    /// Renewal, each contender of its own lease.
    Renew,
    /// Release and re-acquire (two statements per operation), each contender
    /// on its own scope: every re-acquire is a new grant with the next token.
    ReleaseReacquire,
    /// The fenced commit cycle under one held lease: `BEGIN`, the fence
    /// (`SELECT … FOR UPDATE` on the lease row), one guarded `INSERT`,
    /// `COMMIT`. All contenders write under the same lease.
    FencedCommit,
    /// [`FencedCommit`](Workload::FencedCommit) without the fence: `BEGIN`,
    /// the same `INSERT`, `COMMIT`.
    UnfencedWrite,
    /// Takeover of a crashed holder: the guarded acquire on one scope with a
    /// [`TAKEOVER_LATENCY_TTL`] lease nobody renews; the delay from each
    /// grant's `expires_at` to the next grant is measured in server time and as
    /// the client observed it.
    TakeoverLatency,
}

/// TTL of [`Workload::AcquireTakeover`]: the shortest the protocol accepts.
pub const TAKEOVER_TTL: Duration = Duration::from_millis(1);

/// TTL of [`Workload::TakeoverLatency`]: long enough that contenders poll a
/// held lease between takeovers, as they would after a holder's crash.
pub const TAKEOVER_LATENCY_TTL: Duration = Duration::from_millis(20);

/// TTL of grants that must not expire during a run (held scopes, renewals).
pub const HELD_TTL: Duration = Duration::from_secs(3600);

impl Workload {
    /// Every workload, baselines first.
    pub const ALL: [Workload; 13] = [
        Workload::SelectOne,
        Workload::AdvisoryXactLock,
        Workload::AcquireHeld,
        Workload::AcquireHeldUnguarded,
        Workload::AcquireHeldViaLibrary,
        Workload::AcquireHeldViaLibraryNoPing,
        Workload::AcquireTakeover,
        Workload::AcquireUncontended,
        Workload::Renew,
        Workload::ReleaseReacquire,
        Workload::FencedCommit,
        Workload::UnfencedWrite,
        Workload::TakeoverLatency,
    ];

    /// Short name for tables and benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            Workload::SelectOne => "select 1",
            Workload::AdvisoryXactLock => "advisory xact lock",
            Workload::AcquireHeld => "acquire, held (losers)",
            Workload::AcquireHeldUnguarded => "acquire unguarded, held",
            Workload::AcquireHeldViaLibrary => "acquire, held, via pool",
            Workload::AcquireHeldViaLibraryNoPing => "acquire, held, pool no ping",
            Workload::AcquireTakeover => "acquire, takeover ttl=1ms",
            Workload::AcquireUncontended => "acquire, uncontended",
            Workload::Renew => "renew",
            Workload::ReleaseReacquire => "release + re-acquire",
            Workload::FencedCommit => "fenced commit",
            Workload::UnfencedWrite => "unfenced write",
            Workload::TakeoverLatency => "takeover ttl=20ms",
        }
    }

    /// Statements (and so round trips) each operation sends on its connection,
    /// counting `BEGIN` and `COMMIT`. The library's pool adds a ping per
    /// checkout, which is not counted here: see [`Workload::AcquireHeldViaLibrary`].
    pub fn statements_per_operation(self) -> u32 {
        match self {
            Workload::ReleaseReacquire => 2,
            Workload::FencedCommit => 4,
            Workload::UnfencedWrite => 3,
            _ => 1,
        }
    }

    /// Server transactions each operation commits when every statement runs in
    /// autocommit or in the operation's one transaction.
    pub fn transactions_per_operation(self) -> u32 {
        match self {
            Workload::ReleaseReacquire => 2,
            _ => 1,
        }
    }

    /// Whether operations acquire a lease and so may be granted.
    pub fn is_acquisition(self) -> bool {
        matches!(
            self,
            Workload::AcquireHeld
                | Workload::AcquireHeldUnguarded
                | Workload::AcquireHeldViaLibrary
                | Workload::AcquireHeldViaLibraryNoPing
                | Workload::AcquireTakeover
                | Workload::AcquireUncontended
                | Workload::TakeoverLatency
        )
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
