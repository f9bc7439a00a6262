//! `leaseproof verify`: every stage, on the embedded default, one verdict.
//!
//! Stages run in order from the cheapest; each prints one line per check with
//! what it proved and its figures. The exit status is non-zero when any check
//! fails, so CI and users can rely on it.

use std::process::ExitCode;
use std::time::Instant;

use leaseproof_postgres::conformance;
use leaseproof_protocol::LeaseError;

/// Arguments of `leaseproof verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Seed for the seeded stages (the differential script).
    #[arg(long, default_value_t = 0x1ea5e)]
    pub seed: u64,
}

/// The verdict of one check.
struct Check {
    stage: &'static str,
    name: &'static str,
    passed: bool,
    detail: String,
    seconds: f64,
}

#[derive(Default)]
struct Report {
    checks: Vec<Check>,
}

impl Report {
    fn record(
        &mut self,
        stage: &'static str,
        name: &'static str,
        started: Instant,
        outcome: Result<String, String>,
    ) {
        let seconds = started.elapsed().as_secs_f64();
        let (passed, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        println!(
            "{} {stage:<10} {name:<48} {seconds:>6.2}s  {detail}",
            if passed { "PASS" } else { "FAIL" }
        );
        self.checks.push(Check {
            stage,
            name,
            passed,
            detail,
            seconds,
        });
    }

    fn finish(&self) -> ExitCode {
        let failed: Vec<&Check> = self.checks.iter().filter(|check| !check.passed).collect();
        let seconds: f64 = self.checks.iter().map(|check| check.seconds).sum();
        println!();
        if failed.is_empty() {
            println!(
                "verify: all {} checks passed in {seconds:.1}s",
                self.checks.len()
            );
            ExitCode::SUCCESS
        } else {
            println!(
                "verify: {} of {} checks FAILED:",
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
    runtime.block_on(postgres_stage(&args, &mut report));
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
        let early = conformance::takeover_finishes_before_commit(
            &fresh_database().await?.url,
            "FOR UPDATE",
        )
        .await
        .map_err(|error| error.to_string())?;
        if early {
            return Err("a takeover landed while the fenced transaction was open".to_string());
        }
        let control = conformance::takeover_finishes_before_commit(
            &fresh_database().await?.url,
            "FOR KEY SHARE",
        )
        .await
        .map_err(|error| error.to_string())?;
        if !control {
            return Err(
                "negative control: FOR KEY SHARE unexpectedly held off the takeover".to_string(),
            );
        }
        Ok("takeover queued behind the commit (FOR KEY SHARE control let it through)".to_string())
    }
    .await;
    report.record(
        STAGE,
        "the fence makes a takeover wait for the commit",
        started,
        outcome,
    );
}
