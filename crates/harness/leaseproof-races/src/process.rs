//! Process races: the same worker loop as several OS processes, each with its
//! own pool, racing for one scope.
//!
//! Goal: rule out that the task races pass only because the tasks share a
//! pool, a runtime or an address space. Method: the parent re-executes a
//! binary once per worker (the test binary running its
//! `process_race_worker_entry` test, or `leaseproof race-worker`) with the
//! worker's configuration as JSON in [`WORKER_CONFIG_ENV`]; each child waits
//! for the agreed start instant, runs [`run_worker`] stamped with an
//! [`EpochClock`] (the system clock, the only one processes share), and writes
//! its history as JSON lines to a file; the parent merges the histories
//! ([`History::merge`]), adds the guarded table's rows and checks.
//! Invariant: a child that fails, hangs or writes no history fails the race.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use leaseproof_history::{check, CheckConfig, History, Recorder};
use leaseproof_protocol::{LeaseError, LeasePort as _, Owner, Scope};
use leaseproof_worker::{run_worker, NoHooks, WorkerSummary};
use serde::{Deserialize, Serialize};

use crate::clock::{unix_now_us, EpochClock};
use crate::race::{
    connect_pool, read_guarded_rows, unique_scope, RaceConfig, RaceError, RaceOutcome,
};

/// Environment variable carrying a worker process's [`WorkerProcessConfig`] as JSON.
pub const WORKER_CONFIG_ENV: &str = "LEASEPROOF_RACE_WORKER";

/// Time the parent gives its children to start before the race begins: each
/// child waits for that moment after the parent's epoch, so they all begin
/// their first acquisition together, however slowly each process started.
pub const START_DELAY_MS: i64 = 1_000;
/// A child slower than the race bound plus this is killed and fails the race.
const CHILD_GRACE_MS: u64 = 30_000;

/// What one worker process is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerProcessConfig {
    /// The database (same for every worker of the race).
    pub url: String,
    /// The worker's name in the history.
    pub worker: String,
    /// The scope raced for.
    pub scope: String,
    /// The race's settings (the pool size is per process).
    pub race: RaceConfig,
    /// The run's zero on the system clock, µs since the Unix epoch.
    pub epoch_unix_us: i64,
    /// When to start racing, µs after the epoch.
    pub start_at_us: i64,
    /// Where to write the history (JSON lines).
    pub history_path: PathBuf,
    /// Where to write the worker's summary (JSON).
    pub summary_path: PathBuf,
    /// The process that started the race: the worker exits as soon as it is
    /// gone (SIGINT, SIGTERM, SIGKILL of the parent leave no orphan racing).
    #[serde(default)]
    pub parent_pid: Option<u32>,
}

/// The hidden subcommand of the `leaseproof` binary that runs one worker
/// process of `leaseproof race --processes` (its front end names its
/// subcommand with this constant, so the two never disagree).
pub const WORKER_SUBCOMMAND: &str = "race-worker";

/// How the parent starts a worker process: `program args…` with the
/// configuration in [`WORKER_CONFIG_ENV`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerLauncher {
    /// The executable.
    pub program: PathBuf,
    /// Arguments that make it run one worker.
    pub args: Vec<String>,
}

impl WorkerLauncher {
    /// This very executable with `args` (a test binary with `--exact <entry>`,
    /// or the CLI with its hidden `race-worker` subcommand).
    pub fn current_exe(args: &[&str]) -> Result<WorkerLauncher, RaceError> {
        let program = std::env::current_exe()
            .map_err(|error| RaceError::Process(format!("finding our own executable: {error}")))?;
        Ok(WorkerLauncher {
            program,
            args: args.iter().map(|arg| arg.to_string()).collect(),
        })
    }

    /// The test binary's worker entry: `--exact <test_name> --nocapture`.
    pub fn test_entry(test_name: &str) -> Result<WorkerLauncher, RaceError> {
        WorkerLauncher::current_exe(&["--exact", test_name, "--nocapture", "--test-threads=1"])
    }
}

