//! One simulation run: a pure function of (scenario, seed, options).
//!
//! Goal: run the shared worker loop against the simulated database under the
//! faults the seed draws, and judge the history with the one checker.
//! Method: a turmoil simulation with one database host and one host per
//! worker, stepped by this driver, which applies the drawn schedule (crashes,
//! restarts, partitions) between steps. Workers read skewed clocks
//! ([`SimClocks`]) and pause through [`PauseHooks`]. After the run the
//! guarded table's rows join the history and `leaseproof_history::check`
//! decides; a worker that could not start, or did not finish, is a failed
//! expectation of the scenario.
//!
//! Invariant: no wall clock, no OS entropy, no unordered iteration — the same
//! inputs give the same trace, byte for byte.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use leaseproof_history::{
    check, check_with_takeover_bound, CheckConfig, CheckReport, EventKind, GrantStamps, History,
    Op, OpResult, Outcome, Recorder, TakeoverBound,
};
use leaseproof_protocol::semantics::ExtensionRule;
use leaseproof_protocol::{CycleFault, CyclePoint, Owner, Scope, Ttl};
use leaseproof_worker::{run_worker, Clocks, Hooks, Step, WorkerConfig, WorkerSummary};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::db::{self, DbConfig, Durable, DB_HOST};
use crate::faults::{FaultEvent, FaultPlan};
use crate::port::SimPort;
use crate::scenario::Scenario;
use crate::trace::{format_us, sim_now_us, LocalClock, Trace};

/// The scope every worker contends for.
pub const SCOPE: &str = "leaseproof:sim";

/// How a run is configured beyond its scenario and seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Every worker commits without the fence (the configuration with teeth).
    pub unfenced: bool,
    /// Record the full trace (replay, determinism tests, failure excerpts).
    pub trace: bool,
    /// Disable the port's one retry of `ensure_schema`, whatever the scenario
    /// says. A run's [`RunOutcome::options`] has it set whenever the run went
    /// without the retry, so its replay line reproduces it.
    pub no_schema_retry: bool,
    /// The simulated database extends live grants by the broken pre-fix rule
    /// ([`ExtensionRule::LatestStatementWins`]): a delayed same-owner statement
    /// shortens a live grant. The harness must catch it (chaos seeds 345, 1171).
    pub shortening_extensions: bool,
    /// The simulated database's fence checks the lease but keeps no row lock
    /// (a fence run in a transaction of its own). With pauses inside the
    /// cycle (`cycle-pause`) the harness must catch it: I3.
    pub fence_without_lock: bool,
    /// The simulated database decides each statement with its client's clock
    /// (a design trusting client timestamps). Skewed clocks must expose it:
    /// I1 in true time.
    pub clock_follows_client: bool,
}

impl RunOptions {
    /// Every option that changes a run, with its replay flag's name (also the
    /// suffix of replay file names and a key of the header line).
    pub fn flags(&self) -> [(bool, &'static str); 5] {
        [
            (self.unfenced, "unfenced"),
            (self.no_schema_retry, "no-schema-retry"),
            (self.shortening_extensions, "shortening-extensions"),
            (self.fence_without_lock, "fence-without-lock"),
            (self.clock_follows_client, "clock-follows-client"),
        ]
    }

    /// The replay flags of the options set, each with a leading space.
    pub fn flag_arguments(&self) -> String {
        self.flags()
            .iter()
            .filter(|(set, _)| *set)
            .map(|(_, name)| format!(" --{name}"))
            .collect()
    }

    /// The extension rule the simulated database runs with.
    pub fn extension_rule(&self) -> ExtensionRule {
        if self.shortening_extensions {
            ExtensionRule::LatestStatementWins
        } else {
            ExtensionRule::NeverShorten
        }
    }
}

/// What one run produced.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// The scenario's name.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// The options it ran with.
    pub options: RunOptions,
    /// The `SEED=` line and the drawn fault settings.
    pub header: Vec<String>,
    /// The checker's verdict.
    pub report: CheckReport,
    /// Expectations of the scenario that failed (a worker never started, …).
    pub expectation_failures: Vec<String>,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Worker incarnations started.
    pub incarnations: u32,
    /// The whole trace (header first) when `options.trace`; else just the header.
    pub trace: Vec<String>,
    /// The judged history.
    pub history: History,
}

