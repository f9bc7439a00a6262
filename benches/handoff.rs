//! Waiters on one lease: how soon the next one holds it, what the wait costs
//! the server, and whether every waiter gets its turn.
//!
//! Goal: measure `PostgresLeases::acquire_wait` as a user runs it — `waiters`
//! tasks of one process, each looping "wait for the scope, hold it for
//! `hold`, release, do `think` of other work" — and report the hand-off
//! latency (a release's reply to the next holder's grant), the server's write
//! transactions per hand-off and the grants each waiter got.
//! Method: every grant is recorded with the instant its wait began, the
//! instant it was granted and the instant its release returned, on this
//! process's monotonic clock. A hand-off is a pair of consecutive tokens
//! whose second holder was already waiting when the first released (so other
//! work does not count as latency). Write transactions are the server's
//! transaction ids assigned during the run (`pg_current_snapshot()`'s
//! `xmax`): a row write or row lock takes one, a read does not.
//! Invariant: grants of the scope never overlap on the common clock (the next
//! grant returns after the previous release's statement was sent), asserted.

use std::time::{Duration, Instant};

use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{LeaseError, Owner, Scope, Ttl};
use sqlx::{Connection as _, PgConnection};

use crate::BenchError;

/// A grant a waiter got, on this process's clock.
#[derive(Debug, Clone, Copy)]
struct Turn {
    waiter: usize,
    token: i64,
    waited_from: Instant,
    granted: Instant,
    release_sent: Instant,
    released: Instant,
}

/// What one run of waiters measured.
#[derive(Debug, Clone, PartialEq)]
pub struct HandOffs {
    /// Concurrent waiters.
    pub waiters: usize,
    /// How long each holder held the lease before releasing it.
    pub hold: Duration,
    /// Other work between a release and the same waiter's next wait.
    pub think: Duration,
    /// Grants, all waiters together.
    pub grants: u64,
    /// Hand-offs timed: consecutive grants whose second holder was waiting
    /// when the first released.
    pub hand_offs: u64,
    /// Median of release reply → next grant.
    pub p50: Duration,
    /// 99th percentile of the same.
    pub p99: Duration,
    /// Server write transactions (transaction ids assigned) per grant: a
    /// release and a grant are two; a loser that writes adds to it.
    pub write_transactions_per_grant: f64,
    /// The fewest grants any waiter got.
    pub grants_per_waiter_min: u64,
    /// The most grants any waiter got.
    pub grants_per_waiter_max: u64,
}

/// Runs `waiters` waiters on one fresh scope of the lease table at `url` for
/// `duration` and measures their hand-offs.
pub async fn hand_offs(
    url: &str,
    waiters: usize,
    duration: Duration,
    hold: Duration,
    think: Duration,
) -> Result<HandOffs, BenchError> {
    assert!(waiters >= 2, "a hand-off needs two waiters");
    let pool_size = u32::try_from(waiters).expect("waiters fit in u32");
    let leases = PostgresLeases::connect(url, pool_size).await?;
    leases.ensure_schema().await?;
    let scope = Scope::new(format!(
        "bench-hand-off-{}-{waiters}-{}",
        std::process::id(),
        crate::rig::wall_time_us()
    ))?;
    let ttl = Ttl::from_millis(60_000)?;

    let transactions_before = transaction_ids_assigned(url).await?;
    let deadline = Instant::now() + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for waiter in 0..waiters {
        let (leases, scope) = (leases.clone(), scope.clone());
        tasks.spawn(async move {
            let owner = Owner::generate();
            let mut turns = Vec::new();
            loop {
                let waited_from = Instant::now();
                let Some(left) = deadline.checked_duration_since(waited_from) else {
                    return Ok::<_, BenchError>(turns);
                };
                let guard = match leases.acquire_wait(&scope, &owner, ttl, left).await {
                    Ok(guard) => guard,
                    Err(LeaseError::Held { .. }) => return Ok(turns),
                    Err(error) => return Err(error.into()),
                };
                let granted = Instant::now();
                let token = guard.lease().token().0;
                tokio::time::sleep(hold).await;
                let release_sent = Instant::now();
                guard.release().await?;
                turns.push(Turn {
                    waiter,
                    token,
                    waited_from,
                    granted,
                    release_sent,
                    released: Instant::now(),
                });
                tokio::time::sleep(think).await;
            }
        });
    }
    let mut turns = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        turns.extend(joined.expect("a waiter panicked")?);
    }
    leases.close().await;
    let write_transactions = transaction_ids_assigned(url).await? - transactions_before;
    Ok(summarise(waiters, hold, think, turns, write_transactions))
}

/// The figures of one run from its turns.
fn summarise(
    waiters: usize,
    hold: Duration,
    think: Duration,
    mut turns: Vec<Turn>,
    write_transactions: i64,
) -> HandOffs {
    turns.sort_by_key(|turn| turn.token);
    let mut latencies_ns = Vec::new();
    for pair in turns.windows(2) {
        let (previous, next) = (pair[0], pair[1]);
        assert!(next.token > previous.token, "tokens increase");
        // One holder at a time: the next grant came back after the previous
        // holder sent its release (a grant before it would be an overlap).
        assert!(
            next.granted >= previous.release_sent,
            "grant {} returned before the release of grant {} was sent",
            next.token,
            previous.token
        );
        if next.token == previous.token + 1 && next.waited_from <= previous.released {
            let latency = next.granted.saturating_duration_since(previous.released);
            latencies_ns.push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        }
    }
    latencies_ns.sort_unstable();
    let mut grants_per_waiter = vec![0_u64; waiters];
    for turn in &turns {
        grants_per_waiter[turn.waiter] += 1;
    }
    let grants = turns.len() as u64;
    HandOffs {
        waiters,
        hold,
        think,
        grants,
        hand_offs: latencies_ns.len() as u64,
        p50: crate::measure::quantile(&latencies_ns, 0.50),
        p99: crate::measure::quantile(&latencies_ns, 0.99),
        write_transactions_per_grant: write_transactions as f64 / grants.max(1) as f64,
        grants_per_waiter_min: grants_per_waiter.iter().copied().min().unwrap_or(0),
        grants_per_waiter_max: grants_per_waiter.iter().copied().max().unwrap_or(0),
    }
}

/// The next transaction id the server will assign: every transaction that
/// wrote a row or locked one took an id below it. Reading it takes none.
async fn transaction_ids_assigned(url: &str) -> Result<i64, BenchError> {
    let mut connection = PgConnection::connect(url).await?;
    let next: i64 =
        sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8")
            .fetch_one(&mut connection)
            .await?;
    let _ = connection.close().await;
    Ok(next)
}
