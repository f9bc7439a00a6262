//! `leaseproof check <history.jsonl>`: judge a history recorded by any program.
//!
//! The format is documented in `docs/history-format.md` (version 1) with
//! examples in `examples/histories/`. Exit codes: 0 clean (possible
//! violations, which the evidence cannot decide, are printed but do not fail),
//! 1 a violation, 2 bad input (the line and field that are wrong), 3 could
//! not judge (`--model`: a scope's search ran over its budget).

use std::path::PathBuf;
use std::process::ExitCode;

use leaseproof_history::Document as _;

use leaseproof_history::model::{check_with_model, Assumptions, ModelReport, Verdict};
use leaseproof_history::{check, CheckConfig, CheckReport, GrantStamps, History, HistoryError};

/// `leaseproof check FILE [--grant-stamps decision|statement-start] [--unfenced-worker W]…`.
///
/// A history may declare these itself (its `design` line, written by
/// leaseproof's races and client runs): the flags add to it, and a flag that
/// contradicts it is refused.
#[derive(clap::Args, Clone, Debug)]
pub struct CheckArgs {
    /// The history, one JSON record per line (docs/history-format.md).
    pub file: PathBuf,
    /// What the design's `granted_at` means: `decision` (it decides with the
    /// time it stamps, as the reference does: a server-time overlap is a real
    /// one) or `statement-start` (a stamp only bounds the decision from
    /// below: overlaps must be proven by real-time order). Default: what
    /// the history's `design` line declares, else `statement-start` (the
    /// sound rule: nothing is assumed that the file does not state).
    #[arg(long, value_parser = |text: &str| text.parse::<GrantStamps>())]
    pub grant_stamps: Option<GrantStamps>,
    /// A worker that writes without the fence (its belief overlaps are violations).
    #[arg(long = "unfenced-worker")]
    pub unfenced_workers: Vec<String>,
    /// Also draw the judged history as a self-contained HTML timeline here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the verdict as JSON (format `leaseproof-check`, docs/json.md) here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Exit 1 also when the checker could not decide a possible violation
    /// (by default those are printed and do not fail).
    #[arg(long)]
    pub fail_on_possible: bool,
    /// Judge the lease scopes' I1, I2 and server clock by the model
    /// (docs/model.md): a violation only where no explanation of the
    /// evidence exists, with the operations that have none; exit 3 when a
    /// scope's search runs over its budget.
    #[arg(long)]
    pub model: bool,
    /// With --model: print each explained scope's explanation, the order
    /// its operations took effect in and the store clock's readings.
    #[arg(long, requires = "model")]
    pub explain: bool,
    /// With --model: how far below the store's clock a stamp may be
    /// (rounding): 1000 for a store that stamps milliseconds, 0 for
    /// PostgreSQL's microseconds. Without it: the design line's
    /// `stamp_rounding_us`, else 1000, which assumes nothing.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(i64).range(0..=1_000_000), requires = "model")]
    pub stamp_rounding_us: Option<i64>,
    /// With --model: the store never restamps `granted_at` when a grant is
    /// re-acquired or renewed (the reference keeps it), so a grant answered
    /// with a later start is a new one (the design line's `restamps: false`).
    #[arg(long, requires = "model")]
    pub no_restamps: bool,
    /// List at most this many findings of each kind (violations, possible,
    /// not judged); a line counts the rest. `--json` has them all.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub show: usize,
}

