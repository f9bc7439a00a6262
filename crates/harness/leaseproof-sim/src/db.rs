//! The simulated database host: the protocol's semantics served over turmoil TCP.
//!
//! Goal: a stand-in for PostgreSQL that behaves like it where leases care, so
//! the worker loop that runs against PostgreSQL runs here unchanged. Method:
//! - **State**: exactly `leaseproof_protocol::semantics::{LeaseTable,
//!   GuardedLog}` — every statement is the semantic model's method, called with
//!   the server clock; there is no second copy of the rules.
//! - **Durability**: the tables live in [`Durable`], kept outside the host
//!   factory (turmoil re-runs the factory on restart), so committed rows
//!   survive a crash; sessions, open transactions and row locks live in the
//!   factory's future and vanish with it.
//! - **Clock**: server time = simulated time + the drawn server offset. A
//!   one-shot statement decides with its arrival time (PostgreSQL's `now()`);
//!   a transaction's rows carry the time of its `BEGIN`; the fence compares
//!   with its own statement time (`statement_timestamp()`).
//! - **Row locks**: the fence locks the lease row until commit or abort; a
//!   rival acquire, renew, release or fence on that row waits for the lock,
//!   as `INSERT … ON CONFLICT DO UPDATE` waits behind `SELECT … FOR UPDATE`.
//! - **Aborts**: a session that ends (connection closed, reset, idle in
//!   transaction too long) aborts its transaction and frees its locks.
//! - **Catalog race**: a `CREATE TABLE IF NOT EXISTS` that starts while another
//!   is in flight waits for it, then fails with `23505` on
//!   `pg_type_typname_nsp_index`.
//! - **Lost replies**: with the drawn probability, a reply is dropped *after*
//!   the statement took effect and the connection is reset.
//! - **Advisory locks**: session-level, as `pg_try_advisory_lock`: held by a
//!   session (one connection) until unlocked or the session ends — closed,
//!   reset, terminated by the fault plan ([`Terminations`], as
//!   `pg_terminate_backend`) or lost with the server's crash. The holder's
//!   client learns of it only when it next sends something on the session.
//!
//! Invariant: every time comparison happens here, with the server's clock.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use leaseproof_protocol::semantics::{Acquisition, ExtensionRule, GuardedLog, LeaseTable};
use leaseproof_protocol::{Lease, Owner, Scope, ServerTime, Ttl};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Notify;
use turmoil::net::{TcpListener, TcpStream};

use crate::trace::{format_us, sim_now_us, Trace};
use crate::true_time::TrueTimeMonitor;
use crate::wire::{ClientMessage, Request, Response};

/// The database's host name.
pub const DB_HOST: &str = "db";
/// The port it listens on.
pub const DB_PORT: u16 = 5432;

/// Whether the lease table exists, or is being created by a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// Not created yet.
    Absent,
    /// A `CREATE TABLE` is in flight in this database session of this server incarnation.
    Creating {
        /// The creating session.
        session: u64,
    },
    /// Created and committed.
    Present,
}

/// What survives a database crash: the committed tables.
#[derive(Debug)]
pub struct Durable {
    /// The lease table (the semantic model itself).
    pub leases: LeaseTable,
    /// The guarded table.
    pub guarded: GuardedLog,
    /// The catalog.
    pub schema: SchemaState,
    /// The RNG deciding lost replies; it continues across restarts.
    rng: ChaCha8Rng,
    /// Server incarnations started so far.
    pub incarnations: u64,
    /// I1 judged in true time (simulated time), beside the server's clock.
    pub true_time: TrueTimeMonitor,
}

impl Durable {
    /// Empty tables, no schema, and the lost-reply RNG seeded with `rng_seed`.
    pub fn new(rng_seed: u64) -> Durable {
        Durable::with_extension_rule(rng_seed, ExtensionRule::NeverShorten)
    }

