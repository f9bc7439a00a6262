//! Task races: N workers of one process racing for one scope.
//!
//! Goal: run the shared worker loop as N tokio tasks against a real server and
//! judge the history. Method: one [`HarnessPort`] (one pool) per race, one
//! [`WorkerConfig`] per task with a fresh owner id, a monotonic [`RunClock`];
//! after the run the guarded table's rows of this race's scope become the
//! history's ground truth and [`check`] gives the verdict.
//! Invariant: the verdict is only worth something when the race was real:
//! [`RaceOutcome::realness_problems`] lists what made it vacuous.
//!
//! The drivers take any [`RaceSubject`]: the reference lease ([`HarnessPort`])
//! or a lock written elsewhere that implements [`LeasePort`] and can read back
//! its guarded table (`examples/foreign-lease/` races one).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use leaseproof_history::{
    check, CheckConfig, CheckReport, GrantStamps, GuardedRow, History, Recorder,
};
use leaseproof_postgres::{CommitPath, FenceMode, HarnessPort, PostgresLeases, ReadFirst};
use leaseproof_protocol::{LeaseError, LeasePort, Owner, Scope, Ttl};
use leaseproof_worker::{run_worker, Hooks, NoHooks, WorkerConfig, WorkerSummary};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use crate::clock::{ClockSkew, RunClock, SkewedClock};

/// What a real-server race drives: a lease (or lock) behind [`LeasePort`] —
/// the same port the worker loop drives in the simulation — that can also
/// read back the guarded table its commits wrote, the ground truth the
/// checker compares reported commits with.
pub trait RaceSubject: LeasePort + Clone + 'static {
    /// Every row of the guarded table, in commit (`seq`) order.
    fn guarded_rows(
        &self,
    ) -> impl std::future::Future<
        Output = Result<Vec<leaseproof_protocol::semantics::GuardedRow>, LeaseError>,
    > + Send;

    /// What the subject's grant timestamps mean ([`GrantStamps`]): whether a
    /// grant is stamped with the `now()` it decided with (the reference) or
    /// only with its statement's start.
    fn grant_stamps(&self) -> GrantStamps {
        GrantStamps::Decision
    }

    /// Whether the subject's stamps are exact microseconds and its
    /// `granted_at` is kept on renewal and re-acquisition, as the reference's
    /// are ([`CheckConfig::with_exact_stamps`]); a subject that does not say
    /// is judged assuming neither.
    fn exact_stamps(&self) -> bool {
        false
    }

    /// The subject as one racer uses it, reading `clock` as that racer's own
    /// clock does (`skew`): a design that takes time from its client gets the
    /// racer's skewed clock here. The default shares the subject unchanged.
    fn for_worker(&self, clock: SkewedClock) -> Self {
        let _ = clock;
        self.clone()
    }
}

impl RaceSubject for HarnessPort {
    fn exact_stamps(&self) -> bool {
        true
    }

    async fn guarded_rows(
        &self,
    ) -> Result<Vec<leaseproof_protocol::semantics::GuardedRow>, LeaseError> {
        HarnessPort::guarded_rows(self).await
    }
}

/// How a race is run. Times in ms; every field has a default that suits a
/// test on a 2-core machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceConfig {
    /// Racing workers (tasks, or processes in a process race).
    pub workers: usize,
    /// Guarded cycles each worker commits before it stops.
    pub rounds: u32,
    /// Cycles per grant; then the worker releases and races again.
    pub cycles_per_grant: u32,
    /// Rows each cycle writes to the guarded table.
    pub items_per_cycle: u32,
    /// TTL of each grant and renewal.
    pub ttl_ms: i64,
    /// Time spent "working" before each commit.
    pub work_ms: u64,
    /// Wait after a refused acquisition.
    pub retry_interval_ms: u64,
    /// Margin the worker keeps from its local belief deadline.
    pub deadline_margin_ms: u64,
    /// No new operation after this long: a bound on the race.
    pub duration_max_ms: u64,
    /// Operations per worker at most: another bound.
    pub operations_max: u32,
    /// Pool size per race (tasks) or per process.
    pub pool_connections_max: u32,
    /// How long an operation waits for a pooled connection before `Unavailable`.
    pub acquire_timeout_ms: u64,
    /// Commit without the fence (the broken configuration).
    pub unfenced: bool,
    /// Workers' local clocks are offset by up to this much, spread evenly
    /// from `-max` to `+max` over the workers (0: no offset).
    #[serde(default)]
    pub clock_offset_ms_max: i64,
    /// And drift by up to this rate, alternating slow and fast (0: none).
    #[serde(default)]
    pub clock_drift_ppm_max: i64,
    /// Each worker's clock, given one by one (worker `i` gets entry `i`):
    /// when not empty it replaces the spread of `clock_offset_ms_max` and
    /// `clock_drift_ppm_max`, and must name every worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clock_skews: Vec<ClockSkew>,
    /// Which of the library's fences the guarded writes commit under.
    #[serde(default)]
    pub fence: RaceFence,
    /// When the library's acquisition reads before it writes.
    #[serde(default)]
    pub read_first: RaceReadFirst,
}

