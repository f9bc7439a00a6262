//! A broken connection is an unknown outcome; a cancelled statement is a
//! definite failure; the pool users get surfaces a dead connection instead
//! of hiding it, and never hangs.
//!
//! Goal: hold `errors::connection_lost` and `PostgresLeases::pool_options` to
//! what the docs promise, on a real server with real faults. Method: kill the
//! lease pool's backend with `pg_terminate_backend` while it idles in the
//! pool, and while a renewal waits on a row lock (57P01 mid-statement); let a
//! `statement_timeout` cancel a renewal (57014); exhaust a pool of one.
//! Invariant: sent-and-lost is `OutcomeUnknown`, never `Database`; cancelled
//! is `Database`, never `OutcomeUnknown`; nothing waits past the acquire
//! timeout.

use std::time::{Duration, Instant};

use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::{LeaseError, Owner, Scope, Ttl};
use sqlx::{Connection as _, PgConnection};

use crate::fresh;

fn ttl_ms(millis: i64) -> Ttl {
    Ttl::from_millis(millis).unwrap()
}

/// Backend pids of the connections of `database` other than `except`.
pub(crate) async fn backends(admin: &mut PgConnection, database: &str, except: i32) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> $2 \
         AND backend_type = 'client backend'",
    )
    .bind(database)
    .bind(except)
    .fetch_all(admin)
    .await
    .unwrap()
}

async fn terminate(admin: &mut PgConnection, pid: i32) {
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(admin)
        .await
        .unwrap();
    assert!(terminated, "backend {pid} terminated");
}

pub(crate) async fn own_pid(connection: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(connection)
        .await
        .unwrap()
}

