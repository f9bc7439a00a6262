//! Every statement the reference lease sends, in one place, so the README, the
//! tests and the benchmarks can quote exactly what runs.
//!
//! Public because users need them: a team that creates tables through its
//! migration tool takes [`CREATE_LEASES`] from here, and a DBA reviewing what
//! a service runs on the database reads the statements, not the Rust. The
//! harness's guarded table (what its fenced commit cycles write) is built
//! only with the feature `harness`.
//!
//! Times come back as integer microseconds since the Unix epoch
//! (`extract(epoch …)` is `numeric` since PostgreSQL 14, so this is exact).

/// The lease table. `IF NOT EXISTS` is idempotent across time but not across
/// concurrency; see `PostgresLeases::ensure_schema` for the retry.
pub const CREATE_LEASES: &str = "\
CREATE TABLE IF NOT EXISTS leaseproof_leases (
    scope      text        PRIMARY KEY CHECK (octet_length(scope) BETWEEN 1 AND 255),
    owner      text        NOT NULL,
    token      bigint      NOT NULL CHECK (token > 0),
    granted_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
)";

/// The lease table's columns as `information_schema` names them, in order:
/// `ensure_schema` compares them after `CREATE TABLE IF NOT EXISTS`, which
/// succeeds silently on a table of the same name with other columns.
pub const LEASES_COLUMNS: &[(&str, &str)] = &[
    ("scope", "text"),
    ("owner", "text"),
    ("token", "bigint"),
    ("granted_at", "timestamp with time zone"),
    ("expires_at", "timestamp with time zone"),
];

/// A table's columns (the one `$1` resolves to on the search path), named as
/// `information_schema` names their types.
///
/// Straight from `pg_attribute` by the table's oid, not through
/// `information_schema.columns`: that view runs privilege functions over every
/// relation in the snapshot, including those of a concurrent creator whose
/// transaction just aborted, and can fail with `XX000` (cache lookup failed)
/// exactly when workers start together — a failure that is not ours.
pub const TABLE_COLUMNS: &str = "\
SELECT a.attname::text, format_type(a.atttypid, NULL)
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum";

/// One scope's row, times in µs: `$1` scope.
pub const SELECT_ROW: &str = "\
SELECT owner, token,
       (extract(epoch FROM granted_at) * 1000000)::int8,
       (extract(epoch FROM expires_at) * 1000000)::int8
FROM leaseproof_leases WHERE scope = $1";

/// The live holder of a scope, read-only, on the server's clock: `$1` scope.
/// What `Err(Held)` carries when the lease was asked to report holders.
pub const SELECT_HOLDER: &str = "\
SELECT owner, token, (extract(epoch FROM expires_at) * 1000000)::int8
FROM leaseproof_leases WHERE scope = $1 AND expires_at > now()";

/// The read-first check (see [`crate::ReadFirst`]): the live grant of
/// another owner, read-only, on the server's clock. `$1` scope, `$2` owner.
/// A row refuses the acquisition at once and names the holder; no row sends
/// the acquisition statement, which decides again under the row lock. The
/// same condition as [`ACQUIRE`]'s `NOT EXISTS`, so a loser costs a
/// primary-key read.
pub const SELECT_RIVAL: &str = "\
SELECT owner, token, (extract(epoch FROM expires_at) * 1000000)::int8
FROM leaseproof_leases WHERE scope = $1 AND expires_at > now() AND owner <> $2";

/// The decision both acquisition forms share, under the row lock: take over an
/// expired row (next token) or extend the same owner's live grant (same token).
///
/// `greatest(…)`: a grant's end never moves backwards except by release. This
/// statement's `now()` is its start, and a statement can land late — it queued
/// on the row lock, or it is the stale twin of a retry that already landed —
/// so `EXCLUDED.expires_at` may lie *before* what the owner was already told;
/// assigning it would shorten a live lease and let a rival in early (chaos
/// seeds 345 and 1171). On a takeover the old end is `<= now()`, so
/// `greatest` is the new end.
macro_rules! acquire_on_conflict {
    () => {
        "\
ON CONFLICT (scope) DO UPDATE SET
    owner      = EXCLUDED.owner,
    token      = CASE WHEN l.expires_at > now() THEN l.token ELSE l.token + 1 END,
    granted_at = CASE WHEN l.expires_at > now() THEN l.granted_at ELSE now() END,
    expires_at = greatest(l.expires_at, EXCLUDED.expires_at)
WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
RETURNING l.token,
          (extract(epoch FROM l.granted_at) * 1000000)::int8,
          (extract(epoch FROM l.expires_at) * 1000000)::int8"
    };
}

