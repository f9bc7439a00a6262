//! The three lock managers on real servers (PostgreSQL and Redis).
//!
//! Goal: every manager passes the public conformance suite, and each
//! manager's own promises and failure modes hold on the real server: the
//! advisory lock survives the caller's commits, rollbacks and a `DETACH
//! PARTITION … CONCURRENTLY` and fires *lost* when its connection dies; the
//! Redis lock never deletes a rival's key and its token fences a paused
//! holder; the lease's keep-alive and fence. Method: a fresh database per
//! test on the throwaway cluster (`DATABASE_URL` to use one's own), the
//! shared throwaway `redis-server` (`REDIS_URL`); loud skips without them,
//! failures under `LEASEPROOF_REQUIRE_PG=1` / `LEASEPROOF_REQUIRE_REDIS=1`.

mod advisory;
mod conformance;
mod lease;
mod redis;
mod rival;
mod suite_teeth;

use leaseproof_locks::TableName;

/// A table name unique to the calling test (Redis is shared across tests).
pub fn table(test: &str) -> TableName {
    TableName::new("public", format!("{test}_{}", std::process::id()))
}

/// A dedicated throwaway Redis (a test that restarts or stops one uses its
/// own), or `None` after the skip line; a failure under
/// `LEASEPROOF_REQUIRE_REDIS=1`.
pub fn throwaway_redis() -> Option<leaseproof_redis_server::RedisServer> {
    leaseproof_redis_server::test_redis_url()?;
    match leaseproof_redis_server::RedisServer::start_throwaway() {
        Ok(server) => Some(server),
        Err(error) if !leaseproof_redis_server::require_redis() => {
            eprintln!("LEASEPROOF SKIP: no throwaway redis-server ({error})");
            None
        }
        Err(error) => panic!("{error}"),
    }
}
