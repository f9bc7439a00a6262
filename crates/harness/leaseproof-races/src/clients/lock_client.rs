//! leaseproof's own locks behind the client protocol, so one fault plan
//! judges them beside clients written in other languages.
//!
//! `leaseproof lock-client lease|redis|advisory` (also the crate's
//! `lock-client` example): the reference lease
//! (`PostgresLeases`: one-statement acquisition, renew, release, and writes
//! through the fenced commit cycle), the Redis manager (token, keep-alive)
//! and the advisory manager (a probed dedicated session) — the code users
//! call, not a copy. Reads requests on stdin, answers on stdout
//! (docs/client-protocol.md); its writes go to the rows table through a
//! connection of its own.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::wire::{FailKind, Message, Request, PROTOCOL};
use crate::managers::{build_manager, BuildError, ManagerKind, ManagerSpec};
use leaseproof_locks::{redis_promised_lifetime, LockError, LockGuard, LockManager, TableName};
use leaseproof_postgres::{CycleError, PostgresLeases};
use leaseproof_protocol::{Lease, LeaseError, Owner, Scope, Ttl};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lease,
    Redis,
    Advisory,
}

type Out = mpsc::UnboundedSender<Message>;

fn ok(in_reply_to: u64) -> Message {
    Message::Ok {
        in_reply_to,
        token: None,
        lifetime_ms: None,
        granted_at_us: None,
        expires_at_us: None,
        released_at_us: None,
        committed_at_us: None,
        locked: None,
    }
}

fn fail(in_reply_to: u64, reason: FailKind, text: impl ToString) -> Message {
    Message::Fail {
        in_reply_to,
        reason,
        text: Some(text.to_string()),
    }
}

fn unknown(in_reply_to: u64, text: impl ToString) -> Message {
    Message::Unknown {
        in_reply_to,
        text: Some(text.to_string()),
    }
}

const INSERT: &str = "INSERT INTO leaseproof_client_rows (scope, owner, token, cycle_id, item) \
                      SELECT $1, $2, $3, $4, item FROM generate_series(0, $5 - 1) AS item";

struct Client {
    kind: Kind,
    database_url: String,
    redis_url: String,
    out: Out,
    /// The lease: the library users call, used as a lease.
    leases: Option<PostgresLeases>,
    held_leases: BTreeMap<String, Lease>,
    /// The managers, used as locks.
    manager: Option<Arc<dyn LockManager>>,
    guards: BTreeMap<String, LockGuard>,
    /// The maintenance's own connections (the lock's are separate).
    work: Option<sqlx::PgPool>,
}

impl Client {
    async fn work_pool(&mut self) -> Result<&sqlx::PgPool, sqlx::Error> {
        if self.work.is_none() {
            self.work = Some(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(2)
                    .acquire_timeout(Duration::from_secs(30))
                    .connect(&self.database_url)
                    .await?,
            );
        }
        Ok(self.work.as_ref().expect("just set"))
    }

    async fn manager(&mut self, ttl_ms: u64) -> Result<Arc<dyn LockManager>, LockError> {
        if let Some(manager) = &self.manager {
            return Ok(Arc::clone(manager));
        }
        let kind = match self.kind {
            Kind::Redis => ManagerKind::Redis,
            Kind::Advisory => ManagerKind::Advisory,
            Kind::Lease => unreachable!("the lease is used as a lease"),
        };
        let manager = build_manager(ManagerSpec {
            redis_url: Some(self.redis_url.clone()),
            ttl: Duration::from_millis(ttl_ms),
            ..ManagerSpec::new(kind, "leaseproof", self.database_url.clone())
        })
        .await
        .map_err(|error| match error {
            BuildError::Lock(error) => error,
            other => LockError::Unavailable {
                source: Box::new(other),
            },
        })?
        .manager;
        self.manager = Some(Arc::clone(&manager));
        Ok(manager)
    }

    async fn leases(&mut self) -> Result<PostgresLeases, LeaseError> {
        if self.leases.is_none() {
            let leases = PostgresLeases::connect(&self.database_url, 4).await?;
            leases.ensure_schema().await?;
            self.leases = Some(leases);
        }
        Ok(self.leases.clone().expect("just set"))
    }

