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
    let real: Vec<(String, String, String)> = match &matrix {
        Ok(cells) => cells
            .iter()
            .map(|cell| {
                (
                    cell.lock.name().to_string(),
                    cell.fault.name().to_string(),
                    cell.verdict.short(),
                )
            })
            .collect(),
        Err(_) => Vec::new(),
    };
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
    seeded_matrix(report, &real).await;
}

/// Seeds per cell of the matrix by seed.
const SEEDS_PER_CELL: u64 = 20;

/// The advisory and Redis cells again, by seed in the simulation (the managers' own
/// code), printed beside the real-server verdicts (`real`: lock, fault,
/// verdict): each must show what it is pinned to; a difference from the
/// real scene is printed, not hidden.
async fn seeded_matrix(report: &mut Report, real: &[(String, String, String)]) {
    const STAGE: &str = "locks";
    let started = Instant::now();
    // A simulation runs runtimes of its own: off this one.
    let cells =
        tokio::task::spawn_blocking(|| leaseproof_sim::lock_cells::seeded_cells(0..SEEDS_PER_CELL))
            .await
            .unwrap_or_else(|error| Err(format!("the simulation panicked: {error}")));
    let outcome = cells.map(|cells| {
        println!(
            "  {:<15} {:<23} {:<12} by seed ({SEEDS_PER_CELL} seeds)",
            "lock", "fault", "real server"
        );
        let mut unexpected = Vec::new();
        for cell in &cells {
            let real_verdict = real
                .iter()
                .find(|(lock, fault, _)| lock == cell.lock && fault == cell.fault)
                .map_or("-", |(_, _, verdict)| verdict.as_str());
            let agreement = match (real_verdict, cell.short()) {
                ("-", _) => String::new(),
                (real, seeded) if real == seeded => "  (same)".to_string(),
                (_, _) => "  (the seeds find what the scene does not)".to_string(),
            };
            println!(
                "  {:<15} {:<23} {:<12} {} in {} of {} seeds{}{agreement}",
                cell.lock,
                cell.fault,
                real_verdict,
                cell.short(),
                cell.seeds_breaking,
                cell.seeds_run,
                cell.replay()
                    .map_or(String::new(), |replay| format!("; first: {replay}")),
            );
            if cell.broken != cell.expected {
                unexpected.push(format!("{} / {}: {}", cell.lock, cell.fault, cell.short()));
            }
        }
        println!();
        (cells.len(), unexpected)
    });
    let outcome = match outcome {
        Ok((cells, unexpected)) if unexpected.is_empty() => Ok(format!(
            "{cells} Redis cells run by seed ({SEEDS_PER_CELL} each, the manager's own code in the simulation), each showing what it is pinned to"
        )),
        Ok((_, unexpected)) => Err(format!("the matrix by seed changed: {}", unexpected.join("; "))),
        Err(error) => Err(error),
    };
    report.record(
        STAGE,
        "manager x fault matrix by seed (simulation)",
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
