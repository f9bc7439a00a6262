//! The `leaseproof sim` and `leaseproof replay` commands, and the sweep
//! `leaseproof verify` runs.
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

use leaseproof_sim::shards::ShardReport;
use leaseproof_sim::{
    run, speed_line, sweep, RunOptions, RunOutcome, Scenario, SweepConfig, SweepSummary,
};

/// Seeds every scenario gets from `leaseproof sim` and `cargo test`.
const DEFAULT_SEEDS: Range<u64> = 0..200;

/// Failing seeds printed in detail per scenario.
const FAILURES_SHOWN: usize = 3;

/// Trace lines shown for a failing seed.
const EXCERPT_LINES: usize = 30;

/// `leaseproof sim <scenario|all> [--seeds A..B] [--shard i/n] [--jobs N] [--unfenced]`.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// A scenario name (`scenarios/<name>.toml` or an embedded default), a
    /// path to a `.toml` file, `all` — or `merge`, followed by the shard
    /// reports (`--json` files) to combine into one verdict.
    pub scenario: String,
    /// `sim merge` only: the shard reports to combine.
    #[arg(value_name = "SHARD_REPORT")]
    pub files: Vec<PathBuf>,
    /// Write the sweep's summary as JSON (format `leaseproof-sweep`,
    /// version 1; see docs/sharding.md) to this file; with `merge`, the
    /// merged summary.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Seeds to run: `A..B` (B excluded), or `random:N` — N seeds from a
    /// base drawn now and printed first, so the sweep replays exactly with
    /// `--seeds base..base+N`. Default `0..200`, or the one seed
    /// `LEASEPROOF_SEED` names.
    #[arg(long, value_parser = parse_seed_spec)]
    pub seeds: Option<SeedSpec>,
    /// Write each failing seed shown into `scenarios/regressions/` (expecting
    /// the violation it found), so every `cargo test` runs it from then on.
    #[arg(long)]
    pub save_regression: bool,
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
    /// Where the timelines of the failing seeds shown go (default:
    /// `leaseproof-out` in the temp dir).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
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
    /// delayed same-owner statement shortens a live grant (the delayed-retry bug).
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
    /// Lock scenarios: run the manager's scripts with every comparison true
    /// (release and keep-alive without their compare); `redis-pause` catches it.
    #[arg(long)]
    pub compare_skipped: bool,
    /// Lock scenarios: the lock's store forgets keys and counters at a
    /// restart (Redis without persistence); `redis-restart` catches it.
    #[arg(long)]
    pub forgetful_restarts: bool,
    /// Advisory lock scenarios: the simulated database grants an advisory
    /// lock to every session that asks (shared, not exclusive);
    /// `advisory-pause` catches it.
    #[arg(long)]
    pub shared_advisory_locks: bool,
    /// Also write the run's judged history (guarded rows included) to this
    /// file, in the format `leaseproof check` reads.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Also write the run as a self-contained HTML timeline to this file
    /// (written beside the trace anyway when the run fails).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Where to write the trace (default `leaseproof-replay-<scenario>-<seed>.trace`
    /// in `leaseproof-out` in the temp dir).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print just the verdict.
    #[arg(long)]
    pub quiet: bool,
    /// Print the whole trace (by default: its header, the lines leading to
    /// the first violation, the verdict, and where the files are).
    #[arg(long, conflicts_with = "quiet")]
    pub print_trace: bool,
}

/// What `--seeds` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedSpec {
    /// These seeds.
    Range(Range<u64>),
    /// This many seeds from a freshly drawn base.
    Random(u64),
}

fn parse_seed_spec(text: &str) -> Result<SeedSpec, String> {
    if let Some(count) = text.trim().strip_prefix("random:") {
        return match count.trim().parse::<u64>() {
            Ok(count) if (1..=1 << 40).contains(&count) => Ok(SeedSpec::Random(count)),
            _ => Err(format!(
                "random:N takes a count of 1 to 2^40 seeds, not {count:?}"
            )),
        };
    }
    parse_seeds(text).map(SeedSpec::Range)
}

