//! [`RedisDistributedLockManager`]: `SET key value NX PX ttl`, as
//! pg_partsmith's Redis manager, with a fencing token.
//!
//! - Acquire is one Lua script: `SET key value NX PX ttl` and, only if that
//!   set the key, `INCR` of the scope's token counter — atomically, so every
//!   holder gets a token greater than every earlier holder's. `value` is
//!   unique per acquisition (owner id + 64 random bits).
//! - Release and extension compare the value first, in one script each
//!   (compare-and-delete, compare-and-pexpire): a holder whose key expired and
//!   was taken by a rival never deletes or extends the rival's key. (A plain
//!   `DEL` would.)
//! - An optional keep-alive extends the key every `ttl / 3` and fires *lost*
//!   when an extension finds the key gone or not ours, or cannot reach Redis
//!   before the TTL would have run out. Without it, *lost* fires when the TTL
//!   runs out (`sent + ttl`): the key may be gone from then on, and a guard
//!   that kept saying otherwise would lie.
//!
//! What it cannot do on its own: a holder paused longer than the TTL resumes
//! believing it holds the lock while a rival does. Only the token, checked
//! where the work writes, stops its stale writes.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use futures_core::future::BoxFuture;
use leaseproof_protocol::{FencingToken, Owner, Scope};
use rand::Rng as _;
use redis::aio::{ConnectionLike, ConnectionManager};
use tokio::sync::watch;

use leaseproof_postgres::keep_alive::{self, Extension, Schedule};

use crate::{AbortOnDrop, LockError, LockGuard, LockManager, Releaser, TableName};

/// The acquisition script: `KEYS[1]` lock key, `KEYS[2]` token counter;
/// `ARGV[1]` value, `ARGV[2]` ttl ms. Returns `{token, ""}` when it took the
/// lock, `{0, holder's value}` when the key was held (atomic: a script runs
/// alone). Public as text for the simulated Redis's tests, which run it.
pub const REDIS_ACQUIRE_SCRIPT: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder then
    return {0, holder}
end
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return {redis.call('INCR', KEYS[2]), ''}
";

/// The release script, compare-and-delete: `KEYS[1]` lock key, `ARGV[1]` our
/// value. Returns 1 when it deleted our key, 0 when the key was not ours.
pub const REDIS_RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
";

/// The keep-alive script, compare-and-pexpire: `KEYS[1]` lock key, `ARGV[1]`
/// our value, `ARGV[2]` ttl ms. Returns 1 when it extended our key, else 0.
pub const REDIS_EXTEND_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

// Each script is hashed once (`EVALSHA` after the first `EVAL`), not per call.
static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(REDIS_ACQUIRE_SCRIPT));
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(REDIS_RELEASE_SCRIPT));
static EXTEND: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(REDIS_EXTEND_SCRIPT));

/// How a [`RedisDistributedLockManager`] holds its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisLockOptions {
    /// The key's time to live.
    pub ttl: Duration,
    /// Extend the key every `ttl / 3` while the guard lives. Without it the
    /// guard's *lost* fires when the TTL runs out.
    pub keep_alive: bool,
}

impl RedisLockOptions {
    /// [`promised_lifetime`] of this TTL.
    pub fn promised_lifetime(&self) -> Duration {
        promised_lifetime(self.ttl)
    }
}

/// The least time a key set with `PX ttl` lives after the acquisition was
/// sent: the TTL less one millisecond. Redis keeps a key's expiry in whole
/// milliseconds of its own clock (`mstime()`, truncated), so a key set in
/// the last microseconds of a millisecond is gone up to 1 ms before `ttl`
/// has passed since it arrived. The guard's *lost* fires then, and a
/// harness judging the lock holds it to this promise.
pub fn promised_lifetime(ttl: Duration) -> Duration {
    ttl.saturating_sub(Duration::from_millis(1))
}

impl Default for RedisLockOptions {
    fn default() -> Self {
        RedisLockOptions {
            ttl: Duration::from_secs(300),
            keep_alive: true,
        }
    }
}

