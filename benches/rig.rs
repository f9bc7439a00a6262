//! The contenders: one connection each, looping one workload's operation.
//!
//! Goal: a load generator the criterion benches and `leaseproof bench` share.
//! Method: [`Rig::prepare`] opens one connection per contender, creates the
//! lease and guarded tables, sets up what the workload contends on (a held
//! lease, one lease per contender, ...) under names unique to this rig, and runs
//! two warm-up operations per contender so every statement is prepared (sqlx
//! caches prepared statements per connection) before anything is timed. Then
//! [`Rig::run_for`] or [`Rig::run_count`] moves each contender into its own
//! tokio task and times every operation.
//! Invariant: a run's outcomes are checked, not just timed — a loser on a held
//! lease that was granted, a renewal or fence that found its lease gone, or a
//! takeover whose grant overlaps its predecessor's is an error, never a figure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leaseproof_postgres::{sql, CycleError, FenceMode, GuardedInsert, PostgresLeases};
use leaseproof_protocol::{FencingToken, Lease, LeaseError, Owner, Scope, ServerTime, Ttl};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection as _, PgConnection, Row as _};

use crate::measure::{Grant, Measurement, Tally};
use crate::workload::{
    candidate_function, Workload, CANDIDATE_FUNCTION_CALL, CANDIDATE_UPDATE_FIRST, HELD_TTL,
    PEER_PK_READ, PEER_UPDATE_WHERE_EXPIRED, PEER_UPSERT_ALWAYS_WRITING, TAKEOVER_LATENCY_TTL,
    TAKEOVER_TTL,
};
use crate::BenchError;

enum Link {
    Connection(PgConnection),
    Library(PostgresLeases),
}

struct Contender {
    workload: Workload,
    link: Link,
    /// The scope this contender acts on (shared or its own).
    scope: Scope,
    /// The owner it acquires as; a new incarnation after each takeover win.
    owner: Owner,
    owner_prefix: String,
    incarnation: u64,
    /// Token of the lease it renews, releases, or writes under.
    token: i64,
    /// The owner of the lease the guarded writes run under.
    writer_owner: Owner,
    /// That lease, for the writes through the library's `commit_cycle`.
    writer_lease: Option<Lease>,
    advisory_key: i64,
    cycle_id: i64,
    grants: Vec<Grant>,
    /// The library value `acquire_on` is called on (its own pool unused).
    calls: Option<PostgresLeases>,
}

/// A prepared set of contenders for one workload, reusable across runs.
#[derive(Debug)]
pub struct Rig {
    workload: Workload,
    contenders_count: usize,
    contenders: tokio::sync::Mutex<Vec<Contender>>,
}

impl std::fmt::Debug for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contender")
            .field("workload", &self.workload)
            .field("scope", &self.scope)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

static RIG_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn wall_time_us() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the wall clock is after 1970");
    i64::try_from(since_epoch.as_micros()).expect("µs since the epoch fit in i64")
}

fn ttl_of(duration: Duration) -> Ttl {
    Ttl::from_duration(duration).expect("the benchmark's TTLs are valid")
}

fn ttl_for(workload: Workload) -> Ttl {
    match workload {
        Workload::AcquireTakeover => ttl_of(TAKEOVER_TTL),
        Workload::TakeoverLatency => ttl_of(TAKEOVER_LATENCY_TTL),
        _ => ttl_of(HELD_TTL),
    }
}

fn name(text: String) -> Result<Scope, BenchError> {
    Scope::new(text).map_err(|error| BenchError::Setup(error.to_string()))
}

fn owner(text: String) -> Result<Owner, BenchError> {
    Owner::new(text).map_err(|error| BenchError::Setup(error.to_string()))
}

async fn create_table(connection: &mut PgConnection, ddl: &str) -> Result<(), BenchError> {
    // Two rigs preparing at once on a fresh database race on `pg_type`
    // (docs/protocol.md); the retry finds the table.
    if sqlx::query(ddl).execute(&mut *connection).await.is_err() {
        sqlx::query(ddl).execute(&mut *connection).await?;
    }
    Ok(())
}

