//! A benchmark run: every workload beside its baselines, in one table, and
//! the document `bench --json` writes.
//!
//! Goal: one command that answers "what does acquisition under contention
//! cost here?" as ratios to `SELECT 1` (the round-trip limit) and to
//! `pg_try_advisory_xact_lock`, both measured in the same run at the same
//! contention, and says where the project's goals stand.
//! Method: rows are measured grouped by contention level, baselines first, so
//! a row and its baselines are taken close together in time; the transaction
//! count per attempt comes from `pg_stat_database`.
//! Invariant: the goals are reported as measured — "met" or "NOT met" — and a
//! run with a wrong outcome (a loser granted, a fence lost) fails the command.

use std::time::Duration;

use crate::drive::{measure, transactions_per_operation};
use crate::measure::Measurement;
use crate::report_waiting::{BenchHandOff, BenchObserved};
use crate::workload::Workload;
use crate::BenchError;
use crate::{hand_offs, overhead, HandOffs, Overhead};

/// What one run measures.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub(crate) seconds_per_row: f64,
    /// Slices each row is measured in, interleaved with the other rows'.
    rounds: usize,
    contention_levels: Vec<usize>,
    pub(crate) lifecycle_levels: Vec<usize>,
    /// Waiters on one scope, per hand-off run.
    waiting_levels: Vec<usize>,
    /// Contenders of the observed and quiet loops.
    observed_levels: Vec<usize>,
}

impl BenchPlan {
    /// The plan of a run: `quick` (0.5 s per row in 3 slices, 1 and 8
    /// contenders) or full (3 s in 5 slices, 1, 2, 8 and 32), each overridden
    /// by `seconds` per row and `rounds` (slices) when given.
    pub fn new(quick: bool, seconds: Option<f64>, rounds: Option<u32>) -> BenchPlan {
        let seconds_per_row = seconds.unwrap_or(if quick { 0.5 } else { 3.0 }).max(0.05);
        let contention_levels = if quick { vec![1, 8] } else { vec![1, 2, 8, 32] };
        let rounds = rounds.unwrap_or(if quick { 3 } else { 5 });
        BenchPlan {
            seconds_per_row,
            rounds: usize::try_from(rounds).expect("rounds fit in usize"),
            contention_levels,
            lifecycle_levels: vec![1, 4, 8],
            waiting_levels: if quick { vec![2, 8] } else { vec![2, 4, 8, 16] },
            observed_levels: vec![1, 8],
        }
    }

    /// (workload, contenders) in measuring order, baselines first per level.
    fn rows(&self) -> Vec<(Workload, usize)> {
        let mut rows = Vec::new();
        for &contenders in &self.contention_levels {
            for workload in [
                Workload::SelectOne,
                Workload::AdvisoryXactLock,
                Workload::SelectOneViaPool,
                Workload::PeerPkRead,
                Workload::PeerUpdateWhereExpired,
                Workload::PeerUpsertAlwaysWriting,
                Workload::AcquireHeld,
                Workload::AcquireHeldUnguarded,
                Workload::AcquireHeldViaLibrary,
                Workload::AcquireHeldViaLibraryNoPing,
                Workload::AcquireHeldViaLibraryNoReuse,
                Workload::AcquireHeldViaLibraryOnConnection,
                Workload::AcquireHeldCandidateUpdateFirst,
                Workload::AcquireHeldCandidateFunction,
                Workload::AcquireHeldReadFirst,
                Workload::AcquireTakeover,
                Workload::AcquireUncontended,
                Workload::AcquireUncontendedReadFirst,
                Workload::AcquireUncontendedViaLibrary,
            ] {
                rows.push((workload, contenders));
            }
        }
        for &writers in &self.lifecycle_levels {
            if !self.contention_levels.contains(&writers) {
                // The table's ratio columns need the baselines at this level.
                rows.push((Workload::SelectOne, writers));
                rows.push((Workload::AdvisoryXactLock, writers));
            }
            for workload in [
                Workload::Renew,
                Workload::ReleaseReacquire,
                Workload::UnfencedWrite,
                Workload::FencedCommit,
                Workload::FencedCommitShared,
                Workload::FencedCommitInPieces,
                Workload::GuardedInsertOneStatement,
            ] {
                rows.push((workload, writers));
            }
        }
        rows.push((Workload::TakeoverLatency, 8));
        rows
    }
}

