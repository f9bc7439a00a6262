//! The wire protocol between the port and the simulated database host.
//!
//! Goal: the shape of the real conversation — one-shot statements plus an
//! interactive transaction for the fenced commit — over turmoil's TCP.
//! Method: one JSON object per line. No timestamps travel from client to
//! server: every time comparison happens in the server with its own clock.

use leaseproof_protocol::semantics::Acquisition;
use leaseproof_protocol::{Lease, Owner, Scope, ServerTime, Ttl};
use serde::{Deserialize, Serialize};

/// A message from a client: who sends it (for the trace) and the request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientMessage {
    /// The sending owner id (`w2#inc1`).
    pub client: String,
    /// The statement.
    pub request: Request,
}

/// A statement, or a step of the guarded transaction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// `CREATE TABLE IF NOT EXISTS`.
    EnsureSchema,
    /// The single-statement acquire.
    Acquire {
        /// Scope.
        scope: Scope,
        /// Owner.
        owner: Owner,
        /// TTL.
        ttl: Ttl,
    },
    /// Renew a live lease.
    Renew {
        /// The lease.
        lease: Lease,
        /// TTL.
        ttl: Ttl,
    },
    /// Release a live lease.
    Release {
        /// The lease.
        lease: Lease,
    },
    /// Read-only check.
    Holds {
        /// The lease.
        lease: Lease,
    },
    /// `BEGIN`: fixes the transaction's `now()`.
    Begin,
    /// `SELECT … FOR UPDATE` on the lease row, checked with the statement's time.
    Fence {
        /// The lease.
        lease: Lease,
    },
    /// The guarded writes of one cycle (buffered until commit).
    Write {
        /// The lease the rows are written under.
        lease: Lease,
        /// The cycle id.
        cycle_id: i64,
        /// Rows.
        items: u32,
    },
    /// `COMMIT`.
    Commit,
    /// `pg_try_advisory_lock(key)`: a session-level lock, held by this
    /// session (connection) until unlocked or the session ends.
    AdvisoryTryLock {
        /// The lock's key.
        key: i64,
    },
    /// `pg_advisory_unlock(key)`.
    AdvisoryUnlock {
        /// The lock's key.
        key: i64,
    },
    /// Whether any session holds `key` (`pg_locks`).
    AdvisoryHeld {
        /// The lock's key.
        key: i64,
    },
    /// `SELECT 1`: fails only when the session is gone.
    Ping,
}

impl Request {
    /// Short name for traces and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Request::EnsureSchema => "ensure_schema",
            Request::Acquire { .. } => "acquire",
            Request::Renew { .. } => "renew",
            Request::Release { .. } => "release",
            Request::Holds { .. } => "holds",
            Request::Begin => "begin",
            Request::Fence { .. } => "fence",
            Request::Write { .. } => "write",
            Request::Commit => "commit",
            Request::AdvisoryTryLock { .. } => "pg_try_advisory_lock",
            Request::AdvisoryUnlock { .. } => "pg_advisory_unlock",
            Request::AdvisoryHeld { .. } => "pg_locks",
            Request::Ping => "ping",
        }
    }
}

/// The server's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Response {
    /// The schema exists.
    SchemaReady,
    /// How the acquisition was decided.
    Acquired(Acquisition),
    /// The renewed lease, `None` when lost.
    Renewed(Option<Lease>),
    /// The released lease, `None` when it was no longer held.
    Released(Option<Lease>),
    /// Whether the lease was current.
    Holds(bool),
    /// The transaction began at this server time.
    Begun(ServerTime),
    /// The fence's verdict: the lock is held and the lease current at this
    /// time (`Some`), or the lease is not ours (`None`, nothing locked).
    Fenced(Option<ServerTime>),
    /// The writes are buffered.
    Written,
    /// The transaction committed; the first row's sequence number and the
    /// fence's (or, unfenced, the transaction's) server time.
    Committed {
        /// First row's seq.
        seq_first: i64,
        /// Server time of the fence.
        fenced_at: ServerTime,
    },
    /// A one-column boolean answer (the advisory-lock functions, `SELECT 1`).
    Answer(bool),
    /// A statement error, with its SQLSTATE.
    Error {
        /// SQLSTATE, e.g. `23505`.
        code: String,
        /// The server's message.
        message: String,
    },
}