/// Runs one worker as described by `config_json` (a [`WorkerProcessConfig`]),
/// writing its history and summary files. The body of `leaseproof race-worker`
/// and of the test binary's worker entry.
pub async fn run_worker_process(config_json: &str) -> ExitCode {
    match run_worker_process_checked(config_json).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("leaseproof race worker: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Polls the parent's pid from a thread of its own; exits the process (code
/// 143, as SIGTERM would) the moment this process is no longer its child —
/// the parent died and we were re-parented. Portable and without `unsafe`
/// (`PR_SET_PDEATHSIG` would need a `pre_exec` hook); 50 ms of latency.
/// A parent killed outright cannot remove the race's temp dir: each worker
/// removes its own `files` and then tries the dir, which the last one
/// to leave succeeds at.
fn exit_when_parent_is_gone(parent_pid: u32, files: Vec<PathBuf>) {
    let spawned = std::thread::Builder::new()
        .name("parent-watch".to_string())
        .spawn(move || loop {
            if std::os::unix::process::parent_id() != parent_pid {
                // Not `eprintln!`: our stderr is a pipe to the dead parent,
                // and a panic here would leave the process running.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "leaseproof race worker: parent {parent_pid} is gone; exiting"
                );
                for file in &files {
                    let _ = std::fs::remove_file(file);
                }
                if let Some(dir) = files.first().and_then(|file| file.parent()) {
                    let _ = std::fs::remove_dir(dir);
                }
                std::process::exit(143);
            }
            std::thread::sleep(Duration::from_millis(50));
        });
    if let Err(error) = spawned {
        eprintln!("leaseproof race worker: no parent watch ({error})");
    }
}

/// [`run_worker_process`] returning the summary or the error.
pub async fn run_worker_process_checked(config_json: &str) -> Result<WorkerSummary, RaceError> {
    let config: WorkerProcessConfig = serde_json::from_str(config_json)
        .map_err(|error| RaceError::Process(format!("bad worker configuration: {error}")))?;
    if let Some(parent_pid) = config.parent_pid {
        exit_when_parent_is_gone(
            parent_pid,
            vec![config.history_path.clone(), config.summary_path.clone()],
        );
    }
    let race = &config.race;
    let pool = connect_pool(
        &config.url,
        race.pool_size(),
        Duration::from_millis(race.acquire_timeout_ms),
    )
    .await?;
    let port = crate::race::port_on(pool, race);
    let clock = EpochClock {
        epoch_unix_us: config.epoch_unix_us,
    };
    let scope = Scope::new(config.scope.clone()).map_err(LeaseError::from)?;
    let stop_at_true_us = config.start_at_us
        + i64::try_from(race.duration_max_ms)
            .unwrap_or(i64::MAX / 1_000)
            .saturating_mul(1_000);
    let worker_config = race.worker_config(
        config.worker.clone(),
        Owner::generate(),
        scope,
        stop_at_true_us,
    )?;
    let wait_us = config.start_at_us - (unix_now_us() - config.epoch_unix_us);
    if wait_us > 0 {
        tokio::time::sleep(Duration::from_micros(wait_us.unsigned_abs())).await;
    }
    let recorder = Recorder::new();
    let summary = run_worker(&port, &worker_config, &clock, &NoHooks, &recorder).await;
    recorder
        .snapshot()
        .save(&config.history_path)
        .map_err(|error| RaceError::Process(error.to_string()))?;
    let summary_json = serde_json::to_string(&summary).expect("a summary serialises");
    std::fs::write(&config.summary_path, summary_json)
        .map_err(|error| RaceError::Process(format!("writing the summary: {error}")))?;
    Ok(summary)
}

/// Races `processes` worker processes started by `launcher` for one fresh
/// scope on the database at `url`; merges their histories and checks.
pub async fn process_race(
    url: &str,
    processes: usize,
    config: &RaceConfig,
    launcher: &WorkerLauncher,
) -> Result<RaceOutcome, RaceError> {
    assert!(processes >= 1);
    let started = std::time::Instant::now();
    // The parent reads the ground truth with a port of its own; creating the
    // schema here also keeps the children's concurrent creation honest (the
    // schema race has its own test).
    let port = crate::race::harness_port(
        url,
        &RaceConfig {
            pool_connections_max: 2,
            ..config.clone()
        },
    )
    .await?;
    port.ensure_schema().await?;
    let scope = unique_scope("process-race");
    let files = tempfile::tempdir()
        .map_err(|error| RaceError::Process(format!("creating a temp dir: {error}")))?;
    let epoch_unix_us = unix_now_us();
    let mut children = Vec::with_capacity(processes);
    let mut configs = Vec::with_capacity(processes);
    for index in 0..processes {
        let worker = format!("p{index}");
        let worker_config = WorkerProcessConfig {
            url: url.to_string(),
            worker: worker.clone(),
            scope: scope.clone(),
            race: config.clone(),
            epoch_unix_us,
            start_at_us: START_DELAY_MS * 1_000,
            history_path: files.path().join(format!("{worker}.history.jsonl")),
            summary_path: files.path().join(format!("{worker}.summary.json")),
            parent_pid: Some(std::process::id()),
        };
        let json = serde_json::to_string(&worker_config).expect("configs serialise");
        let child = tokio::process::Command::new(&launcher.program)
            .args(&launcher.args)
            .env(WORKER_CONFIG_ENV, json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| {
                RaceError::Process(format!("starting {}: {error}", launcher.program.display()))
            })?;
        children.push(child);
        configs.push(worker_config);
    }
    let deadline = Duration::from_millis(
        config.duration_max_ms + CHILD_GRACE_MS + u64::try_from(START_DELAY_MS).unwrap_or(0),
    );
    // Each child is awaited on its own task; on timeout the tasks are aborted,
    // which drops the children and so kills them (`kill_on_drop`).
    let waits: Vec<_> = children
        .into_iter()
        .map(|child| tokio::spawn(child.wait_with_output()))
        .collect();
    let abort_handles: Vec<_> = waits.iter().map(|wait| wait.abort_handle()).collect();
    let outputs = match tokio::time::timeout(deadline, join_all_outputs(waits)).await {
        Ok(outputs) => outputs,
        Err(_) => {
            abort_handles.iter().for_each(|handle| handle.abort());
            return Err(RaceError::Process(format!(
                "worker processes still running after {deadline:?}; killed"
            )));
        }
    };
    let mut histories = Vec::with_capacity(processes);
    let mut summaries = Vec::with_capacity(processes);
    for (worker_config, output) in configs.iter().zip(outputs) {
        let output = output
            .map_err(|error| RaceError::Process(format!("{}: {error}", worker_config.worker)))?;
        if !output.status.success() {
            return Err(RaceError::Process(format!(
                "{} exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                worker_config.worker,
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let history = History::load(&worker_config.history_path).map_err(|error| {
            RaceError::Process(format!(
                "{} wrote no readable history ({error}); stdout:\n{}",
                worker_config.worker,
                String::from_utf8_lossy(&output.stdout)
            ))
        })?;
        let summary: WorkerSummary = std::fs::read_to_string(&worker_config.summary_path)
            .map_err(|error| error.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|error| error.to_string()))
            .map_err(|error| {
                RaceError::Process(format!(
                    "{} wrote no summary: {error}",
                    worker_config.worker
                ))
            })?;
        histories.push(history);
        summaries.push((worker_config.worker.clone(), summary));
    }
    let mut history = History::merge(histories);
    history.guarded_rows = read_guarded_rows(&port, &scope).await?;
    history.tables_read.guarded = true;
    let unfenced_workers = if config.unfenced {
        summaries.iter().map(|(worker, _)| worker.clone()).collect()
    } else {
        BTreeSet::new()
    };
    let design = CheckConfig {
        unfenced_workers,
        grant_stamps: leaseproof_history::GrantStamps::Decision,
        ..Default::default()
    }
    .with_exact_stamps();
    let report = check(&history, &design);
    history.declare(design);
    Ok(RaceOutcome {
        scope,
        history,
        report,
        summaries,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

async fn join_all_outputs(
    waits: Vec<tokio::task::JoinHandle<std::io::Result<std::process::Output>>>,
) -> Vec<std::io::Result<std::process::Output>> {
    let mut outputs = Vec::with_capacity(waits.len());
    for wait in waits {
        outputs.push(wait.await.unwrap_or_else(|error| {
            Err(std::io::Error::other(format!(
                "waiting task failed: {error}"
            )))
        }));
    }
    outputs
}
