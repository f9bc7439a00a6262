//! Which guarantee each lock manager of pg_partsmith's design gives under which fault, with
//! the evidence: the matrix `leaseproof verify` prints.
//!
//! Goal: what a user choosing a manager needs and no lock library tells them.
//! Method: every cell is a scene on real servers, driven through the public
//! `LockManager` API. A holder H takes the lock of one table and does its
//! maintenance — writes into a work log in PostgreSQL through its own
//! connection, as pg_partsmith's maintenance does, not through the lock — then
//! the fault strikes, a rival R tries the lock, and whoever holds a lock
//! (or believes so) writes again. The work log is the ground truth:
//!
//! - **I1 (two holders at once)**: R was granted the lock while H, alive,
//!   had neither released it nor learnt it was lost, and both wrote;
//! - **I3 (stale write)**: H's write committed after R's, although R's grant
//!   came later — the write a fence exists to refuse.
//!
//! Otherwise the cell **holds**, saying why (the rival was refused, or the
//! fence refused the stale write, or the dead holder wrote nothing).
//!
//! Fenced variants: `redis-fenced` checks the Redis token where the work
//! writes (a fence row per table, `UPDATE … WHERE token <= $new` in the same
//! statement as the write); `lease` writes through the lease's own commit
//! cycle (`FOR UPDATE` fence). `lease-unfenced` is the lease used as a plain
//! lock, to show what the fence buys.
//!
//! Invariant: a verdict names its evidence; a scene that could not run (no
//! server) is an error, never a verdict.

use std::fmt;
use std::time::Duration;

use leaseproof_locks::{
    advisory_key, LeaseLockManager, LockError, LockGuard, LockManager, PostgresAdvisoryLockManager,
    RedisDistributedLockManager, RedisLockOptions, TableName,
};
use leaseproof_pgcluster::DedicatedCluster;
use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::{FencingToken, Scope, Ttl};
use leaseproof_redis_server::RedisServer;
use sqlx::{PgPool, Postgres};

/// The locks the matrix judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKind {
    /// `PostgresAdvisoryLockManager`: no fence.
    Advisory,
    /// `RedisDistributedLockManager`, the work unfenced.
    Redis,
    /// `RedisDistributedLockManager`, its token checked where the work writes.
    RedisFenced,
    /// `LeaseLockManager`, the work through the lease's fenced commit cycle.
    Lease,
    /// `LeaseLockManager` used as a plain lock (no fence).
    LeaseUnfenced,
}

impl LockKind {
    /// Every lock, in the matrix's row order.
    pub const ALL: [LockKind; 5] = [
        LockKind::Advisory,
        LockKind::Redis,
        LockKind::RedisFenced,
        LockKind::Lease,
        LockKind::LeaseUnfenced,
    ];

    /// The name used on the command line and in the matrix.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Advisory => "advisory",
            LockKind::Redis => "redis",
            LockKind::RedisFenced => "redis-fenced",
            LockKind::Lease => "lease",
            LockKind::LeaseUnfenced => "lease-unfenced",
        }
    }
}

/// The faults the matrix injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// H stalls longer than the lock's TTL (a GC pause, a stopped VM), then
    /// carries on with its maintenance.
    HolderPaused,
    /// H's lock connection is terminated (`pg_terminate_backend`) while its
    /// maintenance carries on on another connection.
    LockConnectionKilled,
    /// H dies: its connections close, nothing is released, it writes no more.
    HolderKilled,
    /// The lock's server restarts (Redis without persistence; PostgreSQL).
    ServerRestart,
    /// Redis restarts with every write fsynced to its append-only file.
    PersistentServerRestart,
}

impl Fault {
    /// Every fault, in the matrix's column order.
    pub const ALL: [Fault; 5] = [
        Fault::HolderPaused,
        Fault::LockConnectionKilled,
        Fault::HolderKilled,
        Fault::ServerRestart,
        Fault::PersistentServerRestart,
    ];

    /// A short identifier (table names, keys).
    pub fn slug(self) -> &'static str {
        match self {
            Fault::HolderPaused => "paused",
            Fault::LockConnectionKilled => "connection_killed",
            Fault::HolderKilled => "holder_killed",
            Fault::ServerRestart => "restart",
            Fault::PersistentServerRestart => "persistent_restart",
        }
    }

    /// The lock's TTL in this scene: short where the scene waits it out (a
    /// pause, a dead holder), long where the lock must outlive a restart.
    fn ttl(self) -> Duration {
        match self {
            // Far longer than a restart on a loaded machine: the lock must
            // outlive the restart for the scene to ask what the restart did.
            Fault::ServerRestart | Fault::PersistentServerRestart => Duration::from_secs(30),
            _ => Duration::from_millis(TTL_MS),
        }
    }

    /// The column header.
    pub fn name(self) -> &'static str {
        match self {
            Fault::HolderPaused => "holder paused > TTL",
            Fault::LockConnectionKilled => "lock connection killed",
            Fault::HolderKilled => "holder killed",
            Fault::ServerRestart => "server restart",
            Fault::PersistentServerRestart => "restart, persistent",
        }
    }
}