/// The transaction counts per attempt, for the goals.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TransactionCounts {
    pub(crate) loser: f64,
    pub(crate) takeover: f64,
}

/// Measures `plan` on the database at `url`: the table's text and the
/// document `--json` writes. `progress` hears a line per stage (where the
/// run is, for a long one).
pub async fn run_plan(
    url: &str,
    plan: &BenchPlan,
    progress: &(dyn Fn(String) + Sync),
) -> Result<(String, BenchDocument), BenchError> {
    let rows = plan.rows();
    progress(format!(
        "leaseproof bench: {} rows x {:.2} s in {} interleaved slices, contenders {:?}",
        rows.len(),
        plan.seconds_per_row,
        plan.rounds,
        plan.contention_levels
    ));
    // Rows measured one after another see whatever the machine did meanwhile
    // (another process, the CPU's clock); in slices taken in turn, forward
    // then backward, a drift lands on every row alike. The takeover-latency
    // row pairs grants of one scope, so it is measured in one piece.
    let slice = Duration::from_secs_f64(plan.seconds_per_row / plan.rounds as f64);
    let mut slices: Vec<Vec<Measurement>> = vec![Vec::new(); rows.len()];
    for round in 0..plan.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for index in order {
            let (workload, contenders) = rows[index];
            if workload == Workload::TakeoverLatency && round > 0 {
                continue;
            }
            let duration = if workload == Workload::TakeoverLatency {
                Duration::from_secs_f64(plan.seconds_per_row)
            } else {
                slice
            };
            slices[index].push(measure(url, workload, contenders, duration).await?);
        }
        progress(format!("  round {} of {} measured", round + 1, plan.rounds));
    }
    let mut measurements = Vec::with_capacity(rows.len());
    for ((workload, contenders), parts) in rows.iter().zip(slices) {
        let measurement = Measurement::combined(parts);
        progress(format!(
            "  {:<28} x{:<3} {:>10.0}/s",
            workload.name(),
            contenders,
            measurement.throughput_per_second
        ));
        measurements.push(measurement);
    }
    let contenders = 8;
    let counts = TransactionCounts {
        loser: transactions_per_operation(url, Workload::AcquireHeld, contenders, 100, 600).await?,
        takeover: transactions_per_operation(url, Workload::AcquireTakeover, contenders, 100, 600)
            .await?,
    };
    let (mut text, mut document) = crate::report_table::report(plan, &measurements, counts);
    let waiting = measure_waiting(url, plan, progress).await?;
    let select_one_p50 = measurements
        .iter()
        .find(|m| m.workload == Workload::SelectOne && m.contenders == 1)
        .map(|m| m.p50);
    let section = crate::report_waiting::section(&waiting.0, &waiting.1, select_one_p50);
    text.push_str(&section.text);
    document.goals.extend(section.goals);
    document.passed = document.goals.iter().all(|goal| goal.met);
    document.hand_offs = section.hand_offs;
    document.observed = section.observed;
    Ok((text, document))
}