/// Locks as Redis keys with a TTL, and a fencing token per acquisition.
///
/// `C` is the connection: redis-rs's reconnecting [`ConnectionManager`]
/// from [`connect`](RedisDistributedLockManager::connect), or any
/// `redis::aio::ConnectionLike` of the caller's through
/// [`over`](RedisDistributedLockManager::over) (leaseproof's simulation runs
/// this manager's own code over a simulated network that way).
#[derive(Clone)]
pub struct RedisDistributedLockManager<C = ConnectionManager> {
    connection: C,
    prefix: String,
    options: RedisLockOptions,
    holders: Holders,
}

/// Where the value a holder writes into its key comes from:
/// `{owner}#{secret}`, unique per acquisition.
#[derive(Clone)]
enum Holders {
    /// A generated owner (host, pid, 64 random bits) and 64 random bits of
    /// secret per acquisition.
    Generated,
    /// The caller's owner and the caller's secrets (a simulation draws them
    /// from its seed, so a run replays byte for byte).
    Given {
        owner: Owner,
        secrets: Arc<Mutex<dyn FnMut() -> u64 + Send>>,
    },
}

impl Holders {
    fn next_value(&self) -> String {
        match self {
            Holders::Generated => format!(
                "{}#{:016x}",
                Owner::generate(),
                rand::thread_rng().gen::<u64>()
            ),
            Holders::Given { owner, secrets } => {
                let secret = (secrets.lock().unwrap_or_else(|poison| poison.into_inner()))();
                format!("{owner}#{secret:016x}")
            }
        }
    }
}

impl<C> std::fmt::Debug for RedisDistributedLockManager<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDistributedLockManager")
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn unavailable(error: redis::RedisError) -> LockError {
    LockError::Unavailable {
        source: Box::new(error),
    }
}

fn backend(error: redis::RedisError) -> LockError {
    LockError::Backend {
        source: Box::new(error),
    }
}

impl RedisDistributedLockManager<ConnectionManager> {
    /// Connects to `url` (`redis://[:password@]host:port/`). A TTL under a
    /// millisecond or over a day is refused.
    pub async fn connect(
        url: &str,
        prefix: impl Into<String>,
        options: RedisLockOptions,
    ) -> Result<Self, LockError> {
        validate(options)?;
        let client = redis::Client::open(url).map_err(unavailable)?;
        // Reconnects by itself after the server restarts or drops the
        // connection: the command that met the dead connection fails (and
        // is reported), the next one runs on a new connection.
        let connection = ConnectionManager::new(client).await.map_err(unavailable)?;
        Self::over(connection, prefix, options)
    }
}

/// A TTL under a millisecond or over a day is refused.
fn validate(options: RedisLockOptions) -> Result<(), LockError> {
    let ttl_ms = options.ttl.as_millis();
    if ttl_ms == 0 {
        return Err(LockError::Invalid(
            leaseproof_protocol::InvalidInput::TtlZero,
        ));
    }
    if ttl_ms > 86_400_000 {
        return Err(LockError::Invalid(
            leaseproof_protocol::InvalidInput::TtlTooLong {
                micros: i64::try_from(options.ttl.as_micros()).unwrap_or(i64::MAX),
                micros_max: 86_400_000_000,
            },
        ));
    }
    Ok(())
}

