//! One run of lock clients in any language under a seeded fault plan.
//!
//! Goal: answer the question users bring — is my lock, in my language, safe
//! under pauses, crashes, partitions, restarts and skewed clocks? — with a
//! verdict of the one checker. Method: a fresh PostgreSQL database (the
//! maintenance table, and the store of PostgreSQL locks) and a throwaway
//! Redis; a [`FaultProxy`] per client and store; N client processes
//! ([`ClientProcess`]) each driven by a worker loop — acquire, a few writes
//! of rows through the client's own connection, release, with seeded pauses
//! between — while an injector strikes the seeded [`FaultPlan`]. leaseproof
//! stamps every invoke and completion on its own monotonic clock and records
//! the history; a client only answers. After the run the rows are read back
//! with their commit timestamps and [`leaseproof_history::check`] judges.
//! Invariant: the fault plan is a pure function of the seed and the shape;
//! the interleaving of real processes is not, and the report says so. Every
//! process, proxy, server and file the run started is gone when it returns.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaseproof_history::{
    check, Annotation, CheckConfig, CheckReport, EventKind, FailReason, GrantStamps, GuardedRow,
    History, Op, OpResult, Outcome, Recorder, Stamp, WorkRow,
};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use super::child::{ClientProcess, NoAnswer, StartError};
use super::effects::{loads_libfaketime, seen_gone, seen_stopped, ProcessEffects};
use super::moments::{until_onset, Moments};
use super::net::{FaultProxy, ProxyEffects};
use super::plan::{FaultKind, FaultPlan, Moment, PlanShape, Strike};
use super::wire::{FailKind, Message, Request, WireError};
use crate::clock::RunClock;

/// The table every client writes its maintenance rows into.
pub const ROWS_TABLE: &str = "leaseproof_client_rows";

/// The lock every client contends for (its table name).
pub const LOCKED_TABLE: &str = "orders";

const ROWS_DDL: &str = "CREATE TABLE leaseproof_client_rows (
    seq bigserial PRIMARY KEY,
    scope text NOT NULL,
    owner text NOT NULL,
    token bigint,
    cycle_id bigint NOT NULL,
    item integer NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
)";

/// How long a worker held at its grant waits for the strike that took the
/// moment to begin (a signal or a query: milliseconds, unless the machine
/// stalls).
const ONSET_PATIENCE: Duration = Duration::from_secs(5);

/// What a client run is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRunConfig {
    /// The client's command line, run by `sh -c` once per incarnation.
    pub command: String,
    /// How many client processes contend.
    pub clients: usize,
    /// The seed of the fault plan and of the workers' choices.
    pub seed: u64,
    /// How long workers start new acquisitions.
    pub duration: Duration,
    /// The TTL asked of locks that have one.
    pub ttl: Duration,
    /// The fault kinds a seed may turn on.
    pub faults: Vec<FaultKind>,
    /// How long a starting client may take to print its hello.
    pub hello_timeout: Duration,
}

impl ClientRunConfig {
    /// A run of `command` with the defaults: 3 clients, 12 s, TTL 3 s, every fault.
    pub fn new(command: impl Into<String>, seed: u64) -> ClientRunConfig {
        ClientRunConfig {
            command: command.into(),
            clients: 3,
            seed,
            duration: Duration::from_secs(12),
            ttl: Duration::from_secs(3),
            faults: FaultKind::ALL.to_vec(),
            hello_timeout: Duration::from_secs(30),
        }
    }

    /// The plan this configuration draws.
    pub fn plan(&self) -> FaultPlan {
        FaultPlan::draw(
            self.seed,
            &PlanShape {
                clients: self.clients,
                duration: self.duration,
                ttl: self.ttl,
                allowed: self.faults.clone(),
            },
        )
    }

    /// How long a request may go unanswered before the client is taken for
    /// hung (then it is killed and restarted): past every pause or partition
    /// the plan can draw.
    fn request_timeout(&self) -> Duration {
        self.ttl * 4 + Duration::from_secs(5)
    }
}

