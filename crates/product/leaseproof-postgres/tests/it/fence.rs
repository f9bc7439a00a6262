//! The commit-time fence on the real server.
//!
//! - A stale holder's commit cycle is refused and its writes roll back.
//! - The fence's `FOR UPDATE` makes a rival's takeover *wait* for the commit;
//!   the negative control shows a fence in a mode that does not conflict with
//!   the takeover's row lock (`FOR KEY SHARE`) lets the takeover through —
//!   which is what this test would catch if the fence's mode were weakened.
//! - The fence refuses to run outside a transaction or in another domain.

use leaseproof_postgres::conformance::FenceUnderTest;
use leaseproof_postgres::{conformance, CycleError, FenceMode, GuardedInsert, PostgresLeases};
use leaseproof_protocol::{Lease, LeaseError, Owner, Scope, Ttl};
use sqlx::{Connection, PgConnection};

use crate::connection_loss::{lock_waiter, own_pid};
use crate::fresh;

async fn create_results_table(leases: &PostgresLeases) {
    sqlx::query("CREATE TABLE results (token bigint NOT NULL, value int NOT NULL)")
        .execute(leases.pool())
        .await
        .unwrap();
}

/// A commit cycle under `lease` that inserts one `results` row.
async fn commit_result(
    leases: &PostgresLeases,
    lease: &Lease,
    token: i64,
    value: i32,
) -> Result<(), CycleError<sqlx::Error>> {
    leases
        .commit_cycle(lease, |connection: &mut PgConnection| {
            Box::pin(async move {
                sqlx::query("INSERT INTO results VALUES ($1, $2)")
                    .bind(token)
                    .bind(value)
                    .execute(connection)
                    .await
                    .map(drop)
            })
        })
        .await
}

async fn results(leases: &PostgresLeases) -> Vec<(i64, i32)> {
    sqlx::query_as("SELECT token, value FROM results ORDER BY value")
        .fetch_all(leases.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn stale_holder_commit_is_refused_after_takeover_and_writes_roll_back() {
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("job").unwrap();
    let ttl = Ttl::from_millis(60_000).unwrap();
    let stale = leases
        .acquire(&scope, &Owner::generate(), ttl)
        .await
        .unwrap();
    // The holder "pauses"; its lease runs out and a rival takes over.
    assert!(leases.force_expire(&scope).await.unwrap());
    let rival = leases
        .acquire(&scope, &Owner::generate(), ttl)
        .await
        .unwrap();
    assert!(rival.token() > stale.token());

    let ran = std::sync::atomic::AtomicBool::new(false);
    let refused = leases
        .commit_cycle(&stale, |connection: &mut PgConnection| {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                sqlx::query("INSERT INTO results VALUES (1, 1)")
                    .execute(connection)
                    .await
                    .map(drop)
            })
        })
        .await;
    assert!(
        matches!(refused, Err(CycleError::Lease(LeaseError::Lost { .. }))),
        "{refused:?}"
    );
    assert!(
        !ran.load(std::sync::atomic::Ordering::SeqCst),
        "the writes never ran"
    );

    // The low-level path: writes first, fence second, then the fence refuses and the writes roll back.
    let mut transaction = leases.begin().await.unwrap();
    sqlx::query("INSERT INTO results VALUES (1, 2)")
        .execute(transaction.connection())
        .await
        .unwrap();
    assert!(!leases
        .hold_for_update(&mut transaction, &stale)
        .await
        .unwrap());
    transaction.rollback().await.unwrap();

    let committed = commit_result(&leases, &rival, 2, 3).await;
    assert!(committed.is_ok(), "{committed:?}");
    assert_eq!(
        results(&leases).await,
        vec![(2, 3)],
        "only the current holder's write exists"
    );
}

async fn takeover_finishes_before_commit(fence: FenceUnderTest<'_>) -> Option<bool> {
    let database = leaseproof_pgcluster::test_database().await?;
    Some(
        conformance::takeover_finishes_before_commit(&database.url, fence)
            .await
            .unwrap_or_else(|error| panic!("{error}")),
    )
}

