//! `leaseproof bench`: the contention benchmarks from the command line.
//!
//! Goal: one command that answers "what does acquisition under contention
//! cost here?" with ratios measured in one run. Method: [`BenchArgs`]
//! (clap) → `leaseproof_benches::BenchPlan` → `run_plan` on a fresh
//! database of the throwaway cluster (or the user's); this file prints the
//! table and the progress and writes `--json`.
//! Invariant: a goal not met is a failure only with `--check`; a run whose
//! outcomes were wrong is always one.

use std::process::ExitCode;

use leaseproof_benches::{run_plan, BenchPlan};
use leaseproof_history::Document as _;

/// Arguments of `leaseproof bench`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BenchArgs {
    /// Short run: 0.5 s per row (in 3 slices) at 1 and 8 contenders.
    #[arg(long)]
    pub quick: bool,
    /// Seconds each row is measured for, more than 0 and at most 600
    /// [default: 3, or 0.5 with --quick].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// Measure each row in this many slices, taking every row's slice in
    /// turn (forward, then backward) so that a machine that speeds up or slows
    /// down during the run shifts every row alike and the ratios stay
    /// comparable [default: 5, or 3 with --quick].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: Option<u32>,
    /// Exit with status 1 when a goal is not met (for CI); without it a
    /// missed goal is reported, and the exit status says only whether the
    /// benchmark ran.
    #[arg(long)]
    pub check: bool,
    /// Measure in this database (the lease and guarded tables are created in
    /// it, under scope names unique to the run). Default: a fresh database on
    /// `DATABASE_URL`'s server, else on a throwaway cluster.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Also write every row and goal as JSON (format `leaseproof-bench`,
    /// docs/json.md) here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

/// `--seconds`: a finite duration in (0, 600] (`Duration::from_secs_f64`
/// panics on a negative or NaN one).
fn parse_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("--seconds takes a number, not {text:?}"))?;
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 600.0) {
        return Err(format!(
            "--seconds {text} is out of range: more than 0, at most 600"
        ));
    }
    Ok(seconds)
}

/// Runs the benchmark on the server the arguments name and prints the table.
/// `FAILURE` when no server is available or a run's outcome was wrong; a goal
/// not met is reported, and is a failure only with `--check`.
pub async fn run_bench(args: BenchArgs) -> ExitCode {
    let plan = BenchPlan::new(args.quick, args.seconds, args.rounds);
    // Keeps the fresh database alive for the run (dropped on a DATABASE_URL server).
    let mut _fresh = None;
    let url = match &args.database_url {
        Some(url) => url.clone(),
        None => match leaseproof_pgcluster::shared_server().await {
            Ok(server) => match server.fresh_database().await {
                Ok(database) => {
                    let url = database.url.clone();
                    _fresh = Some(database);
                    url
                }
                Err(error) => {
                    eprintln!("leaseproof bench: creating a database: {error}");
                    return ExitCode::FAILURE;
                }
            },
            Err(unavailable) => {
                eprintln!("leaseproof bench: no PostgreSQL: {}", unavailable.reason);
                return ExitCode::FAILURE;
            }
        },
    };
    match run_plan(&url, &plan, &|line| eprintln!("{line}")).await {
        Ok((report, document)) => {
            print!("{report}");
            if let Some(path) = &args.json {
                if let Err(error) = std::fs::write(path, document.to_json()) {
                    eprintln!("leaseproof bench: writing {}: {error}", path.display());
                    return ExitCode::from(2);
                }
            }
            let missed = document.goals.iter().filter(|goal| !goal.met).count();
            if args.check && missed > 0 {
                eprintln!("leaseproof bench --check: {missed} goal(s) not met");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("leaseproof bench: {error}");
            ExitCode::FAILURE
        }
    }
}