/// The losing statement of a peer library's or a candidate's workload.
fn losing_statement(workload: Workload) -> &'static str {
    match workload {
        Workload::PeerUpdateWhereExpired => PEER_UPDATE_WHERE_EXPIRED,
        Workload::PeerUpsertAlwaysWriting => PEER_UPSERT_ALWAYS_WRITING,
        Workload::AcquireHeldCandidateFunction => CANDIDATE_FUNCTION_CALL,
        Workload::AcquireHeldCandidateUpdateFirst => CANDIDATE_UPDATE_FIRST,
        other => unreachable!("{other} has no losing statement of its own"),
    }
}

/// The single-statement guarded write the bench measures: one row of the
/// guarded table, built by the library's own `GuardedInsert`. `$4` cycle id.
fn guarded_insert_of_one_row() -> &'static GuardedInsert {
    static INSERT: std::sync::OnceLock<GuardedInsert> = std::sync::OnceLock::new();
    INSERT.get_or_init(|| {
        GuardedInsert::new(
            "leaseproof_guarded (scope, owner, token, cycle_id, item, written_at)",
            "lease.scope, lease.owner, lease.token, $4, 0, now()",
        )
    })
}

/// One acquisition statement on a connection; the grant when a row came back.
async fn acquire_on(
    connection: &mut PgConnection,
    statement: &'static str,
    scope: &Scope,
    owner: &Owner,
    ttl: Ttl,
) -> Result<Option<Grant>, sqlx::Error> {
    let row: Option<(i64, i64, i64)> = sqlx::query_as(statement)
        .bind(scope.as_str())
        .bind(owner.as_str())
        .bind(ttl.as_micros())
        .fetch_optional(connection)
        .await?;
    let received_at_us = wall_time_us();
    Ok(row.map(|(token, granted_at_us, expires_at_us)| Grant {
        token,
        granted_at_us,
        expires_at_us,
        received_at_us,
    }))
}

/// Takes `scope` for the run's setup (held for the whole run); the scope
/// must be free.
async fn hold_for_setup(
    connection: &mut PgConnection,
    scope: &Scope,
    owner: &Owner,
) -> Result<Grant, BenchError> {
    acquire_on(connection, sql::ACQUIRE, scope, owner, ttl_of(HELD_TTL))
        .await?
        .ok_or_else(|| BenchError::Setup(format!("{scope} was not free")))
}

impl Contender {
    /// The next guarded write's scope, writer, token and a fresh cycle id.
    fn next_write(&mut self) -> (Scope, Owner, i64, i64) {
        self.cycle_id += 1;
        (
            self.scope.clone(),
            self.writer_owner.clone(),
            self.token,
            self.cycle_id,
        )
    }

    fn connection(&mut self) -> &mut PgConnection {
        match &mut self.link {
            Link::Connection(connection) => connection,
            Link::Library(_) => unreachable!("only the library workload has no connection"),
        }
    }

    /// What `acquire_on` takes, borrowed apart: cloning the library value,
    /// scope and owner every attempt would charge the bench's own work to
    /// the library's row.
    fn acquire_on_parts(&mut self) -> (&PostgresLeases, &mut PgConnection, &Scope, &Owner) {
        let leases = self
            .calls
            .as_ref()
            .expect("the acquire_on workload has its leases");
        let Link::Connection(connection) = &mut self.link else {
            unreachable!("the acquire_on workload has its own connection");
        };
        (leases, connection, &self.scope, &self.owner)
    }

    fn next_incarnation(&mut self) -> Result<(), BenchError> {
        self.incarnation += 1;
        self.owner = owner(format!("{}/{}", self.owner_prefix, self.incarnation))?;
        Ok(())
    }

    /// Records a grant; asserts what every grant must satisfy.
    fn granted(&mut self, grant: Grant) {
        assert!(grant.token >= 1);
        assert!(grant.expires_at_us > grant.granted_at_us);
        self.grants.push(grant);
    }