impl RunOutcome {
    /// True when the checker found nothing and every expectation held.
    pub fn is_ok(&self) -> bool {
        self.report.is_ok() && self.expectation_failures.is_empty()
    }

    /// The one line that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run --release -- replay {} --seed {}{}",
            self.scenario,
            self.seed,
            self.options.flag_arguments()
        )
    }

    /// Ok commits made under a grant that followed a crashed holder's grant:
    /// the commit of token `t` came after the grant of `t - 1` went to an
    /// incarnation that later restarted (it crashed), never released `t - 1`,
    /// and had no event left when `t` was granted. DESIGN's "a commit after a
    /// holder's crash is reachable", counted from the judged history.
    pub fn commits_after_crashed_holder(&self) -> u64 {
        commits_after_crashed_holder(&self.history)
    }

    /// The first problem, as one line (`None` when the run passed).
    pub fn first_problem(&self) -> Option<String> {
        if let Some(violation) = self.report.violations.first() {
            return Some(violation.to_string());
        }
        self.expectation_failures.first().cloned()
    }

    /// Up to `lines_max` trace lines leading to the first violation's last
    /// event (the whole tail of the trace if the run has no violation with
    /// events). Needs a traced run.
    pub fn trace_excerpt(&self, lines_max: usize) -> Vec<String> {
        let body = &self.trace[self.header.len().min(self.trace.len())..];
        let anchor_us = self
            .report
            .violations
            .first()
            .and_then(|violation| violation.events.iter().max())
            .and_then(|index| self.history.events.get(*index as usize))
            .map(|event| event.true_time_us);
        let end = match anchor_us {
            Some(anchor_us) => {
                let stamp = format!("[sim {} ", format_us(anchor_us));
                body.iter()
                    .rposition(|line| line.starts_with(&stamp))
                    .map_or(body.len(), |index| index + 1)
            }
            None => body.len(),
        };
        body[end.saturating_sub(lines_max)..end].to_vec()
    }
}

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
            self.trace.line(Some(&self.client), || {
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
            trace.line(Some(&client), || {
                format!("{client}: PAUSE {pause_ms} ms inside the cycle, {place}")
            });
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        })
    }
}

#[derive(Debug, Default)]
struct WorkerSlot {
    incarnation: u64,
    /// Crash depth: > 0 while crashed.
    crashed: u32,
    /// Crashes that found the worker finished: their restarts do nothing.
    restarts_skipped: u32,
    /// Partition depth: > 0 while cut off from the database.
    partitioned: u32,
    finished: bool,
    first_summary: Option<WorkerSummary>,
}