/// Acquisition, the guarded single statement. `$1` scope, `$2` owner, `$3` TTL in µs.
///
/// - The `SELECT … WHERE NOT EXISTS` produces no row while another owner holds
///   a live grant, so a loser never reaches the insert: no row lock, no WAL.
/// - Otherwise the insert either creates the row (token 1) or conflicts, locks
///   the row and re-checks the `DO UPDATE … WHERE` against the latest committed
///   version, which closes the window between the guard's snapshot and the
///   lock: a racer that won meanwhile makes the `WHERE` false.
/// - The same owner re-acquiring its live grant (a retry after a lost reply)
///   keeps token and `granted_at` and extends `expires_at` (never shortens
///   it): idempotent.
/// - `now()` is the statement's start: this runs in its own transaction.
pub const ACQUIRE: &str = concat!(
    "\
INSERT INTO leaseproof_leases AS l (scope, owner, token, granted_at, expires_at)
SELECT $1, $2, 1, now(), now() + $3::int8 * interval '1 microsecond'
WHERE NOT EXISTS (
    SELECT 1 FROM leaseproof_leases
    WHERE scope = $1 AND expires_at > now() AND owner <> $2
)
",
    acquire_on_conflict!()
);

/// The seed's bare upsert: same decisions as [`ACQUIRE`] without the guard.
/// Kept so a test can show both forms decide every case identically and the
/// benchmarks can show what the guard saves. Never used by the library.
pub const ACQUIRE_UNGUARDED: &str = concat!(
    "\
INSERT INTO leaseproof_leases AS l (scope, owner, token, granted_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3::int8 * interval '1 microsecond')
",
    acquire_on_conflict!()
);

/// Renewal: `$1` scope, `$2` owner, `$3` token, `$4` TTL in µs. Keeps the token,
/// and never shortens the grant: a renewal that landed late with a stale
/// `now()` must not undo a newer one (see [`ACQUIRE`]'s `greatest`).
pub const RENEW: &str = "\
UPDATE leaseproof_leases
SET expires_at = greatest(expires_at, now() + $4::int8 * interval '1 microsecond')
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
RETURNING (extract(epoch FROM granted_at) * 1000000)::int8,
          (extract(epoch FROM expires_at) * 1000000)::int8";

/// Release: expire the row now. Never `DELETE`: the token must not restart.
/// A release that took effect also notifies [`RELEASED_CHANNEL`] with the
/// scope, delivered when it commits, so waiters wake at once instead of at
/// their next poll (`pg_notify` runs once per released row, in the lateral
/// subquery: the statement still returns one column).
pub const RELEASE: &str = "\
WITH released AS (
    UPDATE leaseproof_leases
    SET expires_at = now()
    WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
    RETURNING scope, expires_at
)
SELECT (extract(epoch FROM released.expires_at) * 1000000)::int8
FROM released, LATERAL (SELECT pg_notify('leaseproof_released', released.scope)) AS woken";

/// The channel a release notifies, its payload the scope (see [`RELEASE`]).
pub const RELEASED_CHANNEL: &str = "leaseproof_released";

/// The read-only check. Past tense: true when it was read.
pub const HOLDS: &str = "\
SELECT EXISTS (
    SELECT 1 FROM leaseproof_leases
    WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
)";

/// The commit-time fence, inside the guarded transaction.
///
/// `FOR UPDATE` conflicts with the row lock the takeover's `ON CONFLICT DO
/// UPDATE` needs, so a rival's acquisition queues behind this transaction's
/// commit instead of landing between the check and the writes.
///
/// It compares with `statement_timestamp()`, not `now()`: inside a transaction
/// `now()` is the time of `BEGIN`, and a fence that ran long after `BEGIN` must
/// still see the lease as it is when the fence runs. Returns the fence's time.
pub const HOLD_FOR_UPDATE: &str = "\
SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::int8
FROM leaseproof_leases
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > statement_timestamp()
FOR UPDATE";

