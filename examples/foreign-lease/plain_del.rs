//! The Redis lock many tutorials show: `SET key value NX PX ttl` to take it,
//! and a plain `DEL key` to release it — reproduced from those public
//! statements as a [`LockManager`] (the interface pg_partsmith's managers share),
//! with the correct release beside it: `DEL` only if the value is still ours
//! (compare-and-delete in Lua, as Redis's own documentation recommends).
//!
//! The fault that breaks the plain `DEL`: a holder paused past its TTL wakes
//! up and releases — deleting the key a rival took meanwhile — and a third
//! client takes the lock while the rival still holds it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use leaseproof_locks::{LockError, LockGuard, LockManager, TableName};
use redis::aio::MultiplexedConnection;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, LockError>> + Send + 'a>>;

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The lock; `compare_and_delete` picks the release.
#[derive(Clone)]
pub struct SetNxLock {
    connection: MultiplexedConnection,
    prefix: String,
    ttl_ms: u64,
    compare_and_delete: bool,
}

impl std::fmt::Debug for SetNxLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetNxLock")
            .field("prefix", &self.prefix)
            .field("ttl_ms", &self.ttl_ms)
            .field("compare_and_delete", &self.compare_and_delete)
            .finish_non_exhaustive()
    }
}

static VALUE_NEXT: AtomicU64 = AtomicU64::new(1);

fn backend(error: redis::RedisError) -> LockError {
    LockError::Backend {
        source: Box::new(error),
    }
}

impl SetNxLock {
    /// Connects to `url`; locks live `ttl_ms`.
    pub async fn connect(
        url: &str,
        prefix: &str,
        ttl_ms: u64,
        compare_and_delete: bool,
    ) -> Result<SetNxLock, redis::RedisError> {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(SetNxLock {
            connection,
            prefix: prefix.to_string(),
            ttl_ms,
            compare_and_delete,
        })
    }

    fn key(&self, table: &TableName) -> Result<String, LockError> {
        Ok(table.scope(&self.prefix)?.to_string())
    }
}

impl LockManager for SetNxLock {
    fn acquire_lock<'a>(&'a self, table: &'a TableName) -> Boxed<'a, LockGuard> {
        Box::pin(async move {
            let key = self.key(table)?;
            let value = format!(
                "{}-{}",
                std::process::id(),
                VALUE_NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let mut connection = self.connection.clone();
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            if set.is_none() {
                return Err(LockError::Held {
                    scope: table.scope(&self.prefix)?,
                    holder: None,
                });
            }
            let (lost_sender, lost) = tokio::sync::watch::channel(false);
            let compare_and_delete = self.compare_and_delete;
            let scope = table.scope(&self.prefix)?;
            Ok(LockGuard::custom(
                scope,
                None,
                lost,
                move || -> Boxed<'static, ()> {
                    Box::pin(async move {
                        let _keep = lost_sender;
                        let deleted: i64 = if compare_and_delete {
                            redis::Script::new(COMPARE_AND_DELETE)
                                .key(&key)
                                .arg(&value)
                                .invoke_async(&mut connection)
                                .await
                                .map_err(backend)?
                        } else {
                            redis::cmd("DEL")
                                .arg(&key)
                                .query_async(&mut connection)
                                .await
                                .map_err(backend)?
                        };
                        if deleted == 1 {
                            Ok(())
                        } else {
                            Err(LockError::Lost {
                                scope: leaseproof_protocol::Scope::new(key)?,
                            })
                        }
                    })
                },
            ))
        })
    }

    fn is_locked<'a>(&'a self, table: &'a TableName) -> Boxed<'a, bool> {
        Box::pin(async move {
            let key = self.key(table)?;
            let mut connection = self.connection.clone();
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(exists)
        })
    }

    fn name(&self) -> &'static str {
        if self.compare_and_delete {
            "set-nx, compare-and-delete"
        } else {
            "set-nx, plain DEL"
        }
    }
}