    async fn handle(&mut self, request: Request) -> Message {
        let msg_id = request.msg_id();
        match (self.kind, request) {
            (
                Kind::Lease,
                Request::Acquire {
                    table,
                    owner,
                    ttl_ms,
                    ..
                },
            ) => self.lease_acquire(msg_id, table, owner, ttl_ms).await,
            (Kind::Lease, Request::Renew { table, ttl_ms, .. }) => {
                self.lease_renew(msg_id, table, ttl_ms).await
            }
            (
                Kind::Lease,
                Request::Write {
                    table,
                    owner,
                    cycle_id,
                    items,
                    ..
                },
            ) => {
                self.lease_write(msg_id, table, owner, cycle_id, items)
                    .await
            }
            (Kind::Lease, Request::Release { table, .. }) => {
                self.lease_release(msg_id, table).await
            }
            (_, Request::Acquire { table, ttl_ms, .. }) => {
                self.lock_acquire(msg_id, table, ttl_ms).await
            }
            (
                _,
                Request::Write {
                    table,
                    owner,
                    token,
                    cycle_id,
                    items,
                    ..
                },
            ) => {
                self.lock_write(msg_id, table, owner, token, cycle_id, items)
                    .await
            }
            (_, Request::Release { table, .. }) => self.lock_release(msg_id, table).await,
            (_, Request::IsLocked { table, .. }) => self.is_locked(msg_id, table).await,
            (_, Request::Renew { .. }) => fail(msg_id, FailKind::Error, "renew is not supported"),
        }
    }

    /// Acquires the lease of `table` through `PostgresLeases::acquire_lease`.
    async fn lease_acquire(
        &mut self,
        msg_id: u64,
        table: String,
        owner: String,
        ttl_ms: u64,
    ) -> Message {
        let result = async {
            let leases = self.leases().await?;
            let scope = Scope::new(table.clone())?;
            let owner = Owner::new(owner)?;
            let ttl = Ttl::from_millis(i64::try_from(ttl_ms).unwrap_or(i64::MAX))?;
            leases.acquire_lease(&scope, &owner, ttl).await
        }
        .await;
        match result {
            Ok(lease) => {
                let answer = lease_answer(msg_id, &lease);
                self.held_leases.insert(table, lease);
                answer
            }
            Err(LeaseError::Held { .. }) => fail(msg_id, FailKind::Held, "held"),
            Err(error) => lease_error(msg_id, error),
        }
    }

    /// Renews the held lease of `table`.
    async fn lease_renew(&mut self, msg_id: u64, table: String, ttl_ms: u64) -> Message {
        let Some(lease) = self.held_leases.get(&table).cloned() else {
            return fail(msg_id, FailKind::Stale, "not held");
        };
        let result = async {
            let leases = self.leases().await?;
            let ttl = Ttl::from_millis(i64::try_from(ttl_ms).unwrap_or(i64::MAX))?;
            leases.renew(&lease, ttl).await
        }
        .await;
        match result {
            Ok(renewed) => {
                let answer = lease_answer(msg_id, &renewed);
                self.held_leases.insert(table, renewed);
                answer
            }
            Err(error) => lease_error(msg_id, error),
        }
    }

    /// The maintenance through the lease's fenced commit cycle.
    async fn lease_write(
        &mut self,
        msg_id: u64,
        table: String,
        owner: String,
        cycle_id: u64,
        items: u32,
    ) -> Message {
        let Some(lease) = self.held_leases.get(&table).cloned() else {
            return fail(msg_id, FailKind::Stale, "not held");
        };
        let leases = match self.leases().await {
            Ok(leases) => leases,
            Err(error) => return lease_error(msg_id, error),
        };
        let token = lease.token().0;
        let result = leases
            .commit_cycle(&lease, |connection| {
                Box::pin(async move {
                    sqlx::query(INSERT)
                        .bind(&table)
                        .bind(&owner)
                        .bind(token)
                        .bind(i64::try_from(cycle_id).unwrap_or(i64::MAX))
                        .bind(i32::try_from(items).unwrap_or(i32::MAX))
                        .execute(connection)
                        .await
                        .map(drop)
                })
            })
            .await;
        match result {
            Ok(()) => ok(msg_id),
            Err(CycleError::Lease(error)) => lease_error(msg_id, error),
            Err(CycleError::Work(error)) => fail(msg_id, FailKind::Error, error),
        }
    }

