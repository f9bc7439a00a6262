//! What a benchmark run measures and what it reports: the plan, and the
//! document `bench --json` writes (docs/json.md).
//!
//! A leaf beside the run: the table and the waiting section fill the
//! document, `report` runs the plan, neither through the other.

use crate::workload::Workload;

/// What one run measures.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub(crate) seconds_per_row: f64,
    /// Slices each row is measured in, interleaved with the other rows'.
    pub(crate) rounds: usize,
    pub(crate) contention_levels: Vec<usize>,
    pub(crate) lifecycle_levels: Vec<usize>,
    /// Waiters on one scope, per hand-off run.
    pub(crate) waiting_levels: Vec<usize>,
    /// Contenders of the observed and quiet loops.
    pub(crate) observed_levels: Vec<usize>,
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
    pub(crate) fn rows(&self) -> Vec<(Workload, usize)> {
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

/// One waiter count's hand-offs, as `bench --json` writes them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchHandOff {
    /// Concurrent waiters on one scope.
    pub waiters: usize,
    /// Each holder's hold before releasing, ms.
    pub hold_ms: f64,
    /// Other work between a release and the same waiter's next wait, ms.
    pub think_ms: f64,
    /// Grants, all waiters together.
    pub grants: u64,
    /// Hand-offs timed (the next holder was waiting at the release).
    pub hand_offs: u64,
    /// Median release reply → next grant, µs.
    pub p50_us: f64,
    /// 99th percentile of the same, µs.
    pub p99_us: f64,
    /// `p50_us` / `SELECT 1`'s p50 at one contender, this run.
    pub p50_in_round_trips: Option<f64>,
    /// Server write transactions per grant (a grant and its release: 2).
    pub write_transactions_per_grant: f64,
    /// The fewest grants a waiter got.
    pub grants_per_waiter_min: u64,
    /// The most grants a waiter got.
    pub grants_per_waiter_max: u64,
}

/// One contender count's observed and quiet loops, as `bench --json` writes them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchObserved {
    /// Concurrent contenders, each on its own scope.
    pub contenders: usize,
    /// Acquire + release cycles per second, nobody listening.
    pub quiet_per_second: f64,
    /// The same with a subscriber and a recorder.
    pub observed_per_second: f64,
    /// `observed_per_second / quiet_per_second`.
    pub ratio: Option<f64>,
    /// Median cycle, quiet, µs.
    pub p50_quiet_us: f64,
    /// Median cycle, observed, µs.
    pub p50_observed_us: f64,
}
