//! Sweeps over many seeds, and the regression seeds kept as files.
//!
//! Goal: run a scenario under a range of seeds — split across machines with a
//! shard and across cores with OS threads — and sum up what the runs
//! exercised and which seeds failed. Method: each seed is an independent
//! single-threaded simulation; threads take seeds from a shared counter and
//! results are folded in seed order, so a summary does not depend on thread
//! timing (except its wall time).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use leaseproof_history::Invariant;

use crate::run::{run, RunOptions, RunOutcome};
use crate::scenario::{scenarios_dir, Scenario};
use crate::wall::Stopwatch;

/// Which seeds a sweep runs and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepConfig {
    /// Seeds `start..end`.
    pub seeds: Range<u64>,
    /// Run only the seeds `s` with `s % count == index`: `(index, count)`.
    pub shard: Option<(u64, u64)>,
    /// OS threads running seeds in parallel.
    pub jobs: usize,
    /// Every worker unfenced.
    pub unfenced: bool,
}

impl SweepConfig {
    /// The seeds this shard runs, ascending.
    pub fn seeds(&self) -> Vec<u64> {
        self.seeds
            .clone()
            .filter(|seed| {
                self.shard
                    .is_none_or(|(index, count)| count == 0 || seed % count == index)
            })
            .collect()
    }
}

/// A seed whose run failed, with what replays it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFailure {
    /// The seed.
    pub seed: u64,
    /// Violations plus failed expectations.
    pub problems: u64,
    /// The first of them.
    pub first_problem: String,
    /// The invariants proved broken (by the checker or in true time),
    /// sorted, once each; by code (`I1`, `B`, …) in a shard report.
    #[serde(rename = "codes", with = "leaseproof_history::invariant_codes")]
    pub invariants: Vec<Invariant>,
}

/// What the runs of a sweep exercised and found, summed over them: one
/// type for a sweep's summary and a shard's report, so a count added to one
/// is in the other.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepCounts {
    /// Seeds run.
    pub seeds_run: u64,
    /// Violations over all runs.
    pub violations: u64,
    /// Failed expectations over all runs.
    pub expectation_failures: u64,
    /// Runs that showed an invariant the design is known to break (a lock
    /// scenario's `breaks`); their violations are not counted above
    /// (absent in reports of scenarios without such a claim).
    #[serde(default)]
    pub known_findings: u64,
    /// Belief overlaps over all runs.
    pub belief_overlaps: u64,
    /// Takeovers over all runs.
    pub takeovers: u64,
    /// Ok commits over all runs.
    pub commits: u64,
    /// Commits the fence refused, over all runs.
    pub refused_stale_commits: u64,
    /// Operations with unknown outcomes, over all runs.
    pub unknown_ops: u64,
    /// Ok commits under a grant that followed a crashed holder's grant, over
    /// all runs (see [`RunOutcome::commits_after_crashed_holder`]).
    pub commits_after_crashed_holder: u64,
    /// Server-time delays from a dead holder's expiry to the next grant, over
    /// all runs, ascending, in µs (see `Stats::dead_holder_takeover_delays_us`).
    pub dead_holder_takeover_delays_us: Vec<i64>,
}

impl SweepCounts {
    /// Adds `other`'s counts to these (the delays stay ascending).
    pub fn absorb(&mut self, other: &SweepCounts) {
        self.seeds_run += other.seeds_run;
        self.violations += other.violations;
        self.expectation_failures += other.expectation_failures;
        self.known_findings += other.known_findings;
        self.belief_overlaps += other.belief_overlaps;
        self.takeovers += other.takeovers;
        self.commits += other.commits;
        self.refused_stale_commits += other.refused_stale_commits;
        self.unknown_ops += other.unknown_ops;
        self.commits_after_crashed_holder += other.commits_after_crashed_holder;
        self.dead_holder_takeover_delays_us
            .extend(&other.dead_holder_takeover_delays_us);
        // An ascending run and a short tail: the stable sort finds the run and
        // merges the tail into it in linear time, so a sweep stays linear.
        self.dead_holder_takeover_delays_us.sort();
    }

