//! Goal: the load generator measures what it claims — every workload runs and
//! completes operations, losers on a held lease really lose, takeover keeps
//! granting with tokens in order, and an acquisition is one server transaction.
//! Method: [`measure`] for 0.3 s per workload on a fresh database of the
//! throwaway cluster (or `DATABASE_URL`), at 1 and 4 contenders.
//! Invariant checked: grants of one scope never overlap (the rig asserts I1 on
//! every run), and the outcome checks of the rig hold (no loser granted).

use std::time::Duration;

use leaseproof_benches::{measure, transactions_per_operation, Measurement, Workload};

const RUN: Duration = Duration::from_millis(300);

async fn run(url: &str, workload: Workload, contenders: usize) -> Measurement {
    let measurement = measure(url, workload, contenders, RUN)
        .await
        .unwrap_or_else(|error| panic!("{workload} x{contenders}: {error}"));
    assert_eq!(measurement.workload, workload);
    assert_eq!(measurement.contenders, contenders);
    assert!(
        measurement.operations > 0,
        "{workload}: no operation completed"
    );
    assert!(measurement.throughput_per_second > 0.0);
    assert!(measurement.elapsed >= RUN);
    assert!(measurement.p50 > Duration::ZERO);
    assert!(measurement.p50 <= measurement.p99);
    measurement
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workload_completes_operations_with_the_right_outcomes() {
    let _alone = crate::alone().await;
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    for workload in Workload::ALL {
        for contenders in [1, 4] {
            let measurement = run(&database.url, workload, contenders).await;
            match workload {
                Workload::AcquireHeld
                | Workload::AcquireHeldUnguarded
                | Workload::AcquireHeldViaLibrary
                | Workload::AcquireHeldViaLibraryNoPing
                | Workload::AcquireHeldViaLibraryNoReuse
                | Workload::AcquireHeldViaLibraryOnConnection
                | Workload::AcquireHeldCandidateUpdateFirst
                | Workload::AcquireHeldCandidateFunction
                | Workload::AcquireHeldReadFirst => {
                    assert!(workload.is_held_acquisition());
                    assert_eq!(measurement.granted, 0, "{workload}: a loser was granted");
                }
                Workload::AcquireUncontended
                | Workload::AcquireUncontendedReadFirst
                | Workload::AcquireUncontendedViaLibrary
                | Workload::ReleaseReacquire => {
                    assert_eq!(
                        measurement.granted, measurement.operations,
                        "{workload}: an uncontended acquisition was refused"
                    );
                }
                Workload::AcquireTakeover | Workload::TakeoverLatency => {
                    assert!(
                        measurement.granted > 0,
                        "{workload}: nothing was taken over"
                    );
                    assert!(measurement.granted < measurement.operations);
                }
                Workload::SelectOne
                | Workload::AdvisoryXactLock
                | Workload::Renew
                | Workload::FencedCommit
                | Workload::FencedCommitShared
                | Workload::FencedCommitInPieces
                | Workload::GuardedInsertOneStatement
                | Workload::UnfencedWrite
                | Workload::PeerUpdateWhereExpired
                | Workload::PeerUpsertAlwaysWriting
                | Workload::PeerPkRead
                | Workload::SelectOneViaPool => {
                    // The peers' "not won" is checked by the rig on every
                    // operation (a peer taking the held scope is an error).
                    assert_eq!(measurement.granted, 0, "{workload} grants nothing");
                }
            }
            let takeover_expected = matches!(
                workload,
                Workload::AcquireTakeover | Workload::TakeoverLatency
            );
            assert_eq!(
                measurement.takeover.is_some(),
                takeover_expected,
                "{workload}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_of_an_expired_lease_follows_its_expiry_closely() {
    let _alone = crate::alone().await;
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let measurement = run(&database.url, Workload::TakeoverLatency, 2).await;
    let takeover = measurement.takeover.expect("consecutive grants were seen");
    // A 20 ms TTL over 0.3 s: about 15 takeovers, each polled for.
    assert!(takeover.takeovers >= 5, "{takeover:?}");
    assert!(takeover.server_p50 <= takeover.server_p99);
    // Polling contenders take an expired lease within a few round trips,
    // far less than a TTL.
    assert!(
        takeover.server_p50 < Duration::from_millis(20),
        "{takeover:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_attempt_is_one_server_transaction_winner_or_loser() {
    let _alone = crate::alone().await;
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    for workload in [
        Workload::AcquireHeld,
        Workload::AcquireTakeover,
        Workload::ReleaseReacquire,
    ] {
        let per_operation = transactions_per_operation(&database.url, workload, 2, 50, 300)
            .await
            .unwrap_or_else(|error| panic!("{workload}: {error}"));
        let expected = f64::from(workload.transactions_per_operation());
        assert!(
            (per_operation - expected).abs() < 0.05,
            "{workload}: {per_operation:.3} transactions per operation, expected {expected}"
        );
    }
}
