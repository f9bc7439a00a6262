//! `leaseproof verify`: every stage, on the embedded default, one verdict.
//!
//! Stages run in order from the cheapest; each prints one line per check with
//! what it proved and its figures. The exit status is non-zero when any check
//! fails, so CI and users can rely on it.

use std::process::ExitCode;
use std::time::Instant;

use leaseproof_postgres::conformance::{self, FenceUnderTest};
use leaseproof_postgres::FenceMode;
use leaseproof_protocol::LeaseError;

/// Arguments of `leaseproof verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Seed for the seeded stages (the differential script).
    #[arg(long, default_value_t = 0x1ea5e)]
    pub seed: u64,
    /// Simulation seeds per scenario, 1 to 1000000.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000), allow_negative_numbers = true)]
    pub sim_seeds: u64,
    /// Also write every check's verdict as JSON (format `leaseproof-verify`,
    /// version 2: `{format, version, passed, stages_not_run, checks: [{stage,
    /// name, passed, detail, seconds}]}`, docs/json.md) to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Also write the verdicts as JUnit XML (one test case per check, its
    /// stage as the class) for CI systems that render it.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
    /// Run only these stages (comma-separated), in verify's own order.
    /// A partial run says so in its verdict line.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Stage::ALL)]
    pub stages: Vec<Stage>,
}

/// A stage of `verify`, cheapest first.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The stateright models, and the checker judging their paths.
    Model,
    /// Every scenario swept, fenced.
    Simulation,
    /// The unfenced sweep and the planted defects that must be caught.
    Teeth,
    /// The SQL against the executable semantics, the schema race, the fence.
    Postgres,
    /// Tasks racing on one scope of the real server.
    Race,
    /// The lock managers' conformance suite and the manager x fault matrix.
    Locks,
    /// Lock clients driven over the client protocol under seeded faults.
    Clients,
}

impl Stage {
    const ALL: [Stage; 7] = [
        Stage::Model,
        Stage::Simulation,
        Stage::Teeth,
        Stage::Postgres,
        Stage::Race,
        Stage::Locks,
        Stage::Clients,
    ];
}

impl std::fmt::Display for Stage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum as _;
        let value = self.to_possible_value().expect("no stage is skipped");
        formatter.write_str(value.get_name())
    }
}

/// The verdict of one check.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Check {
    stage: String,
    name: String,
    passed: bool,
    detail: String,
    seconds: f64,
}

#[derive(Default)]
pub(crate) struct Report {
    checks: Vec<Check>,
    /// Stages left out by `--stages`: a partial run must not read as a full one.
    stages_skipped: Vec<String>,
}

impl Report {
    pub(crate) fn record(
        &mut self,
        stage: &'static str,
        name: impl Into<String>,
        started: Instant,
        outcome: Result<String, String>,
    ) {
        self.record_seconds(stage, name, started.elapsed().as_secs_f64(), outcome);
    }

    fn record_seconds(
        &mut self,
        stage: &'static str,
        name: impl Into<String>,
        seconds: f64,
        outcome: Result<String, String>,
    ) {
        let name = name.into();
        let (passed, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        println!(
            "{} {stage:<10} {name:<48} {seconds:>6.2}s  {detail}",
            if passed { "PASS" } else { "FAIL" }
        );
        self.checks.push(Check {
            stage: stage.to_string(),
            name,
            passed,
            detail,
            seconds,
        });
    }

    /// The verdicts as JSON (format `leaseproof-verify`, version 2).
    fn to_json(&self) -> String {
        let document = serde_json::json!({
            "format": "leaseproof-verify",
            "version": 2,
            "passed": self.checks.iter().all(|check| check.passed),
            "stages_not_run": self.stages_skipped,
            "checks": self.checks,
        });
        serde_json::to_string_pretty(&document).expect("checks serialise") + "\n"
    }

    /// The verdicts as JUnit XML: one `testsuite`, a `testcase` per check.
    fn to_junit(&self) -> String {
        fn escape(text: &str) -> String {
            text.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
        }
        let failures = self.checks.iter().filter(|check| !check.passed).count();
        let seconds: f64 = self.checks.iter().map(|check| check.seconds).sum();
        let mut xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n<testsuite name=\"leaseproof verify\" \
             tests=\"{}\" failures=\"{failures}\" time=\"{seconds:.3}\">\n",
            self.checks.len()
        );
        for check in &self.checks {
            xml.push_str(&format!(
                "<testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\">",
                escape(&check.stage),
                escape(&check.name),
                check.seconds
            ));
            if check.passed {
                xml.push_str(&format!(
                    "<system-out>{}</system-out>",
                    escape(&check.detail)
                ));
            } else {
                xml.push_str(&format!(
                    "<failure message=\"{}\">{}</failure>",
                    escape(check.detail.lines().next().unwrap_or_default()),
                    escape(&check.detail)
                ));
            }
            xml.push_str("</testcase>\n");
        }
        xml.push_str("</testsuite>\n</testsuites>\n");
        xml
    }

