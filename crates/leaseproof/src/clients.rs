//! `leaseproof clients`: point the harness at a lock client in any language.
//!
//! Starts N processes of the given command, drives them over the client
//! protocol (docs/client-protocol.md) under a fault plan drawn from each
//! seed, and judges the recorded history with the one checker. Exit codes:
//! 0 no violation, 1 a violation (or, with `--fail-on-possible`, a finding
//! the evidence could not decide), 2 bad input (a client that printed
//! something else than the protocol, or could not start), 3 every run
//! vacuous.

use crate::evidence::{Announce, Evidence};
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use leaseproof_races::clients::{run_clients, ClientRunConfig, ClientRunReport, FaultKind};

/// `leaseproof clients --client CMD [--seeds A..B] …`.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientsArgs {
    /// The client's command line, run by `sh -c` once per process start,
    /// e.g. `python3 examples/clients/python/partsmith_redis.py`.
    #[arg(long, value_name = "COMMAND")]
    pub client: String,
    /// How many client processes contend for one lock.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=16))]
    pub clients: u16,
    /// One seed: the fault plan and the workers' choices.
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// A range of seeds, `A..B` or `A..=B`, one run each.
    #[arg(long, value_parser = crate::sim::parse_seeds)]
    pub seeds: Option<Range<u64>>,
    /// How long workers keep acquiring, in ms.
    #[arg(long, default_value_t = 12_000, value_parser = clap::value_parser!(u64).range(1_000..=600_000))]
    pub duration_ms: u64,
    /// The TTL asked of locks that have one, in ms.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub ttl_ms: u64,
    /// Fault kinds a seed may turn on: `all`, `none`, or a comma list of
    /// pause-short, pause-long, kill, partition, lose-reply, reset, latency,
    /// terminate-backends, redis-restart, clock-skew, terminate-lock-session,
    /// stall-after-reply, partition-lock-store (the last three aimed at
    /// protocol moments).
    #[arg(long, default_value = "all", value_parser = parse_faults)]
    pub faults: FaultList,
    /// Write the judged history of the (single) run here (docs/history-format.md).
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Draw the judged history of the (single) run as an HTML timeline here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Where the history and timeline of every seed with a violation go
    /// (`clients-DESIGN-seed-N.jsonl`, `.html`, DESIGN the hello's name in
    /// lower case, each run of other characters a `-`); default: `leaseproof-out` in the
    /// system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Append one JSON line per seed here: the design, the plan's fault
    /// kinds, the verdict, the violated invariants and the counts.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Exit 1 also when a run's checker could not decide a possible
    /// violation (by default those are printed and do not fail).
    #[arg(long)]
    pub fail_on_possible: bool,
}

/// The fault kinds allowed (a newtype so clap keeps it one value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultList(pub Vec<FaultKind>);

