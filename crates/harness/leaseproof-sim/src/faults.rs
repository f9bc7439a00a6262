//! The fault plan: every fault value of one run, drawn from its seed.
//!
//! Goal: one run is a pure function of (scenario, seed). Method: one ChaCha
//! RNG seeded by the run's seed draws, in a fixed order, each worker's clock
//! offset and drift, its start delay and work time, the server's clock offset,
//! the schedule of crashes and partitions, the lost-reply rate and the seeds
//! of the per-host RNGs (pauses, lost replies). turmoil gets the same seed for
//! message latencies. The plan is printed right after `SEED=` so a reader sees
//! which faults a failing seed drew.
//!
//! Invariant: nothing here reads the wall clock or OS entropy.

use std::fmt::Write as _;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenario::{Scenario, Span};

/// One worker's drawn settings.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerPlan {
    /// Host name and stable worker name (`w1`…).
    pub name: String,
    /// Local clock offset from true time.
    pub clock_offset_us: i64,
    /// Local clock drift in parts per million.
    pub clock_drift_ppm: i64,
    /// Delay before the first incarnation starts.
    pub start_delay_ms: u64,
    /// Work before each commit.
    pub work_ms: u64,
    /// Seed of the worker's own RNG (pauses), mixed with the incarnation.
    pub rng_seed: u64,
}

/// A scheduled fault, at a simulated instant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultEvent {
    /// Crash worker `index` (its host's software stops, connections close).
    CrashWorker(usize),
    /// Start worker `index` again as a new incarnation.
    RestartWorker(usize),
    /// Crash the database host: sessions and row locks vanish, rows survive.
    CrashDb,
    /// Start the database host again.
    RestartDb,
    /// Cut worker `index` (or every worker, `None`) off from the database.
    Partition(Option<usize>),
    /// Repair that partition.
    Repair(Option<usize>),
    /// Terminate every database session holding an advisory lock.
    TerminateLockSessions,
}

/// Every fault value of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// The run's seed.
    pub seed: u64,
    /// The workers, in order.
    pub workers: Vec<WorkerPlan>,
    /// The server's clock offset from simulated time.
    pub server_offset_us: i64,
    /// Fraction of replies the database drops after taking effect.
    pub lost_reply_probability: f64,
    /// How long schema creation takes in the server.
    pub schema_create_ms: u64,
    /// Seed of the database host's RNG (lost replies).
    pub db_rng_seed: u64,
    /// Scheduled faults: (simulated ms, event), ascending.
    pub schedule: Vec<(u64, FaultEvent)>,
}

fn draw_u64(rng: &mut ChaCha8Rng, span: Span<u64>) -> u64 {
    rng.gen_range(span[0]..=span[1])
}

fn draw_i64(rng: &mut ChaCha8Rng, span: Span<i64>) -> i64 {
    rng.gen_range(span[0]..=span[1])
}

fn draw_f64(rng: &mut ChaCha8Rng, span: Span<f64>) -> f64 {
    if span[0] == span[1] {
        return span[0];
    }
    rng.gen_range(span[0]..=span[1])
}

