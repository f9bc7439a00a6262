//! Leader election on the lease (`leaseproof_postgres::Election`), raced on
//! the real server and judged by the one checker.
//!
//! Goal: one leader at a time, each term's writes fenced, a leader that lost
//! its term told at once and refused, and an observer that follows the
//! terms in order. Method: four candidates campaign in turn for one scope,
//! each term writes rows through its fenced commit and resigns; every
//! campaign, commit and resignation is recorded on one monotonic clock, the
//! rows are read back with their commit times, and `check` judges it all.
//! An observer watches meanwhile. A second scene breaks a leader's term by
//! hand (as an expiry during a pause would) and a rival campaigns.
//! Invariant: I1 (terms never overlap on the server's clock), I2 (each
//! term's token is larger), I3 (a write lands only inside its term), I4.

use std::collections::BTreeSet;
use std::time::Duration;

use leaseproof_history::{check, CheckConfig, GrantStamps, Recorder};
use leaseproof_postgres::{CycleError, Election, GuardedTable, PostgresLeases};
use leaseproof_protocol::{GuardedCycle, LeaseError, Owner, Scope, Ttl};
use leaseproof_races::clock::RunClock;
use leaseproof_races::race::history_rows;

use crate::support::{commit_op, committed, release_op, released, SceneWorker};

const TERMS_EACH: u64 = 4;

async fn election(url: &str, scope: &str, term_ttl_ms: i64) -> (PostgresLeases, Election) {
    let leases = PostgresLeases::connect(url, 8).await.unwrap();
    leases.ensure_schema().await.unwrap();
    GuardedTable::new(leases.pool().clone())
        .ensure()
        .await
        .unwrap();
    let election = Election::new(
        leases.clone(),
        Scope::new(scope).unwrap(),
        Ttl::from_millis(term_ttl_ms).unwrap(),
    );
    (leases, election)
}

/// One candidate: `TERMS_EACH` terms, each one fenced write, then resign.
async fn candidate(election: Election, name: String, recorder: Recorder, clock: RunClock) {
    let worker = SceneWorker {
        name: &name,
        recorder: &recorder,
        clock,
    };
    for term in 0..TERMS_EACH {
        let owner = Owner::generate();
        let campaign = worker.invoke(SceneWorker::acquire_op(
            "election",
            owner.as_str(),
            2_000_000,
        ));
        let leadership = election
            .campaign(&owner, Duration::from_secs(30))
            .await
            .expect("every candidate leads in its turn");
        let lease = leadership.lease().clone();
        worker.complete_acquire(campaign, &Ok(lease.clone()));
        tokio::time::sleep(Duration::from_millis(15)).await;
        let cycle_id = i64::try_from(term).unwrap() + 1_000 * worker_number(&name);
        let commit = worker.invoke(commit_op(&lease, u64::try_from(cycle_id).unwrap(), 2));
        let written = leadership
            .commit_cycle(|connection| {
                let lease = lease.clone();
                Box::pin(async move {
                    GuardedTable::insert(connection, &lease, GuardedCycle { cycle_id, items: 2 })
                        .await
                })
            })
            .await;
        assert!(written.is_ok(), "a leader's fenced write: {written:?}");
        worker.complete(commit, committed());
        let resign = worker.invoke(release_op(&lease));
        let ended = leadership
            .resign()
            .await
            .unwrap()
            .expect("resigned while leading");
        worker.complete(resign, released(ended));
    }
}

fn worker_number(worker: &str) -> i64 {
    worker.trim_start_matches('c').parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_lead_one_at_a_time_and_the_observer_follows_the_terms() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let (leases, election) = election(&database.url, "election", 2_000).await;
    let observed = election.observe(Duration::from_millis(50));
    let mut follower = observed.clone();
    let terms = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watcher = {
        let terms = std::sync::Arc::clone(&terms);
        let mut observed = observed;
        tokio::spawn(async move {
            while observed.changed().await.is_ok() {
                let leader = observed.borrow_and_update().clone();
                terms
                    .lock()
                    .unwrap()
                    .push(leader.map(|holder| holder.token.0));
            }
        })
    };
    let recorder = Recorder::new();
    let clock = RunClock::start();
    let candidates: Vec<_> = (0..4)
        .map(|index| {
            tokio::spawn(candidate(
                election.clone(),
                format!("c{index}"),
                recorder.clone(),
                clock,
            ))
        })
        .collect();
    for candidate in candidates {
        candidate.await.unwrap();
    }
    // After the last resignation nobody leads, and the observer says so.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while election.leader().await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rows = GuardedTable::new(leases.pool().clone())
        .rows()
        .await
        .unwrap();
    recorder.set_guarded_rows(history_rows(&rows));
    let history = recorder.snapshot();
    let report = check(
        &history,
        &CheckConfig {
            grant_stamps: GrantStamps::Decision,
            unfenced_workers: BTreeSet::new(),
            ..Default::default()
        },
    );
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, 16, "{report}");
    assert_eq!(report.stats.commits, 16, "{report}");
    assert!(report.stats.distinct_holders >= 4, "{report}");
    assert_eq!(rows.len(), 32, "every term's two rows");

    tokio::time::timeout(
        Duration::from_secs(5),
        follower.wait_for(|leader| leader.is_none()),
    )
    .await
    .expect("the observer sees that nobody leads after the last term")
    .unwrap();
    // The watcher's receiver hears the same change on its own task: give it
    // the moment to record it before stopping it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while terms.lock().unwrap().last() != Some(&None) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    watcher.abort();
    let terms = terms.lock().unwrap().clone();
    let tokens: Vec<i64> = terms.iter().flatten().copied().collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "terms observed in order: {terms:?}"
    );
    assert!(
        tokens.iter().all(|token| (1..=16).contains(token)),
        "{terms:?}"
    );
    assert!(!tokens.is_empty(), "the observer saw terms: {terms:?}");
    assert_eq!(
        terms.last(),
        Some(&None),
        "the last term's end seen: {terms:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_term_was_lost_steps_down_and_its_write_is_refused() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let (leases, election) = election(&database.url, "election-lost", 900).await;
    let old = election
        .campaign(&Owner::generate(), Duration::from_secs(5))
        .await
        .unwrap();
    // The term is broken (as an expiry during a pause would break it) and a
    // rival campaigns: it leads with a larger token.
    assert!(leases.force_expire(old.lease().scope()).await.unwrap());
    let new = election
        .campaign(&Owner::generate(), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(new.token() > old.token());
    tokio::time::timeout(Duration::from_secs(3), old.lost())
        .await
        .expect("the old leader is told within its renewal period");
    let lease = old.lease().clone();
    let refused = old
        .commit_cycle(|connection| {
            Box::pin(async move {
                GuardedTable::insert(
                    connection,
                    &lease,
                    GuardedCycle {
                        cycle_id: 1,
                        items: 1,
                    },
                )
                .await
            })
        })
        .await;
    assert!(
        matches!(refused, Err(CycleError::Lease(LeaseError::Lost { .. }))),
        "{refused:?}"
    );
    assert_eq!(old.resign().await.unwrap(), None, "nothing left to resign");
    let leader = election
        .leader()
        .await
        .unwrap()
        .expect("the new term stands");
    assert_eq!(leader.token, new.token());
    assert!(GuardedTable::new(leases.pool().clone())
        .rows()
        .await
        .unwrap()
        .is_empty());
    new.resign().await.unwrap();
}
