//! `verify`'s simulation stages: every scenario swept, and the teeth (the
//! unfenced sweep and the planted server defects that must be caught).

use std::time::Instant;

use super::{Report, VerifyArgs};

/// Every simulation scenario swept over the default seeds, fenced: clean.
pub(super) fn simulation_stage(args: &VerifyArgs, report: &mut Report) {
    const STAGE: &str = "simulation";
    for summary in crate::sim::verify_sweep(0..args.sim_seeds) {
        let outcome = if summary.failures.is_empty() {
            let known = if summary.known_findings > 0 {
                format!(
                    "; {} seeds showed the break the design is known for (the scenario's `breaks`)",
                    summary.known_findings
                )
            } else {
                String::new()
            };
            Ok(format!(
                "{} seeds clean: {} takeovers, {} commits, {} stale commits refused, {} unknown outcomes, {} belief overlaps{known}",
                summary.seeds_run,
                summary.takeovers,
                summary.commits,
                summary.refused_stale_commits,
                summary.unknown_ops,
                summary.belief_overlaps
            ))
        } else {
            let first = &summary.failures[0];
            Err(format!(
                "{} of {} seeds failed; replay the first: cargo run --release -- replay {} --seed {}",
                summary.failures.len(),
                summary.seeds_run,
                summary.scenario,
                first.seed
            ))
        };
        report.record_seconds(
            STAGE,
            format!("scenario {}", summary.scenario),
            summary.wall.as_secs_f64(),
            outcome,
        );
    }
}

/// Teeth: the same sweep with every worker unfenced must find violations, and
/// only the kinds the fence prevents (stale writes, belief overlaps).
pub(super) fn simulation_teeth(report: &mut Report) {
    const STAGE: &str = "simulation";
    let started = Instant::now();
    let outcome = (|| {
        let scenario =
            leaseproof_sim::Scenario::embedded("gc-pause").map_err(|error| error.to_string())?;
        let config = leaseproof_sim::SweepConfig {
            seeds: 0..50,
            shard: None,
            jobs: 2,
            unfenced: true,
        };
        let summary = leaseproof_sim::sweep(&scenario, &config, &|_| {});
        let codes: std::collections::BTreeSet<&str> = summary
            .failures
            .iter()
            .flat_map(|failure| failure.invariants.iter().map(|invariant| invariant.code()))
            .collect();
        if summary.failures.is_empty() {
            return Err(
                "50 unfenced gc-pause seeds found no violation: the harness has no teeth"
                    .to_string(),
            );
        }
        if codes.iter().any(|code| !matches!(*code, "I3" | "B")) {
            return Err(format!(
                "unfenced workers broke more than the fence protects: {codes:?}"
            ));
        }
        Ok(format!(
            "unfenced workers caught in {} of {} gc-pause seeds ({} violations, kinds {codes:?}); first: cargo run --release -- replay gc-pause --seed {} --unfenced",
            summary.failures.len(),
            summary.seeds_run,
            summary.violations,
            summary.failures[0].seed
        ))
    })();
    report.record(
        STAGE,
        "teeth: unfenced workers are caught",
        started,
        outcome,
    );
    planted_defect(
        report,
        "teeth: a fence whose row lock ends before COMMIT is caught",
        "cycle-pause",
        leaseproof_sim::RunOptions {
            fence_without_lock: true,
            ..leaseproof_sim::RunOptions::default()
        },
        leaseproof_history::Invariant::FencedWrites,
    );
    redis_compare_skipped(report);
    planted_defect(
        report,
        "teeth: a server clock that follows its client is caught",
        "skewed-clocks",
        leaseproof_sim::RunOptions {
            clock_follows_client: true,
            ..leaseproof_sim::RunOptions::default()
        },
        leaseproof_history::Invariant::MutualExclusion,
    );
}

/// A simulated server with a planted defect (`options`) must fail some of
/// 20 seeds of `scenario`, with the violation of `expected` that the
/// simulation's true-time monitor exists for.
fn planted_defect(
    report: &mut Report,
    name: &str,
    scenario: &str,
    options: leaseproof_sim::RunOptions,
    expected: leaseproof_history::Invariant,
) {
    const STAGE: &str = "simulation";
    let started = Instant::now();
    let outcome = (|| {
        let scenario =
            leaseproof_sim::Scenario::embedded(scenario).map_err(|error| error.to_string())?;
        let caught: Vec<leaseproof_sim::RunOutcome> = (0..20)
            .map(|seed| leaseproof_sim::run(&scenario, seed, options))
            .filter(|outcome| {
                outcome.findings.iter().any(|finding| {
                    matches!(finding, leaseproof_sim::Finding::InTrueTime(violation)
                        if violation.invariant == expected)
                })
            })
            .collect();
        match caught.first() {
            None => Err(format!(
                "no seed of 0..20 of {} showed {expected} in true time: the monitor has no teeth",
                scenario.name
            )),
            Some(first) => Ok(format!(
                "{} of 20 {} seeds show {expected} in true time; first: {}",
                caught.len(),
                scenario.name,
                first.replay_command()
            )),
        }
    })();
    report.record(STAGE, name.to_string(), started, outcome);
}

/// The Redis manager's scripts run without their compare (release and
/// keep-alive act on a rival's key) must be caught as two holders (I1).
fn redis_compare_skipped(report: &mut Report) {
    const STAGE: &str = "simulation";
    let started = Instant::now();
    let outcome = (|| {
        let scenario =
            leaseproof_sim::Scenario::embedded("redis-pause").map_err(|error| error.to_string())?;
        let options = leaseproof_sim::RunOptions {
            compare_skipped: true,
            ..leaseproof_sim::RunOptions::default()
        };
        let caught: Vec<u64> = (0..20)
            .map(|seed| leaseproof_sim::run(&scenario, seed, options))
            .filter(|outcome| {
                outcome
                    .invariants_broken()
                    .contains(&leaseproof_history::Invariant::MutualExclusion)
            })
            .map(|outcome| outcome.seed)
            .collect();
        match caught.first() {
            None => Err("no seed of 0..20 of redis-pause caught scripts without their compare".to_string()),
            Some(first) => Ok(format!(
                "{} of 20 redis-pause seeds show I1; first: cargo run --release -- replay redis-pause --seed {first} --compare-skipped",
                caught.len()
            )),
        }
    })();
    report.record(
        STAGE,
        "teeth: the Redis manager's scripts without their compare are caught",
        started,
        outcome,
    );
}
