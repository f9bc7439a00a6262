//! The lease protocol as a stateright `Model`: workers, the lease row, the
//! server's clock and each worker's own clock.
//!
//! Goal: let the model checker enumerate every interleaving of acquire, renew,
//! release, fenced commit, lost and delayed replies, pauses, crashes with
//! restart, clock skew and concurrent schema creation, for a few workers and a
//! bounded server clock.
//! Method: one server step per statement (PostgreSQL serialises them on the row
//! lock), so "acquire is one statement" is one atomic step, while the variants
//! that split a statement in two get two steps. A statement may also *start*
//! (its `now()` is fixed) and *land* later, after other statements of the same
//! or another owner: a retry whose predecessor was held up (issue 15, chaos
//! seeds 345 and 1171). Its reply is lost — the worker timed out on it. A worker may pause forever:
//! there is no fairness, a worker simply takes no step. Time advances only by
//! the `Tick` action, bounded by `time_ticks_max`.
//! Invariant: the `Ghost` part of the state records the truth the protocol
//! cannot see (which incarnation really holds which grant until which server
//! time); every property is a predicate over the state, and the monitors in
//! `Ghost` are set at the step that breaks I1, I2 or I3.

use crate::properties;
use crate::variant::Variant;
use stateright::{Model, Property};

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

/// The model's configuration; `stateright::Model` is implemented on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseModel {
    /// Number of workers, `1..=WORKERS_MAX`.
    pub workers: usize,
    /// The protocol to check.
    pub variant: Variant,
    /// Lease time to live, in ticks.
    pub ttl_ticks: u8,
    /// The server clock stops at this many ticks (bounds the state space).
    pub time_ticks_max: u8,
    /// Clock offsets range over `0..=skew_ticks_max`, chosen per worker at start.
    pub skew_ticks_max: u8,
    /// A slow clock loses one tick every this many server ticks; 0 disables drift.
    pub drift_period_ticks: u8,
    /// Total crashes (with restart) allowed across all workers.
    pub crashes_max: u8,
    /// Total new grants (takeovers, first acquire) allowed: bounds the tokens,
    /// since release and re-acquire could otherwise repeat without time passing.
    pub grants_max: u8,
    /// Total statements that may start now and land later (0 disables them).
    pub late_statements_max: u8,
    /// Total renewal and commit replies that may be lost (0 disables them).
    pub lost_replies_max: u8,
}

impl LeaseModel {
    /// The default configuration for `workers` workers running `variant`.
    ///
    /// Statements land when they start (`late_statements_max = 0`), except
    /// for [`Variant::ShorteningExtension`], whose mistake only shows when one
    /// lands late: it gets [`LeaseModel::with_late_statements`]'s bounds.
    pub fn new(workers: usize, variant: Variant) -> Self {
        if variant == Variant::ShorteningExtension {
            return LeaseModel::with_late_statements(workers, variant);
        }
        LeaseModel::standard(workers, variant)
    }

    /// The bounds for checking statements that start now and land later
    /// (issue 15): one late statement per run, and clocks without skew or
    /// drift — the late statement decides on the server's clock, so clock
    /// faults add states but no behaviour here; the default configuration
    /// covers them. Every other bound is the default's.
    pub fn with_late_statements(workers: usize, variant: Variant) -> Self {
        LeaseModel {
            skew_ticks_max: 0,
            drift_period_ticks: 0,
            late_statements_max: 1,
            ..LeaseModel::standard(workers, variant)
        }
    }

    /// The bounds for checking lost replies of renewals and fenced commits
    /// (an unknown outcome the worker lives with): one per run, on the
    /// default configuration otherwise, drift off (it adds states, not
    /// behaviour: the kept deadline is the worker's own either way).
    pub fn with_lost_replies(workers: usize, variant: Variant) -> Self {
        LeaseModel {
            drift_period_ticks: 0,
            lost_replies_max: 1,
            ..LeaseModel::standard(workers, variant)
        }
    }