/// The library's acquisition paths a race can acquire through
/// (`leaseproof_postgres::ReadFirst`, all of them its own code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RaceReadFirst {
    /// The one statement every time.
    Never,
    /// The read-only check first on a scope refused before (the default).
    #[default]
    AfterRefusal,
    /// The read-only check first every time.
    Always,
}

impl RaceReadFirst {
    /// The library's setting.
    pub fn mode(self) -> ReadFirst {
        match self {
            RaceReadFirst::Never => ReadFirst::Never,
            RaceReadFirst::AfterRefusal => ReadFirst::AfterRefusal,
            RaceReadFirst::Always => ReadFirst::Always,
        }
    }
}

/// The library's fences a race can commit under (all of them its own code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RaceFence {
    /// The commit cycle with `FOR UPDATE` (the default).
    #[default]
    ForUpdate,
    /// The commit cycle with `FOR SHARE` (`FenceMode::Shared`).
    ForShare,
    /// The single-statement guarded insert.
    SingleStatement,
}

impl Default for RaceConfig {
    fn default() -> RaceConfig {
        RaceConfig {
            workers: 8,
            rounds: 6,
            cycles_per_grant: 2,
            items_per_cycle: 2,
            ttl_ms: 150,
            work_ms: 2,
            retry_interval_ms: 3,
            deadline_margin_ms: 20,
            duration_max_ms: 30_000,
            operations_max: 100_000,
            pool_connections_max: 0,
            acquire_timeout_ms: 2_000,
            unfenced: false,
            clock_offset_ms_max: 0,
            clock_drift_ppm_max: 0,
            clock_skews: Vec::new(),
            fence: RaceFence::ForUpdate,
            read_first: RaceReadFirst::AfterRefusal,
        }
    }
}

impl RaceConfig {
    /// Worker `index`'s clock skew: its entry of `clock_skews` when given;
    /// otherwise offsets spread evenly over `[-max, max]`, drifts
    /// alternating slow and fast — deterministic, so a failing race can be
    /// rerun with the same clocks.
    pub fn clock_skew(&self, index: usize) -> ClockSkew {
        if !self.clock_skews.is_empty() {
            return self.clock_skews.get(index).copied().unwrap_or_default();
        }
        let spread = |max: i64| -> i64 {
            if self.workers <= 1 || max == 0 {
                return 0;
            }
            let index = i64::try_from(index).unwrap_or(0);
            let last = i64::try_from(self.workers - 1).unwrap_or(1);
            -max + 2 * max * index / last
        };
        let drift_ppm = if index % 2 == 0 {
            -self.clock_drift_ppm_max
        } else {
            self.clock_drift_ppm_max
        };
        ClockSkew {
            offset_us: spread(self.clock_offset_ms_max).saturating_mul(1_000),
            drift_ppm,
        }
    }

    /// The default race with `workers` racers and `rounds` cycles each.
    pub fn new(workers: usize, rounds: u32) -> RaceConfig {
        RaceConfig {
            workers,
            rounds,
            ..RaceConfig::default()
        }
    }

    /// Pool size: the configured one, or one connection per worker plus one.
    pub fn pool_size(&self) -> u32 {
        if self.pool_connections_max > 0 {
            self.pool_connections_max
        } else {
            u32::try_from(self.workers)
                .unwrap_or(u32::MAX)
                .saturating_add(1)
        }
    }

    /// The loop's configuration for worker `worker` of this race.
    pub fn worker_config(
        &self,
        worker: String,
        owner: Owner,
        scope: Scope,
        stop_at_true_us: i64,
    ) -> Result<WorkerConfig, RaceError> {
        Ok(WorkerConfig {
            worker,
            incarnation: 0,
            owner,
            scope,
            ttl: Ttl::from_millis(self.ttl_ms).map_err(LeaseError::from)?,
            cycles: self.rounds,
            cycles_per_grant: self.cycles_per_grant,
            items_per_cycle: self.items_per_cycle,
            work: Duration::from_millis(self.work_ms),
            retry_interval: Duration::from_millis(self.retry_interval_ms),
            deadline_margin: Duration::from_millis(self.deadline_margin_ms),
            unfenced: self.unfenced,
            stop_at_true_us: Some(stop_at_true_us),
            operations_max: self.operations_max,
        })
    }
}

