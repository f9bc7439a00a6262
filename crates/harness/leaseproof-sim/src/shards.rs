//! Sweeps past one machine: a shard's summary as JSON, and the merge of the
//! shards into one verdict.
//!
//! Goal: let an existing engine (a Kubernetes Indexed Job, a GitHub Actions
//! matrix) run the shards of a sweep, then judge them together: the merged
//! counts equal an unsharded run's, a violation in any shard fails the merge,
//! and so does a missing or duplicated shard — a sweep that silently lost a
//! shard must not pass. Method: `sim … --shard i/n --json FILE` writes a
//! [`ShardReport`] (format `leaseproof-sweep`, version 2); `sim merge FILE…`
//! reads them, checks they describe one sweep (same seeds, same option,
//! same shard count, every index once) and sums them per scenario.
//! Invariant: the merge reads only the files; it runs nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sweep::{projected_seconds, SeedFailure, SweepCounts, SweepSummary};

/// The `format` field of every shard report.
pub const FORMAT: &str = "leaseproof-sweep";
/// The version this code writes and reads (2: `passed`, the run time per
/// seed and the speed figures).
pub const VERSION: u32 = 2;

pub use crate::sweep::{PROJECTED_SEEDS, PROJECTED_SHARDS};

/// One shard's summary, as `sim --json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardReport {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// Every seed of every scenario passed (no violation, no failed
    /// expectation): the verdict the exit status gives.
    pub passed: bool,
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
///
/// Unknown fields are refused as everywhere else (by [`ShardReport::from_json`]:
/// serde cannot deny them beside a flattened struct, so they are collected
/// and refused by hand).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// The scenario's name.
    pub scenario: String,
    /// What the runs exercised and found, summed (the sweep summary's own).
    #[serde(flatten)]
    pub counts: SweepCounts,
    /// Simulated time over all runs, µs.
    pub simulated_us: u64,
    /// Wall time of the shard's sweep of this scenario, µs (summed when merged).
    pub wall_us: u64,
    /// The runs' own wall time summed over seeds, µs: the core time they
    /// cost (summed when merged).
    pub run_wall_us: u64,
    /// `seeds_run` per second of `run_wall_us`: seeds per second per core.
    pub seeds_per_second_per_core: Option<f64>,
    /// Wall seconds of [`PROJECTED_SEEDS`] seeds of this scenario on one core.
    pub projected_seconds_one_core: Option<f64>,
    /// The same on [`PROJECTED_SHARDS`] shards of one core each.
    pub projected_seconds_sharded: Option<f64>,
    /// The failing seeds, ascending.
    pub failing_seeds: Vec<SeedFailure>,
    /// Set when the sweep was stopped early (Ctrl-C): the first seed that
    /// did not run. A merge refuses a shard that stopped early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<u64>,
    /// Fields this version does not know (refused on reading).
    #[serde(flatten, skip_serializing)]
    unknown: BTreeMap<String, serde_json::Value>,
}

impl ScenarioReport {
    /// The report of one sweep summary.
    pub fn from_summary(summary: &SweepSummary) -> ScenarioReport {
        let mut report = ScenarioReport {
            scenario: summary.scenario.clone(),
            counts: summary.counts.clone(),
            simulated_us: u64::try_from(summary.simulated.as_micros()).unwrap_or(u64::MAX),
            wall_us: u64::try_from(summary.wall.as_micros()).unwrap_or(u64::MAX),
            run_wall_us: u64::try_from(summary.run_wall.as_micros()).unwrap_or(u64::MAX),
            failing_seeds: summary.failures.clone(),
            resume_from: summary.resume_from,
            ..ScenarioReport::default()
        };
        report.refresh_speed();
        report
    }

    /// The speed figures, from `seeds_run` and `run_wall_us`.
    fn refresh_speed(&mut self) {
        let speed = crate::sweep::speed(
            self.counts.seeds_run,
            Duration::from_micros(self.run_wall_us),
        );
        self.seeds_per_second_per_core = speed;
        self.projected_seconds_one_core =
            speed.map(|speed| projected_seconds(PROJECTED_SEEDS, 1, speed));
        self.projected_seconds_sharded =
            speed.map(|speed| projected_seconds(PROJECTED_SEEDS, PROJECTED_SHARDS, speed));
    }

