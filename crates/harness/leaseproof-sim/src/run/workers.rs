//! The worker hosts of a run: each worker's clocks, its pauses, and its
//! incarnations across crashes and restarts.
//!
//! Goal: run the shared worker loop (`leaseproof_worker::run_worker`) on
//! every worker host, exactly as it runs against PostgreSQL, with the clock
//! and the pauses the seed drew for it. Method: one turmoil host per worker;
//! its factory runs again on every restart and starts a new incarnation
//! (a new owner id). Invariant: every random draw comes from the worker's
//! seed; the cycle pauses have a stream of their own.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Duration;

use leaseproof_protocol::{CycleFault, CyclePoint, Owner, Scope};
use leaseproof_worker::{run_worker, Clocks, Hooks, Step, WorkerConfig, WorkerSummary};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Bounds, Setup, SCOPE};
use crate::port::SimPort;
use crate::trace::{sim_now_us, LocalClock, Trace};

/// A worker's clocks: true time is turmoil's simulated time, local time is
/// that time offset and drifting.
#[derive(Clone, Copy, Debug)]
pub struct SimClocks {
    /// The drawn local clock.
    pub clock: LocalClock,
}

impl Clocks for SimClocks {
    fn true_now_us(&self) -> i64 {
        sim_now_us()
    }
    fn local_now_us(&self) -> i64 {
        self.clock.at(sim_now_us())
    }
}

/// Pauses before a commit (after the belief check): the GC pause; and, where
/// the scenario asks, pauses inside the commit cycle (after the fence, after
/// the writes) from a stream of their own.
#[derive(Debug)]
pub struct PauseHooks {
    client: String,
    probability: f64,
    cycle_probability: f64,
    pause_ms: [u64; 2],
    rng: Mutex<ChaCha8Rng>,
    /// Its own stream: adding cycle pauses to a scenario leaves the draws of
    /// the pause before the commit (and so every recorded seed) unchanged.
    cycle_rng: Mutex<ChaCha8Rng>,
    trace: Trace,
}

/// Mixed into a worker's pause seed for the cycle-pause stream.
const CYCLE_PAUSE_STREAM: u64 = 0xC1C1_E5EE_D000_0001;

impl PauseHooks {
    /// Hooks drawing from their own RNG seeded with `rng_seed`.
    pub fn new(
        client: String,
        probability: f64,
        cycle_probability: f64,
        pause_ms: [u64; 2],
        rng_seed: u64,
        trace: Trace,
    ) -> PauseHooks {
        PauseHooks {
            client,
            probability,
            cycle_probability,
            pause_ms,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(rng_seed)),
            cycle_rng: Mutex::new(ChaCha8Rng::seed_from_u64(rng_seed ^ CYCLE_PAUSE_STREAM)),
            trace,
        }
    }

    fn draw(&self, rng: &Mutex<ChaCha8Rng>, probability: f64) -> Option<u64> {
        if probability <= 0.0 {
            return None;
        }
        let mut rng = rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        rng.gen_bool(probability)
            .then(|| rng.gen_range(self.pause_ms[0]..=self.pause_ms[1]))
    }
}

impl Hooks for PauseHooks {
    fn before(&self, step: Step) -> impl std::future::Future<Output = ()> + Send {
        let pause = if step == Step::Commit {
            self.draw(&self.rng, self.probability)
        } else {
            None
        };
        if let Some(pause_ms) = pause {
            self.trace.fault(Some(&self.client), || {
                format!(
                    "{}: PAUSE {pause_ms} ms between the belief check and the commit",
                    self.client
                )
            });
        }
        async move {
            if let Some(pause_ms) = pause {
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            }
        }
    }

    fn inside_cycle(&self, point: CyclePoint) -> CycleFault {
        let pause = self.draw(&self.cycle_rng, self.cycle_probability);
        let (client, trace) = (self.client.clone(), self.trace.clone());
        Box::pin(async move {
            let Some(pause_ms) = pause else {
                return;
            };
            let place = match point {
                CyclePoint::Fenced => "after the fence, before the writes",
                CyclePoint::Written => "after the writes, before COMMIT",
            };
            trace.fault(Some(&client), || {
                format!("{client}: PAUSE {pause_ms} ms inside the cycle, {place}")
            });
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        })
    }
}

#[derive(Debug, Default)]
pub(super) struct WorkerSlot {
    pub(super) incarnation: u64,
    /// Crash depth: > 0 while crashed.
    pub(super) crashed: u32,
    /// Crashes that found the worker finished: their restarts do nothing.
    pub(super) restarts_skipped: u32,
    /// Partition depth: > 0 while cut off from the database.
    pub(super) partitioned: u32,
    pub(super) finished: bool,
    pub(super) first_summary: Option<WorkerSummary>,
}