/// The seeds a sweep runs: `--seeds`, else `LEASEPROOF_SEED`'s one seed,
/// else `0..200`; a random base is printed before anything runs.
fn resolve_seeds(spec: Option<&SeedSpec>) -> Result<Range<u64>, String> {
    match spec {
        Some(SeedSpec::Range(seeds)) => Ok(seeds.clone()),
        Some(SeedSpec::Random(count)) => {
            let base = leaseproof_sim::wall::random_seed_base();
            let seeds = base..base + count;
            println!(
                "LEASEPROOF SEEDS {}..{} (a random base; the same sweep again: --seeds {}..{})",
                seeds.start, seeds.end, seeds.start, seeds.end
            );
            Ok(seeds)
        }
        None => match std::env::var("LEASEPROOF_SEED") {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .map(|seed| seed..seed + 1)
                .map_err(|_| format!("LEASEPROOF_SEED={text:?} is not a seed")),
            Err(_) => Ok(DEFAULT_SEEDS),
        },
    }
}

/// `A..B` (B excluded), `A..=B` (B included) or one seed `N`.
pub fn parse_seeds(text: &str) -> Result<Range<u64>, String> {
    let parse = |number: &str| {
        number
            .trim()
            .parse::<u64>()
            .map_err(|error| format!("{number:?} is not a seed: {error}"))
    };
    if let Some((start, end)) = text.split_once("..=") {
        let (start, end) = (parse(start)?, parse(end)?);
        return match end.checked_add(1) {
            Some(after) if start <= end => Ok(start..after),
            Some(_) => Err(format!("empty seed range {text}")),
            None => Err(format!("{text}: the last seed is too large")),
        };
    }
    if let Some((start, end)) = text.split_once("..") {
        let (start, end) = (parse(start)?, parse(end)?);
        if start >= end {
            return Err(format!("empty seed range {start}..{end}"));
        }
        return Ok(start..end);
    }
    let seed = parse(text)
        .map_err(|error| format!("seeds look like A..B, A..=B, N or random:N: {error}"))?;
    seed.checked_add(1)
        .map(|after| seed..after)
        .ok_or_else(|| format!("{text}: the seed is too large"))
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
fn print_failures(
    scenario: &Scenario,
    summary: &SweepSummary,
    save_regression: bool,
    out: &std::path::Path,
) {
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
        let picture = out.join(replay_file_stem(&outcome) + ".html");
        let written = std::fs::create_dir_all(out)
            .and_then(|()| std::fs::write(&picture, outcome.timeline_html()));
        match written {
            Ok(()) => println!("timeline: {}", picture.display()),
            Err(error) => println!("timeline: cannot write {}: {error}", picture.display()),
        }
        println!("replay: {}", outcome.replay_command());
        if save_regression {
            match leaseproof_sim::save_regression(scenario, summary, failure) {
                Ok(path) => println!("regression saved: {}", path.display()),
                Err(error) => println!("regression NOT saved: {error}"),
            }
        }
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

/// A thread that turns the first Ctrl-C into a request to stop the sweep
/// (runs in progress finish, the partial summary prints with the seed to
/// resume from) and the second into an immediate exit.
fn stop_sweeps_on_interrupt() {
    let _ = std::thread::Builder::new()
        .name("interrupt".to_string())
        .spawn(|| {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if tokio::signal::ctrl_c().await.is_err() {
                    return;
                }
                leaseproof_sim::STOP_REQUESTED.store(true, std::sync::atomic::Ordering::Relaxed);
                eprintln!("\nleaseproof sim: interrupted: finishing the runs in progress (Ctrl-C again to quit now)");
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            });
        });
}

/// What the summary table's columns mean (printed under it).
const LEGEND: &str =
    "columns: seeds run; violations (checker violations plus failed expectations); \
overlaps (two workers believing at once: expected under pauses, a violation only unfenced); \
takeover (grants to a new owner); commits (ok guarded cycles); refused (stale commits the fence \
refused); unknown (operations whose outcome the worker could not know); dead-p99/max-ms (delay \
from a dead holder's expiry to the next grant); sim-s/wall-s (simulated seconds per wall second); \
seeds/s/core (seeds per second of the runs' own time: the speed one core sweeps at).";