fn parse_faults(text: &str) -> Result<FaultList, String> {
    match text {
        "all" => Ok(FaultList(FaultKind::ALL.to_vec())),
        "none" => Ok(FaultList(vec![])),
        list => list
            .split(',')
            .map(|name| FaultKind::parse(name.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map(FaultList),
    }
}

impl ClientsArgs {
    fn config(&self, seed: u64) -> ClientRunConfig {
        let mut config = ClientRunConfig::new(self.client.clone(), seed);
        config.clients = usize::from(self.clients);
        config.duration = Duration::from_millis(self.duration_ms);
        config.ttl = Duration::from_millis(self.ttl_ms);
        config.faults = self.faults.0.clone();
        config
    }

    fn replay_line(&self, seed: u64) -> String {
        let faults: Vec<&str> = self.faults.0.iter().map(|kind| kind.name()).collect();
        let faults = if faults.len() == FaultKind::ALL.len() {
            String::new()
        } else if faults.is_empty() {
            " --faults none".to_string()
        } else {
            format!(" --faults {}", faults.join(","))
        };
        format!(
            "{} clients --client '{}' --clients {} --duration-ms {} --ttl-ms {}{faults} --seed {seed}",
            leaseproof_sim::invocation(),
            self.client.replace('\'', "'\\''"),
            self.clients,
            self.duration_ms,
            self.ttl_ms,
        )
    }
}

/// Runs `leaseproof clients`.
pub async fn run(args: ClientsArgs) -> ExitCode {
    let seeds = match (&args.seeds, args.seed) {
        (Some(seeds), _) => seeds.clone(),
        (None, Some(seed)) => seed..seed + 1,
        (None, None) => 0..1,
    };
    let single = seeds.end - seeds.start == 1;
    if !single && (args.history.is_some() || args.html.is_some()) {
        eprintln!("leaseproof clients: --history and --html need a single --seed");
        return ExitCode::from(2);
    }
    let outputs = [
        ("--history", args.history.as_deref()),
        ("--html", args.html.as_deref()),
        ("--json", args.json.as_deref()),
    ];
    if let Err(code) = crate::evidence::refuse_unwritable_outputs("clients", &outputs) {
        return code;
    }
    let mut tally = Tally::default();
    for seed in seeds {
        println!("SEED={seed} client={}", args.client);
        let config = args.config(seed);
        print!("{}", config.plan());
        println!("  (the fault plan replays exactly; the interleaving of real processes does not)");
        let outcome = tokio::select! {
            outcome = run_clients(config) => outcome,
            signal = crate::race::interrupted() => {
                eprintln!("leaseproof clients: {signal}: stopped; client processes killed, temp files removed");
                return ExitCode::from(130);
            }
        };
        match outcome {
            Ok(outcome) => {
                if let Err(code) = settle(&args, seed, &outcome, &mut tally) {
                    return code;
                }
            }
            // Bad client output, a client that did not start, a store that
            // could not be had: nothing was judged.
            Err(error) => {
                eprintln!("leaseproof clients: {error}");
                return ExitCode::from(2);
            }
        }
        println!();
    }
    let Tally {
        failed,
        undecided,
        vacuous,
        runs,
    } = tally;
    let seeds_named = |seeds: &Vec<u64>| {
        if seeds.is_empty() {
            String::new()
        } else {
            format!(" (seeds {seeds:?})")
        }
    };
    println!(
        "clients: {runs} run(s), {} with a violation{}, {} with possible violations only{}, {vacuous} that proved little (no contention, no write, or no strike that acted)",
        failed.len(),
        seeds_named(&failed),
        undecided.len(),
        seeds_named(&undecided),
    );
    if runs > 1 {
        println!("{}", hit_rate(&failed, runs));
    }
    if !failed.is_empty() {
        ExitCode::from(1)
    } else if args.fail_on_possible && !undecided.is_empty() {
        println!(
            "clients: possible violations the evidence cannot decide (--fail-on-possible): exit 1"
        );
        ExitCode::from(1)
    } else if vacuous == runs {
        // No violation, and nothing proved either: "could not judge" is not
        // a pass a script should read as one.
        println!("clients: every run was vacuous: could not judge (exit 3)");
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// The sweep's seeds by verdict.
#[derive(Default)]
struct Tally {
    failed: Vec<u64>,
    undecided: Vec<u64>,
    vacuous: u64,
    runs: u64,
}

/// One judged seed: its report printed, its evidence and JSON line written,
/// its verdict counted (an output that cannot be written ends the sweep).
fn settle(
    args: &ClientsArgs,
    seed: u64,
    outcome: &ClientRunReport,
    tally: &mut Tally,
) -> Result<(), ExitCode> {
    tally.runs += 1;
    print_outcome(outcome);
    let evidence = Evidence {
        command: "clients",
        title: format!("{} — seed {seed}", outcome.design),
        history: &outcome.history,
        report: &outcome.report,
        marks: &outcome.marks,
    };
    evidence.write(
        args.history.as_deref(),
        args.html.as_deref(),
        Announce::Stdout,
    )?;
    let undecided_fails = !outcome.report.possible.is_empty() && args.fail_on_possible;
    // A failure keeps its evidence, a possible one under --fail-on-possible
    // like any other.
    let saved = if !outcome.report.is_ok() || undecided_fails {
        let saved = save_evidence(args, seed, outcome);
        println!("replay: {}", args.replay_line(seed));
        saved
    } else {
        None
    };
    if let Some(path) = &args.json {
        let line = SeedLine {
            seed,
            outcome,
            replay: args.replay_line(seed),
            evidence: saved,
        };
        if let Err(error) = line.append(path) {
            eprintln!("leaseproof clients: {}: {error}", path.display());
            return Err(ExitCode::from(2));
        }
    }
    if !outcome.report.is_ok() {
        tally.failed.push(seed);
        return Ok(());
    }
    if !outcome.report.possible.is_empty() {
        tally.undecided.push(seed);
    }
    if outcome.vacuity().is_some() {
        tally.vacuous += 1;
    }
    Ok(())
}

/// How often the seeds run found a violation, with the exact one-sided 95 %
/// lower bound of the rate (Clopper-Pearson) and the first seed that found
/// one: what a user needs to pick how many seeds to run.
fn hit_rate(failed: &[u64], runs: u64) -> String {
    let found = failed.len() as u64;
    let first = match failed.first() {
        Some(seed) => format!("; first at seed {seed}"),
        None => String::new(),
    };
    format!(
        "hit rate: {found} of {runs} seeds with a violation (>= {:.2} at 95 %){first}",
        rate_lower_bound(found, runs)
    )
}

/// The one-sided 95 % Clopper-Pearson lower bound of a rate seen `found`
/// times in `runs`: the rate `p` at which `found` or more hits would happen
/// with probability 0.05 (bisection on the binomial tail).
fn rate_lower_bound(found: u64, runs: u64) -> f64 {
    assert!(found <= runs);
    if found == 0 {
        return 0.0;
    }
    let tail_at_least = |p: f64| -> f64 {
        // P(X >= found) = 1 - P(X < found), the pmf built in log space.
        let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
        let (mut ln_choose, mut below) = (0.0_f64, 0.0_f64);
        for i in 0..found {
            if i > 0 {
                ln_choose += ((runs - i + 1) as f64).ln() - (i as f64).ln();
            }
            below += (ln_choose + i as f64 * ln_p + (runs - i) as f64 * ln_q).exp();
        }
        1.0 - below
    };
    let (mut low, mut high) = (0.0_f64, 1.0_f64);
    for _ in 0..60 {
        let middle = (low + high) / 2.0;
        if tail_at_least(middle) < 0.05 {
            low = middle;
        } else {
            high = middle;
        }
    }
    low
}

/// One seed's JSON line (format `leaseproof-clients-seed`, version 6:
/// version 6 added `violation_messages`, `replay` and `evidence`; version 5 added the proxies' `stalled_chunks`; version 4 added `started_after_ms`, `own_exits` and `unanswered`, what
/// the clients did of their own; version 3 `possible`, the findings the
/// evidence could not decide; version 2 `skipped`, `proxy` and `process`,
/// what the strikes did).
struct SeedLine<'run> {
    seed: u64,
    outcome: &'run ClientRunReport,
    /// The command line that runs this seed again.
    replay: String,
    /// The saved history and timeline, for a seed that failed.
    evidence: Option<(PathBuf, PathBuf)>,
}

impl SeedLine<'_> {
    fn append(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(file, "{}", self.to_json())
    }

    fn to_json(&self) -> serde_json::Value {
        let (seed, outcome) = (self.seed, self.outcome);
        let mut invariants: Vec<&str> = outcome
            .report
            .violations
            .iter()
            .map(|violation| violation.invariant.code())
            .collect();
        invariants.sort_unstable();
        invariants.dedup();
        let tally = &outcome.tally;
        let line = serde_json::json!({
            "format": "leaseproof-clients-seed",
            "version": 6,
            "passed": outcome.passed(),
            "seed": seed,
            "design": outcome.design,
            "faults": outcome.plan.kinds.iter().map(|kind| kind.name()).collect::<Vec<_>>(),
            "struck": outcome.strikes,
            "skipped": outcome.strikes_skipped,
            "proxy": {
                "replies_dropped": outcome.proxy_effects.replies_dropped,
                "partition_holds": outcome.proxy_effects.partition_holds,
                "delayed_chunks": outcome.proxy_effects.delayed_chunks,
                "connections_reset": outcome.proxy_effects.connections_reset,
                "stalled_chunks": outcome.proxy_effects.stalled_chunks,
            },
            "process": {
                "stopped": outcome.process_effects.processes_stopped,
                "killed": outcome.process_effects.processes_killed,
                "backends_terminated": outcome.process_effects.backends_terminated,
                "redis_restarts": outcome.process_effects.redis_restarts,
                "skewed_clients": outcome.process_effects.clients_skewed,
            },
            "violations": outcome.report.violations.len(),
            "invariants": invariants,
            "first_violation": outcome.report.violations.first().map(ToString::to_string),
            "violation_messages": outcome.report.violations.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "possible": outcome.report.possible.len(),
            "vacuous": outcome.vacuity(),
            "grants": tally.grants,
            "writes": tally.writes,
            "unknowns": tally.unknowns,
            "incarnations": tally.incarnations,
            "distinct_winners": outcome.distinct_winners,
            "started_after_ms": outcome.started_after_ms,
            "own_exits": outcome.own_exits.len(),
            "unanswered": outcome.unanswered.len(),
            "replay": self.replay,
            "evidence": self.evidence.as_ref().map(|(history, timeline)| serde_json::json!({
                "history": history,
                "timeline": timeline,
            })),
        });
        line
    }
}

/// Writes a failing seed's history and timeline into the output directory,
/// and says where (nothing, after saying why, when they could not be written).
fn save_evidence(
    args: &ClientsArgs,
    seed: u64,
    outcome: &ClientRunReport,
) -> Option<(PathBuf, PathBuf)> {
    let dir = args
        .out
        .clone()
        .unwrap_or_else(leaseproof_sim::evidence_dir);
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("leaseproof clients: {}: {error}", dir.display());
        return None;
    }
    // Named by design too: two designs swept over the same seeds into the
    // default directory must not overwrite each other's evidence.
    let stem = format!("clients-{}-seed-{seed}", file_slug(&outcome.design));
    let history = dir.join(format!("{stem}.jsonl"));
    let html = dir.join(format!("{stem}.html"));
    let title = format!("{} — seed {seed}", outcome.design);
    let page = leaseproof_history::timeline_html(
        &title,
        &outcome.history,
        &outcome.report,
        &outcome.marks,
    );
    match (outcome.history.save(&history), std::fs::write(&html, page)) {
        (Ok(()), Ok(())) => {
            println!("evidence: {} and {}", history.display(), html.display());
            return Some((history, html));
        }
        (Err(error), _) => eprintln!("leaseproof clients: {error}"),
        (_, Err(error)) => eprintln!("leaseproof clients: {}: {error}", html.display()),
    }
    None
}

/// A design's name as a file name's part: ASCII letters and digits in lower
/// case, every other run of characters one `-`, at most 40 characters
/// (`"pg_partsmith Redis (1.10.0)"` → `pg-partsmith-redis-1-10-0`).
fn file_slug(name: &str) -> String {
    let mut slug = String::new();
    for character in name.chars() {
        if character.is_ascii_alphanumeric() {
            slug.push(character.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() == 40 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        "design".to_string()
    } else {
        slug.to_string()
    }
}

fn print_outcome(outcome: &ClientRunReport) {
    println!("design: {}", outcome.design);
    println!(
        "  started {} ms in, once every client had said hello: the plan's times and the duration count from then",
        outcome.started_after_ms
    );
    for strike in &outcome.strikes {
        println!("  struck {strike}");
    }
    for skipped in &outcome.strikes_skipped {
        println!("  could not strike {skipped}");
    }
    let tally = &outcome.tally;
    println!(
        "grants={} refusals={} writes={} writes_refused={} unknown={} lost_notices={} incarnations={} distinct_winners={} proxy: replies_dropped={} partition_holds={} delayed_chunks={} connections_reset={} stalled_chunks={}",
        tally.grants,
        tally.refusals,
        tally.writes,
        tally.writes_refused,
        tally.unknowns,
        tally.lost_notices,
        tally.incarnations,
        outcome.distinct_winners,
        outcome.proxy_effects.replies_dropped,
        outcome.proxy_effects.partition_holds,
        outcome.proxy_effects.delayed_chunks,
        outcome.proxy_effects.connections_reset,
        outcome.proxy_effects.stalled_chunks
    );
    let process = &outcome.process_effects;
    println!(
        "process: stopped={} killed={} backends_terminated={} redis_restarts={} skewed_clients={}",
        process.processes_stopped,
        process.processes_killed,
        process.backends_terminated,
        process.redis_restarts,
        process.clients_skewed
    );
    for exit in &outcome.own_exits {
        println!("  client crash: {exit}");
    }
    for request in &outcome.unanswered {
        println!("  client hung: {request} (recorded unknown, the process replaced)");
    }
    print!("{}", outcome.report);
    // Findings the evidence cannot decide do not fail a run; they must not
    // pass unseen either.
    let undecided = match outcome.report.possible.len() {
        0 => String::new(),
        possible => format!(" ({possible} possible the evidence cannot decide, listed above)"),
    };
    match (outcome.report.is_ok(), outcome.vacuity()) {
        (false, _) => println!("VERDICT: violation"),
        (true, Some(why)) => println!("VERDICT: no violation{undecided}, but {why}"),
        (true, None) => println!("VERDICT: no violation{undecided}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::parse_seeds;

    #[test]
    fn a_design_name_becomes_a_file_name_part() {
        assert_eq!(
            file_slug("pg_partsmith Redis (1.10.0)"),
            "pg-partsmith-redis-1-10-0"
        );
        assert_eq!(file_slug("  lease  "), "lease");
        assert_eq!(file_slug("../../etc/passwd"), "etc-passwd");
        assert_eq!(file_slug("ロック"), "design");
        assert_eq!(file_slug(&"a".repeat(100)).len(), 40);
    }

    #[test]
    fn hit_rates_carry_their_exact_lower_bound() {
        // 20 of 20: 0.05^(1/20); the others from the binomial tail.
        assert!((rate_lower_bound(20, 20) - 0.05_f64.powf(1.0 / 20.0)).abs() < 1e-9);
        assert!((rate_lower_bound(1, 1) - 0.05).abs() < 1e-9);
        assert_eq!(rate_lower_bound(0, 20), 0.0);
        let bound = rate_lower_bound(19, 20);
        assert!((0.780..0.790).contains(&bound), "{bound}");
        let bound = rate_lower_bound(3, 10);
        assert!((0.085..0.095).contains(&bound), "{bound}");
        assert_eq!(
            hit_rate(&[4, 7], 10),
            "hit rate: 2 of 10 seeds with a violation (>= 0.04 at 95 %); first at seed 4"
        );
        assert_eq!(
            hit_rate(&[], 4),
            "hit rate: 0 of 4 seeds with a violation (>= 0.00 at 95 %)"
        );
    }

    #[test]
    fn seeds_and_faults_parse_with_clear_errors() {
        assert_eq!(parse_seeds("3..5"), Ok(3..5));
        assert_eq!(parse_seeds("3..=5"), Ok(3..6));
        assert_eq!(parse_seeds("7"), Ok(7..8));
        assert!(parse_seeds("5..3").unwrap_err().contains("empty"));
        assert!(parse_seeds("x..3").unwrap_err().contains("not a seed"));
        assert_eq!(parse_faults("none"), Ok(FaultList(vec![])));
        assert_eq!(
            parse_faults("pause-long, kill"),
            Ok(FaultList(vec![FaultKind::PauseLong, FaultKind::Kill]))
        );
        assert!(parse_faults("pause").unwrap_err().contains("pause-long"));
    }
}
