//! [`PostgresAdvisoryLockManager`]: session advisory locks on a dedicated
//! autocommit connection, as pg_partsmith's default manager.
//!
//! Each lock owns one connection of its own, opened for it and never borrowed
//! from the caller's pool: the seed's "a pool size of 1 will deadlock" cannot
//! happen, and commits, rollbacks or a `DETACH PARTITION … CONCURRENTLY` on the
//! caller's connections do not touch it. A task owns the connection: it probes
//! it every `probe_interval` (the lock lives exactly as long as the session,
//! and a dead session is only noticed when something is sent on it), fires
//! *lost* when the probe fails, and unlocks on release or when the guard is
//! dropped.
//!
//! Connections are reused: one that lost a collision, or whose lock was
//! released, goes back to a small idle cache instead of being closed, so a
//! colliding tick costs one round trip, not a connection setup (measured:
//! ~50x `SELECT 1` per loser without the cache). A cached connection that died
//! meanwhile is replaced by a fresh one on its first use.
//!
//! There is no fence: the maintenance writes on other connections, and
//! nothing there checks the lock. A holder whose lock connection died keeps
//! working until its probe notices — the finding the harness reports.
//!
//! Behind a connection pooler in transaction mode (PgBouncer's `pool_mode =
//! transaction`) a session lock stays with a server connection the client
//! does not keep: the next client handed that server connection holds the
//! lock too. The manager refuses to work there: its first connection sets a
//! mark on its session and a second connection looks for it; seeing it
//! means sessions are shared, and every acquisition fails with
//! [`TransactionPooling`] instead of silently double-granting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::future::BoxFuture;
use leaseproof_protocol::Scope;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _, PgConnection};
use tokio::sync::{oneshot, watch};

use crate::{LockError, LockGuard, LockManager, Releaser, TableName};

/// The advisory lock key of `scope`: FNV-1a (64 bit) of its bytes, as a
/// signed 64-bit integer. Stable across machines, Rust versions and releases
/// (no `std` hasher), so replicas of different builds agree. Two scopes whose
/// keys collide share one lock: they block each other (false contention),
/// but one scope can never be held twice.
pub fn advisory_key(scope: &Scope) -> i64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = scope.as_str().bytes().fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Session-level `pg_try_advisory_lock` on a dedicated connection per lock.
#[derive(Clone, Debug)]
pub struct PostgresAdvisoryLockManager {
    options: PgConnectOptions,
    prefix: String,
    probe_interval: Duration,
    idle: IdleConnections,
    /// Whether sessions were found private (checked once, on the first
    /// connection; `Some(false)`: a transaction pooler shares them).
    sessions_private: Arc<tokio::sync::OnceCell<bool>>,
}

/// The advisory manager's refusal to run behind a transaction pooler.
#[derive(Debug, thiserror::Error)]
#[error(
    "the connection goes through a pooler in transaction mode (one connection's session \
     state reached another): an advisory lock lives with its session and would be handed \
     to whichever client gets that server connection next; connect directly, or through \
     session pooling"
)]
pub struct TransactionPooling;

/// Connections holding no lock, ready for the next attempt.
#[derive(Clone, Debug, Default)]
struct IdleConnections(Arc<Mutex<Vec<PgConnection>>>);

/// Idle connections kept at most.
const IDLE_CONNECTIONS_MAX: usize = 8;

impl IdleConnections {
    fn take(&self) -> Option<PgConnection> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop()
    }

    /// Keeps `connection` for reuse; it must hold no advisory lock.
    fn give_back(&self, connection: PgConnection) {
        let mut idle = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < IDLE_CONNECTIONS_MAX {
            idle.push(connection);
        }
    }
}