/// Hand-offs between waiters at each waiter count, then the observed and
/// quiet loops: after the table, on the same server.
async fn measure_waiting(
    url: &str,
    plan: &BenchPlan,
    progress: &(dyn Fn(String) + Sync),
) -> Result<(Vec<HandOffs>, Vec<Overhead>), BenchError> {
    // Long enough for a few hundred hand-offs, so the p99 is a hand-off's.
    let duration = Duration::from_secs_f64(plan.seconds_per_row.max(1.0));
    let (hold, think) = (Duration::from_millis(5), Duration::from_millis(5));
    let mut runs = Vec::new();
    for &waiters in &plan.waiting_levels {
        let run = hand_offs(url, waiters, duration, hold, think).await?;
        progress(format!(
            "  hand-offs x{waiters:<3} {:>6} grants, p50 {:?}",
            run.grants, run.p50
        ));
        runs.push(run);
    }
    let slice = Duration::from_secs_f64(plan.seconds_per_row / plan.rounds as f64);
    let mut overheads = Vec::new();
    for &contenders in &plan.observed_levels {
        overheads.push(overhead(url, contenders, slice, plan.rounds).await?);
    }
    Ok((runs, overheads))
}

/// How the table marks a missed goal (`--check` counts the document's).
const NOT_MET: &str = "NOT met";

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        NOT_MET
    }
}

/// A finite ratio, `None` for NaN or infinity (JSON has no NaN).
pub(crate) fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// `bench --json`: every row and goal of one run (docs/json.md). `passed`
/// says whether every goal was met, as `--check` would judge.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchDocument {
    /// Always `leaseproof-bench`.
    pub format: String,
    /// Always 3 (2 had no goal `rounds`; 1 had no `hand_offs` and `observed`).
    pub version: u32,
    /// Every goal met.
    pub passed: bool,
    /// Seconds each row was measured for.
    pub seconds_per_row: f64,
    /// Every row, in measuring order.
    pub rows: Vec<BenchRow>,
    /// Server transactions per losing attempt (`pg_stat_database`, 8-way).
    pub transactions_per_attempt_loser: f64,
    /// Server transactions per takeover attempt (8-way).
    pub transactions_per_attempt_takeover: f64,
    /// Each goal with its measured value.
    pub goals: Vec<BenchGoal>,
    /// Waiters on one scope: hand-off latency, writes, fairness.
    pub hand_offs: Vec<BenchHandOff>,
    /// The acquire + release loop with and without a subscriber and recorder.
    pub observed: Vec<BenchObserved>,
}

/// One measured row.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchRow {
    /// The workload's name (`select 1`, `acquire held`, …).
    pub operation: String,
    /// Concurrent contenders.
    pub contenders: usize,
    /// Operations completed.
    pub operations: u64,
    /// Operations that were granted a lease.
    pub granted: u64,
    /// Operations per second, all contenders together.
    pub per_second: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th-percentile latency, µs.
    pub p99_us: f64,
    /// Throughput / `SELECT 1`'s at the same contenders, this run.
    pub ratio_to_select_one: Option<f64>,
    /// Throughput / the advisory lock's at the same contenders, this run.
    pub ratio_to_advisory: Option<f64>,
}

/// One goal and where it stands.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchGoal {
    /// What is measured.
    pub name: String,
    /// The measured value (a ratio or a count); `None` when it could not be computed.
    pub value: Option<f64>,
    /// The goal, e.g. `>= 0.80`.
    pub goal: String,
    /// Whether the value meets it — in every round, where it has rounds.
    pub met: bool,
    /// The value in each round (each row's slice against its baseline's
    /// slice of the same round), in measuring order; empty for a goal of
    /// the whole run. Non-finite values are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
}

impl BenchGoal {
    pub(crate) fn new(name: &str, value: f64, goal: &str, met: bool) -> BenchGoal {
        BenchGoal {
            name: name.to_string(),
            value: finite(value),
            goal: goal.to_string(),
            met,
            rounds: Vec::new(),
        }
    }

    /// The goal with its value in each round.
    pub(crate) fn with_rounds(mut self, rounds: &[f64]) -> BenchGoal {
        self.rounds = rounds.iter().copied().filter_map(finite).collect();
        self
    }
}

impl leaseproof_history::Document for BenchDocument {
    const FORMAT: &'static str = "leaseproof-bench";
    const VERSION: u32 = 3;
    /// Version 2 had no `rounds` in its goals.
    const OLDEST_VERSION_READ: u32 = 2;
}