    fn standard(workers: usize, variant: Variant) -> Self {
        LeaseModel {
            workers,
            variant,
            ttl_ticks: 2,
            time_ticks_max: 4,
            skew_ticks_max: 1,
            drift_period_ticks: 2,
            crashes_max: 1,
            grants_max: 3,
            late_statements_max: 0,
            lost_replies_max: 0,
        }
    }

    /// `local = server + offset - (slow ? server / drift_period : 0)`.
    pub fn local_time_ticks(&self, clock: Clock, server_ticks: u8) -> u8 {
        let lost_ticks = if clock.slow && self.drift_period_ticks > 0 {
            server_ticks / self.drift_period_ticks
        } else {
            0
        };
        server_ticks + clock.offset_ticks - lost_ticks
    }

    /// A worker's local time in `state`.
    pub fn worker_local_time_ticks(&self, state: &LeaseState, worker: usize) -> u8 {
        self.local_time_ticks(state.workers[worker].clock, state.now_ticks)
    }

    /// The first server time at which `clock` reads at least `local_ticks`.
    fn server_time_when_local_reaches(&self, clock: Clock, local_ticks: u8) -> u8 {
        let mut server_ticks = 0u8;
        while self.local_time_ticks(clock, server_ticks) < local_ticks {
            server_ticks += 1;
        }
        server_ticks
    }

    /// The owner id an incarnation writes into the row.
    fn owner_id(&self, worker: usize, incarnation: u8) -> Owner {
        Owner {
            worker: worker as u8,
            // FenceOwnerOnly: owner ids are reused by a restarted process.
            incarnation: if self.variant == Variant::FenceOwnerOnly {
                0
            } else {
                incarnation
            },
        }
    }

    /// The time the server compares expiry against for a statement `worker` runs.
    fn judging_time_ticks(&self, state: &LeaseState, worker: usize) -> u8 {
        self.judging_time_at(state, worker, state.now_ticks)
    }

    /// The judging time of a statement of `worker` that started at `server_ticks`.
    fn judging_time_at(&self, state: &LeaseState, worker: usize, server_ticks: u8) -> u8 {
        if self.variant == Variant::WorkerClockExpiry {
            self.local_time_ticks(state.workers[worker].clock, server_ticks)
        } else {
            server_ticks
        }
    }

    /// The `expires_at` a same-owner extension of a live row ending at
    /// `current` writes when it asks for `requested`.
    fn extended_expiry(&self, current: u8, requested: u8) -> u8 {
        if self.variant == Variant::ShorteningExtension {
            requested
        } else {
            current.max(requested)
        }
    }

    /// A row expiry written by `worker`, translated into server time.
    fn expiry_in_server_ticks(
        &self,
        state: &LeaseState,
        worker: usize,
        expires_at_ticks: u8,
    ) -> u8 {
        if self.variant == Variant::WorkerClockExpiry {
            self.server_time_when_local_reaches(state.workers[worker].clock, expires_at_ticks)
        } else {
            expires_at_ticks
        }
    }

    /// Whether `worker` believes it holds the lease right now.
    pub fn believes(&self, state: &LeaseState, worker: usize) -> bool {
        match state.workers[worker].phase {
            Phase::Holding {
                belief_deadline_local_ticks,
                ..
            }
            | Phase::Fenced {
                belief_deadline_local_ticks,
                ..
            } => self.worker_local_time_ticks(state, worker) < belief_deadline_local_ticks,
            _ => false,
        }
    }

    /// Whether the acquire rule would hand the row to `worker` now.
    pub fn row_is_free_for(&self, state: &LeaseState, worker: usize) -> bool {
        match state.row {
            None => true,
            Some(row) => row.expires_at_ticks <= self.judging_time_ticks(state, worker),
        }
    }

    // ----- ghost bookkeeping -------------------------------------------------

