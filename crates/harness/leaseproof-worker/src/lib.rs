//! The worker loop, written once.
//!
//! A worker ensures the schema (with its retry), then until it has done its
//! cycles: acquires the scope, works, commits a guarded cycle through the fence,
//! renews, and after a few cycles releases. Every operation is recorded into a
//! [`Recorder`] as invoke + outcome (ok / fail / unknown), and every stretch of
//! time it *believes* it holds the lease as a belief interval, so the checker
//! can judge the run.
//!
//! **Architecture invariant:** the loop knows nothing of PostgreSQL or turmoil.
//! It drives a [`LeasePort`], reads time from [`Clocks`] (the simulation injects
//! skewed clocks, the real-server races a monotonic one), sleeps with tokio's
//! timer (which turmoil drives in simulations), and lets [`Hooks`] inject
//! faults (pauses) at named steps. The same code therefore runs in the
//! simulation and against PostgreSQL.
//!
//! The belief deadline is measured on the worker's *own* clock from the moment
//! it *sent* the acquisition (the grant cannot have started earlier): the
//! textbook-safe local rule. It is still not safe on its own — a slow clock or a
//! pause between the check and the write defeats it — which is what the
//! unfenced configuration demonstrates and the fence fixes.
#![deny(missing_docs)]

use std::future::Future;
use std::time::Duration;

use leaseproof_history::{EventKind, FailReason, Op, OpResult, Outcome, Recorder, Stamp};
use leaseproof_protocol::{
    CycleFault, CycleFaults, CyclePoint, Fencing, GuardedCycle, Lease, LeaseError, LeasePort,
    Owner, Scope, Ttl,
};

/// Where a worker reads time.
pub trait Clocks: Send + Sync {
    /// A clock common to every worker of the run, for ordering the history
    /// (simulated time, or the test's monotonic clock), in µs.
    fn true_now_us(&self) -> i64;
    /// The worker's own clock, possibly offset and drifting, in µs.
    fn local_now_us(&self) -> i64;
}

/// The points in the loop where a harness can inject a fault (a pause) or
/// observe progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Before sending an acquisition.
    Acquire,
    /// After the belief check, before the guarded commit is sent: the classic
    /// place for a GC pause.
    Commit,
    /// Before a renewal.
    Renew,
    /// Before a release.
    Release,
}

/// Fault injection at [`Step`]s of the loop and at [`CyclePoint`]s inside
/// each commit cycle (the port runs those). The defaults do nothing.
pub trait Hooks: Send + Sync {
    /// Called before `step`; may sleep (a pause) before returning.
    fn before(&self, step: Step) -> impl Future<Output = ()> + Send {
        let _ = step;
        async {}
    }

    /// The fault to run at `point` of the commit cycle about to start (the
    /// port calls it per [`CycleFaults`]' contract).
    fn inside_cycle(&self, point: CyclePoint) -> CycleFault {
        let _ = point;
        Box::pin(async {})
    }
}

/// The worker's hooks as the port's [`CycleFaults`].
struct CycleHooks<'a, H>(&'a H);

impl<H: Hooks> CycleFaults for CycleHooks<'_, H> {
    fn at(&self, point: CyclePoint) -> CycleFault {
        self.0.inside_cycle(point)
    }
}

/// Hooks that inject nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;
impl Hooks for NoHooks {}

/// What one worker does.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Stable name (incarnations share it).
    pub worker: String,
    /// Which start of the worker this is.
    pub incarnation: u64,
    /// The owner id of this incarnation.
    pub owner: Owner,
    /// The scope to work under.
    pub scope: Scope,
    /// TTL of each grant and renewal.
    pub ttl: Ttl,
    /// Guarded cycles to commit before stopping.
    pub cycles: u32,
    /// Cycles per grant, then release (renewing in between).
    pub cycles_per_grant: u32,
    /// Rows written per cycle.
    pub items_per_cycle: u32,
    /// Time spent working before each commit.
    pub work: Duration,
    /// Wait after a refused acquisition or an unavailable database.
    pub retry_interval: Duration,
    /// Safety margin subtracted from the local belief deadline.
    pub deadline_margin: Duration,
    /// Commit without the fence, trusting the local belief deadline: the broken
    /// configuration that shows why the fence exists.
    pub unfenced: bool,
    /// Start no new operation once the common clock passes this (simulations
    /// must end by themselves).
    pub stop_at_true_us: Option<i64>,
    /// Give up after this many operations (a bound on any run).
    pub operations_max: u32,
}