/// A run that could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum ClientRunError {
    /// A store could not be had.
    #[error("{0}")]
    Store(String),
    /// A client could not be started or did not greet.
    #[error("client did not start: {0}")]
    Start(#[from] StartError),
    /// A client printed something that is not the protocol: bad input, not judged.
    #[error("bad client output (not judged): {0}")]
    Protocol(#[from] WireError),
    /// The clients' answers, each well-formed, make a history the format
    /// refuses (a grant that expires before it starts, say): what
    /// `leaseproof check` would refuse is not judged here either.
    #[error("the clients' answers make a history the format refuses (not judged): {0}")]
    Malformed(String),
}

/// The history as `leaseproof check` reads it, refused where the file
/// would be, the offending event named as the client said it: its worker,
/// the request's `msg_id` and type, and the answer's field in the protocol's
/// words (`lifetime_ms`, not the history's `lifetime_us`).
fn refuse_malformed(
    history: &History,
    requests: &BTreeMap<u64, (u64, &'static str)>,
) -> Result<(), ClientRunError> {
    let Err(error) = History::from_json_lines(&history.to_json_lines()) else {
        return Ok(());
    };
    let mut message = error.to_string();
    if let leaseproof_history::HistoryError::Invalid {
        line_number, field, ..
    } = error
    {
        // The design's line (if any) comes first, then the events, one a line.
        let first_event_line = 1 + usize::from(history.design.is_some());
        let event = line_number
            .checked_sub(first_event_line)
            .and_then(|index| history.events.get(index));
        if let Some(event) = event {
            let request = match &event.kind {
                EventKind::Invoke { op_id, .. } | EventKind::Complete { op_id, .. } => {
                    requests.get(op_id)
                }
                _ => None,
            };
            let answer_field =
                field
                    .strip_prefix("kind.outcome.result.")
                    .map(|field| match field {
                        "lifetime_us" => "lifetime_ms",
                        field => field,
                    });
            message = match (request, answer_field) {
                (Some((msg_id, kind)), Some(answer_field)) => format!(
                    "{message} (field `{answer_field}` of {} incarnation {}'s answer to \
                     msg_id {msg_id}, {kind})",
                    event.worker, event.incarnation
                ),
                (Some((msg_id, kind)), None) => format!(
                    "{message} ({} incarnation {}'s answer to msg_id {msg_id}, {kind})",
                    event.worker, event.incarnation
                ),
                (None, _) => format!(
                    "{message} (an answer to {} incarnation {})",
                    event.worker, event.incarnation
                ),
            };
        }
    }
    Err(ClientRunError::Malformed(message))
}

/// What one worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Ok acquisitions.
    pub grants: u64,
    /// Acquisitions refused as held.
    pub refusals: u64,
    /// Writes answered ok.
    pub writes: u64,
    /// Writes refused (stale or error).
    pub writes_refused: u64,
    /// Requests without a definite answer.
    pub unknowns: u64,
    /// Lost notices received.
    pub lost_notices: u64,
    /// Processes started (1 + restarts).
    pub incarnations: u64,
    /// The longest a process took from its start to its hello, ms.
    pub start_up_ms_max: u64,
    /// Processes whose hello came only after the run's duration was over.
    pub greeted_after_end: u64,
}

impl WorkerTally {
    fn absorb(&mut self, other: &WorkerTally) {
        self.grants += other.grants;
        self.refusals += other.refusals;
        self.writes += other.writes;
        self.writes_refused += other.writes_refused;
        self.unknowns += other.unknowns;
        self.lost_notices += other.lost_notices;
        self.incarnations += other.incarnations;
        self.start_up_ms_max = self.start_up_ms_max.max(other.start_up_ms_max);
        self.greeted_after_end += other.greeted_after_end;
    }
}

/// The judged run.
#[derive(Debug)]
pub struct ClientRunReport {
    /// The design's name from its hello.
    pub design: String,
    /// The plan that struck.
    pub plan: FaultPlan,
    /// What struck whom (holder-first strikes name whom they found).
    pub strikes: Vec<String>,
    /// Strikes that could not act (no Redis, no process at that moment).
    pub strikes_skipped: Vec<String>,
    /// Totals over the workers.
    pub tally: WorkerTally,
    /// Distinct incarnations that were granted the lock.
    pub distinct_winners: usize,
    /// What the proxies between the clients and their stores did: replies
    /// dropped, traffic a partition held back, chunks delayed, connections
    /// reset (a strike that found nothing to act on counts nothing).
    pub proxy_effects: ProxyEffects,
    /// What the process strikes did, seen from outside: processes seen
    /// stopped and gone, backends terminated, Redis processes replaced,
    /// clients running on libfaketime.
    pub process_effects: ProcessEffects,
    /// Clients that exited by themselves while a request waited on them —
    /// a crash of the client's own, not a strike: who, the status, the
    /// end of its stderr.
    pub own_exits: Vec<String>,
    /// Requests a client left unanswered past the run's patience (4 × TTL
    /// plus 5 s, beyond every pause and partition): a hang of the client's
    /// own, recorded unknown like a lost reply, the process replaced.
    pub unanswered: Vec<String>,
    /// The recorded history, rows included.
    pub history: History,
    /// The checker's verdict.
    pub report: CheckReport,
    /// When every client's first process had greeted, on the run's clock
    /// (ms): the held start, from which the plan's times and the duration count.
    pub started_after_ms: u64,
    /// The strikes that acted, each where it landed on the history's clock
    /// and on its victim's lanes: the timeline draws them beside the
    /// evidence (the history file does not carry them).
    pub marks: Vec<Annotation>,
}

impl ClientRunReport {
    /// Why the run proved little: no contention, no writes.
    pub fn vacuity(&self) -> Option<String> {
        let reason = if self.distinct_winners < 2 {
            format!(
                "vacuous: {} distinct winner(s), need 2",
                self.distinct_winners
            )
        } else if self.tally.writes == 0 {
            "vacuous: no write was answered ok".to_string()
        } else {
            return None;
        };
        // The duration counts from the held start, when every first process
        // had greeted; a process restarted after a strike starts up inside
        // it, and a slow one may have had little or no time to contend.
        let start_up = match (self.tally.greeted_after_end, self.own_exits.len()) {
            (0, _) => String::new(),
            // Restarted because the client exited by itself: a longer run
            // would only restart it more often.
            (late, exits @ 1..) => format!(
                " ({late} restarted client process(es) said hello only after the run's duration \
                 was over, after {exits} exit(s) of the client's own: see the crash lines)"
            ),
            (late, 0) => format!(
                " ({late} restarted client process(es) said hello only after the run's duration \
                 was over; the slowest start-up of any process took {} ms: give a longer \
                 --duration-ms)",
                self.tally.start_up_ms_max
            ),
        };
        Some(format!("{reason}{start_up}"))
    }

    /// No violation and not vacuous.
    pub fn passed(&self) -> bool {
        self.report.is_ok() && self.vacuity().is_none()
    }
}

/// Per worker: its current process and what it believes.
struct Slot {
    process: tokio::sync::Mutex<Option<ClientProcess>>,
    /// The process group of the current incarnation, for the injector's
    /// signals without waiting on a request in flight.
    pgid: AtomicU64,
    /// The process group paused now and how many pauses hold it stopped:
    /// overlapping pauses make one, which ends (SIGCONT) only when the last
    /// of them does. A new incarnation starts unpaused.
    pauses: Mutex<(u32, u64)>,
    belief: Arc<Mutex<Belief>>,
    proxies: Vec<FaultProxy>,
    /// How many replies completing a statement the client's last write
    /// answered `ok` took on the work store (0: none seen yet): where a
    /// stall can split a write.
    write_statements: AtomicU64,
    /// How many of those completed a read (a `SELECT`: a check to split the
    /// write after).
    write_reads: AtomicU64,
    /// Until when (the run's clock, µs) a holder cut off from its lock
    /// store is asked to work on: it writes until then, unless refused.
    work_until_us: AtomicI64,
}

#[derive(Debug, Default)]
struct Belief {
    incarnation: u64,
    /// (scope, token) believed held.
    held: Option<(String, u64)>,
    /// The incarnation was killed or its process ended: an answer read
    /// after that (it was in the pipe) starts no belief that outlives it.
    ended: bool,
    lost_notices: u64,
}

struct Run {
    config: ClientRunConfig,
    clock: RunClock,
    recorder: Recorder,
    slots: Vec<Slot>,
    database_url: String,
    redis: Option<Arc<Mutex<leaseproof_redis_server::RedisServer>>>,
    dir: tempfile::TempDir,
    protocol_error: Mutex<Option<WireError>>,
    start_error: Mutex<Option<StartError>>,
    hello: Mutex<Option<super::child::Hello>>,
    process_effects: Mutex<ProcessEffects>,
    /// Clients that exited by themselves mid-request (no strike's signal).
    own_exits: Mutex<Vec<String>>,
    /// Requests left unanswered until the run's patience ran out.
    unanswered: Mutex<Vec<String>>,
    /// The strikes that acted, where they landed on the history's clock.
    marks: Mutex<Vec<Annotation>>,
    /// When the plan's clock starts.
    start: HeldStart,
    /// Each recorded operation's request, by op id: its `msg_id` and type,
    /// so a refusal names what the client was answering.
    requests: Mutex<BTreeMap<u64, (u64, &'static str)>>,
    /// The strikes waiting for a protocol moment.
    moments: Moments,
}

/// One worker's place at the held start: it arrives once, when its first
/// process greeted, or when it is dropped without (a start error, a panic),
/// so that nobody waits for a worker that will never greet.
struct Arrival<'a> {
    run: &'a Run,
    arrived: bool,
}

impl Arrival<'_> {
    /// Arrives (once) and waits for the others; the start on the run clock, µs.
    async fn arrive_and_wait(&mut self) -> i64 {
        if !self.arrived {
            self.arrived = true;
            self.run.start.arrive(self.run.clock);
        }
        self.run.start.at_us().await
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if !self.arrived {
            self.run.start.arrive(self.run.clock);
        }
    }
}

/// The run's held start: the plan's times and its duration count from the
/// moment every client's first process greeted (or could not start), so a
/// slow start-up eats no strike and no contention, and the clients begin
/// together, as the racing tasks do.
struct HeldStart {
    /// First processes yet to greet.
    waiting: AtomicUsize,
    /// The run clock's reading at the start, once everyone arrived.
    at_us: tokio::sync::watch::Sender<Option<i64>>,
}

impl HeldStart {
    fn new(clients: usize) -> HeldStart {
        HeldStart {
            waiting: AtomicUsize::new(clients),
            at_us: tokio::sync::watch::Sender::new(None),
        }
    }

    /// A first process greeted or could not start; the last one starts the run.
    fn arrive(&self, clock: RunClock) {
        let before = self.waiting.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "more arrivals than clients");
        if before == 1 {
            self.at_us.send_replace(Some(clock.elapsed_us()));
        }
    }

    /// The start on the run clock, µs; waits until everyone arrived.
    async fn at_us(&self) -> i64 {
        let mut start = self.at_us.subscribe();
        let at_us = *start
            .wait_for(Option::is_some)
            .await
            .expect("the run owns the sender");
        at_us.expect("waited for a start")
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `scheme://[userinfo@]host:port/rest` with host:port replaced by `addr`.
pub fn with_address(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, ""),
    };
    let userinfo = authority.rsplit_once('@').map(|(userinfo, _)| userinfo);
    match userinfo {
        Some(userinfo) => format!("{scheme}://{userinfo}@{addr}{path}"),
        None => format!("{scheme}://{addr}{path}"),
    }
}

/// The loopback address of a URL's host:port (`localhost` is 127.0.0.1).
fn address_of(url: &str, default_port: u16) -> Result<std::net::SocketAddr, String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse().map_err(|_| format!("bad port in {url}"))?,
        ),
        None => (host_port, default_port),
    };
    let ip: std::net::IpAddr = match host {
        "localhost" | "" => std::net::Ipv4Addr::LOCALHOST.into(),
        host => host
            .parse()
            .map_err(|_| format!("{host}: the client harness needs a loopback address"))?,
    };
    if !ip.is_loopback() {
        return Err(format!("{ip}: the fault proxy forwards to loopback only"));
    }
    Ok(std::net::SocketAddr::new(ip, port))
}

