//! `verify`'s locks stage: the managers' conformance suite and the
//! manager x fault matrix on real servers.

use std::time::Instant;

use super::{fresh_database, Report};

/// pg_partsmith's lock managers: the conformance suite for each on the real
/// servers, then the manager × fault matrix with its evidence.
pub(super) async fn locks_stage(report: &mut Report) {
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