    /// A new grant (not a renewal) of `token` to the real incarnation `holder`,
    /// starting at `granted_at_ticks` (its statement's `now()`, which a late
    /// statement took before the present).
    fn record_new_grant(
        state: &mut LeaseState,
        holder: Owner,
        token: u8,
        granted_at_ticks: u8,
        end_server_ticks: u8,
    ) {
        let ghost = &mut state.ghost;
        if let Some(previous) = ghost.grant {
            if previous.end_server_ticks > granted_at_ticks {
                ghost.grants_overlapped = true;
            } else if previous.holder != holder && !previous.released {
                ghost.takeover_after_expiry = true;
            }
        }
        if ghost.token_max_granted > 0 && token <= ghost.token_max_granted {
            ghost.tokens_not_increasing = true;
        }
        ghost.token_max_granted = ghost.token_max_granted.max(token);
        ghost.grants += 1;
        ghost.grant = Some(GhostGrant {
            holder,
            token,
            end_server_ticks,
            released: false,
        });
        ghost.holder_crashed_at_ticks = None;
    }

    /// The server accepted an extension of `token` for `holder` (renew, or a
    /// re-acquire the protocol saw as the same owner).
    fn record_extension(
        state: &mut LeaseState,
        holder: Owner,
        token: u8,
        end_server_ticks: u8,
        same_owner_id: bool,
    ) {
        let Some(grant) = state.ghost.grant.as_mut() else {
            return;
        };
        if grant.token != token {
            return;
        }
        // The promise only grows: an extension that shortens the row (the
        // pre-fix rule) leaves the ghost at the end the holder was told, so
        // a rival granted before it shows as an overlap.
        if grant.holder == holder {
            grant.end_server_ticks = grant.end_server_ticks.max(end_server_ticks);
        } else if same_owner_id {
            // A restarted process inherited its predecessor's grant (owner ids
            // reused): the protocol sees one grant continuing.
            grant.holder = holder;
            grant.end_server_ticks = grant.end_server_ticks.max(end_server_ticks);
            state.ghost.holder_crashed_at_ticks = None;
        }
    }

    /// A guarded write by the real incarnation `writer` under `token` committed.
    fn record_commit(state: &mut LeaseState, writer: Owner, token: u8) {
        let now = state.now_ticks;
        let ghost = &mut state.ghost;
        let current = match ghost.grant {
            Some(grant) => {
                grant.holder == writer && grant.token == token && now < grant.end_server_ticks
            }
            None => false,
        };
        if !current || token < ghost.commit_token_last {
            ghost.stale_write_committed = true;
        }
        ghost.commit_token_last = token;
    }

    // ----- server statements -------------------------------------------------

    /// The fence: the row lock is taken and owner (and token) must match and
    /// the grant must not have expired.
    fn fence_passes(&self, state: &LeaseState, worker: usize, owner: Owner, token: u8) -> bool {
        let Some(row) = state.row else {
            return false;
        };
        let owner_matches = row.owner == owner;
        let token_matches = self.variant == Variant::FenceOwnerOnly || row.token == token;
        let unexpired = row.expires_at_ticks > self.judging_time_ticks(state, worker);
        owner_matches && token_matches && unexpired
    }