/// The history `args` names, once the outputs are known to be writable:
/// nothing is judged before both are settled (exit 2 otherwise).
fn load(args: &CheckArgs) -> Result<History, ExitCode> {
    let outputs = [
        ("--html", args.html.as_deref()),
        ("--json", args.json.as_deref()),
    ];
    crate::evidence::refuse_unwritable_outputs("check", &outputs)?;
    for (option, path) in outputs {
        if path.is_some_and(|path| same_file(path, &args.file)) {
            eprintln!(
                "leaseproof check: {option} {}: the history being judged: writing it would \
                 destroy the evidence (not judged)",
                args.file.display()
            );
            return Err(ExitCode::from(2));
        }
    }
    let history = match History::load(&args.file) {
        Ok(history) => history,
        Err(HistoryError::Invalid {
            line_number,
            field,
            problem,
        }) => {
            eprintln!(
                "leaseproof check: {}:{line_number}: field `{field}`: {problem} (not judged)",
                args.file.display()
            );
            return Err(ExitCode::from(2));
        }
        Err(error) => {
            eprintln!("leaseproof check: {error}");
            return Err(ExitCode::from(2));
        }
    };
    if history.events.is_empty() {
        eprintln!(
            "leaseproof check: {}: no events: nothing to judge",
            args.file.display()
        );
        return Err(ExitCode::from(2));
    }
    Ok(history)
}

/// Whether two paths name one file (an output that does not exist yet is
/// no file the input can be).
fn same_file(output: &std::path::Path, input: &std::path::Path) -> bool {
    match (output.canonicalize(), input.canonicalize()) {
        (Ok(output), Ok(input)) => output == input,
        _ => false,
    }
}

/// What the history is judged by: its design line, with what the flags add
/// where it is silent (a flag contradicting it, or naming a worker the
/// history lacks, is refused: exit 2).
fn judged_as(args: &CheckArgs, history: &History) -> Result<CheckConfig, ExitCode> {
    let declared = CheckConfig::declared_by(history);
    let grant_stamps = match (args.grant_stamps, &history.design) {
        (Some(flag), Some(design)) if flag != design.grant_stamps => {
            // A design line without `grant_stamps` declares the default.
            eprintln!(
                "leaseproof check: {}: the history's design line declares --grant-stamps {} \
                 (its `grant_stamps`, or the default where the line has none); \
                 --grant-stamps {} contradicts it (not judged): a design's stamps mean one \
                 thing, so say it in the file's design line",
                args.file.display(),
                design.grant_stamps,
                flag
            );
            return Err(ExitCode::from(2));
        }
        (Some(flag), _) => flag,
        (None, _) => declared.grant_stamps,
    };
    if let Some((unknown, workers)) = history.unknown_worker(&args.unfenced_workers) {
        eprintln!(
            "leaseproof check: --unfenced-worker {unknown}: no worker of {} has that name \
             (its workers: {workers}): a typo would judge that worker as fenced (not judged)",
            args.file.display(),
        );
        return Err(ExitCode::from(2));
    }
    let mut unfenced_workers = declared.unfenced_workers;
    unfenced_workers.extend(args.unfenced_workers.iter().cloned());
    let config = CheckConfig {
        unfenced_workers,
        grant_stamps,
        ..declared
    };
    model_assumptions_flagged(args, config).map_err(|contradiction| {
        eprintln!(
            "leaseproof check: {}: {contradiction} (not judged): what a store's stamps are \
                 is one fact, so say it in the file's design line",
            args.file.display()
        );
        ExitCode::from(2)
    })
}

