//! The locks behind a real PgBouncer (Debian's), in transaction and session
//! pooling.
//!
//! Goal: say with evidence which lock works behind which pool mode. Method:
//! a throwaway PgBouncer in front of the test database
//! (`leaseproof_pgcluster::PgBouncer`). The lease races through transaction
//! pooling with its statements inline, every worker's history judged by the
//! one checker; the negative control sends the same statements prepared
//! through the same pooler and is broken by it (sqlx's prepared statements
//! do not survive a server connection that changes under the client). The
//! advisory manager must refuse transaction pooling — where its session
//! lock would pass to whichever client gets the server connection next —
//! and work through session pooling.
//! Invariant: I1–I4 hold for the lease through transaction pooling; the
//! advisory manager never grants behind it.

use std::time::Duration;

use leaseproof_locks::{LockError, LockManager, PostgresAdvisoryLockManager, TableName};
use leaseproof_pgcluster::{PgBouncer, PoolMode};
use leaseproof_postgres::{HarnessPort, PostgresLeases, Statements};
use leaseproof_protocol::{LeaseError, Owner, Scope, Ttl};
use leaseproof_races::race::{connect_pool, task_race_on};
use leaseproof_races::RaceConfig;
use leaseproof_worker::NoHooks;

/// A PgBouncer in `mode` in front of `database`, or `None` after the skip
/// line (a failure under `LEASEPROOF_REQUIRE_PGBOUNCER=1`).
fn bouncer(database: &leaseproof_pgcluster::TestDatabase, mode: PoolMode) -> Option<PgBouncer> {
    if leaseproof_pgcluster::pgbouncer_binary().is_none() {
        assert!(
            !leaseproof_pgcluster::require_pgbouncer(),
            "LEASEPROOF_REQUIRE_PGBOUNCER=1 but there is no pgbouncer"
        );
        eprintln!("LEASEPROOF SKIP: no pgbouncer for the pooler tests");
        return None;
    }
    Some(PgBouncer::start(&database.url, mode).expect("start a throwaway PgBouncer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_races_through_transaction_pooling_with_inline_statements() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let Some(bouncer) = bouncer(&database, PoolMode::Transaction) else {
        return;
    };
    let config = RaceConfig::default();
    let pool = connect_pool(bouncer.url(), 8, Duration::from_secs(5))
        .await
        .unwrap();
    let leases = PostgresLeases::new(pool).with_statements(Statements::Inline);
    let port = HarnessPort::new(leases);
    let outcome = task_race_on(&port, &config, |_| NoHooks).await.unwrap();
    assert!(outcome.report.is_ok(), "{}", outcome.report);
    assert_eq!(outcome.realness_problems(), Vec::<String>::new());
    assert!(outcome.report.stats.takeovers >= 1, "{}", outcome.report);
    let errors: u32 = outcome
        .summaries
        .iter()
        .map(|(_, summary)| summary.errors)
        .sum();
    assert_eq!(errors, 0, "no statement failed through the pooler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_are_broken_by_transaction_pooling() {
    // The negative control: the same leases sending prepared statements
    // through the same pooler. Clients that share server connections meet
    // each other's (or miss their own) prepared statements.
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let Some(bouncer) = bouncer(&database, PoolMode::Transaction) else {
        return;
    };
    // The schema exists (created directly), so only the leases' statements
    // go through the pooler.
    PostgresLeases::connect(&database.url, 2)
        .await
        .unwrap()
        .ensure_schema()
        .await
        .unwrap();
    let pool = connect_pool(bouncer.url(), 4, Duration::from_secs(5))
        .await
        .unwrap();
    let leases = PostgresLeases::new(pool);
    let mut tasks = Vec::new();
    for task in 0..4 {
        let leases = leases.clone();
        tasks.push(tokio::spawn(async move {
            let mut broken = 0;
            for round in 0..20 {
                let scope = Scope::new(format!("pooled-{task}-{round}")).unwrap();
                match leases
                    .acquire_lease(&scope, &Owner::generate(), Ttl::from_millis(5_000).unwrap())
                    .await
                {
                    Ok(_) => {}
                    Err(error) if error.to_string().contains("prepared statement") => broken += 1,
                    Err(LeaseError::OutcomeUnknown { .. } | LeaseError::Unavailable { .. }) => {
                        broken += 1
                    }
                    Err(error) => panic!("{error}"),
                }
            }
            broken
        }));
    }
    let mut broken = 0;
    for task in tasks {
        broken += task.await.unwrap();
    }
    assert!(
        broken > 0,
        "prepared statements survived transaction pooling"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisory_manager_refuses_transaction_pooling_and_works_through_session_pooling() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let Some(transaction) = bouncer(&database, PoolMode::Transaction) else {
        return;
    };
    let table = TableName::new("public", "pooled");
    let refused = PostgresAdvisoryLockManager::new(transaction.url(), "pooled")
        .unwrap()
        .acquire_lock(&table)
        .await;
    match refused {
        Err(LockError::Backend { source })
            if source
                .downcast_ref::<leaseproof_locks::TransactionPooling>()
                .is_some() => {}
        other => panic!("expected the transaction-pooling refusal, got {other:?}"),
    }
    drop(transaction);

    let Some(session) = bouncer(&database, PoolMode::Session) else {
        return;
    };
    let locks = PostgresAdvisoryLockManager::new(session.url(), "pooled").unwrap();
    let holder = locks.acquire_lock(&table).await.unwrap();
    assert!(matches!(
        locks.acquire_lock(&table).await,
        Err(LockError::Held { .. })
    ));
    assert!(locks.is_locked(&table).await.unwrap());
    holder.release().await.unwrap();
    let again = locks.acquire_lock(&table).await.unwrap();
    again.release().await.unwrap();
}