/// A new incarnation of worker `index` starts (its host's software runs
/// again): its number, counted from 1.
pub(super) fn next_incarnation(slots: &RefCell<Vec<WorkerSlot>>, index: usize) -> u64 {
    let mut slots = slots.borrow_mut();
    slots[index].incarnation += 1;
    slots[index].finished = false;
    slots[index].incarnation
}

/// Incarnations started over the run, every worker's.
pub(super) fn incarnations(slots: &RefCell<Vec<WorkerSlot>>) -> u32 {
    slots
        .borrow()
        .iter()
        .map(|slot| u32::try_from(slot.incarnation).unwrap_or(u32::MAX))
        .sum()
}

/// Adds one host per worker of `plan` to `sim`; returns their slots, which
/// the driver and the verdict read.
pub(super) fn spawn(sim: &mut turmoil::Sim<'_>, setup: Setup<'_>) -> Rc<RefCell<Vec<WorkerSlot>>> {
    let Setup {
        scenario,
        plan,
        options,
        recorder,
        trace,
        ..
    } = setup;

    let Bounds {
        ttl,
        duration,
        limit,
    } = setup.bounds;
    let slots: Rc<RefCell<Vec<WorkerSlot>>> = Rc::new(RefCell::new(
        plan.workers.iter().map(|_| WorkerSlot::default()).collect(),
    ));
    let scope = Scope::new(SCOPE).expect("a valid scope");
    let stop_at_true_us = duration.as_micros() as i64;
    let unavailable_retry = Duration::from_millis(scenario.retry_interval_ms);
    let unavailable_attempts_max =
        u32::try_from((limit.as_millis() / unavailable_retry.as_millis().max(1)) / 2)
            .unwrap_or(u32::MAX)
            .max(1);
    for (index, worker) in plan.workers.iter().enumerate() {
        let worker = worker.clone();
        let slots = Rc::clone(&slots);
        let recorder = recorder.clone();
        let trace = trace.clone();
        let scope = scope.clone();
        let scenario = scenario.clone();
        let host_name = worker.name.clone();
        sim.host(host_name.as_str(), move || {
            let incarnation = next_incarnation(&slots, index);
            let owner =
                Owner::new(format!("{}#inc{incarnation}", worker.name)).expect("a short owner id");
            let port = SimPort {
                client: owner.to_string(),
                request_timeout: Duration::from_millis(scenario.request_timeout_ms),
                schema_retry: scenario.schema_retry,
                unavailable_retry,
                unavailable_attempts_max,
                trace: trace.clone(),
            };
            let config = WorkerConfig {
                worker: worker.name.clone(),
                incarnation,
                owner: owner.clone(),
                scope: scope.clone(),
                ttl,
                cycles: u32::MAX,
                cycles_per_grant: scenario.cycles_per_grant,
                items_per_cycle: scenario.items_per_cycle,
                work: Duration::from_millis(worker.work_ms),
                retry_interval: Duration::from_millis(scenario.retry_interval_ms),
                deadline_margin: Duration::from_millis(scenario.deadline_margin_ms),
                unfenced: options.unfenced,
                stop_at_true_us: Some(stop_at_true_us),
                operations_max: 100_000,
            };
            let clocks = SimClocks {
                clock: LocalClock {
                    offset_us: worker.clock_offset_us,
                    drift_ppm: worker.clock_drift_ppm,
                },
            };
            let hooks = PauseHooks::new(
                owner.to_string(),
                scenario.faults.pause_probability,
                scenario.faults.cycle_pause_probability,
                scenario.faults.pause_ms,
                worker
                    .rng_seed
                    .wrapping_add(incarnation.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                trace.clone(),
            );
            let start_delay = if incarnation == 1 {
                Duration::from_millis(worker.start_delay_ms)
            } else {
                Duration::ZERO
            };
            let slots = Rc::clone(&slots);
            let recorder = recorder.clone();
            let trace = trace.clone();
            async move {
                if !start_delay.is_zero() {
                    tokio::time::sleep(start_delay).await;
                }
                trace.line(Some(owner.as_str()), || {
                    format!("{owner}: incarnation {incarnation} starts")
                });
                let summary = run_worker(&port, &config, &clocks, &hooks, &recorder).await;
                trace.line(Some(owner.as_str()), || {
                    format!("{owner}: finished {summary:?}")
                });
                let mut slots = slots.borrow_mut();
                let slot = &mut slots[index];
                slot.finished = true;
                if incarnation == 1 {
                    slot.first_summary = Some(summary);
                } else if summary.schema_error.is_some() && slot.first_summary.is_some() {
                    // A restarted incarnation that cannot start is reported too.
                    slot.first_summary = Some(summary);
                }
                Ok(())
            }
        });
    }
    slots
}