impl FaultPlan {
    /// Draws the plan of `scenario` under `seed`.
    pub fn draw(scenario: &Scenario, seed: u64) -> FaultPlan {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let faults = &scenario.faults;
        let workers: Vec<WorkerPlan> = (1..=scenario.workers)
            .map(|number| WorkerPlan {
                name: format!("w{number}"),
                clock_offset_us: draw_i64(&mut rng, faults.clock_offset_ms) * 1_000,
                clock_drift_ppm: draw_i64(&mut rng, faults.clock_drift_ppm),
                start_delay_ms: draw_u64(&mut rng, faults.start_spread_ms),
                work_ms: draw_u64(&mut rng, scenario.work_ms),
                rng_seed: rng.gen(),
            })
            .collect();
        let server_offset_us = draw_i64(&mut rng, faults.server_offset_ms) * 1_000;
        let lost_reply_probability = draw_f64(&mut rng, faults.lost_reply_probability);
        let schema_create_ms = draw_u64(&mut rng, faults.schema_create_ms);
        let db_rng_seed = rng.gen();

        // Faults land in the middle of the run: after the workers started,
        // and early enough that recovery is visible before the end.
        let duration_ms = scenario.duration_s * 1_000;
        let window = (duration_ms / 20).max(1)..=(duration_ms * 4 / 5).max(2);
        let mut schedule = Vec::new();
        let worker_count = workers.len();
        for _ in 0..rng.gen_range(faults.worker_crashes[0]..=faults.worker_crashes[1]) {
            let at_ms = rng.gen_range(window.clone());
            let index = rng.gen_range(0..worker_count);
            let downtime_ms = draw_u64(&mut rng, faults.worker_downtime_ms);
            schedule.push((at_ms, FaultEvent::CrashWorker(index)));
            schedule.push((at_ms + downtime_ms, FaultEvent::RestartWorker(index)));
        }
        for _ in 0..rng.gen_range(faults.db_crashes[0]..=faults.db_crashes[1]) {
            let at_ms = rng.gen_range(window.clone());
            let downtime_ms = draw_u64(&mut rng, faults.db_downtime_ms);
            schedule.push((at_ms, FaultEvent::CrashDb));
            schedule.push((at_ms + downtime_ms, FaultEvent::RestartDb));
        }
        for _ in 0..rng.gen_range(faults.partitions[0]..=faults.partitions[1]) {
            let at_ms = rng.gen_range(window.clone());
            // One partition in four cuts everybody off.
            let target = if rng.gen_ratio(1, 4) {
                None
            } else {
                Some(rng.gen_range(0..worker_count))
            };
            let length_ms = draw_u64(&mut rng, faults.partition_ms);
            schedule.push((at_ms, FaultEvent::Partition(target)));
            schedule.push((at_ms + length_ms, FaultEvent::Repair(target)));
        }
        // Drawn last, and only when asked for: other scenarios' seeds keep
        // their plans.
        if faults.lock_session_kills != [0, 0] {
            let kills = rng.gen_range(faults.lock_session_kills[0]..=faults.lock_session_kills[1]);
            for _ in 0..kills {
                let at_ms = rng.gen_range(window.clone());
                schedule.push((at_ms, FaultEvent::TerminateLockSessions));
            }
        }
        // Stable: events drawn at the same instant keep their drawing order.
        schedule.sort_by_key(|(at_ms, _)| *at_ms);
        FaultPlan {
            seed,
            workers,
            server_offset_us,
            lost_reply_probability,
            schema_create_ms,
            db_rng_seed,
            schedule,
        }
    }

    /// The `SEED=` line and the drawn settings, one line each, as a run prints them first.
    pub fn header(&self, scenario: &Scenario, unfenced: bool) -> Vec<String> {
        let mut lines = vec![format!(
            "SEED={} scenario={} workers={} ttl_ms={} duration_s={} tick_ms={} unfenced={} schema_retry={}",
            self.seed,
            scenario.name,
            scenario.workers,
            scenario.ttl_ms,
            scenario.duration_s,
            scenario.tick_ms,
            unfenced,
            scenario.schema_retry
        )];
        lines.push(format!(
            "faults: server_offset_ms={} lost_reply_probability={:.4} schema_create_ms={} pause_probability={} pause_ms={:?} latency_ms={:?}",
            self.server_offset_us / 1_000,
            self.lost_reply_probability,
            self.schema_create_ms,
            scenario.faults.pause_probability,
            scenario.faults.pause_ms,
            scenario.latency_ms,
        ));
        if scenario.faults.cycle_pause_probability > 0.0 {
            lines[1].push_str(&format!(
                " cycle_pause_probability={}",
                scenario.faults.cycle_pause_probability
            ));
        }
        for worker in &self.workers {
            lines.push(format!(
                "faults: {} clock_offset_ms={} clock_drift_ppm={} start_delay_ms={} work_ms={}",
                worker.name,
                worker.clock_offset_us / 1_000,
                worker.clock_drift_ppm,
                worker.start_delay_ms,
                worker.work_ms
            ));
        }
        let mut schedule = String::from("faults: schedule");
        if self.schedule.is_empty() {
            schedule.push_str(" none");
        }
        for (at_ms, event) in &self.schedule {
            let _ = write!(schedule, " {at_ms}ms:{}", self.describe(event));
        }
        lines.push(schedule);
        lines
    }

    /// A short name for `event`.
    pub fn describe(&self, event: &FaultEvent) -> String {
        let name = |index: &usize| self.workers[*index].name.clone();
        let target = |target: &Option<usize>| target.as_ref().map_or("all".to_string(), name);
        match event {
            FaultEvent::CrashWorker(index) => format!("crash-{}", name(index)),
            FaultEvent::RestartWorker(index) => format!("restart-{}", name(index)),
            FaultEvent::CrashDb => "crash-db".to_string(),
            FaultEvent::RestartDb => "restart-db".to_string(),
            FaultEvent::Partition(worker) => format!("partition-{}", target(worker)),
            FaultEvent::Repair(worker) => format!("repair-{}", target(worker)),
            FaultEvent::TerminateLockSessions => "terminate-lock-sessions".to_string(),
        }
    }
}
