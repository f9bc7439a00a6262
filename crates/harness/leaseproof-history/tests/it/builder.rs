//! A terse builder of hand-made histories for the tests.
//!
//! Goal: each test reads as the story it tells (who acquired what token at which
//! server time). Method: every operation is an invoke at the current true time
//! and its completion one microsecond later; owners are the worker names,
//! incarnation 0 unless a test says otherwise. Returned pairs are the
//! (invoke, complete) event indices the checker's violations name.

use leaseproof_history::{
    check, CheckConfig, CheckReport, EventKind, FailReason, GuardedRow, History, Op, OpResult,
    Outcome, Violation,
};

/// The ttl the builder's acquires and renewals request, in server microseconds.
pub const TTL_US: i64 = 100;

/// Builds a [`History`] step by step.
#[derive(Debug, Default)]
pub struct Builder {
    pub history: History,
    op_id_next: u64,
    true_time_us: i64,
    incarnation: u64,
}

/// How a commit ended.
#[derive(Clone, Copy, Debug)]
pub enum CommitEnd {
    Ok,
    Stale,
    Unknown,
    NeverCompleted,
}

impl Builder {
    /// A history whose recorder reads both tables back after the run, as
    /// the harness's do: a row missing from them is evidence.
    pub fn new() -> Builder {
        let mut builder = Builder::default();
        builder.history.tables_read = leaseproof_history::TablesRead {
            guarded: true,
            work: true,
        };
        builder
    }

    /// Sets the incarnation of the following events.
    pub fn incarnation(&mut self, incarnation: u64) -> &mut Builder {
        self.incarnation = incarnation;
        self
    }

    /// Moves the true clock: the next event happens at `true_time_us`.
    pub fn at(&mut self, true_time_us: i64) -> &mut Builder {
        assert!(true_time_us > self.true_time_us, "true time only advances");
        self.true_time_us = true_time_us - 1;
        self
    }

    fn push(&mut self, worker: &str, kind: EventKind) -> u64 {
        self.true_time_us += 1;
        let time_us = self.true_time_us;
        self.history
            .push(worker, self.incarnation, time_us, time_us + 7, kind)
    }

    pub fn invoke(&mut self, worker: &str, op: Op) -> (u64, u64) {
        let op_id = self.op_id_next;
        self.op_id_next += 1;
        (self.push(worker, EventKind::Invoke { op_id, op }), op_id)
    }

    /// An invocation under a chosen op id (a file's op ids need only be
    /// unique); returns the op id.
    pub fn invoke_as(&mut self, op_id: u64, worker: &str, op: Op) -> u64 {
        self.op_id_next = self.op_id_next.max(op_id + 1);
        self.push(worker, EventKind::Invoke { op_id, op });
        op_id
    }

    pub fn complete(&mut self, worker: &str, op_id: u64, outcome: Outcome) -> u64 {
        self.push(worker, EventKind::Complete { op_id, outcome })
    }

    fn op(&mut self, worker: &str, op: Op, outcome: Option<Outcome>) -> (u64, u64) {
        let (invoke, op_id) = self.invoke(worker, op);
        match outcome {
            Some(outcome) => (invoke, self.complete(worker, op_id, outcome)),
            None => (invoke, invoke),
        }
    }

    fn lease(worker: &str, token: u64, granted_at_us: i64, expires_at_us: i64) -> Outcome {
        Outcome::Ok {
            result: OpResult::Lease {
                token,
                owner: worker.to_string(),
                granted_at_us,
                expires_at_us,
            },
        }
    }

    fn acquire_op(worker: &str, scope: &str) -> Op {
        Op::Acquire {
            scope: scope.to_string(),
            owner: worker.to_string(),
            ttl_us: TTL_US,
        }
    }

    /// An ok acquire granting `token` at `granted_at_us` for [`TTL_US`].
    pub fn acquire_ok(
        &mut self,
        worker: &str,
        scope: &str,
        token: u64,
        granted_at_us: i64,
    ) -> (u64, u64) {
        let outcome = Self::lease(worker, token, granted_at_us, granted_at_us + TTL_US);
        self.op(worker, Self::acquire_op(worker, scope), Some(outcome))
    }

