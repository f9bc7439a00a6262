//! Model paths as histories: the model's counterexamples judged by the one
//! checker, and the reference's behaviours held to "never cry wolf".
//!
//! Goal: tie the model to `leaseproof_history::check` both ways. A broken
//! variant's counterexample, recorded as a harness records a run, must be
//! convicted by the checker of the invariant the model found broken; no path
//! of the reference model may be convicted of anything.
//! Method: replay a path state by state and write what an observer of the
//! workers and the server would record: each operation's invocation and
//! outcome (a lost reply or a timed-out late statement is unknown; a crash
//! leaves its operation open), belief starts and ends, and the guarded rows
//! with their commit times. One tick is one second; every event and every
//! statement gets the tick plus its order in the path, so real-time order is
//! the path's order and statements get distinct, increasing server times, as
//! on a real server (server and true time are one clock here). Grant stamps are the
//! server's truth for every variant — also for `WorkerClockExpiry`, whose row
//! holds a worker-clock deadline: what a grant really lasted, in server time,
//! as the simulated database records it. Every statement decides at the time
//! it stamps (a late one with the `now()` it started with), so the histories
//! are judged with `GrantStamps::Decision`.
//! Invariant: one invoke per operation and at most one completion, events in
//! path order; nothing is recorded that the path did not do.
//!
//! The search ([`shortest_convicted_path`]) is breadth-first without symmetry
//! reduction: the first convicted state it meets has a shortest path to it.
//! The model's shortest counterexample may lack the evidence a history can
//! carry (a stale write with no rival's write to compare it with), so the
//! search asks for the shortest path the *checker* can convict — and the test
//! asserts one exists for every variant whose invariant a history can show.

use crate::model::{LateKind, LeaseAction, LeaseModel, LeaseState, Owner, Phase, Step};
use crate::variant::Variant;
use leaseproof_history::{
    check, check_with_takeover_bound, CheckConfig, CheckReport, EventKind, FailReason, GuardedRow,
    History, Invariant, Op, OpResult, Outcome, TakeoverBound,
};
use stateright::Model;
use std::collections::{BTreeMap, HashMap};

/// One server tick in the history's microseconds.
pub const TICK_US: i64 = 1_000_000;

/// The scope every model history is about.
pub const SCOPE: &str = "model";

/// A path as the model checker walks it: each state with the action taken
/// from it (`None` for the last state).
pub type ModelPath = Vec<(LeaseState, Option<LeaseAction>)>;

/// The checker's invariant a variant's expected property names, or `None`
/// when it is not one a history can show (start-up failures leave no history).
pub fn expected_invariant(variant: Variant) -> Option<Invariant> {
    let name = variant.expected_violation()?;
    Invariant::ALL
        .into_iter()
        .find(|invariant| invariant.slug() == name)
}

/// The checker's configuration for model histories (see the module docs).
pub fn check_config() -> CheckConfig {
    CheckConfig::default()
}

/// Judges `path` of `model` with the checker.
pub fn judge(model: &LeaseModel, path: &[(LeaseState, Option<LeaseAction>)]) -> CheckReport {
    judge_history(model, &history_of(model, path))
}

/// Judges a model history: with a retry interval, also the bounded takeover
/// (I5) — a waiting rival retries exactly one interval after a refusal, so a
/// dead holder's scope is taken over within one interval of its expiry.
/// Server and true time are the same clock here: the bound's offset is 0.
fn judge_history(model: &LeaseModel, history: &History) -> CheckReport {
    if model.retry_interval_ticks == 0 {
        return check(history, &check_config());
    }
    // The model's clock has ticks; an event's order within its tick is not
    // time. One interval, to the tick: up to the end of the interval's last tick.
    let bound = TakeoverBound {
        slack_us: (i64::from(model.retry_interval_ticks) + 1) * TICK_US - 1,
        server_minus_true_us: 0,
    };
    check_with_takeover_bound(history, &check_config(), &bound)
}