    /// Single-statement acquire by `worker`'s `incarnation`, deciding with the
    /// `now()` of `started_ticks`; `None` when the lease is held (no write).
    fn acquire(
        &self,
        state: &mut LeaseState,
        worker: usize,
        incarnation: u8,
        started_ticks: u8,
    ) -> Option<u8> {
        let me = self.owner_id(worker, incarnation);
        let real = Owner {
            worker: worker as u8,
            incarnation,
        };
        let judging_ticks = self.judging_time_at(state, worker, started_ticks);
        let expires_at_ticks = judging_ticks + self.ttl_ticks;
        let end_server_ticks = self.expiry_in_server_ticks(state, worker, expires_at_ticks);
        let may_grant = state.ghost.grants < self.grants_max;
        match state.row {
            None if may_grant => {
                state.row = Some(LeaseRow {
                    owner: me,
                    token: 1,
                    expires_at_ticks,
                });
                Self::record_new_grant(state, real, 1, started_ticks, end_server_ticks);
                Some(1)
            }
            Some(row) if row.owner == me && row.expires_at_ticks > judging_ticks => {
                // Idempotent re-acquire (e.g. after a lost reply): same token.
                let expires_at_ticks = self.extended_expiry(row.expires_at_ticks, expires_at_ticks);
                state.row = Some(LeaseRow {
                    expires_at_ticks,
                    ..row
                });
                let end_server_ticks = self.expiry_in_server_ticks(state, worker, expires_at_ticks);
                Self::record_extension(state, real, row.token, end_server_ticks, true);
                Some(row.token)
            }
            Some(row) if row.expires_at_ticks <= judging_ticks && may_grant => {
                let token = if self.variant == Variant::TokenNotAdvanced {
                    row.token
                } else {
                    row.token + 1
                };
                state.row = Some(LeaseRow {
                    owner: me,
                    token,
                    expires_at_ticks,
                });
                Self::record_new_grant(state, real, token, started_ticks, end_server_ticks);
                Some(token)
            }
            _ => None,
        }
    }

    /// A renewal of `token` by `worker`'s `incarnation`, deciding with the
    /// `now()` of `started_ticks`. Returns whether the row was extended.
    fn renew(
        &self,
        state: &mut LeaseState,
        worker: usize,
        incarnation: u8,
        token: u8,
        started_ticks: u8,
    ) -> bool {
        let owner = self.owner_id(worker, incarnation);
        let real = Owner {
            worker: worker as u8,
            incarnation,
        };
        let judging_ticks = self.judging_time_at(state, worker, started_ticks);
        let Some(row) = state.row else {
            return false;
        };
        let owner_checked = self.variant != Variant::NoOwnerCheck;
        let matches = !owner_checked || (row.owner == owner && row.token == token);
        if !matches || row.expires_at_ticks <= judging_ticks {
            return false;
        }
        let expires_at_ticks =
            self.extended_expiry(row.expires_at_ticks, judging_ticks + self.ttl_ticks);
        state.row = Some(LeaseRow {
            expires_at_ticks,
            ..row
        });
        let end_server_ticks = self.expiry_in_server_ticks(state, worker, expires_at_ticks);
        Self::record_extension(state, real, token, end_server_ticks, false);
        true
    }

    /// A fenced (or, per variant, unfenced) commit attempt by `real` under `token`.
    /// Returns whether the write committed.
    fn commit(&self, state: &mut LeaseState, worker: usize, real: Owner, token: u8) -> bool {
        let owner = self.owner_id(worker, real.incarnation);
        let fenced = !matches!(
            self.variant,
            Variant::UnfencedCommit | Variant::SessionLockLearnsLate
        );
        if fenced && !self.fence_passes(state, worker, owner, token) {
            state.ghost.stale_commit_refused = true;
            return false;
        }
        Self::record_commit(state, real, token);
        true
    }

    // ----- actions -----------------------------------------------------------

