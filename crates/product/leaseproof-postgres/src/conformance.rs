//! Conformance checks of the reference lease on a real server, shared by the
//! integration tests and `leaseproof verify`.
//!
//! Each check takes the URL of a fresh, empty database and returns what it
//! observed; the caller decides what must hold (the tests assert, the CLI
//! reports). Keeping them here means the CLI's `verify` runs exactly the
//! checks `cargo test` runs, not a second copy.

use std::time::Duration;

use leaseproof_protocol::semantics::{Acquisition, LeaseRow, LeaseTable};
use leaseproof_protocol::{FencingToken, Lease, LeaseError, Owner, Scope, ServerTime, Ttl};
use rand::{Rng, SeedableRng};
use sqlx::{Connection, PgConnection};

use crate::statements::Arg;
use crate::{sql, PostgresLeases, Statements};

/// A check could not run (connection, setup) or observed a disagreement.
#[derive(Debug)]
pub struct ConformanceError(pub String);

impl std::fmt::Display for ConformanceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConformanceError {}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> ConformanceError + '_ {
    move |error| ConformanceError(format!("{what}: {error}"))
}

async fn leases_on(url: &str, connections: u32) -> Result<PostgresLeases, ConformanceError> {
    // The pool users get: the conformance checks drive what ships.
    let pool = PostgresLeases::pool_options()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(setup("connect"))?;
    Ok(PostgresLeases::new(pool))
}

/// What the differential run exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DifferentialReport {
    /// Steps run.
    pub steps: u32,
    /// Grants (both forms agreed on each).
    pub grants: u32,
    /// Refused acquisitions.
    pub refusals: u32,
    /// Grants that took over an expired row.
    pub takeovers: u32,
    /// Refusals the read-first check made on its own (naming the holder the
    /// semantics name).
    pub read_refusals: u32,
}

type LeaseTimes = Option<crate::leases::GrantRow>;

async fn row_sql(
    connection: &mut PgConnection,
    scope: &Scope,
) -> Result<Option<LeaseRow>, ConformanceError> {
    let row: Option<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT owner, token, (extract(epoch FROM granted_at) * 1000000)::int8, \
         (extract(epoch FROM expires_at) * 1000000)::int8 FROM leaseproof_leases WHERE scope = $1",
    )
    .bind(scope.as_str())
    .fetch_optional(connection)
    .await
    .map_err(setup("read row"))?;
    row.map(|(owner, token, granted_at, expires_at)| {
        Ok(LeaseRow {
            owner: Owner::new(owner).map_err(setup("owner"))?,
            token: FencingToken(token),
            granted_at: ServerTime::from_micros(granted_at),
            expires_at: ServerTime::from_micros(expires_at),
        })
    })
    .transpose()
}

fn model_times(acquisition: &Acquisition) -> LeaseTimes {
    match acquisition {
        Acquisition::Granted { lease, .. } => Some((
            lease.token().0,
            lease.granted_at().micros,
            lease.expires_at().micros,
        )),
        Acquisition::Held { .. } => None,
    }
}

fn agree<T: PartialEq + std::fmt::Debug>(
    sql: T,
    model: T,
    what: &str,
    context: &str,
) -> Result<(), ConformanceError> {
    if sql == model {
        Ok(())
    } else {
        Err(ConformanceError(format!(
            "{what} disagrees at {context}: sql {sql:?}, semantics {model:?}"
        )))
    }
}

/// The SQL against the executable semantics, case by case.
///
/// A seeded random script of acquire / renew / release / holds over two scopes
/// and three owners, TTLs of 1–20 ms and sleeps so expiry really happens. Each
/// step runs inside `BEGIN; SELECT now(); …; COMMIT`, so the statement's
/// `now()` is known exactly and the same step is applied to
/// [`LeaseTable`] with that time. Both acquisition forms (the guarded single
/// statement and the seed's bare upsert) run on the same state under a
/// savepoint, after the read-first check ([`sql::SELECT_RIVAL`]), which must
/// refuse exactly when the semantics refuse and name the same holder, token
/// and end. Every result, and every row after every step, must agree.
pub async fn differential(
    url: &str,
    seed: u64,
    steps: u32,
) -> Result<DifferentialReport, ConformanceError> {
    differential_with(url, seed, steps, Statements::Prepared).await
}