    /// One operation. Returns whether it was granted a lease.
    async fn operate(&mut self) -> Result<bool, BenchError> {
        let workload = self.workload;
        let ttl = ttl_for(workload);
        match workload {
            Workload::SelectOne => self.select_one().await,
            Workload::AdvisoryXactLock => self.advisory_xact_lock().await,
            Workload::AcquireHeld
            | Workload::AcquireHeldUnguarded
            | Workload::AcquireHeldReadFirst
            | Workload::AcquireTakeover
            | Workload::AcquireUncontended
            | Workload::AcquireUncontendedReadFirst
            | Workload::TakeoverLatency => self.acquire_statement(workload, ttl).await,
            Workload::PeerUpdateWhereExpired | Workload::PeerUpsertAlwaysWriting => {
                self.peer_statement(workload, ttl).await
            }
            Workload::PeerPkRead => self.primary_key_read().await,
            Workload::AcquireHeldViaLibraryOnConnection => {
                self.library_loser_on_connection(ttl).await
            }
            Workload::AcquireUncontendedViaLibrary => self.library_winner_on_connection(ttl).await,
            Workload::AcquireHeldCandidateUpdateFirst | Workload::AcquireHeldCandidateFunction => {
                self.candidate_statement(workload, ttl).await
            }
            Workload::SelectOneViaPool => self.select_one_via_pool().await,
            Workload::GuardedInsertOneStatement => self.guarded_insert_one_statement().await,
            Workload::AcquireHeldViaLibrary
            | Workload::AcquireHeldViaLibraryNoPing
            | Workload::AcquireHeldViaLibraryNoReuse => self.library_acquire(ttl).await,
            Workload::Renew => self.renew(ttl).await,
            Workload::ReleaseReacquire => self.release_reacquire(ttl).await,
            Workload::FencedCommit
            | Workload::FencedCommitShared
            | Workload::FencedCommitInPieces
            | Workload::UnfencedWrite => self.guarded_write(workload).await,
        }
    }

    /// `SELECT 1` on the contender's connection: the round-trip baseline.
    async fn select_one(&mut self) -> Result<bool, BenchError> {
        select_one_on(self.connection()).await
    }

    /// `pg_try_advisory_xact_lock`: the lock baseline.
    async fn advisory_xact_lock(&mut self) -> Result<bool, BenchError> {
        let key = self.advisory_key;
        let _locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(key)
            .fetch_one(self.connection())
            .await?;
        Ok(false)
    }

    /// The acquisition statement sent raw (read first where the workload says), a grant recorded.
    async fn acquire_statement(
        &mut self,
        workload: Workload,
        ttl: Ttl,
    ) -> Result<bool, BenchError> {
        let statement = if workload == Workload::AcquireHeldUnguarded {
            sql::ACQUIRE_UNGUARDED
        } else {
            sql::ACQUIRE
        };
        let (scope, owner) = (self.scope.clone(), self.owner.clone());
        let read_first = matches!(
            workload,
            Workload::AcquireHeldReadFirst | Workload::AcquireUncontendedReadFirst
        );
        if read_first {
            let held = sqlx::query(sql::SELECT_RIVAL)
                .bind(scope.as_str())
                .bind(owner.as_str())
                .fetch_optional(self.connection())
                .await?;
            if held.is_some() {
                return Ok(false);
            }
        }
        let grant = acquire_on(self.connection(), statement, &scope, &owner, ttl).await?;
        let Some(grant) = grant else {
            return Ok(false);
        };
        self.granted(grant);
        if matches!(
            workload,
            Workload::AcquireTakeover | Workload::TakeoverLatency
        ) {
            // The winner "crashes": it never renews, and goes on as a
            // new incarnation, so its next win is a takeover too.
            self.next_incarnation()?;
        }
        Ok(true)
    }

    /// A statement bound to the contender's scope, owner and TTL (µs).
    async fn scope_owner_ttl_statement(
        &mut self,
        statement: &'static str,
        ttl: Ttl,
    ) -> Result<Vec<sqlx::postgres::PgRow>, BenchError> {
        let (scope, owner) = (self.scope.clone(), self.owner.clone());
        Ok(sqlx::query(statement)
            .bind(scope.as_str())
            .bind(owner.as_str())
            .bind(ttl.as_micros())
            .fetch_all(self.connection())
            .await?)
    }

    /// A peer library's losing statement; it must lose on the held scope.
    async fn peer_statement(&mut self, workload: Workload, ttl: Ttl) -> Result<bool, BenchError> {
        let scope = self.scope.clone();
        let rows = self
            .scope_owner_ttl_statement(losing_statement(workload), ttl)
            .await?;
        // The held scope never changes hands: the update matches
        // nothing, the upsert returns "not ours".
        let won = match workload {
            Workload::PeerUpdateWhereExpired => !rows.is_empty(),
            _ => rows.iter().any(|row| row.get::<bool, _>(0)),
        };
        if won {
            return Err(BenchError::Outcome(format!(
                "a peer statement took held {scope}"
            )));
        }
        Ok(false)
    }