    fn worker_steps(&self, state: &LeaseState, worker: usize, actions: &mut Vec<LeaseAction>) {
        let w = worker as u8;
        let entry = &state.workers[worker];
        let late_allowed =
            entry.late.is_none() && state.ghost.late_statements < self.late_statements_max;
        let lost_allowed = state.ghost.lost_replies < self.lost_replies_max;
        let mut push = |step| actions.push(LeaseAction::Worker(w, step));
        match entry.phase {
            Phase::Starting { .. } => push(Step::EnsureSchema),
            Phase::CreatingSchema { .. } => push(Step::CommitSchema),
            Phase::SchemaBlocked { .. } => {
                if !matches!(state.schema, Schema::Creating { .. }) {
                    push(Step::SchemaUnblocked);
                }
            }
            Phase::Failed => {}
            Phase::Idle => {
                if self.variant == Variant::ReadThenWrite {
                    push(Step::ReadRow);
                } else {
                    push(Step::Acquire);
                    if late_allowed {
                        push(Step::StartLateAcquire);
                    }
                }
            }
            Phase::ReadSawFree => push(Step::WriteRow),
            Phase::Granted { .. } => {
                push(Step::ReceiveGrant);
                push(Step::LoseGrantReply);
            }
            Phase::Holding { .. } => {
                // Tick turns an expired belief into Idle, so Holding believes.
                if self.variant == Variant::FenceThenWrite {
                    push(Step::Fence);
                } else {
                    push(Step::Commit);
                }
                push(Step::Renew);
                if late_allowed {
                    push(Step::StartLateRenew);
                }
                if lost_allowed {
                    push(Step::RenewReplyLost);
                    if self.variant != Variant::FenceThenWrite {
                        push(Step::CommitReplyLost);
                    }
                }
                push(Step::Release);
            }
            Phase::Fenced { .. } => push(Step::Write),
        }
        if entry.orphan_commit.is_some() {
            push(Step::DeliverOrphanCommit);
        }
        if entry.late.is_some() {
            push(Step::LandLate);
        }
        if entry.phase != Phase::Failed && state.ghost.crashes < self.crashes_max {
            push(Step::Crash);
            if matches!(entry.phase, Phase::Holding { .. }) && entry.orphan_commit.is_none() {
                push(Step::CrashMidCommit);
            }
            if self.variant == Variant::SessionLockLearnsLate
                && matches!(entry.phase, Phase::Holding { .. })
            {
                push(Step::SessionDies);
            }
        }
    }