/// An operation the converter has invoked and not completed yet.
#[derive(Clone, Debug)]
struct Pending {
    op_id: u64,
    /// For an acquire: the reply the server sent when it granted (the row
    /// may change before the reply arrives).
    reply: Option<Outcome>,
    /// For a fenced commit split in two (`FenceThenWrite`): its cycle and the
    /// server time its transaction started.
    cycle_id: u64,
    fenced_at_us: i64,
}

/// What the converter remembers per worker between steps.
#[derive(Clone, Debug, Default)]
struct Lane {
    acquire: Option<Pending>,
    fence: Option<Pending>,
    /// The commit a dying incarnation sent (`CrashMidCommit`): its cycle.
    orphan_cycle: Option<u64>,
    believes: Option<u8>,
    /// The server time a late acquisition started (its `now()`).
    late_stamp_us: Option<i64>,
}

struct Recorder<'m> {
    model: &'m LeaseModel,
    history: History,
    lanes: Vec<Lane>,
    /// When each token was granted, server µs.
    granted_at_us: BTreeMap<u8, i64>,
    /// The server time of the current step's statement.
    stamp_us: i64,
    op_id_next: u64,
    cycle_id_next: u64,
    seq_next: u64,
    /// Events so far: spreads the events of one tick in true time.
    order: i64,
}

/// Records `path` of `model` as a [`History`] (see the module docs).
pub fn history_of(model: &LeaseModel, path: &[(LeaseState, Option<LeaseAction>)]) -> History {
    let mut recorder = Recorder {
        model,
        history: History::default(),
        lanes: vec![Lane::default(); model.workers],
        granted_at_us: BTreeMap::new(),
        stamp_us: 0,
        op_id_next: 0,
        cycle_id_next: 0,
        seq_next: 0,
        order: 0,
    };
    for pair in path.windows(2) {
        let (before, action) = (&pair[0].0, pair[0].1);
        let after = &pair[1].0;
        let action = action.expect("every state but the last has an action");
        recorder.step(before, action, after);
    }
    // The model's guarded table is exact: every committed row is in it.
    recorder.history.tables_read.guarded = true;
    recorder.history
}