#[tokio::test]
async fn fence_makes_rival_takeover_wait_for_the_commit() {
    let Some(finished_early) =
        takeover_finishes_before_commit(FenceUnderTest::Library(FenceMode::Exclusive)).await
    else {
        return;
    };
    assert!(
        !finished_early,
        "a takeover landed while the fenced transaction was open"
    );
}

#[tokio::test]
async fn shared_fence_makes_rival_takeover_wait_for_the_commit() {
    let Some(finished_early) =
        takeover_finishes_before_commit(FenceUnderTest::Library(FenceMode::Shared)).await
    else {
        return;
    };
    assert!(
        !finished_early,
        "a takeover landed while the FOR SHARE fenced transaction was open"
    );
}

#[tokio::test]
async fn the_commit_cycles_fence_makes_rival_takeover_wait_for_the_commit_in_either_mode() {
    for mode in [FenceMode::Exclusive, FenceMode::Shared] {
        let Some(finished_early) =
            takeover_finishes_before_commit(FenceUnderTest::Cycle(mode)).await
        else {
            return;
        };
        assert!(
            !finished_early,
            "a takeover landed while a {mode:?} commit cycle was open"
        );
    }
}

#[tokio::test]
async fn single_statement_guarded_insert_makes_rival_takeover_wait_for_the_commit() {
    let Some(finished_early) =
        takeover_finishes_before_commit(FenceUnderTest::SingleStatement).await
    else {
        return;
    };
    assert!(
        !finished_early,
        "a takeover landed while the guarded insert's transaction was open"
    );
}

#[tokio::test]
async fn fence_in_key_share_mode_would_not_hold_off_a_takeover() {
    // Negative control: proves the test above can fail.
    let Some(finished_early) =
        takeover_finishes_before_commit(FenceUnderTest::Clause("FOR KEY SHARE")).await
    else {
        return;
    };
    assert!(
        finished_early,
        "FOR KEY SHARE does not conflict with the takeover's row lock"
    );
}

