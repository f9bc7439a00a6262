//! Which guarantee each lock manager of pg_partsmith's design gives under which fault, with
//! the evidence: the matrix `leaseproof verify` prints.
//!
//! Goal: what a user choosing a manager needs and no lock library tells them.
//! Method: every cell is a scene on real servers, driven through the public
//! `LockManager` API. A holder H takes the lock of one table and does its
//! maintenance — writes into a work log in PostgreSQL through its own
//! connection, as pg_partsmith's maintenance does, not through the lock — then
//! the fault strikes, a rival R tries the lock, and whoever holds a lock
//! (or believes so) writes again. Every acquisition, write, release and
//! *lost* signal is recorded as it happens, on one monotonic clock, as a
//! `History`; the work log's rows are read back with their commit times; and
//! the one checker (`leaseproof_history::check`) judges it, as it judges every
//! other run. Typically:
//!
//! - **I1 (two holders at once)**: R was granted while H's certain hold — no
//!   release, no *lost*, inside its promised lifetime — was still running;
//! - **I2 (token order)**: R, granted after H, got a token no larger;
//! - **I3 (stale write)**: H's write committed after R's, although H's grant
//!   was acknowledged before R's was asked for — the write a fence refuses.
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
//! Invariant: a verdict is the checker's report on the scene's history, so it
//! names its evidence by event and row; a scene that could not run (no
//! server) is an error, never a verdict.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leaseproof_history::{
    check, CheckConfig, CheckReport, EventKind, FailReason, History, Invariant, Op, OpResult,
    Outcome, Recorder, Stamp, Violation, WorkRow,
};
use leaseproof_locks::{
    advisory_key, redis_promised_lifetime, LockError, LockGuard, LockManager, TableName,
};
use leaseproof_pgcluster::DedicatedCluster;
use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::Scope;
use leaseproof_redis_server::RedisServer;
use sqlx::{PgPool, Postgres};

use crate::managers::{build_manager, ManagerKind, ManagerSpec};

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

/// A cell's verdict: the checker's report on the scene's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The checker found nothing; what the scene showed.
    Holds(String),
    /// The checker proved these violations (each with its events and rows).
    Violated(Vec<Violation>),
    /// The fault does not apply to this lock; why.
    NotApplicable(&'static str),
}

impl Verdict {
    /// The invariants broken, in the checker's order (empty when it holds).
    pub fn invariants(&self) -> BTreeSet<Invariant> {
        match self {
            Verdict::Violated(violations) => violations
                .iter()
                .map(|violation| violation.invariant)
                .collect(),
            Verdict::Holds(_) | Verdict::NotApplicable(_) => BTreeSet::new(),
        }
    }

    /// `holds`, `n/a`, or the codes of the broken invariants (`I1+I3`): the
    /// short form the matrix prints.
    pub fn short(&self) -> String {
        match self {
            Verdict::Holds(_) => "holds".to_string(),
            Verdict::NotApplicable(_) => "n/a".to_string(),
            Verdict::Violated(_) => short_codes(&self.invariants()),
        }
    }

    /// The evidence or reason.
    pub fn detail(&self) -> String {
        match self {
            Verdict::Holds(why) => why.clone(),
            Verdict::Violated(violations) => violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
            Verdict::NotApplicable(why) => (*why).to_string(),
        }
    }
}

/// `I1+I3`.
fn short_codes(invariants: &BTreeSet<Invariant>) -> String {
    invariants
        .iter()
        .map(|invariant| invariant.code())
        .collect::<Vec<_>>()
        .join("+")
}

/// What a cell is expected to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// The fault does not apply.
    NotApplicable,
    /// Exactly these invariants broken (none: it holds).
    Breaks(&'static [Invariant]),
}

impl Expected {
    /// Whether `verdict` is this.
    pub fn matches(self, verdict: &Verdict) -> bool {
        match (self, verdict) {
            (Expected::NotApplicable, Verdict::NotApplicable(_)) => true,
            (Expected::Breaks(invariants), Verdict::Holds(_) | Verdict::Violated(_)) => {
                verdict.invariants() == invariants.iter().copied().collect()
            }
            _ => false,
        }
    }