    /// The counts of one run.
    fn of_run(outcome: &RunOutcome, commits_after_crashed_holder: u64) -> SweepCounts {
        let stats = &outcome.report.stats;
        let in_true_time = outcome
            .findings
            .iter()
            .filter(|finding| finding.invariant().is_some())
            .count();
        SweepCounts {
            seeds_run: 1,
            violations: (outcome.unexpected_violations().count() + in_true_time) as u64,
            expectation_failures: (outcome.findings.len() - in_true_time) as u64,
            known_findings: u64::from(outcome.known_violations().next().is_some()),
            belief_overlaps: stats.belief_overlaps,
            takeovers: stats.takeovers,
            commits: stats.commits,
            refused_stale_commits: stats.refused_stale_commits,
            unknown_ops: stats.unknown_ops,
            commits_after_crashed_holder,
            dead_holder_takeover_delays_us: stats.dead_holder_takeover_delays_us.clone(),
        }
    }
}

/// What a sweep of one scenario found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepSummary {
    /// The scenario.
    pub scenario: String,
    /// Whether the workers were unfenced.
    pub unfenced: bool,
    /// What the runs exercised and found, summed.
    pub counts: SweepCounts,
    /// Failing seeds, ascending.
    pub failures: Vec<SeedFailure>,
    /// Simulated time, summed over runs.
    pub simulated: Duration,
    /// Wall time of the sweep.
    pub wall: Duration,
    /// Wall time of the runs themselves, summed over seeds: the core time a
    /// seed costs (each run is single-threaded), whatever `jobs` was.
    pub run_wall: Duration,
    /// Threads used.
    pub jobs: usize,
    /// `Some(seed)` when the sweep was stopped early: the first seed of the
    /// shard that did not run (`--seeds seed..end` resumes; seeds after it
    /// may have run too, and rerun identically).
    pub resume_from: Option<u64>,
}

impl SweepSummary {
    /// The largest dead-holder takeover delay of the sweep, µs.
    pub fn dead_holder_takeover_delay_us_max(&self) -> Option<i64> {
        self.counts.dead_holder_takeover_delays_us.last().copied()
    }

    /// The `percent`th percentile (nearest rank) of the dead-holder takeover
    /// delays, µs.
    pub fn dead_holder_takeover_delay_us_percentile(&self, percent: u32) -> Option<i64> {
        assert!((1..=100).contains(&percent));
        let delays = &self.counts.dead_holder_takeover_delays_us;
        if delays.is_empty() {
            return None;
        }
        let rank = (delays.len() * percent as usize).div_ceil(100);
        Some(delays[rank.max(1) - 1])
    }

    /// Seeds per second per core: seeds over the summed wall time of their
    /// runs (`None` before any seed ran).
    pub fn seeds_per_second_per_core(&self) -> Option<f64> {
        speed(self.counts.seeds_run, self.run_wall)
    }

    /// Simulated seconds per wall second per thread.
    pub fn sim_seconds_per_wall_second_per_job(&self) -> f64 {
        let wall = self.wall.as_secs_f64().max(1e-9);
        self.simulated.as_secs_f64() / wall / self.jobs.max(1) as f64
    }

    /// The summary table's header line.
    pub fn table_header() -> String {
        format!(
            "{:<18} {:>6} {:>10} {:>9} {:>8} {:>9} {:>8} {:>8} {:>15} {:>12} {:>12}",
            "scenario",
            "seeds",
            "violations",
            "overlaps",
            "takeover",
            "commits",
            "refused",
            "unknown",
            "dead-p99/max-ms",
            "sim-s/wall-s",
            "seeds/s/core"
        )
    }

