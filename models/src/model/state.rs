//! The model's state: workers, the lease row, the schema, each worker's clock
//! and the ghost that records what the protocol cannot see; and its actions.
//!
//! Goal: one place that says what a state of the model is. Method: plain
//! `Copy` structs of small integers, so stateright hashes and merges states
//! cheaply. Invariant: nothing here decides anything — the transitions live
//! in `steps.rs` (the workers) and `server.rs` (the statements).

/// The largest number of workers a model can have (states hold a fixed array).
pub const WORKERS_MAX: usize = 4;

/// The identity a row stores: a worker and its incarnation (a process start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Owner {
    /// Index of the worker, `0..workers`.
    pub worker: u8,
    /// Which process start of that worker; 0 for the first.
    pub incarnation: u8,
}

/// The one lease row of the scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseRow {
    /// The owner id written by the last grant.
    pub owner: Owner,
    /// The fencing token of the last grant.
    pub token: u8,
    /// Expiry, in server ticks (in the holder's clock for `WorkerClockExpiry`).
    pub expires_at_ticks: u8,
}

/// The lease table's existence, as concurrent `CREATE TABLE IF NOT EXISTS` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Schema {
    /// No table yet.
    Absent,
    /// A worker's creating transaction is open (its catalog rows are locked).
    Creating {
        /// The worker whose transaction is open.
        worker: u8,
    },
    /// The table exists.
    Present,
}

/// A worker's clock: `local = server + offset - (slow ? server / drift_period : 0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Clock {
    /// Constant offset ahead of the server, in ticks.
    pub offset_ticks: u8,
    /// Whether the clock runs slow (loses one tick every `drift_period_ticks`).
    pub slow: bool,
}

/// What a worker is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// About to run `ensure_schema`.
    Starting {
        /// Whether the single retry has been used.
        retried: bool,
    },
    /// Its `CREATE TABLE` transaction is open.
    CreatingSchema {
        /// Whether the single retry has been used.
        retried: bool,
    },
    /// Its `CREATE TABLE` waits for another worker's open creation.
    SchemaBlocked {
        /// Whether the single retry has been used.
        retried: bool,
    },
    /// Start-up raised an error; the worker is out of the game.
    Failed,
    /// Running, not believing it holds the lease.
    Idle,
    /// `ReadThenWrite` only: it read the row as free and will write next.
    ReadSawFree,
    /// The server granted `token`; the reply is in flight (delayed or lost).
    Granted {
        /// The granted token.
        token: u8,
    },
    /// It believes it holds `token` until its own clock reads the deadline.
    Holding {
        /// The token it holds.
        token: u8,
        /// Belief deadline in the worker's local clock.
        belief_deadline_local_ticks: u8,
    },
    /// `FenceThenWrite` only: the fence passed, the write has not happened yet.
    Fenced {
        /// The token it holds.
        token: u8,
        /// Belief deadline in the worker's local clock.
        belief_deadline_local_ticks: u8,
    },
}

/// One worker process (across its incarnations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Worker {
    /// Current incarnation; bumps on every crash and restart.
    pub incarnation: u8,
    /// The worker's clock, fixed for the machine.
    pub clock: Clock,
    /// What the current incarnation is doing.
    pub phase: Phase,
    /// A fenced commit a dead incarnation sent before crashing, still in the
    /// network: `(incarnation, token)`.
    pub orphan_commit: Option<(u8, u8)>,
    /// A statement the server started (its `now()` is fixed) and will apply
    /// later; the worker gave up waiting for its reply.
    pub late: Option<LateStatement>,
    /// With a retry interval: the server time of the next acquisition
    /// attempt after a refused one (`None`: it has not been refused since it
    /// last held or started). Always `None` without a retry interval.
    pub retry_at_ticks: Option<u8>,
}

/// A statement whose `now()` was taken when it started and whose effect lands
/// later (it queued on the row lock, or its retry overtook it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LateStatement {
    /// What it does.
    pub kind: LateKind,
    /// The incarnation that sent it (its owner id).
    pub incarnation: u8,
    /// Server time when it started: its `now()`.
    pub started_server_ticks: u8,
}

/// The statements that can land late.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LateKind {
    /// The single-statement acquire.
    Acquire,
    /// A renewal of `token`.
    Renew {
        /// The token it renews.
        token: u8,
    },
}

impl Default for Worker {
    fn default() -> Self {
        Worker {
            incarnation: 0,
            clock: Clock::default(),
            phase: Phase::Starting { retried: false },
            orphan_commit: None,
            late: None,
            retry_at_ticks: None,
        }
    }
}

