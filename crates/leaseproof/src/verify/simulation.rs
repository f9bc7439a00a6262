//! `verify`'s simulation stages: every scenario swept, and the teeth (the
//! unfenced sweep and the planted server defects that must be caught).

use std::time::Instant;

use super::{Report, VerifyArgs};

/// Every simulation scenario swept over the default seeds, fenced: clean.
pub(super) fn simulation_stage(args: &VerifyArgs, report: &mut Report) {
    const STAGE: &str = "simulation";
    for summary in crate::sim::verify_sweep(0..args.sim_seeds) {
        let outcome = if summary.failures.is_empty() {
            let known = if summary.counts.known_findings > 0 {
                format!(
                    "; {} seeds showed the break the design is known for (the scenario's `breaks`)",
                    summary.counts.known_findings
                )
            } else {
                String::new()
            };
            Ok(format!(
                "{} seeds clean: {} takeovers, {} commits, {} stale commits refused, {} unknown outcomes, {} belief overlaps{known}",
                summary.counts.seeds_run,
                summary.counts.takeovers,
                summary.counts.commits,
                summary.counts.refused_stale_commits,
                summary.counts.unknown_ops,
                summary.counts.belief_overlaps
            ))
        } else {
            let first = &summary.failures[0];
            Err(format!(
                "{} of {} seeds failed; replay the first: {} replay {} --seed {}",
                summary.failures.len(),
                summary.counts.seeds_run,
                leaseproof_sim::invocation(),
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
            "unfenced workers caught in {} of {} gc-pause seeds ({} violations, kinds {codes:?}); first: {} replay gc-pause --seed {} --unfenced",
            summary.failures.len(),
            summary.counts.seeds_run,
            summary.counts.violations,
            leaseproof_sim::invocation(),
            summary.failures[0].seed
        ))
    })();
    report.record(
        STAGE,
        "teeth: unfenced workers are caught",
        started,
        outcome,
    );
    for planted in &PLANTED {
        planted_defect(report, planted);
    }
}

/// Who must see a planted defect: the simulation's true-time monitor (a
/// defect no history shows), or the one checker, from the history.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    InTrueTime,
    ByTheChecker,
}

/// A defect planted in a simulated store or manager, and who must see it.
struct Planted {
    /// The check's name in `verify`'s report.
    name: &'static str,
    /// The scenario whose seeds must show it.
    scenario: &'static str,
    /// Plants the defect.
    plant: fn(&mut leaseproof_sim::RunOptions),
    /// The invariant it breaks.
    expected: leaseproof_history::Invariant,
    /// Where it must be seen.
    seen: Seen,
}

/// The planted defects: a fence whose row lock ends early and a server
/// clock that follows its client (seen only in true time: no history shows
/// them), the Redis manager's scripts without their compare (release and
/// keep-alive act on a rival's key: seen by the checker as two holders), a
/// database granting advisory locks shared (seen by the checker as the
/// writes it lets land under a rival's hold).
const PLANTED: [Planted; 4] = [
    Planted {
        name: "teeth: a fence whose row lock ends before COMMIT is caught",
        scenario: "cycle-pause",
        plant: |options| options.fence_without_lock = true,
        expected: leaseproof_history::Invariant::FencedWrites,
        seen: Seen::InTrueTime,
    },
    Planted {
        name: "teeth: the Redis manager's scripts without their compare are caught",
        scenario: "redis-pause",
        plant: |options| options.compare_skipped = true,
        expected: leaseproof_history::Invariant::MutualExclusion,
        seen: Seen::ByTheChecker,
    },
    Planted {
        name: "teeth: advisory locks granted shared are caught",
        scenario: "advisory-pause",
        plant: |options| options.shared_advisory_locks = true,
        expected: leaseproof_history::Invariant::FencedWrites,
        seen: Seen::ByTheChecker,
    },
    Planted {
        name: "teeth: a server clock that follows its client is caught",
        scenario: "skewed-clocks",
        plant: |options| options.clock_follows_client = true,
        expected: leaseproof_history::Invariant::MutualExclusion,
        seen: Seen::InTrueTime,
    },
];

/// A simulated store with `planted`'s defect must show its invariant in
/// some of 20 seeds of its scenario, seen where it says.
fn planted_defect(report: &mut Report, planted: &Planted) {
    let Planted {
        name,
        scenario,
        plant,
        expected,
        seen,
    } = *planted;
    let mut options = leaseproof_sim::RunOptions::default();
    plant(&mut options);
    const STAGE: &str = "simulation";
    let started = Instant::now();
    let shows = |outcome: &leaseproof_sim::RunOutcome| match seen {
        Seen::InTrueTime => outcome.findings.iter().any(|finding| {
            matches!(finding, leaseproof_sim::Finding::InTrueTime(violation)
                if violation.invariant == expected)
        }),
        Seen::ByTheChecker => outcome.invariants_broken().contains(&expected),
    };
    let how = match seen {
        Seen::InTrueTime => " in true time",
        Seen::ByTheChecker => "",
    };
    let outcome = (|| {
        let scenario =
            leaseproof_sim::Scenario::embedded(scenario).map_err(|error| error.to_string())?;
        let caught: Vec<leaseproof_sim::RunOutcome> = (0..20)
            .map(|seed| leaseproof_sim::run(&scenario, seed, options))
            .filter(shows)
            .collect();
        match caught.first() {
            None => Err(format!(
                "no seed of 0..20 of {} showed {expected}{how}: the planted defect went unseen",
                scenario.name
            )),
            Some(first) => Ok(format!(
                "{} of 20 {} seeds show {expected}{how}; first: {}",
                caught.len(),
                scenario.name,
                first.replay_command()
            )),
        }
    })();
    report.record(STAGE, name.to_string(), started, outcome);
}