    fn apply_step(&self, state: &mut LeaseState, worker: usize, step: Step) -> bool {
        let entry = state.workers[worker];
        let real = Owner {
            worker: worker as u8,
            incarnation: entry.incarnation,
        };
        let retries = self.variant != Variant::SchemaNoRetry;
        let phase = &mut state.workers[worker].phase;
        match (step, entry.phase) {
            (Step::EnsureSchema, Phase::Starting { retried }) => match state.schema {
                Schema::Present => *phase = Phase::Idle,
                Schema::Absent => {
                    state.schema = Schema::Creating {
                        worker: worker as u8,
                    };
                    *phase = Phase::CreatingSchema { retried };
                }
                Schema::Creating { .. } => *phase = Phase::SchemaBlocked { retried },
            },
            (Step::CommitSchema, Phase::CreatingSchema { .. }) => {
                state.schema = Schema::Present;
                *phase = Phase::Idle;
            }
            (Step::SchemaUnblocked, Phase::SchemaBlocked { retried }) => match state.schema {
                // 23505 on pg_type_typname_nsp_index: retry once, then raise.
                Schema::Present => {
                    *phase = if retries && !retried {
                        Phase::Starting { retried: true }
                    } else {
                        Phase::Failed
                    }
                }
                Schema::Absent => {
                    state.schema = Schema::Creating {
                        worker: worker as u8,
                    };
                    *phase = Phase::CreatingSchema { retried };
                }
                Schema::Creating { .. } => return false,
            },
            (Step::Acquire, Phase::Idle) => {
                match self.acquire(state, worker, entry.incarnation, state.now_ticks) {
                    Some(token) => state.workers[worker].phase = Phase::Granted { token },
                    None => return false,
                }
            }
            (Step::ReadRow, Phase::Idle) => {
                let me = self.owner_id(worker, entry.incarnation);
                let free = self.row_is_free_for(state, worker);
                state.workers[worker].phase = match state.row {
                    Some(row) if row.owner == me && row.expires_at_ticks > state.now_ticks => {
                        Phase::Granted { token: row.token }
                    }
                    _ if free => Phase::ReadSawFree,
                    _ => return false,
                };
            }
            (Step::WriteRow, Phase::ReadSawFree) => {
                if state.ghost.grants >= self.grants_max {
                    return false;
                }
                let token = state.row.map_or(1, |row| row.token + 1);
                let expires_at_ticks = state.now_ticks + self.ttl_ticks;
                state.row = Some(LeaseRow {
                    owner: self.owner_id(worker, entry.incarnation),
                    token,
                    expires_at_ticks,
                });
                state.workers[worker].phase = Phase::Granted { token };
                let now = state.now_ticks;
                Self::record_new_grant(state, real, token, now, expires_at_ticks);
            }
            (Step::ReceiveGrant, Phase::Granted { token }) => {
                // The belief starts when the reply is received, in the local clock.
                let belief_deadline_local_ticks =
                    self.worker_local_time_ticks(state, worker) + self.ttl_ticks;
                state.workers[worker].phase = Phase::Holding {
                    token,
                    belief_deadline_local_ticks,
                };
            }
            (Step::LoseGrantReply, Phase::Granted { .. }) => *phase = Phase::Idle,
            (Step::Commit, Phase::Holding { token, .. }) => {
                if !self.commit(state, worker, real, token) {
                    state.workers[worker].phase = Phase::Idle;
                }
            }
            (
                Step::Fence,
                Phase::Holding {
                    token,
                    belief_deadline_local_ticks,
                },
            ) => {
                let owner = self.owner_id(worker, entry.incarnation);
                state.workers[worker].phase = if self.fence_passes(state, worker, owner, token) {
                    Phase::Fenced {
                        token,
                        belief_deadline_local_ticks,
                    }
                } else {
                    state.ghost.stale_commit_refused = true;
                    Phase::Idle
                };
            }
            (
                Step::Write,
                Phase::Fenced {
                    token,
                    belief_deadline_local_ticks,
                },
            ) => {
                Self::record_commit(state, real, token);
                state.workers[worker].phase = Phase::Holding {
                    token,
                    belief_deadline_local_ticks,
                };
                if !self.believes(state, worker) {
                    state.workers[worker].phase = Phase::Idle;
                }
            }
            (Step::Renew, Phase::Holding { token, .. }) => {
                let now = state.now_ticks;
                state.workers[worker].phase =
                    if self.renew(state, worker, entry.incarnation, token, now) {
                        let belief_deadline_local_ticks =
                            self.worker_local_time_ticks(state, worker) + self.ttl_ticks;
                        Phase::Holding {
                            token,
                            belief_deadline_local_ticks,
                        }
                    } else {
                        Phase::Idle
                    };
            }
            (Step::RenewReplyLost, Phase::Holding { token, .. }) => {
                let now = state.now_ticks;
                self.renew(state, worker, entry.incarnation, token, now);
                state.ghost.lost_replies += 1;
            }
            (Step::CommitReplyLost, Phase::Holding { token, .. }) => {
                // Committed or refused, the worker cannot tell: it keeps
                // believing until its deadline, as after a committed cycle.
                self.commit(state, worker, real, token);
                state.ghost.lost_replies += 1;
            }
            (Step::StartLateAcquire, Phase::Idle) => {
                state.workers[worker].late = Some(LateStatement {
                    kind: LateKind::Acquire,
                    incarnation: entry.incarnation,
                    started_server_ticks: state.now_ticks,
                });
                state.ghost.late_statements += 1;
            }
            (Step::StartLateRenew, Phase::Holding { token, .. }) => {
                state.workers[worker].late = Some(LateStatement {
                    kind: LateKind::Renew { token },
                    incarnation: entry.incarnation,
                    started_server_ticks: state.now_ticks,
                });
                state.ghost.late_statements += 1;
            }
            (Step::SessionDies, Phase::Holding { token, .. }) => {
                // The server frees the lock with the session (a crash of the
                // lock's connection, not of the worker): the row is free now,
                // the grant is over, and the worker's phase is untouched.
                let now = state.now_ticks;
                if let Some(row) = state.row {
                    if row.token == token && row.expires_at_ticks > now {
                        state.row = Some(LeaseRow {
                            expires_at_ticks: now,
                            ..row
                        });
                    }
                }
                if let Some(grant) = state.ghost.grant.as_mut() {
                    if grant.holder == real && grant.token == token && grant.end_server_ticks > now
                    {
                        grant.end_server_ticks = now;
                    }
                }
                state.ghost.crashes += 1;
            }
            (Step::LandLate, _) => {
                let Some(late) = entry.late else {
                    return false;
                };
                state.workers[worker].late = None;
                let started = late.started_server_ticks;
                // Its reply goes nowhere: the worker timed out on it.
                match late.kind {
                    LateKind::Acquire => {
                        self.acquire(state, worker, late.incarnation, started);
                    }
                    LateKind::Renew { token } => {
                        self.renew(state, worker, late.incarnation, token, started);
                    }
                }
            }
            (Step::Release, Phase::Holding { token, .. }) => {
                let owner = self.owner_id(worker, entry.incarnation);
                let judging_ticks = self.judging_time_ticks(state, worker);
                if let Some(row) = state.row {
                    let owner_checked = self.variant != Variant::NoOwnerCheck;
                    if !owner_checked || (row.owner == owner && row.token == token) {
                        // Expire the row, never delete it: the token must not restart.
                        state.row = Some(LeaseRow {
                            expires_at_ticks: row.expires_at_ticks.min(judging_ticks),
                            ..row
                        });
                        let now = state.now_ticks;
                        if let Some(grant) = state.ghost.grant.as_mut() {
                            if grant.holder == real
                                && grant.token == token
                                && grant.end_server_ticks > now
                            {
                                grant.end_server_ticks = now;
                                grant.released = true;
                            }
                        }
                    }
                }
                state.workers[worker].phase = Phase::Idle;
            }
            (Step::Crash | Step::CrashMidCommit, _) => {
                if step == Step::CrashMidCommit {
                    let Phase::Holding { token, .. } = entry.phase else {
                        return false;
                    };
                    state.workers[worker].orphan_commit = Some((entry.incarnation, token));
                }
                if entry.phase == (Phase::CreatingSchema { retried: false })
                    || entry.phase == (Phase::CreatingSchema { retried: true })
                {
                    // The open creating transaction aborts with the connection.
                    state.schema = Schema::Absent;
                }
                let now = state.now_ticks;
                if let Some(grant) = state.ghost.grant {
                    if grant.holder == real && grant.end_server_ticks > now {
                        state.ghost.crashed_holder_token = grant.token;
                        state.ghost.holder_crashed_at_ticks = Some(now);
                    }
                }
                state.ghost.crashes += 1;
                let restarted = &mut state.workers[worker];
                restarted.incarnation += 1;
                restarted.phase = Phase::Starting { retried: false };
            }
            (Step::DeliverOrphanCommit, _) => {
                let Some((incarnation, token)) = entry.orphan_commit else {
                    return false;
                };
                state.workers[worker].orphan_commit = None;
                let dead = Owner {
                    worker: worker as u8,
                    incarnation,
                };
                self.commit(state, worker, dead, token);
            }
            _ => return false,
        }
        true
    }