    /// [`Durable::new`] whose lease table extends live grants by `rule` (the
    /// broken pre-fix rule, for the harness's teeth).
    pub fn with_extension_rule(rng_seed: u64, rule: ExtensionRule) -> Durable {
        Durable {
            leases: LeaseTable::with_extension_rule(rule),
            guarded: GuardedLog::new(),
            schema: SchemaState::Absent,
            rng: ChaCha8Rng::seed_from_u64(rng_seed),
            incarnations: 0,
            true_time: TrueTimeMonitor::default(),
        }
    }
}

/// The server's settings for one run.
#[derive(Clone, Debug)]
pub struct DbConfig {
    /// Server clock = simulated time + this.
    pub server_offset_us: i64,
    /// Fraction of replies dropped after taking effect.
    pub lost_reply_probability: f64,
    /// How long `CREATE TABLE` takes.
    pub schema_create: Duration,
    /// PostgreSQL's `idle_in_transaction_session_timeout`.
    pub idle_in_transaction_timeout: Duration,
    /// Planted defect: the fence checks the lease but keeps no row lock, as
    /// a fence run in a transaction of its own would (its lock ends with it).
    pub fence_without_lock: bool,
    /// Planted defect: the server decides every statement with its client's
    /// clock instead of one clock of its own, as a design that trusts client
    /// timestamps does. Only the true-time monitor can see it.
    pub clock_follows_client: bool,
    /// Planted defect: an advisory lock is granted to every session that
    /// asks, as `pg_try_advisory_lock_shared` would (a shared lock taken
    /// for an exclusive one).
    pub advisory_shared: bool,
    /// The fault plan's handle to terminate the sessions holding advisory
    /// locks (lock runs of the advisory manager only).
    pub terminations: Option<Terminations>,
}

impl DbConfig {
    /// The server `plan` drew for `scenario`: its lost replies and schema
    /// creation time, the scenario's idle-in-transaction timeout, one clock
    /// with no offset, no planted defect, no terminations.
    pub fn drawn(scenario: &crate::Scenario, plan: &crate::FaultPlan) -> DbConfig {
        DbConfig {
            server_offset_us: 0,
            lost_reply_probability: plan.lost_reply_probability,
            schema_create: Duration::from_millis(plan.schema_create_ms),
            idle_in_transaction_timeout: Duration::from_millis(
                scenario.idle_in_transaction_timeout_ms,
            ),
            fence_without_lock: false,
            clock_follows_client: false,
            advisory_shared: false,
            terminations: None,
        }
    }
}

/// The driver's handle to `pg_terminate_backend` every session that holds
/// an advisory lock, shared across server incarnations: a strike while the
/// server is down strikes nothing (no waiter is woken, no permit is kept).
#[derive(Clone, Debug, Default)]
pub struct Terminations(Rc<Notify>);

impl Terminations {
    /// Terminates, now, every session holding an advisory lock.
    pub fn strike(&self) {
        self.0.notify_waiters();
    }
}

/// One incarnation of the server: sessions and locks, gone on crash.
struct Server {
    durable: Rc<RefCell<Durable>>,
    config: DbConfig,
    trace: Trace,
    /// Row locks: scope → the session holding it.
    locks: RefCell<BTreeMap<Scope, u64>>,
    /// Woken whenever a lock is freed or the catalog changes.
    changed: Notify,
    session_next: Cell<u64>,
    /// Session-level advisory locks: key → (holding session, times locked).
    /// They live with the server incarnation: a crash frees them all.
    advisory: RefCell<BTreeMap<i64, (u64, u32)>>,
    /// Sessions ended by a termination; each ends at its next step.
    terminated: RefCell<BTreeSet<u64>>,
    /// Woken when sessions were terminated.
    terminating: Notify,
}

/// Where and when a request is served: its session, its client, the server's
/// `now()` and the same instant in true time.
#[derive(Clone, Copy)]
struct At<'a> {
    session: u64,
    client: &'a str,
    now: ServerTime,
    arrived_true_us: i64,
}

impl<'a> At<'a> {
    /// Session, client, `now()` and arrival in true time, as a handler names them.
    fn parts(self) -> (u64, &'a str, ServerTime, i64) {
        (self.session, self.client, self.now, self.arrived_true_us)
    }
}