/// Runs the clients of `config` and judges their history.
pub async fn run_clients(config: ClientRunConfig) -> Result<ClientRunReport, ClientRunError> {
    assert!(config.clients >= 1);
    let plan = config.plan();
    let database = leaseproof_pgcluster::shared_server()
        .await
        .map_err(|unavailable| {
            ClientRunError::Store(leaseproof_pgcluster::skip_line(&unavailable))
        })?
        .fresh_database()
        .await
        .map_err(|error| ClientRunError::Store(format!("fresh database: {error}")))?;
    let mut admin = database
        .connect()
        .await
        .map_err(|error| ClientRunError::Store(format!("connect: {error}")))?;
    sqlx::query(ROWS_DDL)
        .execute(&mut admin)
        .await
        .map_err(|error| ClientRunError::Store(format!("{ROWS_TABLE}: {error}")))?;
    let redis =
        match leaseproof_redis_server::RedisServer::start_throwaway_with(plan.redis_persistent) {
            Ok(server) => Some(server),
            Err(error) if leaseproof_redis_server::require_redis() => {
                return Err(ClientRunError::Store(format!("redis-server: {error}")));
            }
            Err(_) => None,
        };
    let pg_upstream = address_of(&database.url, 5432).map_err(ClientRunError::Store)?;
    let redis_upstream = match &redis {
        Some(server) => Some(address_of(&server.url, 6379).map_err(ClientRunError::Store)?),
        None => None,
    };
    let mut slots = Vec::new();
    for _ in 0..config.clients {
        let mut proxies = vec![FaultProxy::start_postgres(pg_upstream)
            .await
            .map_err(|error| ClientRunError::Store(format!("proxy: {error}")))?];
        if let Some(upstream) = redis_upstream {
            proxies.push(
                FaultProxy::start(upstream)
                    .await
                    .map_err(|error| ClientRunError::Store(format!("proxy: {error}")))?,
            );
        }
        slots.push(Slot {
            process: tokio::sync::Mutex::new(None),
            pgid: AtomicU64::new(0),
            pauses: Mutex::new((0, 0)),
            belief: Arc::default(),
            proxies,
            write_statements: AtomicU64::new(0),
            write_reads: AtomicU64::new(0),
            work_until_us: AtomicI64::new(0),
        });
    }
    let dir = tempfile::Builder::new()
        .prefix("leaseproof-clients-")
        .tempdir()
        .map_err(|error| ClientRunError::Store(format!("temp dir: {error}")))?;
    // Before any client exists: should this process die without unwinding
    // (SIGKILL), the clients (paused ones included) and the dir still go.
    spawn_watchdog(dir.path()).map_err(ClientRunError::Store)?;
    let run = Arc::new(Run {
        config: config.clone(),
        clock: RunClock::start(),
        recorder: Recorder::new(),
        slots,
        database_url: database.url.clone(),
        redis: redis.map(|server| Arc::new(Mutex::new(server))),
        dir,
        protocol_error: Mutex::new(None),
        start_error: Mutex::new(None),
        hello: Mutex::new(None),
        process_effects: Mutex::new(ProcessEffects::default()),
        own_exits: Mutex::new(Vec::new()),
        requests: Mutex::new(BTreeMap::new()),
        marks: Mutex::new(Vec::new()),
        unanswered: Mutex::new(Vec::new()),
        moments: Moments::default(),
        start: HeldStart::new(config.clients),
    });

    let injector = tokio::spawn(inject(Arc::clone(&run), plan.clone()));
    let mut workers = Vec::new();
    for index in 0..config.clients {
        workers.push(tokio::spawn(drive(Arc::clone(&run), index)));
    }
    // Dropping this run (an interrupt) cancels its tasks: the last `Run`
    // goes, and with it every client process group and the temp dir.
    let _tasks = AbortOnDrop(
        workers
            .iter()
            .map(tokio::task::JoinHandle::abort_handle)
            .chain([injector.abort_handle()])
            .collect(),
    );
    let mut tally = WorkerTally::default();
    for worker in workers {
        if let Ok(worker_tally) = worker.await {
            tally.absorb(&worker_tally);
        }
    }
    let (strikes, strikes_skipped) = injector.await.unwrap_or_default();
    for slot in &run.slots {
        if let Some(process) = slot.process.lock().await.take() {
            process.stop(Duration::from_secs(2)).await;
        }
    }
    if let Some(error) = lock(&run.protocol_error).take() {
        return Err(ClientRunError::Protocol(error));
    }
    if let Some(error) = lock(&run.start_error).take() {
        return Err(ClientRunError::Start(error));
    }

    let mut history = run.recorder.snapshot();
    read_rows(&mut admin, &mut history)
        .await
        .map_err(|error| ClientRunError::Store(format!("reading {ROWS_TABLE}: {error}")))?;
    let hello = lock(&run.hello).clone();
    let grant_stamps = match hello
        .as_ref()
        .and_then(|hello| hello.grant_stamps.as_deref())
    {
        Some("decision") => GrantStamps::Decision,
        _ => GrantStamps::StatementStart,
    };
    let design = CheckConfig {
        grant_stamps,
        ..CheckConfig::default()
    };
    refuse_malformed(&history, &lock(&run.requests))?;
    let report = check(&history, &design);
    // Saved with the history: `leaseproof check` judges it as the run did.
    history.design = Some(design);
    let mut winners: Vec<(&str, u64)> = Vec::new();
    for event in &history.events {
        if let EventKind::BeliefStart { .. } = event.kind {
            winners.push((event.worker.as_str(), event.incarnation));
        }
    }
    winners.sort_unstable();
    winners.dedup();
    let distinct_winners = winners.len();
    let mut proxy_effects = ProxyEffects::default();
    for proxy in run.slots.iter().flat_map(|slot| &slot.proxies) {
        proxy_effects.absorb(proxy.effects());
    }
    let process_effects = *lock(&run.process_effects);
    let own_exits = std::mem::take(&mut *lock(&run.own_exits));
    let unanswered = std::mem::take(&mut *lock(&run.unanswered));
    let mut marks = std::mem::take(&mut *lock(&run.marks));
    marks.sort_by_key(|mark| mark.true_time_us);
    drop(admin);
    drop(database);
    Ok(ClientRunReport {
        design: hello.map_or_else(String::new, |hello| hello.name),
        plan,
        strikes,
        strikes_skipped,
        tally,
        distinct_winners,
        proxy_effects,
        process_effects,
        own_exits,
        unanswered,
        history,
        report,
        started_after_ms: u64::try_from(run.start.at_us().await / 1_000).unwrap_or(0),
        marks,
    })
}

/// A row of the rows table as read: seq, scope, owner, token, cycle id,
/// item, written at (µs), committed at (µs, if tracked).
type RowRecord = (i64, String, String, Option<i64>, i64, i32, i64, Option<i64>);

/// Reads the rows back: a write under a lease (a `commit`) becomes a guarded
/// row, any other a work row; commit times from `pg_xact_commit_timestamp`.
async fn read_rows(
    admin: &mut sqlx::PgConnection,
    history: &mut History,
) -> Result<(), sqlx::Error> {
    // track_commit_timestamp may be off on a server the user brought: then
    // the commit times are absent and the report says what was not judged.
    let tracked: String = sqlx::query_scalar("SHOW track_commit_timestamp")
        .fetch_one(&mut *admin)
        .await?;
    let committed = if tracked == "on" {
        "(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8"
    } else {
        "NULL::int8"
    };
    let rows: Vec<RowRecord> = sqlx::query_as(&format!(
        "SELECT seq, scope, owner, token, cycle_id, item, \
         (extract(epoch FROM written_at) * 1000000)::int8, {committed} \
         FROM {ROWS_TABLE} ORDER BY seq"
    ))
    .fetch_all(&mut *admin)
    .await?;
    // One table holds both kinds of row: it was read for both.
    history.tables_read.guarded = true;
    history.tables_read.work = true;
    let commits: std::collections::BTreeSet<(String, u64)> = history
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Invoke {
                op: Op::Commit {
                    owner, cycle_id, ..
                },
                ..
            } => Some((owner.clone(), *cycle_id)),
            _ => None,
        })
        .collect();
    for (seq, scope, owner, token, cycle_id, item, written_at_us, committed_at_us) in rows {
        let (seq, cycle_id) = (seq.unsigned_abs(), cycle_id.unsigned_abs());
        let item = item.unsigned_abs();
        match token {
            Some(token) if commits.contains(&(owner.clone(), cycle_id)) => {
                history.guarded_rows.push(GuardedRow {
                    seq,
                    scope,
                    owner,
                    token: token.unsigned_abs(),
                    cycle_id,
                    item,
                    written_at_us,
                    committed_at_us,
                });
            }
            _ => history.work_rows.push(WorkRow {
                seq,
                scope,
                owner,
                cycle_id,
                item,
                committed_at_us,
            }),
        }
    }
    fill_commit_times(history);
    Ok(())
}

/// A commit answered ok without its server time gets the latest commit time
/// of its rows, read from the store: the evidence, not the client's word.
fn fill_commit_times(history: &mut History) {
    let mut commit_times: std::collections::BTreeMap<(String, u64), i64> = Default::default();
    for row in &history.guarded_rows {
        if let Some(committed_at_us) = row.committed_at_us {
            let latest = commit_times
                .entry((row.owner.clone(), row.cycle_id))
                .or_insert(committed_at_us);
            *latest = (*latest).max(committed_at_us);
        }
    }
    let mut cycles: std::collections::BTreeMap<u64, (String, u64)> = Default::default();
    for event in &history.events {
        if let EventKind::Invoke {
            op_id,
            op: Op::Commit {
                owner, cycle_id, ..
            },
        } = &event.kind
        {
            cycles.insert(*op_id, (owner.clone(), *cycle_id));
        }
    }
    for event in &mut history.events {
        if let EventKind::Complete {
            op_id,
            outcome:
                Outcome::Ok {
                    result: OpResult::Committed { committed_at_us },
                },
        } = &mut event.kind
        {
            if committed_at_us.is_none() {
                if let Some(time) = cycles.get(op_id).and_then(|cycle| commit_times.get(cycle)) {
                    *committed_at_us = Some(*time);
                }
            }
        }
    }
}