/// A cell's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The guarantee held; why.
    Holds(String),
    /// The guarantee broke: the invariant (`I1`, `I3`) and the evidence.
    Violated {
        /// `I1` or `I3`.
        invariant: &'static str,
        /// What the work log and the guards showed.
        evidence: String,
    },
    /// The fault does not apply to this lock; why.
    NotApplicable(&'static str),
}

impl Verdict {
    /// `holds`, `I1`, `I3` or `n/a`: the short form the matrix prints.
    pub fn short(&self) -> &'static str {
        match self {
            Verdict::Holds(_) => "holds",
            Verdict::Violated { invariant, .. } => invariant,
            Verdict::NotApplicable(_) => "n/a",
        }
    }

    /// The evidence or reason.
    pub fn detail(&self) -> &str {
        match self {
            Verdict::Holds(why) => why,
            Verdict::Violated { evidence, .. } => evidence,
            Verdict::NotApplicable(why) => why,
        }
    }
}

/// One judged cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The lock.
    pub lock: LockKind,
    /// The fault.
    pub fault: Fault,
    /// What the scene showed.
    pub verdict: Verdict,
}

/// A scene that could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SceneError(pub String);

impl fmt::Display for SceneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SceneError {}

fn scene<E: fmt::Display>(what: &'static str) -> impl Fn(E) -> SceneError {
    move |error| SceneError(format!("{what}: {error}"))
}

/// The servers a matrix run uses: a dedicated PostgreSQL cluster (restarted by
/// the restart scenes) and dedicated Redis servers (one without, one with
/// persistence).
pub struct Servers {
    cluster: DedicatedCluster,
    redis: RedisServer,
    redis_persistent: RedisServer,
}

impl fmt::Debug for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Servers").finish_non_exhaustive()
    }
}

impl Servers {
    /// Starts the servers; an error when PostgreSQL or Redis cannot start.
    pub async fn start() -> Result<Servers, SceneError> {
        let cluster = DedicatedCluster::start_dedicated()
            .await
            .map_err(|error| SceneError(format!("PostgreSQL: {}", error.reason)))?;
        let redis = RedisServer::start_throwaway_with(false).map_err(scene("Redis"))?;
        let redis_persistent =
            RedisServer::start_throwaway_with(true).map_err(scene("persistent Redis"))?;
        Ok(Servers {
            cluster,
            redis,
            redis_persistent,
        })
    }
}

/// Short TTLs, so a pause outlives them in a fraction of a second.
const TTL_MS: u64 = 300;
/// Longer than [`TTL_MS`].
const PAUSE_MS: u64 = 500;

/// The work log and the fence rows, on the scene's own database.
const CREATE_WORK: &str = "
CREATE TABLE IF NOT EXISTS lock_work (
    seq    bigserial PRIMARY KEY,
    scope  text   NOT NULL,
    writer text   NOT NULL,
    token  bigint
);
CREATE TABLE IF NOT EXISTS lock_fence (
    scope text   PRIMARY KEY,
    token bigint NOT NULL
)";

/// The token fence in one statement: the fence row only moves forward, and
/// the work row is written only if it did (equal tokens are the same holder).
const FENCED_WORK: &str = "
WITH fence AS (
    INSERT INTO lock_fence (scope, token) VALUES ($1, $3)
    ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token
    WHERE lock_fence.token <= EXCLUDED.token
    RETURNING 1
)
INSERT INTO lock_work (scope, writer, token) SELECT $1, $2, $3 FROM fence RETURNING seq";

/// One scene's lock, work store and fault knobs.
struct Stage {
    lock: LockKind,
    manager: Box<dyn LockManager>,
    work: PgPool,
    leases: Option<PostgresLeases>,
    table: TableName,
}

