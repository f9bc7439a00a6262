//! Waiting acquisition (`PostgresLeases::acquire_wait`) raced on the real
//! server and judged by the one checker.
//!
//! Goal: waiters woken by each other's releases hold the scope one at a
//! time, each turn's writes fenced, and a wait that runs out is refused
//! (`Held`), never granted. Method: five waiters of one process take four
//! turns each — wait, one fenced write through the guard's commit cycle,
//! release — while a sixth, arriving while a gatekeeper holds the scope
//! (before the waiters' turns), waits with a deadline too short to be
//! served; every wait, commit and release is recorded on one monotonic
//! clock, the rows are read back with their commit times, and `check`
//! judges it all. Invariant: I1, I2, I3, I4 hold; the race was real (every
//! waiter held, every turn a new token).

use std::collections::BTreeSet;
use std::time::Duration;

use leaseproof_history::{check, CheckConfig, GrantStamps, Recorder};
use leaseproof_postgres::{GuardedTable, LeaseGuard, PostgresLeases};
use leaseproof_protocol::{GuardedCycle, LeaseError, Owner, Scope, Ttl};
use leaseproof_races::clock::RunClock;
use leaseproof_races::race::history_rows;

use crate::support::{commit_op, committed, release_op, released, SceneWorker};

const TURNS_EACH: i64 = 4;
const WAITERS: i64 = 5;

/// A new owner's wait of at most `deadline` for `scope`, recorded by `worker`.
async fn recorded_wait(
    worker: &SceneWorker<'_>,
    leases: &PostgresLeases,
    scope: &Scope,
    deadline: Duration,
) -> Result<LeaseGuard, LeaseError> {
    let owner = Owner::generate();
    let ttl = Ttl::from_millis(5_000).unwrap();
    let wait = worker.invoke(SceneWorker::acquire_op(
        scope.as_str(),
        owner.as_str(),
        ttl.as_micros(),
    ));
    match leases.acquire_wait(scope, &owner, ttl, deadline).await {
        Ok(guard) => {
            worker.complete_acquire(wait, &Ok(guard.lease().clone()));
            Ok(guard)
        }
        Err(error) => {
            worker.complete_refused(wait, &error);
            Err(error)
        }
    }
}

/// One waiter: `TURNS_EACH` turns of wait, fenced write, release.
async fn waiter(
    leases: PostgresLeases,
    scope: Scope,
    number: i64,
    recorder: Recorder,
    clock: RunClock,
) {
    let name = format!("w{number}");
    let worker = SceneWorker {
        name: &name,
        recorder: &recorder,
        clock,
    };
    for turn in 0..TURNS_EACH {
        let guard = recorded_wait(&worker, &leases, &scope, Duration::from_secs(60))
            .await
            .expect("every waiter is served in its turn");
        let lease = guard.lease().clone();
        let cycle_id = 1_000 * number + turn;
        let commit = worker.invoke(commit_op(&lease, u64::try_from(cycle_id).unwrap(), 2));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let written = guard
            .commit_cycle(|connection| {
                let lease = lease.clone();
                Box::pin(async move {
                    GuardedTable::insert(connection, &lease, GuardedCycle { cycle_id, items: 2 })
                        .await
                })
            })
            .await;
        assert!(written.is_ok(), "a holder's fenced write: {written:?}");
        worker.complete(commit, committed());
        let release = worker.invoke(release_op(&lease));
        let ended = guard.release().await.unwrap().expect("released while held");
        worker.complete(release, released(ended));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_hold_one_at_a_time_and_a_wait_that_runs_out_is_refused() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let leases = PostgresLeases::connect(&database.url, 8).await.unwrap();
    leases.ensure_schema().await.unwrap();
    GuardedTable::new(leases.pool().clone())
        .ensure()
        .await
        .unwrap();
    let scope = Scope::new("waiting").unwrap();
    let recorder = Recorder::new();
    let clock = RunClock::start();
    // The gatekeeper holds the scope while the waiters line up and the
    // latecomer asks: nothing is left to timing (a 1 ms wait could land in
    // a gap between two turns and be granted, as it should).
    let gate = SceneWorker {
        name: "gate",
        recorder: &recorder,
        clock,
    };
    let gate_guard = recorded_wait(&gate, &leases, &scope, Duration::from_secs(60))
        .await
        .expect("the scope is free");
    let gate_lease = gate_guard.lease().clone();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|number| {
            tokio::spawn(waiter(
                leases.clone(),
                scope.clone(),
                number,
                recorder.clone(),
                clock,
            ))
        })
        .collect();
    // A latecomer whose deadline is too short to be served: its wait ends
    // `Held`, and it is recorded as the refusal it is.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let late = SceneWorker {
        name: "late",
        recorder: &recorder,
        clock,
    };
    let refused = recorded_wait(&late, &leases, &scope, Duration::from_millis(1))
        .await
        .map(|guard| guard.into_lease());
    assert!(
        matches!(refused, Err(LeaseError::Held { .. })),
        "a 1 ms wait behind a holder and five waiters: {refused:?}"
    );
    let release = gate.invoke(release_op(&gate_lease));
    let ended = gate_guard
        .release()
        .await
        .unwrap()
        .expect("released while held");
    gate.complete(release, released(ended));
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let rows = GuardedTable::new(leases.pool().clone())
        .rows()
        .await
        .unwrap();
    recorder.set_guarded_rows(history_rows(&rows));
    let report = check(
        &recorder.snapshot(),
        &CheckConfig {
            grant_stamps: GrantStamps::Decision,
            unfenced_workers: BTreeSet::new(),
            ..Default::default()
        },
    );
    assert!(report.is_ok(), "{report}");
    let turns = u64::try_from(WAITERS * TURNS_EACH).unwrap();
    assert_eq!(
        report.stats.grants,
        turns + 1,
        "the gatekeeper's too: {report}"
    );
    assert_eq!(report.stats.commits, turns, "{report}");
    assert_eq!(
        report.stats.distinct_holders,
        turns + 1,
        "every turn a new owner: {report}"
    );
    assert_eq!(rows.len() as u64, 2 * turns, "every turn's two rows");
    let tokens: BTreeSet<i64> = rows.iter().map(|row| row.token.0).collect();
    assert_eq!(tokens.len() as u64, turns, "every turn a new token");
    leases.close().await;
}