    /// Writes the machine-readable forms `args` asks for.
    fn write_files(&self, args: &VerifyArgs) -> Result<(), String> {
        if let Some(path) = &args.json {
            std::fs::write(path, self.to_json())
                .map_err(|error| format!("writing {}: {error}", path.display()))?;
        }
        if let Some(path) = &args.junit {
            std::fs::write(path, self.to_junit())
                .map_err(|error| format!("writing {}: {error}", path.display()))?;
        }
        Ok(())
    }

    fn finish(&self) -> ExitCode {
        let failed: Vec<&Check> = self.checks.iter().filter(|check| !check.passed).collect();
        let seconds: f64 = self.checks.iter().map(|check| check.seconds).sum();
        println!();
        let partial = if self.stages_skipped.is_empty() {
            String::new()
        } else {
            format!(" (stages not run: {})", self.stages_skipped.join(", "))
        };
        if failed.is_empty() {
            println!(
                "verify: all {} checks passed in {seconds:.1}s{partial}",
                self.checks.len()
            );
            ExitCode::SUCCESS
        } else {
            println!(
                "verify: {} of {} checks FAILED{partial}:",
                failed.len(),
                self.checks.len()
            );
            for check in failed {
                println!("  {} / {}: {}", check.stage, check.name, check.detail);
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs `leaseproof verify`.
pub fn run(args: VerifyArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut report = Report::default();
    let runs = |stage: Stage| args.stages.contains(&stage);
    if runs(Stage::Model) {
        model_stage(&mut report);
    }
    if runs(Stage::Simulation) {
        simulation_stage(&args, &mut report);
    }
    if runs(Stage::Teeth) {
        simulation_teeth(&mut report);
    }
    if runs(Stage::Postgres) {
        runtime.block_on(postgres_stage(&args, &mut report));
    }
    if runs(Stage::Race) {
        runtime.block_on(race_stage(&mut report));
    }
    if runs(Stage::Locks) {
        runtime.block_on(locks_stage(&mut report));
    }
    if runs(Stage::Clients) {
        runtime.block_on(crate::verify_clients::clients_stage(&mut report));
    }
    report.stages_skipped = Stage::ALL
        .into_iter()
        .filter(|stage| !runs(*stage))
        .map(|stage| stage.to_string())
        .collect();
    if let Err(error) = report.write_files(&args) {
        eprintln!("leaseproof verify: {error}");
        return ExitCode::from(2);
    }
    report.finish()
}

/// A fresh, empty database on the throwaway cluster (or `DATABASE_URL`).
async fn fresh_database() -> Result<leaseproof_pgcluster::TestDatabase, String> {
    let server = leaseproof_pgcluster::shared_server()
        .await
        .map_err(|unavailable| unavailable.reason)?;
    server
        .fresh_database()
        .await
        .map_err(|error| error.to_string())
}

async fn postgres_stage(args: &VerifyArgs, report: &mut Report) {
    const STAGE: &str = "postgres";
    let started = Instant::now();
    let server = match leaseproof_pgcluster::shared_server().await {
        Ok(server) => server,
        Err(unavailable) => {
            report.record(
                STAGE,
                "a PostgreSQL server to check against",
                started,
                Err(unavailable.reason),
            );
            return;
        }
    };
    report.record(
        STAGE,
        "a PostgreSQL server to check against",
        started,
        Ok(format!("{:?}", server.source())),
    );

    let started = Instant::now();
    let outcome = async {
        let database = fresh_database().await?;
        let summary = conformance::differential(&database.url, args.seed, 300)
            .await
            .map_err(|error| error.to_string())?;
        if summary.grants == 0 || summary.refusals == 0 || summary.takeovers == 0 {
            return Err(format!("script did not exercise every path: {summary:?}"));
        }
        Ok(format!(
            "seed {}: {} steps agree ({} grants, {} refusals, {} takeovers), both acquire forms",
            args.seed, summary.steps, summary.grants, summary.refusals, summary.takeovers
        ))
    }
    .await;
    report.record(
        STAGE,
        "SQL decides like the executable semantics",
        started,
        outcome,
    );

    let started = Instant::now();
    let outcome = async {
        let (result, _) = conformance::schema_race(&fresh_database().await?.url, false)
            .await
            .map_err(|error| error.to_string())?;
        let error = match result {
            Ok(()) => {
                return Err(
                    "a single attempt survived the race: the reproduction is broken".to_string(),
                )
            }
            Err(error) => error,
        };
        let sqlstate = leaseproof_postgres::PostgresLeases::sqlstate(&error);
        if !matches!(error, LeaseError::Schema { .. }) || sqlstate.as_deref() != Some("23505") {
            return Err(format!("unexpected failure without retry: {error}"));
        }
        let (result, _) = conformance::schema_race(&fresh_database().await?.url, true)
            .await
            .map_err(|error| error.to_string())?;
        result.map_err(|error| format!("ensure_schema with retry failed: {error}"))?;
        Ok("without retry: 23505 on pg_type; with retry: created".to_string())
    }
    .await;
    report.record(
        STAGE,
        "ensure_schema survives concurrent creation",
        started,
        outcome,
    );

    let started = Instant::now();
    let outcome = async {
        // Every fence the library ships: the takeover must queue behind each.
        for fence in [
            FenceUnderTest::Library(FenceMode::Exclusive),
            FenceUnderTest::Library(FenceMode::Shared),
            FenceUnderTest::SingleStatement,
        ] {
            let early =
                conformance::takeover_finishes_before_commit(&fresh_database().await?.url, fence)
                    .await
                    .map_err(|error| format!("{fence}: {error}"))?;
            if early {
                return Err(format!(
                    "{fence}: a takeover landed while the fenced transaction was open"
                ));
            }
        }
        let control = conformance::takeover_finishes_before_commit(
            &fresh_database().await?.url,
            FenceUnderTest::Clause("FOR KEY SHARE"),
        )
        .await
        .map_err(|error| error.to_string())?;
        if !control {
            return Err(
                "negative control: FOR KEY SHARE unexpectedly held off the takeover".to_string(),
            );
        }
        Ok("takeover queued behind the commit of FOR UPDATE, FOR SHARE and the single-statement insert (FOR KEY SHARE control let it through)".to_string())
    }
    .await;
    report.record(
        STAGE,
        "the fence makes a takeover wait for the commit",
        started,
        outcome,
    );
}

/// The variant's shortest path the history checker convicts of the same
/// invariant as the model (a start-up failure leaves no history to judge).
fn judged_by_checker(
    model: &leaseproof_models::LeaseModel,
    variant: leaseproof_models::Variant,
) -> Result<String, String> {
    use leaseproof_models::judged;
    let Some(invariant) = judged::expected_invariant(variant) else {
        return Ok("no history to judge (start-up)".to_string());
    };
    match judged::shortest_convicted_path(model, invariant) {
        Some((path, _)) => Ok(format!(
            "the history checker convicts a {}-step path of {}",
            path.len() - 1,
            invariant.code()
        )),
        None => Err(format!(
            "the history checker convicts no path of variant {variant} of {invariant}"
        )),
    }
}

/// The reference model exhausted (2 workers) and every broken variant refuted.
fn model_stage(report: &mut Report) {
    const STAGE: &str = "model";
    for variant in leaseproof_models::Variant::ALL {
        let started = Instant::now();
        let config =
            leaseproof_models::CheckConfig::new(leaseproof_models::LeaseModel::new(2, variant));
        let result = leaseproof_models::check(&config);
        let outcome = match (variant.expected_violation(), result.as_expected()) {
            (None, true) => Ok(format!(
                "every property holds over {} states (exhaustive)",
                result.unique_states
            )),
            (None, false) => Err(format!("the reference model failed a property:\n{result}")),
            (Some(property), true) => {
                let steps = result
                    .counterexample
                    .as_ref()
                    .map_or(0, |trace| trace.steps.len());
                judged_by_checker(&config.model, variant)
                    .map(|judged| format!("refuted: {property} fails in {steps} steps; {judged}"))
            }
            (Some(property), false) => Err(format!(
                "variant {variant} was NOT refuted (expected {property} to fail)"
            )),
        };
        let name = if variant == leaseproof_models::Variant::Reference {
            "reference protocol (2 workers)".to_string()
        } else {
            format!("variant {}", variant.name())
        };
        report.record(STAGE, name, started, outcome);
    }
    // Statements that start now and land later (the delayed-retry bug), and lost replies
    // of renewals and fenced commits: the reference keeps every property
    // under each separately bounded configuration.
    for (model, what, name) in [
        (
            leaseproof_models::LeaseModel::with_late_statements(
                2,
                leaseproof_models::Variant::Reference,
            ),
            "late statements",
            "reference protocol, statements landing late (2 workers)",
        ),
        (
            leaseproof_models::LeaseModel::with_lost_replies(
                2,
                leaseproof_models::Variant::Reference,
            ),
            "lost replies",
            "reference protocol, renew and commit replies lost (2 workers)",
        ),
        (
            leaseproof_models::LeaseModel::with_retry_interval(
                2,
                leaseproof_models::Variant::Reference,
            ),
            "a retry interval",
            "reference protocol, takeover within TTL + one retry interval (2 workers)",
        ),
    ] {
        let started = Instant::now();
        let result = leaseproof_models::check(&leaseproof_models::CheckConfig {
            model,
            search: leaseproof_models::Search::ExhaustiveSymmetric,
        });
        let outcome = if result.as_expected() {
            Ok(format!(
                "every property holds over {} states (exhaustive, symmetric)",
                result.unique_states
            ))
        } else {
            Err(format!(
                "the reference model failed a property with {what}:\n{result}"
            ))
        };
        report.record(STAGE, name, started, outcome);
    }
}

/// Every simulation scenario swept over the default seeds, fenced: clean.
fn simulation_stage(args: &VerifyArgs, report: &mut Report) {
    const STAGE: &str = "simulation";
    for summary in crate::sim::verify_sweep(0..args.sim_seeds) {
        let outcome = if summary.failures.is_empty() {
            Ok(format!(
                "{} seeds clean: {} takeovers, {} commits, {} stale commits refused, {} unknown outcomes, {} belief overlaps",
                summary.seeds_run,
                summary.takeovers,
                summary.commits,
                summary.refused_stale_commits,
                summary.unknown_ops,
                summary.belief_overlaps
            ))
        } else {
            let first = &summary.failures[0];
            Err(format!(
                "{} of {} seeds failed; replay the first: cargo run --release -- replay {} --seed {}",
                summary.failures.len(),
                summary.seeds_run,
                summary.scenario,
                first.seed
            ))
        };
        report.record_seconds(
            STAGE,
            format!("scenario {}", summary.scenario),
            summary.wall.as_secs_f64(),
            outcome,
        );
    }
}

/// Teeth: the same sweep with every worker unfenced must find violations, and
/// only the kinds the fence prevents (stale writes, belief overlaps).
fn simulation_teeth(report: &mut Report) {
    const STAGE: &str = "simulation";
    let started = Instant::now();
    let outcome = (|| {
        let scenario =
            leaseproof_sim::Scenario::embedded("gc-pause").map_err(|error| error.to_string())?;
        let config = leaseproof_sim::SweepConfig {
            seeds: 0..50,
            shard: None,
            jobs: 2,
            unfenced: true,
        };
        let summary = leaseproof_sim::sweep(&scenario, &config, &|_| {});
        let codes: std::collections::BTreeSet<&str> = summary
            .failures
            .iter()
            .flat_map(|failure| failure.invariants.iter().map(|invariant| invariant.code()))
            .collect();
        if summary.failures.is_empty() {
            return Err(
                "50 unfenced gc-pause seeds found no violation: the harness has no teeth"
                    .to_string(),
            );
        }
        if codes.iter().any(|code| !matches!(*code, "I3" | "B")) {
            return Err(format!(
                "unfenced workers broke more than the fence protects: {codes:?}"
            ));
        }
        Ok(format!(
            "unfenced workers caught in {} of {} gc-pause seeds ({} violations, kinds {codes:?}); first: cargo run --release -- replay gc-pause --seed {} --unfenced",
            summary.failures.len(),
            summary.seeds_run,
            summary.violations,
            summary.failures[0].seed
        ))
    })();
    report.record(
        STAGE,
        "teeth: unfenced workers are caught",
        started,
        outcome,
    );
    planted_defect(
        report,
        "teeth: a fence whose row lock ends before COMMIT is caught",
        "cycle-pause",
        leaseproof_sim::RunOptions {
            fence_without_lock: true,
            ..leaseproof_sim::RunOptions::default()
        },
        leaseproof_history::Invariant::FencedWrites,
    );
    planted_defect(
        report,
        "teeth: a server clock that follows its client is caught",
        "skewed-clocks",
        leaseproof_sim::RunOptions {
            clock_follows_client: true,
            ..leaseproof_sim::RunOptions::default()
        },
        leaseproof_history::Invariant::MutualExclusion,
    );
}

/// A simulated server with a planted defect (`options`) must fail some of
/// 20 seeds of `scenario`, with the violation of `expected` that the
/// simulation's true-time monitor exists for.
fn planted_defect(
    report: &mut Report,
    name: &str,
    scenario: &str,
    options: leaseproof_sim::RunOptions,
    expected: leaseproof_history::Invariant,
) {
    const STAGE: &str = "simulation";
    let started = Instant::now();
    let outcome = (|| {
        let scenario =
            leaseproof_sim::Scenario::embedded(scenario).map_err(|error| error.to_string())?;
        let caught: Vec<leaseproof_sim::RunOutcome> = (0..20)
            .map(|seed| leaseproof_sim::run(&scenario, seed, options))
            .filter(|outcome| {
                outcome.findings.iter().any(|finding| {
                    matches!(finding, leaseproof_sim::Finding::InTrueTime(violation)
                        if violation.invariant == expected)
                })
            })
            .collect();
        match caught.first() {
            None => Err(format!(
                "no seed of 0..20 of {} showed {expected} in true time: the monitor has no teeth",
                scenario.name
            )),
            Some(first) => Ok(format!(
                "{} of 20 {} seeds show {expected} in true time; first: {}",
                caught.len(),
                scenario.name,
                first.replay_command()
            )),
        }
    })();
    report.record(STAGE, name.to_string(), started, outcome);
}

/// A short task race on the real server, judged by the checker.
async fn race_stage(report: &mut Report) {
    const STAGE: &str = "race";
    let started = Instant::now();
    let outcome = match leaseproof_races::verify_race().await {
        Ok(summary) => Ok(format!(
            "{} workers: {} grants, {} commits, {} refused, {} events, checker clean",
            summary.workers,
            summary.totals.grants,
            summary.totals.commits,
            summary.totals.commits_refused,
            summary.events
        )),
        Err(error) => Err(error.to_string()),
    };
    report.record(
        STAGE,
        "tasks racing on one scope (real server)",
        started,
        outcome,
    );
}

/// pg_partsmith's lock managers: the conformance suite for each on the real
/// servers, then the manager × fault matrix with its evidence.
async fn locks_stage(report: &mut Report) {
    const STAGE: &str = "locks";
    let started = Instant::now();
    let outcome = match locks_conformance().await {
        Ok(lines) => Ok(lines.join("; ")),
        Err(error) => Err(error),
    };
    report.record(
        STAGE,
        "advisory, redis, lease pass the conformance suite",
        started,
        outcome,
    );
    let started = Instant::now();
    let matrix = async {
        let mut servers = leaseproof_races::lock_matrix::Servers::start()
            .await
            .map_err(|error| error.to_string())?;
        leaseproof_races::lock_matrix::run_matrix(&mut servers)
            .await
            .map_err(|error| error.to_string())
    }
    .await;
    let outcome = match matrix {
        Ok(cells) => {
            println!("\n{}", leaseproof_races::lock_matrix::render(&cells));
            let mut unexpected = Vec::new();
            for cell in &cells {
                println!(
                    "  {:<15} {:<23} {:<5} {}",
                    cell.lock.name(),
                    cell.fault.name(),
                    cell.verdict.short(),
                    cell.verdict.detail()
                );
                let expected =
                    leaseproof_races::lock_matrix::expected_verdict(cell.lock, cell.fault);
                if !expected.matches(&cell.verdict) {
                    unexpected.push(format!(
                        "{} / {}: {} (expected {})",
                        cell.lock.name(),
                        cell.fault.name(),
                        cell.verdict.short(),
                        expected.short()
                    ));
                }
            }
            println!();
            if unexpected.is_empty() {
                let violated = cells
                    .iter()
                    .filter(|cell| {
                        matches!(
                            cell.verdict,
                            leaseproof_races::lock_matrix::Verdict::Violated(_)
                        )
                    })
                    .count();
                Ok(format!(
                    "{} cells judged by the checker, {violated} show a manager breaking an invariant (findings, as expected)",
                    cells.len()
                ))
            } else {
                Err(format!("the matrix changed: {}", unexpected.join("; ")))
            }
        }
        Err(error) => Err(error),
    };
    report.record(
        STAGE,
        "manager x fault matrix (real servers)",
        started,
        outcome,
    );
}

async fn locks_conformance() -> Result<Vec<String>, String> {
    use leaseproof_races::{build_manager, ManagerKind, ManagerSpec};
    use std::sync::Arc;
    let database = fresh_database().await?;
    let redis = leaseproof_redis_server::shared_server()?;
    let mut managers = Vec::new();
    for kind in [
        ManagerKind::Advisory,
        ManagerKind::Redis,
        ManagerKind::Lease,
    ] {
        // Each manager's TTL as a user would leave it: Redis's default, the
        // lease's 30 s.
        let ttl = match kind {
            ManagerKind::Redis => leaseproof_locks::RedisLockOptions::default().ttl,
            _ => std::time::Duration::from_secs(30),
        };
        let built = build_manager(ManagerSpec {
            redis_url: Some(redis.url.clone()),
            ttl,
            ..ManagerSpec::new(kind, "verify", database.url.clone())
        })
        .await
        .map_err(|error| error.to_string())?;
        managers.push((built.manager, built.lifetime_min));
    }
    let mut lines = Vec::new();
    for (manager, lifetime_min) in managers {
        let prefix = format!("verify_{}", std::process::id());
        let report =
            leaseproof_locks::conformance::run_suite(Arc::clone(&manager), &prefix, lifetime_min)
                .await
                .map_err(|error| error.to_string())?;
        lines.push(format!("{}: {report}", manager.name()));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let mut report = Report::default();
        report.record_seconds("model", "a check", 1.5, Ok("fine".to_string()));
        report.record_seconds(
            "race",
            "a <check> & more",
            0.25,
            Err("broke: \"x\" < y\nsecond line".to_string()),
        );
        report
    }

    #[test]
    fn the_json_form_round_trips_and_says_whether_everything_passed() {
        let report = report();
        let value: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(value["format"], "leaseproof-verify");
        assert_eq!(value["version"], 2);
        assert_eq!(value["stages_not_run"], serde_json::json!([]));
        assert_eq!(value["passed"], false);
        let checks: Vec<Check> = serde_json::from_value(value["checks"].clone()).unwrap();
        assert_eq!(checks, report.checks);
    }

    #[test]
    fn the_junit_form_has_a_case_per_check_and_escapes_what_it_quotes() {
        let xml = report().to_junit();
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
        assert_eq!(xml.matches("<testcase ").count(), 2);
        assert_eq!(xml.matches("<failure ").count(), 1);
        assert!(xml.contains("name=\"a &lt;check&gt; &amp; more\""), "{xml}");
        assert!(
            xml.contains("message=\"broke: &quot;x&quot; &lt; y\""),
            "{xml}"
        );
        assert!(!xml.contains("<check>"), "unescaped markup: {xml}");
    }
}
