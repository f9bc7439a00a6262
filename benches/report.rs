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

use crate::document::{BenchDocument, BenchPlan, TransactionCounts};
use crate::drive::{measure, transactions_per_operation};
use crate::measure::Measurement;
use crate::workload::Workload;
use crate::BenchError;
use crate::{hand_offs, overhead, HandOffs, Overhead};

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
