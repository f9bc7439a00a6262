//! The bench report's section on waiting and observing: hand-offs between
//! waiters, fairness, writes per hand-off, and the meters' cost.
//!
//! Goal: print and document, beside the table's `SELECT 1` from the same run,
//! what [`hand_offs`](crate::hand_offs) and [`overhead`](crate::overhead)
//! measured, with the goals each figure is held to.
//! Invariant: a goal is reported as measured; a figure that could not be
//! computed (no hand-off timed, no baseline) is a goal not met, never one met.

use std::fmt::Write as _;
use std::time::Duration;

use crate::document::{finite, verdict, BenchGoal, BenchHandOff, BenchObserved};
use crate::{HandOffs, Overhead};

/// The section's text, its goals and its JSON rows.
pub(crate) struct WaitingSection {
    pub(crate) text: String,
    pub(crate) goals: Vec<BenchGoal>,
    pub(crate) hand_offs: Vec<BenchHandOff>,
    pub(crate) observed: Vec<BenchObserved>,
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Builds the section from what was measured; `select_one_p50` is the
/// table's `SELECT 1` median at one contender.
pub(crate) fn section(
    runs: &[HandOffs],
    overheads: &[Overhead],
    select_one_p50: Option<Duration>,
) -> WaitingSection {
    let mut text = String::new();
    let mut goals = Vec::new();
    let hand_offs = hand_off_rows(runs, select_one_p50);
    write_hand_offs(&mut text, &hand_offs);
    hand_off_goals(&mut text, &mut goals, &hand_offs);
    let observed = observed_rows(overheads);
    write_observed(&mut text, &mut goals, &observed);
    WaitingSection {
        text,
        goals,
        hand_offs,
        observed,
    }
}

fn hand_off_rows(runs: &[HandOffs], select_one_p50: Option<Duration>) -> Vec<BenchHandOff> {
    runs.iter()
        .map(|run| BenchHandOff {
            waiters: run.waiters,
            hold_ms: run.hold.as_secs_f64() * 1e3,
            think_ms: run.think.as_secs_f64() * 1e3,
            grants: run.grants,
            hand_offs: run.hand_offs,
            p50_us: micros(run.p50),
            p99_us: micros(run.p99),
            p50_in_round_trips: select_one_p50
                .and_then(|select_one| finite(micros(run.p50) / micros(select_one))),
            write_transactions_per_grant: run.write_transactions_per_grant,
            grants_per_waiter_min: run.grants_per_waiter_min,
            grants_per_waiter_max: run.grants_per_waiter_max,
        })
        .collect()
}

fn write_hand_offs(text: &mut String, rows: &[BenchHandOff]) {
    let Some(first) = rows.first() else {
        return;
    };
    let _ = writeln!(
        text,
        "\nwaiting: acquire_wait on one scope, each waiter holding {:.0} ms then doing {:.0} ms \
         of other work; a hand-off is a release's reply to the next holder's grant",
        first.hold_ms, first.think_ms
    );
    let _ = writeln!(
        text,
        "{:>8} {:>7} {:>9} {:>9} {:>9} {:>10} {:>12} {:>17}",
        "waiters",
        "grants",
        "hand-offs",
        "p50",
        "p99",
        "p50 in RTT",
        "writes/grant",
        "grants per waiter"
    );
    for row in rows {
        let round_trips = row
            .p50_in_round_trips
            .map_or("-".to_string(), |ratio| format!("{ratio:.1}"));
        let _ = writeln!(
            text,
            "{:>8} {:>7} {:>9} {:>7.2}ms {:>7.2}ms {:>10} {:>12.2} {:>17}",
            row.waiters,
            row.grants,
            row.hand_offs,
            row.p50_us / 1e3,
            row.p99_us / 1e3,
            round_trips,
            row.write_transactions_per_grant,
            format!(
                "{}–{}",
                row.grants_per_waiter_min, row.grants_per_waiter_max
            )
        );
    }
}

/// Writes per hand-off stay flat as waiters are added (losers read, they do
/// not write), and no waiter starves.
fn hand_off_goals(text: &mut String, goals: &mut Vec<BenchGoal>, rows: &[BenchHandOff]) {
    if let (Some(fewest), Some(most)) = (rows.first(), rows.last()) {
        let growth = most.write_transactions_per_grant / fewest.write_transactions_per_grant;
        let name = format!(
            "writes per grant, {} waiters / {} waiters",
            most.waiters, fewest.waiters
        );
        let met = growth <= 1.25;
        let _ = writeln!(
            text,
            "  {name}: {growth:.2}x  (goal <= 1.25x: O(1) writes per hand-off) {}",
            verdict(met)
        );
        goals.push(BenchGoal::new(&name, growth, "<= 1.25", met));
    }
    let fewest = rows.iter().map(|row| row.grants_per_waiter_min).min();
    if let Some(fewest) = fewest {
        let met = fewest >= 1;
        let _ = writeln!(
            text,
            "  fewest grants of any waiter at any count: {fewest}  (goal >= 1: nobody starves) {}",
            verdict(met)
        );
        goals.push(BenchGoal::new(
            "fewest grants of a waiter",
            fewest as f64,
            ">= 1",
            met,
        ));
    }
}

fn observed_rows(overheads: &[Overhead]) -> Vec<BenchObserved> {
    overheads
        .iter()
        .map(|overhead| BenchObserved {
            contenders: overhead.contenders,
            quiet_per_second: overhead.cycles_per_second_quiet,
            observed_per_second: overhead.cycles_per_second_observed,
            ratio: finite(overhead.ratio()),
            p50_quiet_us: micros(overhead.p50_quiet),
            p50_observed_us: micros(overhead.p50_observed),
        })
        .collect()
}

fn write_observed(text: &mut String, goals: &mut Vec<BenchGoal>, rows: &[BenchObserved]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        text,
        "\nobserved: acquire + release through the library, quiet vs. with a fmt subscriber on \
         the lease's debug events and a metrics recorder (atomic registry), slices alternated"
    );
    for row in rows {
        let ratio = row.ratio.unwrap_or(f64::NAN);
        let name = format!("observed / quiet cycles, {}-way", row.contenders);
        let met = ratio >= 0.90;
        let _ = writeln!(
            text,
            "  {:>3}-way: {:>7.0}/s quiet, {:>7.0}/s observed, p50 {:.0} / {:.0} µs: \
             {ratio:.2}x  (goal >= 0.90x) {}",
            row.contenders,
            row.quiet_per_second,
            row.observed_per_second,
            row.p50_quiet_us,
            row.p50_observed_us,
            verdict(met)
        );
        goals.push(BenchGoal::new(&name, ratio, ">= 0.90", met));
    }
}
