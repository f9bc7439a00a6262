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
//! or another owner: a retry whose predecessor was held up (the delayed-retry bug, chaos
//! seeds 345 and 1171). Its reply is lost — the worker timed out on it. A worker may pause forever:
//! there is no fairness, a worker simply takes no step. Time advances only by
//! the `Tick` action, bounded by `time_ticks_max`.
//! Invariant: the `Ghost` part of the state records the truth the protocol
//! cannot see (which incarnation really holds which grant until which server
//! time); every property is a predicate over the state, and the monitors in
//! `Ghost` are set at the step that breaks I1, I2 or I3.
//!
//! Files: `state.rs` (what a state is), `steps.rs` (the workers' steps),
//! `server.rs` (the statements and the ghost); this file holds the
//! configuration, the clocks and the `stateright::Model` implementation.

mod properties;
mod server;
mod state;
mod steps;

pub use state::{
    Clock, Ghost, GhostGrant, LateKind, LateStatement, LeaseAction, LeaseRow, LeaseState, Owner,
    Phase, Schema, Step, Worker, WORKERS_MAX,
};

use crate::variant::Variant;
use stateright::{Model, Property};

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
    /// A refused acquisition is retried this many ticks later, and no sooner
    /// or later: time does not pass a retry that is due (0 disables retries
    /// as steps: a worker may then try at any time, or never).
    pub retry_interval_ticks: u8,
}

impl LeaseModel {
    /// The default configuration for `workers` workers running `variant`.
    ///
    /// Statements land when they start (`late_statements_max = 0`), except
    /// for [`Variant::ShorteningExtension`], whose mistake only shows when one
    /// lands late: it gets [`LeaseModel::with_late_statements`]'s bounds; and
    /// [`Variant::BackoffBeyondInterval`], whose mistake needs a retry
    /// interval: [`LeaseModel::with_retry_interval`]'s.
    pub fn new(workers: usize, variant: Variant) -> Self {
        if variant == Variant::ShorteningExtension {
            return LeaseModel::with_late_statements(workers, variant);
        }
        if variant == Variant::BackoffBeyondInterval {
            return LeaseModel::with_retry_interval(workers, variant);
        }
        LeaseModel::standard(workers, variant)
    }

    /// The bounds for checking statements that start now and land later
    /// (the delayed-retry bug): one late statement per run, and clocks without skew or
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

    /// Faults in combination: a statement that lands late, a lost reply and
    /// a crash may all happen in one history (one of each per run). Made
    /// tractable as [`LeaseModel::with_late_statements`] is: clocks without
    /// skew or drift (the late statement and the lost reply act on the
    /// server's clock and the worker's kept deadline, which skew and drift
    /// shift but do not change in kind; the default configuration covers
    /// them), symmetric search over the two workers.
    pub fn with_combined_faults(workers: usize, variant: Variant) -> Self {
        LeaseModel {
            skew_ticks_max: 0,
            drift_period_ticks: 0,
            late_statements_max: 1,
            lost_replies_max: 1,
            crashes_max: 1,
            ..LeaseModel::standard(workers, variant)
        }
    }

    /// The bounds for checking the bounded takeover (I5) with the worker
    /// loop's retry interval: a refused rival retries exactly one interval
    /// later, so a crashed holder's scope must be taken over within TTL plus
    /// one interval of its crash. One tick of interval, a clock long enough
    /// for a crash, an expiry and a retry; no clock skew or drift (the retry
    /// is scheduled in server time: the worker loop sleeps its interval, and
    /// skew does not change how long a sleep lasts).
    pub fn with_retry_interval(workers: usize, variant: Variant) -> Self {
        LeaseModel {
            skew_ticks_max: 0,
            drift_period_ticks: 0,
            time_ticks_max: 5,
            retry_interval_ticks: 1,
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
            retry_interval_ticks: 0,
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
    pub(crate) fn owner_id(&self, worker: usize, incarnation: u8) -> Owner {
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
    pub(crate) fn expiry_in_server_ticks(
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

    /// Whether some idle worker's retry of a refused acquisition is due now.
    pub fn retry_due(&self, state: &LeaseState) -> bool {
        (0..self.workers).any(|worker| {
            let entry = &state.workers[worker];
            entry.phase == Phase::Idle
                && entry
                    .retry_at_ticks
                    .is_some_and(|retry_at_ticks| retry_at_ticks <= state.now_ticks)
        })
    }

    /// The server time a worker refused now retries at.
    pub(crate) fn next_retry_ticks(&self, now_ticks: u8) -> u8 {
        let backoff_ticks = if self.variant == Variant::BackoffBeyondInterval {
            self.ttl_ticks
        } else {
            0
        };
        now_ticks + self.retry_interval_ticks + backoff_ticks
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
        // A due retry is urgent: the worker loop sleeps exactly its interval.
        if state.now_ticks < self.time_ticks_max && !self.retry_due(state) {
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