/// An open transaction.
struct Transaction {
    begun_at: ServerTime,
    fenced_at: Option<ServerTime>,
    locked: Vec<Scope>,
    writes: Vec<(Lease, i64, u32)>,
}

/// The host software: listen, serve each connection as a session. Pass it to
/// `sim.host(DB_HOST, || serve(durable.clone(), config.clone(), trace.clone()))`.
pub async fn serve(
    durable: Rc<RefCell<Durable>>,
    config: DbConfig,
    trace: Trace,
) -> turmoil::Result {
    let incarnation = {
        let mut state = durable.borrow_mut();
        state.incarnations += 1;
        // A crash aborted whatever DDL was in flight.
        if matches!(state.schema, SchemaState::Creating { .. }) {
            state.schema = SchemaState::Absent;
        }
        state.incarnations
    };
    trace.line(None, || {
        format!("db: server incarnation {incarnation} starts")
    });
    let server = Rc::new(Server {
        durable,
        config,
        trace,
        locks: RefCell::new(BTreeMap::new()),
        changed: Notify::new(),
        session_next: Cell::new(1),
        advisory: RefCell::new(BTreeMap::new()),
        terminated: RefCell::new(BTreeSet::new()),
        terminating: Notify::new(),
    });
    if let Some(terminations) = server.config.terminations.clone() {
        let server = Rc::clone(&server);
        tokio::task::spawn_local(async move {
            loop {
                terminations.0.notified().await;
                server.terminate_lock_holders();
            }
        });
    }
    let listener = TcpListener::bind(("0.0.0.0", DB_PORT)).await?;
    loop {
        let (stream, _peer) = listener.accept().await?;
        let session = server.session_next.get();
        server.session_next.set(session + 1);
        tokio::task::spawn_local(Rc::clone(&server).session(session, stream));
    }
}

fn server_error(code: &str, message: impl Into<String>) -> Response {
    Response::Error {
        code: code.to_string(),
        message: message.into(),
    }
}

impl Server {
    /// The server's `now()` for a statement of `client`: one clock, unless
    /// the planted defect hands the decision to the client's clock.
    fn now(&self, client: &str) -> ServerTime {
        if self.config.clock_follows_client {
            if let Some(clock) = self.trace.local_clock(client) {
                return ServerTime::from_micros(clock.at(sim_now_us()));
            }
        }
        ServerTime::from_micros(sim_now_us() + self.config.server_offset_us)
    }

    fn line(&self, client: &str, text: impl FnOnce() -> String) {
        self.trace.line(Some(client), text);
    }

    async fn session(self: Rc<Self>, session: u64, stream: TcpStream) {
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let mut transaction: Option<Transaction> = None;
        let mut client = String::from("?");
        loop {
            if self.terminated.borrow().contains(&session) {
                self.line(&client, || {
                    format!("db s{session}: terminated (pg_terminate_backend), connection closed")
                });
                break;
            }
            let next = tokio::select! {
                // In order: no randomness outside the seed.
                biased;
                // Checked at the top of the loop; `next_line` is cancel-safe.
                () = self.terminating.notified() => continue,
                next = self.next_line(session, &client, &mut lines, transaction.is_some()) => next,
            };
            let Some(line) = next else {
                break;
            };
            let message: ClientMessage = match serde_json::from_str(&line) {
                Ok(message) => message,
                Err(error) => {
                    self.line(&client, || format!("db s{session}: bad message: {error}"));
                    break;
                }
            };
            client = message.client;
            let name = message.request.name();
            let response = self
                .execute(session, &client, &mut transaction, message.request)
                .await;
            // The RNG serves lost replies alone: a draw at probability 0 is
            // `false` and changes nothing else.
            let lose = self
                .durable
                .borrow_mut()
                .rng
                .gen_bool(self.config.lost_reply_probability);
            if lose {
                self.trace.fault(Some(&client), || {
                    format!("db s{session}: reply to {name} LOST after it took effect; connection reset")
                });
                break;
            }
            let mut reply = serde_json::to_string(&response).expect("responses serialise");
            reply.push('\n');
            if write.write_all(reply.as_bytes()).await.is_err() {
                self.line(&client, || {
                    format!("db s{session}: reply to {name} undeliverable, connection gone")
                });
                break;
            }
        }
        if let Some(transaction) = transaction.take() {
            self.abort(session, &client, transaction);
        }
        self.free_advisory_locks(session, &client);
    }

