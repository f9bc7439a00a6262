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
//! The logic above is written once, over the [`AdvisorySessions`] seam:
//! [`PgSessions`] (a `PgConnection` per session) in production; the
//! harness's simulation runs the same manager over simulated sessions, so
//! what it finds by seed is this code's behaviour.
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
use leaseproof_protocol::{BackendError, Scope};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, PgConnection};
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

/// A database session that can hold session-level advisory locks: the seam
/// between the manager's logic (one session per held lock, the probe, the
/// idle cache, release and *lost*) and what it speaks through. Production
/// sessions are [`PgConnection`]s ([`PgSessions`]); the harness's
/// simulation implements it over its simulated database, so the manager's
/// own logic is what runs under the simulation's faults.
pub trait AdvisorySession: Send + 'static {
    /// `pg_try_advisory_lock(key)`: whether the lock is now held on this
    /// connection.
    fn try_lock(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>>;
    /// `pg_advisory_unlock(key)`: whether the lock was held on this
    /// connection.
    fn unlock(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>>;
    /// Whether any session holds `key` (PostgreSQL's `pg_locks`).
    fn is_held(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>>;
    /// A round trip that fails once the session is gone (`SELECT 1`).
    fn probe(&mut self) -> BoxFuture<'_, Result<(), BackendError>>;
    /// Ends the session; its locks end with it.
    fn close(self) -> BoxFuture<'static, ()>;
}

/// Where the advisory manager's sessions come from: each held lock gets a
/// session of its own.
pub trait AdvisorySessions: Send + Sync + 'static {
    /// The session type.
    type Session: AdvisorySession;
    /// Opens a fresh session; nothing was locked if it fails.
    fn open(&self) -> BoxFuture<'_, Result<Self::Session, LockError>>;
}

/// The production sessions: a dedicated autocommit [`PgConnection`] per
/// lock, refused behind a pooler in transaction mode ([`TransactionPooling`]).
#[derive(Clone, Debug)]
pub struct PgSessions {
    options: PgConnectOptions,
    /// Whether sessions were found private (checked once, on the first
    /// connection; `Some(false)`: a transaction pooler shares them).
    sessions_private: Arc<tokio::sync::OnceCell<bool>>,
}

impl AdvisorySessions for PgSessions {
    type Session = PgConnection;

    fn open(&self) -> BoxFuture<'_, Result<PgConnection, LockError>> {
        Box::pin(async move {
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
        })
    }
}

/// One boolean from `statement` with `$1 = key`.
fn ask_bool<'c>(
    connection: &'c mut PgConnection,
    statement: &'static str,
    key: i64,
) -> BoxFuture<'c, Result<bool, BackendError>> {
    Box::pin(async move {
        sqlx::query_scalar(statement)
            .bind(key)
            .fetch_one(connection)
            .await
            .map_err(|error| Box::new(error) as BackendError)
    })
}

impl AdvisorySession for PgConnection {
    fn try_lock(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>> {
        ask_bool(self, "SELECT pg_try_advisory_lock($1)", key)
    }

    fn unlock(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>> {
        ask_bool(self, "SELECT pg_advisory_unlock($1)", key)
    }

    fn is_held(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>> {
        // A bigint advisory key is stored as classid = high 32 bits, objid =
        // low 32 bits, objsubid = 1 (PostgreSQL's pg_locks documentation).
        ask_bool(
            self,
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND classid = (($1 >> 32) & 4294967295)::oid \
             AND objid = ($1 & 4294967295)::oid AND objsubid = 1)",
            key,
        )
    }

    fn probe(&mut self) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move {
            sqlx::query("SELECT 1")
                .execute(self)
                .await
                .map(drop)
                .map_err(|error| Box::new(error) as BackendError)
        })
    }

    fn close(self) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = sqlx::Connection::close(self).await;
        })
    }
}

/// Session-level `pg_try_advisory_lock` on a dedicated session per lock.
pub struct PostgresAdvisoryLockManager<S: AdvisorySessions = PgSessions> {
    sessions: Arc<S>,
    prefix: String,
    probe_interval: Duration,
    idle: IdleSessions<S::Session>,
}

impl<S: AdvisorySessions> Clone for PostgresAdvisoryLockManager<S> {
    fn clone(&self) -> Self {
        PostgresAdvisoryLockManager {
            sessions: Arc::clone(&self.sessions),
            prefix: self.prefix.clone(),
            probe_interval: self.probe_interval,
            idle: self.idle.clone(),
        }
    }
}

impl<S: AdvisorySessions> std::fmt::Debug for PostgresAdvisoryLockManager<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresAdvisoryLockManager")
            .field("prefix", &self.prefix)
            .field("probe_interval", &self.probe_interval)
            .finish_non_exhaustive()
    }
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

/// Sessions holding no lock, ready for the next attempt.
struct IdleSessions<T>(Arc<Mutex<Vec<T>>>);