    /// Whether a live worker could take the row over now under this variant's rule.
    pub fn some_live_worker_could_acquire(&self, state: &LeaseState) -> bool {
        (0..self.workers).any(|worker| {
            state.workers[worker].phase != Phase::Failed && self.row_is_free_for(state, worker)
        })
    }

    /// The clocks a worker may start with: every offset, each nominal or slow.
    pub fn initial_clocks(&self) -> Vec<Clock> {
        let mut clocks = Vec::new();
        for offset_ticks in 0..=self.skew_ticks_max {
            clocks.push(Clock {
                offset_ticks,
                slow: false,
            });
            if self.drift_period_ticks > 0 {
                clocks.push(Clock {
                    offset_ticks,
                    slow: true,
                });
            }
        }
        clocks
    }
}

impl Model for LeaseModel {
    type State = LeaseState;
    type Action = LeaseAction;

    fn init_states(&self) -> Vec<LeaseState> {
        assert!(self.workers >= 1);
        assert!(self.workers <= WORKERS_MAX);
        assert!(self.ttl_ticks >= 1);
        assert!(
            self.drift_period_ticks != 1,
            "a clock losing every tick stands still"
        );
        let clocks = self.initial_clocks();
        let mut states = vec![LeaseState {
            worker_count: self.workers as u8,
            now_ticks: 0,
            schema: Schema::Absent,
            row: None,
            workers: [Worker::default(); WORKERS_MAX],
            ghost: Ghost::default(),
        }];
        for worker in 0..self.workers {
            states = states
                .into_iter()
                .flat_map(|state| {
                    clocks.iter().map(move |&clock| {
                        let mut next = state;
                        next.workers[worker].clock = clock;
                        next
                    })
                })
                .collect();
        }
        states
    }