/// The current grant as it really is (in server time, with the real incarnation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GhostGrant {
    /// The incarnation that really holds it.
    pub holder: Owner,
    /// Its token.
    pub token: u8,
    /// When it ends, in server ticks: the latest end any statement of this
    /// grant set — what its holder may have been promised.
    pub end_server_ticks: u8,
    /// Whether its holder released it (as opposed to letting it expire).
    pub released: bool,
}

/// History the protocol cannot see, kept small so states still merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Ghost {
    /// The latest grant.
    pub grant: Option<GhostGrant>,
    /// The largest token ever granted (0: none yet).
    pub token_max_granted: u8,
    /// The token of the last committed guarded write (0: none yet).
    pub commit_token_last: u8,
    /// Token of the last grant whose holder crashed while it was current (0: none).
    pub crashed_holder_token: u8,
    /// Server time of that crash, while the crashed grant is still the latest.
    pub holder_crashed_at_ticks: Option<u8>,
    /// Crashes so far (bounded by `crashes_max`).
    pub crashes: u8,
    /// New grants so far (bounded by `grants_max`).
    pub grants: u8,
    /// Statements started late so far (bounded by `late_statements_max`).
    pub late_statements: u8,
    /// Replies of renewals and commits lost so far (bounded by `lost_replies_max`).
    pub lost_replies: u8,
    /// Monitor for I1: a grant started while another was current.
    pub grants_overlapped: bool,
    /// Monitor for I2: a grant's token did not exceed every earlier one.
    pub tokens_not_increasing: bool,
    /// Monitor for I3: a guarded write committed outside its current grant or out of token order.
    pub stale_write_committed: bool,
    /// Witness: a grant was taken over by another incarnation after it expired.
    pub takeover_after_expiry: bool,
    /// Witness: the fence refused a commit.
    pub stale_commit_refused: bool,
}

/// A whole state of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseState {
    /// How many of the `workers` slots are in use.
    pub worker_count: u8,
    /// The server's clock, in ticks.
    pub now_ticks: u8,
    /// The lease table.
    pub schema: Schema,
    /// The lease row, once the first grant created it.
    pub row: Option<LeaseRow>,
    /// The workers; slots `workers..WORKERS_MAX` are unused defaults.
    pub workers: [Worker; WORKERS_MAX],
    /// History monitors and witnesses.
    pub ghost: Ghost,
}

/// A step one worker takes (most are one SQL statement executed by the server).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `CREATE TABLE IF NOT EXISTS` (begins a creation, or finds the table, or blocks).
    EnsureSchema,
    /// The creating transaction commits.
    CommitSchema,
    /// A blocked creation wakes up (the other creator committed or aborted).
    SchemaUnblocked,
    /// The single-statement acquire.
    Acquire,
    /// `ReadThenWrite`: read the row.
    ReadRow,
    /// `ReadThenWrite`: unconditional upsert.
    WriteRow,
    /// The grant reply arrives; the belief deadline starts now, in the local clock.
    ReceiveGrant,
    /// The grant reply is lost; the worker does not know it won.
    LoseGrantReply,
    /// Fence and guarded write in one transaction (or unfenced, per variant).
    Commit,
    /// `FenceThenWrite`: the fence alone.
    Fence,
    /// `FenceThenWrite`: the guarded write alone.
    Write,
    /// Renew the lease.
    Renew,
    /// Release the lease.
    Release,
    /// The process dies and restarts as a new incarnation.
    Crash,
    /// The process dies right after sending a fenced commit; the request stays in flight.
    CrashMidCommit,
    /// A dead incarnation's in-flight commit reaches the server.
    DeliverOrphanCommit,
    /// The server starts an acquisition that will land late; the worker times
    /// out on it and stays idle (it will retry).
    StartLateAcquire,
    /// The server starts a renewal that will land late; the worker keeps its
    /// belief (it does not know the outcome).
    StartLateRenew,
    /// A late statement takes effect with the `now()` it started with.
    LandLate,
    /// A renewal takes effect (or is refused) at the server and its reply is
    /// lost: the worker keeps the deadline it had (it does not know).
    RenewReplyLost,
    /// A fenced commit runs at the server (commits, or is refused) and its
    /// reply is lost: the worker keeps believing and carries on.
    CommitReplyLost,
    /// `SessionLockLearnsLate`: the holder's lock session dies; the server
    /// frees the lock at once, the holder keeps believing (it learns late).
    SessionDies,
}

/// An action of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseAction {
    /// The server clock advances one tick.
    Tick,
    /// A worker takes a step.
    Worker(u8, Step),
}
