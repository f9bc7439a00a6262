//! `leaseproof race`: the real-server race of the lease's worker loop, or of
//! a lock manager, from the command line.
//!
//! Goal: let a user run the real-server race on the throwaway cluster or on a
//! server of their own and read the checker's verdict. Method: [`RaceArgs`]
//! (clap) → `RaceConfig` → `leaseproof_races::race_on` (tasks, or worker
//! processes: this executable re-run with its hidden worker subcommand) or
//! `leaseproof_races::lock_race`; this file prints and writes the files.
//! Invariant: the exit code is success only when the checker found no
//! violation and the race was real.

use crate::evidence::{Announce, Evidence};
use std::process::ExitCode;

use leaseproof_history::Document as _;
use leaseproof_races::{
    lock_race, race_on, LockRace, ManagerKind, RaceConfig, RaceDocument, RaceFence, RaceReadFirst,
};

/// `leaseproof race [--workers N] [--rounds R] [--processes P] [--database-url URL]`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct RaceArgs {
    /// Racing tasks, 2 to 256 (one task races nobody; ignored when
    /// --processes is given).
    #[arg(long, default_value_t = 8, value_parser = parse_workers, allow_negative_numbers = true)]
    pub workers: usize,
    /// Guarded cycles each worker commits, 1 to 100000.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000), allow_negative_numbers = true)]
    pub rounds: u32,
    /// Race this many OS processes instead of tasks: 0 (tasks) or 2 to
    /// 64 (each process holds its own pool; more would exhaust the server's
    /// connections and this machine).
    #[arg(long, default_value_t = 0, value_parser = parse_processes, allow_negative_numbers = true)]
    pub processes: usize,
    /// Lease TTL in milliseconds, 1 to 604800000 (7 days, the protocol's bound).
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(i64).range(1..=604_800_000), allow_negative_numbers = true)]
    pub ttl_ms: i64,
    /// A server to race on; default: the throwaway cluster from the system's
    /// binaries (or DATABASE_URL). The race creates `leaseproof_leases` and
    /// `leaseproof_guarded` in that database and uses a fresh scope.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Race a lock manager (pg_partsmith's designs) instead of the lease's worker loop:
    /// `advisory`, `redis` or `lease`, through its `LockManager` API, judged
    /// by the conformance suite's real-time mutual-exclusion check. `redis`
    /// uses `--redis-url`, else `REDIS_URL` or a throwaway `redis-server`.
    #[arg(long, value_parser = parse_lock)]
    pub lock: Option<ManagerKind>,
    /// The Redis server for `--lock redis`.
    #[arg(long)]
    pub redis_url: Option<String>,
    /// Offset the workers' local clocks by up to this many ms (spread from
    /// -N to +N): the lease decides on the server's clock, so nothing changes
    /// but the workers' beliefs.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..=86_400_000), allow_negative_numbers = true)]
    pub clock_offset_ms: i64,
    /// Drift the workers' local clocks by up to this many parts per million,
    /// alternating slow and fast.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..500_000), allow_negative_numbers = true)]
    pub clock_drift_ppm: i64,
    /// Which of the library's fences the guarded writes commit under:
    /// `for-update` (the commit cycle's default), `for-share` (the shared
    /// fence), `single-statement` (the one-statement guarded insert).
    #[arg(long, default_value = "for-update", value_parser = parse_fence)]
    pub fence: RaceFence,
    /// When the library's acquisition reads the row before its statement:
    /// `after-refusal` (the default: on a scope this worker saw refused),
    /// `always`, `never` (the one statement every time).
    #[arg(long, default_value = "after-refusal", value_parser = parse_read_first)]
    pub read_first: RaceReadFirst,
    /// Write the judged history (merged over processes, with the guarded
    /// rows) to this file, in the format `leaseproof check` reads.
    #[arg(long, value_name = "FILE")]
    pub history: Option<std::path::PathBuf>,
    /// Draw the judged history as a self-contained HTML timeline here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
    /// Also write the verdict as JSON here (format `leaseproof-race`, or
    /// `leaseproof-lock-race` with `--lock`; docs/json.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

/// The most worker processes `race --processes` starts.
pub const PROCESSES_MAX: usize = 64;
/// The most racing tasks `race --workers` starts.
pub const WORKERS_MAX: usize = 256;

fn parse_count(text: &str, flag: &str, minimum: usize, maximum: usize) -> Result<usize, String> {
    let count: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{flag} takes a whole number, not {text:?}"))?;
    if count < minimum || count > maximum {
        return Err(format!(
            "{flag} {count} is out of range: {minimum} to {maximum}"
        ));
    }
    Ok(count)
}