    fn actions(&self, state: &LeaseState, actions: &mut Vec<LeaseAction>) {
        for worker in 0..self.workers {
            self.worker_steps(state, worker, actions);
        }
        if state.now_ticks < self.time_ticks_max {
            actions.push(LeaseAction::Tick);
        }
    }

    fn next_state(&self, last_state: &LeaseState, action: LeaseAction) -> Option<LeaseState> {
        let mut state = *last_state;
        match action {
            LeaseAction::Tick => {
                state.now_ticks += 1;
                for worker in 0..self.workers {
                    // A belief that has run out in the local clock is no belief:
                    // the worker behaves as Idle (folding the two saves states).
                    if matches!(state.workers[worker].phase, Phase::Holding { .. })
                        && !self.believes(&state, worker)
                    {
                        state.workers[worker].phase = Phase::Idle;
                    }
                }
            }
            LeaseAction::Worker(worker, step) => {
                if !self.apply_step(&mut state, worker as usize, step) {
                    return None;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }

    fn format_action(&self, action: &LeaseAction) -> String {
        match action {
            LeaseAction::Tick => "tick".to_string(),
            LeaseAction::Worker(worker, step) => format!("w{worker} {step:?}"),
        }
    }
}

/// The permutation-canonical state: workers sorted, owner references renamed.
/// Workers are interchangeable (ids appear only inside owner ids), so states
/// that differ by a renaming of workers behave alike.
pub fn representative(state: &LeaseState) -> LeaseState {
    let mut order: [usize; WORKERS_MAX] = [0, 1, 2, 3];
    let in_use = state.worker_count as usize;
    order[..in_use].sort_by_key(|&index| state.workers[index]);
    let mut renamed = [0u8; WORKERS_MAX];
    for (new_index, &old_index) in order.iter().enumerate() {
        renamed[old_index] = new_index as u8;
    }
    let mut canonical = *state;
    for (new_index, &old_index) in order.iter().enumerate() {
        canonical.workers[new_index] = state.workers[old_index];
    }
    let rename = |owner: &mut Owner| owner.worker = renamed[owner.worker as usize];
    if let Some(row) = canonical.row.as_mut() {
        rename(&mut row.owner);
    }
    if let Some(grant) = canonical.ghost.grant.as_mut() {
        rename(&mut grant.holder);
    }
    if let Schema::Creating { worker } = canonical.schema {
        canonical.schema = Schema::Creating {
            worker: renamed[worker as usize],
        };
    }
    canonical
}