    /// The session's next request line; `None` ends the session (closed,
    /// reset, or idle in a transaction too long).
    async fn next_line(
        &self,
        session: u64,
        client: &str,
        lines: &mut tokio::io::Lines<BufReader<turmoil::net::tcp::OwnedReadHalf>>,
        in_transaction: bool,
    ) -> Option<String> {
        let next = if in_transaction {
            match tokio::time::timeout(self.config.idle_in_transaction_timeout, lines.next_line())
                .await
            {
                Ok(next) => next,
                Err(_) => {
                    self.line(client, || {
                        format!("db s{session}: idle in transaction too long, terminating")
                    });
                    return None;
                }
            }
        } else {
            lines.next_line().await
        };
        next.ok().flatten()
    }

    /// `pg_try_advisory_lock(key)`: granted when free or already this
    /// session's (session locks count, as PostgreSQL's).
    fn advisory_try_lock(&self, at: At<'_>, key: i64) -> Response {
        let mut advisory = self.advisory.borrow_mut();
        let granted = match advisory.get_mut(&key) {
            None => {
                advisory.insert(key, (at.session, 1));
                true
            }
            Some((holder, count)) if *holder == at.session => {
                *count += 1;
                true
            }
            // The planted defect: the holder is replaced, the lock shared.
            Some(entry) if self.config.advisory_shared => {
                *entry = (at.session, 1);
                true
            }
            Some(_) => false,
        };
        drop(advisory);
        self.line(at.client, || {
            let verdict = if granted { "GRANTED" } else { "refused" };
            format!("db s{}: advisory lock {key} {verdict}", at.session)
        });
        Response::Answer(granted)
    }

    /// `pg_advisory_unlock(key)`: `false` unless the asking connection's
    /// backend holds it.
    fn advisory_unlock(&self, at: At<'_>, key: i64) -> Response {
        let mut advisory = self.advisory.borrow_mut();
        let unlocked = match advisory.get_mut(&key) {
            Some((holder, count)) if *holder == at.session => {
                *count -= 1;
                if *count == 0 {
                    advisory.remove(&key);
                }
                true
            }
            _ => false,
        };
        drop(advisory);
        self.line(at.client, || {
            format!("db s{}: advisory unlock {key} => {unlocked}", at.session)
        });
        Response::Answer(unlocked)
    }

    /// The session ended: its advisory locks end with it.
    fn free_advisory_locks(&self, session: u64, client: &str) {
        let mut freed = Vec::new();
        self.advisory.borrow_mut().retain(|key, (holder, _)| {
            let ours = *holder == session;
            if ours {
                freed.push(*key);
            }
            !ours
        });
        if !freed.is_empty() {
            self.line(client, || {
                format!("db s{session}: session ended, advisory lock(s) {freed:?} freed")
            });
        }
    }

    /// `pg_terminate_backend` of every session holding an advisory lock:
    /// the backends exit at once and their locks are free; each client
    /// learns it at its next statement on the session.
    fn terminate_lock_holders(&self) {
        let holders: BTreeSet<u64> = self
            .advisory
            .borrow()
            .values()
            .map(|(holder, _)| *holder)
            .collect();
        self.trace.fault(None, || {
            format!("db: pg_terminate_backend of the advisory lock holders {holders:?}")
        });
        for session in &holders {
            self.free_advisory_locks(*session, "db");
        }
        self.terminated.borrow_mut().extend(holders);
        self.terminating.notify_waiters();
    }

    fn abort(&self, session: u64, client: &str, transaction: Transaction) {
        self.unlock(session, &transaction);
        self.line(client, || {
            format!(
                "db s{session}: transaction begun at {} ABORTED ({} cycle(s) discarded)",
                format_us(transaction.begun_at.micros),
                transaction.writes.len()
            )
        });
    }

