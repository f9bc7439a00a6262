//! A history's lease operations, paired and grouped by scope: what the model
//! reads, and nothing else.

use std::collections::BTreeMap;

use crate::event::{EventKind, Op, OpResult, Outcome};
use crate::history::History;

/// What an operation asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// Take the lease, or re-acquire one's own live grant.
    Acquire {
        /// The lease's requested time to live.
        ttl_us: i64,
    },
    /// Extend one's grant of `token`.
    Renew {
        /// The token renewed.
        token: u64,
        /// The requested time to live.
        ttl_us: i64,
    },
    /// End one's grant of `token`.
    Release {
        /// The token released.
        token: u64,
    },
}

/// What the store answered, as the model reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A grant (acquire, renew): the row as returned.
    Lease {
        /// Its token.
        token: u64,
        /// The owner the row names.
        owner: String,
        /// Its `granted_at` on the store's clock.
        granted_at_us: i64,
        /// Its `expires_at` on the store's clock.
        expires_at_us: i64,
    },
    /// A release: when the store ended it, if it said.
    Released {
        /// `released_at_us`, or none for `unlocked`.
        at_us: Option<i64>,
    },
    /// Certainly no effect.
    Refused,
    /// Took effect or not: a lost reply, a timeout, no completion.
    Unknown,
}

/// One lease operation of a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The invoke event's index.
    pub invoke_event: u64,
    /// The completion event's index, if it came.
    pub complete_event: Option<u64>,
    /// The caller (an incarnation).
    pub owner: String,
    /// When it was sent, on the common clock.
    pub invoke_us: i64,
    /// When its answer arrived, on the common clock.
    pub complete_us: Option<i64>,
    /// What it asked.
    pub call: Call,
    /// What it got.
    pub answer: Answer,
}

impl Operation {
    /// The latest instant its effect may have: its completion, when its
    /// answer tells it took effect; none, when it may have taken effect
    /// any time after its invoke.
    pub fn deadline_us(&self) -> Option<i64> {
        match self.answer {
            Answer::Lease { .. } | Answer::Released { .. } => self.complete_us,
            Answer::Refused | Answer::Unknown => None,
        }
    }

    /// Whether the answer says it took effect.
    pub fn took_effect(&self) -> bool {
        matches!(self.answer, Answer::Lease { .. } | Answer::Released { .. })
    }

    /// Every event that records it.
    pub fn events(&self) -> Vec<u64> {
        std::iter::once(self.invoke_event)
            .chain(self.complete_event)
            .collect()
    }
}

/// A scope's lease operations, sorted by invoke, or why the model does not
/// judge the scope.
pub(crate) type Scopes = BTreeMap<String, Result<Vec<Operation>, String>>;

/// The lease operations of every scope. A scope whose grants answer `lock`
/// (no server times) is not the model's.
pub(crate) fn lease_operations(history: &History) -> Scopes {
    let mut completions = BTreeMap::new();
    for event in &history.events {
        if let EventKind::Complete { op_id, outcome } = &event.kind {
            completions.insert(*op_id, (event.index, event.true_time_us, outcome));
        }
    }
    let mut scopes: Scopes = BTreeMap::new();
    for event in &history.events {
        let EventKind::Invoke { op_id, op } = &event.kind else {
            continue;
        };
        let Some(call) = call_of(op) else { continue };
        let completion = completions.get(op_id).copied();
        let answer = match completion.map(|(_, _, outcome)| answer_of(outcome)) {
            Some(Err(lock)) => {
                scopes.insert(op.scope().to_string(), Err(lock));
                continue;
            }
            Some(Ok(answer)) => answer,
            None => Answer::Unknown,
        };
        let operation = Operation {
            invoke_event: event.index,
            complete_event: completion.map(|(index, _, _)| index),
            owner: op.owner().to_string(),
            invoke_us: event.true_time_us,
            complete_us: completion.map(|(_, at, _)| at),
            call,
            answer,
        };
        let scope = scopes
            .entry(op.scope().to_string())
            .or_insert_with(|| Ok(Vec::new()));
        if let Ok(operations) = scope {
            operations.push(operation);
        }
    }
    for operations in scopes.values_mut().flatten() {
        operations.sort_by_key(|operation| (operation.invoke_us, operation.invoke_event));
    }
    scopes
}

fn call_of(op: &Op) -> Option<Call> {
    match *op {
        Op::Acquire { ttl_us, .. } => Some(Call::Acquire { ttl_us }),
        Op::Renew { token, ttl_us, .. } => Some(Call::Renew { token, ttl_us }),
        Op::Release { token, .. } => Some(Call::Release { token }),
        Op::Commit { .. } | Op::Write { .. } => None,
    }
}

fn answer_of(outcome: &Outcome) -> Result<Answer, String> {
    Ok(match outcome {
        Outcome::Ok { result } => match result {
            OpResult::Lease {
                token,
                owner,
                granted_at_us,
                expires_at_us,
            } => Answer::Lease {
                token: *token,
                owner: owner.clone(),
                granted_at_us: *granted_at_us,
                expires_at_us: *expires_at_us,
            },
            OpResult::Released { released_at_us } => Answer::Released {
                at_us: Some(*released_at_us),
            },
            OpResult::Unlocked {} => Answer::Released { at_us: None },
            OpResult::Lock { .. } => {
                return Err("its grants answer `lock`, with no server times".to_string())
            }
            OpResult::Written {} | OpResult::Committed { .. } => Answer::Unknown,
        },
        Outcome::Fail { .. } => Answer::Refused,
        Outcome::Unknown { .. } => Answer::Unknown,
    })
}