/// [`differential`] with the library's statements sent as `statements`
/// says: the inline form must decide every case as the prepared one does.
pub async fn differential_with(
    url: &str,
    seed: u64,
    steps: u32,
    statements: Statements,
) -> Result<DifferentialReport, ConformanceError> {
    let leases = leases_on(url, 1).await?.with_statements(statements);
    leases
        .ensure_schema()
        .await
        .map_err(setup("ensure_schema"))?;
    let mut connection = PgConnection::connect(url).await.map_err(setup("connect"))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let scopes: Vec<Scope> = (0..2)
        .map(|i| Scope::new(format!("scope-{i}")).expect("valid"))
        .collect();
    let owners: Vec<Owner> = (0..3)
        .map(|i| Owner::new(format!("owner-{i}")).expect("valid"))
        .collect();
    let mut model = LeaseTable::new();
    let mut leases_seen: Vec<Lease> = Vec::new();
    let mut report = DifferentialReport {
        steps,
        ..DifferentialReport::default()
    };

    for step in 0..steps {
        let scope = &scopes[rng.gen_range(0..scopes.len())];
        let owner = &owners[rng.gen_range(0..owners.len())];
        let ttl = Ttl::from_micros(rng.gen_range(1_000..20_000)).expect("within bounds");
        let mut transaction = connection.begin().await.map_err(setup("begin"))?;
        let now: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000000)::int8")
            .fetch_one(&mut *transaction)
            .await
            .map_err(setup("now"))?;
        let now = ServerTime::from_micros(now);
        let choice = rng.gen_range(0..10);
        let context =
            format!("step {step} (seed {seed}), choice {choice}, {scope}, {owner}, now {now}");
        if choice < 5 || leases_seen.is_empty() {
            let rival =
                crate::leases::rival_row(&mut transaction, leases.statements(), scope, owner)
                    .await
                    .map_err(setup("read first"))?;
            sqlx::query("SAVEPOINT unguarded")
                .execute(&mut *transaction)
                .await
                .map_err(setup("savepoint"))?;
            let unguarded = crate::leases::acquire_row(
                &mut transaction,
                leases.statements(),
                sql::ACQUIRE_UNGUARDED,
                scope,
                owner,
                ttl,
            )
            .await
            .map_err(setup("acquire"))?;
            sqlx::query("ROLLBACK TO SAVEPOINT unguarded")
                .execute(&mut *transaction)
                .await
                .map_err(setup("rollback"))?;
            let guarded = crate::leases::acquire_row(
                &mut transaction,
                leases.statements(),
                sql::ACQUIRE,
                scope,
                owner,
                ttl,
            )
            .await
            .map_err(setup("acquire"))?;
            let token_before = model.row(scope).map(|row| row.token);
            let expected = model.acquire(scope, owner, ttl, now);
            agree(guarded, model_times(&expected), "guarded acquire", &context)?;
            let refused_by_semantics = match &expected {
                Acquisition::Held {
                    holder,
                    token,
                    expires_at,
                } => Some((holder.as_str().to_owned(), token.0, expires_at.micros)),
                Acquisition::Granted { .. } => None,
            };
            agree(
                rival.clone(),
                refused_by_semantics,
                "read-first check",
                &context,
            )?;
            if rival.is_some() {
                report.read_refusals += 1;
            }
            agree(
                unguarded,
                guarded,
                "bare upsert vs guarded acquire",
                &context,
            )?;
            match expected {
                Acquisition::Granted { lease, .. } => {
                    report.grants += 1;
                    if token_before.is_some_and(|token| token < lease.token()) {
                        report.takeovers += 1;
                    }
                    leases_seen.push(lease);
                }
                Acquisition::Held { .. } => report.refusals += 1,
            }
        } else {
            let lease = leases_seen[rng.gen_range(0..leases_seen.len())].clone();
            // As the library sends them (prepared or inline).
            let statements = leases.statements();
            let args = [
                Arg::Text(lease.scope().as_str()),
                Arg::Text(lease.owner().as_str()),
                Arg::Int8(lease.token().0),
                Arg::Int8(ttl.as_micros()),
            ];
            match choice {
                5 | 6 => {
                    let renewed: Option<(i64, i64)> = statements
                        .fetch_optional(&mut transaction, sql::RENEW, &args)
                        .await
                        .map_err(setup("statement"))?;
                    let expected = model
                        .renew(&lease, ttl, now)
                        .map(|l| (l.granted_at().micros, l.expires_at().micros));
                    agree(renewed, expected, "renew", &context)?;
                }
                7 => {
                    let released: Option<(i64,)> = statements
                        .fetch_optional(&mut transaction, sql::RELEASE, &args[..3])
                        .await
                        .map_err(setup("statement"))?;
                    let released = released.map(|(at_us,)| at_us);
                    let expected = model.release(&lease, now).map(|l| l.expires_at().micros);
                    agree(released, expected, "release", &context)?;
                }
                _ => {
                    let (held,): (bool,) = statements
                        .fetch_one(&mut transaction, sql::HOLDS, &args[..3])
                        .await
                        .map_err(setup("statement"))?;
                    agree(held, model.holds(&lease, now), "holds", &context)?;
                }
            }
        }
        for scope in &scopes {
            agree(
                row_sql(&mut transaction, scope).await?.as_ref(),
                model.row(scope),
                &format!("row of {scope}"),
                &context,
            )?;
        }
        transaction.commit().await.map_err(setup("commit"))?;
        tokio_sleep_micros(rng.gen_range(0..3_000)).await;
    }
    Ok(report)
}