#[tokio::test]
async fn fence_refuses_outside_a_transaction_and_in_another_domain() {
    let Some((database, leases)) = fresh(3).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let lease = leases
        .acquire(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();

    // Outside a transaction the row lock would end with the statement.
    let mut plain = database.connect().await.unwrap();
    let refused = leases.hold_for_update_on(&mut plain, &lease).await;
    assert!(
        matches!(refused, Err(LeaseError::TransactionDomain { .. })),
        "{refused:?}"
    );

    // A LeaseTransaction begun by another PostgresLeases (another pool).
    let other = PostgresLeases::new(crate::pool(&database, 1).await);
    let mut foreign = other.begin().await.unwrap();
    let refused = leases.hold_for_update(&mut foreign, &lease).await;
    assert!(
        matches!(refused, Err(LeaseError::TransactionDomain { .. })),
        "{refused:?}"
    );

    // A caller's own transaction on another database.
    let elsewhere = leaseproof_pgcluster::test_database().await.unwrap();
    let mut elsewhere_connection = elsewhere.connect().await.unwrap();
    let mut elsewhere_transaction = elsewhere_connection.begin().await.unwrap();
    let refused = leases
        .hold_for_update_on(&mut elsewhere_transaction, &lease)
        .await;
    assert!(
        matches!(refused, Err(LeaseError::TransactionDomain { .. })),
        "{refused:?}"
    );

    // The control: a caller's own transaction on the lease's database is accepted.
    let mut own = database.connect().await.unwrap();
    let mut own_transaction = own.begin().await.unwrap();
    assert!(leases
        .hold_for_update_on(&mut own_transaction, &lease)
        .await
        .unwrap());
}

#[tokio::test]
async fn commit_under_an_older_token_of_the_same_owner_is_refused() {
    // The fence must match the token, not just the owner: an owner that lost
    // its grant and was granted again holds a new token; work begun under the
    // old one is stale.
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("job").unwrap();
    let owner = Owner::generate();
    let ttl = Ttl::from_millis(60_000).unwrap();
    let old = leases.acquire(&scope, &owner, ttl).await.unwrap();
    assert!(leases.force_expire(&scope).await.unwrap());
    let new = leases.acquire(&scope, &owner, ttl).await.unwrap();
    assert_eq!(new.token(), old.token().next());
    let refused = commit_result(&leases, &old, 1, 1).await;
    assert!(
        matches!(refused, Err(CycleError::Lease(LeaseError::Lost { .. }))),
        "{refused:?}"
    );
    assert!(results(&leases).await.is_empty());
}

#[tokio::test]
async fn commit_after_expiry_is_refused_even_before_any_takeover() {
    // The fence checks expiry too: nobody has taken over yet, but the grant
    // is over, and a rival may take over at any moment.
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("job").unwrap();
    let lease = leases
        .acquire(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    assert!(leases.force_expire(&scope).await.unwrap());
    let refused = commit_result(&leases, &lease, 1, 1).await;
    assert!(
        matches!(refused, Err(CycleError::Lease(LeaseError::Lost { .. }))),
        "{refused:?}"
    );
    assert!(results(&leases).await.is_empty());
    assert_eq!(
        leases.row(&scope).await.unwrap().unwrap().token,
        lease.token(),
        "no takeover happened"
    );
}

#[tokio::test]
async fn commit_cycle_whose_work_swallowed_an_error_is_not_reported_committed() {
    // PostgreSQL answers COMMIT of an aborted transaction with ROLLBACK and no
    // error; a cycle reported committed would then be missing (I4).
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("job").unwrap();
    let lease = leases
        .acquire(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    let outcome = leases
        .commit_cycle(&lease, |connection: &mut PgConnection| {
            Box::pin(async move {
                sqlx::query("INSERT INTO results VALUES (1, 1)")
                    .execute(&mut *connection)
                    .await?;
                // A failing statement whose error the caller ignores.
                let _ = sqlx::query("INSERT INTO no_such_table VALUES (1)")
                    .execute(&mut *connection)
                    .await;
                Ok::<(), sqlx::Error>(())
            })
        })
        .await;
    let error = match outcome {
        Err(CycleError::Lease(error)) => error,
        other => panic!("an aborted cycle was reported as {other:?}"),
    };
    assert_eq!(
        PostgresLeases::sqlstate(&error).as_deref(),
        Some("25P02"),
        "{error}"
    );
    assert!(
        results(&leases).await.is_empty(),
        "nothing of the aborted cycle committed"
    );
}

#[tokio::test]
async fn a_second_writer_under_the_same_lease_waits_for_the_fence_then_commits() {
    // Two cycles under one lease serialise on the fence's row lock: the second
    // must wait and then commit, not be refused. A fence that skips locked
    // rows (`SKIP LOCKED`) or will not wait (`NOWAIT`) refuses it at once.
    let Some((_database, leases)) = fresh(4).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("two-writers").unwrap();
    let lease = leases
        .acquire(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    let mut first = leases.begin().await.unwrap();
    assert!(leases.fence(&mut first, &lease).await.unwrap().is_some());
    let second = {
        let (leases, lease) = (leases.clone(), lease.clone());
        tokio::spawn(async move { commit_result(&leases, &lease, lease.token().0, 2).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second writer did not wait for the first one's row lock: {:?}",
        second.await
    );
    first.commit().await.unwrap();
    second
        .await
        .unwrap()
        .expect("the second writer commits after the first");
    assert_eq!(results(&leases).await, vec![(lease.token().0, 2)]);
}

#[tokio::test]
async fn a_takeover_waits_for_a_commit_cycle_whose_work_outlives_the_lease() {
    // The fence must hold its lock in the cycle's own transaction until
    // COMMIT: a fence run in a transaction of its own, apart from the writes,
    // lets the rival take over while the work is still running.
    let Some((database, leases)) = fresh(4).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("slow-cycle").unwrap();
    let holder = leases
        .acquire(&scope, &Owner::generate(), Ttl::from_millis(1_000).unwrap())
        .await
        .unwrap();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let cycle = {
        let (leases, holder) = (leases.clone(), holder.clone());
        let token = holder.token().0;
        tokio::spawn(async move {
            leases
                .commit_cycle(&holder, move |connection: &mut PgConnection| {
                    Box::pin(async move {
                        sqlx::query("INSERT INTO results VALUES ($1, 1)")
                            .bind(token)
                            .execute(&mut *connection)
                            .await?;
                        let _ = started_tx.send(());
                        // The work outlives the lease's TTL, and the rival's
                        // queueing after 1.1 s by far.
                        tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
                        Ok::<(), sqlx::Error>(())
                    })
                })
                .await
        })
    };
    started_rx.await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await; // past expiry
    let rival = {
        let (leases, scope) = (leases.clone(), scope.clone());
        tokio::spawn(async move {
            leases
                .acquire(
                    &scope,
                    &Owner::generate(),
                    Ttl::from_millis(60_000).unwrap(),
                )
                .await
        })
    };
    // Seen queued on the fence's row lock, so the check below is not
    // passed by a rival that had not yet asked.
    let mut admin = database.connect().await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    lock_waiter(&mut admin, &database.name, [admin_pid, admin_pid]).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        !rival.is_finished(),
        "the rival took over while the fenced cycle was still open: {:?}",
        rival.await
    );
    cycle.await.unwrap().expect("the cycle commits");
    let rival = rival
        .await
        .unwrap()
        .expect("the takeover lands after the commit");
    assert_eq!(rival.token(), holder.token().next());
    assert_eq!(results(&leases).await, vec![(holder.token().0, 1)]);
}

#[tokio::test]
async fn shared_fences_under_one_lease_do_not_wait_for_each_other_exclusive_ones_do() {
    let Some((_database, leases)) = fresh(4).await else {
        return;
    };
    let scope = Scope::new("writers").unwrap();
    let lease = leases
        .acquire_lease(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    for (mode, second_waits) in [(FenceMode::Shared, false), (FenceMode::Exclusive, true)] {
        let leases = leases.clone().with_fence_mode(mode);
        let mut first = leases.begin().await.unwrap();
        assert!(leases.hold_for_update(&mut first, &lease).await.unwrap());
        let mut second = leases.begin().await.unwrap();
        let second_fence = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            leases.hold_for_update(&mut second, &lease),
        )
        .await;
        assert_eq!(second_fence.is_err(), second_waits, "{mode:?}");
        if let Ok(fenced) = second_fence {
            assert!(fenced.unwrap());
        }
        drop(second);
        first.rollback().await.unwrap();
    }
}

#[tokio::test]
async fn a_guarded_insert_writes_while_the_lease_is_ours_and_nothing_after_a_takeover() {
    let Some((_database, leases)) = fresh(3).await else {
        return;
    };
    create_results_table(&leases).await;
    let scope = Scope::new("single-statement").unwrap();
    let holder = leases
        .acquire_lease(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    let one = GuardedInsert::new("results (token, value)", "lease.token, $4");
    let written = leases
        .guarded_insert(&holder, &one, |query| query.bind(7_i32))
        .await
        .unwrap();
    assert_eq!(written.rows, 1);
    assert!(written.fenced_at > holder.granted_at());
    let many = GuardedInsert::with_rows(
        "results (token, value)",
        "lease.token, value",
        "generate_series(10, 12) AS value",
    );
    assert_eq!(
        leases
            .guarded_insert(&holder, &many, |query| query)
            .await
            .unwrap()
            .rows,
        3
    );
    assert!(leases.force_expire(&scope).await.unwrap());
    // Expired and not yet taken over: the server's clock says no.
    let expired = leases
        .guarded_insert(&holder, &one, |query| query.bind(6_i32))
        .await;
    assert!(
        matches!(expired, Err(LeaseError::Lost { .. })),
        "{expired:?}"
    );
    let rival = leases
        .acquire_lease(
            &scope,
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    let refused = leases
        .guarded_insert(&holder, &one, |query| query.bind(8_i32))
        .await;
    assert!(
        matches!(refused, Err(LeaseError::Lost { .. })),
        "{refused:?}"
    );
    assert_eq!(
        results(&leases).await,
        vec![(1, 7), (1, 10), (1, 11), (1, 12)],
        "the stale holder's statement wrote nothing"
    );
    assert_eq!(
        leases
            .guarded_insert(&rival, &one, |query| query.bind(9_i32))
            .await
            .unwrap()
            .rows,
        1
    );
    // Another pool's transaction is refused before any statement.
    let other = PostgresLeases::new(leases.pool().clone());
    let mut foreign = other.begin().await.unwrap();
    assert!(matches!(
        leases
            .guarded_insert_in(&mut foreign, &rival, &one, |query| query.bind(10_i32))
            .await,
        Err(LeaseError::TransactionDomain { .. })
    ));
}
