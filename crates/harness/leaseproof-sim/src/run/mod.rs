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
//!
//! Files: this one holds the options, the outcome and the order of a run;
//! `workers.rs` the worker hosts (clocks, pauses, incarnations), `drive.rs`
//! the driver that steps the simulation and applies the drawn faults,
//! `verdict.rs` the judgement after the run.

mod drive;
mod locks;
mod verdict;
mod workers;

pub use workers::{PauseHooks, SimClocks};

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use leaseproof_history::{Annotation, CheckReport, History, Invariant, Recorder, Violation};
use leaseproof_protocol::semantics::ExtensionRule;
use leaseproof_protocol::Ttl;

use crate::db::{self, DbConfig, Durable, DB_HOST};
use crate::faults::FaultPlan;
use crate::scenario::{LockManagerName, Scenario};
use crate::trace::{format_us, Trace};

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
    /// Lock scenarios: the simulated Redis runs the manager's scripts with
    /// every comparison true — release and keep-alive without their
    /// compare. The harness must catch it (I1).
    pub compare_skipped: bool,
    /// Lock scenarios: the lock's store forgets its keys and counters at a
    /// restart, whatever the scenario says (Redis without persistence). The
    /// harness must catch it (I1, I2).
    pub forgetful_restarts: bool,
    /// Advisory lock scenarios: the simulated database grants an advisory
    /// lock to every session that asks, as `pg_try_advisory_lock_shared`
    /// would. The harness must catch it (I1).
    pub shared_advisory_locks: bool,
}

