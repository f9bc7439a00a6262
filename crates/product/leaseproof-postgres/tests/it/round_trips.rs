//! What the commit cycle costs on the wire.
//!
//! Goal: the fenced commit cycle waits on one round trip more than the same
//! writes unfenced (`BEGIN`, the writes, `COMMIT`): the fence rides with
//! `BEGIN`, and the aborted-transaction probe is the one more. Method: the
//! lease's pool connects through a loopback proxy that reads the client's
//! side of the PostgreSQL protocol and counts the messages the client then
//! waits on (`Query`, and `Sync` closing an extended-protocol exchange).
//! Invariant: four exchanges for a cycle of one prepared statement in every
//! fence mode and statement setting; a refused fence costs two (its
//! `ROLLBACK`) and runs no write.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_core::future::BoxFuture;
use leaseproof_postgres::{CycleError, FenceMode, PostgresLeases, Statements};
use leaseproof_protocol::{Lease, LeaseError, Owner, Scope, Ttl};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::PgConnection;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A loopback proxy to `upstream` counting the exchanges its clients start.
struct CountingProxy {
    port: u16,
    exchanges: Arc<AtomicUsize>,
}

impl CountingProxy {
    async fn start(upstream: std::net::SocketAddr) -> CountingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let exchanges = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&exchanges);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, mut client_write) = client.into_split();
                let (mut server_read, server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                tokio::spawn(count_and_forward(
                    client_read,
                    server_write,
                    Arc::clone(&counter),
                ));
            }
        });
        CountingProxy { port, exchanges }
    }

    fn exchanges(&self) -> usize {
        self.exchanges.load(Ordering::SeqCst)
    }
}

/// Forwards the client's bytes and counts its `Query` and `Sync` messages.
/// The first message (the startup packet) has no type byte; every later one
/// is a type byte and a length that counts itself.
async fn count_and_forward(
    mut client: OwnedReadHalf,
    mut server: OwnedWriteHalf,
    exchanges: Arc<AtomicUsize>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut started = false;
    let mut chunk = [0_u8; 8192];
    loop {
        let read = match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        // Counted before forwarding: the reply cannot reach the client (and
        // the test read the count) before its message was counted.
        pending.extend_from_slice(&chunk[..read]);
        loop {
            let header = usize::from(started);
            let Some(length) = pending
                .get(header..header + 4)
                .map(|bytes| u32::from_be_bytes(bytes.try_into().unwrap()) as usize)
            else {
                break;
            };
            if pending.len() < header + length {
                break;
            }
            if started && matches!(pending[0], b'Q' | b'S') {
                exchanges.fetch_add(1, Ordering::SeqCst);
            }
            pending.drain(..header + length);
            started = true;
        }
        if server.write_all(&chunk[..read]).await.is_err() {
            return;
        }
    }
}

/// Leases whose one-connection pool goes through `proxy`, parking its
/// connection longer than the test runs (the pool's own return ping would
/// otherwise be counted).
async fn leases_through(proxy: &CountingProxy, options: &PgConnectOptions) -> PostgresLeases {
    let pool = PostgresLeases::pool_options()
        .max_connections(1)
        .connect_with(
            options
                .clone()
                .port(proxy.port)
                .ssl_mode(PgSslMode::Disable),
        )
        .await
        .unwrap();
    let leases = PostgresLeases::new(pool).with_connection_reuse(Duration::from_secs(60));
    leases.ensure_schema().await.unwrap();
    leases
}

fn insert_one(connection: &mut PgConnection) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move {
        sqlx::query("INSERT INTO results VALUES ($1)")
            .bind(1_i32)
            .execute(connection)
            .await
            .map(|_| ())
    })
}