/// Waits (up to 10 s) until exactly one session of `database` other than
/// `except` waits on a lock; returns its pid.
pub(crate) async fn lock_waiter(admin: &mut PgConnection, database: &str, except: [i32; 2]) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' \
             AND pid NOT IN ($2, $3)",
        )
        .bind(database)
        .bind(except[0])
        .bind(except[1])
        .fetch_all(&mut *admin)
        .await
        .unwrap();
        if let [pid] = waiting.as_slice() {
            return *pid;
        }
        assert!(Instant::now() < deadline, "no statement waited on the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A renewal of `lease` queued behind another session's lock on its row:
/// the blocking session (its transaction open), an admin connection, the
/// renewal's task and the pid of its backend, once it waits on the lock.
async fn renewal_waiting_on_its_row(
    database: &leaseproof_pgcluster::TestDatabase,
    leases: &PostgresLeases,
    lease: &leaseproof_protocol::Lease,
) -> (
    PgConnection,
    PgConnection,
    tokio::task::JoinHandle<Result<leaseproof_protocol::Lease, LeaseError>>,
    i32,
) {
    let mut blocker = lock_lease_row(&database.url, lease.scope()).await;
    let blocker_pid = own_pid(&mut blocker).await;
    let renewal = tokio::spawn({
        let leases = leases.clone();
        let lease = lease.clone();
        async move { leases.renew(&lease, ttl_ms(60_000)).await }
    });
    let mut admin = PgConnection::connect(&database.url).await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    let waiting = lock_waiter(&mut admin, &database.name, [admin_pid, blocker_pid]).await;
    (blocker, admin, renewal, waiting)
}

/// A minute-long lease on a fresh scope `name`.
async fn held(leases: &PostgresLeases, name: &str) -> leaseproof_protocol::Lease {
    let scope = Scope::new(name).unwrap();
    leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap()
        .into_lease()
}

/// Another session that holds the row lock of `scope`'s lease (open
/// transaction): statements on the row queue behind it.
pub(crate) async fn lock_lease_row(url: &str, scope: &Scope) -> PgConnection {
    let mut blocker = PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT 1 FROM leaseproof_leases WHERE scope = $1 FOR UPDATE")
        .bind(scope.as_str())
        .execute(&mut blocker)
        .await
        .unwrap();
    blocker
}

#[tokio::test]
async fn a_statement_on_a_killed_idle_connection_is_an_unknown_outcome_not_a_hidden_retry() {
    let Some((database, leases)) = fresh(1).await else {
        return;
    };
    let lease = held(&leases, "killed-idle").await;
    // The pool's one connection now idles; kill it from outside.
    let mut admin = PgConnection::connect(&database.url).await.unwrap();
    let admin_pid = own_pid(&mut admin).await;
    let pool_backends = backends(&mut admin, &database.name, admin_pid).await;
    assert_eq!(pool_backends.len(), 1, "the pool holds one connection");
    terminate(&mut admin, pool_backends[0]).await;
    // pool_options() does not ping on checkout: the renewal is sent on the
    // dead connection, and a write whose reply never came is unknown.
    let renewed = leases.renew(&lease, ttl_ms(60_000)).await;
    assert!(
        matches!(renewed, Err(LeaseError::OutcomeUnknown { .. })),
        "expected OutcomeUnknown, got {renewed:?}"
    );
    // The pool recovers: the next operation gets a new connection.
    let renewed = leases.renew(&lease, ttl_ms(60_000)).await.unwrap();
    assert_eq!(renewed.token(), lease.token());
}

#[tokio::test]
async fn a_backend_terminated_mid_statement_is_an_unknown_outcome() {
    let Some((database, leases)) = fresh(2).await else {
        return;
    };
    let lease = held(&leases, "terminated-mid-statement").await;
    // Another session locks the lease row: the renewal queues behind it.
    let (mut blocker, mut admin, renewal, waiting) =
        renewal_waiting_on_its_row(&database, &leases, &lease).await;
    // The renewal waits on the lock: end its session.
    terminate(&mut admin, waiting).await;
    let renewed = renewal.await.unwrap();
    assert!(
        matches!(renewed, Err(LeaseError::OutcomeUnknown { .. })),
        "57P01 mid-statement: expected OutcomeUnknown, got {renewed:?}"
    );
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
}

#[tokio::test]
async fn a_statement_cancelled_by_its_timeout_is_a_definite_failure() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    // 57014 query_canceled: the session lives, the statement certainly did
    // not commit — not an unknown outcome.
    let url = format!(
        "{}{}options=-c%20statement_timeout%3D300",
        database.url,
        if database.url.contains('?') { '&' } else { '?' }
    );
    let leases = PostgresLeases::connect(&url, 2).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let lease = held(&leases, "cancelled-by-timeout").await;
    let mut blocker = lock_lease_row(&database.url, lease.scope()).await;
    let renewed = leases.renew(&lease, ttl_ms(60_000)).await;
    let error = renewed.expect_err("the renewal waits past its statement_timeout");
    assert!(
        matches!(error, LeaseError::Database { .. }),
        "57014: expected Database, got {error:?}"
    );
    assert_eq!(PostgresLeases::sqlstate(&error).as_deref(), Some("57014"));
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
}

#[tokio::test]
async fn rolling_back_on_a_dead_connection_is_not_an_error() {
    let Some((database, leases)) = fresh(1).await else {
        return;
    };
    let mut transaction = leases.begin().await.unwrap();
    let pid = own_pid(transaction.connection()).await;
    let mut admin = PgConnection::connect(&database.url).await.unwrap();
    terminate(&mut admin, pid).await;
    // The server rolled the transaction back by ending the session.
    transaction
        .rollback()
        .await
        .expect("a dead connection has rolled back already");
}

#[tokio::test]
async fn an_exhausted_lease_pool_is_an_error_within_its_acquire_timeout_never_a_hang() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    // The pool users get, with one connection, held by an open transaction.
    let leases = PostgresLeases::connect(&database.url, 1).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let _held = leases.begin().await.unwrap();
    let started = Instant::now();
    let scope = Scope::new("exhausted").unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        leases.acquire(&scope, &Owner::generate(), ttl_ms(1_000)),
    )
    .await
    .expect("an exhausted pool must fail, not hang");
    assert!(
        matches!(outcome, Err(LeaseError::Unavailable { .. })),
        "expected Unavailable, got {outcome:?}"
    );
    // pool_options()'s acquire timeout (5 s), not sqlx's default (30 s).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_lease_types_describe_themselves() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    assert!(format!("{leases:?}").starts_with("PostgresLeases"));
    let transaction = leases.begin().await.unwrap();
    assert!(format!("{transaction:?}").starts_with("LeaseTransaction"));
    transaction.rollback().await.unwrap();
    let lost_error = || LeaseError::Lost {
        scope: Scope::new("described").unwrap(),
        token: leaseproof_protocol::FencingToken::FIRST,
    };
    let lost: CycleError<std::io::Error> = CycleError::Lease(lost_error());
    assert_eq!(lost.to_string(), format!("commit cycle: {}", lost_error()));
    assert!(std::error::Error::source(&lost).is_some());
    let work: CycleError<std::io::Error> = CycleError::Work(std::io::Error::other("disk full"));
    assert_eq!(
        work.to_string(),
        "commit cycle: guarded writes failed: disk full"
    );
    assert!(std::error::Error::source(&work).is_some());
}

