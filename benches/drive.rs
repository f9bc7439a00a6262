//! Runs rigs for the report: one measured run of a workload, and the
//! server's transactions per operation.
//!
//! Goal: the two ways the report drives a rig, apart from the rig (how
//! contenders operate) and the measurement (what a run's numbers are), so
//! neither of those depends on the other's caller.

use std::time::Duration;

use sqlx::{Connection as _, PgConnection};

use crate::measure::Measurement;
use crate::rig::Rig;
use crate::workload::Workload;
use crate::BenchError;

/// Runs `workload` with `contenders` concurrent contenders, each on its own
/// connection to `url`, for `duration`, after setup and warm-up (not timed).
pub async fn measure(
    url: &str,
    workload: Workload,
    contenders: usize,
    duration: Duration,
) -> Result<Measurement, BenchError> {
    let rig = Rig::prepare(url, workload, contenders).await?;
    let measurement = rig.run_for(duration).await;
    rig.close().await;
    measurement
}

/// Committed plus rolled-back transactions of the current database, as the
/// statistics system has them now (a fresh snapshot).
async fn transactions_so_far(url: &str) -> Result<i64, BenchError> {
    // Backends report their counts when they exit (or after a second idle);
    // give the closed contenders' backends a moment to exit.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let mut connection = PgConnection::connect(url).await?;
    let transactions: i64 = sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .fetch_one(&mut connection)
    .await?;
    let _ = connection.close().await;
    Ok(transactions)
}

/// Server transactions per operation of `workload`, from `pg_stat_database`:
/// the evidence that an acquisition is one autocommit statement.
///
/// Two runs of `operations_small` and `operations_large` operations per
/// contender, each on freshly prepared (and then closed) connections; the
/// difference of their transaction counts divided by the difference of their
/// operations cancels everything the runs share (connecting, preparing
/// statements, warm-up, setup, the count's own query). Other sessions on the
/// same database during the count would inflate it.
pub async fn transactions_per_operation(
    url: &str,
    workload: Workload,
    contenders: usize,
    operations_small: u64,
    operations_large: u64,
) -> Result<f64, BenchError> {
    assert!(operations_large > operations_small);
    let mut deltas = Vec::with_capacity(2);
    for per_contender in [operations_small, operations_large] {
        let before = transactions_so_far(url).await?;
        let rig = Rig::prepare(url, workload, contenders).await?;
        rig.run_count(per_contender * contenders as u64).await?;
        rig.close().await;
        let after = transactions_so_far(url).await?;
        deltas.push(after - before);
    }
    let operations = (operations_large - operations_small) * contenders as u64;
    Ok((deltas[1] - deltas[0]) as f64 / operations as f64)
}