impl Recorder<'_> {
    fn owner_name(&self, worker: usize, incarnation: u8) -> String {
        let owner: Owner = self.model.owner_id(worker, incarnation);
        format!("w{}.{}", owner.worker, owner.incarnation)
    }

    fn push(&mut self, state: &LeaseState, worker: usize, kind: EventKind) -> u64 {
        self.order += 1;
        let entry = &state.workers[worker];
        let local_ticks = self.model.local_time_ticks(entry.clock, state.now_ticks);
        let true_time_us = i64::from(state.now_ticks) * TICK_US + self.order;
        let local_time_us = i64::from(local_ticks) * TICK_US + self.order;
        self.history.push(
            &format!("w{worker}"),
            u64::from(entry.incarnation),
            true_time_us,
            local_time_us,
            kind,
        )
    }

    /// Invokes `op` and reserves the server time its statement runs at.
    fn invoke(&mut self, state: &LeaseState, worker: usize, op: Op) -> u64 {
        let op_id = self.op_id_next;
        self.op_id_next += 1;
        self.push(state, worker, EventKind::Invoke { op_id, op });
        self.stamp(state);
        op_id
    }

    /// The server's clock for a statement run now: the tick plus the
    /// statement's order, so statements get distinct, increasing times as on
    /// a real server (whose clock has microseconds) while every decision the
    /// model takes at a tick stays true of them.
    fn stamp(&mut self, state: &LeaseState) -> i64 {
        self.order += 1;
        self.stamp_us = i64::from(state.now_ticks) * TICK_US + self.order;
        self.stamp_us
    }

    /// Remembers when a grant the step made began.
    fn note_grant(&mut self, before: &LeaseState, after: &LeaseState, granted_at_us: i64) {
        if after.ghost.grants > before.ghost.grants {
            let grant = after.ghost.grant.expect("a new grant is the ghost's grant");
            self.granted_at_us.insert(grant.token, granted_at_us);
        }
    }

    fn complete(&mut self, state: &LeaseState, worker: usize, op_id: u64, outcome: Outcome) {
        self.push(state, worker, EventKind::Complete { op_id, outcome });
    }

    fn unknown(reason: &str) -> Outcome {
        Outcome::Unknown {
            reason: reason.to_string(),
        }
    }

    fn stale() -> Outcome {
        Outcome::Fail {
            reason: FailReason::Stale,
        }
    }

    fn belief_start(&mut self, state: &LeaseState, worker: usize, token: u8) {
        self.lanes[worker].believes = Some(token);
        let kind = EventKind::BeliefStart {
            scope: SCOPE.to_string(),
            token: u64::from(token),
        };
        self.push(state, worker, kind);
    }

    fn belief_end(&mut self, state: &LeaseState, worker: usize, reason: &str) {
        if let Some(token) = self.lanes[worker].believes.take() {
            let kind = EventKind::BeliefEnd {
                scope: SCOPE.to_string(),
                token: u64::from(token),
                reason: reason.to_string(),
            };
            self.push(state, worker, kind);
        }
    }

    /// The lease as the row shows it after a statement of `worker`, in
    /// server time.
    fn lease_result(&self, after: &LeaseState, worker: usize) -> Outcome {
        let row = after.row.expect("a granted or renewed lease has a row");
        let expires_at_ticks =
            self.model
                .expiry_in_server_ticks(after, worker, row.expires_at_ticks);
        let granted_at_us = self.granted_at_us[&row.token];
        Outcome::Ok {
            result: OpResult::Lease {
                token: u64::from(row.token),
                owner: format!("w{}.{}", row.owner.worker, row.owner.incarnation),
                granted_at_us,
                expires_at_us: i64::from(expires_at_ticks) * TICK_US,
            },
        }
    }

    fn acquire_op(&self, worker: usize, incarnation: u8) -> Op {
        Op::Acquire {
            scope: SCOPE.to_string(),
            owner: self.owner_name(worker, incarnation),
            ttl_us: i64::from(self.model.ttl_ticks) * TICK_US,
        }
    }

    fn renew_op(&self, worker: usize, incarnation: u8, token: u8) -> Op {
        Op::Renew {
            scope: SCOPE.to_string(),
            owner: self.owner_name(worker, incarnation),
            token: u64::from(token),
            ttl_us: i64::from(self.model.ttl_ticks) * TICK_US,
        }
    }

    fn commit_op(&mut self, worker: usize, incarnation: u8, token: u8) -> (Op, u64) {
        let cycle_id = self.cycle_id_next;
        self.cycle_id_next += 1;
        let op = Op::Commit {
            scope: SCOPE.to_string(),
            owner: self.owner_name(worker, incarnation),
            token: u64::from(token),
            cycle_id,
            items: 1,
        };
        (op, cycle_id)
    }

    /// The guarded row of a committed cycle: written when its transaction
    /// started, committed at `committed_at_us`.
    fn guarded_row(
        &mut self,
        owner: String,
        token: u8,
        cycle_id: u64,
        written_at_us: i64,
        committed_at_us: i64,
    ) {
        let seq = self.seq_next;
        self.seq_next += 1;
        self.history.guarded_rows.push(GuardedRow {
            seq,
            scope: SCOPE.to_string(),
            owner,
            token: u64::from(token),
            cycle_id,
            item: 0,
            written_at_us,
            committed_at_us: Some(committed_at_us),
        });
    }

    /// Whether a commit attempt of `worker`'s incarnation under `token`
    /// commits in `before` — the model's own fence, run on a copy.
    fn commits(&self, before: &LeaseState, worker: usize, incarnation: u8, token: u8) -> bool {
        let real = Owner {
            worker: worker as u8,
            incarnation,
        };
        let mut copy = *before;
        self.model.commit(&mut copy, worker, real, token)
    }

    /// A commit answered ok; the format's `committed_at_us` is the time
    /// its fence proved the grant current.
    fn committed(fenced_at_us: i64) -> Outcome {
        Outcome::Ok {
            result: OpResult::Committed {
                committed_at_us: Some(fenced_at_us),
            },
        }
    }

    /// Records one step of the path: a tick, or one worker's step, each
    /// step's record in a method of its own next to `steps.rs`' rules.
    fn step(&mut self, before: &LeaseState, action: LeaseAction, after: &LeaseState) {
        let LeaseAction::Worker(worker, step) = action else {
            // A tick: beliefs whose deadline passed in their local clock end.
            for worker in 0..self.model.workers {
                let was = matches!(before.workers[worker].phase, Phase::Holding { .. });
                let is = matches!(after.workers[worker].phase, Phase::Holding { .. });
                if was && !is {
                    self.belief_end(after, worker, "expired");
                }
            }
            return;
        };
        let worker = worker as usize;
        let moved = Moved {
            before,
            after,
            worker,
            incarnation: before.workers[worker].incarnation,
        };
        match (step, before.workers[worker].phase) {
            (Step::Acquire | Step::ReadRow, _) => self.acquire_sent(&moved, step),
            (Step::WriteRow, _) => self.acquire_written(&moved),
            (Step::StartLateAcquire, _) => {
                let op_id = self.invoke(before, worker, self.acquire_op(worker, moved.incarnation));
                self.lanes[worker].late_stamp_us = Some(self.stamp_us);
                self.complete(after, worker, op_id, Self::unknown("timed out"));
            }
            (Step::ReceiveGrant, Phase::Granted { token }) => {
                let pending = self.lanes[worker]
                    .acquire
                    .take()
                    .expect("an acquire in flight");
                let reply = pending.reply.expect("a granted acquire has its reply");
                self.complete(after, worker, pending.op_id, reply);
                self.belief_start(after, worker, token);
            }
            (Step::LoseGrantReply, _) => {
                let pending = self.lanes[worker]
                    .acquire
                    .take()
                    .expect("an acquire in flight");
                self.complete(after, worker, pending.op_id, Self::unknown("reply lost"));
            }
            (Step::Renew, Phase::Holding { token, .. }) => self.renewed(&moved, token),
            (Step::RenewReplyLost | Step::StartLateRenew, Phase::Holding { token, .. }) => {
                let op_id = self.invoke(
                    before,
                    worker,
                    self.renew_op(worker, moved.incarnation, token),
                );
                self.complete(after, worker, op_id, Self::unknown("reply lost"));
            }
            (Step::Release, Phase::Holding { token, .. }) => self.released(&moved, token),
            (Step::Commit | Step::CommitReplyLost, Phase::Holding { token, .. }) => {
                self.commit_sent(&moved, step, token);
            }
            (Step::Fence, Phase::Holding { token, .. }) => self.fence_sent(&moved, token),
            (Step::Write, Phase::Fenced { token, .. }) => self.fenced_write(&moved, token),
            (Step::CrashMidCommit, Phase::Holding { token, .. }) => {
                self.crashed_mid_commit(&moved, token);
            }
            (Step::Crash, _) => {
                // The process dies: its open operations stay open, its belief
                // ends with it (the checker ends it at the next incarnation).
                // What is still in flight outlives it: an orphan commit, a
                // late statement.
                let Lane {
                    orphan_cycle,
                    late_stamp_us,
                    ..
                } = self.lanes[worker];
                self.lanes[worker] = Lane {
                    orphan_cycle,
                    late_stamp_us,
                    ..Lane::default()
                };
            }
            (Step::DeliverOrphanCommit, _) => self.orphan_delivered(&moved),
            (Step::LandLate, _) => self.late_landed(&moved),
            (Step::EnsureSchema | Step::CommitSchema | Step::SchemaUnblocked, _) => {}
            (Step::SessionDies, _) => {
                // The server ends the grant with the session; nobody is told.
            }
            (step, phase) => unreachable!("{step:?} is not enabled in {phase:?}"),
        }
    }

    /// An acquisition (or the read-then-write design's read) is sent; a
    /// refusal completes at once, a grant waits for its reply.
    fn acquire_sent(&mut self, moved: &Moved<'_>, step: Step) {
        let op_id = self.invoke(
            moved.before,
            moved.worker,
            self.acquire_op(moved.worker, moved.incarnation),
        );
        self.note_grant(moved.before, moved.after, self.stamp_us);
        let phase_after = moved.after.workers[moved.worker].phase;
        if step == Step::Acquire && phase_after == Phase::Idle {
            // Refused (a step only with a retry interval).
            let held = Outcome::Fail {
                reason: FailReason::Held,
            };
            self.complete(moved.after, moved.worker, op_id, held);
            return;
        }
        let reply = matches!(phase_after, Phase::Granted { .. })
            .then(|| self.lease_result(moved.after, moved.worker));
        self.lanes[moved.worker].acquire = Some(Pending {
            op_id,
            reply,
            cycle_id: 0,
            fenced_at_us: 0,
        });
    }

    /// The read-then-write acquisition's write: the server's reply.
    fn acquire_written(&mut self, moved: &Moved<'_>) {
        let at_us = self.stamp(moved.before);
        self.note_grant(moved.before, moved.after, at_us);
        let reply = self.lease_result(moved.after, moved.worker);
        let pending = self.lanes[moved.worker]
            .acquire
            .as_mut()
            .expect("an acquire in flight");
        pending.reply = Some(reply);
    }

    /// A renewal: kept, or refused and the belief ends.
    fn renewed(&mut self, moved: &Moved<'_>, token: u8) {
        let op_id = self.invoke(
            moved.before,
            moved.worker,
            self.renew_op(moved.worker, moved.incarnation, token),
        );
        if matches!(
            moved.after.workers[moved.worker].phase,
            Phase::Holding { .. }
        ) {
            let outcome = self.lease_result(moved.after, moved.worker);
            self.complete(moved.after, moved.worker, op_id, outcome);
        } else {
            self.complete(moved.after, moved.worker, op_id, Self::stale());
            self.belief_end(moved.after, moved.worker, "lost");
        }
    }

    /// A release: the belief ends; it matched if the row or the grant moved.
    fn released(&mut self, moved: &Moved<'_>, token: u8) {
        let op = Op::Release {
            scope: SCOPE.to_string(),
            owner: self.owner_name(moved.worker, moved.incarnation),
            token: u64::from(token),
        };
        let op_id = self.invoke(moved.before, moved.worker, op);
        let released_at_us = self.stamp_us;
        self.belief_end(moved.before, moved.worker, "released");
        let matched = moved.after.row != moved.before.row
            || moved.after.ghost.grant != moved.before.ghost.grant;
        let outcome = if matched {
            Outcome::Ok {
                result: OpResult::Released { released_at_us },
            }
        } else {
            Self::stale()
        };
        self.complete(moved.after, moved.worker, op_id, outcome);
    }

    /// A one-step commit (its reply possibly lost): the row lands if the
    /// model's fence lets it.
    fn commit_sent(&mut self, moved: &Moved<'_>, step: Step, token: u8) {
        let committed = self.commits(moved.before, moved.worker, moved.incarnation, token);
        let (op, cycle_id) = self.commit_op(moved.worker, moved.incarnation, token);
        let owner = op.owner().to_string();
        let op_id = self.invoke(moved.before, moved.worker, op);
        let at_us = self.stamp_us;
        if committed {
            self.guarded_row(owner, token, cycle_id, at_us, at_us);
        }
        let outcome = match (step, committed) {
            (Step::CommitReplyLost, _) => Self::unknown("reply lost"),
            (_, true) => Self::committed(at_us),
            (_, false) => Self::stale(),
        };
        let refused = matches!(outcome, Outcome::Fail { .. });
        self.complete(moved.after, moved.worker, op_id, outcome);
        if refused {
            self.belief_end(moved.after, moved.worker, "stale");
        }
    }

    /// A two-step commit's fence: held until the write, or refused.
    fn fence_sent(&mut self, moved: &Moved<'_>, token: u8) {
        let (op, cycle_id) = self.commit_op(moved.worker, moved.incarnation, token);
        let op_id = self.invoke(moved.before, moved.worker, op);
        if matches!(
            moved.after.workers[moved.worker].phase,
            Phase::Fenced { .. }
        ) {
            self.lanes[moved.worker].fence = Some(Pending {
                op_id,
                reply: None,
                cycle_id,
                fenced_at_us: self.stamp_us,
            });
        } else {
            self.complete(moved.after, moved.worker, op_id, Self::stale());
            self.belief_end(moved.after, moved.worker, "stale");
        }
    }

    /// A two-step commit's write under its fence: the row and the commit.
    fn fenced_write(&mut self, moved: &Moved<'_>, token: u8) {
        let pending = self.lanes[moved.worker]
            .fence
            .take()
            .expect("a fenced cycle");
        let owner = self.owner_name(moved.worker, moved.incarnation);
        let at_us = self.stamp(moved.before);
        self.guarded_row(owner, token, pending.cycle_id, pending.fenced_at_us, at_us);
        self.complete(
            moved.after,
            moved.worker,
            pending.op_id,
            Self::committed(pending.fenced_at_us),
        );
        if moved.after.workers[moved.worker].phase == Phase::Idle {
            self.belief_end(moved.after, moved.worker, "expired");
        }
    }

    /// The dying incarnation sent its commit: invoked, never completed.
    fn crashed_mid_commit(&mut self, moved: &Moved<'_>, token: u8) {
        let (op, cycle_id) = self.commit_op(moved.worker, moved.incarnation, token);
        self.invoke(moved.before, moved.worker, op);
        // A late statement of the dead moved.incarnation may still land.
        let late_stamp_us = self.lanes[moved.worker].late_stamp_us;
        self.lanes[moved.worker] = Lane {
            orphan_cycle: Some(cycle_id),
            late_stamp_us,
            ..Lane::default()
        };
    }

    /// A dead incarnation's commit reaches the server: its row lands if the
    /// fence lets it; nobody hears the outcome.
    fn orphan_delivered(&mut self, moved: &Moved<'_>) {
        let (dead, token) = moved.before.workers[moved.worker]
            .orphan_commit
            .expect("an orphan commit in flight");
        let cycle_id = self.lanes[moved.worker]
            .orphan_cycle
            .take()
            .expect("the orphan's cycle was recorded");
        let at_us = self.stamp(moved.before);
        if self.commits(moved.before, moved.worker, dead, token) {
            let owner = self.owner_name(moved.worker, dead);
            self.guarded_row(owner, token, cycle_id, at_us, at_us);
        }
    }

    /// A late statement lands, server-side only: the worker gave up on the
    /// reply. A late acquisition that grants is stamped with the `now()` it
    /// started with, and decided with it.
    fn late_landed(&mut self, moved: &Moved<'_>) {
        if let Some(LateKind::Acquire) = moved.before.workers[moved.worker]
            .late
            .map(|late| late.kind)
        {
            let started_us = self.lanes[moved.worker]
                .late_stamp_us
                .take()
                .expect("a late acquisition was started");
            self.note_grant(moved.before, moved.after, started_us);
        }
    }
}

