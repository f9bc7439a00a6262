//! The records of a history: events (operations, their outcomes, beliefs) and
//! the rows found in the guarded table after the run.
//!
//! Goal: one format for the simulation, the real-server races and files on disk.
//! Method: plain integers and strings only (server times are `i64` microseconds,
//! tokens `u64`), so the checker depends on nothing but serde. Outcomes follow
//! Jepsen: ok, fail, or unknown (`info`) — an unknown outcome may or may not have
//! taken effect, and the checker must allow both.

use serde::{Deserialize, Serialize};

/// One thing a worker did or learnt, stamped with two clocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Position in [`crate::History::events`]; violations name events by it.
    pub index: u64,
    /// The worker's stable name (a task, a process role); incarnations share it.
    pub worker: String,
    /// Which start of the worker this is: a restart is a new incarnation.
    pub incarnation: u64,
    /// A clock common to all workers, used for ordering (simulated time, or the
    /// test's monotonic clock). Never compared with server times.
    pub true_time_us: i64,
    /// The worker's own, possibly skewed, clock.
    pub local_time_us: i64,
    /// What happened.
    pub kind: EventKind,
}

/// What an [`Event`] records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventKind {
    /// An operation was sent; `op_id` pairs it with its [`EventKind::Complete`].
    Invoke {
        /// Unique per history (see [`crate::History::merge`] for merged runs).
        op_id: u64,
        /// The operation and its arguments.
        op: Op,
    },
    /// The worker learnt the outcome of operation `op_id`. An invoke without a
    /// completion (the worker crashed) counts as unknown.
    Complete {
        /// The `op_id` of the matching [`EventKind::Invoke`].
        op_id: u64,
        /// Ok, fail or unknown.
        outcome: Outcome,
    },
    /// The worker starts believing it holds `scope` under `token`.
    BeliefStart {
        /// The scope it believes it holds.
        scope: String,
        /// The token it believes is current.
        token: u64,
    },
    /// The worker stops believing it holds `scope` under `token`.
    BeliefEnd {
        /// The scope.
        scope: String,
        /// The token of the matching [`EventKind::BeliefStart`].
        token: u64,
        /// Why: released, renewal refused, local ttl elapsed, crash…
        reason: String,
    },
}

/// A lease operation as the worker invoked it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Take the lease if free, or re-acquire one's own live grant (idempotent).
    Acquire {
        /// The lease's scope.
        scope: String,
        /// The owner (one incarnation of a worker).
        owner: String,
        /// The requested time to live.
        ttl_us: i64,
    },
    /// Extend one's own live grant, keeping its token.
    Renew {
        /// The lease's scope.
        scope: String,
        /// The owner.
        owner: String,
        /// The token being renewed.
        token: u64,
        /// The requested time to live.
        ttl_us: i64,
    },
    /// Expire one's own live grant now (the row stays; tokens never restart).
    Release {
        /// The lease's scope.
        scope: String,
        /// The owner.
        owner: String,
        /// The token being released.
        token: u64,
    },
    /// One fenced transaction writing `items` rows (item 0..items) to the
    /// guarded table under `token`.
    Commit {
        /// The lease's scope.
        scope: String,
        /// The owner.
        owner: String,
        /// The token the fence checks.
        token: u64,
        /// Identifies the cycle's rows; unique per owner.
        cycle_id: u64,
        /// How many rows the cycle writes.
        items: u32,
    },
    /// A maintenance write of `items` rows (item 0..items) by the holder of
    /// a lock that gives no token (an advisory lock, a Redis key without a
    /// counter): nothing in the store checks the lock, so only real-time
    /// order and the rows' commit order can judge it. Its rows are
    /// [`WorkRow`]s.
    Write {
        /// The lock's scope.
        scope: String,
        /// The owner (the writer's incarnation).
        owner: String,
        /// Identifies the write's rows; unique per owner.
        cycle_id: u64,
        /// How many rows the write inserts.
        items: u32,
    },
}

impl Op {
    /// The scope the operation is about.
    pub fn scope(&self) -> &str {
        match self {
            Op::Acquire { scope, .. }
            | Op::Renew { scope, .. }
            | Op::Release { scope, .. }
            | Op::Commit { scope, .. }
            | Op::Write { scope, .. } => scope,
        }
    }

    /// The op's tag in the format (`"acquire"`, `"commit"`…).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Acquire { .. } => "acquire",
            Op::Renew { .. } => "renew",
            Op::Release { .. } => "release",
            Op::Commit { .. } => "commit",
            Op::Write { .. } => "write",
        }
    }

    /// The owner that invoked it.
    pub fn owner(&self) -> &str {
        match self {
            Op::Acquire { owner, .. }
            | Op::Renew { owner, .. }
            | Op::Release { owner, .. }
            | Op::Commit { owner, .. }
            | Op::Write { owner, .. } => owner,
        }
    }
}

/// Jepsen's three outcomes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// The server answered and the operation took effect.
    Ok {
        /// What the server returned.
        result: OpResult,
    },
    /// The operation certainly did not take effect.
    Fail {
        /// Why, as far as the worker could tell.
        reason: FailReason,
    },
    /// The worker does not know (lost reply, timeout, crash): either way is allowed.
    Unknown {
        /// What made it unknown.
        reason: String,
    },
}