    /// This summary as a row of the table.
    pub fn table_row(&self) -> String {
        format!(
            "{:<18} {:>6} {:>10} {:>9} {:>8} {:>9} {:>8} {:>8} {:>15} {:>12.0} {:>12}",
            if self.unfenced {
                format!("{}*", self.scenario)
            } else {
                self.scenario.clone()
            },
            self.counts.seeds_run,
            self.counts.violations + self.counts.expectation_failures,
            self.counts.belief_overlaps,
            self.counts.takeovers,
            self.counts.commits,
            self.counts.refused_stale_commits,
            self.counts.unknown_ops,
            match (
                self.dead_holder_takeover_delay_us_percentile(99),
                self.dead_holder_takeover_delay_us_max()
            ) {
                (Some(p99_us), Some(max_us)) => format!("{}/{}", p99_us / 1_000, max_us / 1_000),
                _ => "-".to_string(),
            },
            self.simulated.as_secs_f64() / self.wall.as_secs_f64().max(1e-9),
            self.seeds_per_second_per_core()
                .map_or("-".to_string(), |speed| format!("{speed:.1}"))
        )
    }

    fn add(&mut self, seed: u64, outcome: &RunOutcome, commits_after_crashed_holder: u64) {
        self.counts
            .absorb(&SweepCounts::of_run(outcome, commits_after_crashed_holder));
        self.simulated += outcome.simulated;
        if !outcome.is_ok() {
            self.failures.push(SeedFailure {
                seed,
                problems: (outcome.unexpected_violations().count() + outcome.findings.len()) as u64,
                first_problem: outcome.first_problem().unwrap_or_default(),
                invariants: outcome.invariants_broken(),
            });
        }
    }
}

/// The sweep size the speed projections are for.
pub const PROJECTED_SEEDS: u64 = 1_000_000;
/// The shard count of the second projection.
pub const PROJECTED_SHARDS: u64 = 100;

/// The speed footer: seeds per second per core over every scenario swept,
/// and what a million seeds cost on one core and on 100 shards.
pub fn speed_line(summaries: &[SweepSummary]) -> Option<String> {
    let seeds: u64 = summaries
        .iter()
        .map(|summary| summary.counts.seeds_run)
        .sum();
    let run_wall = summaries.iter().map(|summary| summary.run_wall).sum();
    let per_core = speed(seeds, run_wall)?;
    let one_core = projected_seconds(PROJECTED_SEEDS, 1, per_core);
    let sharded = projected_seconds(PROJECTED_SEEDS, PROJECTED_SHARDS, per_core);
    Some(format!(
        "speed: {per_core:.1} seeds/s per core over these scenarios; {PROJECTED_SEEDS} seeds would take \
         {} on one core, {} on {PROJECTED_SHARDS} shards of one core",
        human_seconds(one_core),
        human_seconds(sharded)
    ))
}