/// One worker's step as the recorder sees it: the states around it, the
/// worker, and its incarnation before the step.
#[derive(Clone, Copy)]
struct Moved<'s> {
    before: &'s LeaseState,
    after: &'s LeaseState,
    worker: usize,
    incarnation: u8,
}

/// Breadth-first over every reachable state of `model` (no symmetry
/// reduction), calling `visit` with each newly found state and a way to get
/// its shortest path; stops when `visit` returns `true` and returns that
/// state's path.
///
/// A state is found once per *history digest*: the highest token committed
/// so far, and which workers have been refused an acquisition. The model's
/// state keeps only the last committed token and forgets a refusal once its
/// worker is granted, so a path where a rival committed before a stale write
/// (or was refused, then waited) lands in the same state as one where it
/// never did — and only the first path would be kept, while the history of
/// the second is the one that shows the violation.
fn breadth_first(
    model: &LeaseModel,
    mut visit: impl FnMut(&LeaseState, &dyn Fn() -> ModelPath) -> bool,
) -> Option<ModelPath> {
    /// (state, highest committed token, workers refused so far).
    type Key = (LeaseState, u8, u8);
    // Each key once, with the index of its parent and the action from it.
    let mut nodes: Vec<(Key, Option<(usize, LeaseAction)>)> = Vec::new();
    let mut index_of: HashMap<Key, usize> = HashMap::new();
    let path_to = |nodes: &[(Key, Option<(usize, LeaseAction)>)], mut index: usize| {
        let mut path = vec![(nodes[index].0 .0, None)];
        while let Some((parent, action)) = nodes[index].1 {
            path.push((nodes[parent].0 .0, Some(action)));
            index = parent;
        }
        path.reverse();
        path
    };
    for state in model.init_states() {
        let key = (state, state.ghost.commit_token_last, 0);
        if index_of.contains_key(&key) {
            continue;
        }
        index_of.insert(key, nodes.len());
        nodes.push((key, None));
    }
    let mut actions = Vec::new();
    let mut next = 0;
    while next < nodes.len() {
        let index = next;
        next += 1;
        let (state, committed_max, refused) = nodes[index].0;
        if visit(&state, &|| path_to(&nodes, index)) {
            return Some(path_to(&nodes, index));
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for &action in &actions {
            let Some(successor) = model.next_state(&state, action) else {
                continue;
            };
            let refused_now = match action {
                LeaseAction::Worker(worker, Step::Acquire)
                    if successor.workers[usize::from(worker)].phase == Phase::Idle =>
                {
                    1 << worker
                }
                _ => 0,
            };
            let key = (
                successor,
                committed_max.max(successor.ghost.commit_token_last),
                refused | refused_now,
            );
            if index_of.contains_key(&key) {
                continue;
            }
            index_of.insert(key, nodes.len());
            nodes.push((key, Some((index, action))));
        }
    }
    None
}

/// The shortest path of `model` whose history the checker convicts of
/// `invariant`, with the checker's report; `None` if no reachable state's
/// path is convicted of it. Only states where the ghost's monitor of that
/// invariant fired are judged (a history cannot show what did not happen).
pub fn shortest_convicted_path(
    model: &LeaseModel,
    invariant: Invariant,
) -> Option<(ModelPath, CheckReport)> {
    let mut report = None;
    let path = breadth_first(model, |state, path| {
        let ghost = &state.ghost;
        let fired = match invariant {
            Invariant::MutualExclusion => ghost.grants_overlapped,
            Invariant::TokenOrder => ghost.tokens_not_increasing,
            Invariant::FencedWrites => ghost.stale_write_committed,
            // The ghost has no monitor for a late takeover: judge every path
            // after a takeover that followed a crash.
            Invariant::BoundedTakeover => ghost.takeover_after_expiry,
            _ => true,
        };
        if !fired {
            return false;
        }
        let judged = judge(model, &path());
        if judged
            .violations
            .iter()
            .any(|violation| violation.invariant == invariant)
        {
            report = Some(judged);
            return true;
        }
        false
    })?;
    Some((path, report.expect("a convicted path has its report")))
}

/// What judging a sample of a model's paths found.
#[derive(Debug, Default)]
pub struct SampleVerdict {
    /// States reached (each once per highest token committed on the way).
    pub states: usize,
    /// Paths converted and judged.
    pub judged: usize,
    /// Histories with at least one unknown outcome among those judged.
    pub with_unknown_outcomes: usize,
    /// The first convicted path and its report, if any.
    pub convicted: Option<(ModelPath, CheckReport)>,
}

/// Judges the shortest path of every `every`-th state the breadth-first
/// search reaches (and of every state where a ghost monitor fired), stopping
/// at the first conviction. For the reference, `convicted` must stay `None`.
pub fn judge_sample(model: &LeaseModel, every: usize) -> SampleVerdict {
    assert!(every >= 1);
    let mut verdict = SampleVerdict::default();
    let mut convicted = None;
    breadth_first(model, |state, path| {
        verdict.states += 1;
        let ghost = &state.ghost;
        let fired =
            ghost.grants_overlapped || ghost.tokens_not_increasing || ghost.stale_write_committed;
        if !fired && verdict.states % every != 0 {
            return false;
        }
        let path = path();
        let history = history_of(model, &path);
        verdict.judged += 1;
        let unknown = history.events.iter().any(|event| {
            matches!(
                event.kind,
                EventKind::Complete {
                    outcome: Outcome::Unknown { .. },
                    ..
                }
            )
        });
        if unknown {
            verdict.with_unknown_outcomes += 1;
        }
        let report = judge_history(model, &history);
        if report.violations.is_empty() {
            return false;
        }
        convicted = Some((path, report));
        true
    });
    verdict.convicted = convicted;
    verdict
}
