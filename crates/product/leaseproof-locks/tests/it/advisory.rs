//! The advisory manager's own promises and failure modes, on the real server.

use std::time::Duration;

use leaseproof_locks::{advisory_key, LockError, LockManager, PostgresAdvisoryLockManager};
use sqlx::{Connection, Executor, PgConnection};

use crate::table;

async fn manager() -> Option<(
    leaseproof_pgcluster::TestDatabase,
    PostgresAdvisoryLockManager,
)> {
    let database = leaseproof_pgcluster::test_database().await?;
    let manager = PostgresAdvisoryLockManager::new(&database.url, "advisory")
        .unwrap()
        .with_probe_interval(Duration::from_millis(200));
    Some((database, manager))
}

/// A manager whose probe is slow enough that a rival's takeover always comes
/// first, however loaded the machine.
async fn slow_probe_manager() -> Option<(
    leaseproof_pgcluster::TestDatabase,
    PostgresAdvisoryLockManager,
)> {
    let database = leaseproof_pgcluster::test_database().await?;
    let manager = PostgresAdvisoryLockManager::new(&database.url, "advisory")
        .unwrap()
        .with_probe_interval(Duration::from_secs(3));
    Some((database, manager))
}

#[tokio::test]
async fn the_lock_survives_the_callers_commits_rollbacks_and_a_concurrent_detach() {
    let Some((database, manager)) = manager().await else {
        return;
    };
    let events = leaseproof_locks::TableName::new("public", "events");
    let guard = manager.acquire_lock(&events).await.unwrap();
    let mut caller = PgConnection::connect(&database.url).await.unwrap();
    caller
        .execute(
            "CREATE TABLE events (at date NOT NULL) PARTITION BY RANGE (at);
             CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
        )
        .await
        .unwrap();
    caller
        .execute("BEGIN; INSERT INTO events VALUES ('2026-05-01'); COMMIT")
        .await
        .unwrap();
    caller
        .execute("BEGIN; INSERT INTO events VALUES ('2026-06-01'); ROLLBACK")
        .await
        .unwrap();
    // Cannot run inside a transaction block: the lock must not need one.
    caller
        .execute("ALTER TABLE events DETACH PARTITION events_2026 CONCURRENTLY")
        .await
        .unwrap();
    assert!(manager.is_locked(&events).await.unwrap(), "still locked");
    assert!(matches!(
        manager.acquire_lock(&events).await,
        Err(LockError::Held { .. })
    ));
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    assert!(!manager.is_locked(&events).await.unwrap());
}

/// The backend pid holding `key`'s advisory lock.
async fn holder_pid(connection: &mut PgConnection, key: i64) -> i32 {
    sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND classid = (($1 >> 32) & 4294967295)::oid AND objid = ($1 & 4294967295)::oid",
    )
    .bind(key)
    .fetch_one(connection)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_killed_lock_connection_frees_the_lock_at_once_but_the_holder_learns_late() {
    // The finding that matters for a user: when the lock's connection dies,
    // the server frees the lock immediately and a rival can take it, while
    // the holder's maintenance (on other connections) runs on until its probe
    // notices. Without a fence the two replicas work at once.
    let Some((database, manager)) = slow_probe_manager().await else {
        return;
    };
    let maintained = table("killed");
    let guard = manager.acquire_lock(&maintained).await.unwrap();
    let key = advisory_key(&maintained.scope("advisory").unwrap());
    let mut admin = PgConnection::connect(&database.url).await.unwrap();
    let pid = holder_pid(&mut admin, key).await;
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(terminated);
    // The rival gets the lock while the holder still believes it holds it.
    let rival = loop {
        match manager.acquire_lock(&maintained).await {
            Ok(rival) => break rival,
            Err(LockError::Held { .. }) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(error) => panic!("{error}"),
        }
    };
    assert!(
        !guard.is_lost(),
        "the holder has not noticed yet: two holders"
    );
    let rival_pid = lock_holder_pid(&mut admin, &maintained).await;
    assert_ne!(rival_pid, pid, "the rival holds it on a session of its own");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the probe fires lost");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    // The old holder's release and probe left the rival's lock where it was:
    // on the rival's session, and only there.
    assert!(
        manager.is_locked(&maintained).await.unwrap(),
        "the rival's lock stands"
    );
    assert_eq!(lock_holder_pid(&mut admin, &maintained).await, rival_pid);
    assert!(
        matches!(
            manager.acquire_lock(&maintained).await,
            Err(LockError::Held { .. })
        ),
        "no session of the manager (a reused one included) takes the rival's lock"
    );
    rival.release().await.unwrap();
    let next = manager.acquire_lock(&maintained).await.unwrap();
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_guard_frees_the_lock() {
    let Some((_database, manager)) = manager().await else {
        return;
    };
    let maintained = table("dropped");
    let guard = manager.acquire_lock(&maintained).await.unwrap();
    drop(guard);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while manager.is_locked(&maintained).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still locked after drop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    manager
        .acquire_lock(&maintained)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[test]
fn the_key_is_a_stable_hash_of_the_scope() {
    let scope = leaseproof_protocol::Scope::new("myapp:public.events").unwrap();
    // FNV-1a 64 of the scope's bytes: pinned, so replicas of any build agree.
    assert_eq!(advisory_key(&scope), advisory_key(&scope));
    // Computed independently (Python) from the FNV-1a definition.
    assert_eq!(advisory_key(&scope), 748_926_796_869_340_312);
    let other = leaseproof_protocol::Scope::new("myapp:public.events2").unwrap();
    assert_ne!(advisory_key(&scope), advisory_key(&other));
}

/// The backend pid holding `table`'s advisory lock, read by `admin`.
async fn lock_holder_pid(admin: &mut PgConnection, table: &leaseproof_locks::TableName) -> i32 {
    let key = advisory_key(&table.scope("advisory").unwrap());
    sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND classid = (($1 >> 32) & 4294967295)::oid AND objid = ($1 & 4294967295)::oid",
    )
    .bind(key)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Client backends of `database` other than `admin`'s own.
async fn client_backends(admin: &mut PgConnection, database: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
         AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )
    .bind(database)
    .fetch_one(admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_released_lock_connection_serves_the_next_lock_and_at_most_eight_are_kept() {
    // A scheduler takes a table's lock every tick: each must not cost a new
    // connection (a TLS handshake, a backend fork), and a burst of locks must
    // not leave a pile of idle connections behind.
    let Some((database, locks)) = manager().await else {
        return;
    };
    let mut admin = database.connect().await.unwrap();
    let maintained = table("idle_reuse");
    let first = locks.acquire_lock(&maintained).await.unwrap();
    let pid = lock_holder_pid(&mut admin, &maintained).await;
    first.release().await.unwrap();
    let second = locks.acquire_lock(&maintained).await.unwrap();
    assert_eq!(
        lock_holder_pid(&mut admin, &maintained).await,
        pid,
        "the released lock's connection took the next lock"
    );
    second.release().await.unwrap();

    // Ten at once, then all released: eight connections stay, two close.
    let mut held = Vec::new();
    for index in 0..10 {
        held.push(
            locks
                .acquire_lock(&table(&format!("idle_burst_{index}")))
                .await
                .unwrap(),
        );
    }
    assert!(client_backends(&mut admin, &database.name).await >= 10);
    for guard in held {
        guard.release().await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let backends = client_backends(&mut admin, &database.name).await;
        if backends == 8 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{backends} client backends left: eight idle connections are kept"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And they stay eight (none closed that should be kept).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(client_backends(&mut admin, &database.name).await, 8);
}