    /// An ok acquire whose reply names another owner (a broken server).
    pub fn acquire_answered_as(
        &mut self,
        worker: &str,
        scope: &str,
        owner: &str,
        token: u64,
        granted_at_us: i64,
    ) -> (u64, u64) {
        let outcome = Self::lease(owner, token, granted_at_us, granted_at_us + TTL_US);
        self.op(worker, Self::acquire_op(worker, scope), Some(outcome))
    }

    /// An ok idempotent re-acquire (or any ok acquire with explicit expiry).
    pub fn acquire_ok_until(
        &mut self,
        worker: &str,
        scope: &str,
        token: u64,
        granted_at_us: i64,
        expires_at_us: i64,
    ) -> (u64, u64) {
        let outcome = Self::lease(worker, token, granted_at_us, expires_at_us);
        self.op(worker, Self::acquire_op(worker, scope), Some(outcome))
    }

    pub fn acquire_held(&mut self, worker: &str, scope: &str) -> (u64, u64) {
        let outcome = Outcome::Fail {
            reason: FailReason::Held,
        };
        self.op(worker, Self::acquire_op(worker, scope), Some(outcome))
    }

    pub fn acquire_unknown(&mut self, worker: &str, scope: &str) -> (u64, u64) {
        let outcome = Outcome::Unknown {
            reason: "reply lost".to_string(),
        };
        self.op(worker, Self::acquire_op(worker, scope), Some(outcome))
    }

    /// An ok renewal of `renewed_token` returning `token`, extended to `expires_at_us`.
    pub fn renew_returning(
        &mut self,
        worker: &str,
        scope: &str,
        renewed_token: u64,
        token: u64,
        granted_at_us: i64,
        expires_at_us: i64,
    ) -> (u64, u64) {
        let op = Op::Renew {
            scope: scope.to_string(),
            owner: worker.to_string(),
            token: renewed_token,
            ttl_us: TTL_US,
        };
        let outcome = Self::lease(worker, token, granted_at_us, expires_at_us);
        self.op(worker, op, Some(outcome))
    }

    pub fn renew_ok(
        &mut self,
        worker: &str,
        scope: &str,
        token: u64,
        granted_at_us: i64,
        expires_at_us: i64,
    ) -> (u64, u64) {
        self.renew_returning(worker, scope, token, token, granted_at_us, expires_at_us)
    }

    /// A renewal whose reply was lost: it may have extended the grant.
    /// A renewal refused: the grant was no longer the worker's.
    pub fn renew_stale(&mut self, worker: &str, scope: &str, token: u64) -> (u64, u64) {
        let op = Op::Renew {
            scope: scope.to_string(),
            owner: worker.to_string(),
            token,
            ttl_us: TTL_US,
        };
        let outcome = Outcome::Fail {
            reason: FailReason::Stale,
        };
        self.op(worker, op, Some(outcome))
    }

    pub fn renew_unknown(&mut self, worker: &str, scope: &str, token: u64) -> (u64, u64) {
        let op = Op::Renew {
            scope: scope.to_string(),
            owner: worker.to_string(),
            token,
            ttl_us: TTL_US,
        };
        let outcome = Outcome::Unknown {
            reason: "reply lost".to_string(),
        };
        self.op(worker, op, Some(outcome))
    }

    fn release_op(worker: &str, scope: &str, token: u64) -> Op {
        Op::Release {
            scope: scope.to_string(),
            owner: worker.to_string(),
            token,
        }
    }

    pub fn release_ok(
        &mut self,
        worker: &str,
        scope: &str,
        token: u64,
        released_at_us: i64,
    ) -> (u64, u64) {
        let outcome = Outcome::Ok {
            result: OpResult::Released { released_at_us },
        };
        self.op(
            worker,
            Self::release_op(worker, scope, token),
            Some(outcome),
        )
    }