impl Run {
    fn stamp_now(&self, worker: &str, incarnation: u64) -> (i64, String, u64) {
        (self.clock.elapsed_us(), worker.to_string(), incarnation)
    }

    fn record(&self, worker: &str, incarnation: u64, kind: EventKind) {
        let now = self.clock.elapsed_us();
        self.recorder.record(stamp(worker, incarnation, now), kind);
    }

    fn client_env(&self, index: usize, incarnation: u64) -> Vec<(String, String)> {
        let slot = &self.slots[index];
        let mut env = vec![
            ("LEASEPROOF_WORKER".to_string(), format!("w{index}")),
            (
                "LEASEPROOF_INCARNATION".to_string(),
                incarnation.to_string(),
            ),
            (
                "LEASEPROOF_DATABASE_URL".to_string(),
                with_address(&self.database_url, slot.proxies[0].local_addr()),
            ),
            ("LEASEPROOF_ROWS_TABLE".to_string(), ROWS_TABLE.to_string()),
            ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
            // Marks every process of this run, for the watchdog.
            (
                RUN_MARKER_ENV.to_string(),
                self.dir.path().display().to_string(),
            ),
        ];
        if let (Some(redis), Some(proxy)) = (&self.redis, slot.proxies.get(1)) {
            let url = lock(redis).url.clone();
            env.push((
                "LEASEPROOF_REDIS_URL".to_string(),
                with_address(&url, proxy.local_addr()),
            ));
        }
        env
    }
}

/// Set to the run's temp dir in every client's environment: the mark by
/// which the watchdog finds this run's processes and no one else's.
const RUN_MARKER_ENV: &str = "LEASEPROOF_CLIENT_RUN";

/// Aborts the run's tasks when the run is dropped before they finish.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Once this process is gone, kills every process whose environment carries
/// this run's mark (continued first: a paused one must not outlive the run)
/// and removes `dir` — three passes a second apart, for a client that was
/// being restarted as we died. Detached, in its own process group.
fn spawn_watchdog(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    let dir = dir.display().to_string().replace('\'', "'\\''");
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; \
         for attempt in 1 2 3; do \
           for environ in /proc/[0-9]*/environ; do \
             if tr '\\0' '\\n' < \"$environ\" 2>/dev/null | grep -qxF '{RUN_MARKER_ENV}={dir}'; then \
               pid=${{environ#/proc/}}; pid=${{pid%/environ}}; \
               kill -CONT $pid 2>/dev/null; kill -KILL $pid 2>/dev/null; \
             fi; \
           done; \
           rm -rf '{dir}'; sleep 1; \
         done",
        me = std::process::id(),
    );
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|error| format!("cleanup watchdog: {error}"))
}

fn stamp(worker: &str, incarnation: u64, true_time_us: i64) -> Stamp<'_> {
    Stamp {
        worker,
        incarnation,
        true_time_us,
        local_time_us: true_time_us,
    }
}

/// libfaketime's library, where Debian puts it.
pub fn libfaketime() -> Option<std::path::PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|path| path.exists())
}

/// Starts incarnation `incarnation` of worker `index`.
async fn start_client(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    plan_clock: Option<super::plan::ClockSkew>,
) -> Result<ClientProcess, StartError> {
    let worker = format!("w{index}");
    let mut env = run.client_env(index, incarnation);
    let mut skewed = false;
    if let (Some(clock), Some(library)) = (plan_clock, libfaketime()) {
        skewed = true;
        env.push(("LD_PRELOAD".to_string(), library.display().to_string()));
        env.push(("FAKETIME".to_string(), clock.faketime()));
        // Each process start reads FAKETIME afresh; no cache between reads.
        env.push(("FAKETIME_NO_CACHE".to_string(), "1".to_string()));
    }
    let belief = Arc::clone(&run.slots[index].belief);
    let lost_run = Arc::clone(run);
    let lost_worker = worker.clone();
    let on_lost = Box::new(move |table: &str, text: Option<&str>| {
        // Stamped and recorded under the worker's belief lock, so the
        // worker's events stay in time order.
        let mut belief = lock(&belief);
        belief.lost_notices += 1;
        if let Some((scope, token)) = belief.held.take() {
            if scope == table {
                lost_run.record(
                    &lost_worker,
                    belief.incarnation,
                    EventKind::BeliefEnd {
                        scope,
                        token,
                        reason: format!("lost: {}", text.unwrap_or("the lock said so")),
                    },
                );
            } else {
                belief.held = Some((scope, token));
            }
        }
    });
    let exit_run = Arc::clone(run);
    // Only this incarnation's belief: a successor may hold by then.
    let on_exit =
        Box::new(move || end_incarnation(&exit_run, index, Some(incarnation), "the process ended"));
    let process = ClientProcess::start(
        format!("{worker} (incarnation {incarnation})"),
        &run.config.command,
        &env,
        run.dir
            .path()
            .join(format!("{worker}.{incarnation}.stderr")),
        run.config.hello_timeout,
        on_lost,
        on_exit,
    )
    .await?;
    run.slots[index]
        .pgid
        .store(u64::from(process.pgid()), Ordering::SeqCst);
    if skewed && loads_libfaketime(process.pgid()) {
        lock(&run.process_effects).clients_skewed += 1;
    }
    let mut hello = lock(&run.hello);
    if hello.is_none() {
        *hello = Some(process.hello.clone());
    }
    Ok(process)
}

/// What a request came back with, as the history records it.
enum Answer {
    Message(Message),
    /// No answer: recorded unknown; the process is replaced.
    Lost(String),
}

/// A request's answer once its failure or unknown outcome is recorded.
enum Reply {
    /// `ok`, with its fields; the caller records the result it implies.
    Ok(Message),
    /// `fail`, recorded.
    Failed(FailReason),
    /// No definite answer, recorded unknown: the process must be replaced
    /// (a client that cannot tell whether it holds the lock starts clean).
    Replace,
}

/// How one round of a worker ended.
enum Round {
    /// Go on with the same process.
    Again,
    /// Replace the process: a new incarnation.
    Replace,
}

/// One worker's state across its incarnations.
struct Worker {
    run: Arc<Run>,
    index: usize,
    incarnation: u64,
    msg_id: u64,
    cycle_id: u64,
    renews: bool,
    rng: ChaCha8Rng,
    tally: WorkerTally,
}

/// The result an `ok` to an acquisition or renewal reports: a lease when it
/// carries a token and both server times, else a lock.
fn grant_result(owner: &str, answer: &Message) -> OpResult {
    let Message::Ok {
        token,
        lifetime_ms,
        granted_at_us,
        expires_at_us,
        ..
    } = answer
    else {
        unreachable!("only ok answers report grants");
    };
    match (token, granted_at_us, expires_at_us) {
        (Some(token), Some(granted_at_us), Some(expires_at_us)) => OpResult::Lease {
            token: *token,
            owner: owner.to_string(),
            granted_at_us: *granted_at_us,
            expires_at_us: *expires_at_us,
        },
        _ => OpResult::Lock {
            token: *token,
            lifetime_us: lifetime_ms.map(|ms| micros(Duration::from_millis(ms))),
        },
    }
}

impl Worker {
    fn owner(&self) -> String {
        format!("w{}.{}", self.index, self.incarnation)
    }

    fn next_msg_id(&mut self) -> u64 {
        self.msg_id += 1;
        self.msg_id
    }

    /// Sends `request`, records `op`'s invoke, and its outcome unless `ok`.
    async fn ask(&mut self, request: &Request, op: Op) -> (Reply, u64) {
        let timeout = self.run.config.request_timeout();
        let (answer, op_id) = exchange(
            &self.run,
            self.index,
            self.incarnation,
            request,
            op,
            timeout,
        )
        .await;
        let reply = match answer {
            Answer::Message(message @ Message::Ok { .. }) => Reply::Ok(message),
            Answer::Message(Message::Fail { reason, text, .. }) => {
                let reason = fail_reason(reason, text);
                self.complete(
                    op_id,
                    Outcome::Fail {
                        reason: reason.clone(),
                    },
                    None,
                );
                Reply::Failed(reason)
            }
            Answer::Message(message) => {
                unknown_or_misfit(
                    &self.run,
                    self.index,
                    self.incarnation,
                    op_id,
                    message,
                    &mut self.tally,
                );
                Reply::Replace
            }
            Answer::Lost(reason) => {
                record_unknown(
                    &self.run,
                    self.index,
                    self.incarnation,
                    op_id,
                    reason,
                    &mut self.tally,
                );
                Reply::Replace
            }
        };
        (reply, op_id)
    }