/// How a worker's run ended, with counts for reports and test assertions.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSummary {
    /// The schema could not be created (after its retry): the worker never started.
    pub schema_error: Option<String>,
    /// Grants received (including idempotent re-acquisitions).
    pub grants: u32,
    /// Acquisitions refused because another owner held the scope.
    pub held: u32,
    /// Cycles committed.
    pub commits: u32,
    /// Commits refused by the fence.
    pub commits_refused: u32,
    /// Operations whose outcome stayed unknown.
    pub unknown: u32,
    /// Operations that failed because the database was unavailable or erred.
    pub errors: u32,
    /// Operations sent.
    pub operations: u32,
}

impl WorkerSummary {
    /// Adds `other`'s counts to these; the first schema error is kept.
    pub fn absorb(&mut self, other: &WorkerSummary) {
        self.grants += other.grants;
        self.held += other.held;
        self.commits += other.commits;
        self.commits_refused += other.commits_refused;
        self.unknown += other.unknown;
        self.errors += other.errors;
        self.operations += other.operations;
        if self.schema_error.is_none() {
            self.schema_error.clone_from(&other.schema_error);
        }
    }
}

struct Holding {
    lease: Lease,
    deadline_local_us: i64,
    cycles: u32,
}

/// Runs one worker to completion (or until stopped) and returns its summary.
/// Dropping the future mid-way is a crash: the history then holds an invoke
/// without completion, which the checker reads as an unknown outcome.
pub async fn run_worker<P, C, H>(
    port: &P,
    config: &WorkerConfig,
    clocks: &C,
    hooks: &H,
    recorder: &Recorder,
) -> WorkerSummary
where
    P: LeasePort,
    C: Clocks,
    H: Hooks,
{
    let mut worker = Worker {
        port,
        config,
        clocks,
        hooks,
        recorder,
        summary: WorkerSummary::default(),
        cycle_id_next: 1,
    };
    if let Err(error) = port.ensure_schema().await {
        worker.summary.schema_error = Some(error.to_string());
        return worker.summary;
    }
    worker.run().await;
    worker.summary
}

struct Worker<'a, P, C, H> {
    port: &'a P,
    config: &'a WorkerConfig,
    clocks: &'a C,
    hooks: &'a H,
    recorder: &'a Recorder,
    summary: WorkerSummary,
    cycle_id_next: u64,
}

