//! `verify`'s PostgreSQL stage: the SQL held to the executable semantics,
//! the schema race, the fences, on the throwaway cluster.

use leaseproof_postgres::conformance::{self, FenceUnderTest};
use leaseproof_postgres::FenceMode;
use leaseproof_protocol::LeaseError;
use std::time::Instant;

use super::{fresh_database, Report, VerifyArgs};

pub(super) async fn postgres_stage(args: &VerifyArgs, report: &mut Report) {
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
            FenceUnderTest::Cycle(FenceMode::Exclusive),
            FenceUnderTest::Cycle(FenceMode::Shared),
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
        Ok("takeover queued behind the commit of FOR UPDATE, FOR SHARE (each alone and inside commit_cycle) and the single-statement insert (FOR KEY SHARE control let it through)".to_string())
    }
    .await;
    report.record(
        STAGE,
        "the fence makes a takeover wait for the commit",
        started,
        outcome,
    );
}
