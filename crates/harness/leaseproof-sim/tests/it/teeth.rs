//! Goal: the harness has teeth. Method: the same sweeps with every worker
//! unfenced (trusting its local belief deadline) must produce violations —
//! stale writes (I3) or belief overlaps of unfenced workers (B) and nothing
//! else, with at least one I3 per scenario — and the schema without its retry must leave workers unable to start.

use std::collections::BTreeSet;

use leaseproof_history::Invariant;
use leaseproof_sim::{run, sweep, Finding, RunOptions, Scenario, SweepConfig};

fn sweep_unfenced(name: &str, seeds: std::ops::Range<u64>) -> leaseproof_sim::SweepSummary {
    let scenario = Scenario::load(name).expect("the scenario loads");
    let config = SweepConfig {
        seeds,
        shard: None,
        jobs: 1,
        unfenced: true,
    };
    sweep(&scenario, &config, &|_| {})
}

/// gc-pause's unfenced sweep over seeds 0..50, run once for the three tests
/// that read it (its verdicts, its stale writes, a failing seed's trace).
fn gc_pause_unfenced() -> &'static leaseproof_sim::SweepSummary {
    static SWEEP: std::sync::OnceLock<leaseproof_sim::SweepSummary> = std::sync::OnceLock::new();
    SWEEP.get_or_init(|| sweep_unfenced("gc-pause", 0..50))
}

fn assert_caught(summary: &leaseproof_sim::SweepSummary) {
    assert!(
        summary.counts.violations > 0,
        "{}: unfenced sweep found nothing",
        summary.scenario
    );
    assert!(!summary.failures.is_empty());
    let codes: BTreeSet<&str> = summary
        .failures
        .iter()
        .flat_map(|failure| failure.invariants.iter().map(|invariant| invariant.code()))
        .collect();
    let expected: BTreeSet<&str> = ["I3", "B"].into_iter().collect();
    assert!(
        codes.is_subset(&expected),
        "{}: unexpected kinds of violation {codes:?}",
        summary.scenario
    );
    // Belief overlaps (B) follow from beliefs and the unfenced flag alone; a
    // stale write in the guarded table (I3) shows the unfenced commit really
    // wrote unfenced and the checker read the table.
    assert!(
        codes.contains("I3"),
        "{}: no stale write in the guarded table, only {codes:?}",
        summary.scenario
    );
    println!(
        "{}: first failing unfenced seeds {:?}",
        summary.scenario,
        summary
            .failures
            .iter()
            .take(5)
            .map(|failure| failure.seed)
            .collect::<Vec<_>>()
    );
}

#[test]
fn unfenced_workers_are_caught_under_gc_pauses() {
    assert_caught(gc_pause_unfenced());
}

#[test]
fn unfenced_workers_are_caught_under_skewed_clocks() {
    assert_caught(&sweep_unfenced("skewed-clocks", 0..50));
}

#[test]
fn unfenced_leaders_are_caught_while_leadership_churns() {
    assert_caught(&sweep_unfenced("leader-churn", 0..50));
}

#[test]
fn unfenced_workers_are_caught_under_chaos() {
    assert_caught(&sweep_unfenced("chaos", 0..30));
}

#[test]
fn unfenced_stale_write_is_an_i3_violation() {
    // Among the unfenced gc-pause failures some are stale writes in the table,
    // not only beliefs: the guarded rows themselves convict the writer.
    let summary = gc_pause_unfenced();
    assert!(summary
        .failures
        .iter()
        .any(|failure| failure.invariants.contains(&Invariant::FencedWrites)));
}

#[test]
fn a_failing_run_shows_the_trace_up_to_its_violations_last_event() {
    let seed = gc_pause_unfenced()
        .failures
        .iter()
        .find(|failure| failure.invariants.contains(&Invariant::FencedWrites))
        .expect("a stale write among the failures")
        .seed;
    let scenario = Scenario::load("gc-pause").expect("the scenario loads");
    let options = RunOptions {
        unfenced: true,
        trace: true,
        ..RunOptions::default()
    };
    let outcome = run(&scenario, seed, options);
    let violation = outcome.report.violations.first().expect("a violation");
    let last_event = violation.events.iter().max().expect("events");
    let anchor_us = outcome.history.events[*last_event as usize].true_time_us;
    let stamp = format!("[sim {} ", leaseproof_sim::format_us(anchor_us));
    let excerpt = outcome.trace_excerpt(30);
    assert!(!excerpt.is_empty());
    assert!(excerpt.len() <= 30);
    // It ends at the last line stamped with the violation's last event,
    // and is the run of trace lines just before it.
    let end = outcome
        .trace
        .iter()
        .rposition(|line| line.starts_with(&stamp))
        .expect("the event's moment is in the trace")
        + 1;
    assert_eq!(excerpt.last(), outcome.trace.get(end - 1));
    assert_eq!(excerpt[..], outcome.trace[end - excerpt.len()..end]);
}