/// The connect options of `url` and the address its server listens on (for
/// a proxy in front of it).
pub(crate) async fn server_address(
    url: &str,
) -> (sqlx::postgres::PgConnectOptions, std::net::SocketAddr) {
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let upstream = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .unwrap()
        .next()
        .unwrap();
    (options, upstream)
}

/// A loopback TCP proxy to `upstream` whose connections can be cut at once:
/// the client then meets a closed socket with no server message (an IO
/// error), as after a network failure — unlike `pg_terminate_backend`, whose
/// backend says goodbye with 57P01 first.
struct CuttableProxy {
    port: u16,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl CuttableProxy {
    async fn start(upstream: std::net::SocketAddr) -> CuttableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let registry = std::sync::Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                registry.lock().unwrap().push(task);
            }
        });
        CuttableProxy { port, connections }
    }

    /// Drops every proxied connection (both sockets close); returns how many.
    async fn cut(&self) -> usize {
        let tasks: Vec<_> = self.connections.lock().unwrap().drain(..).collect();
        let count = tasks.len();
        for task in tasks {
            task.abort();
            // Awaited: the sockets are closed once the task is gone.
            let _ = task.await;
        }
        count
    }
}

#[tokio::test]
async fn a_connection_cut_without_a_word_mid_statement_is_an_unknown_outcome() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let (options, upstream) = server_address(&database.url).await;
    let proxy = CuttableProxy::start(upstream).await;
    let pool = PostgresLeases::pool_options()
        .max_connections(1)
        .connect_with(options.port(proxy.port))
        .await
        .unwrap();
    let leases = PostgresLeases::new(pool);
    leases.ensure_schema().await.unwrap();
    let lease = held(&leases, "cut-without-a-word").await;
    // (A connection cut while it idles in the pool is noticed by sqlx and
    // replaced before anything is sent: no outcome to be unsure of.) Cut it
    // while the renewal waits on a row lock: sent, no reply, no goodbye.
    let (mut blocker, _admin, renewal, _) =
        renewal_waiting_on_its_row(&database, &leases, &lease).await;
    assert_eq!(
        proxy.cut().await,
        1,
        "the renewal's connection went through the proxy"
    );
    let renewed = renewal.await.unwrap();
    assert!(
        matches!(renewed, Err(LeaseError::OutcomeUnknown { .. })),
        "an IO error after sending: expected OutcomeUnknown, got {renewed:?}"
    );
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
}

#[tokio::test]
async fn rolling_back_a_fenced_transaction_releases_the_fence_at_once() {
    let Some((database, leases)) = fresh(2).await else {
        return;
    };
    let lease = held(&leases, "rolled-back-fence").await;
    let mut transaction = leases.begin().await.unwrap();
    leases
        .fence(&mut transaction, &lease)
        .await
        .unwrap()
        .expect("our own live lease passes the fence");
    // Awaited, not just dropped: a dropped transaction's ROLLBACK waits in
    // the pool for the connection's next use, and its row lock with it.
    transaction.rollback().await.unwrap();
    let mut rival = PgConnection::connect(&database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut rival).await.unwrap();
    let locked = sqlx::query("SELECT 1 FROM leaseproof_leases WHERE scope = $1 FOR UPDATE NOWAIT")
        .bind(lease.scope().as_str())
        .execute(&mut rival)
        .await;
    assert!(
        locked.is_ok(),
        "the fence's row lock outlived rollback(): {locked:?}"
    );
    sqlx::query("ROLLBACK").execute(&mut rival).await.unwrap();
}