async fn tokio_sleep_micros(micros: u64) {
    // sqlx's runtime is tokio here; its timer is the one to wait on.
    tokio::time::sleep(Duration::from_micros(micros)).await;
}

/// Waits until some session other than `observer`'s is blocked on a lock.
async fn wait_for_blocked_session(observer: &mut PgConnection) -> Result<(), ConformanceError> {
    for _ in 0..500 {
        let blocked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut *observer)
        .await
        .map_err(setup("pg_stat_activity"))?;
        if blocked > 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(ConformanceError(
        "the second session never blocked on the first one's catalog insert".into(),
    ))
}

/// The concurrent `CREATE TABLE IF NOT EXISTS` race, deterministically: session
/// A holds the DDL open in a transaction, session B runs `ensure_schema` (with
/// its retry when `retry`, one attempt otherwise) and blocks on the `pg_type`
/// unique index; A commits. Returns B's result and the lease value B used.
/// `url` must name a database without the lease table.
pub async fn schema_race(
    url: &str,
    retry: bool,
) -> Result<(Result<(), LeaseError>, PostgresLeases), ConformanceError> {
    let leases = leases_on(url, 2).await?;
    let mut session_a = PgConnection::connect(url).await.map_err(setup("connect"))?;
    let mut observer = PgConnection::connect(url).await.map_err(setup("connect"))?;
    let mut transaction = session_a.begin().await.map_err(setup("begin"))?;
    sqlx::query(sql::CREATE_LEASES)
        .execute(&mut *transaction)
        .await
        .map_err(setup("session A's DDL"))?;
    let session_b = {
        let leases = leases.clone();
        tokio::spawn(async move {
            if retry {
                leases.ensure_schema().await
            } else {
                leases.ensure_schema_once().await
            }
        })
    };
    wait_for_blocked_session(&mut observer).await?;
    transaction
        .commit()
        .await
        .map_err(setup("session A's commit"))?;
    let result = tokio::time::timeout(Duration::from_secs(10), session_b)
        .await
        .map_err(setup("session B"))?
        .map_err(setup("session B's task"))?;
    Ok((result, leases))
}

