//! The `leaseproof sim`, `leaseproof replay` and `leaseproof verify` commands.
//!
//! Goal: sweep scenarios by seed, replay one seed with its whole trace, and
//! run the default verification sweep, from the `leaseproof` binary. Method:
//! clap argument structs the binary flattens into its subcommands, and
//! functions returning the process's exit code. A failing seed is re-run
//! with tracing on (runs are deterministic) to print its violation, a trace
//! excerpt and the one line that replays it.

use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::run::{run, RunOptions, RunOutcome};
use crate::scenario::Scenario;
use crate::sweep::{sweep, SweepConfig, SweepSummary};

/// Seeds every scenario gets from `leaseproof verify` and `cargo test`.
pub const DEFAULT_SEEDS: Range<u64> = 0..200;

/// Failing seeds printed in detail per scenario.
const FAILURES_SHOWN: usize = 3;

/// Trace lines shown for a failing seed.
const EXCERPT_LINES: usize = 30;

/// `leaseproof sim <scenario|all> [--seeds A..B] [--shard i/n] [--jobs N] [--unfenced]`.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// A scenario name (`scenarios/<name>.toml` or an embedded default), a
    /// path to a `.toml` file, or `all`.
    pub scenario: String,
    /// Seeds to run, `A..B` (B excluded).
    #[arg(long, default_value = "0..200", value_parser = parse_seeds)]
    pub seeds: Range<u64>,
    /// Run only this machine's share of the seeds: `i/n` runs seeds with `seed % n == i`.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<(u64, u64)>,
    /// Seeds run in parallel (OS threads), 1 to 256; defaults to the number of cores.
    #[arg(long, value_parser = parse_jobs, allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// Every worker commits without the fence: the sweep must find violations.
    #[arg(long)]
    pub unfenced: bool,
    /// Disable the port's one retry of `ensure_schema` (shows the schema race).
    #[arg(long)]
    pub no_schema_retry: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// `leaseproof replay <scenario> --seed <n>`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ReplayArgs {
    /// The scenario name or path.
    pub scenario: String,
    /// The seed to replay.
    #[arg(long, allow_negative_numbers = true)]
    pub seed: u64,
    /// Replay with every worker unfenced.
    #[arg(long)]
    pub unfenced: bool,
    /// Disable the port's one retry of `ensure_schema`.
    #[arg(long)]
    pub no_schema_retry: bool,
    /// Run the simulated database with the broken pre-fix extension rule: a
    /// delayed same-owner statement shortens a live grant (issue 15).
    #[arg(long)]
    pub shortening_extensions: bool,
    /// Run the simulated database with a fence that keeps no row lock (as if
    /// it ran in a transaction of its own); `cycle-pause` catches it.
    #[arg(long)]
    pub fence_without_lock: bool,
    /// Run the simulated database deciding with each client's clock instead
    /// of its own; `skewed-clocks` catches it in true time.
    #[arg(long)]
    pub clock_follows_client: bool,
    /// Also write the run's judged history (guarded rows included) to this
    /// file, in the format `leaseproof check` reads.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Also write the run as a self-contained HTML timeline to this file
    /// (written beside the trace anyway when the run fails).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Where to write the trace (default `leaseproof-replay-<scenario>-<seed>.trace`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the trace file only; print just the verdict.
    #[arg(long)]
    pub quiet: bool,
}

fn parse_seeds(text: &str) -> Result<Range<u64>, String> {
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| format!("seeds must look like A..B, not {text:?}"))?;
    let start: u64 = start
        .trim()
        .parse()
        .map_err(|error| format!("{start:?}: {error}"))?;
    let end: u64 = end
        .trim()
        .parse()
        .map_err(|error| format!("{end:?}: {error}"))?;
    if start >= end {
        return Err(format!("empty seed range {start}..{end}"));
    }
    Ok(start..end)
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let (index, count) = text
        .split_once('/')
        .ok_or_else(|| format!("shard must look like i/n, not {text:?}"))?;
    let index: u64 = index
        .trim()
        .parse()
        .map_err(|error| format!("{index:?}: {error}"))?;
    let count: u64 = count
        .trim()
        .parse()
        .map_err(|error| format!("{count:?}: {error}"))?;
    if count == 0 || index >= count {
        return Err(format!("shard {index}/{count}: need 0 <= i < n"));
    }
    Ok((index, count))
}

fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(jobs) if (1..=256).contains(&jobs) => Ok(jobs),
        Ok(jobs) => Err(format!("--jobs {jobs} is out of range: 1 to 256")),
        Err(_) => Err(format!("--jobs takes a whole number, not {text:?}")),
    }
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn load_scenarios(name: &str, no_schema_retry: bool) -> Result<Vec<Scenario>, String> {
    let mut scenarios = if name == "all" {
        Scenario::all().map_err(|error| error.to_string())?
    } else {
        vec![Scenario::load(name).map_err(|error| error.to_string())?]
    };
    if no_schema_retry {
        for scenario in &mut scenarios {
            scenario.schema_retry = false;
        }
    }
    Ok(scenarios)
}

/// Prints the failing seeds of `summary` in detail: the `SEED=` line, the
/// violation, a trace excerpt and the replay line.
fn print_failures(scenario: &Scenario, summary: &SweepSummary) {
    for failure in summary.failures.iter().take(FAILURES_SHOWN) {
        let options = RunOptions {
            unfenced: summary.unfenced,
            trace: true,
            ..RunOptions::default()
        };
        let outcome = run(scenario, failure.seed, options);
        println!();
        for line in &outcome.header {
            println!("{line}");
        }
        println!(
            "FAILED: {} problem(s); first: {}",
            failure.problems, failure.first_problem
        );
        println!("trace excerpt (last {EXCERPT_LINES} lines before the violation):");
        for line in outcome.trace_excerpt(EXCERPT_LINES) {
            println!("  {line}");
        }
        let picture = PathBuf::from(replay_file_stem(&outcome) + ".html");
        match std::fs::write(&picture, outcome.timeline_html()) {
            Ok(()) => println!("timeline: {}", picture.display()),
            Err(error) => println!("timeline: cannot write {}: {error}", picture.display()),
        }
        println!("replay: {}", outcome.replay_command());
    }
    if summary.failures.len() > FAILURES_SHOWN {
        let more: Vec<String> = summary.failures[FAILURES_SHOWN..]
            .iter()
            .take(20)
            .map(|failure| failure.seed.to_string())
            .collect();
        println!(
            "... and {} more failing seed(s): {}{}",
            summary.failures.len() - FAILURES_SHOWN,
            more.join(", "),
            if summary.failures.len() > FAILURES_SHOWN + 20 {
                ", ..."
            } else {
                ""
            }
        );
    }
}

/// Sweeps `scenarios` and prints progress and the summary table.
fn sweep_and_report(
    scenarios: &[Scenario],
    config: &SweepConfig,
    quiet: bool,
) -> Vec<SweepSummary> {
    let mut summaries = Vec::new();
    for scenario in scenarios {
        let seeds = config.seeds().len() as u64;
        let bar = if quiet {
            indicatif::ProgressBar::hidden()
        } else {
            let bar = indicatif::ProgressBar::new(seeds);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix:>18} [{bar:30}] {pos}/{len} seeds {elapsed_precise}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(scenario.name.clone());
            bar
        };
        let summary = sweep(scenario, config, &|done| bar.set_position(done));
        bar.finish_and_clear();
        if !quiet {
            println!(
                "{}: {} seeds, {} failing",
                scenario.name,
                summary.seeds_run,
                summary.failures.len()
            );
        }
        print_failures(scenario, &summary);
        summaries.push(summary);
    }
    println!();
    println!("{}", SweepSummary::table_header());
    for summary in &summaries {
        println!("{}", summary.table_row());
    }
    if config.unfenced {
        println!("(* every worker unfenced: violations are the expected finding)");
    }
    summaries
}

