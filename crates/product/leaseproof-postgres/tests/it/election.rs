//! Leader election's promises about time, each under the fault that
//! threatens it.
//!
//! Goal: a leader cut off from its store hears *lost* within its term's TTL
//! (a silent partition: its renewal is sent and hangs, no reply, no reset —
//! the case a leader cannot tell from a slow server), and a resignation
//! hands the term to a waiting candidate at once, not at an expiry or a
//! poll. Method: the leader's pool goes through a proxy that stops
//! forwarding without closing anything; a 30 s term for the hand-off, whose
//! candidates poll no faster than every 150 ms, so only the release's
//! wake-up (the server's notification: each candidate waits on a pool of
//! its own, as in another process) can make most hand-offs in under 100 ms.
//! Invariant: *lost* no later than the TTL
//! after the cut (the last confirmed renewal was sent before it), plus the
//! slack of a loaded two-core machine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseproof_postgres::{Election, PostgresLeases};
use leaseproof_protocol::{Owner, Scope, Ttl};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Slack for a loaded two-core machine: what "within" may add.
const SLACK: Duration = Duration::from_millis(500);

/// A TCP proxy that can stop forwarding both ways without closing anything:
/// bytes already read wait, the sockets stay open (a cable pulled).
struct SilentProxy {
    port: u16,
    frozen: Arc<AtomicBool>,
}

impl SilentProxy {
    async fn start(upstream: std::net::SocketAddr) -> SilentProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let gate = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, Arc::clone(&gate)));
                tokio::spawn(pump(server_read, client_write, Arc::clone(&gate)));
            }
        });
        SilentProxy { port, frozen }
    }

    /// From now on nothing passes, either way.
    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }
}

/// Forwards `from` to `to`, holding each chunk while the proxy is frozen.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 {
            return;
        }
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_store_hears_lost_within_its_term() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let (options, upstream) = crate::connection_loss::server_address(&database.url).await;
    let proxy = SilentProxy::start(upstream).await;
    let pool = PostgresLeases::pool_options()
        .max_connections(4)
        .connect_with(options.port(proxy.port))
        .await
        .unwrap();
    let leases = PostgresLeases::new(pool);
    leases.ensure_schema().await.unwrap();
    let ttl = Duration::from_millis(1_500);
    let scope = Scope::new("cut-off-leader").unwrap();
    let term = Ttl::from_millis(1_500).unwrap();
    let election = Election::new(leases, scope.clone(), term);
    let leadership = election
        .campaign(&Owner::generate(), Duration::from_secs(5))
        .await
        .unwrap();
    // A term and a half of renewals (every third of the TTL) go through.
    tokio::time::sleep(ttl + ttl / 2).await;
    assert!(!leadership.is_lost(), "renewals kept the term");
    let cut = Instant::now();
    proxy.freeze();
    let reason = tokio::time::timeout(ttl * 3, leadership.lost())
        .await
        .expect("lost never fired while the leader was cut off");
    let heard = cut.elapsed();
    assert!(
        heard <= ttl + SLACK,
        "lost ({reason:?}) heard {heard:?} after the cut; the term is {ttl:?}"
    );
    // The server agrees the term ended: a rival on a reachable pool leads.
    let rival = Election::new(
        PostgresLeases::connect(&database.url, 2).await.unwrap(),
        scope,
        term,
    )
    .campaign(&Owner::generate(), ttl * 4)
    .await
    .expect("a rival leads once the term expired");
    assert!(rival.token() > leadership.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_hands_the_term_to_a_waiting_candidate_at_once() {
    let Some((database, leases)) = crate::fresh(8).await else {
        return;
    };
    // A 30 s term: an expiry would take 30 s, a waiter's poll 150 ms at the
    // very least.
    let term = Ttl::from_millis(30_000).unwrap();
    let scope = Scope::new("hand-over").unwrap();
    let mut leader = Election::new(leases, scope.clone(), term)
        .campaign(&Owner::generate(), Duration::from_secs(5))
        .await
        .unwrap();
    let mut hand_offs = Vec::new();
    for _ in 0..5 {
        // The candidate waits on a pool of its own, as in another process:
        // only the server's notification can wake it.
        let elsewhere = PostgresLeases::new(crate::pool(&database, 2).await);
        let waiting = tokio::spawn({
            let election = Election::new(elsewhere, scope.clone(), term);
            async move {
                let leadership = election
                    .campaign(&Owner::generate(), Duration::from_secs(20))
                    .await;
                (leadership, Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "the candidate waits for the term");
        let previous = leader.token();
        assert!(leader.resign().await.unwrap().is_some(), "it still led");
        let resigned = Instant::now();
        let (next, led) = waiting.await.unwrap();
        leader = next.expect("the waiting candidate leads");
        assert!(leader.token() > previous);
        hand_offs.push(led.saturating_duration_since(resigned));
    }
    hand_offs.sort();
    eprintln!("hand-offs after a resignation: {hand_offs:?}");
    // The median, against the 150 ms a polling candidate could not beat: a
    // loaded machine may delay one wake-up, not most of them.
    assert!(hand_offs[2] < Duration::from_millis(100), "{hand_offs:?}");
    leader.resign().await.unwrap();
}
