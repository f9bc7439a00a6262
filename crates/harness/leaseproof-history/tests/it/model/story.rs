//! Histories told as stories of operations with windows, for the model's
//! tests: each operation is an invoke and, if it came, a completion.

use leaseproof_history::model::{self, validate::validate, Assumptions, ModelReport, Verdict};
use leaseproof_history::{
    CheckConfig, EventKind, FailReason, GrantStamps, History, Op, OpResult, Outcome,
};

/// How an operation ended.
#[derive(Clone, Debug)]
pub enum End {
    Ok(OpResult),
    Refused,
    Unknown,
    Never,
}

/// One operation of a story.
#[derive(Clone, Debug)]
pub struct Told {
    pub owner: String,
    pub op: Op,
    pub invoke_us: i64,
    pub complete_us: i64,
    pub end: End,
}

/// A story: operations on scope `job`, told in any order.
#[derive(Clone, Debug, Default)]
pub struct Story {
    pub told: Vec<Told>,
}

pub fn acquire(owner: &str, ttl_us: i64) -> Op {
    Op::Acquire {
        scope: "job".into(),
        owner: owner.into(),
        ttl_us,
    }
}

pub fn renew(owner: &str, token: u64, ttl_us: i64) -> Op {
    Op::Renew {
        scope: "job".into(),
        owner: owner.into(),
        token,
        ttl_us,
    }
}

pub fn release(owner: &str, token: u64) -> Op {
    Op::Release {
        scope: "job".into(),
        owner: owner.into(),
        token,
    }
}

pub fn lease(owner: &str, token: u64, granted_at_us: i64, expires_at_us: i64) -> End {
    End::Ok(OpResult::Lease {
        token,
        owner: owner.into(),
        granted_at_us,
        expires_at_us,
    })
}

pub fn released(at_us: i64) -> End {
    End::Ok(OpResult::Released {
        released_at_us: at_us,
    })
}

pub fn unlocked() -> End {
    End::Ok(OpResult::Unlocked {})
}

impl Story {
    /// Adds `op` by its owner, sent at `invoke_us` and answered `end` at `complete_us`.
    pub fn op(&mut self, op: Op, invoke_us: i64, complete_us: i64, end: End) -> &mut Story {
        self.told.push(Told {
            owner: op.owner().to_string(),
            op,
            invoke_us,
            complete_us,
            end,
        });
        self
    }

    /// The story as a history: events in time order, an op id per operation.
    pub fn history(&self) -> History {
        let mut events: Vec<(i64, usize, &str, EventKind)> = Vec::new();
        for (op_id, told) in self.told.iter().enumerate() {
            let invoke = EventKind::Invoke {
                op_id: op_id as u64,
                op: told.op.clone(),
            };
            events.push((told.invoke_us, 2 * op_id, &told.owner, invoke));
            let outcome = match &told.end {
                End::Ok(result) => Outcome::Ok {
                    result: result.clone(),
                },
                End::Refused => Outcome::Fail {
                    reason: FailReason::Held,
                },
                End::Unknown => Outcome::Unknown {
                    reason: "reply lost".into(),
                },
                End::Never => continue,
            };
            let complete = EventKind::Complete {
                op_id: op_id as u64,
                outcome,
            };
            events.push((told.complete_us, 2 * op_id + 1, &told.owner, complete));
        }
        events.sort_by_key(|(at, order, _, _)| (*at, *order));
        let mut history = History::default();
        for (at, _, owner, kind) in events {
            history.push(owner, 0, at, at, kind);
        }
        history
    }
}

/// The model's report on `history`, every explanation checked by the
/// independent validator.
pub fn judged(history: &History, stamps: GrantStamps) -> ModelReport {
    judged_assuming(history, stamps, Assumptions::default())
}

/// [`judged`], assuming `assumptions` of the store.
pub fn judged_assuming(
    history: &History,
    stamps: GrantStamps,
    assumptions: Assumptions,
) -> ModelReport {
    let config = CheckConfig {
        grant_stamps: stamps,
        ..CheckConfig::default()
    };
    let report = model::judge(history, &config, assumptions);
    for scope in &report.scopes {
        if let Verdict::Explained(Some(explanation)) = &scope.verdict {
            if let Err(problem) = validate(&scope.operations, stamps, assumptions, explanation) {
                panic!(
                    "the validator refuses the explanation of {:?}: {problem}\n{explanation:#?}\n{history:#?}",
                    scope.scope
                );
            }
        }
    }
    report
}

/// The one scope's verdict.
pub fn verdict(report: &ModelReport) -> &Verdict {
    assert_eq!(report.scopes.len(), 1, "{report}");
    &report.scopes[0].verdict
}