/// `leaseproof sim`: exit code 0 when every seed passed, 1 when one failed,
/// 2 on bad input.
pub fn run_sim(args: SimArgs) -> ExitCode {
    let scenarios = match load_scenarios(&args.scenario, args.no_schema_retry) {
        Ok(scenarios) => scenarios,
        Err(error) => {
            eprintln!("leaseproof sim: {error}");
            return ExitCode::from(2);
        }
    };
    let config = SweepConfig {
        seeds: args.seeds,
        shard: args.shard,
        jobs: args.jobs.unwrap_or_else(default_jobs),
        unfenced: args.unfenced,
    };
    if config.seeds().is_empty() {
        // A shard with nothing to run would report "clean" about nothing.
        let (index, count) = config.shard.unwrap_or((0, 1));
        eprintln!(
            "leaseproof sim: shard {index}/{count} holds no seed of {}..{}: widen --seeds or use fewer shards",
            config.seeds.start, config.seeds.end
        );
        return ExitCode::from(2);
    }
    let summaries = sweep_and_report(&scenarios, &config, args.quiet);
    if summaries.iter().all(|summary| summary.failures.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `leaseproof-replay-<scenario>-<seed>[-<flag>…]`: every option that changes
/// the run is in the name, so two replays of one seed with different options
/// do not overwrite each other's files.
fn replay_file_stem(outcome: &RunOutcome) -> String {
    let mut name = format!("leaseproof-replay-{}-{}", outcome.scenario, outcome.seed);
    for (set, suffix) in outcome.options.flags() {
        if set {
            name.push('-');
            name.push_str(suffix);
        }
    }
    name
}

/// `leaseproof replay`: prints the whole trace and writes it to a file; exit
/// code 1 when the run fails (the usual reason to replay it).
pub fn run_replay(args: ReplayArgs) -> ExitCode {
    let scenario = match load_scenarios(&args.scenario, args.no_schema_retry) {
        Ok(mut scenarios) => scenarios.remove(0),
        Err(error) => {
            eprintln!("leaseproof replay: {error}");
            return ExitCode::from(2);
        }
    };
    let options = RunOptions {
        unfenced: args.unfenced,
        trace: true,
        no_schema_retry: args.no_schema_retry,
        shortening_extensions: args.shortening_extensions,
        fence_without_lock: args.fence_without_lock,
        clock_follows_client: args.clock_follows_client,
    };
    let outcome = run(&scenario, args.seed, options);
    if let Some(path) = &args.history {
        if let Err(error) = outcome.history.save(path) {
            eprintln!("leaseproof replay: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("history written to {}", path.display());
    }
    let text = outcome.trace.join("\n") + "\n";
    if args.quiet {
        // The verdict, whatever it is: a quiet replay still answers.
        let verdict = if outcome.is_ok() { "PASS" } else { "FAIL" };
        println!("{verdict}: {} seed {}", scenario.name, args.seed);
    } else {
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }
    let path = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(replay_file_stem(&outcome) + ".trace"));
    // The picture: where asked, and beside the trace of every failing replay.
    let picture = args
        .html
        .clone()
        .or_else(|| (!outcome.is_ok()).then(|| path.with_extension("html")));
    if let Some(picture) = &picture {
        match std::fs::write(picture, outcome.timeline_html()) {
            Ok(()) => eprintln!("timeline written to {}", picture.display()),
            Err(error) => {
                eprintln!(
                    "leaseproof replay: cannot write {}: {error}",
                    picture.display()
                );
                return ExitCode::from(2);
            }
        }
    }
    match std::fs::write(&path, &text) {
        Ok(()) => eprintln!("trace written to {}", path.display()),
        Err(error) => {
            eprintln!(
                "leaseproof replay: cannot write {}: {error}",
                path.display()
            );
            return ExitCode::from(2);
        }
    }
    if outcome.is_ok() {
        ExitCode::SUCCESS
    } else {
        eprintln!("FAILED: {}", outcome.first_problem().unwrap_or_default());
        ExitCode::FAILURE
    }
}

/// The default sweep of every scenario (the reference, fenced), on all cores,
/// without printing: what `leaseproof verify` runs.
pub fn verify_sweep(seeds: Range<u64>) -> Vec<SweepSummary> {
    let config = SweepConfig {
        seeds,
        shard: None,
        jobs: default_jobs(),
        unfenced: false,
    };
    Scenario::all_embedded()
        .iter()
        .map(|scenario| sweep(scenario, &config, &|_| {}))
        .collect()
}

/// `leaseproof verify`'s simulation part: the default sweep of every scenario
/// with the summary table; exit code 1 when any seed failed.
pub fn run_verify() -> ExitCode {
    let scenarios = match Scenario::all() {
        Ok(scenarios) => scenarios,
        Err(error) => {
            eprintln!("leaseproof verify: {error}");
            return ExitCode::from(2);
        }
    };
    let config = SweepConfig {
        seeds: DEFAULT_SEEDS,
        shard: None,
        jobs: default_jobs(),
        unfenced: false,
    };
    let summaries = sweep_and_report(&scenarios, &config, false);
    if summaries.iter().all(|summary| summary.failures.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