/// The shared fence ([`FenceMode::Shared`](crate::FenceMode::Shared)): the
/// same check as [`HOLD_FOR_UPDATE`], taking `FOR SHARE`. Share locks do not
/// conflict with each other, so several writers under one lease commit side
/// by side; they do conflict with the row lock of the takeover's `ON CONFLICT
/// DO UPDATE` and of a renewal's `UPDATE`, which both queue behind every
/// shared fence's commit (proved by `conformance::takeover_finishes_before_commit`).
pub const HOLD_FOR_SHARE: &str = "\
SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::int8
FROM leaseproof_leases
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > statement_timestamp()
FOR SHARE";

/// Operator's and tests' tool: expire a scope's live grant now, as if its TTL
/// had run out (breaking a stuck lease). The token is untouched.
pub const FORCE_EXPIRE: &str = "\
UPDATE leaseproof_leases SET expires_at = now()
WHERE scope = $1 AND expires_at > now()";

/// The harness's guarded table: what fenced commit cycles write.
#[cfg(feature = "harness")]
pub const CREATE_GUARDED: &str = "\
CREATE TABLE IF NOT EXISTS leaseproof_guarded (
    seq        bigserial   PRIMARY KEY,
    scope      text        NOT NULL,
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    cycle_id   bigint      NOT NULL,
    item       int         NOT NULL,
    written_at timestamptz NOT NULL
)";

/// The guarded table's columns (see [`LEASES_COLUMNS`]).
#[cfg(feature = "harness")]
pub const GUARDED_COLUMNS: &[(&str, &str)] = &[
    ("seq", "bigint"),
    ("scope", "text"),
    ("owner", "text"),
    ("token", "bigint"),
    ("cycle_id", "bigint"),
    ("item", "integer"),
    ("written_at", "timestamp with time zone"),
];

/// One cycle's rows: `$1` scope, `$2` owner, `$3` token, `$4` cycle id, `$5`
/// item count. `written_at` is `now()`, the guarded transaction's start: it lies
/// before the fence, so inside the grant the fence checked.
#[cfg(feature = "harness")]
pub const INSERT_GUARDED: &str = "\
INSERT INTO leaseproof_guarded (scope, owner, token, cycle_id, item, written_at)
SELECT $1, $2, $3, $4, item, now() FROM generate_series(0, $5::int - 1) AS item
RETURNING seq";

/// The guarded table's contents in commit order, times in µs.
#[cfg(feature = "harness")]
pub const SELECT_GUARDED: &str = "\
SELECT seq, scope, owner, token, cycle_id, item,
       (extract(epoch FROM written_at) * 1000000)::int8,
       CASE WHEN current_setting('track_commit_timestamp')::bool
            THEN (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8
       END
FROM leaseproof_guarded ORDER BY seq";

/// The commit cycle's probe before `COMMIT`. Fails with `25P02` when the
/// transaction is aborted (a `work` that swallowed a failed statement),
/// which `COMMIT` itself would silently turn into `ROLLBACK`. Returns the
/// transaction's start in µs (the cycle sends `BEGIN` and its fence in one
/// query, so this is the fence's `statement_timestamp()`), and whether the
/// transaction is still the fenced one: the fence sets the
/// transaction-local `leaseproof.cycle`, gone with the transaction that set
/// it, so this is false when `work` sent a `COMMIT` or `ROLLBACK` of its
/// own (and whatever it wrote after ran unfenced).
pub const CYCLE_PROBE: &str = "SELECT (extract(epoch FROM now()) * 1000000)::int8, \
     coalesce(current_setting('leaseproof.cycle', true), '') = 'fenced'";

/// Ends a commit cycle that will not commit. Harmless (a warning, not an
/// error) when the server already ended the transaction.
pub const ROLLBACK: &str = "ROLLBACK";

/// Which database of which server run a connection is on (name, oid, port,
/// postmaster start in µs): two pools are one transaction domain only when all
/// four agree.
pub const SERVER_IDENTITY: &str = "\
SELECT current_database()::text,
       (SELECT oid::int8 FROM pg_database WHERE datname = current_database()),
       current_setting('port'),
       (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8";