impl RunOptions {
    /// Every option that changes a run, with its replay flag's name (also the
    /// suffix of replay file names and a key of the header line).
    pub fn flags(&self) -> [(bool, &'static str); 8] {
        [
            (self.unfenced, "unfenced"),
            (self.no_schema_retry, "no-schema-retry"),
            (self.shortening_extensions, "shortening-extensions"),
            (self.fence_without_lock, "fence-without-lock"),
            (self.clock_follows_client, "clock-follows-client"),
            (self.compare_skipped, "compare-skipped"),
            (self.forgetful_restarts, "forgetful-restarts"),
            (self.shared_advisory_locks, "shared-advisory-locks"),
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

/// What a run found wrong besides the checker's report: what only the
/// simulation can see, and the scenario's own expectations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A violation the simulation's ground truth proves and no history
    /// shows: I1 in true time (a server clock that is not one clock), I3 at
    /// the commit instant (a write that committed under a rival's grant).
    InTrueTime(Violation),
    /// A server stamp off the clock the run configured: what the checker
    /// trusts was not the server's clock.
    ServerClock(String),
    /// A worker's schema creation failed, so it never started.
    DidNotStart {
        /// The worker.
        worker: String,
        /// Its error.
        error: String,
    },
    /// A worker still running after the scenario's end and its grace.
    StillRunning {
        /// The worker.
        worker: String,
        /// Its incarnation.
        incarnation: u64,
        /// How long past the end, µs.
        over_us: i64,
    },
    /// The simulation itself failed (turmoil's error).
    Simulation(String),
}

impl Finding {
    /// The invariant a finding proves broken, if it is a violation.
    pub fn invariant(&self) -> Option<Invariant> {
        match self {
            Finding::InTrueTime(violation) => Some(violation.invariant),
            _ => None,
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::InTrueTime(violation) => write!(formatter, "{violation}"),
            Finding::ServerClock(sentence) => write!(formatter, "server clock: {sentence}"),
            Finding::DidNotStart { worker, error } => {
                write!(formatter, "{worker} failed to start: {error}")
            }
            Finding::StillRunning {
                worker,
                incarnation,
                over_us,
            } => write!(
                formatter,
                "{worker} (incarnation {incarnation}) still running {} after the scenario's end",
                format_us(*over_us)
            ),
            Finding::Simulation(error) => write!(formatter, "simulation error: {error}"),
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
    /// What the run found besides the checker's report: violations only
    /// the simulation sees, failed expectations of the scenario.
    pub findings: Vec<Finding>,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Worker incarnations started.
    pub incarnations: u32,
    /// The whole trace (header first) when `options.trace`; else just the header.
    pub trace: Vec<String>,
    /// The judged history.
    pub history: History,
    /// The faults injected into the run, on the history's time axis (for the
    /// timeline picture; recorded when `options.trace`).
    pub faults: Vec<Annotation>,
    /// Invariants the design under test is known to break under the
    /// scenario's faults (a lock scenario's `breaks`): findings, not failures.
    pub known_breaks: Vec<Invariant>,
}

impl RunOutcome {
    /// True when the checker found nothing beyond the design's known
    /// breaks, and the simulation found nothing.
    pub fn is_ok(&self) -> bool {
        self.unexpected_violations().next().is_none() && self.findings.is_empty()
    }

    /// The checker's violations of invariants the design is not known to break.
    pub fn unexpected_violations(&self) -> impl Iterator<Item = &Violation> {
        self.report
            .violations
            .iter()
            .filter(|violation| !self.known_breaks.contains(&violation.invariant))
    }

    /// The checker's violations of the invariants the design is known to
    /// break: what this seed shows about it.
    pub fn known_violations(&self) -> impl Iterator<Item = &Violation> {
        self.report
            .violations
            .iter()
            .filter(|violation| self.known_breaks.contains(&violation.invariant))
    }

    /// Every invariant the run proved broken — by the checker or in true
    /// time — sorted, once each.
    pub fn invariants_broken(&self) -> Vec<Invariant> {
        let mut invariants: Vec<Invariant> = self
            .report
            .violations
            .iter()
            .map(|violation| violation.invariant)
            .chain(self.findings.iter().filter_map(Finding::invariant))
            .collect();
        invariants.sort();
        invariants.dedup();
        invariants
    }

    /// The one line that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "{} replay {} --seed {}{}",
            invocation(),
            self.scenario,
            self.seed,
            self.options.flag_arguments()
        )
    }

    /// The run as a self-contained HTML timeline (see
    /// [`leaseproof_history::timeline_html`]), faults included when traced.
    pub fn timeline_html(&self) -> String {
        let title = format!(
            "{} seed {}{}",
            self.scenario,
            self.seed,
            self.options.flag_arguments()
        );
        leaseproof_history::timeline_html(&title, &self.history, &self.report, &self.faults)
    }

    /// Ok commits made under a grant that followed a crashed holder's grant:
    /// the commit of token `t` came after the grant of `t - 1` went to an
    /// incarnation that later restarted (it crashed), never released `t - 1`,
    /// and had no event left when `t` was granted. DESIGN's "a commit after a
    /// holder's crash is reachable", counted from the judged history.
    pub fn commits_after_crashed_holder(&self) -> u64 {
        verdict::commits_after_crashed_holder(&self.history)
    }

    /// The first problem, as one line (`None` when the run passed).
    pub fn first_problem(&self) -> Option<String> {
        if let Some(violation) = self.unexpected_violations().next() {
            return Some(violation.to_string());
        }
        self.findings.first().map(ToString::to_string)
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

/// The program to name in a printed command: the `leaseproof` binary as it
/// was invoked, or `cargo run --release --` from anything else (a test, a
/// library caller), where no such binary ran.
pub fn invocation() -> String {
    let argv0 = std::env::args().next().unwrap_or_default();
    let is_leaseproof = std::path::Path::new(&argv0)
        .file_name()
        .is_some_and(|name| name == "leaseproof");
    if is_leaseproof {
        argv0
    } else {
        "cargo run --release --".to_string()
    }
}

/// Where evidence files (timelines, traces, histories) go unless a flag says
/// otherwise: `leaseproof-out` in the temp dir, never the working directory.
pub fn evidence_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("leaseproof-out")
}

/// The time bounds of one run, from its scenario.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    /// The lease TTL every worker asks for.
    ttl: Ttl,
    /// The scenario's duration: workers stop acquiring after it.
    duration: Duration,
    /// When the driver gives up on a run that has not ended by itself.
    limit: Duration,
}

/// What every part of one run reads: the scenario, the plan its seed drew,
/// the options, the time bounds, the recorder and the trace.
#[derive(Clone, Copy)]
struct Setup<'a> {
    scenario: &'a Scenario,
    plan: &'a FaultPlan,
    options: RunOptions,
    bounds: Bounds,
    recorder: &'a Recorder,
    trace: &'a Trace,
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
    if let Some(lock) = &scenario.lock {
        let manager = serde_json::to_value(lock.manager)
            .ok()
            .and_then(|name| name.as_str().map(str::to_string))
            .unwrap_or_default();
        header.push(match lock.manager {
            LockManagerName::Redis => format!(
                "lock: manager={manager} keep_alive={} persistent={}",
                lock.keep_alive,
                lock.persistent && !options.forgetful_restarts,
            ),
            LockManagerName::Advisory => format!(
                "lock: manager={manager} probe_interval_ms={}",
                lock.probe_interval_ms
            ),
        });
    }
    let trace = Trace::new(options.trace, &plan);
    let tick = Duration::from_millis(scenario.tick_ms);
    let duration = Duration::from_secs(scenario.duration_s);
    let ttl = Ttl::from_millis(scenario.ttl_ms).expect("validated scenario");
    // Everything ends by itself well before this: pauses, downtimes and
    // timeouts are bounded.
    let limit = duration + Duration::from_secs(60) + ttl.as_duration() * 10;
    let bounds = Bounds {
        ttl,
        duration,
        limit,
    };

    let sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .simulation_duration(limit + Duration::from_secs(1))
        .tick_duration(tick)
        .min_message_latency(Duration::from_millis(scenario.latency_ms[0]))
        .max_message_latency(Duration::from_millis(scenario.latency_ms[1]))
        .build();

    let recorder = Recorder::new();
    let setup = Setup {
        scenario,
        plan: &plan,
        options,
        bounds,
        recorder: &recorder,
        trace: &trace,
    };
    let judged = match &scenario.lock {
        None => run_lease(sim, setup),
        Some(_) => run_lock(sim, setup),
    };
    let Judged {
        findings,
        history,
        report,
        incarnations,
        simulated,
    } = judged;
    let faults = trace
        .faults()
        .into_iter()
        .map(|(true_time_us, worker, text)| Annotation {
            true_time_us,
            worker,
            text,
        })
        .collect();
    let mut full_trace = header.clone();
    if options.trace {
        full_trace.extend(verdict::merge_trace(&trace, &history));
        full_trace.push(format!("verdict: {}", report.to_string().trim_end()));
        for finding in &findings {
            full_trace.push(format!("found: {finding}"));
        }
    }
    RunOutcome {
        scenario: scenario.name.clone(),
        seed,
        options,
        header,
        report,
        findings,
        simulated,
        incarnations,
        trace: full_trace,
        history,
        faults,
        known_breaks: scenario
            .lock
            .as_ref()
            .map(|lock| lock.breaks.clone())
            .unwrap_or_default(),
    }
}

/// What a run's hosts left behind, judged.
struct Judged {
    findings: Vec<Finding>,
    history: History,
    report: CheckReport,
    incarnations: u32,
    simulated: Duration,
}

/// The lease: the simulated database and the shared worker loop.
fn run_lease(mut sim: turmoil::Sim<'_>, setup: Setup<'_>) -> Judged {
    let (scenario, plan, options) = (setup.scenario, setup.plan, setup.options);
    let durable = Rc::new(RefCell::new(Durable::with_extension_rule(
        plan.db_rng_seed,
        options.extension_rule(),
    )));
    let db_config = DbConfig {
        server_offset_us: plan.server_offset_us,
        fence_without_lock: options.fence_without_lock,
        clock_follows_client: options.clock_follows_client,
        ..DbConfig::drawn(scenario, plan)
    };
    {
        let durable = Rc::clone(&durable);
        let trace = setup.trace.clone();
        sim.host(DB_HOST, move || {
            db::serve(Rc::clone(&durable), db_config.clone(), trace.clone())
        });
    }
    let slots = workers::spawn(&mut sim, setup);
    let store = drive::Store {
        host: DB_HOST,
        terminations: None,
    };
    let mut findings = drive::drive(&mut sim, plan, setup.trace, &slots, &setup.bounds, store);
    let simulated = sim.elapsed();
    drop(sim);
    let verdict::Verdict {
        report,
        history,
        incarnations,
    } = verdict::judge(
        scenario,
        plan,
        options,
        &durable,
        &slots,
        setup.recorder,
        &mut findings,
    );
    Judged {
        findings,
        history,
        report,
        incarnations,
        simulated,
    }
}

/// A lock manager: its store (the simulated Redis or database), the work
/// store and the manager's own code on every worker host.
fn run_lock(mut sim: turmoil::Sim<'_>, setup: Setup<'_>) -> Judged {
    let (slots, stores) = locks::spawn(&mut sim, setup);
    let store = drive::Store {
        host: stores.host,
        terminations: stores.terminations.as_ref(),
    };
    let findings = drive::drive(
        &mut sim,
        setup.plan,
        setup.trace,
        &slots,
        &setup.bounds,
        store,
    );
    let simulated = sim.elapsed();
    drop(sim);
    let (history, report) = locks::judge(setup.recorder, &stores);
    Judged {
        findings,
        history,
        report,
        incarnations: workers::incarnations(&slots),
        simulated,
    }
}
