//! The verdict on a run: the checker's report over the recorded history and
//! the guarded table, and the scenario's own expectations.
//!
//! Goal: judge every run with the one checker, as the real-server races are
//! judged, plus what only the simulation knows (I1 in true time, workers
//! that could not start). Method: the guarded rows join the history; the
//! checker runs with decision-time stamps (the simulated database decides
//! with the time it stamps) and, where the scenario bounds it, the takeover
//! delay. Invariant: the verdict reads the run's records only; it changes
//! nothing.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use leaseproof_history::{
    check, check_with_takeover_bound, CheckConfig, CheckReport, EventKind, GrantStamps, History,
    Op, OpResult, Outcome, Recorder, TakeoverBound,
};

use super::workers::WorkerSlot;
use super::{Finding, RunOptions};
use crate::db::Durable;
use crate::faults::FaultPlan;
use crate::scenario::Scenario;
use crate::trace::{format_us, Trace};

/// What the checker and the run's records say.
pub(super) struct Verdict {
    pub(super) report: CheckReport,
    pub(super) history: History,
    pub(super) incarnations: u32,
}

/// Judges a finished run; appends the scenario's failed expectations.
pub(super) fn judge(
    scenario: &Scenario,
    plan: &FaultPlan,
    options: RunOptions,
    durable: &Rc<RefCell<Durable>>,
    slots: &Rc<RefCell<Vec<WorkerSlot>>>,
    recorder: &Recorder,
    findings: &mut Vec<Finding>,
) -> Verdict {
    let incarnations = super::workers::incarnations(slots);
    for (slot, worker) in slots.borrow().iter().zip(&plan.workers) {
        if let Some(error) = slot
            .first_summary
            .as_ref()
            .and_then(|summary| summary.schema_error.as_ref())
        {
            findings.push(Finding::DidNotStart {
                worker: worker.name.clone(),
                error: error.to_string(),
            });
        }
    }

    // I1 in true time: a server clock that is not one clock fails here even
    // when every timestamp it reported is consistent with itself.
    findings.extend(
        durable
            .borrow()
            .true_time
            .violations
            .iter()
            .cloned()
            .map(Finding::InTrueTime),
    );

    let rows = durable
        .borrow()
        .guarded
        .rows()
        .iter()
        .map(leaseproof_worker::history_row)
        .collect();
    recorder.set_guarded_rows(rows);
    let mut history = recorder.snapshot();
    // The stamps against the configured clock: what the checker trusts, held
    // to the simulation's ground truth.
    findings.extend(
        crate::true_time::stamps_off_the_server_clock(&history, plan.server_offset_us)
            .into_iter()
            .map(Finding::ServerClock),
    );
    let config = CheckConfig {
        unfenced_workers: if options.unfenced {
            plan.workers
                .iter()
                .map(|worker| worker.name.clone())
                .collect()
        } else {
            BTreeSet::new()
        },
        // The simulated database serves the semantics, which decide with the
        // time they stamp: a server-time overlap is a real one.
        grant_stamps: GrantStamps::Decision,
        ..Default::default()
    }
    // The simulated clock stamps exact microseconds, and the semantics keep
    // `granted_at` on renewal and re-acquisition.
    .with_exact_stamps();
    let report = match scenario.takeover_bound_ms {
        // The simulated server's clock is true time plus the drawn offset,
        // exactly: the checker may place worker events on it.
        Some(bound_ms) => {
            let bound = TakeoverBound {
                slack_us: i64::try_from(bound_ms * 1_000).expect("a bound of sane size"),
                server_minus_true_us: plan.server_offset_us,
            };
            check_with_takeover_bound(&history, &config, &bound)
        }
        None => check(&history, &config),
    };
    // Saved with the history (`replay --history`): judged again as here.
    history.declare(config);

    Verdict {
        report,
        history,
        incarnations,
    }
}

/// The trace lines merged with the history's events, by simulated time.
pub(super) fn merge_trace(trace: &Trace, history: &History) -> Vec<String> {
    let mut merged: Vec<(i64, u8, usize, String)> = trace
        .take_lines()
        .into_iter()
        .enumerate()
        .map(|(order, (at_us, line))| (at_us, 1, order, line))
        .collect();
    for event in &history.events {
        let what = match &event.kind {
            EventKind::Invoke { op_id, op } => format!("invokes op {op_id}: {op:?}"),
            EventKind::Complete { op_id, outcome } => match outcome {
                Outcome::Ok { result } => format!("op {op_id} ok: {result:?}"),
                Outcome::Fail { reason } => format!("op {op_id} FAILED: {reason:?}"),
                Outcome::Unknown { reason } => format!("op {op_id} UNKNOWN: {reason}"),
            },
            EventKind::BeliefStart { scope, token } => {
                format!("BELIEVES it holds {scope} under token {token}")
            }
            EventKind::BeliefEnd {
                scope,
                token,
                reason,
            } => format!("stops believing it holds {scope} token {token}: {reason}"),
        };
        merged.push((
            event.true_time_us,
            0,
            event.index as usize,
            format!(
                "[sim {} | srv {} | local {}] {}#inc{} (event {}) {}",
                format_us(event.true_time_us),
                format_us(trace.server_us(event.true_time_us)),
                format_us(event.local_time_us),
                event.worker,
                event.incarnation,
                event.index,
                what
            ),
        ));
    }
    merged.sort_by_key(|(at_us, rank, order, _)| (*at_us, *rank, *order));
    merged.into_iter().map(|(_, _, _, line)| line).collect()
}