/// Runs `scenario` under `seed`.
pub fn run(scenario: &Scenario, seed: u64, mut options: RunOptions) -> RunOutcome {
    let mut scenario = scenario.clone();
    if options.no_schema_retry {
        scenario.schema_retry = false;
    }
    // Recorded as run, however the retry was turned off: the replay line must
    // reproduce it.
    options.no_schema_retry = !scenario.schema_retry;
    let scenario = &scenario;
    let plan = FaultPlan::draw(scenario, seed);
    let mut header = plan.header(scenario, options.unfenced);
    // The planted defects, where set (the fence and retry settings are in
    // the line already).
    for (set, name) in &options.flags()[2..] {
        if *set {
            header[0].push_str(&format!(" {}=true", name.replace('-', "_")));
        }
    }
    let trace = Trace::new(options.trace, &plan);
    let tick = Duration::from_millis(scenario.tick_ms);
    let duration = Duration::from_secs(scenario.duration_s);
    let ttl = Ttl::from_millis(scenario.ttl_ms).expect("validated scenario");
    // Everything ends by itself well before this: pauses, downtimes and
    // timeouts are bounded.
    let limit = duration + Duration::from_secs(60) + ttl.as_duration() * 10;

    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .simulation_duration(limit + Duration::from_secs(1))
        .tick_duration(tick)
        .min_message_latency(Duration::from_millis(scenario.latency_ms[0]))
        .max_message_latency(Duration::from_millis(scenario.latency_ms[1]))
        .build();

    let durable = Rc::new(RefCell::new(Durable::with_extension_rule(
        plan.db_rng_seed,
        options.extension_rule(),
    )));
    let db_config = DbConfig {
        server_offset_us: plan.server_offset_us,
        lost_reply_probability: plan.lost_reply_probability,
        schema_create: Duration::from_millis(plan.schema_create_ms),
        idle_in_transaction_timeout: Duration::from_millis(scenario.idle_in_transaction_timeout_ms),
        fence_without_lock: options.fence_without_lock,
        clock_follows_client: options.clock_follows_client,
    };
    {
        let durable = Rc::clone(&durable);
        let trace = trace.clone();
        sim.host(DB_HOST, move || {
            db::serve(Rc::clone(&durable), db_config.clone(), trace.clone())
        });
    }

    let recorder = Recorder::new();
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
            let incarnation = {
                let mut slots = slots.borrow_mut();
                slots[index].incarnation += 1;
                slots[index].finished = false;
                slots[index].incarnation
            };
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

    let mut expectation_failures = Vec::new();
    let mut schedule = plan.schedule.iter().peekable();
    let mut db_crashed = 0u32;
    loop {
        let now = sim.elapsed();
        while let Some((at_ms, event)) = schedule.peek() {
            if Duration::from_millis(*at_ms) > now {
                break;
            }
            schedule.next();
            apply(&mut sim, &plan, &trace, &slots, event, &mut db_crashed);
        }
        let all_finished = slots
            .borrow()
            .iter()
            .all(|slot| slot.finished && slot.crashed == 0);
        if all_finished && (schedule.peek().is_none() || now >= duration) {
            break;
        }
        if now >= limit {
            let slots = slots.borrow();
            for (slot, worker) in slots.iter().zip(&plan.workers) {
                if !slot.finished && slot.crashed == 0 {
                    expectation_failures.push(format!(
                        "{} (incarnation {}) still running {} after the scenario's end",
                        worker.name,
                        slot.incarnation,
                        format_us((limit - duration).as_micros() as i64)
                    ));
                }
            }
            break;
        }
        if let Err(error) = sim.step() {
            expectation_failures.push(format!("simulation error: {error}"));
            break;
        }
    }
    let simulated = sim.elapsed();
    drop(sim);

    let incarnations = slots
        .borrow()
        .iter()
        .map(|slot| slot.incarnation as u32)
        .sum();
    for (slot, worker) in slots.borrow().iter().zip(&plan.workers) {
        if let Some(error) = slot
            .first_summary
            .as_ref()
            .and_then(|summary| summary.schema_error.as_ref())
        {
            expectation_failures.push(format!("{} failed to start: {error}", worker.name));
        }
    }

    // I1 in true time: a server clock that is not one clock fails here even
    // when every timestamp it reported is consistent with itself.
    expectation_failures.extend(durable.borrow().true_time.violations.iter().cloned());

    let rows = durable
        .borrow()
        .guarded
        .rows()
        .iter()
        .map(leaseproof_worker::history_row)
        .collect();
    recorder.set_guarded_rows(rows);
    let history = recorder.snapshot();
    let config = CheckConfig {
        unfenced_workers: if options.unfenced {
            plan.workers
                .iter()
                .map(|worker| worker.name.clone())
                .collect()
        } else {
            BTreeSet::new()
        },
        // The simulated database serves the semantics, which decide with the
        // time they stamp: a server-time overlap is a real one.
        grant_stamps: GrantStamps::Decision,
    };
    let report = match scenario.takeover_bound_ms {
        // The simulated server's clock is true time plus the drawn offset,
        // exactly: the checker may place worker events on it.
        Some(bound_ms) => {
            let bound = TakeoverBound {
                slack_us: i64::try_from(bound_ms * 1_000).expect("a bound of sane size"),
                server_minus_true_us: plan.server_offset_us,
            };
            check_with_takeover_bound(&history, &config, &bound)
        }
        None => check(&history, &config),
    };

    let mut full_trace = header.clone();
    if options.trace {
        full_trace.extend(merge_trace(&trace, &history));
        full_trace.push(format!("verdict: {}", report.to_string().trim_end()));
        for failure in &expectation_failures {
            full_trace.push(format!("expectation failed: {failure}"));
        }
    }
    RunOutcome {
        scenario: scenario.name.clone(),
        seed,
        options,
        header,
        report,
        expectation_failures,
        simulated,
        incarnations,
        trace: full_trace,
        history,
    }
}

