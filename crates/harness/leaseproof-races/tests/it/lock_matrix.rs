//! Goal: every cell of the lock-manager matrix (`leaseproof verify` prints it)
//! is backed by this test: if a manager's behaviour under a fault changes, the
//! verdict changes and this fails. Method: the matrix's scenes on a dedicated
//! PostgreSQL cluster and two throwaway Redis servers (without and with
//! persistence), through the public `LockManager` API, each scene recorded as
//! a history and judged by the one checker. Invariant checked: the verdicts
//! below, each with its evidence printed.

use leaseproof_races::lock_matrix::{render, run_matrix, Fault, LockKind, Servers};

/// The expected verdict of every cell: `holds`, `n/a`, or the broken
/// invariants' codes (`I1+I3`).
fn expected(lock: LockKind, fault: Fault) -> &'static str {
    use Fault::*;
    use LockKind::*;
    match (lock, fault) {
        // A session lock survives a pause (no TTL) and dies with its session:
        // the server frees it at once, the holder learns late.
        (Advisory, HolderPaused) => "holds",
        (Advisory, LockConnectionKilled) => "I3",
        (Advisory, HolderKilled) => "holds",
        (Advisory, ServerRestart) => "I3",
        // A TTL key expires under a pause — the guard's lost fires at the
        // TTL, so the holder knew and its unfenced write is a stale one —;
        // without persistence a restart forgets the key while the holder
        // still believes — and the token counter, so the fence cannot help.
        (Redis, HolderPaused) => "I3",
        (Redis, HolderKilled) => "holds",
        (Redis, ServerRestart) => "I1+I2+I3",
        (Redis, PersistentServerRestart) => "holds",
        (RedisFenced, HolderPaused) => "holds",
        (RedisFenced, HolderKilled) => "holds",
        (RedisFenced, ServerRestart) => "I1+I2+I3",
        (RedisFenced, PersistentServerRestart) => "holds",
        // The lease row is durable and its fence refuses the paused holder.
        (Lease, HolderPaused) => "holds",
        (Lease, HolderKilled) => "holds",
        (Lease, ServerRestart) => "holds",
        // Its guard fires *lost* at the TTL, so the paused holder knew it
        // had lost the lock — and wrote anyway, unfenced: a stale write.
        (LeaseUnfenced, HolderPaused) => "I3",
        (LeaseUnfenced, HolderKilled) => "holds",
        (LeaseUnfenced, ServerRestart) => "holds",
        (_, LockConnectionKilled) | (_, PersistentServerRestart) => "n/a",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cell_of_the_lock_matrix_shows_its_verdict() {
    if leaseproof_pgcluster::test_database().await.is_none()
        || leaseproof_redis_server::test_redis_url().is_none()
    {
        return;
    }
    let mut servers = Servers::start()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let cells = run_matrix(&mut servers)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    println!("{}", render(&cells));
    let mut wrong = Vec::new();
    for cell in &cells {
        println!(
            "{:<16} {:<24} {:<6} {}",
            cell.lock.name(),
            cell.fault.name(),
            cell.verdict.short(),
            cell.verdict.detail()
        );
        if cell.verdict.short() != expected(cell.lock, cell.fault) {
            wrong.push(format!(
                "{} / {}: expected {}, got {} ({})",
                cell.lock.name(),
                cell.fault.name(),
                expected(cell.lock, cell.fault),
                cell.verdict.short(),
                cell.verdict.detail()
            ));
        }
    }
    assert_eq!(cells.len(), LockKind::ALL.len() * Fault::ALL.len());
    // The library's table (what verify and the README say) is this one.
    for lock in LockKind::ALL {
        for fault in Fault::ALL {
            assert_eq!(
                leaseproof_races::lock_matrix::expected_verdict(lock, fault).short(),
                expected(lock, fault),
                "{} / {}",
                lock.name(),
                fault.name()
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