    fn complete(&self, op_id: u64, outcome: Outcome, believe: Option<(String, u64)>) {
        complete(
            &self.run,
            self.index,
            self.incarnation,
            op_id,
            outcome,
            believe,
        );
    }

    async fn pause_ms(&mut self, range: std::ops::Range<u64>) {
        tokio::time::sleep(Duration::from_millis(self.rng.gen_range(range))).await;
    }

    /// One round: acquire; if granted, a few writes (renewing after each when
    /// the client renews) and a release.
    async fn round(&mut self) -> Round {
        let (owner, table) = (self.owner(), LOCKED_TABLE.to_string());
        let msg_id = self.next_msg_id();
        let request = Request::Acquire {
            msg_id,
            table: table.clone(),
            owner: owner.clone(),
            ttl_ms: millis(self.run.config.ttl),
        };
        let op = Op::Acquire {
            scope: table.clone(),
            owner: owner.clone(),
            ttl_us: micros(self.run.config.ttl),
        };
        let (granted, is_lease) = match self.ask(&request, op).await {
            (Reply::Ok(answer), op_id) => {
                let result = grant_result(&owner, &answer);
                let token = match &result {
                    OpResult::Lease { token, .. } => Some(*token),
                    OpResult::Lock { token, .. } => *token,
                    _ => None,
                };
                let is_lease = matches!(result, OpResult::Lease { .. });
                self.complete(
                    op_id,
                    Outcome::Ok { result },
                    Some((table.clone(), token.unwrap_or(0))),
                );
                self.tally.grants += 1;
                // A strike aimed at this grant begins before the next request.
                if let Some(onset) = self.run.moments.reached(Moment::Granted, self.index) {
                    until_onset(onset, ONSET_PATIENCE).await;
                }
                (token, is_lease)
            }
            (Reply::Failed(reason), _) => {
                if reason == FailReason::Held {
                    self.tally.refusals += 1;
                }
                // Refused: back off a little, seeded.
                self.pause_ms(20..200).await;
                return Round::Again;
            }
            (Reply::Replace, _) => return Round::Replace,
        };
        if let Round::Replace = self.writes(&owner, granted, is_lease).await {
            return Round::Replace;
        }
        let round = self.release(&owner, granted, is_lease).await;
        self.pause_ms(20..300).await;
        round
    }

    /// One to three writes under the grant — more, while its lock store is
    /// cut off and the holder is asked to work on; stops at the first
    /// refusal.
    async fn writes(&mut self, owner: &str, token: Option<u64>, is_lease: bool) -> Round {
        let table = LOCKED_TABLE.to_string();
        let drawn = self.rng.gen_range(1..=3);
        let (run, index) = (Arc::clone(&self.run), self.index);
        let working_on =
            || run.clock.elapsed_us() < run.slots[index].work_until_us.load(Ordering::SeqCst);
        let mut done = 0;
        while done < drawn || working_on() {
            done += 1;
            self.pause_ms(50..400).await;
            self.cycle_id += 1;
            let (cycle_id, items) = (self.cycle_id, self.rng.gen_range(1..=3));
            let msg_id = self.next_msg_id();
            let request = Request::Write {
                msg_id,
                table: table.clone(),
                owner: owner.to_string(),
                token,
                cycle_id,
                items,
            };
            let op = match (is_lease, token) {
                (true, Some(token)) => Op::Commit {
                    scope: table.clone(),
                    owner: owner.to_string(),
                    token,
                    cycle_id,
                    items,
                },
                _ => Op::Write {
                    scope: table.clone(),
                    owner: owner.to_string(),
                    cycle_id,
                    items,
                },
            };
            match self.ask(&request, op).await {
                (
                    Reply::Ok(Message::Ok {
                        committed_at_us, ..
                    }),
                    op_id,
                ) => {
                    let result = if is_lease {
                        // The client may not know it: the rows' commit times
                        // stand in (`fill_commit_times`).
                        OpResult::Committed { committed_at_us }
                    } else {
                        OpResult::Written {}
                    };
                    self.complete(op_id, Outcome::Ok { result }, None);
                    self.tally.writes += 1;
                }
                (Reply::Ok(_), _) => unreachable!("ask returns ok answers as ok"),
                (Reply::Failed(_), _) => {
                    self.tally.writes_refused += 1;
                    return Round::Again;
                }
                (Reply::Replace, _) => return Round::Replace,
            }
            if self.renews {
                match self.renew(owner, token).await {
                    Some(Round::Again) => {}
                    Some(Round::Replace) => return Round::Replace,
                    None => return Round::Again, // refused: the lock is lost
                }
            }
        }
        Round::Again
    }

    /// Renews the grant; `None` when the renewal was refused.
    async fn renew(&mut self, owner: &str, token: Option<u64>) -> Option<Round> {
        let msg_id = self.next_msg_id();
        let request = Request::Renew {
            msg_id,
            table: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
            ttl_ms: millis(self.run.config.ttl),
        };
        let op = Op::Renew {
            scope: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
            token: token.unwrap_or(0),
            ttl_us: micros(self.run.config.ttl),
        };
        match self.ask(&request, op).await {
            (Reply::Ok(answer), op_id) => {
                let result = grant_result(owner, &answer);
                self.complete(op_id, Outcome::Ok { result }, None);
                Some(Round::Again)
            }
            (Reply::Failed(_), _) => {
                end_belief(&self.run, self.index, "renewal refused");
                None
            }
            (Reply::Replace, _) => Some(Round::Replace),
        }
    }

    /// Releases the grant; the belief ends as the release is sent.
    async fn release(&mut self, owner: &str, token: Option<u64>, is_lease: bool) -> Round {
        let msg_id = self.next_msg_id();
        let request = Request::Release {
            msg_id,
            table: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
        };
        end_belief(&self.run, self.index, "released");
        let op = Op::Release {
            scope: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
            token: token.unwrap_or(0),
        };
        match self.ask(&request, op).await {
            (Reply::Ok(Message::Ok { released_at_us, .. }), op_id) => {
                let outcome = match (is_lease, released_at_us) {
                    (true, Some(released_at_us)) => Outcome::Ok {
                        result: OpResult::Released { released_at_us },
                    },
                    // A lease's release without its time cannot say where
                    // the grant ended: judged as if its outcome were unknown.
                    (true, None) => Outcome::Unknown {
                        reason: "release answered ok without released_at_us".to_string(),
                    },
                    (false, _) => Outcome::Ok {
                        result: OpResult::Unlocked {},
                    },
                };
                self.complete(op_id, outcome, None);
                Round::Again
            }
            (Reply::Ok(_), _) => unreachable!("ask returns ok answers as ok"),
            (Reply::Failed(_), _) => Round::Again,
            (Reply::Replace, _) => Round::Replace,
        }
    }
}

/// One worker: its client's incarnations, driven until the run's end.
async fn drive(run: Arc<Run>, index: usize) -> WorkerTally {
    let seed = run.config.seed ^ 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(index as u64 + 1);
    let clock_skew = run.config.plan().clocks[index];
    // Set at the held start: the run's end on its clock, µs.
    let mut deadline_us: Option<i64> = None;
    let before_end = |deadline_us: Option<i64>| {
        deadline_us.is_none_or(|deadline_us| run.clock.elapsed_us() < deadline_us)
    };
    let mut arrival = Arrival {
        run: &run,
        arrived: false,
    };
    let mut worker = Worker {
        run: Arc::clone(&run),
        index,
        incarnation: 0,
        msg_id: 0,
        cycle_id: 0,
        renews: false,
        rng: ChaCha8Rng::seed_from_u64(seed),
        tally: WorkerTally::default(),
    };
    let slot = &run.slots[index];
    'incarnations: while before_end(deadline_us) {
        if lock(&run.protocol_error).is_some() || lock(&run.start_error).is_some() {
            break;
        }
        {
            let mut belief = lock(&slot.belief);
            belief.incarnation = worker.incarnation;
            belief.ended = false;
        }
        let started_us = run.clock.elapsed_us();
        let process = match start_client(&run, index, worker.incarnation, clock_skew).await {
            Ok(process) => process,
            Err(error) => {
                lock(&run.start_error).get_or_insert(error);
                break;
            }
        };
        let greeted_us = run.clock.elapsed_us();
        let start_up_ms = u64::try_from((greeted_us - started_us) / 1_000).unwrap_or(0);
        worker.tally.start_up_ms_max = worker.tally.start_up_ms_max.max(start_up_ms);
        if deadline_us.is_some_and(|deadline_us| greeted_us >= deadline_us) {
            worker.tally.greeted_after_end += 1;
        }
        worker.tally.incarnations += 1;
        worker.renews = process.hello.renew;
        *slot.process.lock().await = Some(process);
        if deadline_us.is_none() {
            let start_us = arrival.arrive_and_wait().await;
            deadline_us = Some(start_us.saturating_add(micros(run.config.duration)));
            // Another client could not start or spoke garbage: the run is
            // refused, so nothing is asked of this one.
            if lock(&run.protocol_error).is_some() || lock(&run.start_error).is_some() {
                break;
            }
        }
        while before_end(deadline_us) {
            if let Round::Replace = worker.round().await {
                replace(&run, index).await;
                worker.incarnation += 1;
                continue 'incarnations;
            }
        }
        break;
    }
    drop(arrival);
    end_belief(&run, index, "run ended");
    let mut tally = worker.tally;
    tally.lost_notices = lock(&slot.belief).lost_notices;
    tally
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn fail_reason(kind: FailKind, text: Option<String>) -> FailReason {
    match kind {
        FailKind::Held => FailReason::Held,
        FailKind::Stale => FailReason::Stale,
        FailKind::Error => FailReason::Error(text.unwrap_or_default()),
    }
}