    /// Releases the held lease of `table`.
    async fn lease_release(&mut self, msg_id: u64, table: String) -> Message {
        let Some(lease) = self.held_leases.remove(&table) else {
            return fail(msg_id, FailKind::Stale, "not held");
        };
        match self.leases().await {
            Ok(leases) => match leases.release(&lease).await {
                Ok(released_at) => {
                    let mut answer = ok(msg_id);
                    if let Message::Ok { released_at_us, .. } = &mut answer {
                        *released_at_us = released_at.map(|at| at.micros);
                    }
                    answer
                }
                Err(error) => lease_error(msg_id, error),
            },
            Err(error) => lease_error(msg_id, error),
        }
    }

    /// Takes the manager's lock of `table`; a task reports its *lost* signal.
    async fn lock_acquire(&mut self, msg_id: u64, table: String, ttl_ms: u64) -> Message {
        let manager = match self.manager(ttl_ms).await {
            Ok(manager) => manager,
            Err(error) => return lock_error(msg_id, error),
        };
        match manager
            .acquire_lock(&TableName::new("public", table.clone()))
            .await
        {
            Ok(guard) => {
                let mut answer = ok(msg_id);
                if let Message::Ok {
                    token, lifetime_ms, ..
                } = &mut answer
                {
                    *token = guard
                        .fencing_token()
                        .and_then(|token| u64::try_from(token.0).ok());
                    // Redis promises its TTL from the SET, less the
                    // millisecond it truncates its expiry to; a session
                    // lock lives with its session.
                    *lifetime_ms = (self.kind == Kind::Redis).then(|| {
                        let promised = redis_promised_lifetime(Duration::from_millis(ttl_ms));
                        u64::try_from(promised.as_millis())
                            .unwrap_or(u64::MAX)
                            .max(1)
                    });
                }
                let mut lost = guard.lost_signal();
                let (out, lost_table) = (self.out.clone(), table.clone());
                tokio::spawn(async move {
                    if lost.wait_for(|lost| *lost).await.is_ok() {
                        let _ = out.send(Message::Lost {
                            table: lost_table,
                            text: Some("the guard's lost signal fired".to_string()),
                        });
                    }
                });
                self.guards.insert(table, guard);
                answer
            }
            Err(error) => lock_error(msg_id, error),
        }
    }

    /// The maintenance on a connection of its own: nothing checks the lock there.
    async fn lock_write(
        &mut self,
        msg_id: u64,
        table: String,
        owner: String,
        token: Option<u64>,
        cycle_id: u64,
        items: u32,
    ) -> Message {
        if !self.guards.contains_key(&table) {
            return fail(msg_id, FailKind::Stale, "not held");
        }
        let pool = match self.work_pool().await {
            Ok(pool) => pool.clone(),
            Err(error) => return fail(msg_id, FailKind::Error, error),
        };
        // The work is on another connection than the lock's, and
        // nothing checks the lock there: the finding the harness
        // reports for these managers.
        let written = sqlx::query(INSERT)
            .bind(&table)
            .bind(&owner)
            .bind(token.and_then(|token| i64::try_from(token).ok()))
            .bind(i64::try_from(cycle_id).unwrap_or(i64::MAX))
            .bind(i32::try_from(items).unwrap_or(i32::MAX))
            .execute(&pool)
            .await;
        match written {
            Ok(_) => ok(msg_id),
            Err(error) => unknown(msg_id, error),
        }
    }

    /// Releases the manager's lock of `table`.
    async fn lock_release(&mut self, msg_id: u64, table: String) -> Message {
        let Some(guard) = self.guards.remove(&table) else {
            return fail(msg_id, FailKind::Stale, "not held");
        };
        match guard.release().await {
            Ok(()) => ok(msg_id),
            Err(error) => lock_error(msg_id, error),
        }
    }

