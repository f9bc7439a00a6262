//! Goal: the waiting and observing figures of `leaseproof bench` measure what
//! they claim — waiters are handed the lease by the release, not by their
//! poll; a hand-off costs the server a bounded number of writes whatever the
//! number of waiters; every waiter that does other work between its turns
//! gets turns; the recorder the observed rows install really records.
//! Method: [`hand_offs`] and [`overhead`] on a fresh database of the
//! throwaway cluster (or `DATABASE_URL`).
//! Invariant checked: one holder at a time (asserted by the run itself on the
//! common clock) and tokens in order.

use std::time::Duration;

use leaseproof_benches::{hand_offs, overhead};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_handed_the_lease_by_the_release_at_a_bounded_cost() {
    let _alone = crate::alone().await;
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let hold = Duration::from_millis(5);
    let think = Duration::from_millis(5);
    let mut writes_per_grant = Vec::new();
    for waiters in [2, 6] {
        let run = hand_offs(
            &database.url,
            waiters,
            Duration::from_millis(1500),
            hold,
            think,
        )
        .await
        .unwrap_or_else(|error| panic!("{waiters} waiters: {error}"));
        eprintln!("{run:?}");
        assert_eq!(run.waiters, waiters);
        assert!(run.hand_offs >= 20, "too few hand-offs timed: {run:?}");
        // The poll floor of a 60 s lease is 500 ms (±50 %): a hand-off in
        // well under it was a wake-up by the release's notification.
        assert!(
            run.p50 < Duration::from_millis(100),
            "hand-off p50 {:?}: waiters were not woken by the release",
            run.p50
        );
        assert!(run.grants_per_waiter_min > 0, "a waiter starved: {run:?}");
        assert!(run.grants_per_waiter_min <= run.grants_per_waiter_max);
        writes_per_grant.push(run.write_transactions_per_grant);
    }
    // A grant and a release are two write transactions; losers that only
    // read add none. Thrice the waiters must not mean thrice the writes.
    for &writes in &writes_per_grant {
        assert!(
            writes >= 1.9,
            "fewer writes than a grant and a release: {writes}"
        );
        assert!(
            writes <= 3.0,
            "losers wrote: {writes} write transactions per grant"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_cycles_are_recorded_and_measured_beside_quiet_ones() {
    let _alone = crate::alone().await;
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    // `overhead` fails when the recorder did not count every observed grant
    // (or counted a quiet one).
    let run = overhead(&database.url, 2, Duration::from_millis(150), 2)
        .await
        .expect("the observed loop runs");
    eprintln!("{run:?}");
    assert!(run.cycles_per_second_quiet > 0.0);
    assert!(run.cycles_per_second_observed > 0.0);
    assert!(run.ratio() > 0.0);
}