fn parse_fence(text: &str) -> Result<RaceFence, String> {
    match text.trim() {
        "for-update" => Ok(RaceFence::ForUpdate),
        "for-share" => Ok(RaceFence::ForShare),
        "single-statement" => Ok(RaceFence::SingleStatement),
        other => Err(format!(
            "--fence {other:?}: for-update, for-share or single-statement"
        )),
    }
}

fn parse_read_first(text: &str) -> Result<RaceReadFirst, String> {
    match text.trim() {
        "never" => Ok(RaceReadFirst::Never),
        "after-refusal" => Ok(RaceReadFirst::AfterRefusal),
        "always" => Ok(RaceReadFirst::Always),
        other => Err(format!(
            "--read-first {other:?}: never, after-refusal or always"
        )),
    }
}

fn parse_workers(text: &str) -> Result<usize, String> {
    parse_count(text, "--workers", 2, WORKERS_MAX)
        .map_err(|error| format!("{error} (a race needs two workers)"))
}

fn parse_processes(text: &str) -> Result<usize, String> {
    match text.trim() {
        "0" => Ok(0),
        _ => parse_count(text, "--processes", 2, PROCESSES_MAX)
            .map_err(|error| format!("{error}, or 0 for tasks")),
    }
}

/// Resolves when the process is asked to stop (SIGINT or SIGTERM); names the
/// signal. Dropping a race's future on it kills the worker processes
/// (`kill_on_drop`) and removes the temp dir of their histories.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match terminate.as_mut() {
            Some(terminate) => {
                terminate.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        () = terminated => "SIGTERM",
    }
}

fn parse_lock(text: &str) -> Result<ManagerKind, String> {
    ManagerKind::from_name(text.trim())
        .ok_or_else(|| format!("--lock {text:?}: advisory, redis or lease"))
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
            clock_offset_ms_max: self.clock_offset_ms,
            clock_drift_ppm_max: self.clock_drift_ppm,
            fence: self.fence,
            read_first: self.read_first,
            ..RaceConfig::new(workers, self.rounds)
        }
    }
}

/// Runs the race the arguments describe and prints the summary; success only
/// for a clean, real race.
pub async fn run_race(args: RaceArgs) -> ExitCode {
    let outputs = [
        ("--history", args.history.as_deref()),
        ("--html", args.html.as_deref()),
        ("--json", args.json.as_deref()),
    ];
    if let Err(code) = crate::evidence::refuse_unwritable_outputs("race", &outputs) {
        return code;
    }
    if let Some(lock) = args.lock {
        let race = LockRace {
            lock,
            tasks: args.workers,
            rounds: args.rounds,
            ttl_ms: args.ttl_ms,
            database_url: args.database_url.clone(),
            redis_url: args.redis_url.clone(),
        };
        let lock = lock.name();
        return match lock_race(&race).await {
            Ok(document) => {
                println!(
                    "PASS {lock}: {} tasks x {} rounds, {} holds by {} distinct tasks, {} refusals, no certain double hold",
                    document.tasks, document.rounds, document.holds, document.winners, document.refusals
                );
                if let Some(path) = &args.json {
                    if let Err(error) = std::fs::write(path, document.to_json()) {
                        eprintln!("leaseproof race: writing {}: {error}", path.display());
                        return ExitCode::from(2);
                    }
                }
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("leaseproof race --lock {lock}: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let config = args.race_config();
    let outcome = tokio::select! {
        outcome = race_on(args.database_url.as_deref(), args.processes, &config, None) => outcome,
        signal = interrupted() => {
            eprintln!("leaseproof race: {signal}: stopped; worker processes killed, temp files removed");
            return ExitCode::from(130);
        }
    };
    match outcome {
        Ok(outcome) => {
            let evidence = Evidence {
                command: "race",
                title: format!("race of {} workers on {}", args.workers, outcome.scope),
                history: &outcome.history,
                report: &outcome.report,
                marks: &[],
            };
            if let Err(code) = evidence.write(
                args.history.as_deref(),
                args.html.as_deref(),
                Announce::Stderr,
            ) {
                return code;
            }
            let summary = outcome.summary();
            print!("{summary}");
            if let Some(path) = &args.json {
                let document = RaceDocument {
                    format: RaceDocument::FORMAT.to_string(),
                    version: RaceDocument::VERSION,
                    passed: summary.passed(),
                    processes: args.processes,
                    rounds: args.rounds,
                    ttl_ms: args.ttl_ms,
                    summary: summary.clone(),
                };
                if let Err(error) = std::fs::write(path, document.to_json()) {
                    eprintln!("leaseproof race: writing {}: {error}", path.display());
                    return ExitCode::from(2);
                }
            }
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