impl Stage {
    /// Writes one row of maintenance as `writer` under `guard`; `Ok(false)`
    /// when a fence refused it. A connection broken by a server restart is
    /// retried: the maintenance carries on, as a replica's would.
    async fn work(&self, writer: &str, guard: &LockGuard) -> Result<bool, SceneError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.work_once(writer, guard).await {
                Err(_) if attempts < 20 => tokio::time::sleep(Duration::from_millis(100)).await,
                result => return result,
            }
        }
    }

    async fn work_once(&self, writer: &str, guard: &LockGuard) -> Result<bool, SceneError> {
        let scope = guard.scope().as_str().to_string();
        let token = guard.fencing_token().map(|token| token.0);
        match self.lock {
            LockKind::Advisory | LockKind::Redis | LockKind::LeaseUnfenced => {
                sqlx::query("INSERT INTO lock_work (scope, writer, token) VALUES ($1, $2, $3)")
                    .bind(&scope)
                    .bind(writer)
                    .bind(token)
                    .execute(&self.work)
                    .await
                    .map_err(scene("unfenced write"))?;
                Ok(true)
            }
            LockKind::RedisFenced => {
                let written: Option<i64> = sqlx::query_scalar(FENCED_WORK)
                    .bind(&scope)
                    .bind(writer)
                    .bind(token)
                    .fetch_optional(&self.work)
                    .await
                    .map_err(scene("token-fenced write"))?;
                Ok(written.is_some())
            }
            LockKind::Lease => {
                let leases = self.leases.as_ref().expect("the lease stage has leases");
                let lease = guard.lease().expect("a lease guard carries its lease");
                let writer = writer.to_string();
                let committed = leases
                    .commit_cycle(lease, move |connection| {
                        Box::pin(async move {
                            sqlx::query::<Postgres>(
                                "INSERT INTO lock_work (scope, writer, token) VALUES ($1, $2, $3)",
                            )
                            .bind(scope)
                            .bind(writer)
                            .bind(token)
                            .execute(connection)
                            .await
                            .map(drop)
                        })
                    })
                    .await;
                match committed {
                    Ok(()) => Ok(true),
                    Err(CycleError::Lease(leaseproof_protocol::LeaseError::Lost { .. })) => {
                        Ok(false)
                    }
                    Err(error) => Err(SceneError(format!("fenced commit: {error}"))),
                }
            }
        }
    }

    /// Terminates the session holding `scope`'s advisory lock (the lock
    /// connection dies; the server frees the lock with it).
    async fn terminate_advisory_session(&self, scope: &Scope) -> Result<(), SceneError> {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND classid = (($1 >> 32) & 4294967295)::oid AND objid = ($1 & 4294967295)::oid",
        )
        .bind(advisory_key(scope))
        .execute(&self.work)
        .await
        .map(drop)
        .map_err(scene("terminate the lock connection"))
    }

    /// The work log's writers in commit order.
    async fn log(&self) -> Result<Vec<(String, Option<i64>)>, SceneError> {
        sqlx::query_as("SELECT writer, token FROM lock_work ORDER BY seq")
            .fetch_all(&self.work)
            .await
            .map_err(scene("read the work log"))
    }

    /// Tries the lock for up to `patience`; `None` when refused throughout.
    async fn rival(&self, patience: Duration) -> Result<Option<LockGuard>, SceneError> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match self.manager.acquire_lock(&self.table).await {
                Ok(guard) => return Ok(Some(guard)),
                Err(LockError::Held { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(LockError::Held { .. }) => return Ok(None),
                // A store that just restarted may refuse a moment.
                Err(LockError::Unavailable { .. } | LockError::Backend { .. })
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => return Err(SceneError(format!("rival's acquisition: {error}"))),
            }
        }
    }
}

async fn stage(
    servers: &Servers,
    lock: LockKind,
    fault: Fault,
    database_url: &str,
) -> Result<Stage, SceneError> {
    let work = PostgresLeases::pool_options()
        .max_connections(8)
        .connect(database_url)
        .await
        .map_err(scene("work pool"))?;
    sqlx::raw_sql(CREATE_WORK)
        .execute(&work)
        .await
        .map_err(scene("work tables"))?;
    let ttl = fault.ttl();
    let table = TableName::new("public", format!("{}_{}", lock.name(), fault.slug()));
    let mut leases = None;
    let manager: Box<dyn LockManager> = match lock {
        // The probe interval decides how late a holder learns its lock
        // connection died; any interval longer than the rival's takeover
        // shows the overlap, and a long one keeps the verdict deterministic.
        LockKind::Advisory => Box::new(
            PostgresAdvisoryLockManager::new(database_url, "matrix")
                .map_err(scene("advisory manager"))?
                .with_probe_interval(Duration::from_secs(60)),
        ),
        LockKind::Redis | LockKind::RedisFenced => {
            let url = if fault == Fault::PersistentServerRestart {
                &servers.redis_persistent.url
            } else {
                &servers.redis.url
            };
            Box::new(
                RedisDistributedLockManager::connect(
                    url,
                    format!("matrix-{}", lock.name()),
                    RedisLockOptions {
                        ttl,
                        keep_alive: false,
                    },
                )
                .await
                .map_err(scene("redis manager"))?,
            )
        }
        LockKind::Lease | LockKind::LeaseUnfenced => {
            let library = PostgresLeases::new(work.clone());
            library
                .ensure_schema()
                .await
                .map_err(scene("lease schema"))?;
            leases = Some(library.clone());
            Box::new(LeaseLockManager::new(
                library,
                format!("matrix-{}", lock.name()),
                Ttl::from_millis(ttl.as_millis() as i64).expect("valid"),
                false,
            ))
        }
    };
    Ok(Stage {
        lock,
        manager,
        work,
        leases,
        table,
    })
}