    /// The short form, as [`Verdict::short`] prints it.
    pub fn short(self) -> String {
        match self {
            Expected::NotApplicable => "n/a".to_string(),
            Expected::Breaks([]) => "holds".to_string(),
            Expected::Breaks(invariants) => short_codes(&invariants.iter().copied().collect()),
        }
    }
}

/// One judged cell.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The lock.
    pub lock: LockKind,
    /// The fault.
    pub fault: Fault,
    /// What the checker found.
    pub verdict: Verdict,
    /// The scene's history, judged (empty for a cell that does not apply).
    pub history: History,
    /// The checker's whole report (possible violations, what it could not judge).
    pub report: CheckReport,
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
    seq      bigserial PRIMARY KEY,
    scope    text   NOT NULL,
    writer   text   NOT NULL,
    token    bigint,
    cycle_id bigint NOT NULL,
    item     int    NOT NULL
);
CREATE TABLE IF NOT EXISTS lock_fence (
    scope text   PRIMARY KEY,
    token bigint NOT NULL
)";

/// An unfenced row of maintenance.
const UNFENCED_WORK: &str =
    "INSERT INTO lock_work (scope, writer, token, cycle_id, item) VALUES ($1, $2, $3, $4, 0)";

/// The token fence in one statement: the fence row only moves forward, and
/// the work row is written only if it did (equal tokens are the same holder).
const FENCED_WORK: &str = "
WITH fence AS (
    INSERT INTO lock_fence (scope, token) VALUES ($1, $3)
    ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token
    WHERE lock_fence.token <= EXCLUDED.token
    RETURNING 1
)
INSERT INTO lock_work (scope, writer, token, cycle_id, item)
SELECT $1, $2, $3, $4, 0 FROM fence RETURNING seq";

/// The scene's history as it happens: H and R on one monotonic clock.
#[derive(Clone)]
struct SceneLog {
    recorder: Recorder,
    start: Instant,
    /// Taken around reading the clock and recording, so each worker's events
    /// are in time order even when a *lost* signal records concurrently.
    order: Arc<Mutex<u64>>,
}

impl SceneLog {
    fn new() -> SceneLog {
        SceneLog {
            recorder: Recorder::new(),
            start: Instant::now(),
            order: Arc::new(Mutex::new(0)),
        }
    }

    fn record(&self, worker: &str, kind: EventKind) -> u64 {
        let _order = self
            .order
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        self.recorder.record(self.stamp(worker), kind)
    }

    fn invoke(&self, worker: &str, op: Op) -> u64 {
        let _order = self
            .order
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        self.recorder.invoke(self.stamp(worker), op)
    }

    fn complete(&self, worker: &str, op_id: u64, outcome: Outcome) {
        let _order = self
            .order
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        self.recorder.complete(self.stamp(worker), op_id, outcome);
    }

    /// A fresh cycle id (unique in the scene).
    fn cycle(&self) -> u64 {
        let mut order = self
            .order
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        *order += 1;
        *order
    }

    fn stamp<'w>(&self, worker: &'w str) -> Stamp<'w> {
        let now = i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX);
        Stamp {
            worker,
            incarnation: 1,
            true_time_us: now,
            local_time_us: now,
        }
    }
}

/// A lock a worker of the scene holds, and the task that records its *lost*.
struct Held {
    worker: &'static str,
    guard: LockGuard,
    token: u64,
    watcher: tokio::task::JoinHandle<()>,
}

impl Held {
    fn fencing_token(&self) -> Option<i64> {
        self.guard.fencing_token().map(|token| token.0)
    }
}

/// One scene's lock, work store and fault knobs.
struct Stage {
    lock: LockKind,
    manager: std::sync::Arc<dyn LockManager>,
    work: PgPool,
    leases: Option<PostgresLeases>,
    table: TableName,
    ttl: Duration,
}

/// How a write attempt ended.
enum Wrote {
    Yes,
    /// A fence refused it.
    Refused,
    /// It failed in a way that may or may not have committed.
    Unknown(String),
}

impl Stage {
    fn scope(&self) -> String {
        self.table.to_string()
    }