/// Sends `request`, recording its invoke and returning the answer and op id.
async fn exchange(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    request: &Request,
    op: Op,
    timeout: Duration,
) -> (Answer, u64) {
    let worker = format!("w{index}");
    let slot = &run.slots[index];
    let mut process = slot.process.lock().await;
    let op_id = {
        let _order = lock(&slot.belief);
        let (now, _, _) = run.stamp_now(&worker, incarnation);
        run.recorder.invoke(stamp(&worker, incarnation, now), op)
    };
    lock(&run.requests).insert(op_id, (request.msg_id(), request.kind()));
    let Some(client) = process.as_mut() else {
        return (Answer::Lost("no process".to_string()), op_id);
    };
    let in_flight = match request {
        Request::Write { .. } => Some(Moment::WriteInFlight),
        Request::Renew { .. } => Some(Moment::RenewalSent),
        _ => None,
    };
    // The request is out: the strike races the client, unwaited; the
    // onset's receiver is held while the request is in flight, so the strike
    // can tell that it still is.
    let mut in_flight_onset = None;
    let on_sent =
        || in_flight_onset = in_flight.and_then(|moment| run.moments.reached(moment, index));
    let completing_before = slot.proxies[0].replies_completing();
    let reading_before = slot.proxies[0].replies_reading();
    let answer = client.ask(request, timeout, on_sent).await;
    if in_flight == Some(Moment::WriteInFlight) {
        // A stall meant to split this write that has not begun never will.
        slot.proxies[0].disarm_stall();
        if let Ok(Message::Ok { .. }) = &answer {
            let statements = slot.proxies[0].replies_completing() - completing_before;
            slot.write_statements.store(statements, Ordering::SeqCst);
            let reads = slot.proxies[0].replies_reading() - reading_before;
            slot.write_reads.store(reads, Ordering::SeqCst);
        }
    }
    drop(in_flight_onset);
    let answer = match answer {
        Ok(message) => Answer::Message(message),
        Err(NoAnswer::Died) => {
            if let Some(code) = client.exit_code(Duration::from_millis(500)).await {
                let stderr = super::child::stderr_tail(&client.stderr_path, 6);
                lock(&run.own_exits).push(format!(
                    "{} exited with status {code} by itself, asked {}{stderr}",
                    client.label(),
                    request.kind()
                ));
            }
            Answer::Lost("the client process died".to_string())
        }
        Err(NoAnswer::TimedOut) => {
            lock(&run.unanswered).push(format!(
                "{} left its {} unanswered for {} ms",
                client.label(),
                request.kind(),
                timeout.as_millis()
            ));
            Answer::Lost(format!("no answer within {} ms", timeout.as_millis()))
        }
        Err(NoAnswer::Protocol(error)) => {
            lock(&run.protocol_error).get_or_insert(error);
            Answer::Lost("bad client output".to_string())
        }
    };
    (answer, op_id)
}

/// Records a completion; `believe` starts a belief in the same instant.
fn complete(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    op_id: u64,
    outcome: Outcome,
    believe: Option<(String, u64)>,
) {
    let worker = format!("w{index}");
    let mut belief = lock(&run.slots[index].belief);
    let now = run.clock.elapsed_us();
    run.recorder
        .complete(stamp(&worker, incarnation, now), op_id, outcome);
    if let Some((scope, token)) = believe {
        run.recorder.record(
            stamp(&worker, incarnation, now),
            EventKind::BeliefStart {
                scope: scope.clone(),
                token,
            },
        );
        if belief.ended && belief.incarnation == incarnation {
            // The grant's answer was read after its process was killed (or
            // exited): the holder is gone, and a session lock with it. Its
            // belief ends where it began; otherwise it would run on to the
            // next event recorded for this dead incarnation, and a rival
            // granted in between would look like a second certain holder.
            run.recorder.record(
                stamp(&worker, incarnation, now),
                EventKind::BeliefEnd {
                    scope,
                    token,
                    reason: "the process had ended before its answer was read".to_string(),
                },
            );
        } else {
            belief.held = Some((scope, token));
        }
    }
}

fn record_unknown(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    op_id: u64,
    reason: String,
    tally: &mut WorkerTally,
) {
    tally.unknowns += 1;
    complete(
        run,
        index,
        incarnation,
        op_id,
        Outcome::Unknown { reason },
        None,
    );
}

/// An `unknown` answer, or an answer that does not fit (e.g. `lost` cannot
/// answer): recorded unknown; true when the process must be replaced.
fn unknown_or_misfit(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    op_id: u64,
    message: Message,
    tally: &mut WorkerTally,
) -> bool {
    let reason = match message {
        Message::Unknown { text, .. } => {
            text.unwrap_or_else(|| "the client could not tell".to_string())
        }
        other => format!("unexpected answer {other:?}"),
    };
    record_unknown(run, index, incarnation, op_id, reason, tally);
    true
}

fn end_belief(run: &Arc<Run>, index: usize, reason: &str) {
    end_belief_of(run, index, None, reason);
}

/// The worker's process is gone (killed, replaced, or ended by itself): its
/// belief ends, and an answer still read from it starts none (`complete`).
/// Only `incarnation`'s, when given: a successor may hold by then.
fn end_incarnation(run: &Arc<Run>, index: usize, incarnation: Option<u64>, reason: &str) {
    {
        let mut belief = lock(&run.slots[index].belief);
        if incarnation.is_some_and(|incarnation| incarnation != belief.incarnation) {
            return;
        }
        belief.ended = true;
    }
    end_belief_of(run, index, incarnation, reason);
}

/// Ends the worker's belief, if it has one — of `incarnation` only, when given.
fn end_belief_of(run: &Arc<Run>, index: usize, incarnation: Option<u64>, reason: &str) {
    let worker = format!("w{index}");
    let mut belief = lock(&run.slots[index].belief);
    if incarnation.is_some_and(|incarnation| incarnation != belief.incarnation) {
        return;
    }
    if let Some((scope, token)) = belief.held.take() {
        let incarnation = belief.incarnation;
        run.record(
            &worker,
            incarnation,
            EventKind::BeliefEnd {
                scope,
                token,
                reason: reason.to_string(),
            },
        );
    }
}

/// Kills the worker's current process: its successor is a new incarnation.
async fn replace(run: &Arc<Run>, index: usize) {
    end_incarnation(run, index, None, "replaced");
    let slot = &run.slots[index];
    if let Some(mut process) = slot.process.lock().await.take() {
        process.kill().await;
    }
}

