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
    /// [`AcquireHeldViaLibraryNoPing`](Workload::AcquireHeldViaLibraryNoPing)
    /// with connection reuse off (`with_connection_reuse(Duration::ZERO)`):
    /// every statement's connection goes back through sqlx's release ping.
    AcquireHeldViaLibraryNoReuse,
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
    /// The fenced commit cycle under one held lease, as users run it:
    /// `PostgresLeases::commit_cycle` on the library's pool with the default
    /// fence (`SELECT … FOR UPDATE` on the lease row) and one guarded
    /// `INSERT` — `BEGIN` with the fence, the `INSERT`, the probe,
    /// `COMMIT`. All contenders write under the same lease.
    FencedCommit,
    /// [`FencedCommit`](Workload::FencedCommit) without the fence: `BEGIN`,
    /// the same `INSERT`, `COMMIT`.
    UnfencedWrite,
    /// [`FencedCommit`](Workload::FencedCommit) with the shared fence
    /// (`FenceMode::Shared`: `SELECT … FOR SHARE`,
    /// [`sql::HOLD_FOR_SHARE`](leaseproof_postgres::sql::HOLD_FOR_SHARE)).
    FencedCommitShared,
    /// [`FencedCommit`](Workload::FencedCommit) from the library's public
    /// pieces, as code that keeps its own transaction runs it:
    /// `PostgresLeases::begin`, `fence`, the `INSERT`, `commit` — four round
    /// trips (`BEGIN` and `COMMIT` alone, no aborted-transaction probe).
    FencedCommitInPieces,
    /// The single-statement guarded write (`GuardedInsert`, the fence's
    /// `FOR SHARE` inside the `INSERT … SELECT`), in autocommit: one round
    /// trip. All contenders write under one lease.
    GuardedInsertOneStatement,
    /// A peer loser: the plain `UPDATE … WHERE scope = $1 AND expires_at <=
    /// now()` other SQL lock libraries acquire with, on the held scope
    /// ([`PEER_UPDATE_WHERE_EXPIRED`]): matches nothing, writes nothing.
    PeerUpdateWhereExpired,
    /// A peer loser: an upsert that always writes a row version, taking over
    /// only when expired ([`PEER_UPSERT_ALWAYS_WRITING`]), on the held scope.
    PeerUpsertAlwaysWriting,
    /// The physical limit of a loser that must consult the row: a read-only
    /// primary-key lookup of the held scope's row ([`PEER_PK_READ`]).
    PeerPkRead,
    /// [`AcquireHeld`](Workload::AcquireHeld) through the library on a
    /// dedicated connection (`PostgresLeases::acquire_on`): the library's own
    /// cost without the pool's.
    AcquireHeldViaLibraryOnConnection,
    /// A candidate acquisition, measured before any adoption: update first
    /// ([`CANDIDATE_UPDATE_FIRST`]) — the loser's `UPDATE` matches nothing
    /// (no lock, no WAL) and one `NOT EXISTS` says whether the row is missing
    /// (first use: the caller would then insert). On the held scope.
    AcquireHeldCandidateUpdateFirst,
    /// A candidate acquisition, measured before any adoption: a server-side
    /// plpgsql function ([`CANDIDATE_FUNCTION`]) whose loser runs only the
    /// primary-key read (its plan cached per session) and whose winner runs
    /// the current statement. On the held scope.
    AcquireHeldCandidateFunction,
    /// Read first, as raw statements on a connection: the library's read-only
    /// check ([`sql::SELECT_RIVAL`](leaseproof_postgres::sql::SELECT_RIVAL))
    /// and the acquisition statement only when no live grant of another
    /// owner shows — what `PostgresLeases` sends a polling loser
    /// (`ReadFirst::AfterRefusal`, the default) and every acquisition under
    /// `ReadFirst::Always`. A loser costs exactly the read. On the held scope:
    /// the baseline of the library's loser rows.
    AcquireHeldReadFirst,
    /// [`AcquireHeldReadFirst`](Workload::AcquireHeldReadFirst)
    /// on each contender's own scope: what reading first every time
    /// (`ReadFirst::Always`) costs a winner (two round trips), beside
    /// [`Workload::AcquireUncontended`].
    AcquireUncontendedReadFirst,
    /// Winners through the library: `PostgresLeases::acquire_on`, each
    /// contender on its own scope (the same owner re-acquiring extends its
    /// grant). Never refused, so `ReadFirst::AfterRefusal` sends the one
    /// statement: beside [`Workload::AcquireUncontended`].
    AcquireUncontendedViaLibrary,
    /// `SELECT 1` through the library's pool ([`PostgresLeases::pool_options`](leaseproof_postgres::PostgresLeases::pool_options)):
    /// what the pool itself costs, beside [`Workload::AcquireHeldViaLibraryNoPing`].
    SelectOneViaPool,
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
    pub const ALL: [Workload; 27] = [
        Workload::SelectOne,
        Workload::AdvisoryXactLock,
        Workload::AcquireHeld,
        Workload::AcquireHeldUnguarded,
        Workload::AcquireHeldViaLibrary,
        Workload::AcquireHeldViaLibraryNoPing,
        Workload::AcquireHeldViaLibraryNoReuse,
        Workload::AcquireTakeover,
        Workload::AcquireUncontended,
        Workload::Renew,
        Workload::ReleaseReacquire,
        Workload::FencedCommit,
        Workload::UnfencedWrite,
        Workload::FencedCommitShared,
        Workload::FencedCommitInPieces,
        Workload::GuardedInsertOneStatement,
        Workload::PeerUpdateWhereExpired,
        Workload::PeerUpsertAlwaysWriting,
        Workload::PeerPkRead,
        Workload::SelectOneViaPool,
        Workload::AcquireHeldViaLibraryOnConnection,
        Workload::AcquireHeldCandidateUpdateFirst,
        Workload::AcquireHeldCandidateFunction,
        Workload::AcquireHeldReadFirst,
        Workload::AcquireUncontendedReadFirst,
        Workload::AcquireUncontendedViaLibrary,
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
            Workload::AcquireHeldViaLibraryNoReuse => "acquire, held, no conn reuse",
            Workload::AcquireTakeover => "acquire, takeover ttl=1ms",
            Workload::AcquireUncontended => "acquire, uncontended",
            Workload::Renew => "renew",
            Workload::ReleaseReacquire => "release + re-acquire",
            Workload::FencedCommit => "fenced commit",
            Workload::UnfencedWrite => "unfenced write",
            Workload::TakeoverLatency => "takeover ttl=20ms",
            Workload::FencedCommitShared => "fenced commit, for share",
            Workload::FencedCommitInPieces => "fenced commit, in pieces",
            Workload::GuardedInsertOneStatement => "guarded insert, 1 statement",
            Workload::PeerUpdateWhereExpired => "peer: update where expired",
            Workload::PeerUpsertAlwaysWriting => "peer: always-writing upsert",
            Workload::PeerPkRead => "peer: pk read (limit)",
            Workload::SelectOneViaPool => "select 1, via pool",
            Workload::AcquireHeldViaLibraryOnConnection => "acquire, held, acquire_on",
            Workload::AcquireHeldCandidateUpdateFirst => "candidate: update first, held",
            Workload::AcquireHeldCandidateFunction => "candidate: function, held",
            Workload::AcquireHeldReadFirst => "read first, held (raw)",
            Workload::AcquireUncontendedReadFirst => "read first, own (raw)",
            Workload::AcquireUncontendedViaLibrary => "acquire, own, acquire_on",
        }
    }

    /// Statements (and so round trips) each operation sends on its connection,
    /// counting `BEGIN` and `COMMIT`. The library's pool adds a ping per
    /// checkout, which is not counted here: see [`Workload::AcquireHeldViaLibrary`].
    pub fn statements_per_operation(self) -> u32 {
        match self {
            Workload::ReleaseReacquire => 2,
            Workload::UnfencedWrite => 3,
            Workload::FencedCommit
            | Workload::FencedCommitShared
            | Workload::FencedCommitInPieces => 4,
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

    /// Whether every operation is an acquisition of the scope an owner
    /// outside the benchmark holds: each must lose.
    pub fn is_held_acquisition(self) -> bool {
        matches!(
            self,
            Workload::AcquireHeld
                | Workload::AcquireHeldUnguarded
                | Workload::AcquireHeldViaLibrary
                | Workload::AcquireHeldViaLibraryNoPing
                | Workload::AcquireHeldViaLibraryNoReuse
                | Workload::AcquireHeldViaLibraryOnConnection
                | Workload::AcquireHeldCandidateUpdateFirst
                | Workload::AcquireHeldCandidateFunction
                | Workload::AcquireHeldReadFirst
        )
    }

    /// Whether operations acquire a lease and so may be granted.
    pub fn is_acquisition(self) -> bool {
        self.is_held_acquisition()
            || matches!(
                self,
                Workload::AcquireTakeover
                    | Workload::AcquireUncontended
                    | Workload::AcquireUncontendedReadFirst
                    | Workload::AcquireUncontendedViaLibrary
                    | Workload::TakeoverLatency
            )
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The plain update other SQL lock libraries acquire with, on this table: it
/// takes over an expired row and matches nothing on a held one. `$1` scope,
/// `$2` owner, `$3` TTL in µs. Benchmarked only, never used by the library
/// (it cannot create the row, and it cannot be idempotent for its owner).
pub const PEER_UPDATE_WHERE_EXPIRED: &str = "\
UPDATE leaseproof_leases
SET owner = $2, token = token + 1, granted_at = now(),
    expires_at = now() + $3::int8 * interval '1 microsecond'
WHERE scope = $1 AND expires_at <= now()
RETURNING token";

/// An upsert that always writes (another library's shape): every attempt
/// locks the row and writes a new version, taking over only when expired.
pub const PEER_UPSERT_ALWAYS_WRITING: &str = "\
INSERT INTO leaseproof_leases AS l (scope, owner, token, granted_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3::int8 * interval '1 microsecond')
ON CONFLICT (scope) DO UPDATE SET
    owner      = CASE WHEN l.expires_at <= now() THEN EXCLUDED.owner ELSE l.owner END,
    token      = CASE WHEN l.expires_at <= now() THEN l.token + 1 ELSE l.token END,
    granted_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.granted_at END,
    expires_at = CASE WHEN l.expires_at <= now() THEN EXCLUDED.expires_at ELSE l.expires_at END
RETURNING l.owner = $2";

/// The read-only primary-key lookup of a scope's row: `$1` scope.
pub const PEER_PK_READ: &str = "\
SELECT owner, token, expires_at FROM leaseproof_leases WHERE scope = $1";

/// A candidate acquisition (see [`Workload::AcquireHeldCandidateUpdateFirst`]):
/// the lease's decisions as an `UPDATE` (takeover of an expired row with the
/// next token, or the same owner's extension), plus a marker row when the
/// scope has no row yet. `$1` scope, `$2` owner, `$3` TTL in µs. Returns
/// (won, token, granted_at, expires_at); no row at all means held.
pub const CANDIDATE_UPDATE_FIRST: &str = "\
WITH taken AS (
    UPDATE leaseproof_leases AS l SET
        owner      = $2,
        token      = CASE WHEN l.expires_at > now() THEN l.token ELSE l.token + 1 END,
        granted_at = CASE WHEN l.expires_at > now() THEN l.granted_at ELSE now() END,
        expires_at = greatest(l.expires_at, now() + $3::int8 * interval '1 microsecond')
    WHERE l.scope = $1 AND (l.expires_at <= now() OR l.owner = $2)
    RETURNING l.token,
              (extract(epoch FROM l.granted_at) * 1000000)::int8 AS granted_at_us,
              (extract(epoch FROM l.expires_at) * 1000000)::int8 AS expires_at_us
)
SELECT true, token, granted_at_us, expires_at_us FROM taken
UNION ALL
SELECT false, NULL::int8, NULL::int8, NULL::int8
WHERE NOT EXISTS (SELECT 1 FROM leaseproof_leases WHERE scope = $1)";

/// A candidate acquisition (see [`Workload::AcquireHeldCandidateFunction`]):
/// the DDL of a plpgsql function that reads the row first and returns nothing
/// when a live grant of another owner holds it — the loser's whole cost is
/// that read — and otherwise runs the library's own acquisition
/// ([`sql::ACQUIRE`](leaseproof_postgres::sql::ACQUIRE), its parameters
/// renamed), whose `ON CONFLICT … WHERE` decides again under the row lock: the
/// read is a shortcut, never the decision (no read-then-write window).
/// Created in the benchmark's database only.
pub fn candidate_function() -> String {
    let acquire = leaseproof_postgres::sql::ACQUIRE
        .replace("$1", "scope_in")
        .replace("$2", "owner_in")
        .replace("$3", "ttl_us");
    format!(
        "CREATE OR REPLACE FUNCTION leaseproof_candidate_acquire(scope_in text, owner_in text, ttl_us int8)
RETURNS TABLE (token_out int8, granted_at_us int8, expires_at_us int8)
LANGUAGE plpgsql AS $body$
BEGIN
    PERFORM 1 FROM leaseproof_leases
    WHERE scope = scope_in AND expires_at > now() AND owner <> owner_in;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY {acquire};
END
$body$"
    )
}

/// The call of [`candidate_function`]'s function: `$1` scope, `$2` owner, `$3` TTL in µs;
/// no row means held.
pub const CANDIDATE_FUNCTION_CALL: &str =
    "SELECT token_out, granted_at_us, expires_at_us FROM leaseproof_candidate_acquire($1, $2, $3)";
