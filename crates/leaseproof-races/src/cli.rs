//! The races as the `leaseproof` CLI runs them: `leaseproof race` and the short
//! race inside `leaseproof verify`.
//!
//! Goal: let a user run the real-server race on the throwaway cluster or on a
//! server of their own and read the checker's verdict. Method: [`RaceArgs`]
//! (clap) → [`RaceConfig`] → [`task_race`] or [`process_race`] (worker
//! processes are this executable re-run with the hidden `race-worker`
//! subcommand, whose glue calls [`crate::run_worker_process`]).
//! Invariant: the exit code is success only when the checker found no
//! violation and the race was real.

use std::process::ExitCode;

use crate::process::{process_race, WorkerLauncher};
use crate::race::{task_race, RaceConfig, RaceError, RaceOutcome, Summary};

/// The hidden subcommand that runs one worker process of `leaseproof race --processes`.
pub const WORKER_SUBCOMMAND: &str = "race-worker";

/// `leaseproof race [--workers N] [--rounds R] [--processes P] [--database-url URL]`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct RaceArgs {
    /// Racing tasks (ignored when --processes is given).
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Guarded cycles each worker commits.
    #[arg(long, default_value_t = 10)]
    pub rounds: u32,
    /// Race this many OS processes instead of tasks (0: tasks).
    #[arg(long, default_value_t = 0)]
    pub processes: usize,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 150)]
    pub ttl_ms: i64,
    /// A server to race on; default: the throwaway cluster from the system's
    /// binaries (or DATABASE_URL). The race creates `leaseproof_leases` and
    /// `leaseproof_guarded` in that database and uses a fresh scope.
    #[arg(long)]
    pub database_url: Option<String>,
}

impl RaceArgs {
    /// The race configuration these arguments describe.
    pub fn race_config(&self) -> RaceConfig {
        let workers = if self.processes > 0 {
            self.processes
        } else {
            self.workers
        };
        RaceConfig {
            ttl_ms: self.ttl_ms,
            pool_connections_max: if self.processes > 0 { 2 } else { 0 },
            ..RaceConfig::new(workers.max(1), self.rounds.max(1))
        }
    }
}

/// Runs the race the arguments describe and prints the summary; success only
/// for a clean, real race.
pub async fn run_race(args: RaceArgs) -> ExitCode {
    run_race_with(args, None).await
}

/// [`run_race`] with another way to start worker processes than this
/// executable's `race-worker` subcommand (tests use their own entry point).
pub async fn run_race_with(args: RaceArgs, launcher: Option<WorkerLauncher>) -> ExitCode {
    match race(&args, launcher).await {
        Ok(outcome) => {
            let summary = outcome.summary();
            print!("{summary}");
            if summary.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("leaseproof race: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn race(args: &RaceArgs, launcher: Option<WorkerLauncher>) -> Result<RaceOutcome, RaceError> {
    // The fresh database lives as long as the race.
    let mut _database = None;
    let url = match &args.database_url {
        Some(url) => url.clone(),
        None => {
            let server = leaseproof_pgcluster::shared_server().await?;
            let database = server.fresh_database().await?;
            let url = database.url.clone();
            _database = Some(database);
            url
        }
    };
    let config = args.race_config();
    if args.processes > 0 {
        let launcher = match launcher {
            Some(launcher) => launcher,
            None => WorkerLauncher::current_exe(&[WORKER_SUBCOMMAND])?,
        };
        process_race(&url, args.processes, &config, &launcher).await
    } else {
        task_race(&url, &config).await
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
