//! Helpers for scenes the tests drive by hand: recording operations made
//! directly through `PostgresLeases` into a history, so the checker judges
//! hand-made scenes exactly like worker-loop races.

use leaseproof_history::{EventKind, FailReason, Op, OpResult, Outcome, Recorder, Stamp};
use leaseproof_protocol::{Lease, LeaseError};
use leaseproof_races::clock::RunClock;

/// Records one hand-driven worker's operations.
pub struct SceneWorker<'a> {
    pub name: &'a str,
    pub recorder: &'a Recorder,
    pub clock: RunClock,
}

impl SceneWorker<'_> {
    fn stamp(&self) -> Stamp<'_> {
        let now = self.clock.elapsed_us();
        Stamp {
            worker: self.name,
            incarnation: 0,
            true_time_us: now,
            local_time_us: now,
        }
    }

    pub fn invoke(&self, op: Op) -> u64 {
        self.recorder.invoke(self.stamp(), op)
    }

    pub fn complete(&self, op_id: u64, outcome: Outcome) {
        self.recorder.complete(self.stamp(), op_id, outcome);
    }

    pub fn belief(&self, lease: &Lease, start: bool) {
        let scope = lease.scope().to_string();
        let token = token(lease);
        let kind = if start {
            EventKind::BeliefStart { scope, token }
        } else {
            EventKind::BeliefEnd {
                scope,
                token,
                reason: "scene".into(),
            }
        };
        self.recorder.record(self.stamp(), kind);
    }

    /// Records an acquisition's invoke and its outcome.
    pub fn acquire_op(lease_scope: &str, owner: &str, ttl_us: i64) -> Op {
        Op::Acquire {
            scope: lease_scope.to_string(),
            owner: owner.to_string(),
            ttl_us,
        }
    }

    pub fn complete_acquire(&self, op_id: u64, result: &Result<Lease, LeaseError>) {
        let outcome = match result {
            Ok(lease) => Outcome::Ok {
                result: lease_result(lease),
            },
            Err(error) => refusal(error),
        };
        self.complete(op_id, outcome);
    }

    /// Completes an acquisition that ended in `error`.
    pub fn complete_refused(&self, op_id: u64, error: &LeaseError) {
        self.complete(op_id, refusal(error));
    }
}

/// How an acquisition that ended in `error` is recorded.
fn refusal(error: &LeaseError) -> Outcome {
    match error {
        LeaseError::Held { .. } => Outcome::Fail {
            reason: FailReason::Held,
        },
        error if error.is_outcome_unknown() => Outcome::Unknown {
            reason: error.to_string(),
        },
        error => Outcome::Fail {
            reason: FailReason::Error(error.to_string()),
        },
    }
}

pub fn token(lease: &Lease) -> u64 {
    u64::try_from(lease.token().0).expect("tokens are positive")
}

pub fn lease_result(lease: &Lease) -> OpResult {
    OpResult::Lease {
        token: token(lease),
        owner: lease.owner().to_string(),
        granted_at_us: lease.granted_at().micros,
        expires_at_us: lease.expires_at().micros,
    }
}

pub fn release_op(lease: &Lease) -> Op {
    Op::Release {
        scope: lease.scope().to_string(),
        owner: lease.owner().to_string(),
        token: token(lease),
    }
}

/// A commit that succeeded (its rows carry their commit times).
pub fn committed() -> Outcome {
    Outcome::Ok {
        result: OpResult::Committed {
            committed_at_us: None,
        },
    }
}

/// A release that ended its grant at `released_at` (server time).
pub fn released(released_at: leaseproof_protocol::ServerTime) -> Outcome {
    Outcome::Ok {
        result: OpResult::Released {
            released_at_us: released_at.micros,
        },
    }
}

pub fn commit_op(lease: &Lease, cycle_id: u64, items: u32) -> Op {
    Op::Commit {
        scope: lease.scope().to_string(),
        owner: lease.owner().to_string(),
        token: token(lease),
        cycle_id,
        items,
    }
}

/// The opening both hand-driven scenes share: a fresh scope on `url`, and a
/// holder that has acquired it (recorded, and believing it holds). Fields are
/// owned so a test can destructure it into plain variables.
pub struct HeldScene {
    pub port: leaseproof_postgres::HarnessPort,
    pub scope_name: String,
    pub scope: leaseproof_protocol::Scope,
    pub ttl: leaseproof_protocol::Ttl,
    pub recorder: Recorder,
    pub clock: RunClock,
    pub holder_owner: leaseproof_protocol::Owner,
    pub rival_owner: leaseproof_protocol::Owner,
    pub lease: Lease,
}

impl HeldScene {
    pub async fn start(url: &str, scope_prefix: &str, ttl_ms: i64) -> HeldScene {
        use leaseproof_protocol::LeasePort as _;
        let port =
            leaseproof_races::race::harness_port(url, &leaseproof_races::RaceConfig::default())
                .await
                .unwrap();
        port.ensure_schema().await.unwrap();
        let scope_name = leaseproof_races::race::unique_scope(scope_prefix);
        let scope = leaseproof_protocol::Scope::new(scope_name.clone()).unwrap();
        let ttl = leaseproof_protocol::Ttl::from_millis(ttl_ms).unwrap();
        let recorder = Recorder::new();
        let clock = RunClock::start();
        let holder_owner = leaseproof_protocol::Owner::generate();
        let rival_owner = leaseproof_protocol::Owner::generate();
        let holder = SceneWorker {
            name: "holder",
            recorder: &recorder,
            clock,
        };
        let op = holder.invoke(SceneWorker::acquire_op(
            &scope_name,
            holder_owner.as_str(),
            ttl.as_micros(),
        ));
        let acquired = port.leases.acquire_lease(&scope, &holder_owner, ttl).await;
        holder.complete_acquire(op, &acquired);
        let lease = acquired.unwrap();
        holder.belief(&lease, true);
        HeldScene {
            port,
            scope_name,
            scope,
            ttl,
            recorder,
            clock,
            holder_owner,
            rival_owner,
            lease,
        }
    }
}

impl<'a> SceneWorker<'a> {
    /// The scene's two workers, "holder" and "rival", on one recorder and clock.
    pub fn pair(recorder: &'a Recorder, clock: RunClock) -> (SceneWorker<'a>, SceneWorker<'a>) {
        (
            SceneWorker {
                name: "holder",
                recorder,
                clock,
            },
            SceneWorker {
                name: "rival",
                recorder,
                clock,
            },
        )
    }
}
