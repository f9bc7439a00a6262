//! Sweeps past one machine: a shard's summary as JSON, and the merge of the
//! shards into one verdict.
//!
//! Goal: let an existing engine (a Kubernetes Indexed Job, a GitHub Actions
//! matrix) run the shards of a sweep, then judge them together: the merged
//! counts equal an unsharded run's, a violation in any shard fails the merge,
//! and so does a missing or duplicated shard — a sweep that silently lost a
//! shard must not pass. Method: `sim … --shard i/n --json FILE` writes a
//! [`ShardReport`] (format `leaseproof-sweep`, version 1); `sim merge FILE…`
//! reads them, checks they describe one sweep (same seeds, same option,
//! same shard count, every index once) and sums them per scenario.
//! Invariant: the merge reads only the files; it runs nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sweep::{SeedFailure, SweepSummary};

/// The `format` field of every shard report.
pub const FORMAT: &str = "leaseproof-sweep";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;

/// One shard's summary, as `sim --json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardReport {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The sweep's seeds, `start..end` (the whole sweep's, not the shard's).
    pub seeds: [u64; 2],
    /// `[index, count]`: this shard runs the seeds `s % count == index`
    /// (`[0, 1]` for an unsharded sweep).
    pub shard: [u64; 2],
    /// Every worker unfenced (violations are then the expected finding).
    pub unfenced: bool,
    /// Per scenario, in the order they ran.
    pub scenarios: Vec<ScenarioReport>,
}

/// One scenario's totals in a shard (or, merged, in the whole sweep).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioReport {
    /// The scenario's name.
    pub scenario: String,
    /// Seeds run.
    pub seeds_run: u64,
    /// Violations over all runs.
    pub violations: u64,
    /// Failed expectations over all runs.
    pub expectation_failures: u64,
    /// Belief overlaps over all runs.
    pub belief_overlaps: u64,
    /// Takeovers over all runs.
    pub takeovers: u64,
    /// Ok commits over all runs.
    pub commits: u64,
    /// Commits the fence refused.
    pub refused_stale_commits: u64,
    /// Operations with unknown outcomes.
    pub unknown_ops: u64,
    /// Commits under a grant that followed a crashed holder's.
    pub commits_after_crashed_holder: u64,
    /// Dead-holder takeover delays, ascending, µs.
    pub dead_holder_takeover_delays_us: Vec<i64>,
    /// Simulated time over all runs, µs.
    pub simulated_us: u64,
    /// Wall time of the shard's sweep of this scenario, µs (summed when merged).
    pub wall_us: u64,
    /// The failing seeds, ascending.
    pub failing_seeds: Vec<FailingSeed>,
    /// Set when the sweep was stopped early (Ctrl-C): the first seed that
    /// did not run. A merge refuses a shard that stopped early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<u64>,
}

/// A failing seed, with what replays it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailingSeed {
    /// The seed.
    pub seed: u64,
    /// Violations plus failed expectations.
    pub problems: u64,
    /// The first of them.
    pub first_problem: String,
    /// Invariant codes of the violations, sorted.
    pub codes: Vec<String>,
}

impl ScenarioReport {
    /// The report of one sweep summary.
    pub fn from_summary(summary: &SweepSummary) -> ScenarioReport {
        ScenarioReport {
            scenario: summary.scenario.clone(),
            seeds_run: summary.seeds_run,
            violations: summary.violations,
            expectation_failures: summary.expectation_failures,
            belief_overlaps: summary.belief_overlaps,
            takeovers: summary.takeovers,
            commits: summary.commits,
            refused_stale_commits: summary.refused_stale_commits,
            unknown_ops: summary.unknown_ops,
            commits_after_crashed_holder: summary.commits_after_crashed_holder,
            dead_holder_takeover_delays_us: summary.dead_holder_takeover_delays_us.clone(),
            simulated_us: u64::try_from(summary.simulated.as_micros()).unwrap_or(u64::MAX),
            wall_us: u64::try_from(summary.wall.as_micros()).unwrap_or(u64::MAX),
            failing_seeds: summary
                .failures
                .iter()
                .map(|failure: &SeedFailure| FailingSeed {
                    seed: failure.seed,
                    problems: failure.problems as u64,
                    first_problem: failure.first_problem.clone(),
                    codes: failure.codes.clone(),
                })
                .collect(),
            resume_from: summary.resume_from,
        }
    }

    /// Back to a summary (for the table); threads are unknown after a merge.
    pub fn to_summary(&self, unfenced: bool) -> SweepSummary {
        SweepSummary {
            scenario: self.scenario.clone(),
            unfenced,
            seeds_run: self.seeds_run,
            failures: self
                .failing_seeds
                .iter()
                .map(|seed| SeedFailure {
                    seed: seed.seed,
                    problems: usize::try_from(seed.problems).unwrap_or(usize::MAX),
                    first_problem: seed.first_problem.clone(),
                    codes: seed.codes.clone(),
                })
                .collect(),
            violations: self.violations,
            expectation_failures: self.expectation_failures,
            belief_overlaps: self.belief_overlaps,
            takeovers: self.takeovers,
            commits: self.commits,
            refused_stale_commits: self.refused_stale_commits,
            unknown_ops: self.unknown_ops,
            commits_after_crashed_holder: self.commits_after_crashed_holder,
            dead_holder_takeover_delays_us: self.dead_holder_takeover_delays_us.clone(),
            simulated: Duration::from_micros(self.simulated_us),
            wall: Duration::from_micros(self.wall_us),
            jobs: 1,
            resume_from: self.resume_from,
        }
    }