fn apply(
    sim: &mut turmoil::Sim<'_>,
    plan: &FaultPlan,
    trace: &Trace,
    slots: &Rc<RefCell<Vec<WorkerSlot>>>,
    event: &FaultEvent,
    db_crashed: &mut u32,
) {
    let at_us = sim.elapsed().as_micros() as i64;
    let mut applied = true;
    // The host factory borrows the slots when a worker restarts: bounce after
    // the borrow ends.
    let mut bounce_worker = None;
    let mut slots = slots.borrow_mut();
    match event {
        FaultEvent::CrashWorker(index) => {
            let slot = &mut slots[*index];
            if slot.finished && slot.crashed == 0 {
                // Nothing left to crash; its restart must not run it again.
                slot.restarts_skipped += 1;
                applied = false;
            } else {
                if slot.crashed == 0 {
                    sim.crash(plan.workers[*index].name.as_str());
                } else {
                    applied = false;
                }
                slot.crashed += 1;
            }
        }
        FaultEvent::RestartWorker(index) => {
            let slot = &mut slots[*index];
            if slot.restarts_skipped > 0 {
                slot.restarts_skipped -= 1;
                applied = false;
            } else {
                slot.crashed -= 1;
                if slot.crashed == 0 {
                    bounce_worker = Some(plan.workers[*index].name.as_str());
                } else {
                    applied = false;
                }
            }
        }
        FaultEvent::CrashDb => {
            if *db_crashed == 0 {
                sim.crash(DB_HOST);
            } else {
                applied = false;
            }
            *db_crashed += 1;
        }
        FaultEvent::RestartDb => {
            *db_crashed -= 1;
            if *db_crashed == 0 {
                sim.bounce(DB_HOST);
            } else {
                applied = false;
            }
        }
        FaultEvent::Partition(target) | FaultEvent::Repair(target) => {
            let cut = matches!(event, FaultEvent::Partition(_));
            let indices: Vec<usize> = match target {
                Some(index) => vec![*index],
                None => (0..plan.workers.len()).collect(),
            };
            for index in indices {
                let slot = &mut slots[index];
                let name = plan.workers[index].name.as_str();
                if cut {
                    slot.partitioned += 1;
                    if slot.partitioned == 1 {
                        sim.partition(name, DB_HOST);
                    }
                } else {
                    slot.partitioned -= 1;
                    if slot.partitioned == 0 {
                        sim.repair(name, DB_HOST);
                    }
                }
            }
        }
    }
    drop(slots);
    if let Some(name) = bounce_worker {
        sim.bounce(name);
    }
    trace.line_at(at_us, None, || {
        format!(
            "driver: {}{}",
            plan.describe(event),
            if applied { "" } else { " (no effect)" }
        )
    });
}