    /// Acquires as `worker` and records it; `None` when refused (recorded too).
    async fn acquire(
        &self,
        log: &SceneLog,
        worker: &'static str,
    ) -> Result<Option<Held>, LockError> {
        let scope = self.scope();
        let op_id = log.invoke(
            worker,
            Op::Acquire {
                scope: scope.clone(),
                owner: worker.to_string(),
                ttl_us: i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX),
            },
        );
        match self.manager.acquire_lock(&self.table).await {
            Ok(guard) => {
                let token = guard
                    .fencing_token()
                    .and_then(|token| u64::try_from(token.0).ok());
                // A session lock lives with its session; the others promise
                // their TTL from the request (no keep-alive in these scenes),
                // Redis a millisecond less (it keeps expiry in whole ms).
                let promised = match self.lock {
                    LockKind::Redis | LockKind::RedisFenced => redis_promised_lifetime(self.ttl),
                    _ => self.ttl,
                };
                let lifetime_us = (self.lock != LockKind::Advisory)
                    .then(|| i64::try_from(promised.as_micros()).unwrap_or(i64::MAX));
                log.complete(
                    worker,
                    op_id,
                    Outcome::Ok {
                        result: OpResult::Lock { token, lifetime_us },
                    },
                );
                let belief_token = token.unwrap_or(0);
                log.record(
                    worker,
                    EventKind::BeliefStart {
                        scope: scope.clone(),
                        token: belief_token,
                    },
                );
                let mut lost = guard.lost_signal();
                let watcher_log = log.clone();
                let watcher = tokio::spawn(async move {
                    if lost.wait_for(|lost| *lost).await.is_ok() {
                        watcher_log.record(
                            worker,
                            EventKind::BeliefEnd {
                                scope,
                                token: belief_token,
                                reason: "the guard's lost signal fired".to_string(),
                            },
                        );
                    }
                });
                Ok(Some(Held {
                    worker,
                    guard,
                    token: belief_token,
                    watcher,
                }))
            }
            Err(LockError::Held { .. }) => {
                log.complete(
                    worker,
                    op_id,
                    Outcome::Fail {
                        reason: FailReason::Held,
                    },
                );
                Ok(None)
            }
            Err(error) => {
                log.complete(
                    worker,
                    op_id,
                    Outcome::Unknown {
                        reason: error.to_string(),
                    },
                );
                Err(error)
            }
        }
    }

    /// Writes one row of maintenance under `held`, recorded; `Ok(false)` when
    /// a fence refused it. A write broken by a server restart is retried as
    /// a new write (the broken one recorded as unknown): the maintenance
    /// carries on, as a replica's would.
    async fn work(&self, log: &SceneLog, held: &Held) -> Result<bool, SceneError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let cycle_id = log.cycle();
            let op_id = log.invoke(
                held.worker,
                Op::Write {
                    scope: self.scope(),
                    owner: held.worker.to_string(),
                    cycle_id,
                    items: 1,
                },
            );
            let (outcome, result) = match self.work_once(held, cycle_id).await {
                Wrote::Yes => (
                    Outcome::Ok {
                        result: OpResult::Written {},
                    },
                    Some(true),
                ),
                Wrote::Refused => (
                    Outcome::Fail {
                        reason: FailReason::Stale,
                    },
                    Some(false),
                ),
                Wrote::Unknown(reason) if attempts < 20 => {
                    log.complete(held.worker, op_id, Outcome::Unknown { reason });
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Wrote::Unknown(reason) => (
                    Outcome::Unknown {
                        reason: reason.clone(),
                    },
                    None,
                ),
            };
            log.complete(held.worker, op_id, outcome);
            return result
                .ok_or_else(|| SceneError(format!("{}'s write kept failing", held.worker)));
        }
    }

    async fn work_once(&self, held: &Held, cycle_id: u64) -> Wrote {
        let scope = self.scope();
        let writer = held.worker;
        let token = held.fencing_token();
        let cycle_id = i64::try_from(cycle_id).unwrap_or(i64::MAX);
        match self.lock {
            LockKind::Advisory | LockKind::Redis | LockKind::LeaseUnfenced => {
                match sqlx::query(UNFENCED_WORK)
                    .bind(&scope)
                    .bind(writer)
                    .bind(token)
                    .bind(cycle_id)
                    .execute(&self.work)
                    .await
                {
                    Ok(_) => Wrote::Yes,
                    Err(error) => Wrote::Unknown(format!("unfenced write: {error}")),
                }
            }
            LockKind::RedisFenced => {
                match sqlx::query_scalar::<_, i64>(FENCED_WORK)
                    .bind(&scope)
                    .bind(writer)
                    .bind(token)
                    .bind(cycle_id)
                    .fetch_optional(&self.work)
                    .await
                {
                    Ok(Some(_)) => Wrote::Yes,
                    Ok(None) => Wrote::Refused,
                    Err(error) => Wrote::Unknown(format!("token-fenced write: {error}")),
                }
            }
            LockKind::Lease => {
                let leases = self.leases.as_ref().expect("the lease stage has leases");
                let lease = held.guard.lease().expect("a lease guard carries its lease");
                let committed = leases
                    .commit_cycle(lease, move |connection| {
                        Box::pin(async move {
                            sqlx::query::<Postgres>(UNFENCED_WORK)
                                .bind(scope)
                                .bind(writer)
                                .bind(token)
                                .bind(cycle_id)
                                .execute(connection)
                                .await
                                .map(drop)
                        })
                    })
                    .await;
                match committed {
                    Ok(()) => Wrote::Yes,
                    Err(CycleError::Lease(leaseproof_protocol::LeaseError::Lost { .. })) => {
                        Wrote::Refused
                    }
                    Err(error) => Wrote::Unknown(format!("fenced commit: {error}")),
                }
            }
        }
    }

    /// Releases `held`, recorded: the end of its holder's belief.
    async fn release(&self, log: &SceneLog, held: Held) {
        held.watcher.abort();
        log.record(
            held.worker,
            EventKind::BeliefEnd {
                scope: self.scope(),
                token: held.token,
                reason: "released".to_string(),
            },
        );
        let op_id = log.invoke(
            held.worker,
            Op::Release {
                scope: self.scope(),
                owner: held.worker.to_string(),
                token: held.token,
            },
        );
        let outcome = match held.guard.release().await {
            Ok(()) => Outcome::Ok {
                result: OpResult::Unlocked {},
            },
            Err(error) => Outcome::Unknown {
                reason: error.to_string(),
            },
        };
        log.complete(held.worker, op_id, outcome);
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

    /// The work log, with each row's commit time on the server's clock.
    async fn work_rows(&self) -> Result<Vec<WorkRow>, SceneError> {
        let rows: Vec<(i64, String, String, i64, i32, Option<i64>)> = sqlx::query_as(
            "SELECT seq, scope, writer, cycle_id, item, \
             (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8 \
             FROM lock_work ORDER BY seq",
        )
        .fetch_all(&self.work)
        .await
        .map_err(scene("read the work log"))?;
        Ok(rows
            .into_iter()
            .map(
                |(seq, scope, owner, cycle_id, item, committed_at_us)| WorkRow {
                    seq: u64::try_from(seq).unwrap_or(0),
                    scope,
                    owner,
                    cycle_id: u64::try_from(cycle_id).unwrap_or(0),
                    item: u32::try_from(item).unwrap_or(0),
                    committed_at_us,
                },
            )
            .collect())
    }

    /// Tries the lock as `worker` for up to `patience`; `None` when refused
    /// throughout. Every attempt is recorded.
    async fn rival(
        &self,
        log: &SceneLog,
        worker: &'static str,
        patience: Duration,
    ) -> Result<Option<Held>, SceneError> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match self.acquire(log, worker).await {
                Ok(Some(held)) => return Ok(Some(held)),
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(None) => return Ok(None),
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
    // The probe interval decides how late a holder learns its lock
    // connection died; any interval longer than the rival's takeover shows
    // the overlap, and a long one keeps the verdict deterministic.
    let redis_url = if fault == Fault::PersistentServerRestart {
        &servers.redis_persistent.url
    } else {
        &servers.redis.url
    };
    let (kind, prefix) = match lock {
        LockKind::Advisory => (ManagerKind::Advisory, "matrix".to_string()),
        LockKind::Redis | LockKind::RedisFenced => {
            (ManagerKind::Redis, format!("matrix-{}", lock.name()))
        }
        LockKind::Lease | LockKind::LeaseUnfenced => {
            (ManagerKind::Lease, format!("matrix-{}", lock.name()))
        }
    };
    let built = build_manager(ManagerSpec {
        redis_url: Some(redis_url.clone()),
        ttl,
        keep_alive: false,
        probe_interval: Some(Duration::from_secs(60)),
        leases: Some(PostgresLeases::new(work.clone())),
        ..ManagerSpec::new(kind, prefix, database_url)
    })
    .await
    .map_err(scene("manager"))?;
    let (manager, leases) = (built.manager, built.leases);
    Ok(Stage {
        lock,
        manager,
        work,
        leases,
        table,
        ttl,
    })
}

/// What the scene showed when the checker found nothing: the reason it holds.
fn why_it_holds(history: &History, report: &CheckReport) -> String {
    let granted = |worker: &str| {
        history.events.iter().any(|event| {
            event.worker == worker && matches!(&event.kind, EventKind::BeliefStart { .. })
        })
    };
    let refused_write = history.events.iter().any(|event| {
        event.worker == "H"
            && matches!(
                &event.kind,
                EventKind::Complete {
                    outcome: Outcome::Fail {
                        reason: FailReason::Stale
                    },
                    ..
                }
            )
    });
    let mut why = if !granted("R") {
        "the rival was refused throughout: the lock was never free".to_string()
    } else if refused_write {
        "R took over; the fence refused H's stale write".to_string()
    } else {
        "R took over after H was dead or knew it had lost the lock; no write of H's landed after R's".to_string()
    };
    for problem in report
        .possible
        .iter()
        .map(ToString::to_string)
        .chain(report.not_judged.iter().cloned())
    {
        why.push_str(&format!(" (not judged: {problem})"));
    }
    why
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
            history: History::default(),
            report: CheckReport::default(),
        });
    }
    let database = servers
        .cluster
        .fresh_database()
        .await
        .map_err(scene("fresh database"))?;
    let stage = stage(servers, lock, fault, &database.url).await?;
    let log = SceneLog::new();
    let holder = stage
        .acquire(&log, "H")
        .await
        .map_err(scene("holder's acquisition"))?
        .ok_or_else(|| SceneError("the holder was refused a free lock".into()))?;
    if !stage.work(&log, &holder).await? {
        return Err(SceneError("the holder's first write was refused".into()));
    }
    let mut holder = Some(holder);
    let patience = Duration::from_millis(TTL_MS * 4);
    match fault {
        Fault::HolderPaused => tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await,
        Fault::LockConnectionKilled => {
            let scope = holder.as_ref().expect("held").guard.scope().clone();
            stage.terminate_advisory_session(&scope).await?;
        }
        Fault::HolderKilled => {
            // A dead process releases nothing, runs no keep-alive and learns
            // nothing more: forget the guard and stop recording for it (the
            // advisory manager's connection closes, as with the process).
            let held = holder.take().expect("held");
            held.watcher.abort();
            if lock == LockKind::Advisory {
                stage.terminate_advisory_session(held.guard.scope()).await?;
            }
            std::mem::forget(held.guard);
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
    let rival = rival_side.rival(&log, "R", patience).await?;
    if let Some(rival) = &rival {
        if !rival_side.work(&log, rival).await? {
            return Err(SceneError("the rival's write was refused".into()));
        }
    }
    if let Some(held) = &holder {
        // The holder carries on with its maintenance, as it believes it may.
        let _ = stage.work(&log, held).await?;
    }
    if let Some(rival) = rival {
        rival_side.release(&log, rival).await;
    }
    if let Some(held) = holder {
        stage.release(&log, held).await;
    }
    let mut history = log.recorder.snapshot();
    history.work_rows = stage.work_rows().await?;
    history.tables_read.work = true;
    let report = check(&history, &CheckConfig::default());
    let verdict = if report.is_ok() {
        Verdict::Holds(why_it_holds(&history, &report))
    } else {
        Verdict::Violated(report.violations.clone())
    };
    Ok(Cell {
        lock,
        fault,
        verdict,
        history,
        report,
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

/// What each cell shows, judged by the checker: `leaseproof verify` fails
/// when a run disagrees, and the README's table is this one.
pub fn expected_verdict(lock: LockKind, fault: Fault) -> Expected {
    use Fault::*;
    use Invariant::{FencedWrites as I3, MutualExclusion as I1, TokenOrder as I2};
    use LockKind::*;
    match (lock, fault) {
        // A session lock survives a pause (no TTL) and dies with its
        // session: the server frees it at once, the holder learns late — no
        // double grant (nothing proves its session still held), but its
        // later write lands inside the rival's hold and after its write.
        (Advisory, HolderPaused | HolderKilled) => Expected::Breaks(&[]),
        (Advisory, LockConnectionKilled | ServerRestart) => Expected::Breaks(&[I3]),
        // Without a keep-alive the Redis guard's *lost* fires at the TTL, as
        // the lease guard's does: the paused holder knew and wrote anyway.
        (Redis, HolderPaused) => Expected::Breaks(&[I3]),
        // A restart without persistence forgets the key while its holder
        // believes — and the token counter, so the rival's token is no
        // larger and the fence lets both through.
        (Redis | RedisFenced, ServerRestart) => Expected::Breaks(&[I1, I2, I3]),
        (Redis | RedisFenced, HolderKilled | PersistentServerRestart) => Expected::Breaks(&[]),
        (RedisFenced, HolderPaused) => Expected::Breaks(&[]),
        (Lease, HolderPaused | HolderKilled | ServerRestart) => Expected::Breaks(&[]),
        // The lease guard's *lost* fires at the TTL (no keep-alive needed):
        // the paused holder knew, wrote anyway, and nothing fenced it.
        (LeaseUnfenced, HolderPaused) => Expected::Breaks(&[I3]),
        (LeaseUnfenced, HolderKilled | ServerRestart) => Expected::Breaks(&[]),
        (_, LockConnectionKilled | PersistentServerRestart) => Expected::NotApplicable,
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
                .map_or("?".to_string(), |cell| cell.verdict.short());
            text.push_str(&format!(" {verdict:<24}"));
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use Invariant::{FencedWrites as I3, MutualExclusion as I1, TokenOrder as I2};

    fn violated(invariants: &[Invariant]) -> Verdict {
        Verdict::Violated(
            invariants
                .iter()
                .map(|&invariant| Violation {
                    invariant,
                    scope: "t".to_string(),
                    events: vec![0],
                    rows: Vec::new(),
                    message: "shown".to_string(),
                })
                .collect(),
        )
    }

    #[test]
    fn an_expected_verdict_matches_exactly_its_own_invariants() {
        let holds = Verdict::Holds("clean".to_string());
        let not_applicable = Verdict::NotApplicable("no session");
        assert!(Expected::Breaks(&[]).matches(&holds));
        assert!(Expected::NotApplicable.matches(&not_applicable));
        assert!(Expected::Breaks(&[I1, I3]).matches(&violated(&[I3, I1, I3])));
        // What verify must refuse: more, fewer or other invariants than
        // expected, a clean verdict for a broken cell and the reverse, and a
        // cell that ran where none applies (or the reverse).
        assert!(!Expected::Breaks(&[I1, I3]).matches(&violated(&[I1])));
        assert!(!Expected::Breaks(&[I1]).matches(&violated(&[I1, I2])));
        assert!(!Expected::Breaks(&[I3]).matches(&violated(&[I1])));
        assert!(!Expected::Breaks(&[I3]).matches(&holds));
        assert!(!Expected::Breaks(&[]).matches(&violated(&[I3])));
        assert!(!Expected::NotApplicable.matches(&holds));
        assert!(!Expected::Breaks(&[]).matches(&not_applicable));
    }

    #[test]
    fn verdicts_and_expectations_print_the_same_short_forms() {
        assert_eq!(violated(&[I3, I1, I2]).short(), "I1+I2+I3");
        assert_eq!(Expected::Breaks(&[I1, I2, I3]).short(), "I1+I2+I3");
        assert_eq!(Verdict::Holds(String::new()).short(), "holds");
        assert_eq!(Expected::Breaks(&[]).short(), "holds");
        assert_eq!(Verdict::NotApplicable("why").short(), "n/a");
        assert_eq!(Expected::NotApplicable.short(), "n/a");
        assert_eq!(Verdict::NotApplicable("why").detail(), "why");
        assert!(violated(&[I1]).detail().contains("shown"));
        assert!(Verdict::Holds("clean".to_string()).invariants().is_empty());
    }
}