    /// Back to a summary (for the table); threads are unknown after a merge.
    pub fn to_summary(&self, unfenced: bool) -> SweepSummary {
        SweepSummary {
            scenario: self.scenario.clone(),
            unfenced,
            counts: self.counts.clone(),
            failures: self.failing_seeds.clone(),
            simulated: Duration::from_micros(self.simulated_us),
            wall: Duration::from_micros(self.wall_us),
            run_wall: Duration::from_micros(self.run_wall_us),
            jobs: 1,
            resume_from: self.resume_from,
        }
    }

    /// The counts that must not depend on how the seeds were split: every
    /// field but the wall times and the speed measured from them.
    pub fn without_wall_time(&self) -> ScenarioReport {
        ScenarioReport {
            wall_us: 0,
            run_wall_us: 0,
            seeds_per_second_per_core: None,
            projected_seconds_one_core: None,
            projected_seconds_sharded: None,
            ..self.clone()
        }
    }

    fn absorb(&mut self, other: &ScenarioReport) {
        self.counts.absorb(&other.counts);
        self.simulated_us += other.simulated_us;
        self.wall_us += other.wall_us;
        self.run_wall_us += other.run_wall_us;
        self.refresh_speed();
        self.failing_seeds
            .extend(other.failing_seeds.iter().cloned());
        self.failing_seeds.sort_by_key(|seed| seed.seed);
    }

    /// Whether this scenario passed: no violation, no failed expectation.
    pub fn passed(&self) -> bool {
        self.counts.violations == 0
            && self.counts.expectation_failures == 0
            && self.failing_seeds.is_empty()
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
        let scenarios: Vec<ScenarioReport> =
            summaries.iter().map(ScenarioReport::from_summary).collect();
        ShardReport {
            format: FORMAT.to_string(),
            version: VERSION,
            passed: scenarios.iter().all(ScenarioReport::passed),
            seeds: [seeds.start, seeds.end],
            shard: [index, count],
            unfenced,
            scenarios,
        }
    }

    /// Parses a report, refusing other formats and versions.
    pub fn from_json(text: &str) -> Result<ShardReport, String> {
        leaseproof_history::Envelope::expect(text, FORMAT, VERSION)?;
        let report: ShardReport =
            serde_json::from_str(text).map_err(|error| format!("not a shard report: {error}"))?;
        for scenario in &report.scenarios {
            if let Some(field) = scenario.unknown.keys().next() {
                return Err(format!(
                    "not a shard report: unknown field `{field}` in scenario {}",
                    scenario.scenario
                ));
            }
        }
        if report.passed != report.passed() {
            return Err(format!(
                "`passed` is {} but the scenarios say {}: an edited report",
                report.passed,
                report.passed()
            ));
        }
        Ok(report)
    }

    /// Pretty JSON, one field per line (diffable).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialise") + "\n"
    }

    /// Whether every scenario of the report passed (what `passed` says, recomputed).
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
    let scenarios: Vec<ScenarioReport> = order
        .into_iter()
        .map(|name| merged.remove(&name).expect("each scenario once"))
        .collect();
    Ok(ShardReport {
        format: FORMAT.to_string(),
        version: VERSION,
        passed: scenarios.iter().all(ScenarioReport::passed),
        seeds: first.seeds,
        shard: [0, 1],
        unfenced: first.unfenced,
        scenarios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_wall_time_drops_the_wall_times_and_the_speed_and_keeps_the_rest() {
        let mut report = ScenarioReport {
            scenario: "chaos".to_string(),
            simulated_us: 9,
            wall_us: 7,
            run_wall_us: 6,
            seeds_per_second_per_core: Some(40.0),
            projected_seconds_one_core: Some(1.0),
            projected_seconds_sharded: Some(2.0),
            resume_from: Some(11),
            ..ScenarioReport::default()
        };
        report.counts.seeds_run = 3;
        let expected = ScenarioReport {
            scenario: "chaos".to_string(),
            simulated_us: 9,
            resume_from: Some(11),
            counts: report.counts.clone(),
            ..ScenarioReport::default()
        };
        assert_eq!(report.without_wall_time(), expected);
    }
}