/// Why a race could not be run (not: why it failed the checker).
#[derive(Debug, thiserror::Error)]
pub enum RaceError {
    /// No server: no `DATABASE_URL`, no binaries.
    #[error("no PostgreSQL: {0}")]
    NoServer(#[from] leaseproof_pgcluster::PgUnavailable),
    /// The throwaway server failed.
    #[error("PostgreSQL: {0}")]
    Server(#[from] leaseproof_pgcluster::Error),
    /// The server at `address` could not be reached or refused us.
    #[error("cannot connect to PostgreSQL at {address}: {cause}")]
    Connect {
        /// `host:port` (never the password).
        address: String,
        /// What the connection attempt said (refused, authentication, …).
        cause: String,
    },
    /// A statement failed.
    #[error("SQL: {0}")]
    Sql(#[from] sqlx::Error),
    /// The lease layer failed.
    #[error("lease: {0}")]
    Lease(#[from] LeaseError),
    /// A worker process failed or its history was unreadable.
    #[error("worker process: {0}")]
    Process(String),
    /// The configuration cannot describe a race (said before anything runs).
    #[error("race configuration: {0}")]
    Config(String),
    /// The race ran and the checker found violations, or it was vacuous.
    #[error("race failed:\n{0}")]
    Failed(Box<Summary>),
}

/// Everything a race produced.
#[derive(Debug)]
pub struct RaceOutcome {
    /// The scope raced for (unique per race).
    pub scope: String,
    /// The recorded (or merged) history, guarded rows included.
    pub history: History,
    /// The checker's verdict.
    pub report: CheckReport,
    /// Each worker's name and summary.
    pub summaries: Vec<(String, WorkerSummary)>,
    /// Wall time of the race in ms.
    pub elapsed_ms: u64,
}

impl RaceOutcome {
    /// The workers' summaries added up.
    pub fn totals(&self) -> WorkerSummary {
        let mut totals = WorkerSummary::default();
        for (_, summary) in &self.summaries {
            totals.absorb(summary);
        }
        totals
    }

    /// What makes the race vacuous, empty when it was real: at least two
    /// distinct winners, a takeover, a refused acquisition, a commit, and no
    /// worker that failed to create the schema.
    pub fn realness_problems(&self) -> Vec<String> {
        let totals = self.totals();
        let stats = &self.report.stats;
        let mut problems = Vec::new();
        if stats.distinct_holders < 2 {
            problems.push(format!(
                "{} distinct winner(s), need ≥ 2",
                stats.distinct_holders
            ));
        }
        if stats.takeovers == 0 {
            problems.push("no takeover".to_string());
        }
        if totals.held == 0 {
            problems.push("no acquisition was refused (no loser lost)".to_string());
        }
        if stats.commits == 0 {
            problems.push("no commit".to_string());
        }
        if let Some(error) = totals.schema_error {
            problems.push(format!("a worker could not create the schema: {error}"));
        }
        problems
    }

    /// The summary printed by the CLI and returned by `verify_race`.
    pub fn summary(&self) -> Summary {
        Summary {
            scope: self.scope.clone(),
            workers: self.summaries.len(),
            events: self.history.events.len(),
            guarded_rows: self.history.guarded_rows.len(),
            totals: self.totals(),
            report: self.report.clone(),
            realness_problems: self.realness_problems(),
            elapsed_ms: self.elapsed_ms,
        }
    }
}

/// A race's verdict in a few lines.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The scope raced for.
    pub scope: String,
    /// Workers that raced.
    pub workers: usize,
    /// Events in the history.
    pub events: usize,
    /// Rows found in the guarded table.
    pub guarded_rows: usize,
    /// The workers' counts added up.
    pub totals: WorkerSummary,
    /// The checker's verdict.
    pub report: CheckReport,
    /// Why the race was vacuous, if it was.
    pub realness_problems: Vec<String>,
    /// Wall time in ms.
    pub elapsed_ms: u64,
}

/// `race --json`: a race's verdict as a document (docs/json.md).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaceDocument {
    /// Always `leaseproof-race`.
    pub format: String,
    /// Always 1.
    pub version: u32,
    /// No violation and a real race ([`Summary::passed`]).
    pub passed: bool,
    /// The worker processes (0: tasks of one process).
    pub processes: usize,
    /// Rounds each worker ran.
    pub rounds: u32,
    /// The lease TTL in ms.
    pub ttl_ms: i64,
    /// What the race did and the checker's report.
    pub summary: Summary,
}

impl leaseproof_history::Document for RaceDocument {
    const FORMAT: &'static str = "leaseproof-race";
    const VERSION: u32 = 1;
}

impl Summary {
    /// No violation and a real race.
    pub fn passed(&self) -> bool {
        self.report.is_ok() && self.realness_problems.is_empty()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let totals = &self.totals;
        writeln!(
            formatter,
            "race on scope {}: {} workers, {} ms, {} events, {} guarded rows",
            self.scope, self.workers, self.elapsed_ms, self.events, self.guarded_rows
        )?;
        writeln!(
            formatter,
            "workers: grants={} held={} commits={} commits_refused={} unknown={} errors={} operations={}",
            totals.grants,
            totals.held,
            totals.commits,
            totals.commits_refused,
            totals.unknown,
            totals.errors,
            totals.operations
        )?;
        write!(formatter, "checker: {}", self.report)?;
        for problem in &self.realness_problems {
            writeln!(formatter, "vacuous: {problem}")?;
        }
        writeln!(
            formatter,
            "verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

/// A unique scope name for one race, so races can share a database (and a
/// user's server) without seeing each other's rows.
pub fn unique_scope(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        crate::clock::unix_now_us(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pool of at most `connections_max` on `url`, failing an acquisition after
/// `acquire_timeout`.
pub async fn connect_pool(
    url: &str,
    connections_max: u32,
    acquire_timeout: Duration,
) -> Result<PgPool, RaceError> {
    let options = PgConnectOptions::from_str(url)?;
    connect_pool_with(options, connections_max, acquire_timeout).await
}

/// [`connect_pool`] with parsed options.
pub async fn connect_pool_with(
    options: PgConnectOptions,
    connections_max: u32,
    acquire_timeout: Duration,
) -> Result<PgPool, RaceError> {
    assert!(connections_max >= 1);
    // One plain connection first: a pool that cannot connect only says "pool
    // timed out" after its acquire timeout; this says where and why, at once.
    {
        use sqlx::Connection as _;
        match sqlx::PgConnection::connect_with(&options).await {
            Ok(connection) => {
                let _ = connection.close().await;
            }
            Err(error) => {
                return Err(RaceError::Connect {
                    address: format!("{}:{}", options.get_host(), options.get_port()),
                    cause: error.to_string(),
                })
            }
        }
    }
    // The pool users get (no ping on checkout, finite acquire timeout), so a
    // killed backend surfaces in a race exactly as it does for them.
    Ok(PostgresLeases::pool_options()
        .max_connections(connections_max)
        .acquire_timeout(acquire_timeout)
        .connect_with(options)
        .await?)
}

/// A harness port over a fresh pool on `url`, sized for `config`.
pub async fn harness_port(url: &str, config: &RaceConfig) -> Result<HarnessPort, RaceError> {
    let pool = connect_pool(
        url,
        config.pool_size(),
        Duration::from_millis(config.acquire_timeout_ms),
    )
    .await?;
    Ok(port_on(pool, config))
}

/// The harness port over `pool`, committing under `config`'s fence.
pub(crate) fn port_on(pool: sqlx::PgPool, config: &RaceConfig) -> HarnessPort {
    let (mode, path) = match config.fence {
        RaceFence::ForUpdate => (FenceMode::Exclusive, CommitPath::Cycle),
        RaceFence::ForShare => (FenceMode::Shared, CommitPath::Cycle),
        RaceFence::SingleStatement => (FenceMode::Exclusive, CommitPath::SingleStatement),
    };
    let leases = PostgresLeases::new(pool)
        .with_fence_mode(mode)
        .with_read_first(config.read_first.mode());
    HarnessPort::new(leases).with_commit_path(path)
}

/// Converts the port's guarded rows into the history's plain form.
pub fn history_rows(rows: &[leaseproof_protocol::semantics::GuardedRow]) -> Vec<GuardedRow> {
    rows.iter().map(leaseproof_worker::history_row).collect()
}

/// The guarded table's rows of `scope`, retried for a few seconds so a race
/// that ends just after a server restart can still read its ground truth.
pub async fn read_guarded_rows<S: RaceSubject>(
    port: &S,
    scope: &str,
) -> Result<Vec<GuardedRow>, RaceError> {
    const ATTEMPTS_MAX: u32 = 50;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match port.guarded_rows().await {
            Ok(rows) => {
                let mut rows = history_rows(&rows);
                rows.retain(|row| row.scope == scope);
                return Ok(rows);
            }
            // Only the reading is retried: the rows are what they are.
            Err(_) if attempt < ATTEMPTS_MAX => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// One racer: its loop configuration, its fault hooks and its clock's skew.
#[derive(Debug)]
pub struct Racer<H> {
    /// The loop's configuration.
    pub config: WorkerConfig,
    /// Faults injected into this racer.
    pub hooks: Arc<H>,
    /// How its local clock departs from the run's (none by default).
    pub skew: ClockSkew,
}

impl<H> Racer<H> {
    /// A racer with an unskewed clock.
    pub fn new(config: WorkerConfig, hooks: Arc<H>) -> Racer<H> {
        Racer {
            config,
            hooks,
            skew: ClockSkew::default(),
        }
    }
}

/// Runs `racers` concurrently as tokio tasks over clones of `port`, recording
/// into `recorder` with `clock`; returns each worker's name and summary.
pub async fn run_racers<S: RaceSubject, H: Hooks + 'static>(
    port: &S,
    racers: Vec<Racer<H>>,
    clock: RunClock,
    recorder: &Recorder,
) -> Vec<(String, WorkerSummary)> {
    let mut tasks = Vec::with_capacity(racers.len());
    for racer in racers {
        let recorder = recorder.clone();
        let clock = SkewedClock {
            run: clock,
            skew: racer.skew,
        };
        let port = port.for_worker(clock);
        tasks.push(tokio::spawn(async move {
            let summary = run_worker(
                &port,
                &racer.config,
                &clock,
                racer.hooks.as_ref(),
                &recorder,
            )
            .await;
            (racer.config.worker, summary)
        }));
    }
    let mut summaries = Vec::with_capacity(tasks.len());
    for task in tasks {
        summaries.push(task.await.expect("a racing worker panicked"));
    }
    summaries
}

/// Reads the ground truth of `scope` into `recorder` and checks the history.
pub async fn judge<S: RaceSubject>(
    port: &S,
    scope: &str,
    recorder: &Recorder,
    unfenced_workers: BTreeSet<String>,
) -> Result<(History, CheckReport), RaceError> {
    recorder.set_guarded_rows(read_guarded_rows(port, scope).await?);
    let mut history = recorder.snapshot();
    let design = CheckConfig {
        unfenced_workers,
        // The reference's statements decide with the `now()` they stamp;
        // another subject says what its stamps mean.
        grant_stamps: port.grant_stamps(),
        ..Default::default()
    };
    let design = if port.exact_stamps() {
        design.with_exact_stamps()
    } else {
        design
    };
    let report = check(&history, &design);
    // Saved with the history, so `leaseproof check` judges it the same way.
    history.declare(design);
    Ok((history, report))
}

/// Races `config.workers` tasks for one fresh scope on the database at `url`
/// and judges the history. Creates the lease and guarded tables if needed.
pub async fn task_race(url: &str, config: &RaceConfig) -> Result<RaceOutcome, RaceError> {
    let port = harness_port(url, config).await?;
    task_race_on(&port, config, |_| NoHooks).await
}

/// [`task_race`] over an existing port, with hooks per worker index.
pub async fn task_race_on<S: RaceSubject, H: Hooks + 'static>(
    port: &S,
    config: &RaceConfig,
    hooks_for: impl Fn(usize) -> H,
) -> Result<RaceOutcome, RaceError> {
    assert!(config.workers >= 1);
    if !config.clock_skews.is_empty() && config.clock_skews.len() != config.workers {
        return Err(RaceError::Config(format!(
            "{} clock skews given for {} workers: give one per worker, or none",
            config.clock_skews.len(),
            config.workers
        )));
    }
    port.ensure_schema().await?;
    let scope_name = unique_scope("race");
    let scope = Scope::new(scope_name.clone()).map_err(LeaseError::from)?;
    let clock = RunClock::start();
    let stop_at_true_us = i64::try_from(config.duration_max_ms)
        .unwrap_or(i64::MAX / 1_000)
        .saturating_mul(1_000);
    let mut racers = Vec::with_capacity(config.workers);
    let mut worker_names = BTreeSet::new();
    for index in 0..config.workers {
        let worker = format!("t{index}");
        worker_names.insert(worker.clone());
        racers.push(Racer {
            config: config.worker_config(
                worker,
                Owner::generate(),
                scope.clone(),
                stop_at_true_us,
            )?,
            hooks: Arc::new(hooks_for(index)),
            skew: config.clock_skew(index),
        });
    }
    let recorder = Recorder::new();
    let summaries = run_racers(port, racers, clock, &recorder).await;
    let elapsed_ms = u64::try_from(clock.elapsed_us() / 1_000).unwrap_or(0);
    let unfenced_workers = if config.unfenced {
        worker_names
    } else {
        BTreeSet::new()
    };
    let (history, report) = judge(port, &scope_name, &recorder, unfenced_workers).await?;
    Ok(RaceOutcome {
        scope: scope_name,
        history,
        report,
        summaries,
        elapsed_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A race whose checker saw `holders` distinct holders, `takeovers`
    /// takeovers and `commits` commits, over two workers' summaries.
    fn outcome(holders: u64, takeovers: u64, commits: u64, held: u32) -> RaceOutcome {
        let mut report = CheckReport::default();
        report.stats.distinct_holders = holders;
        report.stats.takeovers = takeovers;
        report.stats.commits = commits;
        let worker = |held| WorkerSummary {
            grants: 2,
            held,
            commits: 1,
            operations: 5,
            ..WorkerSummary::default()
        };
        RaceOutcome {
            scope: "race".to_string(),
            history: History::default(),
            report,
            summaries: vec![
                ("w0".to_string(), worker(held)),
                ("w1".to_string(), worker(0)),
            ],
            elapsed_ms: 1,
        }
    }

    #[test]
    fn a_race_is_real_only_with_two_holders_a_takeover_a_loser_and_a_commit() {
        assert!(outcome(2, 1, 1, 1).realness_problems().is_empty());
        assert_eq!(outcome(2, 1, 1, 1).totals().held, 1);
        assert_eq!(outcome(2, 1, 1, 1).totals().operations, 10);
        let problems = |outcome: RaceOutcome| outcome.realness_problems().join("; ");
        assert_eq!(
            problems(outcome(1, 1, 1, 1)),
            "1 distinct winner(s), need ≥ 2"
        );
        assert_eq!(problems(outcome(2, 0, 1, 1)), "no takeover");
        assert_eq!(
            problems(outcome(2, 1, 1, 0)),
            "no acquisition was refused (no loser lost)"
        );
        assert_eq!(problems(outcome(2, 1, 0, 1)), "no commit");
        let mut unschemed = outcome(2, 1, 1, 1);
        unschemed.summaries[1].1.schema_error = Some("23505".to_string());
        assert_eq!(
            problems(unschemed),
            "a worker could not create the schema: 23505"
        );
        // The summary carries the problems, and a vacuous race does not pass.
        assert!(outcome(2, 1, 1, 1).summary().passed());
        assert!(!outcome(2, 0, 1, 1).summary().passed());
    }

    #[test]
    fn explicit_clock_skews_replace_the_spread_one_per_worker() {
        let behind = ClockSkew {
            offset_us: -1_000_000,
            drift_ppm: 0,
        };
        let fast = ClockSkew {
            offset_us: 0,
            drift_ppm: 50_000,
        };
        let config = RaceConfig {
            workers: 2,
            clock_offset_ms_max: 500,
            clock_skews: vec![behind, fast],
            ..RaceConfig::default()
        };
        assert_eq!(config.clock_skew(0), behind);
        assert_eq!(config.clock_skew(1), fast);
        let spread = RaceConfig {
            clock_skews: Vec::new(),
            ..config
        };
        assert_eq!(spread.clock_skew(0).offset_us, -500_000);
        assert_eq!(spread.clock_skew(1).offset_us, 500_000);
    }

    #[tokio::test]
    async fn clock_skews_that_do_not_name_every_worker_are_refused_before_any_work() {
        // The pool never connects: the refusal comes first, with no server.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/nothing")
            .unwrap();
        let port = HarnessPort::new(leaseproof_postgres::PostgresLeases::new(pool));
        let config = RaceConfig {
            workers: 3,
            clock_skews: vec![ClockSkew::default(); 2],
            ..RaceConfig::default()
        };
        let refused = task_race_on(&port, &config, |_| NoHooks).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "race configuration: 2 clock skews given for 3 workers: give one per worker, or none"
        );
    }
}