/// Judges a scene's log: H wrote before the fault; after it, R (if granted)
/// wrote, then H (if alive) wrote again.
fn judge(
    log: &[(String, Option<i64>)],
    rival_token: Option<Option<FencingToken>>,
    holder_believed_when_rival_granted: bool,
    holder_token: Option<FencingToken>,
) -> Verdict {
    let Some(rival_token) = rival_token else {
        return Verdict::Holds("the rival was refused throughout: the lock was never free".into());
    };
    let rival_at = log.iter().position(|(writer, _)| writer == "R");
    let holder_after =
        rival_at.and_then(|at| log[at..].iter().position(|(writer, _)| writer == "H"));
    match (rival_at, holder_after) {
        (Some(_), Some(_)) if holder_believed_when_rival_granted => Verdict::Violated {
            invariant: "I1",
            evidence: format!(
                "R was granted (token {}) while H still held it unaware (token {}); both wrote, H after R",
                show(rival_token),
                show(holder_token)
            ),
        },
        (Some(_), Some(_)) => Verdict::Violated {
            invariant: "I3",
            evidence: format!(
                "H's write (token {}) committed after R's (token {})",
                show(holder_token),
                show(rival_token)
            ),
        },
        (Some(_), None) if holder_believed_when_rival_granted => Verdict::Holds(format!(
            "R took over (token {}) while H believed; the fence refused H's stale write",
            show(rival_token)
        )),
        (Some(_), None) => Verdict::Holds(format!(
            "R took over (token {}) after H was dead or knew it had lost the lock; no write of H's landed after R's",
            show(rival_token)
        )),
        (None, _) => Verdict::Holds("the rival never wrote".into()),
    }
}

fn show(token: Option<FencingToken>) -> String {
    token.map_or("none".to_string(), |token| token.0.to_string())
}