#[test]
fn schema_without_retry_is_caught_when_workers_start_together() {
    let mut scenario = Scenario::load("concurrent-schema").expect("the scenario loads");
    scenario.schema_retry = false;
    let outcome = run(&scenario, 0, RunOptions::default());
    assert!(!outcome.is_ok());
    assert!(
        outcome.report.is_ok(),
        "the lease itself stays safe: {}",
        outcome.report
    );
    let failures = &outcome.findings;
    assert!(!failures.is_empty());
    assert!(
        failures.iter().all(|failure| matches!(failure,
            Finding::DidNotStart { error, .. } if error.contains("23505"))),
        "{failures:?}"
    );
    // One worker created the table; every other one raced it.
    assert_eq!(failures.len() as u32, scenario.workers - 1, "{failures:?}");
}

#[test]
fn survivors_retrying_slower_than_the_ttl_break_the_takeover_bound() {
    // Rivals that wait 5 s after a refusal leave a crashed holder's scope idle
    // far beyond crash-mid-cycle's 400 ms bound: I5 must say so, and nothing
    // else may break (the lease stays safe, only slow).
    let mut scenario = Scenario::load("crash-mid-cycle").expect("the scenario loads");
    scenario.retry_interval_ms = 5_000;
    let config = SweepConfig {
        seeds: 0..20,
        shard: None,
        jobs: 1,
        unfenced: false,
    };
    let summary = sweep(&scenario, &config, &|_| {});
    let codes: BTreeSet<&str> = summary
        .failures
        .iter()
        .flat_map(|failure| failure.invariants.iter().map(|invariant| invariant.code()))
        .collect();
    assert_eq!(
        codes,
        ["I5"].into_iter().collect(),
        "{:?}",
        summary.failures
    );
    assert_eq!(summary.counts.expectation_failures, 0);
    println!(
        "slow retry: {} of {} seeds break I5, first {:?}",
        summary.failures.len(),
        summary.counts.seeds_run,
        summary
            .failures
            .first()
            .map(|failure| &failure.first_problem)
    );
}

/// Runs `seeds` of `name` with `options`; returns the failing outcomes.
fn failing_runs(
    name: &str,
    seeds: std::ops::Range<u64>,
    options: RunOptions,
) -> Vec<leaseproof_sim::RunOutcome> {
    let scenario = Scenario::load(name).expect("the scenario loads");
    seeds
        .map(|seed| run(&scenario, seed, options))
        .filter(|outcome| !outcome.is_ok())
        .collect()
}

#[test]
fn unfenced_workers_are_caught_under_pauses_inside_the_cycle() {
    assert_caught(&sweep_unfenced("cycle-pause", 0..40));
}

#[test]
fn a_fence_whose_row_lock_ends_before_commit_is_caught() {
    // The simulated fence checks the lease but keeps no row lock — what a
    // fence run in a transaction of its own does. A pause inside the cycle
    // lets a rival take over, and the stale writes commit under its grant.
    let options = RunOptions {
        fence_without_lock: true,
        ..RunOptions::default()
    };
    let failures = failing_runs("cycle-pause", 0..40, options);
    assert!(!failures.is_empty(), "no seed of 0..40 caught the fence");
    for outcome in &failures {
        // Only I3 may break: grants stay exclusive, nothing is lost.
        for violation in &outcome.report.violations {
            assert_eq!(
                violation.invariant.code(),
                "I3",
                "seed {}: {}",
                outcome.seed,
                violation.message
            );
        }
        for finding in &outcome.findings {
            assert_eq!(
                finding.invariant(),
                Some(Invariant::FencedWrites),
                "seed {}: {finding}",
                outcome.seed
            );
        }
        assert!(outcome.replay_command().ends_with(" --fence-without-lock"));
    }
    // The monitor at the commit instant sees it in every failing run; the
    // history alone sees it only where the guarded rows' token order shows it.
    let seen_at_commit = failures
        .iter()
        .filter(|outcome| !outcome.findings.is_empty())
        .count();
    let seen_in_history = failures
        .iter()
        .filter(|outcome| !outcome.report.violations.is_empty())
        .count();
    println!(
        "fence without lock: {} of 40 seeds caught ({seen_at_commit} at the commit instant, {seen_in_history} by the history checker)",
        failures.len()
    );
    assert_eq!(seen_at_commit, failures.len());
}

#[test]
fn a_server_clock_that_follows_its_client_is_caught_in_true_time() {
    // Each statement decided with its client's skewed clock: every interval
    // the server reports is consistent with itself, so the history checker
    // may see nothing; the true-time monitor sees the overlap.
    let options = RunOptions {
        clock_follows_client: true,
        ..RunOptions::default()
    };
    let failures = failing_runs("skewed-clocks", 0..20, options);
    assert!(
        failures.iter().any(|outcome| outcome
            .findings
            .iter()
            .any(|finding| finding.invariant() == Some(Invariant::MutualExclusion))),
        "no seed of 0..20 caught the client-following clock"
    );
    println!(
        "clock follows client: {} of 20 skewed-clocks seeds caught",
        failures.len()
    );
}