    fn unlock(&self, session: u64, transaction: &Transaction) {
        let mut locks = self.locks.borrow_mut();
        for scope in &transaction.locked {
            let holder = locks.remove(scope);
            assert_eq!(holder, Some(session), "a session frees only its own locks");
        }
        drop(locks);
        self.changed.notify_waiters();
    }

    /// Paired with [`Self::wait_for_row`]: a statement that changes a lease
    /// row runs only while no other session holds the row's lock.
    fn assert_row_free_for(&self, session: u64, scope: &Scope) {
        let holder = self.locks.borrow().get(scope).copied();
        assert!(
            holder.is_none_or(|holder| holder == session),
            "s{session} changes {scope}'s row while s{holder:?} holds its lock"
        );
    }

    /// Waits until no *other* session holds `scope`'s row lock.
    async fn wait_for_row(&self, session: u64, client: &str, scope: &Scope) {
        let mut waited = false;
        loop {
            let holder = self.locks.borrow().get(scope).copied();
            match holder {
                Some(holder) if holder != session => {
                    if !waited {
                        self.line(client, || {
                            format!("db s{session}: waits for the row lock of {scope} held by s{holder}")
                        });
                        waited = true;
                    }
                    self.changed.notified().await;
                }
                _ => return,
            }
        }
    }

    async fn execute(
        &self,
        session: u64,
        client: &str,
        transaction: &mut Option<Transaction>,
        request: Request,
    ) -> Response {
        let now = self.now(client);
        // The same instant in true time: the true-time monitor holds the
        // server's clock to it.
        let arrived_true_us = sim_now_us();
        let at = At {
            session,
            client,
            now,
            arrived_true_us,
        };
        match request {
            Request::EnsureSchema => self.ensure_schema(session, client).await,
            Request::Acquire { scope, owner, ttl } => self.acquire(at, scope, owner, ttl).await,
            Request::Renew { lease, ttl } => self.renew(at, lease, ttl).await,
            Request::Release { lease } => self.release(at, lease).await,
            Request::Holds { lease } => {
                let holds = self.durable.borrow().leases.holds(&lease, now);
                Response::Holds(holds)
            }
            Request::Begin => self.begin(at, transaction),
            Request::Fence { lease } => self.fence(at, transaction, lease).await,
            Request::Write {
                lease,
                cycle_id,
                items,
            } => {
                let Some(transaction) = transaction.as_mut() else {
                    return server_error("25P01", "write outside a transaction");
                };
                transaction.writes.push((lease, cycle_id, items));
                Response::Written
            }
            Request::Commit => self.commit(at, transaction),
            Request::AdvisoryTryLock { key } => self.advisory_try_lock(at, key),
            Request::AdvisoryUnlock { key } => self.advisory_unlock(at, key),
            Request::AdvisoryHeld { key } => {
                Response::Answer(self.advisory.borrow().contains_key(&key))
            }
            Request::Ping => Response::Answer(true),
        }
    }

    /// `acquire`: the one statement, under the row's lock.
    async fn acquire(&self, at: At<'_>, scope: Scope, owner: Owner, ttl: Ttl) -> Response {
        let (session, client, now, arrived_true_us) = at.parts();
        self.wait_for_row(session, client, &scope).await;
        self.assert_row_free_for(session, &scope);
        let acquisition = {
            let mut durable = self.durable.borrow_mut();
            let acquisition = durable.leases.acquire(&scope, &owner, ttl, now);
            if let Acquisition::Granted { lease, kind } = &acquisition {
                durable
                    .true_time
                    .granted(lease, *kind, arrived_true_us, now);
            }
            acquisition
        };
        self.line(client, || match &acquisition {
            Acquisition::Granted { lease, kind } => format!(
                "db s{session}: acquire {scope} by {owner} at {} => GRANTED {:?} token {} until {}",
                format_us(now.micros),
                kind,
                lease.token(),
                format_us(lease.expires_at().micros)
            ),
            Acquisition::Held {
                holder, expires_at, ..
            } => format!(
                "db s{session}: acquire {scope} by {owner} at {} => HELD by {holder} until {}",
                format_us(now.micros),
                format_us(expires_at.micros)
            ),
        });
        Response::Acquired(acquisition)
    }

