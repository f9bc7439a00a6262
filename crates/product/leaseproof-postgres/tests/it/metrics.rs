//! What the lease reports through the `metrics` facade, read back from a
//! recorder: every acquisition's outcome, renewals, releases, a loss, the
//! fenced commits, hold and wait times.
//!
//! Method: a debugging recorder installed for this test's thread only, and
//! a current-thread runtime, so every task the lease runs reports to it and
//! no other test's numbers mix in. Invariant: the counts are exactly the
//! operations the test made.

use std::collections::BTreeMap;
use std::time::Duration;

use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{Owner, Scope, Ttl};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// `name{label=value,…}` → the counter's value, or the histogram's count.
fn readings(recorder: &DebuggingRecorder) -> BTreeMap<String, u64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let name = if labels.is_empty() {
                key.name().to_string()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            };
            let value = match value {
                DebugValue::Counter(count) => count,
                DebugValue::Histogram(values) => values.len() as u64,
                DebugValue::Gauge(_) => 0,
            };
            (name, value)
        })
        .collect()
}

#[test]
fn the_lease_counts_what_it_did_through_the_metrics_facade() {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ran = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let Some(database) = leaseproof_pgcluster::test_database().await else {
                return false;
            };
            let leases = PostgresLeases::connect(&database.url, 4).await.unwrap();
            leases.ensure_schema().await.unwrap();
            let scope = Scope::new("metrics").unwrap();
            let ttl = Ttl::from_millis(30_000).unwrap();
            let mut holder = leases
                .acquire(&scope, &Owner::generate(), ttl)
                .await
                .unwrap();
            leases
                .acquire(&scope, &Owner::generate(), ttl)
                .await
                .expect_err("held");
            holder.renew().await.unwrap();
            holder
                .commit_cycle(|connection| {
                    Box::pin(async move { sqlx::query("SELECT 1").execute(connection).await })
                })
                .await
                .unwrap();
            holder.release().await.unwrap();
            // A waiter that gets it at once, and one that times out.
            let waiter = leases
                .acquire_wait(&scope, &Owner::generate(), ttl, Duration::from_secs(5))
                .await
                .unwrap();
            leases
                .acquire_wait(&scope, &Owner::generate(), ttl, Duration::from_millis(50))
                .await
                .expect_err("held to the deadline");
            // A loss: the lease is broken by hand and the guard's commit finds it gone.
            assert!(leases.force_expire(&scope).await.unwrap());
            waiter
                .commit_cycle(|connection| {
                    Box::pin(async move { sqlx::query("SELECT 1").execute(connection).await })
                })
                .await
                .expect_err("the fence refuses");
            assert!(waiter.is_lost());
            true
        })
    });
    if !ran {
        return;
    }
    let readings = readings(&recorder);
    let reading = |name: &str| readings.get(name).copied().unwrap_or(0);
    assert_eq!(
        reading("leaseproof_acquisitions_total{outcome=granted}"),
        2,
        "{readings:#?}"
    );
    assert!(
        reading("leaseproof_acquisitions_total{outcome=held}") >= 2,
        "{readings:#?}"
    );
    assert_eq!(
        reading("leaseproof_renewals_total{outcome=renewed}"),
        1,
        "{readings:#?}"
    );
    assert_eq!(
        reading("leaseproof_commits_total{outcome=committed}"),
        1,
        "{readings:#?}"
    );
    assert_eq!(
        reading("leaseproof_commits_total{outcome=lost}"),
        1,
        "{readings:#?}"
    );
    assert_eq!(
        reading("leaseproof_releases_total{outcome=released}"),
        1,
        "{readings:#?}"
    );
    assert_eq!(
        reading("leaseproof_losses_total{reason=gone}"),
        1,
        "{readings:#?}"
    );
    assert_eq!(reading("leaseproof_held_seconds"), 1, "{readings:#?}");
    assert_eq!(
        reading("leaseproof_waited_seconds{outcome=granted}"),
        1,
        "{readings:#?}"
    );
    assert_eq!(
        reading("leaseproof_waited_seconds{outcome=held}"),
        1,
        "{readings:#?}"
    );
    assert!(reading("leaseproof_acquire_seconds") >= 4, "{readings:#?}");
}