    /// The primary-key read of the held row: the limit of a loser.
    async fn primary_key_read(&mut self) -> Result<bool, BenchError> {
        let scope = self.scope.clone();
        let found = sqlx::query(PEER_PK_READ)
            .bind(scope.as_str())
            .fetch_optional(self.connection())
            .await?;
        if found.is_none() {
            return Err(BenchError::Outcome(format!("held {scope} has no row")));
        }
        Ok(false)
    }

    /// The library's loser on the contender's own connection (`acquire_on`).
    async fn library_loser_on_connection(&mut self, ttl: Ttl) -> Result<bool, BenchError> {
        let (leases, connection, scope, owner) = self.acquire_on_parts();
        match leases.acquire_on(connection, scope, owner, ttl).await {
            Ok(_) => Err(BenchError::Outcome(format!("a loser took held {scope}"))),
            Err(LeaseError::Held { .. }) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// The library's winner on its own scope (`acquire_on`).
    async fn library_winner_on_connection(&mut self, ttl: Ttl) -> Result<bool, BenchError> {
        let (leases, connection, scope, owner) = self.acquire_on_parts();
        let lease = leases.acquire_on(connection, scope, owner, ttl).await?;
        self.granted(Grant {
            token: lease.token().0,
            granted_at_us: lease.granted_at().micros,
            expires_at_us: lease.expires_at().micros,
            received_at_us: wall_time_us(),
        });
        Ok(true)
    }

    /// A candidate acquisition, measured, not adopted; it must lose.
    async fn candidate_statement(
        &mut self,
        workload: Workload,
        ttl: Ttl,
    ) -> Result<bool, BenchError> {
        let scope = self.scope.clone();
        let rows = self
            .scope_owner_ttl_statement(losing_statement(workload), ttl)
            .await?;
        if !rows.is_empty() {
            return Err(BenchError::Outcome(format!(
                "{workload} did not lose on held {scope}"
            )));
        }
        Ok(false)
    }

    /// `SELECT 1` through the library's pool: what a checkout costs.
    async fn select_one_via_pool(&mut self) -> Result<bool, BenchError> {
        let Link::Library(leases) = &self.link else {
            unreachable!("the pool workload has a pool");
        };
        select_one_on(leases.pool()).await
    }

    /// The guarded insert in one statement, under the writer's lease.
    async fn guarded_insert_one_statement(&mut self) -> Result<bool, BenchError> {
        let (scope, writer, token, cycle_id) = self.next_write();
        let insert = guarded_insert_of_one_row();
        let written: (i64, i64) = sqlx::query_as(insert.sql())
            .bind(scope.as_str())
            .bind(writer.as_str())
            .bind(token)
            .bind(cycle_id)
            .fetch_one(self.connection())
            .await?;
        if written.0 != 1 {
            return Err(BenchError::Outcome(format!(
                "the guarded insert found {scope} token {token} lost"
            )));
        }
        Ok(false)
    }

    /// `PostgresLeases::acquire` through its pool.
    async fn library_acquire(&mut self, ttl: Ttl) -> Result<bool, BenchError> {
        let Link::Library(leases) = &self.link else {
            unreachable!("the library workload has a pool");
        };
        match leases.acquire(&self.scope, &self.owner, ttl).await {
            Ok(lease) => {
                let grant = Grant {
                    token: lease.token().0,
                    granted_at_us: lease.granted_at().micros,
                    expires_at_us: lease.expires_at().micros,
                    received_at_us: wall_time_us(),
                };
                self.granted(grant);
                Ok(true)
            }
            Err(LeaseError::Held { .. }) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// A renewal of the contender's own lease.
    async fn renew(&mut self, ttl: Ttl) -> Result<bool, BenchError> {
        let (scope, owner, token) = (self.scope.clone(), self.owner.clone(), self.token);
        let row: Option<(i64, i64)> = sqlx::query_as(sql::RENEW)
            .bind(scope.as_str())
            .bind(owner.as_str())
            .bind(token)
            .bind(ttl.as_micros())
            .fetch_optional(self.connection())
            .await?;
        if row.is_none() {
            return Err(BenchError::Outcome(format!(
                "renewal of {scope} token {token} found the lease gone"
            )));
        }
        Ok(false)
    }

    /// A release and the re-acquisition, which gets a greater token.
    async fn release_reacquire(&mut self, ttl: Ttl) -> Result<bool, BenchError> {
        let (scope, owner, token) = (self.scope.clone(), self.owner.clone(), self.token);
        let released: Option<(i64,)> = sqlx::query_as(sql::RELEASE)
            .bind(scope.as_str())
            .bind(owner.as_str())
            .bind(token)
            .fetch_optional(self.connection())
            .await?;
        if released.is_none() {
            return Err(BenchError::Outcome(format!(
                "release of {scope} token {token} found the lease gone"
            )));
        }
        let grant = acquire_on(self.connection(), sql::ACQUIRE, &scope, &owner, ttl)
            .await?
            .ok_or_else(|| {
                BenchError::Outcome(format!("re-acquiring released {scope} was refused"))
            })?;
        assert!(grant.token > token, "a new grant gets a greater token");
        self.token = grant.token;
        self.granted(grant);
        Ok(true)
    }

    /// A guarded write: fenced (`FOR UPDATE`, `FOR SHARE`) or not.
    async fn guarded_write(&mut self, workload: Workload) -> Result<bool, BenchError> {
        let (scope, writer, token, cycle_id) = self.next_write();
        if workload != Workload::UnfencedWrite {
            // What users run: the library's commit cycle on its pool, in
            // the fence mode the rig set up.
            let Link::Library(leases) = &self.link else {
                unreachable!("the fenced workloads have the library's pool");
            };
            let lease = self
                .writer_lease
                .as_ref()
                .expect("the fenced workloads hold a lease");
            if workload == Workload::FencedCommitInPieces {
                let mut transaction = leases.begin().await?;
                if leases.fence(&mut transaction, lease).await?.is_none() {
                    return Err(BenchError::Outcome(format!(
                        "the fence found {} token {token} lost",
                        lease.scope()
                    )));
                }
                insert_guarded(transaction.connection(), &scope, &writer, token, cycle_id).await?;
                transaction.commit().await?;
                return Ok(false);
            }
            return match leases
                .commit_cycle(lease, move |connection| {
                    Box::pin(async move {
                        insert_guarded(connection, &scope, &writer, token, cycle_id).await
                    })
                })
                .await
            {
                Ok(()) => Ok(false),
                Err(CycleError::Lease(LeaseError::Lost { .. })) => Err(BenchError::Outcome(
                    format!("the fence found {} token {token} lost", lease.scope()),
                )),
                Err(CycleError::Lease(error)) => Err(error.into()),
                Err(CycleError::Work(error)) => Err(error.into()),
            };
        }
        let mut transaction = self.connection().begin().await?;
        insert_guarded(&mut transaction, &scope, &writer, token, cycle_id).await?;
        transaction.commit().await?;
        Ok(false)
    }
}

/// One guarded row, as the fenced and unfenced writes both send it.
async fn insert_guarded(
    connection: &mut PgConnection,
    scope: &Scope,
    writer: &Owner,
    token: i64,
    cycle_id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql::INSERT_GUARDED)
        .bind(scope.as_str())
        .bind(writer.as_str())
        .bind(token)
        .bind(cycle_id)
        .bind(1_i32)
        .execute(connection)
        .await
        .map(|_| ())
}

/// When a contender stops.
#[derive(Debug, Clone)]
enum Stop {
    /// For this long from the run's own start (the instant its elapsed time
    /// is measured from, so a run never reports less than it was asked for).
    For(Duration),
    Deadline(Instant),
    Operations(u64),
    /// When all contenders together have been granted this many leases.
    Grants(u64, Arc<AtomicU64>),
}

async fn run_contender(
    mut contender: Contender,
    stop: Stop,
) -> (Contender, Result<Tally, BenchError>) {
    let mut tally = Tally::default();
    loop {
        match &stop {
            Stop::Deadline(deadline) if Instant::now() >= *deadline => break,
            Stop::Operations(operations) if tally.operations >= *operations => break,
            Stop::Grants(grants, seen) if seen.load(Ordering::SeqCst) >= *grants => break,
            Stop::For(_) => unreachable!("a run turns its length into a deadline when it starts"),
            _ => {}
        }
        let started = Instant::now();
        let granted = match contender.operate().await {
            Ok(granted) => granted,
            Err(error) => return (contender, Err(error)),
        };
        tally.record(started.elapsed(), granted);
        if let (Stop::Grants(_, seen), true) = (&stop, granted) {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    }
    (contender, Ok(tally))
}

impl Rig {
    /// Opens `contenders` connections to `url` (a pool of that size for
    /// [`Workload::AcquireHeldViaLibrary`]), creates the tables, sets up what
    /// the workload contends on, and warms every contender up.
    pub async fn prepare(
        url: &str,
        workload: Workload,
        contenders: usize,
    ) -> Result<Rig, BenchError> {
        assert!(contenders >= 1, "a run needs at least one contender");
        let run_id = format!(
            "{pid}-{counter}-{nanos}",
            pid = std::process::id(),
            counter = RIG_COUNTER.fetch_add(1, Ordering::Relaxed),
            nanos = wall_time_us()
        );
        let mut setup = PgConnection::connect(url).await?;
        create_table(&mut setup, sql::CREATE_LEASES).await?;
        create_table(&mut setup, sql::CREATE_GUARDED).await?;
        if workload == Workload::AcquireHeldCandidateFunction {
            sqlx::query(&candidate_function())
                .execute(&mut setup)
                .await?;
        }

        let shared_scope = name(format!("bench/{run_id}/shared"))?;
        let holder = owner(format!("bench/{run_id}/holder"))?;
        let mut holder_token = 0;
        let mut writer_lease = None;
        if workload.is_held_acquisition()
            || matches!(
                workload,
                Workload::FencedCommit
                    | Workload::FencedCommitShared
                    | Workload::FencedCommitInPieces
                    | Workload::GuardedInsertOneStatement
                    | Workload::UnfencedWrite
                    | Workload::PeerUpdateWhereExpired
                    | Workload::PeerUpsertAlwaysWriting
                    | Workload::PeerPkRead
            )
        {
            let grant = hold_for_setup(&mut setup, &shared_scope, &holder).await?;
            holder_token = grant.token;
            writer_lease = Some(Lease::from_server_reply(
                shared_scope.clone(),
                holder.clone(),
                FencingToken(grant.token),
                ServerTime::from_micros(grant.granted_at_us),
                ServerTime::from_micros(grant.expires_at_us),
            ));
        }
        let library = if matches!(
            workload,
            Workload::AcquireHeldViaLibrary
                | Workload::AcquireHeldViaLibraryNoPing
                | Workload::AcquireHeldViaLibraryNoReuse
                | Workload::SelectOneViaPool
                | Workload::FencedCommit
                | Workload::FencedCommitShared
                | Workload::FencedCommitInPieces
        ) {
            // The no-ping pool is the one users get (`pool_options`); the
            // other is sqlx's default, which pings on every checkout.
            let options = if workload == Workload::AcquireHeldViaLibrary {
                PgPoolOptions::new()
            } else {
                PostgresLeases::pool_options()
            };
            let pool = options
                .max_connections(u32::try_from(contenders).expect("contenders fit in u32"))
                .min_connections(u32::try_from(contenders).expect("contenders fit in u32"))
                .connect(url)
                .await?;
            let leases = PostgresLeases::new(pool);
            Some(match workload {
                Workload::AcquireHeldViaLibraryNoReuse => {
                    leases.with_connection_reuse(Duration::ZERO)
                }
                Workload::FencedCommitShared => leases.with_fence_mode(FenceMode::Shared),
                _ => leases,
            })
        } else {
            None
        };

        let calls = if matches!(
            workload,
            Workload::AcquireHeldViaLibraryOnConnection | Workload::AcquireUncontendedViaLibrary
        ) {
            // Never connects: every call runs on the contender's connection.
            Some(PostgresLeases::new(
                PostgresLeases::pool_options().connect_lazy(url)?,
            ))
        } else {
            None
        };
        let mut prepared = Vec::with_capacity(contenders);
        for index in 0..contenders {
            let own_scope = matches!(
                workload,
                Workload::AcquireUncontended
                    | Workload::AcquireUncontendedReadFirst
                    | Workload::AcquireUncontendedViaLibrary
                    | Workload::Renew
                    | Workload::ReleaseReacquire
            );
            let scope = if own_scope {
                name(format!("bench/{run_id}/c{index}"))?
            } else {
                shared_scope.clone()
            };
            let owner_prefix = format!("bench/{run_id}/c{index}");
            let link = match &library {
                Some(leases) => Link::Library(leases.clone()),
                None => Link::Connection(PgConnection::connect(url).await?),
            };
            let mut contender = Contender {
                workload,
                link,
                scope,
                owner: owner(format!("{owner_prefix}/0"))?,
                owner_prefix,
                incarnation: 0,
                token: holder_token,
                writer_owner: holder.clone(),
                writer_lease: writer_lease.clone(),
                advisory_key: 0x6c65_6173_6570, // one key: all contenders contend on it
                cycle_id: i64::try_from(index).expect("index fits") * 1_000_000_000,
                grants: Vec::new(),
                calls: calls.clone(),
            };
            if matches!(workload, Workload::Renew | Workload::ReleaseReacquire) {
                let (scope, owner) = (contender.scope.clone(), contender.owner.clone());
                let grant = hold_for_setup(contender.connection(), &scope, &owner).await?;
                contender.token = grant.token;
            }
            prepared.push(contender);
        }
        let _ = setup.close().await;

        let rig = Rig {
            workload,
            contenders_count: contenders,
            contenders: tokio::sync::Mutex::new(prepared),
        };
        // Warm-up: prepares every statement on every connection.
        rig.run(Stop::Operations(2)).await?;
        Ok(rig)
    }

    /// The workload this rig runs.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// How many contenders run concurrently.
    pub fn contenders(&self) -> usize {
        self.contenders_count
    }

    /// Every contender loops its operation until `duration` has passed.
    pub async fn run_for(&self, duration: Duration) -> Result<Measurement, BenchError> {
        self.run(Stop::For(duration)).await
    }

    /// `operations` operations in total, spread evenly over the contenders,
    /// all running concurrently; the wall time they took (criterion's
    /// `iter_custom`).
    pub async fn run_count(&self, operations: u64) -> Result<Duration, BenchError> {
        let per_contender = operations.div_ceil(self.contenders_count as u64).max(1);
        Ok(self.run(Stop::Operations(per_contender)).await?.elapsed)
    }

    /// Runs until the contenders together were granted `grants` leases (for
    /// the takeover workloads; others would never stop).
    pub async fn run_until_grants(&self, grants: u64) -> Result<Measurement, BenchError> {
        assert!(
            matches!(
                self.workload,
                Workload::AcquireTakeover | Workload::TakeoverLatency
            ),
            "only takeover workloads keep being granted"
        );
        self.run(Stop::Grants(grants, Arc::new(AtomicU64::new(0))))
            .await
    }

    async fn run(&self, stop: Stop) -> Result<Measurement, BenchError> {
        let mut contenders = self.contenders.lock().await;
        let started = Instant::now();
        let stop = match stop {
            Stop::For(duration) => Stop::Deadline(started + duration),
            other => other,
        };
        let tasks: Vec<_> = contenders
            .drain(..)
            .map(|contender| tokio::spawn(run_contender(contender, stop.clone())))
            .collect();
        let mut tallies = Vec::with_capacity(tasks.len());
        let mut first_error = None;
        for task in tasks {
            let (contender, tally) = task.await.expect("a contender task panicked");
            contenders.push(contender);
            match tally {
                Ok(tally) => tallies.push(tally),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let elapsed = started.elapsed();
        if let Some(error) = first_error {
            return Err(error);
        }
        let grants: Vec<Grant> = contenders
            .iter_mut()
            .flat_map(|contender| contender.grants.drain(..))
            .collect();
        let measurement = Measurement::from_run(
            self.workload,
            self.contenders_count,
            elapsed,
            tallies,
            grants,
        );
        if self.workload.is_held_acquisition() && measurement.granted != 0 {
            return Err(BenchError::Outcome(format!(
                "{}: {} losers on a held lease were granted it",
                self.workload, measurement.granted
            )));
        }
        Ok(measurement)
    }

    /// Closes every connection (politely, so the server counts their
    /// statistics at once).
    pub async fn close(self) {
        for contender in self.contenders.into_inner() {
            match contender.link {
                Link::Connection(connection) => {
                    let _ = connection.close().await;
                }
                Link::Library(leases) => leases.pool().close().await,
            }
        }
    }
}

/// `SELECT 1` on `executor`, its answer checked; grants nothing.
async fn select_one_on<'e, E>(executor: E) -> Result<bool, BenchError>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(executor).await?;
    assert_eq!(one, 1);
    Ok(false)
}
