//! `leaseproof verify`: every stage, on the embedded default, one verdict.
//!
//! Stages run in order from the cheapest, one file each (`model.rs`,
//! `simulation.rs`, `postgres.rs`, `race.rs`, `locks.rs`, `clients.rs`); each
//! prints one line per check with what it proved and its figures. The exit status is non-zero when any check
//! fails, so CI and users can rely on it.

use std::process::ExitCode;
use std::time::Instant;

mod clients;
mod locks;
mod model;
mod postgres;
mod race;
mod simulation;

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

impl Stage {
    /// What the stage checks: its doc comment, as `--help` shows it.
    fn what(self) -> String {
        use clap::ValueEnum as _;
        let value = self.to_possible_value().expect("no stage is skipped");
        let help = value
            .get_help()
            .map(|help| help.to_string())
            .unwrap_or_default();
        // Lower-cased to run on after the stage's name.
        let mut letters = help.chars();
        letters
            .next()
            .map(|first| first.to_lowercase().chain(letters).collect())
            .unwrap_or_default()
    }
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
    for stage in Stage::ALL.into_iter().filter(|stage| runs(*stage)) {
        // A line as each stage begins: its checks take seconds to a minute
        // each, and a reader of a redirected log should see where it is.
        println!("---- {stage}: {}", stage.what());
        match stage {
            Stage::Model => model::model_stage(&mut report),
            Stage::Simulation => simulation::simulation_stage(&args, &mut report),
            Stage::Teeth => simulation::simulation_teeth(&mut report),
            Stage::Postgres => runtime.block_on(postgres::postgres_stage(&args, &mut report)),
            Stage::Race => runtime.block_on(race::race_stage(&mut report)),
            Stage::Locks => runtime.block_on(locks::locks_stage(&mut report)),
            Stage::Clients => runtime.block_on(clients::clients_stage(&mut report)),
        }
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
pub(super) async fn fresh_database() -> Result<leaseproof_pgcluster::TestDatabase, String> {
    let server = leaseproof_pgcluster::shared_server()
        .await
        .map_err(|unavailable| unavailable.reason)?;
    server
        .fresh_database()
        .await
        .map_err(|error| error.to_string())
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