impl<P: LeasePort, C: Clocks, H: Hooks> Worker<'_, P, C, H> {
    fn stamp(&self) -> Stamp<'_> {
        Stamp {
            worker: &self.config.worker,
            incarnation: self.config.incarnation,
            true_time_us: self.clocks.true_now_us(),
            local_time_us: self.clocks.local_now_us(),
        }
    }

    fn may_continue(&self) -> bool {
        let in_time = self
            .config
            .stop_at_true_us
            .is_none_or(|stop| self.clocks.true_now_us() < stop);
        in_time
            && self.summary.commits < self.config.cycles
            && self.summary.operations < self.config.operations_max
    }

    fn invoke(&mut self, op: Op) -> u64 {
        self.summary.operations += 1;
        self.recorder.invoke(self.stamp(), op)
    }

    fn complete(&self, op_id: u64, outcome: Outcome) {
        self.recorder.complete(self.stamp(), op_id, outcome);
    }

    fn belief_end(&self, lease: &Lease, reason: &str) {
        self.recorder.record(
            self.stamp(),
            EventKind::BeliefEnd {
                scope: lease.scope().to_string(),
                token: token(lease),
                reason: reason.to_string(),
            },
        );
    }

    /// Records a failed or unknown outcome for `error` and counts it.
    fn complete_error(&mut self, op_id: u64, error: &LeaseError) {
        let outcome = match error {
            LeaseError::Held { .. } => {
                self.summary.held += 1;
                Outcome::Fail {
                    reason: FailReason::Held,
                }
            }
            LeaseError::Lost { .. } => Outcome::Fail {
                reason: FailReason::Stale,
            },
            LeaseError::OutcomeUnknown { .. } => {
                self.summary.unknown += 1;
                Outcome::Unknown {
                    reason: error.to_string(),
                }
            }
            _ => {
                self.summary.errors += 1;
                Outcome::Fail {
                    reason: FailReason::Error(error.to_string()),
                }
            }
        };
        self.complete(op_id, outcome);
    }

    /// What an ok acquire or renew reports: the lease row with its server
    /// times, or — for a port whose times are not one server clock — the
    /// token and the promised lifetime only.
    fn lease_result(&self, lease: &Lease) -> OpResult {
        if self.port.reports_server_times() {
            return lease_result(lease);
        }
        OpResult::Lock {
            token: Some(token(lease)),
            lifetime_us: Some(self.config.ttl.as_micros()),
        }
    }

    fn deadline_from(&self, sent_local_us: i64) -> i64 {
        let margin_us = i64::try_from(self.config.deadline_margin.as_micros()).unwrap_or(i64::MAX);
        sent_local_us + self.config.ttl.as_micros() - margin_us
    }

    async fn run(&mut self) {
        let mut holding: Option<Holding> = None;
        while self.may_continue() {
            holding = match holding.take() {
                None => self.acquire().await,
                Some(held) => self.hold(held).await,
            };
        }
        if let Some(held) = holding {
            self.release(held).await;
        }
    }

    async fn acquire(&mut self) -> Option<Holding> {
        self.hooks.before(Step::Acquire).await;
        let config = self.config;
        let sent_local_us = self.clocks.local_now_us();
        let op_id = self.invoke(Op::Acquire {
            scope: config.scope.to_string(),
            owner: config.owner.to_string(),
            ttl_us: config.ttl.as_micros(),
        });
        match self
            .port
            .acquire(&config.scope, &config.owner, config.ttl)
            .await
        {
            Ok(lease) => {
                self.summary.grants += 1;
                self.complete(
                    op_id,
                    Outcome::Ok {
                        result: self.lease_result(&lease),
                    },
                );
                self.recorder.record(
                    self.stamp(),
                    EventKind::BeliefStart {
                        scope: lease.scope().to_string(),
                        token: token(&lease),
                    },
                );
                Some(Holding {
                    deadline_local_us: self.deadline_from(sent_local_us),
                    lease,
                    cycles: 0,
                })
            }
            Err(error) => {
                let unknown = error.is_outcome_unknown();
                self.complete_error(op_id, &error);
                // After an unknown outcome retry at once: re-acquiring with the
                // same owner is idempotent and tells us what happened.
                if !unknown {
                    tokio::time::sleep(config.retry_interval).await;
                }
                None
            }
        }
    }

    async fn hold(&mut self, mut held: Holding) -> Option<Holding> {
        let config = self.config;
        tokio::time::sleep(config.work).await;
        if self.clocks.local_now_us() >= held.deadline_local_us {
            self.belief_end(&held.lease, "local ttl elapsed");
            return None;
        }
        self.hooks.before(Step::Commit).await;
        let cycle = GuardedCycle {
            cycle_id: self.cycle_id_next as i64,
            items: config.items_per_cycle,
        };
        self.cycle_id_next += 1;
        let op_id = self.invoke(Op::Commit {
            scope: config.scope.to_string(),
            owner: config.owner.to_string(),
            token: token(&held.lease),
            cycle_id: cycle.cycle_id as u64,
            items: cycle.items,
        });
        let faults = CycleHooks(self.hooks);
        let fencing = if config.unfenced {
            Fencing::Unfenced
        } else {
            Fencing::Fenced
        };
        let result = self.port.commit(&held.lease, cycle, fencing, &faults).await;
        match result {
            Ok(receipt) => {
                self.summary.commits += 1;
                held.cycles += 1;
                self.complete(
                    op_id,
                    Outcome::Ok {
                        result: OpResult::Committed {
                            committed_at_us: receipt.fenced_at.map(|fenced_at| fenced_at.micros),
                        },
                    },
                );
            }
            Err(error @ LeaseError::Lost { .. }) => {
                self.summary.commits_refused += 1;
                self.complete_error(op_id, &error);
                self.belief_end(&held.lease, "fence refused the commit");
                return None;
            }
            Err(error) => {
                // Unknown or failed: the cycle counts as attempted once it is
                // unknown, so a run cannot loop forever on a dead connection.
                if error.is_outcome_unknown() {
                    held.cycles += 1;
                }
                self.complete_error(op_id, &error);
            }
        }
        if held.cycles >= config.cycles_per_grant || !self.may_continue() {
            self.release(held).await;
            return None;
        }
        self.renew(held).await
    }

    async fn renew(&mut self, held: Holding) -> Option<Holding> {
        self.hooks.before(Step::Renew).await;
        let config = self.config;
        let sent_local_us = self.clocks.local_now_us();
        let op_id = self.invoke(Op::Renew {
            scope: config.scope.to_string(),
            owner: config.owner.to_string(),
            token: token(&held.lease),
            ttl_us: config.ttl.as_micros(),
        });
        match self.port.renew(&held.lease, config.ttl).await {
            Ok(lease) => {
                // No assertion on what the port answered: a design under
                // test whose renewal changed its token is recorded as it
                // answered, and the checker convicts it (I2).
                self.complete(
                    op_id,
                    Outcome::Ok {
                        result: self.lease_result(&lease),
                    },
                );
                Some(Holding {
                    deadline_local_us: self.deadline_from(sent_local_us),
                    lease,
                    cycles: held.cycles,
                })
            }
            Err(error @ LeaseError::Lost { .. }) => {
                self.complete_error(op_id, &error);
                self.belief_end(&held.lease, "renewal refused");
                None
            }
            Err(error) => {
                // Unknown or failed: keep the old deadline; the next check of it
                // (or the fence) decides.
                self.complete_error(op_id, &error);
                Some(held)
            }
        }
    }

    async fn release(&mut self, held: Holding) {
        // The belief ends when the worker decides to let go, before the request.
        self.belief_end(&held.lease, "released");
        self.hooks.before(Step::Release).await;
        let config = self.config;
        let op_id = self.invoke(Op::Release {
            scope: config.scope.to_string(),
            owner: config.owner.to_string(),
            token: token(&held.lease),
        });
        match self.port.release(&held.lease).await {
            Ok(Some(released_at)) => {
                let result = if self.port.reports_server_times() {
                    OpResult::Released {
                        released_at_us: released_at.micros,
                    }
                } else {
                    OpResult::Unlocked {}
                };
                self.complete(op_id, Outcome::Ok { result });
            }
            Ok(None) => self.complete(
                op_id,
                Outcome::Fail {
                    reason: FailReason::Stale,
                },
            ),
            Err(error) => self.complete_error(op_id, &error),
        }
    }
}

/// A guarded row as a backend reads it, in the history's plain form: the one
/// conversion the simulation and the real-server races share.
pub fn history_row(
    row: &leaseproof_protocol::semantics::GuardedRow,
) -> leaseproof_history::GuardedRow {
    leaseproof_history::GuardedRow {
        seq: u64::try_from(row.seq).expect("seq is positive"),
        scope: row.scope.to_string(),
        owner: row.owner.to_string(),
        token: u64::try_from(row.token.0).expect("tokens are positive"),
        cycle_id: u64::try_from(row.cycle_id).expect("cycle ids are positive"),
        item: u32::try_from(row.item).expect("items are non-negative"),
        written_at_us: row.written_at.micros,
        committed_at_us: row.committed_at.map(|committed_at| committed_at.micros),
    }
}

fn token(lease: &Lease) -> u64 {
    u64::try_from(lease.token().0).expect("fencing tokens are positive")
}

fn lease_result(lease: &Lease) -> OpResult {
    OpResult::Lease {
        token: token(lease),
        owner: lease.owner().to_string(),
        granted_at_us: lease.granted_at().micros,
        expires_at_us: lease.expires_at().micros,
    }
}