/// The fence a conformance check holds open: one of the library's, or a raw
/// lock clause as a negative control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceUnderTest<'a> {
    /// [`PostgresLeases::fence`] under this mode: the library's own code.
    Library(crate::FenceMode),
    /// [`PostgresLeases::commit_cycle`] under this mode, its work held
    /// open: the fence as the cycle sends it (with `BEGIN`, prepared once
    /// per session), not as the public pieces do.
    Cycle(crate::FenceMode),
    /// [`PostgresLeases::guarded_insert_in`]: the single-statement guarded
    /// write, held open inside a transaction so the check can watch a
    /// takeover wait for its commit.
    SingleStatement,
    /// The fence statement with its `FOR UPDATE` replaced by this clause
    /// (`FOR KEY SHARE`, …), run as raw SQL: a negative control.
    Clause(&'a str),
}

impl std::fmt::Display for FenceUnderTest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FenceUnderTest::Library(crate::FenceMode::Exclusive) => f.write_str("FOR UPDATE fence"),
            FenceUnderTest::Library(crate::FenceMode::Shared) => f.write_str("FOR SHARE fence"),
            FenceUnderTest::Cycle(crate::FenceMode::Exclusive) => {
                f.write_str("commit cycle's FOR UPDATE fence")
            }
            FenceUnderTest::Cycle(crate::FenceMode::Shared) => {
                f.write_str("commit cycle's FOR SHARE fence")
            }
            FenceUnderTest::SingleStatement => f.write_str("single-statement guarded insert"),
            FenceUnderTest::Clause(clause) => write!(f, "raw {clause} fence"),
        }
    }
}

/// Fences a live lease with `fence`, lets it expire with the transaction
/// still open, starts a rival's takeover, and returns whether the takeover
/// finished *before* the fenced transaction committed (it must not), after
/// checking the takeover then succeeds with the next token.
pub async fn takeover_finishes_before_commit(
    url: &str,
    fence: FenceUnderTest<'_>,
) -> Result<bool, ConformanceError> {
    let mode = match fence {
        FenceUnderTest::Library(mode) | FenceUnderTest::Cycle(mode) => mode,
        _ => crate::FenceMode::Exclusive,
    };
    let leases = leases_on(url, 4).await?.with_fence_mode(mode);
    leases
        .ensure_schema()
        .await
        .map_err(setup("ensure_schema"))?;
    let scope = Scope::new("job").expect("valid");
    let ttl_short = Ttl::from_millis(300).expect("valid");
    let holder = leases
        .acquire_lease(&scope, &Owner::generate(), ttl_short)
        .await
        .map_err(setup("acquire"))?;
    if let FenceUnderTest::Cycle(_) = fence {
        return takeover_during_cycle(leases).await;
    }
    if fence == FenceUnderTest::SingleStatement {
        sqlx::query("CREATE TABLE IF NOT EXISTS conformance_writes (token bigint NOT NULL)")
            .execute(leases.pool())
            .await
            .map_err(setup("create conformance_writes"))?;
    }
    let mut transaction = leases.begin().await.map_err(setup("begin"))?;
    // The library's fences run through its own code, so a bug planted in
    // them (a weaker mode, SKIP LOCKED, another connection) is caught here;
    // a raw clause is a negative control.
    let fenced: Option<i64> = match fence {
        FenceUnderTest::Library(_) => leases
            .fence(&mut transaction, &holder)
            .await
            .map_err(setup("fence"))?
            .map(|fenced_at| fenced_at.micros),
        FenceUnderTest::SingleStatement => {
            let insert = crate::GuardedInsert::new("conformance_writes (token)", "lease.token");
            match leases
                .guarded_insert_in(&mut transaction, &holder, &insert, |query| query)
                .await
            {
                Ok(written) => Some(written.fenced_at.micros),
                Err(LeaseError::Lost { .. }) => None,
                Err(error) => return Err(setup("guarded insert")(error)),
            }
        }
        FenceUnderTest::Cycle(_) => unreachable!("checked above"),
        FenceUnderTest::Clause(lock_clause) => {
            let statement = sql::HOLD_FOR_UPDATE.replace("FOR UPDATE", lock_clause);
            sqlx::query_scalar(&statement)
                .bind(scope.as_str())
                .bind(holder.owner().as_str())
                .bind(holder.token().0)
                .fetch_optional(transaction.connection())
                .await
                .map_err(setup("fence"))?
        }
    };
    if fenced.is_none() {
        return Err(ConformanceError("the fence refused a live lease".into()));
    }
    tokio::time::sleep(Duration::from_millis(400)).await; // past expiry, transaction open
    let takeover = spawn_takeover(&leases, &scope);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let finished_before_commit = takeover.is_finished();
    transaction.commit().await.map_err(setup("commit"))?;
    took_over(takeover, &holder).await?;
    Ok(finished_before_commit)
}