impl PostgresAdvisoryLockManager {
    /// A manager for the database at `url`, scoping locks under `prefix`.
    /// The lock connection is probed every second.
    pub fn new(url: &str, prefix: impl Into<String>) -> Result<Self, LockError> {
        let options: PgConnectOptions =
            url.parse()
                .map_err(|error: sqlx::Error| LockError::Unavailable {
                    source: Box::new(error),
                })?;
        Ok(PostgresAdvisoryLockManager {
            options,
            prefix: prefix.into(),
            probe_interval: Duration::from_secs(1),
            idle: IdleConnections::default(),
            sessions_private: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// How often the holder's task probes its lock connection: the delay
    /// before a dead connection fires *lost*.
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        assert!(!probe_interval.is_zero());
        self.probe_interval = probe_interval;
        self
    }

    async fn connect(&self) -> Result<PgConnection, LockError> {
        let unavailable = |error: sqlx::Error| LockError::Unavailable {
            source: Box::new(error),
        };
        let mut connection = self.options.connect().await.map_err(unavailable)?;
        let private = self
            .sessions_private
            .get_or_try_init(|| sessions_are_private(&mut connection, &self.options))
            .await
            .map_err(unavailable)?;
        if !private {
            return Err(LockError::Backend {
                source: Box::new(TransactionPooling),
            });
        }
        Ok(connection)
    }

    /// Runs `statement` (one `bool` column, `$1` the key) on a cached
    /// connection, or on a fresh one when there is none or the cached one died.
    async fn ask(
        &self,
        statement: &'static str,
        key: i64,
    ) -> Result<(PgConnection, bool), LockError> {
        if let Some(mut cached) = self.idle.take() {
            if let Ok(answer) = sqlx::query_scalar(statement)
                .bind(key)
                .fetch_one(&mut cached)
                .await
            {
                return Ok((cached, answer));
            }
            // Died while idle (a restart, a terminated backend): a fresh one.
        }
        let mut connection = self.connect().await?;
        let answer = sqlx::query_scalar(statement)
            .bind(key)
            .fetch_one(&mut connection)
            .await
            .map_err(backend)?;
        Ok((connection, answer))
    }

    async fn acquire(&self, table: &TableName) -> Result<LockGuard, LockError> {
        let scope = table.scope(&self.prefix)?;
        let key = advisory_key(&scope);
        let (connection, locked) = self.ask("SELECT pg_try_advisory_lock($1)", key).await?;
        if !locked {
            self.idle.give_back(connection);
            return Err(LockError::Held {
                scope,
                holder: None,
            });
        }
        let (lost_tx, lost_rx) = watch::channel(false);
        let (release_tx, release_rx) = oneshot::channel();
        tokio::spawn(hold(
            connection,
            key,
            scope.clone(),
            self.probe_interval,
            self.idle.clone(),
            lost_tx,
            release_rx,
        ));
        Ok(LockGuard::new(
            scope.clone(),
            None,
            None,
            lost_rx,
            Box::new(AdvisoryReleaser { release_tx, scope }),
        ))
    }

    async fn locked(&self, table: &TableName) -> Result<bool, LockError> {
        let scope = table.scope(&self.prefix)?;
        let key = advisory_key(&scope);
        // A bigint advisory key is stored as classid = high 32 bits, objid =
        // low 32 bits, objsubid = 1 (PostgreSQL's pg_locks documentation).
        let (connection, locked) = self
            .ask(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND classid = (($1 >> 32) & 4294967295)::oid \
                 AND objid = ($1 & 4294967295)::oid AND objsubid = 1)",
                key,
            )
            .await?;
        self.idle.give_back(connection);
        Ok(locked)
    }
}

fn backend(error: sqlx::Error) -> LockError {
    LockError::Backend {
        source: Box::new(error),
    }
}

/// Whether a session's state stays its own: `connection` marks its session
/// and a second connection looks for the mark. Behind a pooler in
/// transaction mode the second is handed the server connection the first
/// just left (PgBouncer hands out the most recently used one) and sees it.
/// Simple-protocol statements only (`raw_sql`): they pass any pooler.
async fn sessions_are_private(
    connection: &mut PgConnection,
    options: &PgConnectOptions,
) -> Result<bool, sqlx::Error> {
    use rand::Rng as _;
    use sqlx::{Executor as _, Row as _};
    let mark = format!("{:016x}", rand::thread_rng().gen::<u64>());
    let set = format!("SET leaseproof.session_mark = '{mark}'");
    connection.execute(sqlx::raw_sql(&set)).await?;
    let mut other = options.connect().await?;
    let row = other
        .fetch_one(sqlx::raw_sql(
            "SELECT current_setting('leaseproof.session_mark', true)",
        ))
        .await?;
    let seen: Option<String> = row.try_get(0)?;
    let _ = other.close().await;
    connection
        .execute(sqlx::raw_sql("RESET leaseproof.session_mark"))
        .await?;
    Ok(seen.as_deref() != Some(mark.as_str()))
}

type ReleaseReply = oneshot::Sender<Result<(), LockError>>;

/// The lock connection's owner: probes, and unlocks on release or drop.
async fn hold(
    mut connection: PgConnection,
    key: i64,
    scope: Scope,
    probe_interval: Duration,
    idle: IdleConnections,
    lost: watch::Sender<bool>,
    mut release: oneshot::Receiver<ReleaseReply>,
) {
    loop {
        tokio::select! {
            request = &mut release => {
                let unlocked: Result<bool, sqlx::Error> =
                    sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                        .bind(key)
                        .fetch_one(&mut connection)
                        .await;
                if matches!(unlocked, Ok(true)) {
                    // Holds nothing now: ready for the next attempt.
                    idle.give_back(connection);
                } else {
                    let _ = connection.close().await;
                }
                // `Err` on the channel: the guard was dropped unreleased; the
                // lock is freed all the same (and with the session anyway).
                if let Ok(reply) = request {
                    let _ = reply.send(match unlocked {
                        Ok(true) => Ok(()),
                        // The session that held it is gone, or never held it.
                        Ok(false) | Err(_) => Err(LockError::Lost { scope }),
                    });
                }
                return;
            }
            () = tokio::time::sleep(probe_interval) => {
                if sqlx::query("SELECT 1").execute(&mut connection).await.is_err() {
                    // The session died, and the server freed the lock with it.
                    let _ = lost.send(true);
                    if let Ok(reply) = release.await {
                        let _ = reply.send(Err(LockError::Lost { scope }));
                    }
                    return;
                }
            }
        }
    }
}

struct AdvisoryReleaser {
    release_tx: oneshot::Sender<ReleaseReply>,
    scope: Scope,
}

impl Releaser for AdvisoryReleaser {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        Box::pin(async move {
            let AdvisoryReleaser { release_tx, scope } = *self;
            let (reply_tx, reply_rx) = oneshot::channel();
            if release_tx.send(reply_tx).is_err() {
                return Err(LockError::Lost { scope });
            }
            reply_rx.await.unwrap_or(Err(LockError::Lost { scope }))
        })
    }
}

impl LockManager for PostgresAdvisoryLockManager {
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
        "advisory"
    }
}
