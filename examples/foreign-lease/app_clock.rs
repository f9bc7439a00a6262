//! A lock in the style of ShedLock's JDBC provider, reproduced from its public
//! statements: one row per lock name, taken by
//! `UPDATE … SET lock_until = :now + ttl, locked_at = :now, locked_by = :me
//! WHERE name = :name AND lock_until <= :now` (after an `INSERT` for a name
//! not seen yet), where `:now` is **the application's clock**, and released by
//! `UPDATE … SET lock_until = :now WHERE name = :name`. It has no fence. Its
//! documentation asks for synchronised clocks; this is what happens when they
//! are not.
//!
//! One addition, so the harness can attribute the guarded rows: a `token`
//! column that grows with every grant. Nothing checks it.
//!
//! Its grant times are its clients' clocks, so it tells the worker so
//! ([`LeasePort::reports_server_times`] is `false`): the worker records its
//! grants as locks with a promised lifetime (the TTL), and the checker judges
//! them in real time instead of comparing timestamps from different clocks.

use leaseproof_postgres::errors::after_send;
use leaseproof_postgres::GuardedTable;
use leaseproof_protocol::semantics::GuardedRow;
use leaseproof_protocol::{
    CommitReceipt, CycleFaults, Fencing, FencingToken, GuardedCycle, Lease, LeaseError, LeasePort,
    Owner, Scope, ServerTime, Ttl,
};
use leaseproof_races::clock::{ClockSkew, RunClock, SkewedClock};
use leaseproof_races::race::RaceSubject;
use sqlx::PgPool;

/// The lock over one pool, reading time from one client's clock.
#[derive(Clone, Debug)]
pub struct AppClockLock {
    pool: PgPool,
    clock: SkewedClock,
}

const CREATE: &str = "\
CREATE TABLE IF NOT EXISTS app_clock_lock (
    name       text        PRIMARY KEY,
    lock_until timestamptz NOT NULL,
    locked_at  timestamptz NOT NULL,
    locked_by  text        NOT NULL,
    token      bigint      NOT NULL
)";

/// `'epoch' + $n µs`: a client timestamp bound as an integer.
macro_rules! at {
    ($parameter:literal) => {
        concat!(
            "('epoch'::timestamptz + ",
            $parameter,
            " * interval '1 microsecond')"
        )
    };
}

impl AppClockLock {
    /// The lock over `pool`, on the unskewed clock of a run starting now.
    pub fn new(pool: PgPool) -> AppClockLock {
        AppClockLock {
            pool,
            clock: SkewedClock {
                run: RunClock::start(),
                skew: ClockSkew::default(),
            },
        }
    }

    /// The application's clock: what ShedLock's `ClockProvider` returns.
    fn now_us(&self) -> i64 {
        self.clock.local_unix_us()
    }

    fn lease(scope: &Scope, owner: &Owner, token: i64, now_us: i64, ttl: Ttl) -> Lease {
        Lease::from_server_reply(
            scope.clone(),
            owner.clone(),
            FencingToken(token),
            ServerTime::from_micros(now_us),
            ServerTime::from_micros(now_us + ttl.as_micros()),
        )
    }
}

impl LeasePort for AppClockLock {
    fn reports_server_times(&self) -> bool {
        false
    }

    async fn ensure_schema(&self) -> Result<(), LeaseError> {
        super::common::ensure_tables(&self.pool, CREATE).await
    }

    async fn acquire(&self, scope: &Scope, owner: &Owner, ttl: Ttl) -> Result<Lease, LeaseError> {
        let now_us = self.now_us();
        let until_us = now_us + ttl.as_micros();
        // Both statements take (name, me, :now + ttl, :now) and return the
        // token of a grant.
        let grant = |statement: &'static str| {
            sqlx::query_scalar::<_, i64>(statement)
                .bind(scope.as_str())
                .bind(owner.as_str())
                .bind(until_us)
                .bind(now_us)
                .fetch_optional(&self.pool)
        };
        let inserted = grant(concat!(
            "INSERT INTO app_clock_lock (name, lock_until, locked_at, locked_by, token) ",
            "VALUES ($1, ",
            at!("$3"),
            ", ",
            at!("$4"),
            ", $2, 1) ON CONFLICT (name) DO NOTHING RETURNING token"
        ))
        .await
        .map_err(|error| after_send("acquire", error))?;
        if let Some(token) = inserted {
            return Ok(AppClockLock::lease(scope, owner, token, now_us, ttl));
        }
        let updated = grant(concat!(
            "UPDATE app_clock_lock SET lock_until = ",
            at!("$3"),
            ", locked_at = ",
            at!("$4"),
            ", locked_by = $2, token = token + 1 WHERE name = $1 AND lock_until <= ",
            at!("$4"),
            " RETURNING token"
        ))
        .await
        .map_err(|error| after_send("acquire", error))?;
        match updated {
            Some(token) => Ok(AppClockLock::lease(scope, owner, token, now_us, ttl)),
            None => Err(LeaseError::Held {
                scope: scope.clone(),
                holder: None,
            }),
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        // ShedLock's `extend`: the holder, while its lock is live by its clock.
        let now_us = self.now_us();
        let renewed: Option<i64> = sqlx::query_scalar(concat!(
            "UPDATE app_clock_lock SET lock_until = ",
            at!("$4"),
            " WHERE name = $1 AND locked_by = $2 AND token = $3 AND lock_until > ",
            at!("$5"),
            " RETURNING token"
        ))
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(lease.token().0)
        .bind(now_us + ttl.as_micros())
        .bind(now_us)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| after_send("renew", error))?;
        match renewed {
            Some(token) => Ok(super::common::renewed(
                lease,
                AppClockLock::lease(lease.scope(), lease.owner(), token, now_us, ttl),
            )),
            None => Err(LeaseError::lost(lease)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        // ShedLock's unlock, faithfully: by name only, no owner check.
        let now_us = self.now_us();
        let released = sqlx::query(concat!(
            "UPDATE app_clock_lock SET lock_until = ",
            at!("$2"),
            " WHERE name = $1"
        ))
        .bind(lease.scope().as_str())
        .bind(now_us)
        .execute(&self.pool)
        .await
        .map_err(|error| after_send("release", error))?;
        Ok((released.rows_affected() == 1).then_some(ServerTime::from_micros(now_us)))
    }

    async fn holds(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let live: Option<bool> = sqlx::query_scalar(concat!(
            "SELECT lock_until > ",
            at!("$3"),
            " FROM app_clock_lock WHERE name = $1 AND locked_by = $2"
        ))
        .bind(lease.scope().as_str())
        .bind(lease.owner().as_str())
        .bind(self.now_us())
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| after_send("holds", error))?;
        Ok(live.unwrap_or(false))
    }

    async fn commit(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        // No fence either way: the design has none.
        _fencing: Fencing,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        let transaction = self
            .pool
            .begin()
            .await
            .map_err(|error| LeaseError::Database {
                source: Box::new(error),
            })?;
        let seq_first = super::common::write_and_commit(transaction, lease, cycle, faults).await?;
        Ok(CommitReceipt {
            seq_first,
            // Its only clock is the application's: no server fence time.
            fenced_at: None,
        })
    }
}

impl RaceSubject for AppClockLock {
    async fn guarded_rows(&self) -> Result<Vec<GuardedRow>, LeaseError> {
        GuardedTable::new(self.pool.clone()).rows().await
    }

    fn for_worker(&self, clock: SkewedClock) -> Self {
        // Each racer reads its own (skewed) clock, as each application
        // instance reads its host's.
        AppClockLock {
            clock,
            ..self.clone()
        }
    }
}