/// [`takeover_finishes_before_commit`] through `commit_cycle`: the cycle's
/// work waits past the lease's expiry while a rival's takeover starts, and
/// reports whether that takeover finished before the work ended (the cycle
/// commits only after). The cycle must then have committed, and the
/// takeover won the next token.
async fn takeover_during_cycle(leases: PostgresLeases) -> Result<bool, ConformanceError> {
    // A TTL with room for a loaded machine's start-up, and one cycle first
    // so the watched one runs the fence as a session runs it from its
    // second cycle on (prepared), not the first cycle's prepare-and-retry.
    let ttl = Duration::from_millis(1_000);
    let holder = leases
        .acquire_lease(
            &Scope::new("cycle").expect("valid"),
            &Owner::generate(),
            Ttl::from_millis(1_000).expect("valid"),
        )
        .await
        .map_err(setup("acquire"))?;
    leases
        .commit_cycle(&holder, |_connection| {
            Box::pin(async { Ok::<(), sqlx::Error>(()) })
        })
        .await
        .map_err(setup("first cycle"))?;
    let (fenced_tx, fenced_rx) = tokio::sync::oneshot::channel::<()>();
    let (verdict_tx, verdict_rx) = tokio::sync::oneshot::channel::<()>();
    let cycle = {
        let (leases, holder) = (leases.clone(), holder.clone());
        tokio::spawn(async move {
            leases
                .commit_cycle(&holder, move |_connection| {
                    Box::pin(async move {
                        let _ = fenced_tx.send(());
                        // Held open until the takeover has been watched.
                        let _ = verdict_rx.await;
                        Ok::<(), sqlx::Error>(())
                    })
                })
                .await
        })
    };
    fenced_rx
        .await
        .map_err(|_| ConformanceError("the cycle's fence refused a live lease".into()))?;
    tokio::time::sleep(ttl + Duration::from_millis(100)).await; // past expiry, cycle open
    let takeover = spawn_takeover(&leases, holder.scope());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let finished_before_commit = takeover.is_finished();
    let _ = verdict_tx.send(());
    cycle
        .await
        .map_err(setup("cycle task"))?
        .map_err(|error| ConformanceError(format!("the fenced cycle did not commit: {error}")))?;
    took_over(takeover, &holder).await?;
    Ok(finished_before_commit)
}

/// A rival's takeover of `scope`, started now.
fn spawn_takeover(
    leases: &PostgresLeases,
    scope: &Scope,
) -> tokio::task::JoinHandle<Result<crate::LeaseGuard, LeaseError>> {
    let (leases, scope) = (leases.clone(), scope.clone());
    tokio::spawn(async move {
        leases
            .acquire(
                &scope,
                &Owner::generate(),
                Ttl::from_millis(60_000).expect("valid"),
            )
            .await
    })
}

/// The takeover after a fenced commit won the grant right after `holder`'s.
async fn took_over(
    takeover: tokio::task::JoinHandle<Result<crate::LeaseGuard, LeaseError>>,
    holder: &Lease,
) -> Result<(), ConformanceError> {
    let rival = takeover
        .await
        .map_err(setup("takeover task"))?
        .map_err(setup("takeover"))?;
    if rival.token() != holder.token().next() {
        return Err(ConformanceError(format!(
            "takeover got token {} after {}",
            rival.token(),
            holder.token()
        )));
    }
    Ok(())
}