    /// The counts that must not depend on how the seeds were split: every
    /// field but the wall time.
    pub fn without_wall_time(&self) -> ScenarioReport {
        ScenarioReport {
            wall_us: 0,
            ..self.clone()
        }
    }

    fn absorb(&mut self, other: &ScenarioReport) {
        self.seeds_run += other.seeds_run;
        self.violations += other.violations;
        self.expectation_failures += other.expectation_failures;
        self.belief_overlaps += other.belief_overlaps;
        self.takeovers += other.takeovers;
        self.commits += other.commits;
        self.refused_stale_commits += other.refused_stale_commits;
        self.unknown_ops += other.unknown_ops;
        self.commits_after_crashed_holder += other.commits_after_crashed_holder;
        self.dead_holder_takeover_delays_us
            .extend(&other.dead_holder_takeover_delays_us);
        self.dead_holder_takeover_delays_us.sort_unstable();
        self.simulated_us += other.simulated_us;
        self.wall_us += other.wall_us;
        self.failing_seeds
            .extend(other.failing_seeds.iter().cloned());
        self.failing_seeds.sort_by_key(|seed| seed.seed);
    }

    /// Whether this scenario passed: no violation, no failed expectation.
    pub fn passed(&self) -> bool {
        self.violations == 0 && self.expectation_failures == 0 && self.failing_seeds.is_empty()
    }
}

impl ShardReport {
    /// The report of a sweep of `seeds` (shard `shard`, if any) that produced `summaries`.
    pub fn new(
        seeds: &Range<u64>,
        shard: Option<(u64, u64)>,
        unfenced: bool,
        summaries: &[SweepSummary],
    ) -> ShardReport {
        let (index, count) = shard.unwrap_or((0, 1));
        ShardReport {
            format: FORMAT.to_string(),
            version: VERSION,
            seeds: [seeds.start, seeds.end],
            shard: [index, count],
            unfenced,
            scenarios: summaries.iter().map(ScenarioReport::from_summary).collect(),
        }
    }

    /// Parses a report, refusing other formats and versions.
    pub fn from_json(text: &str) -> Result<ShardReport, String> {
        let report: ShardReport =
            serde_json::from_str(text).map_err(|error| format!("not a shard report: {error}"))?;
        if report.format != FORMAT {
            return Err(format!("format {:?}, expected {FORMAT:?}", report.format));
        }
        if report.version != VERSION {
            return Err(format!(
                "version {}, this leaseproof reads version {VERSION}",
                report.version
            ));
        }
        Ok(report)
    }

    /// Pretty JSON, one field per line (diffable).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialise") + "\n"
    }

    /// Whether every scenario of the report passed.
    pub fn passed(&self) -> bool {
        self.scenarios.iter().all(ScenarioReport::passed)
    }
}

/// Combines the shards of one sweep. `Err` when they are not one sweep: no
/// report, different seeds, options or shard counts, or a shard missing or
/// given twice (each named by index).
pub fn merge(reports: &[ShardReport]) -> Result<ShardReport, String> {
    let first = reports.first().ok_or("no shard report to merge")?;
    let count = first.shard[1];
    for report in reports {
        if report.seeds != first.seeds {
            return Err(format!(
                "shard {}/{} swept seeds {}..{}, shard {}/{} swept {}..{}: not one sweep",
                report.shard[0],
                report.shard[1],
                report.seeds[0],
                report.seeds[1],
                first.shard[0],
                first.shard[1],
                first.seeds[0],
                first.seeds[1]
            ));
        }
        if report.unfenced != first.unfenced {
            return Err("shards differ in --unfenced: not one sweep".to_string());
        }
        if report.shard[1] != count {
            return Err(format!(
                "shard counts differ ({} and {count}): not one sweep",
                report.shard[1]
            ));
        }
    }
    let names = |report: &ShardReport| -> Vec<String> {
        report
            .scenarios
            .iter()
            .map(|scenario| scenario.scenario.clone())
            .collect()
    };
    for report in reports {
        if names(report) != names(first) {
            return Err(format!(
                "shard {}/{count} ran scenarios {:?}, shard {}/{count} ran {:?}: not one sweep",
                report.shard[0],
                names(report),
                first.shard[0],
                names(first)
            ));
        }
    }
    for report in reports {
        for scenario in &report.scenarios {
            if let Some(seed) = scenario.resume_from {
                return Err(format!(
                    "shard {}/{count} stopped early in {} at seed {seed}: rerun it with --seeds {seed}..{}",
                    report.shard[0], scenario.scenario, report.seeds[1]
                ));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for report in reports {
        if !seen.insert(report.shard[0]) {
            return Err(format!("shard {}/{count} given twice", report.shard[0]));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|index| !seen.contains(index))
        .map(|index| format!("{index}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing shard(s): {}", missing.join(", ")));
    }
    let mut merged: BTreeMap<String, ScenarioReport> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for report in reports {
        for scenario in &report.scenarios {
            let entry = merged.entry(scenario.scenario.clone()).or_insert_with(|| {
                order.push(scenario.scenario.clone());
                ScenarioReport {
                    scenario: scenario.scenario.clone(),
                    ..ScenarioReport::default()
                }
            });
            entry.absorb(scenario);
        }
    }
    Ok(ShardReport {
        format: FORMAT.to_string(),
        version: VERSION,
        seeds: first.seeds,
        shard: [0, 1],
        unfenced: first.unfenced,
        scenarios: order
            .into_iter()
            .map(|name| merged.remove(&name).expect("each scenario once"))
            .collect(),
    })
}