    /// Asks the manager (or the lease table) whether `table` is locked.
    async fn is_locked(&mut self, msg_id: u64, table: String) -> Message {
        let manager = match self.kind {
            Kind::Lease => None,
            _ => self.manager(3_000).await.ok(),
        };
        let locked = match manager {
            Some(manager) => manager
                .is_locked(&TableName::new("public", table))
                .await
                .map_err(|error| error.to_string()),
            None => match (self.leases().await, Scope::new(table)) {
                (Ok(leases), Ok(scope)) => leases
                    .holder(&scope)
                    .await
                    .map(|holder| holder.is_some())
                    .map_err(|error| error.to_string()),
                (Err(error), _) => Err(error.to_string()),
                (_, Err(error)) => Err(error.to_string()),
            },
        };
        match locked {
            Ok(locked) => {
                let mut answer = ok(msg_id);
                if let Message::Ok {
                    locked: answer_locked,
                    ..
                } = &mut answer
                {
                    *answer_locked = Some(locked);
                }
                answer
            }
            Err(error) => fail(msg_id, FailKind::Error, error),
        }
    }
}

fn lease_answer(msg_id: u64, lease: &Lease) -> Message {
    let mut answer = ok(msg_id);
    if let Message::Ok {
        token,
        granted_at_us,
        expires_at_us,
        ..
    } = &mut answer
    {
        *token = u64::try_from(lease.token().0).ok();
        *granted_at_us = Some(lease.granted_at().micros);
        *expires_at_us = Some(lease.expires_at().micros);
    }
    answer
}

fn lease_error(msg_id: u64, error: LeaseError) -> Message {
    match error {
        LeaseError::Held { .. } => fail(msg_id, FailKind::Held, error),
        LeaseError::Lost { .. } => fail(msg_id, FailKind::Stale, error),
        LeaseError::Invalid(_) | LeaseError::Unavailable { .. } => {
            fail(msg_id, FailKind::Error, error)
        }
        other => unknown(msg_id, other),
    }
}

fn lock_error(msg_id: u64, error: LockError) -> Message {
    match error {
        LockError::Held { .. } => fail(msg_id, FailKind::Held, error),
        LockError::Lost { .. } => fail(msg_id, FailKind::Stale, error),
        LockError::Invalid(_) | LockError::Unavailable { .. } => {
            fail(msg_id, FailKind::Error, error)
        }
        other => unknown(msg_id, other),
    }
}

/// The locks this client serves.
pub const KINDS: [&str; 3] = ["lease", "redis", "advisory"];

/// Serves the client protocol on stdin/stdout for the lock named `kind`
/// (one of [`KINDS`]) until stdin closes.
pub async fn serve(kind: &str) -> ExitCode {
    let kind = match kind {
        "lease" => Kind::Lease,
        "redis" => Kind::Redis,
        "advisory" => Kind::Advisory,
        other => {
            eprintln!("leaseproof lock client: unknown lock {other:?} (expected lease, redis or advisory)");
            return ExitCode::from(2);
        }
    };
    let (out, mut outbox) = mpsc::unbounded_channel::<Message>();
    // One writer: answers and lost notices never interleave within a line.
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = outbox.recv().await {
            let mut line = serde_json::to_string(&message).expect("messages serialise");
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let _ = out.send(Message::Hello {
        protocol: PROTOCOL.to_string(),
        name: format!(
            "leaseproof {}",
            match kind {
                Kind::Lease => "PostgresLeases (fenced commit cycle)",
                Kind::Redis => "RedisDistributedLockManager (token, keep-alive)",
                Kind::Advisory => "PostgresAdvisoryLockManager (probed session)",
            }
        ),
        renew: kind == Kind::Lease,
        grant_stamps: (kind == Kind::Lease).then(|| "decision".to_string()),
    });
    let mut client = Client {
        kind,
        database_url: std::env::var("LEASEPROOF_DATABASE_URL").unwrap_or_default(),
        redis_url: std::env::var("LEASEPROOF_REDIS_URL").unwrap_or_default(),
        out: out.clone(),
        leases: None,
        held_leases: BTreeMap::new(),
        manager: None,
        guards: BTreeMap::new(),
        work: None,
    };
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let request: Request = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(error) => {
                eprintln!("leaseproof lock-client: bad request {line:?}: {error}");
                return ExitCode::from(2);
            }
        };
        let answer = client.handle(request).await;
        if out.send(answer).is_err() {
            break;
        }
    }
    drop(client);
    drop(out);
    let _ = writer.await;
    ExitCode::SUCCESS
}