/// See [`RunOutcome::commits_after_crashed_holder`].
pub(super) fn commits_after_crashed_holder(history: &History) -> u64 {
    type Incarnation<'a> = (&'a str, u64);
    let mut ops: BTreeMap<u64, &Op> = BTreeMap::new();
    let mut incarnation_of: BTreeMap<&str, Incarnation<'_>> = BTreeMap::new();
    let mut last_event_us: BTreeMap<Incarnation<'_>, i64> = BTreeMap::new();
    let mut incarnation_max: BTreeMap<&str, u64> = BTreeMap::new();
    for event in &history.events {
        let incarnation = (event.worker.as_str(), event.incarnation);
        let last_us = last_event_us.entry(incarnation).or_insert(i64::MIN);
        *last_us = (*last_us).max(event.true_time_us);
        let highest = incarnation_max.entry(&event.worker).or_insert(0);
        *highest = (*highest).max(event.incarnation);
        if let EventKind::Invoke { op_id, op } = &event.kind {
            ops.insert(*op_id, op);
            incarnation_of.entry(op.owner()).or_insert(incarnation);
        }
    }
    // (scope, token) -> (owner, true time of the first ok reply granting it).
    let mut grants: BTreeMap<(&str, u64), (&str, i64)> = BTreeMap::new();
    let mut released: BTreeSet<(&str, &str, u64)> = BTreeSet::new();
    let mut commits: Vec<(&str, &str, u64)> = Vec::new();
    for event in &history.events {
        let EventKind::Complete {
            op_id,
            outcome: Outcome::Ok { result },
        } = &event.kind
        else {
            continue;
        };
        let Some(op) = ops.get(op_id) else {
            continue;
        };
        match (op, result) {
            (Op::Acquire { .. } | Op::Renew { .. }, OpResult::Lease { token, owner, .. }) => {
                grants
                    .entry((op.scope(), *token))
                    .or_insert((owner.as_str(), event.true_time_us));
            }
            (Op::Release { token, .. }, OpResult::Released { .. }) => {
                released.insert((op.scope(), op.owner(), *token));
            }
            (Op::Commit { token, .. }, OpResult::Committed { .. }) => {
                commits.push((op.scope(), op.owner(), *token));
            }
            _ => {}
        }
    }
    let crashed_before = |owner: &str, granted_us: i64| -> bool {
        let Some(&incarnation) = incarnation_of.get(owner) else {
            return false;
        };
        incarnation_max[incarnation.0] > incarnation.1 && last_event_us[&incarnation] < granted_us
    };
    commits
        .into_iter()
        .filter(|&(scope, owner, token)| {
            let Some(&(holder, granted_us)) = grants.get(&(scope, token)) else {
                return false;
            };
            let Some(&(previous, _)) = token
                .checked_sub(1)
                .and_then(|previous_token| grants.get(&(scope, previous_token)))
            else {
                return false;
            };
            holder == owner
                && previous != owner
                && !released.contains(&(scope, previous, token - 1))
                && crashed_before(previous, granted_us)
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use leaseproof_history::{Op, OpResult, Outcome, Recorder, Stamp};

    use super::commits_after_crashed_holder;

    /// `a` takes token 1 and, when `a_releases`, releases it; then, when
    /// `a_restarts`, `a` crashes (its next incarnation appears); `b` takes
    /// token 2 after `a`'s last event and commits. Only a holder that
    /// crashed *holding* its grant makes `b`'s commit one "after a crashed
    /// holder": one that merely went quiet did not crash.
    fn history(a_releases: bool, a_restarts: bool) -> leaseproof_history::History {
        let recorder = Recorder::new();
        let at = |worker, incarnation, true_time_us| Stamp {
            worker,
            incarnation,
            true_time_us,
            local_time_us: true_time_us,
        };
        let ok = |result| Outcome::Ok { result };
        let acquire = |owner: &str| Op::Acquire {
            scope: "s".into(),
            owner: owner.into(),
            ttl_us: 1_000,
        };
        let lease = |token, owner: &str, granted_at_us| OpResult::Lease {
            token,
            owner: owner.into(),
            granted_at_us,
            expires_at_us: granted_at_us + 1_000,
        };
        let op = recorder.invoke(at("a", 0, 10), acquire("a-0"));
        recorder.complete(at("a", 0, 20), op, ok(lease(1, "a-0", 15)));
        if a_releases {
            let op = recorder.invoke(
                at("a", 0, 30),
                Op::Release {
                    scope: "s".into(),
                    owner: "a-0".into(),
                    token: 1,
                },
            );
            recorder.complete(
                at("a", 0, 40),
                op,
                ok(OpResult::Released { released_at_us: 35 }),
            );
        }
        if a_restarts {
            // A new incarnation, long after.
            let op = recorder.invoke(at("a", 1, 5_000), acquire("a-1"));
            recorder.complete(
                at("a", 1, 5_010),
                op,
                Outcome::Fail {
                    reason: leaseproof_history::FailReason::Held,
                },
            );
        }
        let op = recorder.invoke(at("b", 0, 2_000), acquire("b-0"));
        recorder.complete(at("b", 0, 2_010), op, ok(lease(2, "b-0", 2_005)));
        let op = recorder.invoke(
            at("b", 0, 2_100),
            Op::Commit {
                scope: "s".into(),
                owner: "b-0".into(),
                token: 2,
                cycle_id: 1,
                items: 1,
            },
        );
        recorder.complete(
            at("b", 0, 2_200),
            op,
            ok(OpResult::Committed {
                committed_at_us: Some(2_150),
            }),
        );
        recorder.snapshot()
    }

    #[test]
    fn a_commit_after_a_holder_that_crashed_holding_counts_and_after_one_that_released_does_not() {
        assert_eq!(commits_after_crashed_holder(&history(false, true)), 1);
        assert_eq!(commits_after_crashed_holder(&history(true, true)), 0);
        assert_eq!(commits_after_crashed_holder(&history(false, false)), 0);
    }
}