/// The trace lines merged with the history's events, by simulated time.
fn merge_trace(trace: &Trace, history: &History) -> Vec<String> {
    let mut merged: Vec<(i64, u8, usize, String)> = trace
        .take_lines()
        .into_iter()
        .enumerate()
        .map(|(order, (at_us, line))| (at_us, 1, order, line))
        .collect();
    for event in &history.events {
        let what = match &event.kind {
            EventKind::Invoke { op_id, op } => format!("invokes op {op_id}: {op:?}"),
            EventKind::Complete { op_id, outcome } => match outcome {
                Outcome::Ok { result } => format!("op {op_id} ok: {result:?}"),
                Outcome::Fail { reason } => format!("op {op_id} FAILED: {reason:?}"),
                Outcome::Unknown { reason } => format!("op {op_id} UNKNOWN: {reason}"),
            },
            EventKind::BeliefStart { scope, token } => {
                format!("BELIEVES it holds {scope} under token {token}")
            }
            EventKind::BeliefEnd {
                scope,
                token,
                reason,
            } => format!("stops believing it holds {scope} token {token}: {reason}"),
        };
        merged.push((
            event.true_time_us,
            0,
            event.index as usize,
            format!(
                "[sim {} | srv {} | local {}] {}#inc{} (event {}) {}",
                format_us(event.true_time_us),
                format_us(trace.server_us(event.true_time_us)),
                format_us(event.local_time_us),
                event.worker,
                event.incarnation,
                event.index,
                what
            ),
        ));
    }
    merged.sort_by_key(|(at_us, rank, order, _)| (*at_us, *rank, *order));
    merged.into_iter().map(|(_, _, _, line)| line).collect()
}

/// See [`RunOutcome::commits_after_crashed_holder`].
fn commits_after_crashed_holder(history: &History) -> u64 {
    type Incarnation<'a> = (&'a str, u64);
    let mut ops: BTreeMap<u64, &Op> = BTreeMap::new();
    let mut incarnation_of: BTreeMap<&str, Incarnation<'_>> = BTreeMap::new();
    let mut last_event_us: BTreeMap<Incarnation<'_>, i64> = BTreeMap::new();
    let mut incarnation_max: BTreeMap<&str, u64> = BTreeMap::new();
    for event in &history.events {
        let incarnation = (event.worker.as_str(), event.incarnation);
        let last_us = last_event_us.entry(incarnation).or_insert(i64::MIN);
        *last_us = (*last_us).max(event.true_time_us);
        let highest = incarnation_max.entry(&event.worker).or_insert(0);
        *highest = (*highest).max(event.incarnation);
        if let EventKind::Invoke { op_id, op } = &event.kind {
            ops.insert(*op_id, op);
            incarnation_of.entry(op.owner()).or_insert(incarnation);
        }
    }
    // (scope, token) -> (owner, true time of the first ok reply granting it).
    let mut grants: BTreeMap<(&str, u64), (&str, i64)> = BTreeMap::new();
    let mut released: BTreeSet<(&str, &str, u64)> = BTreeSet::new();
    let mut commits: Vec<(&str, &str, u64)> = Vec::new();
    for event in &history.events {
        let EventKind::Complete {
            op_id,
            outcome: Outcome::Ok { result },
        } = &event.kind
        else {
            continue;
        };
        let Some(op) = ops.get(op_id) else {
            continue;
        };
        match (op, result) {
            (
                Op::Acquire { scope, .. } | Op::Renew { scope, .. },
                OpResult::Lease { token, owner, .. },
            ) => {
                grants
                    .entry((scope.as_str(), *token))
                    .or_insert((owner.as_str(), event.true_time_us));
            }
            (
                Op::Release {
                    scope,
                    owner,
                    token,
                },
                OpResult::Released { .. },
            ) => {
                released.insert((scope.as_str(), owner.as_str(), *token));
            }
            (
                Op::Commit {
                    scope,
                    owner,
                    token,
                    ..
                },
                OpResult::Committed { .. },
            ) => {
                commits.push((scope.as_str(), owner.as_str(), *token));
            }
            _ => {}
        }
    }
    let crashed_before = |owner: &str, granted_us: i64| -> bool {
        let Some(&incarnation) = incarnation_of.get(owner) else {
            return false;
        };
        incarnation_max[incarnation.0] > incarnation.1 && last_event_us[&incarnation] < granted_us
    };
    commits
        .into_iter()
        .filter(|&(scope, owner, token)| {
            let Some(&(holder, granted_us)) = grants.get(&(scope, token)) else {
                return false;
            };
            let Some(&(previous, _)) = token
                .checked_sub(1)
                .and_then(|previous_token| grants.get(&(scope, previous_token)))
            else {
                return false;
            };
            holder == owner
                && previous != owner
                && !released.contains(&(scope, previous, token - 1))
                && crashed_before(previous, granted_us)
        })
        .count() as u64
}
