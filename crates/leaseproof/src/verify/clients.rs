//! `verify`'s clients stage: lock clients driven over the client protocol
//! (docs/client-protocol.md) under seeded faults, judged by the one checker.
//!
//! leaseproof's own lease must stay clean under pauses, kills, partitions and
//! lost replies (this binary serves it: `leaseproof lock-client lease`); its
//! Redis and advisory managers' verdicts are findings, printed, not failures.
//! Where the Python clients' virtualenv exists (`bash
//! ci/install-python-clients.sh`), pg_partsmith 1.10.0's managers run as they
//! ship (findings) and the broken plain-DEL lock must be caught under long
//! pauses; without it the stage says it did not run them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leaseproof_races::clients::{run_clients, ClientRunConfig, ClientRunReport, FaultKind, Moment};

use super::Report;

const STAGE: &str = "clients";

fn config(command: String, seed: u64, faults: &[FaultKind], ttl_ms: u64) -> ClientRunConfig {
    let mut config = ClientRunConfig::new(command, seed);
    config.faults = faults.to_vec();
    config.duration = Duration::from_millis(6_000);
    config.ttl = Duration::from_millis(ttl_ms);
    config
}

fn verdict(outcome: &ClientRunReport) -> String {
    let mut violations: Vec<String> = outcome
        .report
        .violations
        .iter()
        .map(|violation| violation.invariant.code().to_string())
        .collect();
    violations.sort();
    violations.dedup();
    format!(
        "seed {}: faults {}; {} grants, {} writes; {}",
        outcome.plan.seed,
        outcome
            .plan
            .kinds
            .iter()
            .map(|kind| kind.name())
            .collect::<Vec<_>>()
            .join("+"),
        outcome.tally.grants,
        outcome.tally.writes,
        if violations.is_empty() {
            "no violation".to_string()
        } else {
            format!("violations {}", violations.join(","))
        }
    )
}

/// The venv's python, if `ci/install-python-clients.sh` made it.
fn python() -> Option<PathBuf> {
    let python = Path::new("target/leaseproof-clients-venv/bin/python3");
    let scripts = Path::new("examples/clients/python");
    (python.exists() && scripts.is_dir()).then(|| python.to_path_buf())
}

/// Runs the clients stage.
pub(crate) async fn clients_stage(report: &mut Report) {
    let me = match std::env::current_exe() {
        Ok(me) => me.display().to_string(),
        Err(error) => {
            report.record(
                STAGE,
                "this binary serves the lock clients",
                Instant::now(),
                Err(error.to_string()),
            );
            return;
        }
    };
    let started = Instant::now();
    let faults = [
        FaultKind::PauseLong,
        FaultKind::Kill,
        FaultKind::LoseReply,
        FaultKind::Partition,
    ];
    let outcome = run_clients(config(format!("{me} lock-client lease"), 0, &faults, 1_500))
        .await
        .map_err(|error| error.to_string())
        .and_then(
            |outcome| match (outcome.report.is_ok(), outcome.vacuity()) {
                (true, None) => Ok(verdict(&outcome)),
                (true, Some(why)) => Err(format!("{}: {why}", verdict(&outcome))),
                (false, _) => Err(format!("{}\n{}", verdict(&outcome), outcome.report)),
            },
        );
    report.record(
        STAGE,
        "the lease through the protocol: clean under faults",
        started,
        outcome,
    );

    // Each run's verdict is the lock's, reported; the stage checks the
    // harness drove it to the end.
    let mut reported = Vec::new();
    for lock in ["redis", "advisory"] {
        reported.push((
            format!("leaseproof's {lock} manager through the protocol"),
            format!("{me} lock-client {lock}"),
        ));
    }
    let Some(python) = python() else {
        run_reported(report, reported).await;
        println!(
            "     {STAGE:<10} Python clients not run: no virtualenv at target/leaseproof-clients-venv \
             (bash ci/install-python-clients.sh)"
        );
        return;
    };
    let script = |name: &str| format!("{} examples/clients/python/{name}", python.display());
    for (manager, file) in [
        ("RedisDistributedLockManager", "partsmith_redis.py"),
        ("PostgresAdvisoryLockManager", "partsmith_advisory.py"),
    ] {
        reported.push((format!("pg_partsmith 1.10.0 {manager}"), script(file)));
    }
    run_reported(report, reported).await;
    // Teeth: the broken lock under the fault that breaks it, on seeds whose
    // plans strike holders (real time: a strike can land between holds).
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut caught = None;
    let telling = |seed: &u64| matches!(holder_pauses(*seed), (pauses, true) if pauses >= 2);
    for seed in (0..).filter(telling).take(3) {
        match run_clients(config(
            script("broken_plain_del.py"),
            seed,
            &[FaultKind::PauseLong],
            1_500,
        ))
        .await
        {
            Ok(outcome) if !outcome.report.is_ok() => {
                caught = Some(verdict(&outcome));
                break;
            }
            Ok(outcome) => seen.push(verdict(&outcome)),
            Err(error) => seen.push(error.to_string()),
        }
    }
    report.record(
        STAGE,
        "a broken plain-DEL lock is caught under long pauses",
        started,
        caught.ok_or_else(|| format!("never caught: {}", seen.join("; "))),
    );
}

/// Runs each `(name, command)` once under every fault; records that it ran
/// and what it found, the finding reported, not judged.
async fn run_reported(report: &mut Report, subjects: Vec<(String, String)>) {
    for (name, command) in subjects {
        let started = Instant::now();
        let outcome = run_clients(config(command, 0, &FaultKind::ALL, 3_000))
            .await
            .map(|outcome| {
                format!(
                    "ran; its verdict, reported not judged: {}",
                    verdict(&outcome)
                )
            })
            .map_err(|error| error.to_string());
        report.record(STAGE, name, started, outcome);
    }
}

/// Long pauses of holders in `seed`'s plan, and whether one is aimed at a
/// grant (the holder stopped before its first write: the finding's moment).
fn holder_pauses(seed: u64) -> (usize, bool) {
    let plan = config(String::new(), seed, &[FaultKind::PauseLong], 1_500).plan();
    let pauses: Vec<_> = plan
        .strikes
        .iter()
        .filter(|strike| strike.kind == FaultKind::PauseLong && strike.holder_first)
        .collect();
    let at_a_grant = pauses.iter().any(|strike| strike.moment == Moment::Granted);
    (pauses.len(), at_a_grant)
}