#[tokio::test]
async fn a_commit_cycle_waits_on_one_round_trip_more_than_the_same_write_unfenced() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let options: PgConnectOptions = database.url.parse().unwrap();
    let upstream = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .unwrap()
        .next()
        .unwrap();
    let mut admin = database.connect().await.unwrap();
    sqlx::query("CREATE TABLE results (value int NOT NULL)")
        .execute(&mut admin)
        .await
        .unwrap();
    let proxy = CountingProxy::start(upstream).await;
    let ttl = Ttl::from_millis(60_000).unwrap();
    let settings = [
        (FenceMode::Exclusive, Statements::Prepared),
        (FenceMode::Shared, Statements::Prepared),
        (FenceMode::Exclusive, Statements::Inline),
    ];
    for (index, (mode, statements)) in settings.into_iter().enumerate() {
        let leases = leases_through(&proxy, &options)
            .await
            .with_fence_mode(mode)
            .with_statements(statements);
        let scope = Scope::new(format!("round-trips-{index}")).unwrap();
        let lease = leases
            .acquire_lease(&scope, &Owner::generate(), ttl)
            .await
            .expect("a fresh scope is granted");
        // The first cycle prepares the INSERT (one exchange more).
        leases.commit_cycle(&lease, insert_one).await.unwrap();
        let before = proxy.exchanges();
        leases.commit_cycle(&lease, insert_one).await.unwrap();
        assert_eq!(
            proxy.exchanges() - before,
            4,
            "{mode:?} {statements:?}: BEGIN with the fence, the INSERT, the probe, COMMIT"
        );

        // A refused fence: its ROLLBACK is one exchange more, and the work never runs.
        assert!(leases.force_expire(&scope).await.unwrap());
        let before = proxy.exchanges();
        let refused = leases.commit_cycle(&lease, insert_one).await;
        assert!(
            matches!(refused, Err(CycleError::Lease(LeaseError::Lost { .. }))),
            "{refused:?}"
        );
        assert_eq!(proxy.exchanges() - before, 2, "{mode:?} {statements:?}");

        // The refusal left the session outside any transaction, its fence
        // still prepared: the next grant's cycle costs four again.
        let lease = leases
            .acquire_lease(&scope, &Owner::generate(), ttl)
            .await
            .expect("an expired scope is granted");
        let before = proxy.exchanges();
        leases.commit_cycle(&lease, insert_one).await.unwrap();
        assert_eq!(
            proxy.exchanges() - before,
            4,
            "{mode:?} {statements:?}: after a refusal"
        );
        leases.close().await;
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM results")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        rows, 9,
        "three cycles committed under each setting, none refused"
    );
}

#[tokio::test]
async fn a_session_that_lost_its_prepared_fence_prepares_it_again() {
    let Some((_database, leases, lease)) = leased_with_results("deallocated-fence").await else {
        return;
    };
    // The first cycle prepared the fence on the pool's one connection; its
    // work drops it (as `DISCARD ALL` or a pooler's reset would).
    leases.commit_cycle(&lease, forget_the_fence).await.unwrap();
    let (_, fenced_at) = leases
        .commit_cycle_at(&lease, insert_one)
        .await
        .expect("the fence is prepared again, and the cycle commits");
    assert!(fenced_at >= lease.granted_at());
}

fn forget_the_fence(connection: &mut PgConnection) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM pg_prepared_statements WHERE name LIKE 'leaseproof_fence_%'",
        )
        .fetch_all(&mut *connection)
        .await?;
        assert_eq!(
            names.len(),
            1,
            "the first cycle prepared its fence: {names:?}"
        );
        sqlx::query(&format!("DEALLOCATE {}", names[0]))
            .execute(&mut *connection)
            .await
            .map(|_| ())
    })
}

/// A fresh database with a `results` table, a one-connection pool, and a
/// lease held on `scope` for a minute.
pub(crate) async fn leased_with_results(
    scope: &str,
) -> Option<(leaseproof_pgcluster::TestDatabase, PostgresLeases, Lease)> {
    let (database, leases) = crate::fresh(1).await?;
    sqlx::query("CREATE TABLE results (value int NOT NULL)")
        .execute(leases.pool())
        .await
        .unwrap();
    let lease = leases
        .acquire_lease(
            &Scope::new(scope).unwrap(),
            &Owner::generate(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    Some((database, leases, lease))
}