    /// An ok release answered without a server time (`unlocked`).
    pub fn release_unlocked(&mut self, worker: &str, scope: &str, token: u64) -> (u64, u64) {
        let outcome = Outcome::Ok {
            result: OpResult::Unlocked {},
        };
        self.op(
            worker,
            Self::release_op(worker, scope, token),
            Some(outcome),
        )
    }

    pub fn release_unknown(&mut self, worker: &str, scope: &str, token: u64) -> (u64, u64) {
        let outcome = Outcome::Unknown {
            reason: "timeout".to_string(),
        };
        self.op(
            worker,
            Self::release_op(worker, scope, token),
            Some(outcome),
        )
    }

    /// A commit of `items` rows under `token`; `committed_at_us` is its fence time.
    #[allow(
        clippy::too_many_arguments,
        reason = "a test story reads best as one call per step"
    )]
    pub fn commit(
        &mut self,
        worker: &str,
        scope: &str,
        token: u64,
        cycle_id: u64,
        items: u32,
        end: CommitEnd,
        committed_at_us: i64,
    ) -> (u64, u64) {
        let op = Op::Commit {
            scope: scope.to_string(),
            owner: worker.to_string(),
            token,
            cycle_id,
            items,
        };
        let outcome = match end {
            CommitEnd::Ok => Some(Outcome::Ok {
                result: OpResult::Committed {
                    committed_at_us: Some(committed_at_us),
                },
            }),
            CommitEnd::Stale => Some(Outcome::Fail {
                reason: FailReason::Stale,
            }),
            CommitEnd::Unknown => Some(Outcome::Unknown {
                reason: "connection reset".to_string(),
            }),
            CommitEnd::NeverCompleted => None,
        };
        self.op(worker, op, outcome)
    }

    /// Adds rows `items` of a cycle to the guarded table, seq from `seq_first`.
    #[allow(
        clippy::too_many_arguments,
        reason = "a test story reads best as one call per step"
    )]
    pub fn rows(
        &mut self,
        worker: &str,
        scope: &str,
        token: u64,
        cycle_id: u64,
        items: std::ops::Range<u32>,
        seq_first: u64,
        written_at_us: i64,
    ) -> &mut Builder {
        for (offset, item) in items.enumerate() {
            self.history.guarded_rows.push(GuardedRow {
                seq: seq_first + offset as u64,
                scope: scope.to_string(),
                owner: worker.to_string(),
                token,
                cycle_id,
                item,
                written_at_us,
                committed_at_us: None,
            });
        }
        self
    }

    /// Gives the rows `seqs` a commit time (server µs).
    pub fn committed_at(
        &mut self,
        seqs: std::ops::Range<u64>,
        committed_at_us: i64,
    ) -> &mut Builder {
        for row in &mut self.history.guarded_rows {
            if seqs.contains(&row.seq) {
                row.committed_at_us = Some(committed_at_us);
            }
        }
        self
    }

    pub fn belief_start(&mut self, worker: &str, scope: &str, token: u64) -> u64 {
        self.push(
            worker,
            EventKind::BeliefStart {
                scope: scope.to_string(),
                token,
            },
        )
    }

    pub fn belief_end(&mut self, worker: &str, scope: &str, token: u64) -> u64 {
        self.push(
            worker,
            EventKind::BeliefEnd {
                scope: scope.to_string(),
                token,
                reason: "released".to_string(),
            },
        )
    }

    pub fn build(&self) -> History {
        self.history.clone()
    }
}

/// The report's only violation; fails the test (printing the report) otherwise.
pub fn only_violation(history: &History) -> Violation {
    let report = check(history, &CheckConfig::default());
    assert!(!report.is_ok(), "a violation fails the report:\n{report}");
    assert_eq!(
        report.violations.len(),
        1,
        "expected exactly one violation:\n{report}"
    );
    report.violations[0].clone()
}

/// Asserts the history passes with the default configuration; returns the report.
pub fn assert_passes(history: &History) -> CheckReport {
    let report = check(history, &CheckConfig::default());
    assert!(report.is_ok(), "expected a pass:\n{report}");
    report
}