/// Sweeps `scenarios` and prints progress and the summary table.
fn sweep_and_report(
    scenarios: &[Scenario],
    config: &SweepConfig,
    quiet: bool,
    save_regression: bool,
    out: &std::path::Path,
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
                    "{prefix:>18} [{bar:30}] {pos}/{len} seeds {elapsed_precise}, eta {eta}",
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
                summary.counts.seeds_run,
                summary.failures.len()
            );
        }
        print_failures(scenario, &summary, save_regression, out);
        let stopped = summary.resume_from;
        summaries.push(summary);
        if stopped.is_some() {
            break;
        }
    }
    println!();
    println!("{}", SweepSummary::table_header());
    for summary in &summaries {
        println!("{}", summary.table_row());
    }
    if config.unfenced {
        println!("(* every worker unfenced: violations are the expected finding)");
    }
    for summary in summaries
        .iter()
        .filter(|summary| summary.counts.known_findings > 0)
    {
        println!(
            "{}: {} of {} seeds showed what this design is known to break (the scenario's `breaks`): findings, not failures",
            summary.scenario, summary.counts.known_findings, summary.counts.seeds_run
        );
    }
    if let Some(line) = speed_line(&summaries) {
        println!("{line}");
    }
    if !quiet {
        println!("{LEGEND}");
    }
    if let Some(summary) = summaries
        .iter()
        .find(|summary| summary.resume_from.is_some())
    {
        let next = summary.resume_from.expect("found by it");
        println!(
            "STOPPED in {} before seed {next}: the rows above count the seeds done; resume with --seeds {next}..{}{}",
            summary.scenario,
            config.seeds.end,
            config
                .shard
                .map(|(index, count)| format!(" --shard {index}/{count}"))
                .unwrap_or_default()
        );
    }
    summaries
}