/// `seconds` as seconds, minutes or hours, one decimal.
fn human_seconds(seconds: f64) -> String {
    if seconds >= 3_600.0 {
        format!("{:.1} h", seconds / 3_600.0)
    } else if seconds >= 60.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

/// Seeds per second per core for `seeds` runs that took `run_wall` together.
pub fn speed(seeds: u64, run_wall: Duration) -> Option<f64> {
    let seconds = run_wall.as_secs_f64();
    (seeds > 0 && seconds > 0.0).then(|| seeds as f64 / seconds)
}

/// Wall seconds `seeds` seeds take on `cores` cores at `seeds_per_second_per_core`.
pub fn projected_seconds(seeds: u64, cores: u64, seeds_per_second_per_core: f64) -> f64 {
    assert!(cores > 0);
    assert!(seeds_per_second_per_core > 0.0);
    seeds as f64 / seeds_per_second_per_core / cores as f64
}

/// Set when the user asked the sweep to stop (Ctrl-C): no new seed starts,
/// runs in progress finish, and the summary says where to resume.
pub static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Runs `scenario` for every seed of `config`; `progress` is called after each
/// run with the number of runs done so far. Stops early when
/// [`STOP_REQUESTED`] is set (`SweepSummary::resume_from` then says where).
pub fn sweep(
    scenario: &Scenario,
    config: &SweepConfig,
    progress: &(dyn Fn(u64) + Sync),
) -> SweepSummary {
    let stopwatch = Stopwatch::start();
    let seeds = config.seeds();
    let jobs = config.jobs.clamp(1, seeds.len().max(1));
    let options = RunOptions {
        unfenced: config.unfenced,
        ..RunOptions::default()
    };
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let outcomes: Mutex<BTreeMap<u64, (RunOutcome, u64, Duration)>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                if STOP_REQUESTED.load(Ordering::Relaxed) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(index) else {
                    break;
                };
                let run_stopwatch = Stopwatch::start();
                let mut outcome = run(scenario, seed, options);
                let run_wall = run_stopwatch.elapsed();
                let after_crash = outcome.commits_after_crashed_holder();
                // Keep memory flat: the summary needs only the verdict.
                outcome.history = Default::default();
                outcomes
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert(seed, (outcome, after_crash, run_wall));
                progress(done.fetch_add(1, Ordering::Relaxed) as u64 + 1);
            });
        }
    });
    let mut summary = SweepSummary {
        scenario: scenario.name.clone(),
        unfenced: config.unfenced,
        jobs,
        ..SweepSummary::default()
    };
    let outcomes = outcomes
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Interrupted: the first seed of this shard that did not run.
    summary.resume_from = seeds
        .iter()
        .find(|seed| !outcomes.contains_key(seed))
        .copied();
    for (seed, (outcome, after_crash, run_wall)) in outcomes {
        summary.add(seed, &outcome, after_crash);
        summary.run_wall += run_wall;
    }
    summary.wall = stopwatch.elapsed();
    summary
}

/// What a regression seed must show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegressionExpect {
    /// No violation, every expectation met (a bug that was fixed stays fixed).
    Clean,
    /// At least one violation or failed expectation (the harness keeps its teeth).
    Violation,
}

/// A seed that once failed, kept as `scenarios/regressions/*.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regression {
    /// The scenario's name.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// Run with every worker unfenced.
    #[serde(default)]
    pub unfenced: bool,
    /// Override the scenario's `schema_retry`.
    #[serde(default)]
    pub schema_retry: Option<bool>,
    /// Run the simulated database with the broken pre-fix extension rule
    /// ([`RunOptions::shortening_extensions`]).
    #[serde(default)]
    pub shortening_extensions: bool,
    /// Run with a fence that keeps no row lock ([`RunOptions::fence_without_lock`]).
    #[serde(default)]
    pub fence_without_lock: bool,
    /// Run with a server deciding on its clients' clocks
    /// ([`RunOptions::clock_follows_client`]).
    #[serde(default)]
    pub clock_follows_client: bool,
    /// Run a lock scenario with its scripts' compares planted away
    /// ([`RunOptions::compare_skipped`]).
    #[serde(default)]
    pub compare_skipped: bool,
    /// Run a lock scenario with a store that forgets at restarts
    /// ([`RunOptions::forgetful_restarts`]).
    #[serde(default)]
    pub forgetful_restarts: bool,
    /// Run an advisory lock scenario with shared locks planted
    /// ([`RunOptions::shared_advisory_locks`]).
    #[serde(default)]
    pub shared_advisory_locks: bool,
    /// What the run must show.
    pub expect: RegressionExpect,
    /// Invariants (by code: `I3`, `B`, …) the run must prove broken: a
    /// `violation` regression must keep showing these, not just any failure.
    #[serde(default, with = "leaseproof_history::invariant_codes")]
    pub codes: Vec<Invariant>,
    /// What it caught, and when.
    pub note: String,
}