    /// `renew`: keeps the grant, extends its end, under the row's lock.
    async fn renew(&self, at: At<'_>, lease: Lease, ttl: Ttl) -> Response {
        let (session, client, now, arrived_true_us) = at.parts();
        self.wait_for_row(session, client, lease.scope()).await;
        self.assert_row_free_for(session, lease.scope());
        let renewed = {
            let mut durable = self.durable.borrow_mut();
            let renewed = durable.leases.renew(&lease, ttl, now);
            if let Some(renewed) = &renewed {
                durable.true_time.extended(renewed, arrived_true_us, now);
            }
            renewed
        };
        self.line(client, || {
            format!(
                "db s{session}: renew {} token {} at {} => {}",
                lease.scope(),
                lease.token(),
                format_us(now.micros),
                renewed
                    .as_ref()
                    .map_or("LOST".to_string(), |renewed| format!(
                        "renewed until {}",
                        format_us(renewed.expires_at().micros)
                    ))
            )
        });
        // `LeaseTable::renew` asserts that a renewal keeps its
        // grant (and, under the reference rule, never shortens it).
        Response::Renewed(renewed)
    }

    /// `release`: expires the grant, keeps the row, under the row's lock.
    async fn release(&self, at: At<'_>, lease: Lease) -> Response {
        let (session, client, now, arrived_true_us) = at.parts();
        self.wait_for_row(session, client, lease.scope()).await;
        self.assert_row_free_for(session, lease.scope());
        let released = {
            let mut durable = self.durable.borrow_mut();
            let released = durable.leases.release(&lease, now);
            if released.is_some() {
                durable
                    .true_time
                    .released(lease.scope(), lease.token(), arrived_true_us);
            }
            released
        };
        self.line(client, || {
            format!(
                "db s{session}: release {} token {} at {} => {}",
                lease.scope(),
                lease.token(),
                format_us(now.micros),
                if released.is_some() {
                    "released"
                } else {
                    "not held"
                }
            )
        });
        Response::Released(released)
    }

    /// `BEGIN`: a transaction whose `now()` is this instant.
    fn begin(&self, at: At<'_>, transaction: &mut Option<Transaction>) -> Response {
        let (session, client, now, _) = at.parts();
        if transaction.is_some() {
            return server_error("25001", "there is already a transaction in progress");
        }
        *transaction = Some(Transaction {
            begun_at: now,
            fenced_at: None,
            locked: Vec::new(),
            writes: Vec::new(),
        });
        self.line(client, || {
            format!("db s{session}: BEGIN at {}", format_us(now.micros))
        });
        Response::Begun(now)
    }

    /// The fence: the lease row locked until `COMMIT` when the lease is current.
    async fn fence(
        &self,
        at: At<'_>,
        transaction: &mut Option<Transaction>,
        lease: Lease,
    ) -> Response {
        let (session, client, now, _) = at.parts();
        if transaction.is_none() {
            return server_error("25P01", "fence outside a transaction");
        }
        self.wait_for_row(session, client, lease.scope()).await;
        let holds = self.durable.borrow().leases.holds(&lease, now);
        let transaction = transaction.as_mut().expect("checked above");
        if holds && !self.config.fence_without_lock {
            let previous = self
                .locks
                .borrow_mut()
                .insert(lease.scope().clone(), session);
            assert!(
                previous.is_none() || previous == Some(session),
                "the fence took a row lock another session holds"
            );
            if previous.is_none() {
                transaction.locked.push(lease.scope().clone());
            }
        }
        if holds {
            transaction.fenced_at = Some(now);
        }
        self.line(client, || {
            format!(
                "db s{session}: FENCE {} token {} owner {} at {} => {}",
                lease.scope(),
                lease.token(),
                lease.owner(),
                format_us(now.micros),
                if holds {
                    "current, row locked"
                } else {
                    "NOT current (stale)"
                }
            )
        });
        Response::Fenced(holds.then_some(now))
    }

