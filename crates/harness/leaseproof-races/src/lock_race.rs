//! The races `leaseproof race` and `leaseproof verify` run, as functions
//! returning what they found: a lock manager's race ([`lock_race`]), the
//! lease's race on a server of the caller's choice ([`race_on`]) and the
//! short race of `verify` ([`verify_race`]).
//!
//! Goal: everything a front end needs to run a race on the throwaway cluster
//! or a server of the user's, without parsing an argument or printing a line.
//! Invariant: a passing document or summary is returned only for a race
//! that was clean and real.

use std::time::Duration;

use leaseproof_history::Document as _;
use leaseproof_locks::conformance::tasks_never_hold_one_table_at_once;
use leaseproof_locks::TableName;

use crate::managers::{build_manager, BuiltManager, ManagerKind, ManagerSpec};
use crate::process::{process_race, WorkerLauncher, WORKER_SUBCOMMAND};
use crate::race::{task_race, RaceConfig, RaceError, RaceOutcome, Summary};

/// A lock manager's race: `tasks` tasks × `rounds` rounds on one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRace {
    /// The manager.
    pub lock: ManagerKind,
    /// Racing tasks (at least 2).
    pub tasks: usize,
    /// Rounds each task runs (at least 1).
    pub rounds: u32,
    /// The TTL of the managers that expire (Redis, the lease), ms.
    pub ttl_ms: i64,
    /// The PostgreSQL server; `None`: a fresh database of the throwaway cluster.
    pub database_url: Option<String>,
    /// The Redis server; `None`: `REDIS_URL` or a throwaway `redis-server`.
    pub redis_url: Option<String>,
}

/// `race --lock`: `args.tasks` tasks × `args.rounds` rounds on one table
/// through the chosen manager; a certain double hold, a token against real time or a
/// vacuous race fails it.
pub async fn lock_race(args: &LockRace) -> Result<LockRaceDocument, String> {
    let mut _database = None;
    let url = match &args.database_url {
        Some(url) => url.clone(),
        None => {
            let server = leaseproof_pgcluster::shared_server()
                .await
                .map_err(|error| error.reason)?;
            let database = server
                .fresh_database()
                .await
                .map_err(|error| error.to_string())?;
            let url = database.url.clone();
            _database = Some(database);
            url
        }
    };
    let spec = ManagerSpec {
        redis_url: args.redis_url.clone(),
        ttl: Duration::from_millis(u64::try_from(args.ttl_ms.max(1)).unwrap_or(150)),
        ..ManagerSpec::new(args.lock, "race", url)
    };
    let BuiltManager {
        manager,
        lifetime_min,
        ..
    } = build_manager(spec)
        .await
        .map_err(|error| error.to_string())?;
    let table = TableName::new("public", format!("race_{}", std::process::id()));
    let summary = tasks_never_hold_one_table_at_once(
        manager,
        &table,
        args.tasks.max(2),
        usize::try_from(args.rounds.max(1)).unwrap_or(1),
        Duration::from_millis(5),
        lifetime_min,
    )
    .await
    .map_err(|error| error.to_string())?;
    Ok(LockRaceDocument {
        format: LockRaceDocument::FORMAT.to_string(),
        version: LockRaceDocument::VERSION,
        passed: true,
        lock: args.lock.name().to_string(),
        tasks: args.tasks.max(2),
        rounds: args.rounds.max(1),
        holds: summary.holds as u64,
        winners: summary.winners as u64,
        refusals: summary.refusals as u64,
    })
}

/// `race --lock … --json`: the race of tasks through a lock manager
/// (docs/json.md). Written only when the race passed: a failure is an error
/// whose message is the finding.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRaceDocument {
    /// Always `leaseproof-lock-race`.
    pub format: String,
    /// Always 1.
    pub version: u32,
    /// No certain double hold, no token against real time, not vacuous.
    pub passed: bool,
    /// The manager: `advisory`, `redis` or `lease`.
    pub lock: String,
    /// Tasks that raced.
    pub tasks: usize,
    /// Rounds each task ran.
    pub rounds: u32,
    /// Holds granted, all tasks together.
    pub holds: u64,
    /// Distinct tasks that held the lock at least once.
    pub winners: u64,
    /// Acquisitions refused because another task held it.
    pub refusals: u64,
}

impl leaseproof_history::Document for LockRaceDocument {
    const FORMAT: &'static str = "leaseproof-lock-race";
    const VERSION: u32 = 1;
}

/// The lease's race: `config`'s workers as tasks, or as `processes` OS
/// processes (0: tasks) started by `launcher` (default: this executable's
/// hidden worker subcommand), on `database_url` or a fresh database of the
/// throwaway cluster.
pub async fn race_on(
    database_url: Option<&str>,
    processes: usize,
    config: &RaceConfig,
    launcher: Option<WorkerLauncher>,
) -> Result<RaceOutcome, RaceError> {
    // The fresh database lives as long as the race.
    let mut _database = None;
    let url = match database_url {
        Some(url) => url.to_string(),
        None => {
            let server = leaseproof_pgcluster::shared_server().await?;
            let database = server.fresh_database().await?;
            let url = database.url.clone();
            _database = Some(database);
            url
        }
    };
    if processes > 0 {
        let launcher = match launcher {
            Some(launcher) => launcher,
            None => WorkerLauncher::current_exe(&[WORKER_SUBCOMMAND])?,
        };
        process_race(&url, processes, config, &launcher).await
    } else {
        task_race(&url, config).await
    }
}

/// The short race of `leaseproof verify`: 4 tasks, 6 rounds each, on a fresh
/// database of the throwaway cluster (or `DATABASE_URL`). `Err` when no server
/// is available, or when the race found a violation or was vacuous.
pub async fn verify_race() -> Result<Summary, RaceError> {
    let server = leaseproof_pgcluster::shared_server().await?;
    let database = server.fresh_database().await?;
    let outcome = task_race(&database.url, &RaceConfig::new(4, 6)).await?;
    let summary = outcome.summary();
    if summary.passed() {
        Ok(summary)
    } else {
        Err(RaceError::Failed(Box::new(summary)))
    }
}