/// `leaseproof sim`: exit code 0 when every seed passed, 1 when one failed,
/// 2 on bad input.
pub fn run_sim(args: SimArgs) -> ExitCode {
    if args.scenario == "merge" {
        return run_merge(&args.files, args.json.as_deref());
    }
    if !args.files.is_empty() {
        eprintln!(
            "leaseproof sim: unexpected argument(s) after the scenario: {:?} (only `sim merge` takes files)",
            args.files
        );
        return ExitCode::from(2);
    }
    let scenarios = match load_scenarios(&args.scenario, args.no_schema_retry) {
        Ok(scenarios) => scenarios,
        Err(error) => {
            eprintln!("leaseproof sim: {error}");
            return ExitCode::from(2);
        }
    };
    let seeds = match resolve_seeds(args.seeds.as_ref()) {
        Ok(seeds) => seeds,
        Err(error) => {
            eprintln!("leaseproof sim: {error}");
            return ExitCode::from(2);
        }
    };
    let config = SweepConfig {
        seeds,
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
    stop_sweeps_on_interrupt();
    let out = args
        .out
        .clone()
        .unwrap_or_else(leaseproof_sim::evidence_dir);
    let summaries = sweep_and_report(&scenarios, &config, args.quiet, args.save_regression, &out);
    let interrupted = summaries
        .iter()
        .any(|summary| summary.resume_from.is_some());
    // `sim all` also runs every seed that once failed.
    let regressions_failed = if args.scenario == "all" && !interrupted {
        run_regressions()
    } else {
        0
    };
    if let Some(path) = &args.json {
        let report = ShardReport::new(&config.seeds, config.shard, config.unfenced, &summaries);
        if let Err(error) = std::fs::write(path, report.to_json()) {
            eprintln!("leaseproof sim: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("summary written to {}", path.display());
    }
    if interrupted {
        return ExitCode::from(130);
    }
    if regressions_failed == 0 && summaries.iter().all(|summary| summary.failures.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs every regression file; prints one line for each that broke its
/// expectation and a count; returns how many broke it.
fn run_regressions() -> usize {
    let regressions = match leaseproof_sim::regressions() {
        Ok(regressions) => regressions,
        Err(error) => {
            println!("regressions: cannot read them: {error}");
            return 1;
        }
    };
    let mut failed = 0;
    for (path, regression) in &regressions {
        if let Err(error) = leaseproof_sim::run_regression(regression) {
            failed += 1;
            println!("regression FAILED: {}: {error}", path.display());
        }
    }
    println!(
        "regressions: {} of {} seeds that once failed behave as recorded",
        regressions.len() - failed,
        regressions.len()
    );
    failed
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

/// `leaseproof sim merge FILE…`: exit 0 when the shards make one whole sweep
/// and every seed passed; 1 when a seed failed or a shard is missing, given
/// twice or from another sweep; 2 when a file cannot be read.
fn run_merge(files: &[PathBuf], json: Option<&std::path::Path>) -> ExitCode {
    if files.is_empty() {
        eprintln!("leaseproof sim merge: name the shard reports to merge (the --json files of `sim --shard i/n`)");
        return ExitCode::from(2);
    }
    let mut reports = Vec::with_capacity(files.len());
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("leaseproof sim merge: {}: {error}", file.display());
                return ExitCode::from(2);
            }
        };
        match ShardReport::from_json(&text) {
            Ok(report) => reports.push(report),
            Err(error) => {
                eprintln!("leaseproof sim merge: {}: {error}", file.display());
                return ExitCode::from(2);
            }
        }
    }
    let merged = match leaseproof_sim::shards::merge(&reports) {
        Ok(merged) => merged,
        Err(error) => {
            eprintln!("leaseproof sim merge: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} shard(s) of seeds {}..{}{}",
        reports.len(),
        merged.seeds[0],
        merged.seeds[1],
        if merged.unfenced { ", unfenced" } else { "" }
    );
    println!("{}", SweepSummary::table_header());
    for scenario in &merged.scenarios {
        println!("{}", scenario.to_summary(merged.unfenced).table_row());
        for seed in scenario.failing_seeds.iter().take(FAILURES_SHOWN) {
            println!(
                "  FAILED seed {}: {}  (replay: {} replay {} --seed {}{})",
                seed.seed,
                seed.first_problem,
                leaseproof_sim::invocation(),
                scenario.scenario,
                seed.seed,
                if merged.unfenced { " --unfenced" } else { "" }
            );
        }
    }
    let merged_summaries: Vec<SweepSummary> = merged
        .scenarios
        .iter()
        .map(|scenario| scenario.to_summary(merged.unfenced))
        .collect();
    if let Some(line) = speed_line(&merged_summaries) {
        println!("{line}");
    }
    if let Some(path) = json {
        if let Err(error) = std::fs::write(path, merged.to_json()) {
            eprintln!("leaseproof sim merge: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    if merged.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `leaseproof replay`: prints the whole trace and writes it to a file; exit
/// code 1 when the run fails (the usual reason to replay it).
pub fn run_replay(args: ReplayArgs) -> ExitCode {
    let outputs = [
        ("--history", args.history.as_deref()),
        ("--html", args.html.as_deref()),
        ("--out", args.out.as_deref()),
    ];
    if let Err(code) = crate::evidence::refuse_unwritable_outputs("replay", &outputs) {
        return code;
    }
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
        compare_skipped: args.compare_skipped,
        forgetful_restarts: args.forgetful_restarts,
        shared_advisory_locks: args.shared_advisory_locks,
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
    let path = match &args.out {
        Some(path) => path.clone(),
        None => {
            let dir = leaseproof_sim::evidence_dir();
            if let Err(error) = std::fs::create_dir_all(&dir) {
                eprintln!(
                    "leaseproof replay: cannot create {}: {error}",
                    dir.display()
                );
                return ExitCode::from(2);
            }
            dir.join(replay_file_stem(&outcome) + ".trace")
        }
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = if args.quiet {
        // The verdict, whatever it is: a quiet replay still answers.
        let verdict = if outcome.is_ok() { "PASS" } else { "FAIL" };
        writeln!(stdout, "{verdict}: {} seed {}", scenario.name, args.seed)
    } else if args.print_trace {
        stdout.write_all(text.as_bytes())
    } else {
        print_replay_summary(&mut stdout, &outcome)
    };
    drop(stdout);
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
        Ok(()) => eprintln!(
            "trace written to {} ({} lines; --print-trace prints it all)",
            path.display(),
            outcome.trace.len()
        ),
        Err(error) => {
            eprintln!(
                "leaseproof replay: cannot write {}: {error}",
                path.display()
            );
            return ExitCode::from(2);
        }
    }
    for violation in outcome.known_violations() {
        eprintln!("FOUND (a break this design is known for, not a failure): {violation}");
    }
    if outcome.is_ok() {
        ExitCode::SUCCESS
    } else {
        eprintln!("FAILED: {}", outcome.first_problem().unwrap_or_default());
        ExitCode::FAILURE
    }
}

/// What a replay prints by default: the run's header (seed, scenario, the
/// faults drawn), the trace lines leading to the first violation, and the
/// verdict line the trace ends with.
fn print_replay_summary(
    out: &mut impl std::io::Write,
    outcome: &RunOutcome,
) -> std::io::Result<()> {
    for line in &outcome.header {
        writeln!(out, "{line}")?;
    }
    if !outcome.is_ok() {
        writeln!(
            out,
            "trace excerpt (last {EXCERPT_LINES} lines before the violation):"
        )?;
        for line in outcome.trace_excerpt(EXCERPT_LINES) {
            writeln!(out, "  {line}")?;
        }
    }
    let verdict: Vec<&String> = outcome
        .trace
        .iter()
        .rev()
        .take_while(|line| !line.starts_with("[sim "))
        .collect();
    for line in verdict.into_iter().rev() {
        writeln!(out, "{line}")?;
    }
    Ok(())
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