/// Writes `failure` as `scenarios/regressions/<scenario>-<seed>[-unfenced].toml`,
/// expecting the violation it found (with its invariant codes).
pub fn save_regression(
    scenario: &Scenario,
    summary: &SweepSummary,
    failure: &crate::sweep::SeedFailure,
) -> Result<PathBuf, String> {
    if Scenario::load(&scenario.name).ok().as_ref() != Some(scenario) {
        return Err(format!(
            "scenario {} is not one `cargo test` can load by name (a file elsewhere, or edited options)",
            scenario.name
        ));
    }
    let regression = crate::sweep::Regression {
        scenario: scenario.name.clone(),
        seed: failure.seed,
        unfenced: summary.unfenced,
        schema_retry: None,
        shortening_extensions: false,
        fence_without_lock: false,
        clock_follows_client: false,
        compare_skipped: false,
        forgetful_restarts: false,
        shared_advisory_locks: false,
        expect: crate::sweep::RegressionExpect::Violation,
        codes: failure.invariants.clone(),
        note: format!(
            "saved by `leaseproof sim --save-regression`: {}",
            failure.first_problem
        ),
    };
    let text = toml::to_string(&regression).map_err(|error| error.to_string())?;
    let name = format!(
        "{}-{}{}.toml",
        scenario.name,
        failure.seed,
        if summary.unfenced { "-unfenced" } else { "" }
    );
    let path = crate::scenario::scenarios_dir()
        .join("regressions")
        .join(name);
    std::fs::write(&path, text).map_err(|error| format!("{}: {error}", path.display()))?;
    Ok(path)
}

/// Every regression file, sorted by path.
pub fn regressions() -> Result<Vec<(PathBuf, Regression)>, String> {
    regressions_in(&scenarios_dir().join("regressions"))
}

fn regressions_in(dir: &Path) -> Result<Vec<(PathBuf, Regression)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .map_err(|error| format!("{}: {error}", path.display()))?;
            let regression: Regression =
                toml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
            Ok((path, regression))
        })
        .collect()
}

/// Runs one regression seed; `Err` says how it broke its expectation.
pub fn run_regression(regression: &Regression) -> Result<RunOutcome, String> {
    let mut scenario = Scenario::load(&regression.scenario).map_err(|error| error.to_string())?;
    if let Some(schema_retry) = regression.schema_retry {
        scenario.schema_retry = schema_retry;
    }
    let options = RunOptions {
        unfenced: regression.unfenced,
        trace: false,
        no_schema_retry: false,
        shortening_extensions: regression.shortening_extensions,
        fence_without_lock: regression.fence_without_lock,
        clock_follows_client: regression.clock_follows_client,
        compare_skipped: regression.compare_skipped,
        forgetful_restarts: regression.forgetful_restarts,
        shared_advisory_locks: regression.shared_advisory_locks,
    };
    let outcome = run(&scenario, regression.seed, options);
    match (regression.expect, outcome.is_ok()) {
        (RegressionExpect::Clean, false) => Err(format!(
            "{} seed {} failed again: {} (replay: {})",
            regression.scenario,
            regression.seed,
            outcome.first_problem().unwrap_or_default(),
            outcome.replay_command()
        )),
        (RegressionExpect::Violation, true) => Err(format!(
            "{} seed {} no longer shows a violation: the harness lost its teeth ({})",
            regression.scenario, regression.seed, regression.note
        )),
        _ => {
            let found: BTreeSet<Invariant> = outcome.invariants_broken().into_iter().collect();
            let missing: Vec<&str> = regression
                .codes
                .iter()
                .filter(|invariant| !found.contains(invariant))
                .map(|invariant| invariant.code())
                .collect();
            let found: Vec<&str> = found.iter().map(|invariant| invariant.code()).collect();
            if missing.is_empty() {
                Ok(outcome)
            } else {
                Err(format!(
                    "{} seed {} no longer shows {missing:?} (it shows {found:?}; {}; replay: {})",
                    regression.scenario,
                    regression.seed,
                    regression.note,
                    outcome.replay_command()
                ))
            }
        }
    }
}

/// Where the moving seed window of `commit` starts: a hash of the commit id
/// (FNV-1a, 64 bit) folded into `[10^6, 10^6 + 2^40)`, clear of the fixed
/// windows `0..N` that every run sweeps. Stable across machines and Rust
/// versions (no `std` hasher), so a window a CI run printed reruns anywhere.
pub fn seed_window_base(commit: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = commit.bytes().fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    });
    1_000_000 + (hash % (1 << 40))
}
