//! `leaseproof model`: the stateright model of the protocol and its broken variants.

use std::process::ExitCode;

use leaseproof_history::Document as _;

use leaseproof_models::{
    check, explore, CheckConfig, LeaseModel, ModelDocument, ModelReport, Search, Variant,
};

/// Arguments of `leaseproof model`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// Workers in the model: 2 to 4 (the state holds 4 slots; one worker cannot
    /// witness a takeover or a belief overlap). 2 and 3 are exhausted in
    /// seconds; 4 grows fast.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=4))]
    pub workers: u8,
    /// `reference`, a broken variant's name, or `all`.
    #[arg(long, default_value = "all")]
    pub variant: String,
    /// Serve stateright's web explorer on this address (e.g. 127.0.0.1:3000) instead of checking.
    #[arg(long)]
    pub explore: Option<String>,
    /// Exhaust the reference with symmetry reduction: fewer states (3 and 4
    /// workers need it), longer witnesses. Without it the reference is
    /// exhausted breadth-first, every witness the shortest.
    #[arg(long)]
    pub symmetric: bool,
    /// Also write every verdict as JSON (format `leaseproof-model`, docs/json.md) here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

/// Runs `leaseproof model`.
pub fn run(args: ModelArgs) -> ExitCode {
    let variants: Vec<Variant> = if args.variant == "all" {
        Variant::ALL.to_vec()
    } else {
        match args.variant.parse() {
            Ok(variant) => vec![variant],
            Err(error) => {
                eprintln!("leaseproof model: {error}");
                return ExitCode::from(2);
            }
        }
    };
    if let Some(address) = args.explore {
        // stateright panics on an address it cannot bind: ask the OS first.
        if let Err(error) = std::net::TcpListener::bind(address.as_str()) {
            eprintln!("leaseproof model: --explore {address}: cannot listen there: {error}");
            return ExitCode::from(2);
        }
        let variant = variants[0];
        println!(
            "serving the explorer for {variant} with {} workers on http://{address}",
            usize::from(args.workers)
        );
        explore(
            &CheckConfig::new(LeaseModel::new(usize::from(args.workers), variant)),
            address,
        );
        return ExitCode::SUCCESS;
    }
    let mut reports = Vec::new();
    for variant in variants {
        let mut config = CheckConfig::new(LeaseModel::new(usize::from(args.workers), variant));
        if variant == Variant::Reference {
            config.search = if args.symmetric {
                Search::ExhaustiveSymmetric
            } else {
                Search::Exhaustive
            };
        }
        if args.workers >= 3 {
            // Seconds for 3 workers, many minutes for 4: say so before the wait.
            eprintln!(
                "checking {variant} with {} workers ({:?}); 3 workers take seconds, 4 many minutes…",
                args.workers, config.search
            );
        }
        let report = check(&config);
        print_report(&report);
        reports.push(report);
    }
    let document = ModelDocument::new(&reports);
    // One closing line: what the whole run showed, the exit status's verdict.
    let as_expected = reports.iter().filter(|report| report.as_expected()).count();
    let variants = reports
        .iter()
        .filter(|report| report.config.model.variant.expected_violation().is_some())
        .count();
    println!(
        "{}: {as_expected} of {} model checks as expected (the reference: every property holds; each of {variants} broken variant(s): refuted with a counterexample)",
        if document.passed { "PASS" } else { "FAIL" },
        reports.len(),
    );
    if let Some(path) = &args.json {
        if let Err(error) = std::fs::write(path, document.to_json()) {
            eprintln!("leaseproof model: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    if document.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One line of verdict, then the report (properties and the counterexample trace).
pub fn print_report(report: &ModelReport) {
    let variant = report.config.model.variant;
    let verdict = match (variant.expected_violation(), report.as_expected()) {
        (None, true) => "reference: every property holds".to_string(),
        (None, false) => "reference: PROPERTY FAILED".to_string(),
        (Some(name), true) => format!("refuted as expected ({name})"),
        (Some(name), false) => format!("NOT refuted: expected {name} to fail"),
    };
    println!("== model {variant}: {verdict}");
    println!("{report}");
}
