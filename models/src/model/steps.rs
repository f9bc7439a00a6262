//! The workers' side of the model: which steps each worker may take in a
//! state, and what each step does.
//!
//! Goal: every interleaving of the worker loop (start-up, acquire, fenced
//! commit, renew, release) with the faults (lost and late replies, crashes,
//! a dying lock session). Method: `worker_steps` lists the enabled steps of
//! a phase; `apply_step` applies one, dispatching to the schema, lease and
//! fault transitions. Invariant: a step that is not enabled in a state
//! returns `false` and changes nothing.

use super::{
    LateKind, LateStatement, LeaseAction, LeaseModel, LeaseRow, LeaseState, Owner, Phase, Schema,
    Step,
};
use crate::variant::Variant;

impl LeaseModel {
    pub(super) fn worker_steps(
        &self,
        state: &LeaseState,
        worker: usize,
        actions: &mut Vec<LeaseAction>,
    ) {
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

    /// Applies `step` of `worker` to `state`; `false` when the step is not
    /// enabled in this state (nothing changed).
    pub(super) fn apply_step(&self, state: &mut LeaseState, worker: usize, step: Step) -> bool {
        match step {
            Step::EnsureSchema | Step::CommitSchema | Step::SchemaUnblocked => {
                self.apply_schema_step(state, worker, step)
            }
            Step::Acquire
            | Step::ReadRow
            | Step::WriteRow
            | Step::ReceiveGrant
            | Step::LoseGrantReply
            | Step::Commit
            | Step::Fence
            | Step::Write
            | Step::Renew
            | Step::Release => self.apply_lease_step(state, worker, step),
            Step::RenewReplyLost
            | Step::CommitReplyLost
            | Step::StartLateAcquire
            | Step::StartLateRenew
            | Step::LandLate
            | Step::SessionDies
            | Step::Crash
            | Step::CrashMidCommit
            | Step::DeliverOrphanCommit => self.apply_fault_step(state, worker, step),
        }
    }

    /// Start-up: concurrent `CREATE TABLE IF NOT EXISTS` and its one retry.
    fn apply_schema_step(&self, state: &mut LeaseState, worker: usize, step: Step) -> bool {
        let entry = state.workers[worker];
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
            _ => return false,
        }
        true
    }

    /// The worker loop's own statements and the replies it receives.
    fn apply_lease_step(&self, state: &mut LeaseState, worker: usize, step: Step) -> bool {
        let entry = state.workers[worker];
        let real = Owner {
            worker: worker as u8,
            incarnation: entry.incarnation,
        };
        let phase = &mut state.workers[worker].phase;
        match (step, entry.phase) {
            (Step::Acquire, Phase::Idle) => {
                let retrying = self.retry_interval_ticks > 0;
                if let Some(retry_at_ticks) = entry.retry_at_ticks {
                    if retry_at_ticks > state.now_ticks {
                        return false;
                    }
                }
                match self.acquire(state, worker, entry.incarnation, state.now_ticks) {
                    Some(token) => {
                        let granted = &mut state.workers[worker];
                        granted.phase = Phase::Granted { token };
                        granted.retry_at_ticks = None;
                    }
                    // With a retry interval a refusal is a step: the worker
                    // sleeps until its next attempt. Without one it changes
                    // nothing and is left out.
                    None if retrying => {
                        state.workers[worker].retry_at_ticks =
                            Some(self.next_retry_ticks(state.now_ticks));
                    }
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
            _ => return false,
        }
        true
    }

    /// The faults: lost and late replies, a dying lock session, crashes and the commits they leave in flight.
    fn apply_fault_step(&self, state: &mut LeaseState, worker: usize, step: Step) -> bool {
        let entry = state.workers[worker];
        let real = Owner {
            worker: worker as u8,
            incarnation: entry.incarnation,
        };
        match (step, entry.phase) {
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
                restarted.retry_at_ticks = None;
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
}