impl<T> Clone for IdleSessions<T> {
    fn clone(&self) -> Self {
        IdleSessions(Arc::clone(&self.0))
    }
}

/// Idle sessions kept at most.
const IDLE_SESSIONS_MAX: usize = 8;

impl<T> IdleSessions<T> {
    fn new() -> Self {
        IdleSessions(Arc::new(Mutex::new(Vec::new())))
    }

    fn take(&self) -> Option<T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop()
    }

    /// Keeps `session` for reuse; it must hold no advisory lock.
    fn give_back(&self, session: T) {
        let mut idle = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < IDLE_SESSIONS_MAX {
            idle.push(session);
        }
    }
}

impl PostgresAdvisoryLockManager<PgSessions> {
    /// A manager for the database at `url`, scoping locks under `prefix`.
    /// The lock connection is probed every second.
    pub fn new(url: &str, prefix: impl Into<String>) -> Result<Self, LockError> {
        let options: PgConnectOptions =
            url.parse()
                .map_err(|error: sqlx::Error| LockError::Unavailable {
                    source: Box::new(error),
                })?;
        Ok(PostgresAdvisoryLockManager::over(
            PgSessions {
                options,
                sessions_private: Arc::new(tokio::sync::OnceCell::new()),
            },
            prefix,
        ))
    }
}

impl<S: AdvisorySessions> PostgresAdvisoryLockManager<S> {
    /// A manager whose sessions come from `sessions`, scoping locks under
    /// `prefix`; every session is probed every second.
    pub fn over(sessions: S, prefix: impl Into<String>) -> Self {
        PostgresAdvisoryLockManager {
            sessions: Arc::new(sessions),
            prefix: prefix.into(),
            probe_interval: Duration::from_secs(1),
            idle: IdleSessions::new(),
        }
    }

    /// How often the holder's task probes its lock session: the delay
    /// before a dead session fires *lost*.
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        assert!(!probe_interval.is_zero());
        self.probe_interval = probe_interval;
        self
    }

    /// Asks `question` on a cached session, or on a fresh one when there is
    /// none or the cached one died.
    async fn ask<Q>(&self, question: Q) -> Result<(S::Session, bool), LockError>
    where
        Q: for<'s> Fn(&'s mut S::Session) -> BoxFuture<'s, Result<bool, BackendError>>,
    {
        if let Some(mut cached) = self.idle.take() {
            if let Ok(answer) = question(&mut cached).await {
                return Ok((cached, answer));
            }
            // Died while idle (a restart, a terminated backend): dropped
            // unclosed (a goodbye on a dead connection can hang), a fresh one.
            drop(cached);
        }
        let mut session = self.sessions.open().await?;
        let answer = question(&mut session)
            .await
            .map_err(|source| LockError::Backend { source })?;
        Ok((session, answer))
    }

    async fn acquire(&self, table: &TableName) -> Result<LockGuard, LockError> {
        let scope = table.scope(&self.prefix)?;
        let key = advisory_key(&scope);
        let (session, locked) = self.ask(|session| session.try_lock(key)).await?;
        if !locked {
            self.idle.give_back(session);
            return Err(LockError::Held {
                scope,
                holder: None,
            });
        }
        let (lost_tx, lost_rx) = watch::channel(false);
        let (release_tx, release_rx) = oneshot::channel();
        tokio::spawn(hold(
            session,
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
        let (session, locked) = self.ask(|session| session.is_held(key)).await?;
        self.idle.give_back(session);
        Ok(locked)
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
    let _ = sqlx::Connection::close(other).await;
    connection
        .execute(sqlx::raw_sql("RESET leaseproof.session_mark"))
        .await?;
    Ok(seen.as_deref() != Some(mark.as_str()))
}

type ReleaseReply = oneshot::Sender<Result<(), LockError>>;

/// The lock session's owner: probes, and unlocks on release or drop.
async fn hold<T: AdvisorySession>(
    mut session: T,
    key: i64,
    scope: Scope,
    probe_interval: Duration,
    idle: IdleSessions<T>,
    lost: watch::Sender<bool>,
    mut release: oneshot::Receiver<ReleaseReply>,
) {
    loop {
        tokio::select! {
            request = &mut release => {
                let unlocked = session.unlock(key).await;
                if matches!(unlocked, Ok(true)) {
                    // Holds nothing now: ready for the next attempt.
                    idle.give_back(session);
                } else {
                    session.close().await;
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
                if session.probe().await.is_err() {
                    // The session died, and the server freed the lock with it.
                    let _ = lost.send(true);
                    // Dropped, not closed: a goodbye on a dead session can
                    // hang, and the release below must answer at once.
                    drop(session);
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

impl<S: AdvisorySessions> LockManager for PostgresAdvisoryLockManager<S> {
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