/// Whoever holds the lock now, or first within `patience`: a strike meant
/// for the holder that lands between two holds (or while clients still
/// start) waits for the next one rather than hit a bystander.
async fn holder_within(run: &Arc<Run>, patience: Duration) -> Option<usize> {
    let holder =
        || (0..run.slots.len()).find(|index| lock(&run.slots[*index].belief).held.is_some());
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(index) = holder() {
            return Some(index);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Strikes the plan; returns what struck and what could not act.
async fn inject(run: Arc<Run>, plan: FaultPlan) -> (Vec<String>, Vec<String>) {
    let mut struck = Vec::new();
    let mut skipped = Vec::new();
    let mut handles = Vec::new();
    let start_us = run.start.at_us().await;
    for strike in plan.strikes {
        let due = start_us.saturating_add(micros(strike.at));
        let now = run.clock.elapsed_us();
        if due > now {
            tokio::time::sleep(Duration::from_micros(u64::try_from(due - now).unwrap_or(0))).await;
        }
        let run = Arc::clone(&run);
        // Lasting faults run beside the next strikes.
        handles.push(tokio::spawn(
            async move { strike_once(&run, &strike).await },
        ));
    }
    for handle in handles {
        match handle.await {
            Ok(Ok(done)) => struck.push(done),
            Ok(Err(problem)) => skipped.push(problem),
            Err(error) => skipped.push(format!("a strike panicked: {error}")),
        }
    }
    (struck, skipped)
}

/// Whom `strike` hits (the holder, for a holder-first strike that finds
/// one), and the line that says so.
async fn aim(run: &Arc<Run>, strike: &Strike) -> (usize, String) {
    let looked_us = run.clock.elapsed_us();
    let holder = if strike.holder_first {
        // No later than the strike can still be over when the plan said.
        let over_by = run.config.duration * super::plan::STRIKES_OVER_BY_PERCENT as u32 / 100;
        let slack = over_by.saturating_sub(strike.at + strike.lasting);
        holder_within(run, run.config.ttl.min(slack)).await
    } else {
        None
    };
    let waited_ms = (run.clock.elapsed_us() - looked_us) / 1_000;
    let client = holder.unwrap_or(strike.client);
    let target = match (strike.kind, holder) {
        (FaultKind::RedisRestart, _) => String::new(),
        (_, Some(_)) => format!(" w{client} (the holder)"),
        (_, None) => format!(" w{client}"),
    };
    let planned_ms = strike.at.as_millis();
    // The time it landed first; the plan's time beside it when it waited.
    let when = if waited_ms > 0 {
        format!(
            "at {} ms (planned {planned_ms} ms; +{waited_ms} ms waiting for a holder)",
            planned_ms + waited_ms.unsigned_abs() as u128
        )
    } else {
        format!("at {planned_ms} ms")
    };
    let what = format!("{when}: {}{target}", strike.kind.name());
    (client, what)
}

/// Whom a strike aimed at a protocol moment hits: the client that reaches
/// the moment first from the strike's planned time on, waited for as long
/// as a strike may still wait (its share of the run, at least two TTLs: an
/// earlier strike may hold every client up that long); a moment that never
/// comes is a strike not struck, with the reason.
async fn aim_at_moment(
    run: &Arc<Run>,
    strike: &Strike,
) -> Result<(usize, String, tokio::sync::oneshot::Sender<()>), String> {
    let looked_us = run.clock.elapsed_us();
    let over_by = run.config.duration * super::plan::STRIKES_OVER_BY_PERCENT as u32 / 100;
    let patience = over_by
        .saturating_sub(strike.at + strike.lasting)
        .max(run.config.ttl * 2);
    let planned_ms = strike.at.as_millis();
    let waiting = run.moments.wait_for(strike.moment);
    let Ok(Ok(offer)) = tokio::time::timeout(patience, waiting).await else {
        return Err(format!(
            "at {planned_ms} ms: {} the holder, {}: not struck, the moment did not come within {} ms",
            strike.kind.name(),
            strike.moment.describe(),
            patience.as_millis()
        ));
    };
    let waited_ms = (run.clock.elapsed_us() - looked_us) / 1_000;
    let what = format!(
        "at {} ms (planned {planned_ms} ms; +{waited_ms} ms waiting): {} w{} (the holder, {})",
        planned_ms + waited_ms.unsigned_abs() as u128,
        strike.kind.name(),
        offer.client,
        strike.moment.describe()
    );
    Ok((offer.client, what, offer.onset))
}

/// Writes in flight a stall lets go by because nothing is known yet of the
/// statements its victim's writes take.
const UNCOUNTED_WRITES_LET_GO: usize = 8;

/// The write in flight a stall takes: one of a client whose earlier writes
/// showed how many statements they take and whether they read, so the
/// stall can split it after its check — the others are let go, a few at
/// most.
async fn aim_at_a_counted_write(
    run: &Arc<Run>,
    strike: &Strike,
) -> Result<(usize, String, tokio::sync::oneshot::Sender<()>), String> {
    for _ in 0..UNCOUNTED_WRITES_LET_GO {
        let aimed = aim_at_moment(run, strike).await?;
        if run.slots[aimed.0].write_statements.load(Ordering::SeqCst) > 0 {
            return Ok(aimed);
        }
    }
    aim_at_moment(run, strike).await
}

/// Aims `strike`, lands it and marks it on the timeline (on its victim's
/// lanes, at the moment it landed) when it acted.
async fn strike_once(run: &Arc<Run>, strike: &Strike) -> Result<String, String> {
    let (client, what, onset) = if strike.moment == Moment::Clock {
        let (client, what) = aim(run, strike).await;
        (client, what, None)
    } else {
        let (client, what, onset) = if strike.kind == FaultKind::StallAfterReply {
            aim_at_a_counted_write(run, strike).await?
        } else {
            aim_at_moment(run, strike).await?
        };
        (client, what, Some(onset))
    };
    let landed_us = run.clock.elapsed_us();
    let done = land(run, strike, client, what, onset).await?;
    lock(&run.marks).push(Annotation {
        true_time_us: landed_us,
        worker: (strike.kind != FaultKind::RedisRestart).then(|| format!("w{client}")),
        text: format!("struck {done}"),
    });
    Ok(done)
}

/// Does what `strike` does to `client`; `what` names it. `onset`, when the
/// strike took a moment, is dropped as soon as the fault has begun (a
/// worker held at its grant goes on then).
async fn land(
    run: &Arc<Run>,
    strike: &Strike,
    client: usize,
    what: String,
    mut onset: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<String, String> {
    let slot = &run.slots[client];
    let signal = |name: &str| {
        let pgid = slot.pgid.load(Ordering::SeqCst);
        pgid != 0
            && std::process::Command::new("kill")
                .args([&format!("-{name}"), "--", &format!("-{pgid}")])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
    };
    match strike.kind {
        FaultKind::PauseShort | FaultKind::PauseLong => {
            let pgid = slot.pgid.load(Ordering::SeqCst) as u32;
            let already_paused = {
                let mut pauses = lock(&slot.pauses);
                if pauses.0 != pgid {
                    *pauses = (pgid, 0);
                }
                pauses.1 += 1;
                pauses.1 > 1
            };
            let resume = || {
                let mut pauses = lock(&slot.pauses);
                if pauses.0 == pgid {
                    pauses.1 = pauses.1.saturating_sub(1);
                }
                pauses.1 == 0 || pauses.0 != pgid
            };
            if !already_paused && !signal("STOP") {
                resume();
                return Err(format!("{what}: no process"));
            }
            drop(onset.take());
            if !already_paused && seen_stopped(pgid, Duration::from_secs(1)).await {
                lock(&run.process_effects).processes_stopped += 1;
            }
            tokio::time::sleep(strike.lasting).await;
            // The last pause to end resumes the process: an earlier one's
            // end must not cut a longer one short.
            if resume() {
                signal("CONT");
            }
            if already_paused {
                return Ok(format!(
                    "{what} (already paused: the pause lasts until this one ends too)"
                ));
            }
        }
        FaultKind::Kill => {
            // The worker sees its request die, records it unknown and starts
            // the next incarnation; the holder's belief (and a session lock's
            // certain hold) ends now, not when a request finds out.
            let pgid = slot.pgid.load(Ordering::SeqCst) as u32;
            if !signal("KILL") {
                return Err(format!("{what}: no process"));
            }
            drop(onset.take());
            end_incarnation(run, client, None, "killed");
            if seen_gone(pgid, Duration::from_secs(2)).await {
                lock(&run.process_effects).processes_killed += 1;
            }
        }
        FaultKind::Partition => {
            for proxy in &slot.proxies {
                proxy.set_partitioned(true);
            }
            drop(onset.take());
            tokio::time::sleep(strike.lasting).await;
            for proxy in &slot.proxies {
                proxy.set_partitioned(false);
            }
        }
        FaultKind::LoseReply => {
            for proxy in &slot.proxies {
                proxy.lose_next_reply();
            }
        }
        FaultKind::Reset => {
            for proxy in &slot.proxies {
                proxy.reset_all();
            }
        }
        FaultKind::Latency => {
            for proxy in &slot.proxies {
                proxy.set_latency(Duration::from_millis(200));
            }
            drop(onset.take());
            tokio::time::sleep(strike.lasting).await;
            for proxy in &slot.proxies {
                proxy.set_latency(Duration::ZERO);
            }
        }
        FaultKind::TerminateBackends => terminate_backends(run, slot, Backends::All, &what).await?,
        FaultKind::TerminateLockSession => {
            terminate_backends(run, slot, Backends::HoldingAdvisoryLock, &what).await?
        }
        FaultKind::StallAfterReply => {
            let in_flight = onset.take();
            stall_the_write(run, slot, strike, in_flight, &what).await?
        }
        FaultKind::RedisRestart => restart_redis(run, &what).await?,
        FaultKind::PartitionLockStore => {
            partition_lock_store(run, slot, strike.lasting, onset.take(), &what).await?
        }
        FaultKind::ClockSkew => {}
    }
    Ok(what)
}

/// Cuts `slot`'s client off from its lock store (every proxy but the work
/// store's) for `lasting`, its work store still reachable, and asks its
/// holder to work on until the heal. A client whose lock lives in its work
/// store (no connection through a lock store's proxy) is not struck.
async fn partition_lock_store(
    run: &Arc<Run>,
    slot: &Slot,
    lasting: Duration,
    onset: Option<tokio::sync::oneshot::Sender<()>>,
    what: &str,
) -> Result<(), String> {
    let lock_stores = &slot.proxies[1..];
    if lock_stores
        .iter()
        .all(|proxy| proxy.upstream_ports().is_empty())
    {
        return Err(format!(
            "{what}: not struck, the client has no connection to a lock store of its own (its lock lives in its work store)"
        ));
    }
    slot.work_until_us
        .store(run.clock.elapsed_us() + micros(lasting), Ordering::SeqCst);
    for proxy in lock_stores {
        proxy.set_partitioned(true);
    }
    drop(onset);
    tokio::time::sleep(lasting).await;
    for proxy in lock_stores {
        proxy.set_partitioned(false);
    }
    Ok(())
}

/// Arms the work store's proxy (PostgreSQL's, the first: the write in
/// flight goes there, and a lock store's would stall at whatever reply came
/// next) and waits until the stall began — or the write was answered first
/// (fewer completed statements than drawn), which is no strike.
async fn stall_the_write(
    run: &Arc<Run>,
    slot: &Slot,
    strike: &Strike,
    in_flight: Option<tokio::sync::oneshot::Sender<()>>,
    what: &str,
) -> Result<(), String> {
    let proxy = &slot.proxies[0];
    let begun_before = proxy.stalls_begun();
    // Split at one of the gaps the client's writes have: after the k-th of
    // their statements but never after the last (that would stall the next
    // request, not this one).
    let statements = slot.write_statements.load(Ordering::SeqCst);
    if statements == 1 {
        return Err(format!(
            "{what}: not struck, the client's writes are one statement each: nothing to split"
        ));
    }
    // Right after the check, when the client's writes read (a check may
    // come after a `BEGIN`, and a fence on a connection of its own gives its
    // row lock back at once); else at the drawn gap.
    let reads = slot.write_reads.load(Ordering::SeqCst) > 0;
    let replies = match u32::try_from(statements.saturating_sub(1)).unwrap_or(u32::MAX) {
        0 => strike.replies_before_stall,
        gaps => 1 + (strike.replies_before_stall - 1) % gaps,
    };
    if reads {
        proxy.stall_after_first_read(strike.lasting);
    } else {
        proxy.stall_after_replies(replies, strike.lasting);
    }
    // The worker drops the other end once the write is answered.
    let answered = || in_flight.as_ref().is_some_and(|onset| onset.is_closed());
    let begun = || proxy.stalls_begun() != begun_before;
    let deadline = tokio::time::Instant::now() + run.config.request_timeout();
    loop {
        if begun() {
            return Ok(());
        }
        let why = if answered() || !proxy.stall_armed() {
            if reads {
                "the write was answered before it read".to_string()
            } else {
                format!("the write was answered before {replies} completed statement(s)")
            }
        } else if tokio::time::Instant::now() >= deadline {
            "the write never completed a statement".to_string()
        } else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        proxy.disarm_stall();
        // It may have begun in the meantime: then it struck.
        return if begun() {
            Ok(())
        } else {
            Err(format!("{what}: not struck, {why}"))
        };
    }
}

/// Which of a client's PostgreSQL sessions a termination ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backends {
    /// Every one.
    All,
    /// Only those holding an advisory lock (`pg_locks`): the lock session.
    HoldingAdvisoryLock,
}

/// `pg_terminate_backend` of the client's PostgreSQL sessions (`which`),
/// counted once the server no longer lists them.
async fn terminate_backends(
    run: &Arc<Run>,
    slot: &Slot,
    which: Backends,
    what: &str,
) -> Result<(), String> {
    let ports: Vec<i32> = slot.proxies[0]
        .upstream_ports()
        .into_iter()
        .map(i32::from)
        .collect();
    let mut admin = sqlx::PgConnection::connect_with(
        &run.database_url
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(|error| format!("{what}: {error}"))?,
    )
    .await
    .map_err(|error| format!("{what}: {error}"))?;
    let query = match which {
        Backends::All => {
            "SELECT pid FROM pg_stat_activity \
             WHERE client_port = ANY($1) AND pid <> pg_backend_pid()"
        }
        Backends::HoldingAdvisoryLock => {
            "SELECT DISTINCT a.pid FROM pg_stat_activity a \
             JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted \
             WHERE a.client_port = ANY($1) AND a.pid <> pg_backend_pid()"
        }
    };
    let backends: Vec<i32> = sqlx::query_scalar(query)
        .bind(&ports)
        .fetch_all(&mut admin)
        .await
        .map_err(|error| format!("{what}: {error}"))?;
    if backends.is_empty() {
        return Err(match which {
            Backends::All => format!("{what}: no backend of the client"),
            Backends::HoldingAdvisoryLock => format!(
                "{what}: no session of the client holds an advisory lock (its lock lives elsewhere)"
            ),
        });
    }
    sqlx::query("SELECT pg_terminate_backend(pid) FROM unnest($1::int4[]) AS pid")
        .bind(&backends)
        .execute(&mut admin)
        .await
        .map_err(|error| format!("{what}: {error}"))?;
    // Counted once the server no longer lists them: terminated, not
    // merely asked to be (a cancelled query would leave them there).
    for _ in 0..100 {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
                .bind(&backends)
                .fetch_one(&mut admin)
                .await
                .map_err(|error| format!("{what}: {error}"))?;
        if left == 0 {
            lock(&run.process_effects).backends_terminated += backends.len() as u64;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Kills and restarts the run's Redis, counted when another process answers.
async fn restart_redis(run: &Arc<Run>, what: &str) -> Result<(), String> {
    let Some(redis) = run.redis.clone() else {
        return Err(format!("{what}: no Redis in this run"));
    };
    let (before, after) = tokio::task::spawn_blocking(move || {
        let mut server = lock(&redis);
        let before = server.pid();
        server.restart().map(|()| (before, server.pid()))
    })
    .await
    .map_err(|error| format!("{what}: {error}"))?
    .map_err(|error| format!("{what}: {error}"))?;
    if after.is_some() && after != before {
        lock(&run.process_effects).redis_restarts += 1;
    }
    Ok(())
}

use sqlx::Connection as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_pointed_at_the_proxy_keeping_credentials_and_path() {
        let proxy: std::net::SocketAddr = "127.0.0.1:4242".parse().unwrap();
        assert_eq!(
            with_address("postgres://u:p@127.0.0.1:5432/db?sslmode=disable", proxy),
            "postgres://u:p@127.0.0.1:4242/db?sslmode=disable"
        );
        assert_eq!(
            with_address("redis://:secret@127.0.0.1:6379/", proxy),
            "redis://:secret@127.0.0.1:4242/"
        );
        assert_eq!(
            with_address("redis://localhost", proxy),
            "redis://127.0.0.1:4242"
        );
        assert_eq!(
            address_of("postgres://u:p@localhost:5433/db", 5432).unwrap(),
            "127.0.0.1:5433".parse().unwrap()
        );
        assert!(address_of("postgres://u:p@10.0.0.1:5433/db", 5432).is_err());
    }

    #[test]
    fn a_refused_history_names_the_worker_whose_answer_made_it_with_or_without_a_design_line() {
        let mut history = History::default();
        let acquire = Op::Acquire {
            scope: "t".to_string(),
            owner: "w1.0".to_string(),
            ttl_us: 10,
        };
        history.push(
            "w0",
            0,
            1,
            1,
            EventKind::BeliefEnd {
                scope: "t".to_string(),
                token: 0,
                reason: "x".to_string(),
            },
        );
        history.push(
            "w1",
            2,
            2,
            2,
            EventKind::Invoke {
                op_id: 0,
                op: acquire,
            },
        );
        let backwards = OpResult::Lease {
            token: 1,
            owner: "w1.0".to_string(),
            granted_at_us: 9,
            expires_at_us: 5,
        };
        let outcome = Outcome::Ok { result: backwards };
        history.push("w1", 2, 3, 3, EventKind::Complete { op_id: 0, outcome });
        let unnamed = BTreeMap::new();
        let requests = BTreeMap::from([(0, (7, "acquire"))]);
        for design in [None, Some(CheckConfig::default())] {
            history.design = design;
            let error = refuse_malformed(&history, &unnamed)
                .unwrap_err()
                .to_string();
            assert!(error.contains("(an answer to w1 incarnation 2)"), "{error}");
            let error = refuse_malformed(&history, &requests)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("w1 incarnation 2's answer to msg_id 7, acquire)"),
                "{error}"
            );
        }
    }
}
