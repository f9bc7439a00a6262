//! `verify`'s race stage: tasks racing on one scope of the real server.

use std::time::Instant;

use super::Report;

/// A short task race on the real server, judged by the checker.
pub(super) async fn race_stage(report: &mut Report) {
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