/// Runs the scene of one cell.
pub async fn run_cell(
    servers: &mut Servers,
    lock: LockKind,
    fault: Fault,
) -> Result<Cell, SceneError> {
    let not_applicable = match (lock, fault) {
        (
            LockKind::Redis | LockKind::RedisFenced | LockKind::Lease | LockKind::LeaseUnfenced,
            Fault::LockConnectionKilled,
        ) => Some("holds no session: the lock is a key or a row with a TTL"),
        (
            LockKind::Advisory | LockKind::Lease | LockKind::LeaseUnfenced,
            Fault::PersistentServerRestart,
        ) => Some("PostgreSQL is always durable: see server restart"),
        _ => None,
    };
    if let Some(why) = not_applicable {
        return Ok(Cell {
            lock,
            fault,
            verdict: Verdict::NotApplicable(why),
        });
    }
    let database = servers
        .cluster
        .fresh_database()
        .await
        .map_err(scene("fresh database"))?;
    let stage = stage(servers, lock, fault, &database.url).await?;
    let holder = stage
        .manager
        .acquire_lock(&stage.table)
        .await
        .map_err(scene("holder's acquisition"))?;
    let holder_token = holder.fencing_token();
    if !stage.work("H", &holder).await? {
        return Err(SceneError("the holder's first write was refused".into()));
    }
    let mut holder = Some(holder);
    let patience = Duration::from_millis(TTL_MS * 4);
    match fault {
        Fault::HolderPaused => tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await,
        Fault::LockConnectionKilled => {
            let scope = holder.as_ref().expect("held").scope().clone();
            stage.terminate_advisory_session(&scope).await?;
        }
        Fault::HolderKilled => {
            // A dead process releases nothing and runs no keep-alive: forget
            // the guard (the advisory manager's connection closes with its
            // task, as with the process).
            let guard = holder.take().expect("held");
            if lock == LockKind::Advisory {
                stage.terminate_advisory_session(guard.scope()).await?;
            }
            std::mem::forget(guard);
        }
        Fault::ServerRestart => match lock {
            LockKind::Redis | LockKind::RedisFenced => {
                servers.redis.restart().map_err(scene("restart Redis"))?;
            }
            _ => servers
                .cluster
                .restart()
                .await
                .map_err(scene("restart PostgreSQL"))?,
        },
        Fault::PersistentServerRestart => {
            servers
                .redis_persistent
                .restart()
                .map_err(scene("restart persistent Redis"))?;
        }
    }
    // A Redis restart cut the manager's connection: the rival is another
    // replica, with a connection of its own.
    let rival_stage = if matches!(fault, Fault::ServerRestart | Fault::PersistentServerRestart)
        && matches!(lock, LockKind::Redis | LockKind::RedisFenced)
    {
        Some(stage_again(servers, lock, fault, &database.url).await?)
    } else {
        None
    };
    let rival_side = rival_stage.as_ref().unwrap_or(&stage);
    let rival = rival_side.rival(patience).await?;
    let holder_believed = holder.as_ref().is_some_and(|guard| !guard.is_lost());
    let rival_token = rival.as_ref().map(LockGuard::fencing_token);
    if let Some(rival) = &rival {
        if !rival_side.work("R", rival).await? {
            return Err(SceneError("the rival's write was refused".into()));
        }
    }
    if let Some(guard) = &holder {
        // The holder carries on with its maintenance, as it believes it may.
        let _ = stage.work("H", guard).await?;
    }
    let log = stage.log().await?;
    let verdict = judge(&log, rival_token, holder_believed, holder_token);
    if let Some(rival) = rival {
        let _ = rival.release().await;
    }
    if let Some(guard) = holder {
        let _ = guard.release().await;
    }
    Ok(Cell {
        lock,
        fault,
        verdict,
    })
}

async fn stage_again(
    servers: &Servers,
    lock: LockKind,
    fault: Fault,
    database_url: &str,
) -> Result<Stage, SceneError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match stage(servers, lock, fault, database_url).await {
            Ok(stage) => return Ok(stage),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The verdict each cell showed when the matrix was built (`holds`, `I1`,
/// `I3`, `n/a`): `leaseproof verify` fails when a run disagrees, and the
/// README's table is this one.
pub fn expected_verdict(lock: LockKind, fault: Fault) -> &'static str {
    use Fault::*;
    use LockKind::*;
    match (lock, fault) {
        (Advisory, HolderPaused | HolderKilled) => "holds",
        (Advisory, LockConnectionKilled | ServerRestart) => "I1",
        // Without a keep-alive the Redis guard's *lost* fires at the TTL, as
        // the lease guard's does: the paused holder knew and wrote anyway.
        (Redis, HolderPaused) => "I3",
        (Redis, ServerRestart) => "I1",
        (RedisFenced, ServerRestart) => "I1",
        (Redis | RedisFenced, HolderKilled | PersistentServerRestart) => "holds",
        (RedisFenced, HolderPaused) => "holds",
        (Lease, HolderPaused | HolderKilled | ServerRestart) => "holds",
        // The lease guard's *lost* fires at the TTL (no keep-alive needed):
        // the paused holder knew, wrote anyway, and nothing fenced it.
        (LeaseUnfenced, HolderPaused) => "I3",
        (LeaseUnfenced, HolderKilled | ServerRestart) => "holds",
        (_, LockConnectionKilled | PersistentServerRestart) => "n/a",
    }
}

/// The whole matrix, row by row.
pub async fn run_matrix(servers: &mut Servers) -> Result<Vec<Cell>, SceneError> {
    let mut cells = Vec::new();
    for lock in LockKind::ALL {
        for fault in Fault::ALL {
            cells.push(run_cell(servers, lock, fault).await?);
        }
    }
    Ok(cells)
}

/// The matrix as a text table: one row per lock, one column per fault.
pub fn render(cells: &[Cell]) -> String {
    let mut text = format!("{:<16}", "lock");
    for fault in Fault::ALL {
        text.push_str(&format!(" {:<24}", fault.name()));
    }
    text.push('\n');
    for lock in LockKind::ALL {
        text.push_str(&format!("{:<16}", lock.name()));
        for fault in Fault::ALL {
            let verdict = cells
                .iter()
                .find(|cell| cell.lock == lock && cell.fault == fault)
                .map_or("?", |cell| cell.verdict.short());
            text.push_str(&format!(" {verdict:<24}"));
        }
        text.push('\n');
    }
    text
}