    /// `COMMIT`: the writes land with their commit instant; the row locks end.
    fn commit(&self, at: At<'_>, transaction: &mut Option<Transaction>) -> Response {
        let (session, client, now, arrived_true_us) = at.parts();
        let Some(open) = transaction.take() else {
            return server_error("25P01", "commit outside a transaction");
        };
        // Paired with the fence: a fenced transaction still holds the
        // row lock its fence took, until this COMMIT frees it.
        if open.fenced_at.is_some() && !self.config.fence_without_lock {
            assert!(
                !open.locked.is_empty(),
                "a fenced transaction holds a row lock"
            );
            for scope in &open.locked {
                assert_eq!(
                    self.locks.borrow().get(scope),
                    Some(&session),
                    "the fence's row lock is held until COMMIT"
                );
            }
        }
        let mut seq_first = None;
        {
            let mut durable = self.durable.borrow_mut();
            for (lease, cycle_id, items) in &open.writes {
                // I3 at the commit instant, which only the simulation
                // knows exactly: the row must still carry the
                // write's token (a fence's row lock guarantees it).
                let row_token = durable.leases.row(lease.scope()).map(|row| row.token);
                durable
                    .true_time
                    .committed(lease, row_token, arrived_true_us);
                // The rows carry the transaction's now() (its BEGIN)
                // and the commit instant: exact commit-time evidence.
                let seqs =
                    durable
                        .guarded
                        .append_committed(lease, *cycle_id, *items, open.begun_at, now);
                seq_first.get_or_insert(seqs.start);
            }
        }
        let fenced_at = open.fenced_at.unwrap_or(open.begun_at);
        self.line(client, || {
            format!(
                "db s{session}: COMMIT at {} of {} cycle(s) {}, rows written_at {}",
                format_us(now.micros),
                open.writes.len(),
                open.writes
                    .iter()
                    .map(|(lease, cycle_id, _)| format!(
                        "{}:{} token {}",
                        lease.owner(),
                        cycle_id,
                        lease.token()
                    ))
                    .collect::<Vec<_>>()
                    .join(", "),
                format_us(open.begun_at.micros)
            )
        });
        self.unlock(session, &open);
        Response::Committed {
            seq_first: seq_first.unwrap_or(0),
            fenced_at,
        }
    }

    async fn ensure_schema(&self, session: u64, client: &str) -> Response {
        let mut waited = false;
        loop {
            let state = self.durable.borrow().schema;
            match state {
                SchemaState::Present if waited => {
                    self.line(client, || {
                        format!("db s{session}: CREATE TABLE IF NOT EXISTS => 23505 (raced a concurrent creation)")
                    });
                    return server_error(
                        "23505",
                        "duplicate key value violates unique constraint \"pg_type_typname_nsp_index\"",
                    );
                }
                SchemaState::Present => return Response::SchemaReady,
                SchemaState::Creating { session: creator } => {
                    if !waited {
                        self.line(client, || {
                            format!("db s{session}: CREATE TABLE IF NOT EXISTS waits for s{creator}'s creation")
                        });
                    }
                    waited = true;
                    self.changed.notified().await;
                }
                SchemaState::Absent => {
                    self.durable.borrow_mut().schema = SchemaState::Creating { session };
                    self.line(client, || {
                        format!("db s{session}: CREATE TABLE IF NOT EXISTS creates the table")
                    });
                    tokio::time::sleep(self.config.schema_create).await;
                    let mut durable = self.durable.borrow_mut();
                    assert_eq!(durable.schema, SchemaState::Creating { session });
                    durable.schema = SchemaState::Present;
                    drop(durable);
                    self.changed.notify_waiters();
                    return Response::SchemaReady;
                }
            }
        }
    }
}

/// Connects to the database (a helper for the port).
pub async fn connect() -> std::io::Result<TcpStream> {
    TcpStream::connect((DB_HOST, DB_PORT)).await
}