/// Why an operation certainly failed. In JSON `{"kind": "held" | "stale" |
/// "error", "detail": …}`: a `detail` is required for `error` and optional
/// (a note, not evidence) for the other two.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    content = "detail",
    rename_all = "snake_case",
    try_from = "FailReasonRecord"
)]
pub enum FailReason {
    /// Acquire: someone else holds a live grant.
    Held,
    /// Renew, release or commit: the lease was lost (expired, taken over, token
    /// or owner mismatch under the row lock). A commit failing so is a refused
    /// stale commit.
    Stale,
    /// Anything else that certainly rolled back (a constraint, a refused
    /// transaction domain…).
    Error(String),
}

/// A fail reason as written in a file, before it is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailReasonRecord {
    #[serde(deserialize_with = "crate::by_name")]
    kind: FailKind,
    #[serde(default)]
    detail: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum FailKind {
    Held,
    Stale,
    Error,
}

impl TryFrom<FailReasonRecord> for FailReason {
    type Error = String;

    fn try_from(record: FailReasonRecord) -> Result<FailReason, String> {
        match (record.kind, record.detail) {
            (FailKind::Held, _) => Ok(FailReason::Held),
            (FailKind::Stale, _) => Ok(FailReason::Stale),
            (FailKind::Error, Some(detail)) => Ok(FailReason::Error(detail)),
            (FailKind::Error, None) => {
                Err("`detail` is required for kind \"error\": say what failed".to_string())
            }
        }
    }
}

/// What the server returned for an operation that succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpResult {
    /// Acquire and renew: the lease row as returned.
    Lease {
        /// The fencing token of the grant.
        token: u64,
        /// The owner in the row.
        owner: String,
        /// Server time the grant was made (kept by renewals).
        granted_at_us: i64,
        /// Server time the grant ends unless renewed.
        expires_at_us: i64,
    },
    /// Acquire and renew of a lock that reports no server times (an
    /// advisory lock, a Redis key, a ZooKeeper node…): what it promised.
    /// Mutual exclusion is then judged in real time from certain holds (see
    /// `docs/history-format.md`).
    Lock {
        /// The fencing token, where the lock has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
        /// How long the lock promises to live from the operation's
        /// invocation (its TTL); absent for a lock that lives until released
        /// or lost (a session lock).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lifetime_us: Option<i64>,
    },
    /// Release of a lock that reports no server time. (A variant without
    /// fields, not a unit one: serde's internally tagged unit variants
    /// ignore unknown fields, and a typo must be refused.)
    Unlocked {},
    /// Release: the server time the grant ended.
    Released {
        /// The row's new `expires_at`.
        released_at_us: i64,
    },
    /// Write (a [`Op::Write`]): the rows are in; no server time to report.
    Written {},
    /// Commit: the server time of the fence (taken under the lease row lock).
    Committed {
        /// Server time of the fenced transaction; absent when the design has
        /// no fence time on the store's clock (an unfenced write, a lock on
        /// the application's clock).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        committed_at_us: Option<i64>,
    },
}

impl OpResult {
    /// The result's tag in the format (`"lease"`, `"committed"`…).
    pub fn name(&self) -> &'static str {
        match self {
            OpResult::Lease { .. } => "lease",
            OpResult::Lock { .. } => "lock",
            OpResult::Unlocked {} => "unlocked",
            OpResult::Released { .. } => "released",
            OpResult::Written {} => "written",
            OpResult::Committed { .. } => "committed",
        }
    }

    /// The ops ([`Op::name`]) this result can answer.
    pub fn answers(&self) -> &'static [&'static str] {
        match self {
            OpResult::Lease { .. } | OpResult::Lock { .. } => &["acquire", "renew"],
            OpResult::Unlocked {} | OpResult::Released { .. } => &["release"],
            OpResult::Written {} => &["write"],
            OpResult::Committed { .. } => &["commit"],
        }
    }
}

/// One row of the guarded table after the run: ground truth for I3 and I4.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardedRow {
    /// Commit-order sequence number (bigserial or simulated counter), unique.
    pub seq: u64,
    /// The scope whose lease fenced the write.
    pub scope: String,
    /// The owner that wrote it.
    pub owner: String,
    /// The token the fence checked.
    pub token: u64,
    /// The cycle (one fenced transaction) the row belongs to.
    pub cycle_id: u64,
    /// The row's index within its cycle, `0..items`.
    pub item: u32,
    /// Server time of the write, taken under the lease row lock.
    pub written_at_us: i64,
    /// Server time the row's transaction committed, when the backend can
    /// tell; absent, the commit-order rule of I3 is not judged for the row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_at_us: Option<i64>,
}

/// One row written by an [`Op::Write`] (no token), read after the run: the
/// ground truth for the unfenced writes' I3 (commit order) and I4.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkRow {
    /// Insertion sequence number (bigserial), unique.
    pub seq: u64,
    /// The lock's scope the writer held (or believed it held).
    pub scope: String,
    /// The owner that wrote it.
    pub owner: String,
    /// The write the row belongs to.
    pub cycle_id: u64,
    /// The row's index within its write, `0..items`.
    pub item: u32,
    /// Server time the row's transaction committed, when the store can tell
    /// (`pg_xact_commit_timestamp(xmin)`); absent, commit order is not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_at_us: Option<i64>,
}