impl<C> RedisDistributedLockManager<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A manager over `connection`, which should reconnect by itself after
    /// the server restarts (as [`ConnectionManager`] does): the manager
    /// clones it for each acquisition, keep-alive and release. A TTL under a
    /// millisecond or over a day is refused.
    pub fn over(
        connection: C,
        prefix: impl Into<String>,
        options: RedisLockOptions,
    ) -> Result<Self, LockError> {
        validate(options)?;
        Ok(RedisDistributedLockManager {
            connection,
            prefix: prefix.into(),
            options,
            holders: Holders::Generated,
        })
    }

    /// Holders named `owner`, each acquisition's secret from `secrets`
    /// (which must not repeat: two acquisitions with one value would each
    /// release the other's lock). The default generates both, as an owner
    /// id and 64 random bits; a simulation passes its seeded draws.
    pub fn with_holders(
        mut self,
        owner: Owner,
        secrets: impl FnMut() -> u64 + Send + 'static,
    ) -> Self {
        self.holders = Holders::Given {
            owner,
            secrets: Arc::new(Mutex::new(secrets)),
        };
        self
    }

    fn key(scope: &Scope) -> (String, String) {
        // One hash tag, so both keys live on one slot of a Redis cluster.
        (
            format!("{{{}}}:lock", scope.as_str()),
            format!("{{{}}}:token", scope.as_str()),
        )
    }

    async fn acquire(&self, table: &TableName) -> Result<LockGuard, LockError> {
        let scope = table.scope(&self.prefix)?;
        let (key, token_key) = Self::key(&scope);
        let value = self.holders.next_value();
        let ttl_ms = self.options.ttl.as_millis() as u64;
        let mut connection = self.connection.clone();
        // Before the script is sent: Redis starts the PX clock no earlier.
        let sent = tokio::time::Instant::now();
        let (token, holder): (i64, String) = ACQUIRE
            .key(&key)
            .key(&token_key)
            .arg(&value)
            .arg(ttl_ms)
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        if token == 0 {
            // The holder's value is `{owner}#{secret}`: name the owner, never
            // the secret (with it, anyone could release the holder's lock).
            let owner = holder.split('#').next().unwrap_or_default().to_string();
            return Err(LockError::Held {
                scope,
                holder: Some(owner),
            });
        }
        let (lost_tx, lost_rx) = watch::channel(false);
        let watcher = if self.options.keep_alive {
            tokio::spawn(keep_alive(
                self.connection.clone(),
                key.clone(),
                value.clone(),
                self.options,
                sent,
                lost_tx,
            ))
        } else {
            // Redis started the PX clock no earlier than `sent`, in whole
            // milliseconds: past `sent + ttl - 1 ms` the key may be gone.
            let deadline = sent + self.options.promised_lifetime();
            tokio::spawn(async move {
                tokio::time::sleep_until(deadline).await;
                lost_tx.send_replace(true);
            })
        };
        Ok(LockGuard::new(
            scope.clone(),
            Some(FencingToken(token)),
            None,
            lost_rx,
            Box::new(RedisReleaser {
                connection: self.connection.clone(),
                key,
                value,
                scope,
                watcher: AbortOnDrop(watcher),
            }),
        ))
    }

    async fn locked(&self, table: &TableName) -> Result<bool, LockError> {
        let scope = table.scope(&self.prefix)?;
        let (key, _) = Self::key(&scope);
        let mut connection = self.connection.clone();
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(exists == 1)
    }
}

/// Extends the key by compare-and-pexpire through the shared keep-alive rule.
async fn keep_alive<C: ConnectionLike + Clone + Send + 'static>(
    connection: C,
    key: String,
    value: String,
    options: RedisLockOptions,
    sent: tokio::time::Instant,
    lost: watch::Sender<bool>,
) {
    let ttl = options.ttl;
    // Extended every `ttl / 3`; believed only until the promise of the last
    // confirmed extension runs out (a millisecond short of the TTL).
    let schedule = Schedule::every(options.promised_lifetime(), ttl / 3);
    keep_alive::run(schedule, sent, || {
        let (mut connection, key, value) = (connection.clone(), key.clone(), value.clone());
        async move {
            let extended: Result<i64, _> = EXTEND
                .key(&key)
                .arg(&value)
                .arg(ttl.as_millis() as u64)
                .invoke_async(&mut connection)
                .await;
            match extended {
                Ok(1) => Extension::Extended,
                Ok(_) => Extension::Gone,
                Err(_) => Extension::Unreachable,
            }
        }
    })
    .await;
    lost.send_replace(true);
}

struct RedisReleaser<C> {
    connection: C,
    key: String,
    value: String,
    scope: Scope,
    /// The keep-alive, or the timer that fires *lost* at the TTL.
    watcher: AbortOnDrop,
}

impl<C: ConnectionLike + Send + 'static> Releaser for RedisReleaser<C> {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        Box::pin(async move {
            let RedisReleaser {
                mut connection,
                key,
                value,
                scope,
                watcher,
            } = *self;
            drop(watcher);
            let deleted: i64 = RELEASE
                .key(&key)
                .arg(&value)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            if deleted == 1 {
                Ok(())
            } else {
                Err(LockError::Lost { scope })
            }
        })
    }
}

impl<C> LockManager for RedisDistributedLockManager<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn acquire_lock<'a>(
        &'a self,
        table: &'a TableName,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(self.acquire(table))
    }

    fn is_locked<'a>(&'a self, table: &'a TableName) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.locked(table))
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
