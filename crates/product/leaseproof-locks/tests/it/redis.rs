//! The Redis manager's own promises and failure modes, on a real redis-server.

use std::time::Duration;

use leaseproof_locks::{LockError, LockManager, RedisDistributedLockManager, RedisLockOptions};
use leaseproof_protocol::FencingToken;

use crate::table;

async fn manager(url: &str, ttl_ms: u64, keep_alive: bool) -> RedisDistributedLockManager {
    RedisDistributedLockManager::connect(
        url,
        "redis-test",
        RedisLockOptions {
            ttl: Duration::from_millis(ttl_ms),
            keep_alive,
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_zero_or_overlong_ttl_is_refused_before_connecting() {
    // Port 1 on loopback answers nobody: a refusal here came before any IO.
    let nowhere = "redis://127.0.0.1:1";
    let connect = |ttl: Duration| {
        RedisDistributedLockManager::connect(
            nowhere,
            "redis-test",
            RedisLockOptions {
                ttl,
                keep_alive: false,
            },
        )
    };
    assert!(matches!(
        connect(Duration::ZERO).await,
        Err(LockError::Invalid(
            leaseproof_protocol::InvalidInput::TtlZero
        ))
    ));
    let day = Duration::from_secs(86_400);
    assert!(matches!(
        connect(day + Duration::from_millis(1)).await,
        Err(LockError::Invalid(
            leaseproof_protocol::InvalidInput::TtlTooLong { .. }
        ))
    ));
    // A day exactly is the longest TTL taken.
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = manager(&url, 86_400_000, false).await;
    locks
        .acquire_lock(&table("a-day"))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_holder_paused_past_the_ttl_is_overtaken_and_never_deletes_the_rivals_key() {
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = manager(&url, 300, false).await;
    let maintained = table("paused");
    let sent = std::time::Instant::now();
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await; // the pause begins
    assert!(!holder.is_lost(), "not before the TTL");
    tokio::time::sleep(Duration::from_millis(300)).await; // and outlasts the TTL
                                                          // No keep-alive: lost fired when the TTL ran out, so a holder that looks
                                                          // knows (the matrix's paused holder writes anyway: a stale write, I3).
    assert!(holder.is_lost(), "the TTL ran out {:?} ago", sent.elapsed());
    let rival = locks
        .acquire_lock(&maintained)
        .await
        .expect("the key expired");
    assert!(
        rival.fencing_token() > holder.fencing_token(),
        "tokens grow"
    );
    // The holder wakes up and releases: compare-and-delete leaves the rival's key.
    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
    assert!(
        locks.is_locked(&maintained).await.unwrap(),
        "the rival's key stands"
    );
    rival.release().await.unwrap();
}

#[tokio::test]
async fn the_token_checked_where_the_work_writes_refuses_the_paused_holder() {
    // The fenced variant of the scene above: the work's store keeps the
    // largest token it has seen and refuses smaller ones, so the paused
    // holder's write after the rival's is refused (the unfenced write lands).
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = manager(&url, 300, false).await;
    let maintained = table("fenced");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    let rival = locks.acquire_lock(&maintained).await.unwrap();
    let mut store = FencedStore::default();
    assert!(store.write(rival.fencing_token().unwrap(), "rival"));
    assert!(
        !store.write(holder.fencing_token().unwrap(), "stale holder"),
        "fenced"
    );
    assert_eq!(store.rows, vec!["rival"]);
    let _ = holder.release().await;
    rival.release().await.unwrap();
}

/// A store that keeps the largest token it accepted, as a guarded table
/// with `WHERE token >= last_token` would.
#[derive(Default)]
struct FencedStore {
    token_max: Option<FencingToken>,
    rows: Vec<&'static str>,
}

impl FencedStore {
    fn write(&mut self, token: FencingToken, row: &'static str) -> bool {
        if self.token_max.is_some_and(|max| token < max) {
            return false;
        }
        self.token_max = Some(token);
        self.rows.push(row);
        true
    }
}

#[tokio::test]
async fn the_keep_alive_holds_the_key_past_its_ttl_and_release_stops_it() {
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    // A TTL of 1.5 s renewed every 0.5 s: a loaded machine may delay one
    // extension by a second without the key expiring.
    let locks = manager(&url, 1_500, true).await;
    let maintained = table("kept");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::sleep(Duration::from_millis(4_500)).await; // three TTLs
                                                            // The loser is told who holds it (the holder's owner; never a secret).
    match locks.acquire_lock(&maintained).await {
        Err(LockError::Held {
            holder: Some(named),
            ..
        }) => {
            assert!(!named.is_empty() && !named.contains('#'), "{named}");
        }
        other => panic!("expected Held naming the holder, got {other:?}"),
    }
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
    assert!(!locks.is_locked(&maintained).await.unwrap());
}

#[tokio::test]
async fn a_dropped_guard_stops_its_keep_alive_and_the_key_expires_at_its_ttl() {
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = manager(&url, 600, true).await;
    let maintained = table("dropped");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await; // kept past one TTL
    assert!(locks.is_locked(&maintained).await.unwrap());
    drop(holder);
    // Without its keep-alive the key lives at most one TTL after the last
    // extension; a keep-alive that outlived its guard would hold it forever.
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    let rival = loop {
        match locks.acquire_lock(&maintained).await {
            Ok(rival) => break rival,
            Err(LockError::Held { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the dropped guard's key never expired: {error}"),
        }
    };
    rival.release().await.unwrap();
}

#[tokio::test]
async fn a_vanished_key_fires_lost() {
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = manager(&url, 600, true).await;
    let maintained = table("vanished");
    let holder = locks.acquire_lock(&maintained).await.unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{{{}}}:lock", holder.scope().as_str());
    let deleted: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    tokio::time::timeout(Duration::from_secs(3), holder.lost())
        .await
        .expect("the keep-alive notices the key is gone");
    assert!(matches!(
        holder.release().await,
        Err(LockError::Lost { .. })
    ));
}

#[tokio::test]
async fn a_restart_without_persistence_forgets_the_lock_and_restarts_the_tokens() {
    // Redis without persistence loses every key on restart: a rival takes the
    // lock at once, and the INCR counter restarts, so the rival's token is no
    // greater than the holder's — a token fence cannot tell them apart.
    let Some(mut server) = crate::throwaway_redis() else {
        return;
    };
    let maintained = table("restarted");
    let holder = {
        let locks = manager(&server.url, 60_000, true).await;
        let first = locks.acquire_lock(&maintained).await.unwrap();
        let second = locks.acquire_lock(&table("restarted_other")).await.unwrap();
        drop(second);
        first
    };
    server.restart().unwrap();
    let locks = manager(&server.url, 60_000, false).await;
    let rival = locks
        .acquire_lock(&maintained)
        .await
        .expect("the lock was forgotten");
    assert!(
        rival.fencing_token() <= holder.fencing_token(),
        "{:?} vs {:?}",
        rival.fencing_token(),
        holder.fencing_token()
    );
    rival.release().await.unwrap();
}

#[tokio::test]
async fn lost_fires_at_the_ttl_while_a_stopped_server_leaves_the_extension_hanging() {
    // The server is stopped (SIGSTOP), not gone: the extension is sent and no
    // reply comes. The keep-alive must stop believing at `sent + ttl - 1 ms` of the
    // last confirmation — not when (if ever) the extension fails.
    let Some(server) = crate::throwaway_redis() else {
        return;
    };
    let locks = manager(&server.url, 600, true).await;
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await
        .unwrap();
    let pid = info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .expect("INFO names the server's pid")
        .trim()
        .to_string();
    let sent = std::time::Instant::now();
    let holder = locks.acquire_lock(&table("stopped")).await.unwrap();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, pid.as_str()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {name} {pid}");
    };
    signal("-STOP");
    let lost = tokio::time::timeout(Duration::from_secs(5), holder.lost()).await;
    let at = sent.elapsed();
    signal("-CONT");
    lost.expect("lost fires although no extension ever fails");
    // Not before the promise: the TTL less the millisecond Redis may cut
    // off its expiry (from the SET's sending, a moment after `sent`).
    let promised = leaseproof_locks::redis_promised_lifetime(Duration::from_millis(600));
    assert!(
        at >= promised,
        "not before the promised {promised:?}: {at:?}"
    );
    assert!(
        at < Duration::from_millis(2_500),
        "at the TTL, not never: {at:?}"
    );
}

#[tokio::test]
async fn the_manager_reconnects_after_its_server_restarts() {
    // A scheduler holds one manager for its whole life: after Redis restarts
    // (its connection dropped), the manager must work again, not fail every
    // tick until the process is restarted too.
    let Some(mut server) = crate::throwaway_redis() else {
        return;
    };
    let locks = manager(&server.url, 60_000, false).await;
    let maintained = table("reconnect");
    locks
        .acquire_lock(&maintained)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    server.restart().unwrap();
    // The first command may meet the dead connection; within a few seconds
    // the manager must be back.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match locks.acquire_lock(&maintained).await {
            Ok(guard) => break guard,
            Err(error) if std::time::Instant::now() < deadline => {
                eprintln!("after the restart: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the manager never came back: {error}"),
        }
    };
    assert!(locks.is_locked(&maintained).await.unwrap());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_managers_debug_names_its_prefix_and_options_never_its_url() {
    // A scheduler logs its lock manager: the log must say which one it is
    // and must not carry the password the URL holds.
    let Some(url) = leaseproof_redis_server::test_redis_url() else {
        return;
    };
    let locks = manager(&url, 1_500, true).await;
    let shown = format!("{locks:?}");
    assert!(shown.starts_with("RedisDistributedLockManager"), "{shown}");
    assert!(
        shown.contains("redis-test") && shown.contains("1.5s"),
        "{shown}"
    );
    if let Some(password) = url
        .split('@')
        .next()
        .and_then(|auth| auth.rsplit(':').next())
    {
        if !password.is_empty() && !password.starts_with("//") {
            assert!(!shown.contains(password), "the password leaked: {shown}");
        }
    }
}