/// Runs `leaseproof check`.
pub fn run(args: CheckArgs) -> ExitCode {
    let history = match load(&args) {
        Ok(history) => history,
        Err(code) => return code,
    };
    let config = match judged_as(&args, &history) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let grant_stamps = config.grant_stamps;
    let reports_server_times = history.events.iter().any(|event| {
        matches!(
            &event.kind,
            leaseproof_history::EventKind::Complete {
                outcome: leaseproof_history::Outcome::Ok {
                    result: leaseproof_history::OpResult::Lease { .. }
                },
                ..
            }
        )
    });
    if history.design.is_none() && args.grant_stamps.is_none() && reports_server_times {
        eprintln!(
            "the history does not declare what its grant stamps mean: judged by the sound rule \
             (--grant-stamps statement-start: a server-time overlap fails only where real-time \
             order proves it); declare it (a `design` line) or pass --grant-stamps decision \
             if each grant is stamped with the time it was decided"
        );
    }
    if history.design.is_some() {
        eprintln!(
            "judged as the history declares: --grant-stamps {grant_stamps}{}",
            config
                .unfenced_workers
                .iter()
                .map(|worker| format!(" --unfenced-worker {worker}"))
                .collect::<String>()
        );
    }
    let (report, model) = judge(&history, &config, &args);
    let unjudged = model.as_ref().is_some_and(|model| {
        (model.scopes.iter()).any(|scope| matches!(scope.verdict, Verdict::CouldNotJudge(_)))
    });
    let shown = report.shown(args.show);
    print!("{shown}");
    if shown.cut() {
        println!("  (--show N lists more; --json FILE holds every finding)");
    }
    if let Some(path) = &args.html {
        let title = args.file.display().to_string();
        let html = leaseproof_history::timeline_html(&title, &history, &report, &[]);
        if let Err(error) = std::fs::write(path, html) {
            eprintln!("leaseproof check: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("timeline written to {}", path.display());
    }
    if let Some(path) = &args.json {
        let mut document = leaseproof_history::CheckDocument::new(&history, &report);
        document.model = model.as_ref().map(leaseproof_history::model::documents);
        // The document's verdict is the exit status's.
        document.passed &= !args.fail_on_possible || report.possible.is_empty();
        if let Err(error) = std::fs::write(path, document.to_json()) {
            eprintln!("leaseproof check: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.is_ok() && args.fail_on_possible && !report.possible.is_empty() {
        println!(
            "FAIL: {} possible violation(s) the evidence cannot decide (--fail-on-possible)",
            report.possible.len()
        );
        return ExitCode::FAILURE;
    }
    if report.is_ok() && unjudged {
        println!("COULD NOT JUDGE: a scope's search ran over its budget");
        return ExitCode::from(3);
    }
    if report.is_ok() {
        if report.possible.is_empty() {
            println!("PASS: {} events, no violation", history.events.len());
        } else {
            println!(
                "PASS with {} possible violation(s) the evidence cannot decide",
                report.possible.len()
            );
        }
        ExitCode::SUCCESS
    } else {
        println!("FAIL: {} violation(s)", report.violations.len());
        ExitCode::FAILURE
    }
}

/// `config` with what the model flags say of the store's stamps, where the
/// design line is silent; a flag that contradicts the line is refused.
fn model_assumptions_flagged(
    args: &CheckArgs,
    mut config: CheckConfig,
) -> Result<CheckConfig, String> {
    if let Some(flag) = args.stamp_rounding_us {
        match config.stamp_rounding_us {
            Some(declared) if declared != flag => {
                return Err(format!(
                    "the design line declares stamp_rounding_us {declared}; \
                     --stamp-rounding-us {flag} contradicts it"
                ))
            }
            _ => config.stamp_rounding_us = Some(flag),
        }
    }
    if args.no_restamps {
        if config.restamps == Some(true) {
            return Err(
                "the design line declares restamps true; --no-restamps contradicts it".to_string(),
            );
        }
        config.restamps = Some(false);
    }
    Ok(config)
}

/// The verdict on `history`: the rules', or with `--model` the model's for
/// the lease scopes (its verdicts printed, and returned).
fn judge(
    history: &History,
    config: &CheckConfig,
    args: &CheckArgs,
) -> (CheckReport, Option<ModelReport>) {
    if !args.model {
        return (check(history, config), None);
    }
    let (report, model) = check_with_model(history, config, Assumptions::declared_by(config));
    for scope in &model.scopes {
        print!("{scope}");
        if let (true, Verdict::Explained(Some(explanation))) = (args.explain, &scope.verdict) {
            for (position, effect) in explanation.effects.iter().enumerate() {
                let operation = &scope.operations[effect.operation];
                println!(
                    "  {}. event {} ({:?}): {:?}, decided at {}, stamped {}",
                    position + 1,
                    operation.invoke_event,
                    operation.owner,
                    effect.choice,
                    effect.decision_us,
                    effect.stamp_us
                );
            }
        }
    }
    (report, Some(model))
}
